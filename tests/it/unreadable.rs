//! Directories this user cannot read or search: reported and skipped, named by recover and
//! requeue, and only what needs them stops.

use crate::common::*;
use std::process::{Command, Stdio};
use std::time::Duration;
use steadq::Queue;

/// A ready shard made unreadable (`chmod 000 ready/01`) for the user running steadq: status,
/// claim and work report it and serve the other shard, instead of refusing the whole queue
/// (exit 2, "open failed: Permission denied").
#[test]
fn an_unreadable_shard_is_reported_and_skipped() {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP an_unreadable_shard_is_reported_and_skipped: needs root, runs once");
        return;
    }
    // Outside the test's temp dir tree, which `nobody` may not traverse.
    let (base, bin) = nobody_sandbox("unread");
    use std::os::unix::fs::PermissionsExt;
    let (bin, q) = (bin.as_str(), base.join("q"));
    let qs = q.to_str().unwrap();
    let (code, _, err) = as_nobody(&format!(
        "{bin} init {qs} --shards 2 && for i in $(seq 20); do echo j$i | {bin} enqueue {qs}; done"
    ));
    assert_eq!(code, Some(0), "{err}");
    let jobs = |s: &str| std::fs::read_dir(q.join("ready").join(s)).unwrap().count();
    let (readable, hidden) = (jobs("00"), jobs("01"));
    assert_eq!(readable + hidden, 20);
    assert!(readable > 0 && hidden > 0, "{readable} + {hidden}");
    std::fs::set_permissions(q.join("ready/01"), std::fs::Permissions::from_mode(0o000)).unwrap();

    let (code, out, err) = as_nobody(&format!("{bin} status {qs} --json"));
    assert_eq!(code, Some(0), "status: {err}");
    assert!(out.contains("\"unreadable_shards\":1,"), "{out}");
    assert!(out.contains(&format!("\"ready\":{readable},")), "{out}");
    // Every job of the readable shard is claimed and run, then there is no job there; a
    // claim does not say "no job" (exit 3) while it could not read a shard: exit 2.
    let (code, _, err) = as_nobody(&format!(
        "for i in $(seq {readable}); do {bin} work --once {qs} -- cat >/dev/null || exit 9; done; \
         {bin} claim {qs}"
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("ready/01: cannot read this shard"), "{err}");
    assert_eq!(jobs("00"), 0);
    // fsck does not call the queue clean while it could not look at a shard.
    let (code, out, err) = as_nobody(&format!("{bin} fsck {qs}"));
    assert_eq!(code, Some(5), "fsck: {out}{err}");
    assert!(out.contains("ready/01: unreadable"), "{out}");
    // A worker that opened the queue while the shard was unreadable holds it by name only
    // (O_PATH); once it is readable again the worker runs its jobs. (Found by a fresh-user
    // trial: the claim's directory fsync failed with EBADF on that descriptor, each claim was
    // indeterminate, and the jobs went to dead/ without running.)
    let mut worker = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .args([bin, "work", qs, "--lease", "5s", "--", "cat"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once it has opened the queue while the shard was unreadable (it says so at open).
    let lines = StderrLines::new(&mut worker);
    lines.wait_for("ready/01: cannot read this shard");
    std::fs::set_permissions(q.join("ready/01"), std::fs::Permissions::from_mode(0o775)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let st = loop {
        let st = Queue::open(&q).unwrap().status().unwrap();
        if st.acked == 20 || std::time::Instant::now() > deadline {
            break st;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    worker.kill().unwrap();
    worker.wait().unwrap();
    let err = lines.join();
    assert_eq!(
        (st.ready, st.leased, st.dead, st.acked, st.unreadable_shards),
        (0, 0, 0, 20, 0),
        "{err}"
    );
    assert!(!err.contains("Bad file descriptor"), "{err}");
    std::fs::remove_dir_all(&base).unwrap();
}

/// `dead/` and a delayed bucket made unreadable (`chmod 000`) for the user running steadq:
/// status (text, JSON, Prometheus) and fsck name them and count everything else (found by a
/// fresh-user trial: both exited 2, "open failed: Permission denied").
#[test]
fn unreadable_dead_and_delayed_directories_are_reported_and_skipped() {
    let Some(t) = AsNobody::new("unread-dead") else {
        return;
    };
    let (code, _, err) = t.run(
        "$S init $Q --shards 2 && for i in 1 2 3; do echo r$i | $S enqueue $Q; done && \
         echo soon | $S enqueue $Q --delay 1h && echo later | $S enqueue $Q --delay 2d && \
         echo bad | $S enqueue $Q --max-attempts 1 && \
         for i in 1 2 3 4; do h=$($S claim $Q) && $S fail $Q \"$h\" --reason bad; done; \
         for i in 1 2 3; do echo r$i | $S enqueue $Q; done",
    );
    assert_eq!(code, Some(0), "{err}");
    let buckets = t.ls("delayed");
    assert_eq!(buckets.len(), 2, "{buckets:?}");
    let later = format!("delayed/{}", buckets[1]);
    assert_eq!(t.ls("dead").len(), 1);
    t.chmod("dead", 0o000);
    t.chmod(&later, 0o000);

    let (code, out, err) = t.run("$S status $Q --json");
    assert_eq!(code, Some(0), "status: {err}");
    let want = format!(
        "\"ready\":3,\"leased\":0,\"delayed\":1,\"dead\":0,\"acked\":0,\"waiting\":0,\
         \"expired_leases\":0,\"foreign\":0,\"unreadable_shards\":0,\"unreadable_dirs\":[\"{later}\",\"dead\"],"
    );
    assert!(out.contains(&want), "{out}");
    let (code, out, err) = t.run("$S status $Q --prometheus");
    assert_eq!(code, Some(0), "status: {err}");
    assert!(out.contains("steadq_unreadable_dirs{queue="), "{out}");
    assert!(out.contains("\"} 2\n"), "{out}");
    let (code, out, err) = t.run("$S status $Q");
    assert_eq!(code, Some(0), "status: {err}");
    assert!(out.contains("\nunread   dead  "), "{out}");
    assert!(out.contains(&format!("\nunread   {later}  ")), "{out}");
    assert!(out.contains("\nready           3\n"), "{out}");
    // fsck checks everything else and names both directories as problems: the bucket, made
    // on demand, by the rights it lacks.
    let (code, out, err) = t.run("$S fsck $Q");
    assert_eq!(code, Some(5), "fsck: {out}{err}");
    assert!(
        out.contains(&format!(
            "{later}: not shared like delayed/: mode 0 group 65534, where delayed/ has mode \
             755 group 65534;"
        )),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("dead: unreadable: Permission denied")),
        "{out}"
    );
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(err.contains("4 job files verified"), "{err}");
    // A delayed/ parent that cannot be read is one problem, not a failed run.
    t.chmod(&later, 0o775);
    t.chmod("delayed", 0o000);
    let (code, out, err) = t.run("$S status $Q --json && $S fsck $Q");
    assert_eq!(code, Some(5), "{out}{err}");
    assert!(out.contains("\"delayed\":0,"), "{out}");
    assert!(
        out.contains("\"unreadable_dirs\":[\"delayed\",\"dead\"]"),
        "{out}"
    );
    assert!(
        out.contains("\ndelayed: unreadable: Permission denied"),
        "{out}"
    );
}

/// `recover` by a user who cannot read a ready shard (which holds its leases) or a delayed
/// bucket names them and does not exit 0 (found by a fresh-user trial: "failed 0", exit 0):
/// 2 when it changed nothing, 4 when it recovered the rest.
#[test]
fn recover_names_the_directories_it_could_not_read() {
    let Some(t) = AsNobody::new("unread-recover") else {
        return;
    };
    let (code, _, err) = t.run(
        "$S init $Q --shards 2 && for i in $(seq 12); do echo j$i | $S enqueue $Q; done && \
         echo later | $S enqueue $Q --delay 2d",
    );
    assert_eq!(code, Some(0), "{err}");
    let bucket = format!("delayed/{}", t.ls("delayed")[0]);
    t.chmod("ready/01", 0o000);
    let (code, out, err) = t.run("$S recover $Q");
    assert_eq!(code, Some(2), "recover: {out}{err}");
    assert!(out.contains("failed 0; unreadable directories 1"), "{out}");
    assert!(
        err.contains("/q/ready/01: cannot read this directory"),
        "{err}"
    );
    // With an expired lease in the readable shard it recovers that one, and says the rest
    // was not examined (4: something changed).
    let (code, _, err) = t.run("$S claim $Q --lease 1s >/dev/null");
    assert_eq!(code, Some(0), "{err}");
    t.chmod("delayed", 0o000);
    let (code, out, err) = t.run("STEADQ_TEST_CLOCK_SHIFT_S=2 $S recover $Q");
    assert_eq!(code, Some(4), "recover: {out}{err}");
    assert!(out.starts_with("expired leases to ready 1,"), "{out}");
    assert!(out.contains("unreadable directories 2"), "{out}");
    assert!(err.contains("/q/ready/01: cannot read"), "{err}");
    assert!(err.contains("/q/delayed: cannot read"), "{err}");
    // A delayed bucket it cannot read is named the same way (it used to fail the pass with
    // "open failed").
    t.chmod("delayed", 0o775);
    t.chmod("ready/01", 0o775);
    let (code, _, err) = t.run("echo soon | $S enqueue $Q --delay 1s");
    assert_eq!(code, Some(0), "{err}");
    let soon: Vec<String> = t
        .ls("delayed")
        .into_iter()
        .filter(|b| !bucket.ends_with(b.as_str()))
        .collect();
    assert_eq!(soon.len(), 1, "{soon:?}");
    let soon = format!("delayed/{}", soon[0]);
    t.chmod(&soon, 0o000);
    let (code, out, err) = t.run("STEADQ_TEST_CLOCK_SHIFT_S=2 $S recover $Q");
    assert_eq!(code, Some(2), "recover: {out}{err}");
    assert!(out.contains("delayed jobs due 0;"), "{out}");
    assert!(out.contains("failed 0; unreadable directories 1"), "{out}");
    assert!(err.contains(&format!("/q/{soon}: cannot read")), "{err}");
}

/// A parent of job directories that `nobody` cannot search (root-owned, mode 700: `prio/6`,
/// `prio`, `ready`, `receipts`): the queue opens, status and fsck name the directories they
/// could not read and count the rest, recover names them (found by a fresh-user trial: all
/// three exited 2 with only "prio/6/00: open failed: Permission denied").
#[test]
fn an_unreadable_parent_of_job_directories_is_reported_and_skipped() {
    let Some(t) = AsNobody::new("unread-parent") else {
        return;
    };
    let (code, _, err) = t.run(
        "$S init $Q --shards 2 && for i in 1 2 3; do echo r$i | $S enqueue $Q; done && \
         echo p | $S enqueue $Q --priority 6",
    );
    assert_eq!(code, Some(0), "{err}");
    let own = |rel: &str, uid: u32, mode: u32| {
        std::os::unix::fs::chown(t.q.join(rel), Some(uid), Some(uid)).unwrap();
        t.chmod(rel, mode);
    };
    // (directory, ready counted, unreadable dirs, recover's exit)
    let cases = [
        ("prio/6", 3, "\"prio/6/00\",\"prio/6/01\"", 2),
        ("ready", 1, "\"ready/00\",\"ready/01\"", 2),
        ("receipts", 4, "\"receipts/00\",\"receipts/01\"", 0),
    ];
    for (dir, ready, unread, recover) in cases {
        own(dir, 0, 0o700);
        let (code, out, err) = t.run("$S status $Q --json");
        assert_eq!(code, Some(0), "status, {dir}: {err}");
        assert!(out.contains(&format!("\"ready\":{ready},")), "{dir}: {out}");
        assert!(
            out.contains(&format!("\"unreadable_dirs\":[{unread}]")),
            "{dir}: {out}"
        );
        let (code, out, err) = t.run("$S fsck $Q");
        assert_eq!(code, Some(5), "fsck, {dir}: {out}{err}");
        if dir == "prio/6" {
            // A level is made on demand: named by the rights it lacks, its shards not again.
            assert_eq!(
                out,
                "prio/6: not shared like ready/: mode 700 group 0, where ready/ has mode 755 \
                 group 65534; other users of the queue may be refused here (`steadq fsck \
                 --quarantine` shares it in place)\n"
            );
        } else {
            assert!(
                out.starts_with(&format!("{dir}: unreadable: Permission denied")),
                "{out}"
            );
            assert!(
                out.contains(&format!("\n{dir}/00: unreadable: Permission denied")),
                "{out}"
            );
            assert_eq!(out.lines().count(), 3, "{out}");
        }
        assert!(
            err.contains(&format!(
                "{ready} job {} verified",
                if ready == 1 { "file" } else { "files" }
            )),
            "{dir}: {err}"
        );
        let (code, out, err) = t.run("$S recover $Q");
        assert_eq!(code, Some(recover), "recover, {dir}: {out}{err}");
        if recover == 2 {
            assert!(out.contains("failed 0; unreadable directories 2"), "{out}");
            assert!(err.contains(&format!("/q/{dir}/00: cannot read")), "{err}");
        }
        own(dir, 65534, 0o755); // as `init` made it, at umask 022
    }
    // `prio` itself: every level but the default is unreadable; the ready jobs are counted.
    own("prio", 0, 0o700);
    let (code, out, err) = t.run("$S status $Q --json && $S fsck $Q");
    assert_eq!(code, Some(5), "{out}{err}");
    assert!(out.contains("\"ready\":3,"), "{out}");
    assert!(out.contains("\"unreadable_shards\":14,"), "{out}");
    assert!(
        out.contains(
            "\nprio: not shared like ready/: mode 700 group 0, where ready/ has mode 755 group \
             65534;"
        ),
        "{out}"
    );
    own("prio", 65534, 0o755);
}

/// `recover` never reads `dead/` or the receipt shards: with both unreadable (`chmod 000`) it
/// still exits 0 when it has nothing to put there, and an expired lease out of attempts, which
/// must go to `dead/`, makes it exit 2 naming `dead/` (checked after a fresh-user trial asked
/// whether "unreadable directories 0" there was a missed directory).
#[test]
fn recover_does_not_read_dead_or_receipts_and_names_dead_when_it_must_write_there() {
    let Some(t) = AsNobody::new("recover-dead") else {
        return;
    };
    let (code, _, err) = t.run(
        "$S init $Q --shards 1 && echo a | $S enqueue $Q --max-attempts 1 && \
         $S claim $Q --lease 1s >/dev/null",
    );
    assert_eq!(code, Some(0), "{err}");
    t.chmod("dead", 0o000);
    t.chmod("receipts", 0o000);
    let (code, out, err) = t.run("STEADQ_TEST_CLOCK_SHIFT_S=2 $S recover $Q");
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("q/dead") && err.contains("Permission denied"),
        "{err}"
    );
    let (code, out, err) = t.run("$S list $Q --state leased");
    assert_eq!((code, out.lines().count()), (Some(0), 1), "{out}{err}");
    // Nothing due for dead/: exit 0, although dead/ and receipts/ stay unreadable.
    t.chmod("dead", 0o755);
    let (code, out, err) = t.run("$S recover $Q && chmod 000 $Q/dead && $S recover $Q");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("unreadable directories 0"), "{out}");
}

/// `tmp/` unreadable (`chmod 000`): the commands that look work, recover names `tmp/` and
/// exits 2, enqueue and work go on (found by a fresh-user trial: every command, status
/// too, failed at open with "tmp: open failed: Permission denied").
#[test]
fn an_unreadable_tmp_directory_stops_only_what_needs_it() {
    let Some(t) = AsNobody::new("unread-tmp") else {
        return;
    };
    let (code, _, err) = t.run("$S init $Q --shards 1 && echo a | $S enqueue $Q");
    assert_eq!(code, Some(0), "{err}");
    t.chmod("tmp", 0o000);
    let (code, out, err) = t.run("$S status $Q --json");
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\"ready\":1,"), "{out}");
    let (code, out, err) = t.run("$S list $Q");
    assert_eq!((code, out.lines().count()), (Some(0), 1), "{out}{err}");
    // fsck reports tmp/ and checks the rest (it exited 2, "tmp: readdir failed").
    let (code, out, err) = t.run("$S fsck $Q");
    assert_eq!(code, Some(5), "{out}{err}");
    assert!(out.contains("tmp: unreadable"), "{out}");
    assert!(
        err.contains("1 job file verified") || out.contains("1 job file verified"),
        "{out}{err}"
    );
    let (code, out, err) = t.run("$S recover $Q");
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("q/tmp") && err.contains("Permission denied"),
        "{err}"
    );
    // The default enqueue route does not go through tmp/.
    let (code, _, err) = t.run("echo b | $S enqueue $Q");
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = t.run("$S work $Q --once -- cat");
    assert_eq!((code, out.as_str()), (Some(0), "a\n"), "{err}");
}

