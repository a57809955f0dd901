//! `steadq init` and `demo`: shard counts, receipt policy, foreign entries, identities
//! damaged or missing and restored from the job headers.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use steadq::Queue;

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

#[test]
fn init_with_another_shard_count_says_it_was_not_applied() {
    let d = TempDir::new("cli-initshards");
    let q = d.path();
    assert!(steadq(&["init", p(q), "--shards", "4"]).status.success());
    // Without --shards (the systemd unit's init before every start): quiet success.
    let o = steadq(&["init", p(q)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = steadq(&["init", p(q), "--shards", "4"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = steadq(&["init", p(q), "--shards", "16"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("queue exists with 4 shards; --shards 16 was not applied"),
        "{}",
        text(&o.stderr)
    );
    assert!(o.stdout.is_empty());
    assert_eq!(Queue::open(q).unwrap().identity().shards, 4);
}

/// A fresh, empty temp directory for a demo's TMPDIR.
fn fresh_tmpdir(tag: &str) -> TempDir {
    let d = TempDir::new(tag);
    std::fs::create_dir_all(d.path()).unwrap();
    d
}

#[test]
fn demo_removes_the_queue_it_made_and_says_where_it_was() {
    let tmp = fresh_tmpdir("cli-demo");
    let o = Command::new(BIN)
        .args(["demo", "--jobs", "20"])
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", text(&o.stderr));
    assert!(
        out.contains("receipts          20 (dead-lettered: 0)"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "removed the demo queue {}/steadq-demo-",
            p(tmp.path())
        )),
        "{out}"
    );
    // The summary names the results file; the last line says it went with the queue. The
    // killed worker's job may have run again elsewhere (at-least-once): 20 lines or more.
    let (lines, results) = out
        .lines()
        .find_map(|l| l.strip_prefix("hash results      "))
        .and_then(|l| l.split_once(" lines in "))
        .unwrap_or_else(|| panic!("{out}"));
    let lines: u32 = lines.parse().unwrap();
    assert!((20..=21).contains(&lines), "{out}");
    assert!(
        out.contains(&format!(
            " and {results} (--keep, or a directory argument, keeps them)"
        )),
        "{out}"
    );
    assert!(!Path::new(results).exists());
    assert_eq!(files(tmp.path(), ""), Vec::<String>::new());
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

/// The job of a worker SIGKILLed before it streamed the payload reads no path: it exits
/// "retry later" without a stray error line in the demo's output.
#[test]
fn a_demo_job_with_no_path_is_quiet() {
    let d = TempDir::new("cli-demojob");
    std::fs::create_dir_all(d.path()).unwrap();
    let results = d.path().join("r");
    let o = Command::new(BIN)
        .arg("demo-job")
        .arg(&results)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(75));
    assert_eq!(text(&o.stderr), "");
    assert!(!results.exists());
}

#[test]
fn an_interrupted_demo_stops_its_workers_and_removes_its_queue() {
    let tmp = fresh_tmpdir("cli-demoint");
    let c = Command::new(BIN)
        .args(["demo", "--jobs", "3000"])
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let ready = |t: &Path| {
        std::fs::read_dir(t)
            .unwrap()
            .flatten()
            .any(|e| e.path().join("receipts").exists())
    };
    while !ready(tmp.path()) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the demo never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&c),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let o = c.wait_with_output().unwrap();
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("removed the demo queue"), "{out}");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

/// `init --receipts` sets a new queue's policy, and `config` changes it for the next open;
/// `init` does not silently ignore a policy an existing queue does not have.
#[test]
fn init_and_config_set_the_receipt_policy() {
    let d = TempDir::new("cfg");
    let q = d.path();
    let o = steadq(&["init", p(q), "--receipts", "header", "--evidence-keep", "2"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let ident = std::fs::read_to_string(q.join(steadq::IDENTITY_FILE)).unwrap();
    assert!(
        ident.contains("receipts=header\nevidence_max=16777216\nevidence_keep=2\n"),
        "{ident}"
    );
    assert!(
        steadq(&["init", p(q)]).status.success(),
        "init without settings is fine"
    );
    let o = steadq(&["init", p(q), "--receipts", "none"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("steadq config"),
        "{}",
        text(&o.stderr)
    );
    let o = steadq(&[
        "config",
        p(q),
        "--receipts",
        "none",
        "--evidence-max",
        "4096",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "receipts none\nevidence_max 4096\nevidence_keep 2\n"
    );
    assert_eq!(
        Queue::open(q).unwrap().receipt_policy(),
        steadq::ReceiptPolicy::None
    );
    let o = steadq(&["config", p(q), "--receipts", "all"]);
    assert_eq!(o.status.code(), Some(1), "a bad policy is a usage error");
    assert!(steadq_in(&["enqueue", p(q)], b"x").status.success());
    let o = steadq(&["work", p(q), "--once", "--", "true"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        snapshot(&q.join("receipts")).is_empty(),
        "no receipt file under none"
    );
    let ev = std::fs::read_to_string(q.join(steadq::EVIDENCE_FILE)).unwrap();
    assert_eq!(ev.lines().count(), 1);
}

/// `init` on a directory of someone's files made a queue among them (breaker finding: `steadq
/// init d` beside `data.txt` and `ready/myfile` exited 0; a typo like `steadq init /var/lib`
/// would too). It now refuses a directory that is neither a queue nor empty, naming the
/// entry, and changes nothing; a filesystem's root (`lost+found`) and an interrupted `init`
/// (SteadQ's own entries only) are still made queues.
#[test]
fn init_refuses_a_directory_of_other_files_and_changes_nothing() {
    let d = TempDir::new("cli-init-foreign");
    let dir = d.path().join("files");
    std::fs::create_dir_all(dir.join("ready/myfile")).unwrap();
    std::fs::write(dir.join("data.txt"), b"mine").unwrap();
    let before = snapshot(&dir);
    let o = steadq(&["init", p(&dir)]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        text(&o.stderr),
        format!(
            "steadq: {}: not a queue, and not empty (it holds \"data.txt\"): `init` makes a \
             queue only in a new or empty directory, or completes one whose creation was \
             interrupted; not done, nothing changed\n",
            dir.display()
        )
    );
    assert_eq!(snapshot(&dir), before);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    // `lost+found` belongs only at a filesystem's root: elsewhere it is someone's (breaker
    // finding: `lost+found/precious` was taken in).
    let not_root = d.path().join("mnt");
    std::fs::create_dir_all(not_root.join("lost+found")).unwrap();
    let o = steadq(&["init", p(&not_root)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("(it holds \"lost+found\")"));
    // At a real filesystem's root (a fresh ext4, as root) it is taken, and `fsck` passes
    // the queue (it reported `lost+found` as foreign there for ever).
    if rustix::process::geteuid().is_root() {
        match crate::filesystems::mount_ext4_with(d.path(), 16, &[]) {
            Ok(m) => {
                assert!(m.dir.join("lost+found").is_dir());
                let o = steadq(&["init", p(&m.dir)]);
                assert!(o.status.success(), "{}", text(&o.stderr));
                let o = steadq(&["fsck", p(&m.dir)]);
                assert!(o.status.success(), "{}", text(&o.stdout));
            }
            Err(e) => assert!(
                std::env::var_os("STEADQ_REQUIRE_FS").is_none(),
                "cannot mount ext4: {e}"
            ),
        }
    }
    let cut = d.path().join("cut");
    std::fs::create_dir_all(cut.join("tmp")).unwrap();
    std::fs::create_dir_all(cut.join("ready/00")).unwrap();
    assert!(steadq(&["init", p(&cut)]).status.success());
    assert!(Queue::open(&cut).unwrap().fsck().unwrap().clean());
}

/// `init` looked only at the root's entries: user files inside `ready/`, `receipts/` or
/// `tmp/` were taken in, and a directory holding only a symlink `ready -> /etc` failed
/// indeterminate (exit 4) after making `dead/`, `delayed/` and the identity file (breaker
/// finding D). It now looks one level down and refuses before making anything.
#[test]
fn init_refuses_foreign_entries_one_level_down_and_changes_nothing() {
    let d = TempDir::new("cli-init-deeper");
    type Make<'a> = &'a dyn Fn(&Path);
    let cases: [(&str, Make); 9] = [
        ("ready (not a directory)", &|q| {
            std::os::unix::fs::symlink("/etc", q.join("ready")).unwrap()
        }),
        ("ready/notes.txt", &|q| {
            std::fs::create_dir_all(q.join("ready/00")).unwrap();
            std::fs::write(q.join("ready/notes.txt"), b"mine").unwrap();
        }),
        ("receipts/0g", &|q| {
            std::fs::create_dir_all(q.join("receipts/0g")).unwrap()
        }),
        ("tmp/x", &|q| {
            std::fs::create_dir_all(q.join("tmp")).unwrap();
            std::fs::write(q.join("tmp/x"), b"mine").unwrap();
        }),
        ("dead/photos", &|q| {
            std::fs::create_dir_all(q.join("dead/photos")).unwrap()
        }),
        // Two levels down, and in the directories made on demand (breaker finding).
        ("ready/00/x", &|q| {
            std::fs::create_dir_all(q.join("ready/00")).unwrap();
            std::fs::write(q.join("ready/00/x"), b"mine").unwrap();
        }),
        ("prio/x", &|q| {
            std::fs::create_dir_all(q.join("prio")).unwrap();
            std::fs::write(q.join("prio/x"), b"mine").unwrap();
        }),
        ("keys/foo", &|q| {
            std::fs::create_dir_all(q.join("keys")).unwrap();
            std::fs::write(q.join("keys/foo"), b"mine").unwrap();
        }),
        ("delayed/0000000000000001", &|q| {
            std::fs::create_dir_all(q.join("delayed")).unwrap();
            std::fs::write(q.join("delayed/0000000000000001"), b"a file").unwrap();
        }),
    ];
    for (i, (entry, make)) in cases.iter().enumerate() {
        let q = d.path().join(format!("q{i}"));
        std::fs::create_dir_all(&q).unwrap();
        make(&q);
        let before = snapshot(&q);
        let o = steadq(&["init", p(&q)]);
        assert_eq!(o.status.code(), Some(2), "{entry}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(&format!("(it holds {entry:?})")),
            "{entry}: {}",
            text(&o.stderr)
        );
        assert_eq!(snapshot(&q), before, "{entry}");
    }
    // What a queue puts there is taken: shard and bucket directories, a temp file.
    let ok = d.path().join("ok");
    std::fs::create_dir_all(ok.join("ready/07")).unwrap();
    std::fs::create_dir_all(ok.join("dead/0000000000004e20")).unwrap();
    std::fs::create_dir_all(ok.join("tmp")).unwrap();
    std::fs::write(
        ok.join(
            "tmp/00000000000000000000000000000000.00000001.00000000000000000000000000000000.tmp",
        ),
        b"",
    )
    .unwrap();
    let o = steadq(&["init", p(&ok)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// `init --shards 4` on a queue of 8 shards whose identity file was deleted restored the
/// identity (8 shards, from ready/) and then exited 2 saying "--shards 4 was not applied":
/// exit 2 reads as nothing changed, yet the identity file had been written (breaker finding
/// F5). Now it is refused before anything is made; `init` without --shards restores it.
#[test]
fn init_with_other_shards_on_a_queue_without_identity_changes_nothing() {
    let d = TempDir::new("cli-noid-shards");
    let q = d.path().to_path_buf();
    let o = steadq(&["init", p(&q), "--shards", "8"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = text(&o.stdout).trim().to_string();
    assert!(steadq_in(&["enqueue", p(&q)], b"kept").status.success());
    std::fs::remove_file(q.join("steadq.queue")).unwrap();
    let before = snapshot(&q);
    let o = steadq(&["init", p(&q), "--shards", "4"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("ready/ holds 8 shards; --shards 4 cannot be applied")
            && err.contains("nothing changed"),
        "{err}"
    );
    assert!(!q.join("steadq.queue").exists(), "nothing made");
    assert_eq!(snapshot(&q), before);
    // The same count, or none, restores it.
    let o = steadq(&["init", p(&q), "--shards", "8"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), id);
    let o = steadq(&["claim", p(&q), "--lease", "1m"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// `init` over a damaged identity file said only "damaged identity file kept as ...": with
/// no job file left it made a new queue id without saying so, and a restored identity took
/// the receipt policy and evidence limits from the options, silently resetting what
/// `config` had set (breaker finding). Both are said now.
#[test]
fn init_over_a_damaged_identity_says_what_it_restored_and_what_it_did_not() {
    let d = TempDir::new("cli-damaged-id");
    let q = d.path();
    let o = steadq(&["init", p(q), "--receipts", "none"]);
    let old = text(&o.stdout).trim().to_string();
    assert!(steadq_in(&["enqueue", p(q)], b"a").status.success());
    // A job left: its header names the id.
    std::fs::write(q.join("steadq.queue"), b"").unwrap();
    let o = steadq(&["init", p(q)]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!("restored queue id {old} from 1 job headers"))
            && err.contains("receipt policy job, evidence log limit 16777216 bytes x 3"),
        "{err}"
    );
    assert_eq!(text(&o.stdout).trim(), old);
    // No job file left (acked, its receipt compacted): a new id, said so.
    assert!(steadq(&["work", p(q), "--once", "-q", "--", "true"])
        .status
        .success());
    assert!(steadq(&["compact", p(q), "--older-than", "0s"])
        .status
        .success());
    std::fs::write(q.join("steadq.queue"), b"").unwrap();
    let o = steadq(&["init", p(q)]);
    let err = text(&o.stderr);
    let new = text(&o.stdout).trim().to_string();
    assert_ne!(new, old);
    assert!(
        err.contains(&format!("this is a NEW queue id {new}, not the old one")),
        "{err}"
    );
}

/// Remove every empty directory under `dir` (deepest first), as `find DIR -mindepth 1 -type
/// d -empty -delete` does.
fn remove_empty_dirs(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            remove_empty_dirs(&e.path());
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// A queue whose identity file was deleted and whose empty directories a cleanup removed
/// (`find -empty -delete`) was restored with the number of `ready/` shard directories left:
/// 3 of 8, exit 0, and every job misplaced (breaker finding). The count is now what the
/// layout tells, or the one count every job name fits, or what `--shards` says when the
/// names fit it; anything else is refused with nothing changed.
#[test]
fn a_restore_with_shard_directories_missing_never_takes_a_wrong_count() {
    let d = TempDir::new("cli-noid-cleaned");
    let q = d.path().to_path_buf();
    let o = steadq(&["init", p(&q), "--shards", "8"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = text(&o.stdout).trim().to_string();
    let mut ids = Vec::new();
    for i in 0..3 {
        let o = steadq_in(&["enqueue", p(&q)], format!("job {i}").as_bytes());
        assert!(o.status.success());
        ids.push(text(&o.stdout).trim().to_string());
    }
    std::fs::remove_file(q.join("steadq.queue")).unwrap();
    remove_empty_dirs(&q);
    let left = std::fs::read_dir(q.join("ready")).unwrap().count();
    assert!(left <= 3, "{left} shard directories left");
    let before = snapshot(&q);
    // A count the job names do not fit (the highest shard directory's index: its jobs
    // cannot be in shard `n` of `n`): refused, nothing changed.
    let highest = std::fs::read_dir(q.join("ready"))
        .unwrap()
        .flatten()
        .filter_map(|e| u16::from_str_radix(&e.file_name().to_string_lossy(), 16).ok())
        .max()
        .unwrap();
    if highest > 0 {
        let o = steadq(&["init", p(&q), "--shards", &highest.to_string()]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains("nothing changed"));
        assert_eq!(snapshot(&q), before);
    }
    // Without --shards: restored with 8 (when only 8 fits the names) or refused, naming
    // the counts that fit, 8 among them; never restored with another count.
    let o = steadq(&["init", p(&q)]);
    let err = text(&o.stderr);
    match o.status.code() {
        Some(0) => assert!(err.contains("ready: 8 shards"), "{err}"),
        Some(2) => {
            assert!(
                err.contains("the shard count cannot be told") && err.contains("nothing changed"),
                "{err}"
            );
            assert!(err.contains(" 8,") || err.contains(" 8;"), "{err}");
            assert_eq!(snapshot(&q), before);
            let o = steadq(&["init", p(&q), "--shards", "8"]);
            assert!(o.status.success(), "{}", text(&o.stderr));
        }
        c => panic!("exit {c:?}: {err}"),
    }
    let o = steadq(&["status", p(&q)]);
    assert!(text(&o.stdout).contains(&id), "{}", text(&o.stdout));
    // Every job is claimable, and fsck finds nothing misplaced.
    let mut claimed = Vec::new();
    for _ in 0..3 {
        let o = steadq(&["claim", p(&q), "--lease", "1m"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let h = text(&o.stdout).trim().to_string();
        claimed.push(h[..32].to_string());
    }
    claimed.sort();
    ids.sort();
    assert_eq!(claimed, ids);
    let o = steadq(&["fsck", p(&q)]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
}

/// A restore read the job headers of `ready/`, `receipts/`, `delayed/` and `dead/` only: a
/// queue holding only priority jobs (`prio/<l>/<ss>`) whose identity file was deleted got a
/// new queue id, its jobs left with the old one, and a queue with some said "from 5 job
/// headers" of 6 (breaker finding).
#[test]
fn a_restore_reads_the_headers_of_priority_jobs_too() {
    let d = TempDir::new("cli-noid-prio");
    let q = d.path().to_path_buf();
    let o = steadq(&["init", p(&q)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let id = text(&o.stdout).trim().to_string();
    let o = steadq_in(&["enqueue", p(&q), "--priority", "6"], b"urgent");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let job = text(&o.stdout).trim().to_string();
    std::fs::remove_file(q.join("steadq.queue")).unwrap();
    let o = steadq(&["init", p(&q)]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(text(&o.stdout).trim(), id, "{err}");
    assert!(err.contains("from 1 job headers"), "{err}");
    let o = steadq(&["claim", p(&q), "--lease", "1m"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with(&job));
}

/// A `--receipts none` queue whose jobs were all acked keeps no job file: with its
/// identity file deleted, `init` made a new queue id without a word (it said so only for a
/// damaged file). It says so now; a directory never a queue gets its id quietly.
#[test]
fn a_new_id_for_a_queue_whose_identity_is_missing_is_said() {
    let d = TempDir::new("cli-noid-none");
    let q = d.path().to_path_buf();
    let o = steadq(&["init", p(&q), "--receipts", "none"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let old = text(&o.stdout).trim().to_string();
    assert!(steadq_in(&["enqueue", p(&q)], b"x").status.success());
    let o = steadq(&["work", p(&q), "--once", "-q", "--", "true"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::remove_file(q.join("steadq.queue")).unwrap();
    let o = steadq(&["init", p(&q)]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let new = text(&o.stdout).trim().to_string();
    assert_ne!(new, old);
    assert!(
        err.contains(&format!(
            "identity file steadq.queue was missing and no job file names a queue id: this is a NEW queue id {new}"
        )),
        "{err}"
    );
    let fresh = TempDir::new("cli-fresh-quiet");
    let o = steadq(&["init", p(fresh.path())]);
    assert!(o.status.success());
    assert!(
        !text(&o.stderr).contains("NEW queue id"),
        "{}",
        text(&o.stderr)
    );
}

/// A queue with no job file whose identity file was deleted got a new id (said so) but
/// also the default 8 shards, whatever its layout held: a 16-shard queue's `ready/08`..`0f`
/// were then foreign to fsck (breaker finding). The layout's count is kept when it tells.
#[test]
fn a_new_id_for_an_empty_queue_keeps_the_shard_count_its_layout_tells() {
    let d = TempDir::new("cli-noid-empty16");
    let q = d.path().to_path_buf();
    assert!(steadq(&["init", p(&q), "--shards", "16"]).status.success());
    std::fs::remove_file(q.join("steadq.queue")).unwrap();
    let o = steadq(&["init", p(&q)]);
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("ready: 16 shards"), "{err}");
    let o = steadq(&["fsck", p(&q)]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
}
