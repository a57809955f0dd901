//! Jobs and shards this user may not move, open, write or delete: passed over, not a stop,
//! their attempts kept, tried again when the refusal lapses.

use crate::common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use steadq::sys::{Call, Errno, Fault, FaultAction, FaultPlan};
use steadq::{Options, Outcome, Queue, Reason};

/// A job this user may not move (a sticky shard directory, another user's file: `rename`
/// fails with EPERM) is passed over for the next candidate. It stopped every claim: the
/// oldest job is tried first, every time. With nothing else to claim, the claim fails naming
/// it (not done, exit 2), never "no job".
#[test]
fn a_job_this_user_may_not_move_is_passed_over_not_a_stop() {
    let Some(t) = AsNobody::new("refused-move") else {
        return;
    };
    let (code, _, err) = t.run("$S init $Q --shards 1");
    assert_eq!(code, Some(0), "{err}");
    let qs = t.q.to_str().unwrap();
    for p in [&b"root one"[..], b"root two"] {
        assert!(steadq_in(&["enqueue", qs], p).status.success());
    }
    // Sticky, and owned by root: nobody may add files but not move root's.
    std::os::unix::fs::chown(t.q.join("ready/00"), Some(0), Some(0)).unwrap();
    t.chmod("ready/00", 0o1777);
    let before = t.ls("ready/00");
    let (code, out, err) = t.run("$S claim $Q");
    assert_eq!(code, Some(2), "not done, not 'no job': {out} {err}");
    assert!(
        err.contains("Operation not permitted") && err.contains("ready/00/"),
        "{err}"
    );
    assert_eq!(t.ls("ready/00"), before, "nothing moved");
    let (code, id, err) = t.run("echo mine | $S enqueue $Q");
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = t.run("$S claim $Q");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with(id.trim()),
        "its own job, past the two older ones: {out}"
    );
    assert_eq!(err.matches("passes it over").count(), 2, "{err}");

    // claim_batch, as nobody (this test binary, copied where nobody can run it): it takes
    // the two jobs nobody may move and ends there, done, instead of failing the batch
    // (indeterminate) at the refused ones.
    let (code, _, err) = t.run("echo a | $S enqueue $Q && echo b | $S enqueue $Q");
    assert_eq!(code, Some(0), "{err}");
    let exe = t.base.join("it");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    let (code, out, err) = t.run(&format!(
        "STEADQ_REFUSED_Q=$Q {} --exact refused_jobs::refused_batch_child --nocapture --test-threads=1",
        exe.display()
    ));
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(out.contains("claimed 2 acked 2"), "{out} {err}");
    // Left: the two refused jobs, and the lease of nobody's first claim.
    let now = t.ls("ready/00");
    assert!(
        now.len() == 3 && before.iter().all(|b| now.contains(b)),
        "{now:?}"
    );

    // A waiting claim waits on past them (it failed at once, and missed a job of its own
    // enqueued a moment later): the job enqueued a second later is the one it gets.
    let (code, out, err) = t.run(
        "(sleep 1; echo later | $S enqueue $Q > $Q.later) & \
         $S claim $Q --wait 20s; r=$?; wait; exit $r",
    );
    assert_eq!(code, Some(0), "{out} {err}");
    let later = std::fs::read_to_string(t.q.with_extension("later")).unwrap();
    assert!(out.starts_with(later.trim()), "{out} / {later}");
    // At its timeout with only those jobs seen: not done naming one, after the whole wait.
    let start = std::time::Instant::now();
    let (code, out, err) = t.run("$S claim $Q --wait 1s");
    assert_eq!(code, Some(2), "not done, not 'no job': {out} {err}");
    assert!(start.elapsed() >= Duration::from_secs(1), "it waited");
    assert!(err.contains("Operation not permitted"), "{err}");
    // An idle worker beside them waits on inotify and warns once per job (it logged the
    // claim's error once a second, even with -q).
    let (_, _, err) = t.run("timeout -s TERM 3 $S work $Q -- true");
    assert_eq!(err.matches("passes it over").count(), 2, "{err}");
    assert!(!err.contains("claim:"), "{err}");

    // One such job at a higher level: it stopped the claim's walk there, so a job of a
    // lower level was never claimed (exit 2 every time, and a worker never ran it).
    assert!(steadq_in(&["enqueue", qs, "--priority", "5"], b"root high")
        .status
        .success());
    std::os::unix::fs::chown(t.q.join("prio/5/00"), Some(0), Some(0)).unwrap();
    t.chmod("prio/5/00", 0o1777);
    let (code, id, err) = t.run("echo low | $S enqueue $Q --priority 1");
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = t.run("$S claim $Q");
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(out.starts_with(id.trim()), "the level-1 job: {out} {err}");
    assert!(
        err.contains("prio/5/00/"),
        "the level-5 job is named: {err}"
    );
}

