//! Who can reach a queue shared by a group, checked with real users: the recipe of
//! docs/security.md (parent 2770, umask 007) lets members work and keeps everyone else out,
//! and `init` warns about a layout that lets others read payloads or keeps the group out.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

/// Runs `sh -c script` as `user` with `umask`, returning (exit code, stdout, stderr).
fn as_user(user: &str, umask: &str, script: &str) -> (Option<i32>, String, String) {
    let out = Command::new("su")
        .args([
            "-s",
            "/bin/sh",
            user,
            "-c",
            &format!("umask {umask}; {script}"),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Test users and their group, removed on drop with the directory they worked in.
struct Users {
    names: Vec<String>,
    groups: Vec<String>,
    base: PathBuf,
}

impl Drop for Users {
    fn drop(&mut self) {
        for u in &self.names {
            let _ = Command::new("userdel").arg(u).output();
        }
        for g in &self.groups {
            let _ = Command::new("groupdel").arg(g).output();
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn run(c: &str, args: &[&str]) {
    let st = Command::new(c).args(args).status().unwrap();
    assert!(st.success(), "{c} {args:?}");
}

/// Two members (`owner`, `member`) of a group and one user outside it (`outsider`, in a group
/// of its own), and a copy of the binary all three can run, under `/tmp` (the test's temp
/// dir may not be searchable by other users).
fn three_users(tag: &str) -> (Users, [String; 3], String, String) {
    let tag = format!("{tag}{}", std::process::id() % 100_000);
    let (group, other) = (format!("{tag}g"), format!("{tag}o"));
    let names = [format!("{tag}a"), format!("{tag}b"), format!("{tag}e")];
    let base = PathBuf::from(format!("/tmp/steadq-{tag}"));
    let _ = std::fs::remove_dir_all(&base);
    run("groupadd", &["-f", &group]);
    run("groupadd", &["-f", &other]);
    let users = Users {
        names: names.to_vec(),
        groups: vec![group.clone(), other.clone()],
        base: base.clone(),
    };
    run("useradd", &["-M", "-g", &group, &names[0]]);
    run("useradd", &["-M", "-g", &group, &names[1]]);
    run("useradd", &["-M", "-g", &other, &names[2]]);
    std::fs::create_dir_all(base.join("bin")).unwrap();
    let bin = base.join("bin/steadq");
    std::fs::copy(BIN, &bin).unwrap();
    for p in [&base, &base.join("bin")] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (users, names, group, bin.to_str().unwrap().to_string())
}

fn needs_root(name: &str) -> bool {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
        eprintln!("SKIP {name}: needs root (real users), runs once");
        return false;
    }
    true
}

/// The recipe: a parent at 2770 owned by the group, everything run with umask 007. Members
/// enqueue, claim and ack; the outsider can neither read a payload (not even by a job file's
/// path) nor enqueue; `init` says nothing.
#[test]
fn the_shared_queue_recipe_keeps_outsiders_out() {
    if !needs_root("the_shared_queue_recipe_keeps_outsiders_out") {
        return;
    }
    let (users, [owner, member, outsider], group, bin) = three_users("sqt");
    let parent = users.base.join("shared");
    std::fs::create_dir(&parent).unwrap();
    run(
        "chown",
        &[&format!("{owner}:{group}"), parent.to_str().unwrap()],
    );
    run("chmod", &["2770", parent.to_str().unwrap()]);
    let q = parent.join("q");
    let q = q.to_str().unwrap();
    let (code, _, err) = as_user(&owner, "007", &format!("{bin} init {q}"));
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("WARN"), "the recipe draws no warning: {err}");
    let (code, _, err) = as_user(&member, "007", &format!("echo secret | {bin} enqueue {q}"));
    assert_eq!(code, Some(0), "a member enqueues: {err}");
    let job = files(std::path::Path::new(q), "ready")
        .into_iter()
        .next()
        .expect("one job");
    // The outsider: no payload by path, no listing, no enqueue.
    let path = format!("{q}/{job}");
    let (code, out, _) = as_user(&outsider, "007", &format!("cat {path}"));
    assert_ne!(code, Some(0), "the outsider read a job file: {out}");
    let (code, _, err) = as_user(&outsider, "007", &format!("echo x | {bin} enqueue {q}"));
    assert_ne!(code, Some(0), "the outsider enqueued");
    assert!(err.contains(q), "the refusal names the queue: {err}");
    let (code, out, _) = as_user(&outsider, "007", &format!("{bin} claim {q} --lease 1m"));
    assert_ne!(code, Some(0), "the outsider claimed: {out}");
    // The owner's worker takes the member's job.
    let (code, out, err) = as_user(
        &owner,
        "007",
        &format!("h=$({bin} claim {q} --lease 1m --payload-out {q}.payload) && {bin} ack {q} \"$h\" >/dev/null && cat {q}.payload"),
    );
    assert_eq!((code, out.trim()), (Some(0), "secret"), "{err}");
}

/// A member may rename entries of the queue's parent (2770): a symlink of theirs put at the
/// queue's path, to a private queue of root's, is not followed by root's `claim` (which
/// would take a private job and write its payload where the member reads it). A symlink
/// of root's or of the parent's owner there is followed as before.
#[test]
fn a_members_symlink_at_the_queue_path_is_not_followed() {
    if !needs_root("a_members_symlink_at_the_queue_path_is_not_followed") {
        return;
    }
    let (users, [owner, member, _], group, bin) = three_users("sqs");
    let parent = users.base.join("shared");
    std::fs::create_dir(&parent).unwrap();
    run(
        "chown",
        &[&format!("{owner}:{group}"), parent.to_str().unwrap()],
    );
    run("chmod", &["2770", parent.to_str().unwrap()]);
    let q = parent.join("q");
    let (q, p) = (q.to_str().unwrap(), parent.to_str().unwrap());
    let (code, _, err) = as_user(&owner, "007", &format!("{bin} init {q}"));
    assert_eq!(code, Some(0), "{err}");
    let private = users.base.join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let pq = private.join("pq");
    let pq = pq.to_str().unwrap();
    let o = Command::new(BIN).args(["init", pq]).output().unwrap();
    assert!(o.status.success());
    let mut c = Command::new(BIN)
        .args(["enqueue", pq])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    feed(c.stdin.take(), b"private");
    assert!(c.wait().unwrap().success());
    let (code, _, err) = as_user(
        &member,
        "007",
        &format!("mv {q} {q}.real && ln -s {pq} {q}"),
    );
    assert_eq!(code, Some(0), "{err}");
    let out = format!("{p}/payload");
    let o = Command::new(BIN)
        .args(["claim", q, "--payload-out", &out])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(q) && err.contains("symlink"), "{err}");
    assert!(std::fs::metadata(&out).is_err(), "no payload written");
    let st = Command::new(BIN)
        .args(["status", "--json", pq])
        .output()
        .unwrap();
    let st = String::from_utf8_lossy(&st.stdout);
    assert!(
        st.contains("\"ready\":1,"),
        "the private job is still ready: {st}"
    );
    // Root's own symlink at the path is followed.
    std::fs::remove_file(q).unwrap();
    std::os::unix::fs::symlink(format!("{q}.real"), q).unwrap();
    let o = Command::new(BIN).args(["status", q]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Root runs the README's script (`claim --payload-out /tmp/...`) with its usual umask 022:
/// the payload file it makes is not readable by a user outside the queue's group.
#[test]
fn a_payload_file_made_under_umask_022_is_not_readable_by_an_outsider() {
    if !needs_root("a_payload_file_made_under_umask_022_is_not_readable_by_an_outsider") {
        return;
    }
    let (users, [owner, member, outsider], group, bin) = three_users("sqp");
    let parent = users.base.join("shared");
    std::fs::create_dir(&parent).unwrap();
    run(
        "chown",
        &[&format!("{owner}:{group}"), parent.to_str().unwrap()],
    );
    run("chmod", &["2770", parent.to_str().unwrap()]);
    let q = parent.join("q");
    let q = q.to_str().unwrap();
    let (code, _, err) = as_user(&owner, "007", &format!("{bin} init {q}"));
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = as_user(&member, "007", &format!("echo secret | {bin} enqueue {q}"));
    assert_eq!(code, Some(0), "{err}");
    // The base directory is searchable by everyone, as /tmp is.
    let payload = users.base.join("payload");
    let o = Command::new("sh")
        .args([
            "-c",
            &format!(
                "umask 022; h=$({bin} claim {q} --payload-out {}) && {bin} ack {q} \"$h\"",
                payload.display()
            ),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&payload).unwrap(), b"secret\n");
    let mode = std::fs::metadata(&payload).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "0660 less umask 022");
    let (code, out, _) = as_user(&outsider, "007", &format!("cat {}", payload.display()));
    assert_ne!(code, Some(0), "the outsider read the payload file: {out}");
}

/// `init` warns, naming the directory, when others can read payloads (README's earlier recipe:
/// parent 2775, umask 002) and when a shared queue's group cannot write (umask 022); the
/// warnings change nothing (exit 0, the queue works).
#[test]
fn init_warns_when_others_can_read_or_the_group_cannot_write() {
    if !needs_root("init_warns_when_others_can_read_or_the_group_cannot_write") {
        return;
    }
    let (users, [owner, _, outsider], group, bin) = three_users("sqw");
    for (mode, umask, want) in [
        (
            "2775",
            "002",
            &["every local user can read this queue's payloads"][..],
        ),
        (
            "2775",
            "022",
            &[
                "every local user can read this queue's payloads",
                "members of the queue's group",
            ][..],
        ),
        ("2770", "022", &["members of the queue's group"][..]),
        ("2770", "007", &[][..]),
    ] {
        let parent = users.base.join(format!("p{mode}-{umask}"));
        std::fs::create_dir(&parent).unwrap();
        run(
            "chown",
            &[&format!("{owner}:{group}"), parent.to_str().unwrap()],
        );
        run("chmod", &[mode, parent.to_str().unwrap()]);
        let q = parent.join("q");
        let q = q.to_str().unwrap();
        let (code, _, err) = as_user(&owner, umask, &format!("{bin} init {q}"));
        assert_eq!(code, Some(0), "{mode} {umask}: {err}");
        let warned: Vec<&str> = err.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warned.len(), want.len(), "{mode} {umask}: {err}");
        for (w, line) in want.iter().zip(&warned) {
            assert!(
                line.contains(w) && line.contains(q),
                "{mode} {umask}: {line}"
            );
        }
        // What the first warning says is true: the outsider reads a payload by its path.
        if want.first() == Some(&"every local user can read this queue's payloads") {
            let (code, _, err) =
                as_user(&owner, umask, &format!("echo visible | {bin} enqueue {q}"));
            assert_eq!(code, Some(0), "{err}");
            let job = files(std::path::Path::new(q), "ready")
                .into_iter()
                .next()
                .unwrap();
            let (code, out, _) = as_user(&outsider, "007", &format!("cat {q}/{job}"));
            assert_eq!(code, Some(0));
            assert!(out.contains("visible"));
        }
    }
}
