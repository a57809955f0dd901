//! Queues shared by real users: group-shared directories made on demand, umasks, members'
//! entries in place of shards (needs root; skipped otherwise).

use crate::common::*;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;
use steadq::{EnqueueOptions, Queue};

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

/// Test users removed (with their group) on drop.
struct Users(Vec<String>, String);

impl Drop for Users {
    fn drop(&mut self) {
        for u in &self.0 {
            let _ = Command::new("userdel").arg(u).output();
        }
        let _ = Command::new("groupdel").arg(&self.1).output();
    }
}

/// Two new users `a` and `b` in a new group, a copy of the binary both may run, and a
/// setgid directory of the group at mode 2775 to share a queue in, under
/// `/tmp/steadq-{dir}-{tag}` (outside the test's temp dir tree, which other users may not
/// traverse): (users, a, b, that base directory, the binary, the shared directory).
fn two_users_in_a_group(
    tag: &str,
    dir: &str,
) -> (
    Users,
    String,
    String,
    std::path::PathBuf,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let tag = format!("{tag}{}", std::process::id() % 100_000);
    let (group, a, b) = (format!("{tag}g"), format!("{tag}a"), format!("{tag}b"));
    let ok =
        |c: &str, args: &[&str]| assert!(Command::new(c).args(args).status().unwrap().success());
    ok("groupadd", &["-f", &group]);
    let users = Users(vec![a.clone(), b.clone()], group.clone());
    ok("useradd", &["-M", "-g", &group, &a]);
    ok("useradd", &["-M", "-g", &group, &b]);
    let base = std::path::PathBuf::from(format!("/tmp/steadq-{dir}-{tag}"));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("bin")).unwrap();
    let bin = base.join("bin/steadq");
    std::fs::copy(BIN, &bin).unwrap();
    ok(
        "chmod",
        &[
            "755",
            base.to_str().unwrap(),
            base.join("bin").to_str().unwrap(),
        ],
    );
    let shared = base.join("shared");
    std::fs::create_dir(&shared).unwrap();
    ok("chgrp", &[&group, shared.to_str().unwrap()]);
    ok("chmod", &["2775", shared.to_str().unwrap()]);
    (users, a, b, base, bin, shared)
}

/// Two real users in one group share a queue made in a setgid directory with umask 002: the
/// producer enqueues into the worker's queue, both use buckets the other created.
#[test]
fn a_group_shared_queue_works_for_two_real_users() {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP a_group_shared_queue_works_for_two_real_users: needs root, runs once");
        return;
    }
    let (_users, a, b, base, bin, shared) = two_users_in_a_group("sq", "shared");
    let (bin, q) = (bin.to_str().unwrap(), shared.join("q"));
    let q = q.to_str().unwrap();
    let steps = [
        (&a, format!("{bin} init {q}")),
        (&b, format!("echo from-b | {bin} enqueue {q}")),
        (&a, format!("echo later | {bin} enqueue {q} --delay 1s")),
        (
            &b,
            format!("echo dead-soon | {bin} enqueue {q} --max-attempts 1"),
        ),
    ];
    for (u, s) in &steps {
        let (code, err) = as_user(u, s);
        assert_eq!(code, Some(0), "as {u}: {s}: {err}");
    }
    // B makes A's delayed job ready (A's bucket; due by the test clock), A claims B's jobs.
    let (code, err) = as_user(
        &b,
        &format!("STEADQ_TEST_CLOCK_SHIFT_S=2 {bin} recover {q}"),
    );
    assert_eq!(code, Some(0), "B recovers A's bucket: {err}");
    for _ in 0..3 {
        let (code, err) = as_user(
            &a,
            &format!("h=$({bin} claim {q} --lease 1m) && {bin} ack {q} \"$h\""),
        );
        assert_eq!(code, Some(0), "A claims and acks: {err}");
    }
    let meta = std::fs::metadata(shared.join("q/delayed")).unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!(
        meta.permissions().mode() & 0o2070,
        0o2070,
        "group rwx and setgid"
    );
    assert_eq!(Queue::open(q).unwrap().status().unwrap().acked, 3);
    let gid = std::fs::metadata(&shared).unwrap().gid();
    assert_eq!(
        std::fs::metadata(shared.join("q/evidence.log"))
            .map(|m| m.gid())
            .unwrap_or(gid),
        gid
    );
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_level_made_by_another_user_is_owned_and_shared_like_ready() {
    // Level directories are made on first use (ops/levels.rs). Made by root (or by a
    // producer with umask 022) they were root's, mode 0755: the queue's own user could no
    // longer claim anything there, and the top level's job then stopped every claim.
    let Some(t) = AsNobody::new("level-owner") else {
        return;
    };
    let (code, _, err) = t.run("$S init $Q");
    assert_eq!(code, Some(0), "{err}");
    let q = Queue::open(&t.q).unwrap();
    let id = q
        .enqueue_with(
            b"urgent",
            &EnqueueOptions {
                priority: Some(7),
                ..Default::default()
            },
        )
        .unwrap()
        .id();
    use std::os::unix::fs::MetadataExt;
    let ready = std::fs::metadata(t.q.join("ready")).unwrap();
    let slot = q.find(id).unwrap();
    let slot_dir =
        t.q.join(slot.rel_path(q.id()))
            .parent()
            .unwrap()
            .to_path_buf();
    for dir in [t.q.join("prio"), t.q.join("prio/7"), slot_dir] {
        let m = std::fs::metadata(&dir).unwrap();
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o7777),
            // The sticky bit of ready/ is not copied: a slot's entries are many users' jobs.
            (ready.uid(), ready.gid(), ready.mode() & 0o6777),
            "{} against ready/",
            dir.display()
        );
    }
    drop(q);
    let (code, out, err) = t.run(
        "$S claim $Q --payload-out /dev/null && $S enqueue $Q --priority 2 </dev/null >/dev/null",
    );
    assert_eq!(code, Some(0), "{out}{err}");
}