/// A job this user may move but not open (root's file at mode 600 in a shard open to all):
/// each claim renamed it to a lease, failed to open it (indeterminate, exit 4) and left it
/// leased with one attempt used, so after `max_attempts` such claims the job was
/// dead-lettered `exhausted` without ever running. Now the claim gives it back to ready
/// with its attempt, passes it over (not done, exit 2 when it is all there is) and claims
/// the next job; root then gets it with every attempt left.
#[test]
fn a_job_this_user_may_not_open_keeps_its_attempts_and_is_passed_over() {
    let Some(t) = AsNobody::new("unopenable") else {
        return;
    };
    let (code, _, err) = t.run("$S init $Q --shards 1");
    assert_eq!(code, Some(0), "{err}");
    let qs = t.q.to_str().unwrap();
    let out = steadq_in(&["enqueue", qs, "--max-attempts", "2"], b"root's secret");
    assert!(out.status.success(), "{out:?}");
    let root_id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let file = t.q.join("ready/00").join(&t.ls("ready/00")[0]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, id, err) = t.run("echo mine | $S enqueue $Q");
    assert_eq!(code, Some(0), "{err}");
    // The older job is root's: passed over, nobody's own is claimed.
    let (code, out, err) = t.run("$S claim $Q");
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(out.starts_with(id.trim()), "its own job: {out} {err}");
    assert!(
        err.contains("Permission denied") && err.contains("passes it over"),
        "{err}"
    );
    // More claims than the job has attempts: each is not done, naming the job, and none
    // uses an attempt or leaves it leased.
    for _ in 0..3 {
        let (code, out, err) = t.run("$S claim $Q");
        assert_eq!(code, Some(2), "not done: {out} {err}");
        assert!(
            err.contains(&root_id) && err.contains("Permission denied"),
            "{err}"
        );
    }
    let left: Vec<String> = t
        .ls("ready/00")
        .into_iter()
        .filter(|n| n.starts_with(&root_id))
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].contains(".a00000000."), "no attempt used: {left:?}");
    assert!(!left[0].contains(".t"), "not leased: {left:?}");
    assert!(t.ls("dead").is_empty(), "nothing dead-lettered");
    // Beside five such jobs a one-shot claim names three and says there are more (it
    // printed a warning per job, up to 256).
    for i in 0..4 {
        assert!(steadq_in(&["enqueue", qs], format!("more {i}").as_bytes())
            .status
            .success());
    }
    for n in t.ls("ready/00") {
        let f = t.q.join("ready/00").join(n);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let (code, out, err) = t.run("$S claim $Q");
    assert_eq!(code, Some(2), "{out} {err}");
    assert_eq!(err.matches("passes it over").count(), 3, "{err}");
    assert_eq!(
        err.matches("more jobs this user may not").count(),
        1,
        "{err}"
    );
    // An idle worker beside them gives each back once and waits (the give-back's own
    // inotify event made it claim and give back ~1,000 times a second).
    let gens = || -> u64 {
        t.ls("ready/00")
            .iter()
            .map(|n| u64::from_str_radix(&n[34..50], 16).unwrap())
            .sum()
    };
    let before = gens();
    let (_, _, err) = t.run("timeout -s INT 3 $S work $Q -q -- cat");
    assert!(
        gens() <= before + 2 * 5,
        "at most one give-back (2 renames) per job: {} -> {} {err}",
        before,
        gens()
    );
    // Root may read it, with both of its attempts.
    let out = steadq_in(&["claim", qs], b"");
    assert!(out.status.success(), "{out:?}");
    let h = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(h.starts_with(&root_id), "{h}");
    assert!(h.contains(".a00000001."), "first attempt: {h}");
}

