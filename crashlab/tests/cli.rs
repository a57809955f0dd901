//! Tests of the crashlab binaries that need neither root nor a VM: the placeholder verifier's
//! rules on hand-made directory trees, and `replay apply`/`replay dump` on synthetic logs.

use crashlab::logwrites::{LogBuilder, FLUSH};
use crashlab::marks::{write_marks, Mark};
use crashlab::placeholder::{job_content, job_id};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

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

fn queue(root: &Path) {
    for d in ["q/tmp", "q/new", "q/cur"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
}

fn put(root: &Path, dir: &str, j: u64) {
    let id = job_id(j);
    fs::write(root.join("q").join(dir).join(&id), job_content(&id, 65536)).unwrap();
}

/// Runs crashlab-verify with marks given as (op, job) pairs after `setup`; returns the exit code.
fn verify(t: &Tmp, ops: &[(&str, u64)]) -> (i32, String) {
    let mut marks = vec![Mark::new(0, "setup", "")];
    for (i, (op, j)) in ops.iter().enumerate() {
        marks.push(Mark::new(i as u64 + 1, op, &job_id(*j)));
    }
    let mf = t.0.join("marks");
    write_marks(&mf, &marks).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_crashlab-verify"))
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
    let mnt = t.0.join("mnt");
    queue(&mnt);
    assert_eq!(verify(&t, &[]).0, 0);
    put(&mnt, "new", 0); // enqueue of j0 in flight and already on disk
    assert_eq!(verify(&t, &[]).0, 0);
    assert_eq!(verify(&t, &[("enqueue", 0)]).0, 0);
    fs::rename(mnt.join("q/new/j00000"), mnt.join("q/cur/j00000")).unwrap();
    assert_eq!(verify(&t, &[("enqueue", 0)]).0, 0, "claim in flight");
    assert_eq!(verify(&t, &[("enqueue", 0), ("claim", 0)]).0, 0);
    fs::remove_file(mnt.join("q/cur/j00000")).unwrap();
    assert_eq!(
        verify(&t, &[("enqueue", 0), ("claim", 0)]).0,
        0,
        "ack in flight"
    );
    assert_eq!(verify(&t, &[("enqueue", 0), ("claim", 0), ("ack", 0)]).0, 0);
    fs::write(mnt.join("q/tmp/j00001"), b"partial garbage").unwrap();
    assert_eq!(
        verify(&t, &[("enqueue", 0), ("claim", 0), ("ack", 0)]).0,
        0,
        "tmp/ ignored"
    );
}

#[test]
fn verifier_flags_violations() {
    let t = Tmp::new("bad");
    let mnt = t.0.join("mnt");
    queue(&mnt);
    // durable enqueue lost
    let (rc, out) = verify(&t, &[("enqueue", 0)]);
    assert_eq!(rc, 1);
    assert!(
        out.contains("j00000: marked New (durable) but found absent"),
        "{out}"
    );
    // zero-length file published (the missing-fsync bug)
    fs::write(mnt.join("q/new/j00000"), b"").unwrap();
    let (rc, out) = verify(&t, &[("enqueue", 0)]);
    assert_eq!(rc, 1);
    assert!(out.contains("bad content: empty file"), "{out}");
    // truncated content
    let c = job_content("j00000", 65536);
    fs::write(mnt.join("q/new/j00000"), &c[..c.len() / 2]).unwrap();
    assert_eq!(verify(&t, &[("enqueue", 0)]).0, 1);
    put(&mnt, "new", 0);
    assert_eq!(verify(&t, &[("enqueue", 0)]).0, 0);
    // in two places at once
    put(&mnt, "cur", 0);
    let (rc, out) = verify(&t, &[("enqueue", 0)]);
    assert_eq!(rc, 1);
    assert!(out.contains("in both"), "{out}");
    fs::remove_file(mnt.join("q/cur/j00000")).unwrap();
    // acked job reappears
    assert_eq!(verify(&t, &[("enqueue", 0), ("claim", 0), ("ack", 0)]).0, 1);
    // two jobs ahead of their marks
    put(&mnt, "new", 1);
    let (rc, out) = verify(&t, &[]);
    assert_eq!(rc, 1);
    assert!(out.contains("2 jobs ahead"), "{out}");
    // unmarked job already claimed: two steps ahead
    fs::remove_file(mnt.join("q/new/j00000")).unwrap();
    fs::rename(mnt.join("q/new/j00001"), mnt.join("q/cur/j00001")).unwrap();
    assert_eq!(verify(&t, &[]).0, 1);
    fs::remove_file(mnt.join("q/cur/j00001")).unwrap();
    // a stranger in the queue
    fs::write(mnt.join("q/new/zzz"), b"x").unwrap();
    assert_eq!(verify(&t, &[]).0, 1);
    fs::remove_file(mnt.join("q/new/zzz")).unwrap();
    // queue directory gone after setup was durable
    fs::remove_dir(mnt.join("q/cur")).unwrap();
    assert_eq!(verify(&t, &[]).0, 1);
}

#[test]
fn verifier_rejects_inconsistent_marks_as_internal_error() {
    let t = Tmp::new("marks");
    queue(&t.0.join("mnt"));
    assert_eq!(verify(&t, &[("claim", 0)]).0, 2, "claim before enqueue");
    assert_eq!(verify(&t, &[("frobnicate", 0)]).0, 2, "unknown op");
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