/// Directories made on demand (a delayed bucket, a dead bucket, `keys/`) took the maker's
/// umask and owner: one producer at umask 077 refused every other user's delayed enqueue
/// for that minute and keyed enqueue for good; one dead-letter by root refused every other
/// user's for the day. Now each is given the owner, group and mode of its parent layout
/// directory, as a priority level already was.
#[test]
fn directories_made_on_demand_are_shared_like_the_queue() {
    let Some(t) = AsNobody::new("shared-buckets") else {
        return;
    };
    let qs = t.q.to_str().unwrap();
    assert!(steadq_in(&["init", qs, "--shards", "1"], b"")
        .status
        .success());
    t.open_to_all();
    // Root dead-letters a job (umask 022: today's dead bucket).
    assert!(steadq_in(&["enqueue", qs], b"root's").status.success());
    let h = steadq_in(&["claim", qs], b"");
    let h = String::from_utf8_lossy(&h.stdout).trim().to_string();
    assert!(run(&["fail", qs, &h, "--reason", "bad"]).status.success());
    // nobody, at umask 077: a delayed bucket and keys/.
    let (code, _, err) = t.run(
        "umask 077; echo n | $S enqueue $Q --delay 1h --key kn > /dev/null && \
         echo m | $S enqueue $Q > /dev/null",
    );
    assert_eq!(code, Some(0), "{err}");
    // daemon, another user: the same minute's bucket, keys/, today's dead bucket.
    let as_daemon = |script: &str| {
        let out = Command::new("setpriv")
            .args(["--reuid=daemon", "--regid=daemon", "--clear-groups"])
            .args(["sh", "-c", script])
            .env("S", t.base.join("steadq"))
            .env("Q", &t.q)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = as_daemon("echo d | $S enqueue $Q --delay 1h");
    assert_eq!(code, Some(0), "delayed: {err}");
    let (code, err) = as_daemon("echo k | $S enqueue $Q --key kd");
    assert_eq!(code, Some(0), "keyed: {err}");
    let (code, err) = as_daemon("h=$($S claim $Q) && $S fail $Q \"$h\" --reason bad");
    assert_eq!(code, Some(0), "dead-letter: {err}");
    use std::os::unix::fs::MetadataExt;
    let mode = |p: &str| std::fs::metadata(t.q.join(p)).unwrap().mode() & 0o7777;
    // ready/'s sticky bit excepted: keys/ holds the entries of many users.
    assert_eq!(mode("keys"), mode("ready") & 0o6777);
    for d in ["delayed", "dead"] {
        let parent = std::fs::metadata(t.q.join(d)).unwrap().mode();
        for e in std::fs::read_dir(t.q.join(d)).unwrap() {
            let m = e.unwrap().metadata().unwrap();
            if m.is_dir() {
                assert_eq!(m.mode() & 0o7777, parent & 0o7777, "{d}");
            }
        }
    }
}

/// The files every user of a shared queue reads or appends to, written by an admin at umask
/// 077: `config` replaced `steadq.queue` at mode 600 (every other user: "steadq.queue: open
/// failed: Permission denied", for every command), `init --max-jobs` made `steadq.limits`
/// 600 (every other user's enqueue failed), and the first ack under `--receipts none` made
/// `evidence.log` 600 (every other user's ack kept its receipt, with a warning). Now the
/// identity file keeps the mode of the one it replaces, the limits file takes the identity
/// file's, and the evidence log takes `ready/`'s read and write bits.
#[test]
fn the_files_every_user_reads_are_shared_whatever_the_admins_umask() {
    use std::os::unix::fs::PermissionsExt;
    let Some(t) = AsNobody::new("shared-files") else {
        return;
    };
    let qs = t.q.to_str().unwrap().to_string();
    assert!(run(&["init", &qs, "--shards", "2"]).status.success());
    t.open_to_all();
    let admin = |script: &str| t.run_root_077(script);
    admin("$S init $Q --max-jobs 100 && $S config $Q --receipts none");
    admin("echo a | $S enqueue $Q && h=$($S claim $Q --payload-out $Q.a) && $S ack $Q \"$h\"");
    let mode = |f: &str| std::fs::metadata(t.q.join(f)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        [
            mode("steadq.queue"),
            mode("steadq.limits"),
            mode("evidence.log")
        ],
        [0o666, 0o666, 0o666],
        "steadq.queue, steadq.limits, evidence.log"
    );
    let (code, out, err) =
        t.run("echo b | $S enqueue $Q >/dev/null && h=$($S claim $Q --payload-out $Q.b) && $S ack $Q \"$h\"");
    assert_eq!(code, Some(0), "{out} {err}");
    assert!(!err.contains("receipt kept"), "{err}");
    let evidence = std::fs::read_to_string(t.q.join("evidence.log")).unwrap();
    assert_eq!(evidence.lines().count(), 2, "{evidence}");
    // Shared like ready/: a queue shared by a group at 2770 gives 660.
    t.chmod("ready", 0o2770);
    std::fs::rename(t.q.join("evidence.log"), t.q.join("evidence.log.old")).unwrap();
    admin("echo c | $S enqueue $Q && h=$($S claim $Q --payload-out $Q.c) && $S ack $Q \"$h\"");
    assert_eq!(mode("evidence.log"), 0o660);
}

/// `fsck --quarantine` run by an admin at umask 077 made `quarantine/` and its levels 700
/// (breaker finding): the next user's `fsck --quarantine` could not move anything there and
/// exited with an error. They are now made like `dead/`.
#[test]
fn quarantine_made_by_an_admin_at_umask_077_is_shared_like_dead() {
    use std::os::unix::fs::PermissionsExt;
    let Some(t) = AsNobody::new("shared-quarantine") else {
        return;
    };
    let qs = t.q.to_str().unwrap().to_string();
    assert!(run(&["init", &qs, "--shards", "2"]).status.success());
    t.open_to_all();
    std::fs::write(t.q.join("ready/01/stray.txt"), b"not a job").unwrap();
    t.run_root_077("$S fsck $Q --quarantine >/dev/null; true");
    let mode = |f: &str| std::fs::metadata(t.q.join(f)).unwrap().permissions().mode() & 0o7777;
    let dead = mode("dead");
    assert_eq!(
        [
            mode("quarantine"),
            mode("quarantine/ready"),
            mode("quarantine/ready/01")
        ],
        [dead; 3],
        "quarantine levels, like dead/ ({dead:o})"
    );
    assert!(t.q.join("quarantine/ready/01/stray.txt").exists());
    // Another user's stray goes the same way.
    std::fs::write(t.q.join("ready/01/other.txt"), b"nor this").unwrap();
    std::fs::set_permissions(
        t.q.join("ready/01/other.txt"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    let (code, out, err) = t.run("$S fsck $Q --quarantine");
    assert!(
        t.q.join("quarantine/ready/01/other.txt").exists(),
        "{code:?} {out} {err}"
    );
}

/// A producer at umask 077 made job files and key entries at mode 600 in a queue shared by
/// all (breaker trial, faults F1 and F2): a worker of another user could not open its jobs
/// (each claim gave the job back; `claim` exited 2 naming it) and a producer of another user
/// with the same key exited 2 ("keys/<hash>: open failed") instead of naming the job. Now a
/// new job file and key entry get the read bits of `ready/` that the umask took away.
#[test]
fn jobs_and_keys_of_a_producer_at_umask_077_are_readable_by_the_queues_users() {
    use std::os::unix::fs::PermissionsExt;
    let Some(t) = AsNobody::new("umask-jobs") else {
        return;
    };
    let qs = t.q.to_str().unwrap().to_string();
    assert!(run(&["init", &qs, "--shards", "2"]).status.success());
    t.open_to_all();
    let producer = |script: &str| t.run_root_077(script);
    producer("echo plain | $S enqueue $Q");
    let keyed = producer("echo keyed | $S enqueue $Q --key order-7");
    let mut modes = Vec::new();
    for d in ["ready/00", "ready/01", "keys"] {
        for e in std::fs::read_dir(t.q.join(d)).unwrap() {
            modes.push(e.unwrap().metadata().unwrap().permissions().mode() & 0o777);
        }
    }
    assert_eq!(modes, [0o644; 3], "two jobs and a key entry");
    let (code, out, err) = t.run(
        "for i in 1 2; do h=$($S claim $Q --payload-out $Q.p) && cat $Q.p && $S ack $Q \"$h\" \
         >/dev/null || exit 1; done",
    );
    assert_eq!(code, Some(0), "{out} {err}");
    let mut got: Vec<&str> = out.lines().collect();
    got.sort();
    assert_eq!(got, ["keyed", "plain"], "{err}");
    let (code, out, err) = t.run("echo again | $S enqueue $Q --key order-7");
    assert_eq!((code, out.trim()), (Some(0), keyed.as_str()), "{err}");
    assert!(err.contains("duplicate"), "{err}");
}

/// A directory made on demand and left unshared (its maker killed between `mkdirat` and the
/// `fchown`/`fchmod` that share it, or changed by hand) refused every other user for good,
/// and `fsck` said nothing (breaker finding F4). Now `fsck` names it (exit 5), and root's
/// `fsck --quarantine` shares it in place like its template; a user who may not change it
/// is told so and it is left.
#[test]
fn a_made_directory_left_unshared_is_reported_and_shared_by_fsck() {
    let Some(t) = AsNobody::new("unshared-made-dir") else {
        return;
    };
    let (code, _, err) = t.run("$S init $Q --shards 1");
    assert_eq!(code, Some(0), "{err}");
    t.open_to_all();
    // Made and shared by root's enqueues, then left as a killed maker leaves them: root's,
    // at root's umask.
    t.run_root_077("echo high | $S enqueue $Q --priority 5; echo later | $S enqueue $Q --delay 1h");
    let bucket = format!("delayed/{}", t.ls("delayed")[0]);
    let root_own = format!(
        "chown root:root $Q/prio/5 $Q/{bucket} && chmod 700 $Q/prio/5 && chmod 755 $Q/{bucket} \
         && mkdir -m 700 $Q/keys"
    );
    t.run_root_077(&root_own);
    std::thread::sleep(Duration::from_millis(1100)); // past the moment of their making
    let (code, _, err) = t.run("echo x | $S enqueue $Q --priority 5");
    assert_eq!(code, Some(2), "refused at prio/5: {err}");
    let line = |rel: &str, mode: &str, like: &str| {
        format!(
            "{rel}: not shared like {like}/: mode {mode} group 0, where {like}/ has mode 777 \
             group 65534; other users of the queue may be refused here"
        )
    };
    let want = [
        line("keys", "700", "ready"),
        line("prio/5", "700", "ready"),
        line(&bucket, "755", "delayed"),
    ];
    // Reported to every user; one who may not change them is told so, and they are left.
    let (code, out, err) = t.run("$S fsck $Q");
    assert_eq!(code, Some(5), "{out}{err}");
    let got: Vec<&str> = out.lines().collect();
    assert_eq!(got.len(), 3, "{out}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(
            *g,
            format!("{w} (`steadq fsck --quarantine` shares it in place)")
        );
    }
    let (code, out, err) = t.run("$S fsck $Q --quarantine");
    assert_eq!(code, Some(5), "{out}{err}");
    assert_eq!(
        err.matches("this user may not change its mode").count(),
        3,
        "{err}"
    );
    // Root shares each in place, owner included.
    let out = steadq_in(&["fsck", t.q.to_str().unwrap(), "--quarantine"], b"");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    let got: Vec<&str> = text.lines().collect();
    let likes = ["ready", "ready", "delayed"];
    for ((g, w), like) in got.iter().zip(&want).zip(likes) {
        assert_eq!(*g, format!("{w} (now shared like {like}/)"));
    }
    use std::os::unix::fs::MetadataExt;
    for rel in ["keys", "prio/5", bucket.as_str()] {
        let m = std::fs::symlink_metadata(t.q.join(rel)).unwrap();
        assert_eq!(
            (m.mode() & 0o7777, m.uid(), m.gid()),
            (0o777, 65534, 65534),
            "{rel}"
        );
    }
    let (code, _, err) = t.run(
        "echo x | $S enqueue $Q --priority 5 && echo y | $S enqueue $Q --key k && \
         echo z | $S enqueue $Q --delay 1h && $S fsck $Q",
    );
    assert_eq!(code, Some(0), "{err}");
}

/// `init` of an existing queue by a user who may not write it warned that `evidence.log`
/// was "not made now; the first compaction makes it", though it was there (breaker
/// finding): its open for appending failed with `EACCES`. An existing file draws no warning.
#[test]
fn init_of_an_existing_queue_it_may_not_write_does_not_warn_about_evidence_log() {
    let Some(t) = AsNobody::new("init-evidence") else {
        return;
    };
    let o = run(&["init", t.q.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(t.q.join("evidence.log").exists());
    let (code, _, err) = t.run("$S init $Q");
    assert!(!err.contains("evidence.log"), "{code:?}: {err}");
    assert!(!err.contains("not made now"), "{code:?}: {err}");
    // Where it is missing and cannot be made, the warning stays.
    std::fs::remove_file(t.q.join("evidence.log")).unwrap();
    let (code, _, err) = t.run("$S init $Q");
    assert!(
        err.contains("evidence.log: not made now"),
        "{code:?}: {err}"
    );
    let _ = std::fs::remove_dir_all(&t.base);
}

/// Two real users of one group, the owner `a` (who ran `init`) and a member `b`. `ready/`
/// and `receipts/` get the sticky bit (the shards do not): `b` can no longer move `a`'s
/// shard directories away, and both still move each other's job files. On a queue without
/// the bit (made before it), `b` replaced `ready/01` by her own directory and `ready/00` by
/// a symlink: every worker, enqueue and `init` of `a` failed (exit 2) and the shard's jobs
/// were hidden. Now both are skipped with a warning naming them, enqueues go to the other
/// shard, claims go on, `init` exits 0 (and sets the bit again), and fsck exits 5 naming
/// both.
#[test]
fn a_members_directory_or_symlink_in_place_of_a_shard_is_skipped() {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP a_members_directory_or_symlink_in_place_of_a_shard_is_skipped: needs root");
        return;
    }
    let (_users, a, b, base, bin, shared) = two_users_in_a_group("sw", "swap");
    let ok =
        |c: &str, args: &[&str]| assert!(Command::new(c).args(args).status().unwrap().success());
    let (bin, qp) = (bin.to_str().unwrap(), shared.join("q"));
    let q = qp.to_str().unwrap();
    let must = |u: &str, s: &str| {
        let (code, err) = as_user(u, s);
        assert_eq!(code, Some(0), "as {u}: {s}: {err}");
        err
    };
    must(&a, &format!("{bin} init {q} --shards 2"));
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = |rel: &str| {
        std::fs::symlink_metadata(qp.join(rel))
            .unwrap()
            .permissions()
            .mode()
    };
    for rel in ["ready", "receipts"] {
        assert_eq!(mode(rel) & 0o1000, 0o1000, "{rel}/ is sticky");
    }
    for rel in ["ready/00", "ready/01", "receipts/00", "receipts/01"] {
        assert_eq!(mode(rel) & 0o1000, 0, "{rel}: not sticky");
    }
    // The member may not move the owner's shard; both move each other's jobs.
    let (code, _) = as_user(&b, &format!("mv {q}/ready/01 {q}/ready/old"));
    assert_ne!(code, Some(0), "sticky ready/ refuses the member's rename");
    for i in 0..4 {
        let u = if i % 2 == 0 { &a } else { &b };
        must(u, &format!("echo job{i} | {bin} enqueue {q}"));
    }
    for i in 0..4 {
        let u = if i % 2 == 0 { &b } else { &a };
        must(
            u,
            &format!("h=$({bin} claim {q} --lease 1m) && {bin} ack {q} \"$h\""),
        );
    }

    // A queue without the bit (made before it): the member swaps both shards.
    ok("chmod", &["g+w,-t", qp.join("ready").to_str().unwrap()]);
    must(&b, &format!("mv {q}/ready/01 {q}/ready.old && mkdir {q}/ready/01 && mv {q}/ready/00 {q}/ready.old0 && ln -s /tmp {q}/ready/00"));
    // With both shards gone no enqueue can land: one shard back for the owner (`a` makes
    // it, as `init` would).
    must(&a, &format!("rm {q}/ready/00"));
    std::fs::remove_dir(qp.join("ready.old0")).unwrap();
    let err = must(&a, &format!("{bin} init {q}"));
    assert!(
        err.contains(&format!("{q}/ready/01: owned by uid")),
        "{err}"
    );
    assert_eq!(
        mode("ready") & 0o1000,
        0o1000,
        "init gives an existing queue the bit"
    );
    // Now the symlink again, with the bit: only the owner (or root) can put it there.
    std::fs::remove_dir(qp.join("ready/00")).unwrap();
    std::os::unix::fs::symlink("/tmp", qp.join("ready/00")).unwrap();
    let err = must(&a, &format!("{bin} init {q}"));
    assert!(
        err.contains(&format!("{q}/ready/00: not a directory")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{q}/ready/01: owned by uid")),
        "{err}"
    );
    // Both shards are unusable: an enqueue fails naming a shard, changes nothing.
    let (code, err) = as_user(&a, &format!("echo x | {bin} enqueue {q}"));
    assert_eq!(code, Some(2), "{err}");
    // The symlink replaced by the owner's shard: enqueues all go there, none to `b`'s.
    std::fs::remove_file(qp.join("ready/00")).unwrap();
    must(&a, &format!("{bin} init {q}"));
    for i in 0..8 {
        let u = if i % 2 == 0 { &a } else { &b };
        must(u, &format!("echo more{i} | {bin} enqueue {q}"));
    }
    assert_eq!(std::fs::read_dir(qp.join("ready/01")).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(qp.join("ready/00")).unwrap().count(), 8);
    // A job file `b` plants in her directory is never claimed.
    let (bs, _) = (std::fs::metadata(qp.join("ready/01")).unwrap().uid(), 0);
    assert_ne!(bs, std::fs::metadata(qp.join("ready")).unwrap().uid());
    for _ in 0..8 {
        must(
            &a,
            &format!("h=$({bin} claim {q} --lease 1m) && {bin} ack {q} \"$h\""),
        );
    }
    let (code, err) = as_user(&a, &format!("{bin} fsck {q} >&2"));
    assert_eq!(code, Some(5), "{err}");
    assert!(err.contains("ready/01: owned by uid"), "{err}");
    std::fs::remove_dir_all(&base).unwrap();
}

/// A member who holds the counting lock (`flock` of the queue directory, which she may open)
/// for as long as she likes does not hang the owner's `compact`: it gives up after
/// `COUNTS_LOCK_WAIT` (5 s), not done, naming the queue and the lock; nothing removed.
#[test]
fn a_members_flock_on_the_queue_does_not_hang_compaction() {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP a_members_flock_on_the_queue_does_not_hang_compaction: needs root");
        return;
    }
    let (_users, owner, mallory, base, bin, shared) = two_users_in_a_group("sqk", "countlock");
    let (bin, q) = (bin.to_str().unwrap(), shared.join("q"));
    let q = q.to_str().unwrap();
    let (code, err) = as_user(
        &owner,
        &format!("{bin} init {q} && echo a | {bin} enqueue {q}"),
    );
    assert_eq!(code, Some(0), "{err}");
    // Mallory takes the lock and keeps it (flock(1) opens the directory read-only).
    let mut holder = Command::new("su")
        .args([
            "-s",
            "/bin/sh",
            &mallory,
            "-c",
            &format!("exec flock -x {q} sleep 30"),
        ])
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let held = || {
        let o = Command::new("flock")
            .args(["-n", "-x", q, "true"])
            .status()
            .unwrap();
        !o.success()
    };
    let t = std::time::Instant::now();
    while !held() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "flock(1) never took the lock"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let t = std::time::Instant::now();
    let mut compact = Command::new(BIN)
        .args(["compact", q, "--older-than", "0s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(s) = compact.try_wait().unwrap() {
            break Some(s);
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = compact.kill();
            let _ = compact.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = t.elapsed();
    let group = format!("-{}", holder.id());
    let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
    let _ = holder.wait();
    // su may leave flock(1) and its sleep running as her: end them by pid, or userdel
    // refuses and the users outlive the test.
    let t = std::time::Instant::now();
    loop {
        let o = Command::new("pgrep")
            .args(["-u", &mallory])
            .output()
            .unwrap();
        let pids = text(&o.stdout);
        if pids.trim().is_empty() || t.elapsed() > Duration::from_secs(5) {
            break;
        }
        for pid in pids.split_whitespace() {
            let _ = Command::new("kill").args(["-KILL", pid]).status();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&base);
    let status = status.expect("compact still waiting for the member's lock after 20 s");
    let out = compact.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("compact gave up in {took:?}: {err}");
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("counting lock") && err.contains(q), "{err}");
    assert!(
        took >= steadq::COUNTS_LOCK_WAIT && took < Duration::from_secs(10),
        "{took:?}"
    );
}

/// A delayed bucket a member makes first at mode 700 (so the owner cannot read it) does not
/// fail the owner's `wait --empty`: it is left unwatched (status reports it unread) and the
/// wait answers as before: done when the rest is empty, timed out while a job is ready. It
/// failed at once (exit 2, "open failed: Permission denied" naming the queue).
#[test]
fn a_members_private_bucket_does_not_fail_the_owners_wait_empty() {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP a_members_private_bucket_does_not_fail_the_owners_wait_empty: needs root");
        return;
    }
    let (_users, owner, mallory, base, bin, shared) = two_users_in_a_group("sqw", "waitempty");
    let (bin, q) = (bin.to_str().unwrap(), shared.join("q"));
    let q = q.to_str().unwrap();
    let (code, err) = as_user(&owner, &format!("{bin} init {q}"));
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = as_user(
        &mallory,
        &format!("umask 077; mkdir {q}/delayed/00000000000000ff"),
    );
    assert_eq!(code, Some(0), "{err}");
    let t = std::time::Instant::now();
    let (code, err) = as_user(&owner, &format!("{bin} wait --empty {q} --timeout 5s"));
    let empty_took = t.elapsed();
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = as_user(&owner, &format!("echo a | {bin} enqueue {q}"));
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = as_user(&owner, &format!("{bin} wait --empty {q} --timeout 300ms"));
    let _ = std::fs::remove_dir_all(&base);
    assert_eq!(code, Some(3), "timed out with a job ready: {err}");
    assert!(empty_took < Duration::from_secs(3), "{empty_took:?}");
}

/// The directories of groups and dependencies are made on first use, like buckets: made by
/// one user at umask 077 they must still let the queue's other users take a group slot,
/// reclaim one, and move a waiting job when its dependency is acked.
#[test]
fn group_and_dependency_directories_are_shared_like_the_queue() {
    let Some(t) = AsNobody::new("shared-workflow") else {
        return;
    };
    let qs = t.q.to_str().unwrap();
    assert!(steadq_in(&["init", qs, "--shards", "1"], b"")
        .status
        .success());
    t.open_to_all();
    assert!(
        run(&["limit", qs, "--group", "ffmpeg", "--max-leased", "1"])
            .status
            .success()
    );
    // nobody, at umask 077: the first grouped claim (groups/, groups/ffmpeg, its slot) and the
    // first dependent (waiting/, needs/, after/).
    let (code, out, err) = t.run(
        "umask 077; a=$(echo a | $S enqueue $Q --group ffmpeg) && \
         echo b | $S enqueue $Q --after $a > /dev/null && \
         $S claim $Q --lease 1s > /dev/null && echo $a",
    );
    assert_eq!(code, Some(0), "{err}");
    let first = out.trim().to_string();
    use std::os::unix::fs::MetadataExt;
    let ready = std::fs::metadata(t.q.join("ready")).unwrap();
    for d in ["groups", "groups/ffmpeg", "waiting", "needs", "after"] {
        let m = std::fs::metadata(t.q.join(d)).unwrap();
        // Its mode: nobody may not give root the directory (the owner is copied only by
        // a user who may).
        assert_eq!(
            m.mode() & 0o7777,
            ready.mode() & 0o6777,
            "{d} against ready/"
        );
    }
    // daemon, another user: after nobody's lease expired, it reclaims nobody's slot, and its
    // ack of the dependency moves nobody's waiting job to ready.
    std::thread::sleep(Duration::from_millis(1100));
    let out = Command::new("setpriv")
        .args(["--reuid=daemon", "--regid=daemon", "--clear-groups"])
        .args([
            "sh",
            "-c",
            "h=$($S claim $Q) && echo \"$h\" && $S ack $Q \"$h\"",
        ])
        .env("S", t.base.join("steadq"))
        .env("Q", &t.q)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{o}{e}");
    assert!(o.contains(&first), "daemon claimed the grouped job: {o}");
    let s = Queue::open(&t.q).unwrap().status().unwrap();
    assert_eq!((s.waiting, s.ready, s.acked), (0, 1, 1), "{s:?}");
}

/// `sh -c script` as `user` at umask 007 (the recipe of a queue shared by a group):
/// (code, stdout, stderr).
fn as_member(user: &str, script: &str) -> (Option<i32>, String, String) {
    let out = Command::new("su")
        .args(["-s", "/bin/sh", user, "-c", &format!("umask 007; {script}")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// A member who makes `waiting/`, `needs/`, `after/` and `groups/` first, at mode 700
/// (hostile-user trial): the owner's `status` (text and JSON), `top` and `wait --empty`
/// exited 2 with no counts, `recover` failed, and fsck named only `groups` for the owner and
/// nothing for root, whose `--quarantine` changed nothing. Now status skips `waiting/` with
/// a warning naming it and gives every other count, recover does the rest and names what it
/// could not read, fsck names all four (for the owner and for root), and root's
/// `fsck --quarantine` shares them again like `ready/`.
#[test]
fn a_members_private_dependency_and_group_directories_are_skipped_named_and_shared_again() {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP a_members_private_dependency_and_group_directories: needs root");
        return;
    }
    let (_users, owner, mallory, base, bin, shared) = two_users_in_a_group("sqd", "depdirs");
    assert!(Command::new("chmod")
        .args(["2770", shared.to_str().unwrap()])
        .status()
        .unwrap()
        .success());
    let (bin, qp) = (bin.to_str().unwrap(), shared.join("q"));
    let q = qp.to_str().unwrap();
    let must = |u: &str, s: &str| {
        let (code, out, err) = as_member(u, s);
        assert_eq!(code, Some(0), "as {u}: {s}: {out}{err}");
        (out, err)
    };
    must(&owner, &format!("{bin} init {q} --shards 1"));
    must(
        &owner,
        &format!("echo a | {bin} enqueue {q} && echo b | {bin} enqueue {q}"),
    );
    let dirs = ["groups", "waiting", "needs", "after"];
    must(
        &mallory,
        &format!("cd {q} && mkdir -m 700 {}", dirs.join(" ")),
    );

    // status: every count but the waiting jobs, `waiting` named.
    let (out, err) = must(&owner, &format!("{bin} status {q}"));
    assert!(out.contains("ready           2\n"), "{out}");
    assert!(
        out.contains("unread   waiting  this user cannot read"),
        "{out}"
    );
    assert!(
        err.contains(&format!("{q}/waiting: open failed: Permission denied")),
        "{err}"
    );
    let (out, _) = must(&owner, &format!("{bin} status --json {q}"));
    assert!(out.contains(r#""ready":2,"#), "{out}");
    assert!(out.contains(r#""unreadable_dirs":["waiting"]"#), "{out}");
    let (out, _) = must(&owner, &format!("{bin} top {q}"));
    assert!(out.contains("ready"), "{out}");
    // wait --empty: times out with jobs ready (3), it does not fail (2).
    let (code, _, err) = as_member(&owner, &format!("{bin} wait --empty {q} --timeout 200ms"));
    assert_eq!(code, Some(3), "{err}");

    // recover: nothing failed; the directories it could not read are named.
    let (code, out, err) = as_member(&owner, &format!("{bin} recover {q}"));
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(out.contains("failed 0; unreadable directories 2"), "{out}");
    for d in ["after", "waiting"] {
        assert!(
            err.contains(&format!("{q}/{d}: cannot read this directory")),
            "{d}: {err}"
        );
    }

    // fsck names each of the four, for the owner and for root.
    let line = |d: &str| {
        format!(
            "{d}: not shared like ready/: mode 2700 group {gid}, where ready/ has mode 2770 \
             group {gid}; other users of the queue may be refused here",
            gid = std::fs::metadata(&shared)
                .map(|m| {
                    use std::os::unix::fs::MetadataExt;
                    m.gid()
                })
                .unwrap()
        )
    };
    let want: Vec<String> = dirs
        .iter()
        .map(|d| {
            format!(
                "{} (`steadq fsck --quarantine` shares it in place)",
                line(d)
            )
        })
        .collect();
    let (code, out, err) = as_member(&owner, &format!("{bin} fsck {q}"));
    assert_eq!(code, Some(5), "{out}{err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), want, "{out}");
    let out = run(&["fsck", q]);
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(text(&out.stdout).lines().collect::<Vec<_>>(), want);
    // The owner may not change mallory's directories: told so, left.
    let (code, out, err) = as_member(&owner, &format!("{bin} fsck {q} --quarantine"));
    assert_eq!(code, Some(5), "{out}{err}");
    assert_eq!(
        err.matches("this user may not change its mode").count(),
        4,
        "{err}"
    );
    // Root shares them again like ready/: owner, group and mode.
    let out = run(&["fsck", q, "--quarantine"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shared_now: Vec<String> = dirs
        .iter()
        .map(|d| format!("{} (now shared like ready/)", line(d)))
        .collect();
    assert_eq!(text(&out.stdout).lines().collect::<Vec<_>>(), shared_now);
    use std::os::unix::fs::MetadataExt;
    let ready = std::fs::metadata(qp.join("ready")).unwrap();
    for d in dirs {
        let m = std::fs::metadata(qp.join(d)).unwrap();
        assert_eq!(
            (m.mode() & 0o7777, m.uid(), m.gid()),
            (ready.mode() & 0o6777, ready.uid(), ready.gid()),
            "{d}"
        );
    }
    // The owner's dependencies and counts work again.
    let (out, _) = must(
        &owner,
        &format!(
            "a=$(echo a | {bin} enqueue {q}) && echo c | {bin} enqueue {q} --after $a \
             >/dev/null && {bin} status --json {q} && {bin} fsck {q}"
        ),
    );
    assert!(out.contains(r#""ready":3,"#), "{out}");
    assert!(out.contains(r#""waiting":1,"#), "{out}");
    assert!(out.contains(r#""unreadable_dirs":[]"#), "{out}");
    let _ = std::fs::remove_dir_all(&base);
}

/// fsck named a `needs/<id>` directory it may not open (a member's, at mode 000) "foreign:
/// symlink": it is an unreadable directory, and is named as one.
#[test]
fn an_unreadable_marker_directory_is_named_as_one() {
    let Some(t) = AsNobody::new("marker-000") else {
        return;
    };
    let qs = t.q.to_str().unwrap();
    assert!(steadq_in(&["init", qs, "--shards", "1"], b"")
        .status
        .success());
    let q = Queue::open(&t.q).unwrap();
    let a = q.enqueue(b"a").unwrap();
    let o = EnqueueOptions {
        after: vec![a],
        ..EnqueueOptions::default()
    };
    let b = q.enqueue_with(b"b", &o).unwrap().id();
    t.open_to_all();
    t.chmod(&format!("needs/{b}"), 0o000);
    let (code, out, err) = t.run("$S fsck $Q");
    assert_eq!(code, Some(5), "{out}{err}");
    assert_eq!(
        out.lines().next().unwrap(),
        format!(
            "needs/{b}: unreadable directory: Permission denied (os error 13) (its entries are \
             not checked; left for a user who may read it, or for its owner or root to share \
             again)"
        ),
        "{out}"
    );
    assert!(!out.contains("symlink"), "{out}");
    // Never moved by --quarantine.
    let (_, out, err) = t.run("$S fsck $Q --quarantine");
    assert!(!out.contains("moved to quarantine"), "{out}{err}");
    assert!(t.q.join(format!("needs/{b}")).is_dir());
}