/// A ready shard this user may not write (left at root's mode 755 in a queue opened to all
/// by `chmod -R a+rwX` or a group): one enqueue in `shards` failed, "ready/02: open failed:
/// Permission denied", at random. Now an enqueue draws its id again until its shard is one
/// this user may write (a probe per shard per handle), warns naming the shard, and fails
/// (not done, naming one) only when no shard of the level is writable.
#[test]
fn a_shard_this_user_may_not_write_gets_no_new_jobs_and_no_failed_enqueue() {
    let Some(t) = AsNobody::new("unwritable-shard") else {
        return;
    };
    let qs = t.q.to_str().unwrap();
    assert!(steadq_in(&["init", qs, "--shards", "4"], b"")
        .status
        .success());
    // A level made by root, then everything opened to all but one shard of each level.
    assert!(steadq_in(&["enqueue", qs, "--priority", "5"], b"root high")
        .status
        .success());
    let level_shard = t.ls("prio/5")[0].clone();
    t.open_to_all();
    t.chmod("ready/02", 0o755);
    let (code, _, err) = t.run("for s in 00 01 02 03; do mkdir -p $Q/prio/5/$s; done");
    assert_eq!(code, Some(0), "{err}");
    t.chmod(&format!("prio/5/{level_shard}"), 0o755);
    let (code, out, err) = t.run(
        "n=0; for i in $(seq 1 24); do echo d$i | $S enqueue $Q > /dev/null || n=$((n+1)); \
         echo p$i | $S enqueue $Q --priority 5 > /dev/null || n=$((n+1)); \
         echo k$i | $S enqueue $Q --key k$i > /dev/null || n=$((n+1)); done; echo failed=$n",
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), "failed=0", "{err}");
    assert!(
        t.ls("ready/02").is_empty(),
        "no job where nobody may not write"
    );
    assert_eq!(
        t.ls(&format!("prio/5/{level_shard}")).len(),
        1,
        "root's job only"
    );
    let warned = err
        .lines()
        .filter(|l| l.contains("may not make files here"));
    assert!(warned.clone().count() >= 1, "{err}");
    assert!(
        warned
            .clone()
            .all(|l| l.contains("ready/02") || l.contains(&format!("prio/5/{level_shard}"))),
        "{err}"
    );
    let (code, out, _) = t.run("$S status $Q --json");
    assert_eq!(code, Some(0));
    assert!(
        out.contains("\"ready\":73"),
        "72 new jobs and root's: {out}"
    );
    // No shard writable: not done, one error naming the level's directory, nothing left
    // behind. It named one shard drawn at random, after a warning per shard that "new jobs
    // go to the shards it may write, if any" (64 lines on a 64-shard queue).
    for s in ["00", "01", "03"] {
        t.chmod(&format!("ready/{s}"), 0o755);
    }
    let (code, out, err) = t.run("echo none | $S enqueue $Q");
    assert_eq!(code, Some(2), "{out} {err}");
    assert_eq!(
        err.trim(),
        format!(
            "steadq: {qs}/ready: this user may not make job files in any of its 4 shards \
             (Permission denied (os error 13)); not done, nothing changed: give the shards \
             the owner and mode of the queue's other directories, or enqueue as a user who may"
        ),
    );
    assert!(t.ls("tmp").is_empty(), "{:?}", t.ls("tmp"));
    // Mended: a new enqueue may land there again (4 shards, 24 tries).
    t.chmod("ready/02", 0o777);
    let (code, _, err) =
        t.run("for i in $(seq 1 24); do echo m$i | $S enqueue $Q > /dev/null || exit 1; done");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        t.ls("ready/02").len(),
        24,
        "only ready/02 may take them now"
    );
    // A level made by root where this user may make no shard directory, one shard of it
    // made and open to all: only that one takes jobs (7 in 8 enqueues failed, "prio/6/05:
    // mkdir failed"); with that one closed too, a delayed enqueue there is refused like a
    // plain one (it was accepted and stranded in delayed/ at due time).
    std::fs::create_dir_all(t.q.join("prio/6/01")).unwrap();
    t.chmod("prio/6/01", 0o777);
    t.chmod("prio/6", 0o755);
    // Older than a level in its making (`in_making`: another user's, made in the last
    // second), which is waited for rather than warned about.
    std::thread::sleep(Duration::from_millis(1100));
    let (code, _, err) = t.run(
        "for i in $(seq 1 16); do echo l$i | $S enqueue $Q --priority 6 > /dev/null || exit 1; done",
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(t.ls("prio/6"), ["01"]);
    assert_eq!(t.ls("prio/6/01").len(), 16);
    assert!(
        err.contains("prio/6: this user may not make shard directories"),
        "{err}"
    );
    t.chmod("prio/6/01", 0o755);
    for extra in ["--delay 1s", "--key lk"] {
        let (code, out, err) = t.run(&format!("echo d | $S enqueue $Q --priority 6 {extra}"));
        assert_eq!(code, Some(2), "{extra}: {out} {err}");
        // The directory the other shards would be made in refuses that mkdir.
        assert!(
            err.contains("prio/6: mkdir failed: Permission denied"),
            "{err}"
        );
    }
    assert!(t.ls("delayed").is_empty(), "{:?}", t.ls("delayed"));
}

