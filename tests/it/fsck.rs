//! fsck and show: misplaced jobs, stale copies, quarantine, damaged limits and keys,
//! receipts, and jobs too large to hold in memory.

use crate::common::*;
use std::process::{Command, Stdio};
use steadq::{EnqueueOptions, Options, Queue};

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

/// A job whose name says level 5 sitting in level 2's directory, and one in the wrong shard,
/// are reported as misplaced (where they are and where they belong); `fsck --quarantine` moves
/// them to `quarantine/`, never back into the queue (a first fix moved them "home": a second
/// trial then had an acked job run three times, its stale copies brought back one per pass on
/// a queue with receipt policy `none`, where no receipt shows the job was done).
#[test]
fn fsck_reports_a_misplaced_job_and_never_moves_it_back_into_the_queue() {
    let d = TempDir::new("misplaced");
    let qs = d.path().to_str().unwrap();
    assert!(run(&["init", qs, "--shards", "2"]).status.success());
    let enqueue = |prio: &str| {
        let out = steadq_in(&["enqueue", qs, "--priority", prio], prio.as_bytes());
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let (five, three) = (enqueue("5"), enqueue("3"));
    let find = |id: &str| {
        let f = files(d.path(), "").into_iter().find(|f| f.contains(id));
        f.unwrap()
    };
    let (at5, at3) = (find(&five), find(&three));
    let (home5, home3) = (at5.rsplit_once('/').unwrap(), at3.rsplit_once('/').unwrap());
    let wrong5 = format!("prio/2/{}", &home5.0[7..]);
    // Level 2 was used before (its directories are made by its first job).
    std::fs::create_dir_all(d.path().join(&wrong5)).unwrap();
    let other = if home3.0.ends_with("00") { "01" } else { "00" };
    let wrong3 = format!("ready/{other}");
    std::fs::rename(d.path().join(&at5), d.path().join(&wrong5).join(home5.1)).unwrap();
    std::fs::rename(d.path().join(&at3), d.path().join(&wrong3).join(home3.1)).unwrap();
    let st = Queue::open(d.path()).unwrap().status().unwrap();
    assert_eq!((st.ready, st.foreign), (0, 2));

    let out = run(&["fsck", qs]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{text}");
    for (wrong, (home, name)) in [(&wrong5, home5), (&wrong3, home3)] {
        let line = format!("{wrong}/{name}: misplaced: its name belongs in {home}/ (fsck never");
        assert!(text.contains(&line), "{text}");
    }
    let out = run(&["fsck", qs, "--quarantine"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for (wrong, (_, name)) in [(&wrong5, home5), (&wrong3, home3)] {
        assert!(text.contains("(moved to quarantine/)"), "{text}");
        let kept = d.path().join("quarantine").join(wrong).join(name);
        assert!(kept.exists(), "{} missing: {text}", kept.display());
    }
    assert!(!d.path().join(&at5).exists() && !d.path().join(&at3).exists());
    assert_eq!(run(&["fsck", qs]).status.code(), Some(0));
    assert!(Queue::open(d.path()).unwrap().claim().unwrap().is_none());
}

/// The second trial's case: receipt policy `none`, a job acked, its stale copies left in
/// `ready/` (the shard parent), `tmp/` and the wrong shard. No pass of `fsck --quarantine`
/// makes the job claimable again.
#[test]
fn stale_copies_of_an_acked_job_never_run_again_after_fsck() {
    let d = TempDir::new("stale-copies");
    let qs = d.path().to_str().unwrap();
    assert!(run(&["init", qs, "--shards", "2", "--receipts", "none"])
        .status
        .success());
    assert!(steadq_in(&["enqueue", qs], b"hello").status.success());
    let job = files(d.path(), "ready").pop().unwrap();
    let (home, name) = job.rsplit_once('/').unwrap();
    let other = if home.ends_with("00") {
        "ready/01"
    } else {
        "ready/00"
    };
    for copy in ["ready", "tmp", other] {
        std::fs::copy(d.path().join(&job), d.path().join(copy).join(name)).unwrap();
    }
    let q = Queue::open(d.path()).unwrap();
    q.claim().unwrap().unwrap().ack().unwrap();
    for pass in 0..3 {
        let out = run(&["fsck", qs, "--quarantine"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            matches!(out.status.code(), Some(0 | 5)),
            "pass {pass}: {text}"
        );
        assert!(
            q.claim().unwrap().is_none(),
            "pass {pass}: the acked job is back: {text}"
        );
    }
}

/// `fsck --quarantine` exits 0 when it moved every problem it found and says what it moved;
/// 5 only when problems are left (found by a fresh-user trial: it exited 5 after moving
/// everything, so a cron job could not tell "repaired" from "still broken").
#[test]
fn fsck_quarantine_exits_0_once_every_problem_is_moved() {
    let d = TempDir::new("quarantine-exit");
    let qs = d.path().to_str().unwrap();
    assert!(run(&["init", qs, "--shards", "1"]).status.success());
    std::fs::write(d.path().join("ready/00/notes.txt"), b"junk").unwrap();
    std::fs::create_dir_all(d.path().join("prio/6/00")).unwrap(); // level 6 used before
    std::fs::write(d.path().join("prio/6/00/x.sqj"), b"junk").unwrap();
    let out = run(&["fsck", qs, "--quarantine"]);
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{text}{err}");
    assert!(
        text.contains("ready/00/notes.txt: foreign: not a SteadQ job name (moved to quarantine/)"),
        "{text}"
    );
    assert!(
        text.contains("prio/6/00/x.sqj: foreign: not a SteadQ job name (moved to quarantine/)"),
        "{text}"
    );
    assert!(
        err.contains(", 2 problems, 2 dealt with (moved to quarantine/"),
        "{err}"
    );
    assert!(err.contains("), 0 left"), "{err}");
    assert!(d.path().join("quarantine/ready/00/notes.txt").exists());
    assert_eq!(run(&["fsck", qs]).status.code(), Some(0));
    // A copy of a job in another level's directory is a duplicate of the job, never moved
    // home: left, exit 5.
    let q = Queue::open(d.path()).unwrap();
    q.enqueue(b"job").unwrap();
    let l = &q.list(None).unwrap()[0];
    let name = l.name.format(q.id()).to_string();
    std::fs::create_dir_all(d.path().join("prio/1/00")).unwrap(); // level 1 used before
    std::fs::copy(
        d.path().join(l.rel_path(q.id())),
        d.path().join("prio/1/00").join(&name),
    )
    .unwrap();
    std::fs::write(d.path().join("ready/00/more.txt"), b"junk").unwrap();
    let out = run(&["fsck", qs, "--quarantine"]);
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(5), "{text}{err}");
    assert!(
        text.contains(&format!(
            "prio/1/00/{name}: the same job id is also at ready/00/{name}\n"
        )),
        "{text}"
    );
    assert!(err.contains(", 2 problems, 1 dealt with"), "{err}");
    assert!(err.contains("), 1 left"), "{err}");
}

/// A stale copy of a job in the wrong shard, whose original was then acked: `fsck
/// --quarantine` reports the copy as a duplicate of the receipt and leaves it, so the acked
/// job is never run again (found by a fresh-user trial: the copy was "misplaced", moved home,
/// exit 0, and the next claim ran the acked job a second time).
#[test]
fn fsck_never_moves_home_a_misplaced_copy_of_a_job_that_exists_elsewhere() {
    let d = TempDir::new("misplaced-dup");
    let qs = d.path().to_str().unwrap();
    assert!(run(&["init", qs, "--shards", "8"]).status.success());
    let q = Queue::open(d.path()).unwrap();
    let o = EnqueueOptions {
        priority: Some(5),
        ..EnqueueOptions::default()
    };
    let id = q.enqueue_with(b"once", &o).unwrap().id();
    let l = q.find(id).unwrap();
    let name = l.name.format(q.id()).to_string();
    let shard = &l.dir[l.dir.len() - 2..];
    let other = if shard == "07" { "02" } else { "07" };
    let copy = format!("prio/5/{other}/{name}");
    std::fs::create_dir_all(d.path().join(format!("prio/5/{other}"))).unwrap();
    std::fs::copy(d.path().join(l.rel_path(q.id())), d.path().join(&copy)).unwrap();
    let lease = q.claim().unwrap().unwrap();
    assert_eq!(lease.id(), id);
    lease.ack().unwrap();
    let receipt = q.find(id).unwrap().rel_path(q.id());
    assert!(receipt.starts_with("receipts/"), "{receipt}");

    let out = run(&["fsck", qs, "--quarantine"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{text}");
    assert_eq!(
        text,
        format!("{copy}: the same job id is also at {receipt}\n")
    );
    assert!(d.path().join(&copy).exists());
    assert!(!d.path().join(l.rel_path(q.id())).exists());
    // Nothing to claim: the acked job is not run again.
    let q = Queue::open(d.path()).unwrap();
    assert!(q.claim().unwrap().is_none());

    // A misplaced job whose id is unique is quarantined too, never moved into the queue.
    std::fs::remove_file(d.path().join(&copy)).unwrap();
    let id2 = q.enqueue_with(b"twice", &o).unwrap().id();
    let l2 = q.find(id2).unwrap();
    let s2 = &l2.dir[l2.dir.len() - 2..];
    let o2 = if s2 == "07" { "02" } else { "07" };
    let name2 = l2.name.format(q.id()).to_string();
    let moved = format!("prio/5/{o2}/{name2}");
    std::fs::create_dir_all(d.path().join(format!("prio/5/{o2}"))).unwrap();
    std::fs::rename(d.path().join(l2.rel_path(q.id())), d.path().join(&moved)).unwrap();
    let out = run(&["fsck", qs, "--quarantine"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with(&format!(
            "{moved}: misplaced: its name belongs in {}/",
            l2.dir
        )) && text.ends_with("(moved to quarantine/)\n"),
        "{text}"
    );
    assert!(d.path().join("quarantine").join(&moved).exists());
    assert!(q.claim().unwrap().is_none());
}

/// A directory planted where no directory belongs, holding a job (prio/3, level 3 living in
/// ready/), and a job file moved into tmp/: `fsck --quarantine` leaves the directory and
/// reports how many jobs it holds (exit 5), moves the tmp/ job home, and quarantines only an
/// empty planted directory, naming it a directory (found by a fresh-user trial: both were
/// "foreign: job name of the wrong kind" and moved to quarantine/, the jobs gone from status).
#[test]
fn fsck_never_quarantines_a_directory_holding_jobs() {
    let d = TempDir::new("dir-with-jobs");
    let qs = d.path().to_str().unwrap();
    assert!(run(&["init", qs, "--shards", "1"]).status.success());
    let q = Queue::open(d.path()).unwrap();
    let ids: Vec<_> = (0..3).map(|i| q.enqueue(&[i]).unwrap()).collect();
    let names: Vec<String> = ids
        .iter()
        .map(|&id| q.find(id).unwrap().name.format(q.id()).to_string())
        .collect();
    std::fs::create_dir_all(d.path().join("prio/3/00")).unwrap();
    let planted = d.path().join("prio/3/00").join(&names[0]);
    std::fs::rename(d.path().join("ready/00").join(&names[0]), &planted).unwrap();
    std::fs::rename(
        d.path().join("ready/00").join(&names[1]),
        d.path().join("tmp").join(&names[1]),
    )
    .unwrap();
    std::fs::create_dir(d.path().join("ready/junk")).unwrap();
    assert_eq!(q.status().unwrap().ready, 1);

    let out = run(&["fsck", qs, "--quarantine"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{text}");
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "prio/3: foreign: directory holding 1 job file of this queue, left in place \
             (move each job to where its name belongs)"
                .to_string(),
            "ready/junk: foreign: directory (moved to quarantine/)".to_string(),
            format!(
                "tmp/{}: misplaced: its name belongs in ready/00/ (fsck never moves it there: \
                 a copy of a job settled since would run again; move it by hand if it is the \
                 only one) (moved to quarantine/)",
                names[1]
            ),
        ]
    );
    assert!(planted.exists());
    assert!(d.path().join("quarantine/ready/junk").is_dir());
    // The job from tmp/ is in quarantine/tmp/, out of the queue.
    assert_eq!(q.status().unwrap().ready, 1);
    // Moved home by hand, the job is back and the emptied directory is quarantined.
    std::fs::rename(&planted, d.path().join("ready/00").join(&names[0])).unwrap();
    let out = run(&["fsck", qs, "--quarantine"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(text, "prio/3: foreign: directory (moved to quarantine/)\n");
    assert_eq!(q.status().unwrap().ready, 2);
    // At the root (say `prio/` on a version-2 queue) too: named a directory holding a job.
    std::fs::create_dir(d.path().join("old")).unwrap();
    std::fs::copy(
        d.path().join("ready/00").join(&names[2]),
        d.path().join("old").join(&names[2]),
    )
    .unwrap();
    let out = run(&["fsck", qs, "--quarantine"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{text}");
    assert_eq!(
        text,
        "old: foreign: directory holding 1 job file of this queue, left in place \
         (move each job to where its name belongs)\n"
    );
}

/// `fsck`, `show` and `show --raw` of a 64 MiB job stay in flat memory: the file is verified
/// in 64 KiB chunks and the payload streamed (found by a fresh-user trial: a 100 MiB job
/// made fsck and show peak at 105 MB RSS, where `work` used 2.7 MB).
#[test]
#[ignore = "slow tier: 64 MiB jobs through fsck and show, peak memory measured (~30 s)"]
fn fsck_and_show_of_a_64_mib_job_stay_in_flat_memory() {
    use crate::enqueue_stream::{run_polled, run_polled_out};
    let d = TempDir::new("fsck-rss");
    let o = Options {
        max_payload: 128 << 20,
        ..Options::default()
    };
    let q = Queue::create(d.path(), o).unwrap();
    let data: Vec<u8> = (0..64u32 << 20).map(|i| b'a' + (i % 23) as u8).collect();
    let id = q.enqueue(&data).unwrap().to_string();
    let qs = d.path().to_str().unwrap();
    let (code, out, err, fsck_kib, polls) = run_polled(&["fsck", qs], None);
    eprintln!("fsck VmHWM {fsck_kib} KiB");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(polls > 0);
    assert!(err.contains(", 1 job file verified,"), "{err}");
    let (code, out, err, show_kib, _) = run_polled(&["show", qs, &id], None);
    eprintln!("show VmHWM {show_kib} KiB");
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\nbytes     67108864\n"), "{out}");
    assert!(
        out.contains("\npayload   (67108864 bytes of text; --raw prints it)\n"),
        "{out}"
    );
    let raw = d.path().with_extension("raw");
    let to = Stdio::from(std::fs::File::create(&raw).unwrap());
    let (code, _, err, raw_kib, _) = run_polled_out(&["show", qs, &id, "--raw"], None, to);
    assert_eq!(code, Some(0), "{err}");
    let out = std::fs::read(&raw).unwrap();
    let _ = std::fs::remove_file(&raw);
    assert!(out == data, "--raw: {} bytes", out.len());
    eprintln!("VmHWM KiB: fsck {fsck_kib}, show {show_kib}, show --raw {raw_kib}");
    assert!(
        fsck_kib < rss_bound_kib(16 * 1024),
        "fsck: VmHWM {fsck_kib} KiB"
    );
    assert!(
        show_kib < rss_bound_kib(16 * 1024),
        "show: VmHWM {show_kib} KiB"
    );
    assert!(
        raw_kib < rss_bound_kib(16 * 1024),
        "show --raw: VmHWM {raw_kib} KiB"
    );
}

/// fsck reports what made it say "0 problems" on a broken queue (found by a fresh-user
/// trial): a damaged `steadq.limits` (every enqueue fails; reported, and moved to
/// `quarantine/` by `--quarantine`), junk in
/// `keys/` (quarantined on request) and two receipts of one job id, in one receipt shard
/// or in two.
#[test]
fn fsck_reports_damaged_limits_junk_keys_and_two_receipts_of_one_job() {
    let d = TempDir::new("fsck-limits-keys");
    let qs = d.path().to_str().unwrap();
    assert!(run(&["init", qs, "--shards", "2"]).status.success());
    let q = Queue::open(d.path()).unwrap();
    let o = EnqueueOptions {
        key: Some(steadq::Key::new("order-1").unwrap()),
        ..EnqueueOptions::default()
    };
    q.enqueue_with(b"k", &o).unwrap().id();
    std::fs::write(d.path().join("keys/notes.txt"), b"junk").unwrap();
    // One job acked twice: a copy of its ready file put back after the first ack.
    let id = q.enqueue(b"twice").unwrap();
    let l = q.find(id).unwrap();
    let file = d.path().join(l.rel_path(q.id()));
    let copy = std::fs::read(&file).unwrap();
    for _ in 0..2 {
        let lease = loop {
            let x = q.claim().unwrap().unwrap();
            if x.id() == id {
                break x;
            }
            x.ack().unwrap();
        };
        lease.ack().unwrap();
        if !file.exists() {
            std::fs::write(&file, &copy).unwrap();
        }
    }
    std::fs::remove_file(&file).unwrap();
    let rcts: Vec<String> = files(d.path(), "receipts")
        .into_iter()
        .filter(|f| f.contains(&id.to_string()))
        .collect();
    assert_eq!(rcts.len(), 2, "{rcts:?}");
    // And a copy of one in the other receipt shard.
    let (shard, name) = rcts[0].rsplit_once('/').unwrap();
    let other = if shard.ends_with("00") { "01" } else { "00" };
    let moved = format!("receipts/{other}/{name}");
    std::fs::copy(d.path().join(&rcts[0]), d.path().join(&moved)).unwrap();
    // Every enqueue fails from here on.
    std::fs::write(d.path().join("steadq.limits"), b"junk\n").unwrap();
    assert!(q.enqueue(b"x").is_err());

    let out = run(&["fsck", qs, "--quarantine"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{text}");
    assert!(
        text.contains("steadq.limits: damaged: the capacity limits file does not decode"),
        "{text}"
    );
    assert!(
        text.contains("move it aside with `steadq fsck --quarantine` (moved to quarantine/)"),
        "{text}"
    );
    assert!(
        text.contains(
            "keys/notes.txt: foreign: not a key entry (<64 hex>) or tombstone \
             (<64 hex>.<32 hex>.gone) (moved to quarantine/)"
        ),
        "{text}"
    );
    // Each of the three copies but the first seen names another.
    let dup = |a: &str| text.contains(&format!("{a}: the same job id is also at "));
    assert!(dup(&moved), "{moved} should be a duplicate: {text}");
    assert!(dup(&rcts[0]) || dup(&rcts[1]), "{text}");
    assert!(d.path().join(&moved).exists());
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(!d.path().join("steadq.limits").exists());
    assert_eq!(
        std::fs::read(d.path().join("quarantine/steadq.limits")).unwrap(),
        b"junk\n"
    );
    assert!(d.path().join("quarantine/keys/notes.txt").exists());
    // The key entry itself is not a problem.
    assert_eq!(std::fs::read_dir(d.path().join("keys")).unwrap().count(), 1);
}

#[test]
fn show_displays_a_job_dead_lettered_as_corrupt() {
    let d = TempDir::new("cli-showcorrupt");
    let q = d.path();
    assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
    let id = text(&steadq_in(&["enqueue", p(q)], b"good payload").stdout)
        .trim()
        .to_string();
    // Flip the last payload byte on disk: the claim finds it corrupt and dead-letters it.
    let f = q.join(&job_files(q, "ready", ".sqj")[0]);
    let mut bytes = std::fs::read(&f).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&f, bytes).unwrap();
    let o = steadq(&["claim", p(q)]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let dead = job_files(q, "dead", ".sqj");
    assert!(
        dead.len() == 1 && dead[0].contains(".xcorrupt."),
        "{:?}",
        files(q, "")
    );
    let o = steadq(&["show", p(q), &id]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(out.contains(&format!("job       {id}")), "{out}");
    assert!(out.contains("state     dead reason corrupt"), "{out}");
    assert!(out.contains(&format!("path      {}", dead[0])), "{out}");
    assert!(out.contains("file      corrupt ("), "{out}");
    let o = steadq(&["show", p(q), &id, "--raw"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    assert!(text(&o.stderr).contains(&dead[0]), "{}", text(&o.stderr));
}

/// `compact` beside a receipt with a flipped byte said "corrupt job file (...); moved to
/// dead/" and moved nothing (breaker finding): the message of a corrupt job said "moved"
/// whether or not it was. It now says where it is: left in place here (fsck reports it),
/// moved to dead/ only where a settle did move it.
#[test]
fn compaction_says_a_corrupt_receipt_is_left_where_it_is() {
    let d = TempDir::new("cli-compact-corrupt");
    let q = p(d.path());
    assert!(steadq(&["init", q, "--shards", "1"]).status.success());
    assert!(steadq_in(&["enqueue", q], b"j1").status.success());
    assert!(steadq(&["work", q, "--once", "-q", "--", "true"])
        .status
        .success());
    let receipts = files(d.path(), "receipts");
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    let r = d.path().join(&receipts[0]);
    let mut bytes = std::fs::read(&r).unwrap();
    bytes[129] ^= 0x01; // the payload, after the 128-byte header
    std::fs::write(&r, &bytes).unwrap();
    let o = steadq(&["compact", q, "--older-than", "0s"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("corrupt job file (payload SHA-256 mismatch); left where it is"),
        "{err}"
    );
    assert!(!err.contains("moved to"), "{err}");
    assert_eq!(files(d.path(), "receipts"), receipts);
    assert!(files(d.path(), "dead").is_empty());
}

/// `show --raw` of a receipt kept as its header only (`init --receipts header`) printed 0
/// bytes and exited 0, as if the payload had been empty, and the text view printed an empty
/// payload line (breaker finding). Now `--raw` exits 2 saying the payload was not kept, and
/// the text view says so; a kept receipt still prints its payload.
#[test]
fn show_raw_of_a_header_only_receipt_says_the_payload_was_not_kept() {
    let d = TempDir::new("cli-show-header-rct");
    std::fs::create_dir_all(d.path()).unwrap();
    for (mode, kept) in [("header", false), ("job", true)] {
        let q = d.path().join(mode);
        let qs = p(&q);
        assert!(steadq(&["init", qs, "--receipts", mode]).status.success());
        let e = steadq_in(&["enqueue", qs], b"hello\n");
        let id = text(&e.stdout).trim().to_string();
        let w = steadq(&["work", qs, "--once", "--", "cat"]);
        assert_eq!(w.status.code(), Some(0), "{}", text(&w.stderr));
        let raw = steadq(&["show", qs, &id, "--raw"]);
        let view = text(&steadq(&["show", qs, &id]).stdout);
        if kept {
            assert_eq!(raw.status.code(), Some(0), "{}", text(&raw.stderr));
            assert_eq!(raw.stdout, b"hello\n");
            assert!(view.contains("payload   hello"), "{view}");
        } else {
            let err = text(&raw.stderr);
            assert_eq!(raw.status.code(), Some(2), "{err}");
            assert!(err.contains("its 6-byte payload was not kept"), "{err}");
            assert!(raw.stdout.is_empty());
            assert!(view.contains("payload   (not kept"), "{view}");
        }
    }
}

/// `fsck` that found problems but could not write their list (stdout on a full disk)
/// exited 5, "problems found", as if the list had been written (breaker finding). A script
/// acting on 5 would act on a list it never got: now 2 (not done), and the write failure
/// is named on stderr. With the list written it still exits 5.
#[test]
fn fsck_whose_list_of_problems_is_lost_does_not_exit_5() {
    let d = TempDir::new("cli-fsck-full");
    std::fs::create_dir_all(d.path()).unwrap();
    let q = d.path().join("q");
    let qs = p(&q);
    assert!(steadq(&["init", qs, "--shards", "1"]).status.success());
    std::fs::write(q.join("ready/00/junk"), b"not a job").unwrap();
    let o = steadq(&["fsck", qs]);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("junk"), "{}", text(&o.stdout));
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = Command::new(BIN)
        .args(["fsck", qs])
        .stdin(Stdio::null())
        .stdout(full)
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("could not be written to stdout"), "{err}");
    assert!(err.contains("1 problems"), "{err}");
}

/// A damaged idempotency key entry (a live `keys/<64 hex>` that does not decode) fails
/// every enqueue with its key, yet `fsck` reported 0 problems (breaker finding). Now it is
/// a problem (exit 5), named, and left in place by `--quarantine`: removing it would let
/// the key's job be enqueued twice, which is the operator's call.
#[test]
fn fsck_reports_a_damaged_key_entry() {
    let d = TempDir::new("cli-fsck-key");
    std::fs::create_dir_all(d.path()).unwrap();
    let q = d.path().join("q");
    let qs = p(&q);
    assert!(steadq(&["init", qs]).status.success());
    let mut ids = Vec::new();
    for key in ["order-1", "order-2"] {
        let e = steadq_in(&["enqueue", qs, "--key", key], b"x");
        assert_eq!(e.status.code(), Some(0), "{}", text(&e.stderr));
        ids.push(text(&e.stdout));
    }
    let o = steadq(&["fsck", qs]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    let mut entries: Vec<_> = std::fs::read_dir(q.join("keys"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    assert_eq!(entries.len(), 2);
    let damaged = &entries[0];
    let name = damaged.file_name().unwrap().to_str().unwrap().to_string();
    std::fs::write(damaged, b"steadq-key 1\nkey=\x00garbage\n").unwrap();
    for args in [&["fsck", qs][..], &["fsck", qs, "--quarantine"]] {
        let o = steadq(args);
        let out = text(&o.stdout);
        assert_eq!(
            o.status.code(),
            Some(5),
            "{args:?}: {out}{}",
            text(&o.stderr)
        );
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.contains(&format!("keys/{name}")), "{out}");
        assert!(
            out.contains("idempotency key entry does not decode"),
            "{out}"
        );
        assert!(damaged.exists(), "{args:?} moved it");
    }
    // The damaged key's enqueue fails naming the entry; the other key's duplicate is still
    // found (exit 0, its first job's id).
    let mut failed = 0;
    for (key, id) in ["order-1", "order-2"].into_iter().zip(&ids) {
        let e = steadq_in(&["enqueue", qs, "--key", key], b"x");
        let err = text(&e.stderr);
        if err.contains(&name) {
            failed += 1;
            assert_eq!(e.status.code(), Some(2), "{err}");
            assert!(err.contains("key entry is damaged"), "{err}");
        } else {
            assert_eq!(e.status.code(), Some(0), "{err}");
            assert_eq!(&text(&e.stdout), id, "{err}");
        }
    }
    assert_eq!(failed, 1);
}

/// `fsck --quarantine` with a symlink at `quarantine` (never followed) failed on its first
/// move with "Not a directory" and listed nothing, though plain `fsck` named every problem
/// (breaker finding). Now it lists them all, moves nothing, says why, and exits 5.
#[test]
fn fsck_quarantine_with_a_symlinked_quarantine_lists_and_moves_nothing() {
    let d = TempDir::new("cli-fsck-qlink");
    std::fs::create_dir_all(d.path()).unwrap();
    let q = d.path().join("q");
    let qs = p(&q);
    assert!(steadq(&["init", qs, "--shards", "1"]).status.success());
    std::fs::write(q.join("ready/00/junk"), b"x").unwrap();
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, q.join("quarantine")).unwrap();
    let o = steadq(&["fsck", qs, "--quarantine"]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(5), "{out}{err}");
    assert!(out.contains("ready/00/junk: "), "{out}");
    assert!(out.contains("quarantine: not a directory"), "{out}");
    assert!(err.contains("nothing was moved"), "{err}");
    assert!(err.contains("0 dealt with"), "{err}");
    assert!(q.join("ready/00/junk").exists());
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// A receipt whose cut to its header a crash interrupted, as xfs leaves one (its old length,
/// the bytes from the header to the end of the first block zeroed, the rest as it was: the
/// crash lab's block rig found it with every barrier in place), reads as a receipt cut to its
/// header: fsck reports nothing, `read_job` and `show` give no payload. Zeros that start
/// anywhere else in a receipt are still corruption.
#[test]
fn a_receipt_whose_cut_a_crash_interrupted_reads_as_cut() {
    use std::os::unix::fs::FileExt;
    let d = TempDir::new("cutzero");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    // (payload length, zeroed range of the file): a payload within the first block, all of
    // it zeroed; a longer one with its first 4 KiB block's tail zeroed; and zeros elsewhere.
    let cases = [
        (300usize, 128..428, true),
        (9000, 128..4096, true),
        (3000, 600..1600, false),
    ];
    for (len, zeros, reads_as_cut) in cases {
        let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
        let id = q.enqueue(&payload).unwrap();
        q.claim().unwrap().unwrap().ack().unwrap();
        let rct = q
            .list(Some(steadq::State::Acked))
            .unwrap()
            .into_iter()
            .find(|l| l.name.id == id)
            .unwrap();
        let path = d.path().join(rct.rel_path(q.id()));
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&vec![0u8; zeros.len()], zeros.start as u64)
            .unwrap();
        let problems = q.fsck().unwrap().problems;
        let read = q.read_job(&rct);
        if reads_as_cut {
            assert!(problems.is_empty(), "{len}: {problems:?}");
            let (h, p) = read.unwrap();
            assert_eq!((h.payload_len, p.len()), (len as u64, 0), "{len}");
            let out = Command::new(BIN)
                .args(["show", d.path().to_str().unwrap(), &id.to_string()])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{len}: {out:?}");
            assert!(
                text.contains("not kept: the receipt was cut to its header"),
                "{text}"
            );
        } else {
            assert_eq!(problems.len(), 1, "{len}: {problems:?}");
            assert!(
                problems[0].to_string().contains("corrupt"),
                "{}",
                problems[0]
            );
            assert!(read.is_err(), "{len}");
        }
        std::fs::remove_file(&path).unwrap();
    }
}