/// An operation on a directory held by a stand-in (its parent `prio/7` not searchable) says
/// "Permission denied", naming the directory (found by a fresh-user trial: "prio/7/00: open
/// failed: Not a directory", the stand-in's own refusal).
#[test]
fn a_directory_behind_an_unsearchable_parent_is_permission_denied() {
    let Some(t) = AsNobody::new("standin-errno") else {
        return;
    };
    // Level 7 was used before (its directories are made by its first job).
    let (code, _, err) = t.run("$S init $Q --shards 1 && mkdir -p $Q/prio/7/00");
    assert_eq!(code, Some(0), "{err}");
    t.chmod("prio/7", 0o000);
    let (code, _, err) = t.run("echo x | $S enqueue $Q --priority 7");
    assert_eq!(code, Some(2), "{err}");
    // The first placement at a level opens its directories to make them durable: the one
    // this user cannot open is named.
    assert!(
        err.contains("q/prio/7:") && err.contains("Permission denied (os error 13)"),
        "{err}"
    );
    assert!(!err.contains("Not a directory"), "{err}");
}

/// `dead requeue --all` beside a dead bucket (or `dead/` itself) this user cannot read said
/// "requeued N jobs" and exited 0 while the jobs in it were never tried (breaker finding).
/// Now it names the directory and exits by the batch rule: 4 when some jobs moved, 2 when
/// none did.
#[test]
fn requeue_all_names_an_unreadable_dead_directory_and_does_not_exit_0() {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP requeue_all_names_an_unreadable_dead_directory: needs root, runs once");
        return;
    }
    let (base, bin) = nobody_sandbox("requeue-unread");
    use std::os::unix::fs::PermissionsExt;
    let (bin, q) = (bin.as_str(), base.join("q"));
    let qs = q.to_str().unwrap();
    // Four dead jobs; two of them moved into a second bucket, which is then made unreadable.
    let (code, _, err) = as_nobody(&format!(
        "{bin} init {qs} && for i in 1 2 3 4; do echo j$i | {bin} enqueue {qs} >/dev/null && \
         h=$({bin} claim {qs}) && {bin} fail {qs} \"$h\" --reason test || exit 9; done && \
         mkdir {qs}/dead/0000000000000001 && \
         ls {qs}/dead/*/*.sqj | head -2 | xargs -I{{}} mv {{}} {qs}/dead/0000000000000001/"
    ));
    assert_eq!(code, Some(0), "{err}");
    let hidden = q.join("dead/0000000000000001");
    assert_eq!(std::fs::read_dir(&hidden).unwrap().count(), 2);
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o000)).unwrap();
    let (code, out, err) = as_nobody(&format!("{bin} dead requeue {qs} --all"));
    assert_eq!(code, Some(4), "{out}{err}");
    assert_eq!(out.trim(), "requeued 2 jobs", "{err}");
    assert!(
        err.contains(&format!(
            "{qs}/dead/0000000000000001: open failed: Permission denied"
        )),
        "{err}"
    );
    // `dead purge` beside it fails the same way: it said "purged 0 dead jobs" and exited 0
    // with two dead jobs left in the bucket it could not read (breaker finding).
    let (code, out, err) = as_nobody(&format!("{bin} dead purge {qs}"));
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains(&format!(
            "{qs}/dead/0000000000000001: open failed: Permission denied"
        )),
        "{err}"
    );
    // `dead/` itself unreadable: nothing moved, exit 2.
    std::fs::set_permissions(q.join("dead"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let (code, out, err) = as_nobody(&format!("{bin} dead requeue {qs} --all"));
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains(&format!("{qs}/dead: open failed: Permission denied")),
        "{err}"
    );
    std::fs::set_permissions(q.join("dead"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _ = std::fs::remove_dir_all(&base);
}