/// A lease handle settled after its level's directory was swapped (a symlink, an empty
/// directory, a file at `prio/5`): every case said "open failed: Permission denied" (the
/// stand-in that held the slot answered), naming the lease. Now a symlink or a file is
/// named (exit 2), an empty level means the lease is gone (exit 6, lease lost), and the
/// directory put back settles it (exit 0).
#[test]
fn a_lease_whose_level_was_swapped_is_settled_or_named_not_permission_denied() {
    let d = TempDir::new("lease-level-swap");
    let qs = d.path().to_str().unwrap();
    let aside = d.path().with_extension("aside");
    assert!(run(&["init", qs, "--shards", "1"]).status.success());
    assert!(steadq_in(&["enqueue", qs, "--priority", "5"], b"high")
        .status
        .success());
    let out = run(&["claim", qs]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let h = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let level = d.path().join("prio/5");
    std::fs::rename(&level, &aside).unwrap();
    let err = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();

    std::os::unix::fs::symlink(&aside, &level).unwrap();
    let out = run(&["ack", qs, &h]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        err(&out).contains("prio/5: open failed: a symlink"),
        "{}",
        err(&out)
    );
    std::fs::remove_file(&level).unwrap();

    std::fs::create_dir(&level).unwrap();
    let out = run(&["ack", qs, &h]);
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    assert!(err(&out).contains("lease lost"), "{}", err(&out));
    std::fs::remove_dir(&level).unwrap();

    std::fs::write(&level, b"").unwrap();
    let out = run(&["renew", qs, &h]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        err(&out).contains("prio/5: open failed: Not a directory"),
        "{}",
        err(&out)
    );
    std::fs::remove_file(&level).unwrap();

    std::fs::rename(&aside, &level).unwrap();
    let out = run(&["ack", qs, &h]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(std::fs::read_dir(level.join("00")).unwrap().count(), 0);
}

/// `fsck --quarantine` run by a user who cannot read another user's job (mode 600) moved
/// that valid job out of the queue ("unreadable ... (moved to quarantine/)", exit 0), and
/// nothing ever ran it; and an entry it was not allowed to move (a sticky shard) failed the
/// whole run as indeterminate (exit 4), printing no line although it had moved others. Now
/// an unreadable entry is reported and left, a refused move is reported and left, and the
/// rest is moved (exit 5: problems left).
#[test]
fn fsck_quarantine_leaves_what_this_user_cannot_read_or_move() {
    let Some(t) = AsNobody::new("fsck-unreadable") else {
        return;
    };
    let qs = t.q.to_str().unwrap();
    assert!(steadq_in(&["init", qs, "--shards", "2"], b"")
        .status
        .success());
    let out = steadq_in(&["enqueue", qs], b"important");
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    t.open_to_all();
    let job = ["ready/00", "ready/01"]
        .iter()
        .flat_map(|d| t.ls(d).into_iter().map(move |n| format!("{d}/{n}")))
        .find(|p| p.contains(&id))
        .unwrap();
    t.chmod(&job, 0o600);
    std::fs::write(t.q.join("ready/00/junk"), b"x").unwrap();
    std::fs::write(t.q.join("ready/01/stuck"), b"x").unwrap();
    t.chmod("ready/01", 0o1777);
    let (code, out, err) = t.run("$S fsck $Q --quarantine");
    assert_eq!(code, Some(5), "problems left: {out} {err}");
    assert!(
        out.contains(&format!("{job}: unreadable: Permission denied")),
        "{out}"
    );
    assert!(out.contains("ready/00/junk: foreign"), "{out}");
    assert!(out.contains("(moved to quarantine/)"), "{out}");
    assert!(out.contains("ready/01/stuck: foreign"), "{out}");
    assert!(
        !out.contains("ready/01/stuck: foreign: not a SteadQ job name (moved"),
        "{out}"
    );
    assert!(t.q.join(&job).exists(), "the job stays in the queue");
    assert!(t.q.join("ready/01/stuck").exists());
    assert!(t.q.join("quarantine/ready/00/junk").exists());
    // Root reads it: a valid job, claimed as usual.
    let out = steadq_in(&["claim", qs], b"");
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&id));
}

