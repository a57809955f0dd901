//! Tests of the crashlab binaries that need neither root nor a VM: `steadq-verify` on queues
//! changed by hand (each rule kept, then broken), and `replay apply`/`replay dump` on synthetic
//! logs, and the usage errors of both.

use crashlab::logwrites::{LogBuilder, FLUSH};
use crashlab::marks::{write_marks, Mark};
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use steadq::{Options, Queue, State};

struct Tmp(PathBuf);
impl Tmp {
    fn new(name: &str) -> Tmp {
        let p = std::env::temp_dir().join(format!("crashlab-cli-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A SteadQ queue at `<t>/mnt/q` after a few operations, and the marks of those that returned
/// done: two jobs enqueued, the first claimed and acked, the second claimed and nacked.
fn queue_with_marks(t: &Tmp) -> (Queue, Vec<Mark>) {
    fs::create_dir_all(t.0.join("mnt")).unwrap();
    let q = Queue::create(t.0.join("mnt/q"), Options::default()).unwrap();
    let mut marks = Vec::new();
    let mut mark = |op: &str, arg: String| marks.push(Mark::new(marks.len() as u64, op, &arg));
    let a = q.enqueue(b"first job").unwrap();
    mark("enq", a.to_string());
    let b = q.enqueue(&[7u8; 10_000]).unwrap();
    mark("enq", b.to_string());
    for settle_by_ack in [true, false] {
        let l = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(600)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        let id = l.id().to_string();
        mark("claim", format!("{id} {}", l.attempt()));
        if settle_by_ack {
            l.ack().unwrap();
            mark("ack", id);
        } else {
            l.nack(Duration::ZERO).unwrap();
            mark("nack", id);
        }
    }
    (q, marks)
}

/// The one job file in `state`, as a path.
fn job_file(q: &Queue, state: State) -> PathBuf {
    let ls = q.list(Some(state)).unwrap();
    assert_eq!(ls.len(), 1, "{ls:?}");
    q.root().join(ls[0].rel_path(q.id()))
}

/// Runs steadq-verify on `<t>/mnt` with `marks`; returns its exit code and stdout.
fn verify(t: &Tmp, marks: &[Mark]) -> (i32, String) {
    let mf = t.0.join("marks");
    write_marks(&mf, marks).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_steadq-verify"))
        .arg("--marks")
        .arg(&mf)
        .arg(t.0.join("mnt"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn verifier_accepts_consistent_states() {
    let t = Tmp::new("ok");
    fs::create_dir_all(t.0.join("mnt")).unwrap();
    assert_eq!(verify(&t, &[]).0, 0, "no queue yet, nothing marked");
    let (_q, marks) = queue_with_marks(&t);
    assert_eq!(verify(&t, &marks).0, 0);
    // Any prefix of the marks: the later operations were in flight, and happened.
    for n in 0..marks.len() {
        assert_eq!(verify(&t, &marks[..n]).0, 0, "first {n} marks");
    }
}

#[test]
fn verifier_flags_a_lost_enqueue() {
    let t = Tmp::new("lost");
    let (q, marks) = queue_with_marks(&t);
    fs::remove_file(job_file(&q, State::Ready)).unwrap();
    let (rc, out) = verify(&t, &marks);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("returned done, but the job is gone"), "{out}");
}

#[test]
fn verifier_flags_a_torn_job_file() {
    let t = Tmp::new("torn");
    let (q, marks) = queue_with_marks(&t);
    let p = job_file(&q, State::Ready);
    let len = fs::metadata(&p).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (rc, out) = verify(&t, &marks);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("VIOLATION"), "{out}");
}

#[test]
fn verifier_flags_a_job_in_two_states() {
    let t = Tmp::new("two");
    let (q, marks) = queue_with_marks(&t);
    let ready = job_file(&q, State::Ready);
    let shard = ready.parent().unwrap().to_path_buf();
    let other = fs::read_dir(q.root().join("ready"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|d| *d != shard)
        .unwrap();
    fs::copy(&ready, other.join(ready.file_name().unwrap())).unwrap();
    let (rc, out) = verify(&t, &marks);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("VIOLATION"), "{out}");
}

#[test]
fn verifier_flags_an_ack_undone() {
    let t = Tmp::new("unack");
    let (q, marks) = queue_with_marks(&t);
    fs::remove_file(job_file(&q, State::Acked)).unwrap();
    let (rc, out) = verify(&t, &marks);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("ack of"), "{out}");
}

#[test]
fn verifier_flags_a_missing_queue_after_a_done_enqueue() {
    let t = Tmp::new("noq");
    let (_q, marks) = queue_with_marks(&t);
    fs::remove_dir_all(t.0.join("mnt/q")).unwrap();
    fs::create_dir_all(t.0.join("mnt")).unwrap();
    let (rc, out) = verify(&t, &marks);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("no queue at"), "{out}");
}

#[test]
fn verifier_failures_and_usage_errors_are_not_verdicts() {
    let t = Tmp::new("usage");
    let (_q, _) = queue_with_marks(&t);
    // A mark that names no job: the marks are broken, not the state (2, which aborts a replay).
    assert_eq!(verify(&t, &[Mark::new(0, "enq", "nonsense")]).0, 2);
    let bin = env!("CARGO_BIN_EXE_steadq-verify");
    let code = |args: &[&str]| Command::new(bin).args(args).output().unwrap().status.code();
    assert_eq!(code(&["/nonexistent"]), Some(2), "no --marks");
    assert_eq!(code(&["--marks", "/nonexistent/marks", "/tmp"]), Some(2));
    assert_eq!(code(&["--help"]), Some(0));
}

#[test]
fn replay_usage_errors_exit_2() {
    let replay = env!("CARGO_BIN_EXE_replay");
    let code = |args: &[&str]| {
        Command::new(replay)
            .args(args)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(code(&[]), Some(2), "no subcommand");
    assert_eq!(code(&["frob"]), Some(2));
    assert_eq!(
        code(&["check", "--base", "b", "--log", "l", "--check", "true"]),
        Some(2),
        "no --fs"
    );
    assert_eq!(code(&["dump", "--log", "l", "--markbase", "lots"]), Some(2));
    assert_eq!(code(&["check", "--help"]), Some(0));
}

#[test]
fn replay_apply_and_dump_on_a_synthetic_log() {
    let t = Tmp::new("replay");
    let base = t.0.join("base.img");
    fs::write(&base, vec![0u8; 64 * 1024]).unwrap();
    let markbase = 32 * 1024u64;
    let mut lb = LogBuilder::new(512);
    lb.write(2, &[0x5a; 1024], 0)
        .flush()
        .write(
            markbase / 512,
            &Mark::new(0, "enqueue", "j00000").encode_block(),
            0,
        )
        .discard(3, 1)
        .mark("hello world")
        .write(0, &[1; 512], FLUSH);
    let log = t.0.join("log.bin");
    fs::write(&log, lb.build(None)).unwrap();
    let out_img = t.0.join("out.img");
    let replay = env!("CARGO_BIN_EXE_replay");
    let o = Command::new(replay)
        .args(["apply", "--base"])
        .arg(&base)
        .arg("--log")
        .arg(&log)
        .arg("--out")
        .arg(&out_img)
        .arg(format!("--markbase={markbase}"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("marks=2"));
    let img = fs::read(&out_img).unwrap();
    assert_eq!(img.len(), 64 * 1024);
    assert!(img[..512].iter().all(|&b| b == 1));
    assert!(img[1024..1536].iter().all(|&b| b == 0x5a));
    assert!(img[1536..2048].iter().all(|&b| b == 0), "discarded");
    assert!(
        img[markbase as usize..].iter().all(|&b| b == 0),
        "mark not applied"
    );

    let o = Command::new(replay)
        .args(["dump", "--markbase", "32K", "--log"])
        .arg(&log)
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(s.contains("nr_entries=6 sectorsize=512"), "{s}");
    assert!(s.contains("inband-mark=\"0 enqueue j00000\""), "{s}");
    assert!(s.contains("flags=MARK mark=\"hello world\""), "{s}");
    assert!(s.contains("flags=DISCARD"), "{s}");

    // a corrupt log is a rig error (3), not a silent short replay
    let mut bytes = fs::read(&log).unwrap();
    bytes.truncate(bytes.len() - 100);
    fs::write(&log, bytes).unwrap();
    let o = Command::new(replay)
        .args(["dump", "--log"])
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
}

/// The kill soak's stop points come from the seed: two runs with the same seed stop every
/// process at the same call (kind and N). A worker's call count before it gets there depends on
/// the interleaving of the processes, so only the stop points are compared.
#[test]
fn soak_stops_at_the_same_calls_for_the_same_seed() {
    let t = Tmp::new("soak");
    let run = |n: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_soak"))
            .args(["--cycles", "2", "--seed", "7", "--dir"])
            .arg(t.0.join(n))
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(o.status.code(), Some(0), "{out}");
        let stops: Vec<String> = out
            .lines()
            .filter_map(|l| l.split_once(" stops: "))
            .flat_map(|(_, s)| {
                s.split("; ")
                    .map(|p| p.split(" [").next().unwrap().to_string())
            })
            .collect();
        assert_eq!(stops.len(), 8, "{out}");
        stops
    };
    let (a, b) = (run("a"), run("b"));
    let producers = |v: &[String]| -> Vec<String> {
        v.iter().filter(|s| s.starts_with('p')).cloned().collect()
    };
    assert_eq!(producers(&a), producers(&b));
    // A worker stops at its planned call unless its backstop came first, which the
    // interleaving decides; with seed 7 neither does.
    assert!(a.iter().all(|s| !s.contains("backstop")), "{a:?}");
    assert_eq!(a, b);
}