/// A due delayed job this user may not move (another user's file in a sticky bucket) is a
/// job waiting, not "no job": `claim` said "no job ready" (exit 3), and a waiting claim (or
/// an idle worker) never tried the move again once the permission was mended, until the
/// next enqueue woke it. Now `claim` fails naming it (exit 2), and a waiting claim tries
/// again every 10 s.
#[test]
fn a_due_job_this_user_may_not_move_is_not_no_job_and_is_retried() {
    let Some(t) = AsNobody::new("refused-due") else {
        return;
    };
    let (code, _, err) = t.run("$S init $Q --shards 1");
    assert_eq!(code, Some(0), "{err}");
    let qs = t.q.to_str().unwrap();
    let out = steadq_in(&["enqueue", qs, "--delay", "1s"], b"root's, due");
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let bucket = std::fs::read_dir(t.q.join("delayed"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::os::unix::fs::chown(&bucket, Some(0), Some(0)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bucket, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // Due by the test clock.
    let (code, out, err) = t.run("STEADQ_TEST_CLOCK_SHIFT_S=2 $S claim $Q");
    assert_eq!(code, Some(2), "not done, not 'no job': {out} {err}");
    assert!(err.contains("Operation not permitted"), "{err}");
    // Mended a second into a wait: the waiting claim takes it (it waited out its 30 s).
    let mend = bucket.clone();
    let fix = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        std::fs::set_permissions(&mend, std::fs::Permissions::from_mode(0o777)).unwrap();
    });
    let (code, out, err) = t.run("STEADQ_TEST_CLOCK_SHIFT_S=2 $S claim $Q --wait 30s");
    fix.join().unwrap();
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(out.starts_with(&id), "{out} / {id}");
}

/// Not a test on its own: the `claim_batch` child of
/// `a_job_this_user_may_not_move_is_passed_over_not_a_stop` (does nothing unless run as one).
#[test]
fn refused_batch_child() {
    let Some(q) = std::env::var_os("STEADQ_REFUSED_Q") else {
        return;
    };
    let q = Queue::open(q).unwrap();
    let got = q.claim_batch(10, Duration::from_secs(60)).unwrap();
    let n = got.len();
    let acked = q.ack_batch(got).unwrap().len();
    println!("claimed {n} acked {acked}");
}

/// A job this user may not open, mended a second after `work --concurrency 3` passed it
/// over, runs when the refusal lapses (10 s), not at the next lease deadline the worker knew
/// (breaker trial 2: 16-30 s with the default 30 s lease; 60 s here with `--lease 1m`). The
/// give-back's arrival was dropped by the refusal filter and left its shard known empty;
/// and a second thread could claim and give it back before the first remembered it.
#[test]
fn a_passed_over_job_is_tried_again_when_its_refusal_lapses_whatever_the_concurrency() {
    use std::os::unix::fs::PermissionsExt;
    let Some(t) = AsNobody::new("refusal-lapse") else {
        return;
    };
    let (code, _, err) = t.run("$S init $Q --shards 1");
    assert_eq!(code, Some(0), "{err}");
    t.open_to_all();
    let qs = t.q.to_str().unwrap().to_string();
    let out = steadq_in(&["enqueue", &qs], b"root's\n");
    assert!(out.status.success(), "{out:?}");
    let file = t.q.join("ready/00").join(&t.ls("ready/00")[0]);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ran = t.base.join("ran");
    let started = Instant::now();
    let mut worker = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(t.base.join("steadq"))
        .args([
            "work",
            &qs,
            "--concurrency",
            "3",
            "--lease",
            "1m",
            "--",
            "cat",
        ])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&ran).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Passed over once (one warning), then mended: once it says so, not after a fixed delay
    // (under CI load the job could be mended before the worker had looked at it, and run at
    // once).
    let stderr = StderrLines::new(&mut worker);
    stderr.wait_for("passes it over");
    let passed_over = Instant::now();
    let job = t.ls("ready/00");
    assert_eq!(job.len(), 1, "{job:?}");
    std::fs::set_permissions(
        t.q.join("ready/00").join(&job[0]),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let mut ran_at = None;
    while passed_over.elapsed() < Duration::from_secs(60) {
        if std::fs::read_to_string(&ran).unwrap().contains("root's") {
            ran_at = Some(Instant::now());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The job's output comes before its ack (under qemu-user, by more than 300 ms): the
    // worker is stopped once the receipt is there.
    let acked = Instant::now();
    while t.ls("receipts/00").is_empty() && acked.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = worker.kill();
    let _ = worker.wait();
    let err = stderr.join();
    let ran_at = ran_at.unwrap_or_else(|| panic!("not run in 60 s: {err}"));
    // 10 s after it was passed over, not at the lease's end (1 min): not before 10 s after
    // the worker's start (it was passed over after that), and not later than the refusal's
    // 10 s and some slack after the warning was read (which came after the pass-over).
    let (took, after_warning) = (
        ran_at.duration_since(started),
        ran_at.duration_since(passed_over),
    );
    assert!(
        took > Duration::from_secs(9) && after_warning < Duration::from_secs(16),
        "run {took:?} after the worker's start, {after_warning:?} after the warning: {err}"
    );
    assert_eq!(err.matches("passes it over").count(), 1, "{err}");
    // One claim gave it back, as the generation in the receipt's name counts: claim and
    // give-back (g1, g2), the claim that ran it (g3), the ack (g4).
    let receipts = t.ls("receipts/00");
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    assert!(receipts[0].contains(".g0000000000000004."), "{receipts:?}");
}

/// An idle worker beside jobs it may not open, at levels whose watch it was refused for a
/// moment, costs little CPU while it tries each again every 10 s. A level's watch refused
/// for a moment (the level in its making) made the handle's shard knowledge blind for good,
/// and each retry then listed every slot: 1.5 cores with 400 such jobs and 256 shards
/// (breaker trial: a producer at umask 077, whose job files were 600). Now only the refused
/// slots are left unwatched (and watched again a second later). Measured as the worker's
/// CPU ticks (`/proc/<pid>/stat`, user + system, 100 per second) over 4 s: 4-7 alone and 39
/// beside the rest of the suite now, 48 alone with the `shards.rs` of before the fix. So
/// this form no longer fails without that fix (the breaker's form did: 201 ticks, but its
/// jobs were unreadable only because a producer at umask 077 made them 600, which job
/// files no longer are); it fails on a gross regression (the bound is 120). The moment and
/// the modes are made here by hand: each level and its shards made at 700 (root's) while
/// root enqueues its jobs, the jobs then set to 600, and the level opened.
#[test]
#[ignore = "slow tier: waits out the 10 s refusal retry, then measures 4 s of CPU (~15 s)"]
fn a_worker_beside_refused_jobs_at_new_levels_stays_nearly_idle() {
    if std::env::var_os("STEADQ_QEMU_USER").is_some() {
        eprintln!("under qemu-user the ticks are the emulator's: skipped");
        return;
    }
    let Some(t) = AsNobody::new("refused-idle") else {
        return;
    };
    let (code, _, err) = t.run("$S init $Q --shards 64");
    assert_eq!(code, Some(0), "{err}");
    t.open_to_all();
    let qs = t.q.to_str().unwrap().to_string();
    let worker = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(t.base.join("steadq"))
        .args(["work", &qs, "--concurrency", "2", "--", "cat"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Once it waits (its watches made), the levels are made under it.
    wait_until_watching(worker.id());
    let first = Instant::now();
    std::fs::create_dir(t.q.join("prio")).unwrap();
    t.chmod("prio", 0o777);
    std::thread::sleep(Duration::from_millis(200));
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "for l in 0 1 2 4 5 6 7; do mkdir -m 700 {qs}/prio/$l && \
             for s in $(seq 0 63); do mkdir -m 700 {qs}/prio/$l/$(printf %02x $s); \
             done && chmod 777 {qs}/prio/$l && \
             for i in $(seq 1 25); do echo j$i | {} enqueue {qs} --priority $l >/dev/null \
             || exit 1; done && find {qs}/prio/$l -type f -exec chmod 600 {{}} + && \
             chmod 777 {qs}/prio/$l/* || exit 1; done",
            t.base.join("steadq").display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let ticks = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", worker.id())).unwrap();
        let f: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    };
    // Within the retries: each job is tried again 10 s after it was passed over.
    std::thread::sleep(Duration::from_secs(11).saturating_sub(first.elapsed()));
    let t0 = ticks();
    std::thread::sleep(Duration::from_secs(4));
    let used = ticks() - t0;
    let mut worker = worker;
    let _ = worker.kill();
    let _ = worker.wait();
    eprintln!("{used} ticks in 4 s");
    assert!(used < 120, "{used} ticks in 4 s");
}

/// `dead purge` stopped at the first dead job it could not delete, leaving every job after
/// it (breaker finding; `requeue --all` goes on). Now it deletes all it can and then fails
/// by the batch rule: indeterminate when some were deleted.
#[test]
fn purge_passes_over_a_job_it_cannot_delete_and_deletes_the_rest() {
    let d = TempDir::new("purge-on");
    let plan = FaultPlan::disarmed(vec![Fault {
        call: Call::Unlink,
        nth: 1,
        action: FaultAction::Fail(Errno::ACCESS),
    }]);
    let q = with_plan(&d, &plan, opts(1));
    for i in 0..3u8 {
        q.enqueue(&[i]).unwrap();
        q.claim().unwrap().unwrap().fail(Reason::FAILED).unwrap();
    }
    assert_eq!(counts(&q), [0, 0, 0, 3, 0]);
    plan.arm();
    let e = q.purge_dead().expect_err("one unlink fails");
    assert_eq!(e.outcome(), Outcome::Indeterminate, "{e}");
    assert!(e.to_string().contains("/dead/"), "{e}");
    assert_eq!(counts(&q), [0, 0, 0, 1, 0], "the other two were purged");
    // With nothing deleted, the same failure is not done.
    let plan2 = FaultPlan::disarmed(vec![Fault {
        call: Call::Unlink,
        nth: 1,
        action: FaultAction::Fail(Errno::ACCESS),
    }]);
    let q2 = Queue::open_with(
        d.path(),
        Options {
            faults: Some(plan2.clone()),
            ..opts(1)
        },
    )
    .unwrap();
    plan2.arm();
    let e = q2.purge_dead().expect_err("the one unlink fails");
    assert_eq!(e.outcome(), Outcome::NotDone, "{e}");
    assert_eq!(q2.purge_dead().unwrap(), 1);
    assert_eq!(counts(&q2), [0, 0, 0, 0, 0]);
    // An unlink that fails with EIO may have happened: indeterminate even alone.
    let plan3 = FaultPlan::disarmed(vec![Fault {
        call: Call::Unlink,
        nth: 1,
        action: FaultAction::Fail(Errno::IO),
    }]);
    let q3 = Queue::open_with(
        d.path(),
        Options {
            faults: Some(plan3.clone()),
            ..opts(1)
        },
    )
    .unwrap();
    q3.enqueue(b"x").unwrap();
    q3.claim().unwrap().unwrap().fail(Reason::FAILED).unwrap();
    plan3.arm();
    let e = q3.purge_dead().expect_err("the one unlink fails");
    assert_eq!(e.outcome(), Outcome::Indeterminate, "{e}");
}
