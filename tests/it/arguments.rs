//! The command line's arguments: bad input refused with a clear error and nothing changed,
//! numbers out of range, non-UTF-8 paths, help and version.

use crate::common::*;
use std::process::{Command, Stdio};
use steadq::Queue;

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

#[test]
fn bad_input_gives_a_clear_error_and_changes_nothing() {
    let d = TempDir::new("cli-bad");
    let q = d.path();
    assert!(steadq(&["init", p(q), "--shards", "2"]).status.success());
    let id = text(&steadq_in(&["enqueue", p(q)], b"ok").stdout)
        .trim()
        .to_string();
    let before = snapshot(q);
    let missing = q.with_extension("missing");
    let notq = q.with_extension("notq");
    std::fs::create_dir_all(&notq).unwrap();
    let big = q.with_extension("big");
    std::fs::write(&big, vec![1u8; 2048]).unwrap();
    let unreadable = q.with_extension("dir-not-file");
    std::fs::create_dir_all(&unreadable).unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["status".into(), p(&missing).into()], "missing"),
        (
            vec![
                "enqueue".into(),
                p(&missing).into(),
                "--file".into(),
                p(&big).into(),
            ],
            "missing",
        ),
        (vec!["list".into(), p(&notq).into()], "not a SteadQ queue"),
        (
            vec![
                "work".into(),
                p(&notq).into(),
                "--once".into(),
                "--".into(),
                "true".into(),
            ],
            "not a SteadQ queue",
        ),
        (
            vec![
                "show".into(),
                p(q).into(),
                "0123456789abcdef0123456789abcdef".into(),
            ],
            "no job 0123456789abcdef0123456789abcdef",
        ),
        (
            vec!["show".into(), p(q).into(), "nope".into()],
            "bad job id 'nope'",
        ),
        (
            vec![
                "dead".into(),
                "requeue".into(),
                p(q).into(),
                "0123456789abcdef0123456789abcdef".into(),
            ],
            "no dead job",
        ),
        (
            vec!["enqueue".into(), p(q).into(), "--delay".into(), "5x".into()],
            "bad duration '5x'",
        ),
        (
            vec![
                "compact".into(),
                p(q).into(),
                "--older-than".into(),
                "soon".into(),
            ],
            "bad duration 'soon'",
        ),
        (
            vec![
                "enqueue".into(),
                p(q).into(),
                "--file".into(),
                p(&big).into(),
                "--max-payload".into(),
                "1024".into(),
            ],
            "exceeds the limit of 1024 bytes",
        ),
        (
            vec![
                "enqueue".into(),
                p(q).into(),
                "--file".into(),
                p(&missing).into(),
            ],
            "missing",
        ),
        (
            vec![
                "enqueue".into(),
                p(q).into(),
                "--file".into(),
                p(&unreadable).into(),
            ],
            "dir-not-file",
        ),
        (
            vec!["ack".into(), p(q).into(), "garbage".into()],
            "not a lease handle",
        ),
        (
            vec![
                "fail".into(),
                p(q).into(),
                "x".into(),
                "--reason".into(),
                "Bad Reason".into(),
            ],
            "bad --reason",
        ),
        (
            vec![
                "list".into(),
                p(q).into(),
                "--state".into(),
                "sleeping".into(),
            ],
            "bad state 'sleeping'",
        ),
        (
            vec!["dead".into(), "requeue".into(), p(q).into()],
            "needs a job id or --all",
        ),
        (
            vec!["init".into(), p(&missing.join("a/b")).into()],
            "missing",
        ),
        (
            vec!["work".into(), p(q).into(), "--once".into()],
            "needs a command",
        ),
        (
            vec![
                "work".into(),
                p(q).into(),
                "--lease".into(),
                "30d".into(),
                "--".into(),
                "true".into(),
            ],
            "bad lease '30d'",
        ),
        (
            vec![
                "claim".into(),
                p(q).into(),
                "--payload-out".into(),
                p(&missing.join("p")).into(),
            ],
            "missing",
        ),
        (vec!["demo".into(), p(q).into()], "is not empty"),
        (
            vec!["enqueue".into(), p(q).into(), "--delay".into(), "1".into()],
            "bad duration '1'",
        ),
        (
            vec![
                "claim".into(),
                p(q).into(),
                "--payload-out".into(),
                "-".into(),
            ],
            "--payload-out -: stdout carries the lease handle",
        ),
    ];
    for (args, want) in &cases {
        let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let o = steadq(&a);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "{a:?} succeeded");
        assert!(err.contains(want), "{a:?}: stderr {err:?} lacks {want:?}");
        assert_eq!(snapshot(q), before, "{a:?} changed the queue");
    }
    assert!(!missing.exists(), "nothing created for a bad path");
    // A payload that is too big from stdin, too.
    let o = steadq_in(&["enqueue", p(q), "--max-payload", "10"], &[0u8; 11]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("stdin: payload exceeds the limit of 10 bytes"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(snapshot(q), before);
    // The good job is still there, untouched.
    let o = steadq(&["show", p(q), &id, "--raw"]);
    assert_eq!(o.stdout, b"ok");
    for x in [notq, big, unreadable] {
        let _ = std::fs::remove_dir_all(&x);
        let _ = std::fs::remove_file(&x);
    }
}

#[test]
fn version_prints_the_package_version() {
    let o = steadq(&["--version"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        format!("steadq {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn help_of_work_and_claim_shows_the_lease_limits() {
    for sub in ["work", "claim", "renew"] {
        let o = steadq(&[sub, "--help"]);
        assert_eq!(o.status.code(), Some(0));
        let help = text(&o.stdout)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(help.contains("1s to 7d"), "{sub}: {help}");
    }
}

#[test]
fn dead_takes_nested_subcommands() {
    let d = TempDir::new("dead-nested");
    let q = d.path();
    let o = steadq(&["init", p(q)]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let bad = steadq(&["dead", "explode", p(q)]);
    assert_eq!(bad.status.code(), Some(1), "an unknown action is bad usage");
    let help = steadq(&["dead", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout);
    for action in ["list", "requeue", "purge"] {
        assert!(text.contains(action), "{text}");
    }
    let list = steadq(&["dead", "list", p(q)]);
    assert_eq!(list.status.code(), Some(0));
    assert_eq!(list.stdout, b"");
    let purge = steadq(&["dead", "purge", p(q)]);
    assert_eq!(
        String::from_utf8_lossy(&purge.stdout),
        "purged 0 dead jobs\n"
    );
}

/// Paths and `work` command arguments that are not UTF-8 (Latin-1 here) are taken as given:
/// the queue directory, the payload file, and an argument passed to the command.
#[test]
fn non_utf8_paths_are_taken_as_given() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let d = TempDir::new("latin1");
    std::fs::create_dir_all(d.path()).unwrap();
    let q = d.path().join(OsStr::from_bytes(b"caf\xe9-queue"));
    let payload = d.path().join(OsStr::from_bytes(b"entr\xe9e.txt"));
    let out_file = d.path().join(OsStr::from_bytes(b"sortie-\xe9t\xe9.txt"));
    std::fs::write(&payload, b"bonjour").unwrap();
    let run = |args: &[&OsStr]| {
        Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = run(&[OsStr::new("init"), q.as_os_str()]);
    assert!(o.status.success(), "init: {}", text(&o.stderr));
    let o = run(&[
        OsStr::new("enqueue"),
        q.as_os_str(),
        OsStr::new("--file"),
        payload.as_os_str(),
    ]);
    assert!(o.status.success(), "enqueue: {}", text(&o.stderr));
    let o = run(&[
        OsStr::new("work"),
        q.as_os_str(),
        OsStr::new("--once"),
        OsStr::new("--"),
        OsStr::new("sh"),
        OsStr::new("-c"),
        OsStr::new("cat > \"$1\""),
        OsStr::new("sh"),
        out_file.as_os_str(),
    ]);
    assert!(o.status.success(), "work: {}", text(&o.stderr));
    assert_eq!(std::fs::read(&out_file).unwrap(), b"bonjour");
    let o = run(&[OsStr::new("status"), q.as_os_str()]);
    assert!(o.status.success(), "status: {}", text(&o.stderr));
    assert_eq!(Queue::open(&q).unwrap().status().unwrap().acked, 1);
}

#[test]
fn out_of_range_numbers_are_refused_at_parsing_and_change_nothing() {
    let tmp = TempDir::new("cli-range");
    let q = tmp.path().to_path_buf();
    assert_eq!(steadq(&["init", p(&q)]).status.code(), Some(0));
    let before = snapshot(&q);
    let cases: [(&[&str], &str); 10] = [
        (
            &["init", p(&q), "--shards", "0"],
            "'--shards' with value '0'",
        ),
        (
            &["init", p(&q), "--shards", "257"],
            "'--shards' with value '257'",
        ),
        // A limit of 0 would refuse every enqueue; "none" lifts a limit.
        (
            &["init", p(&q), "--max-jobs", "0"],
            "'--max-jobs' with value '0'",
        ),
        (
            &["claim", p(&q), "--aging", "0s"],
            "'--aging' with value '0s'",
        ),
        (
            &["enqueue", p(&q), "--priority", "8"],
            "'--priority' with value '8'",
        ),
        (
            &["enqueue", p(&q), "--priority", "+7"],
            "'--priority' with value '+7'",
        ),
        (
            &["enqueue", p(&q), "--priority", "07"],
            "'--priority' with value '07'",
        ),
        // Out-of-range counts are bad usage like every other bad flag value (they exited 2,
        // 'failed, not done', while --max-attempts 99999999999 exited 1).
        (
            &["enqueue", p(&q), "--max-attempts", "0"],
            "'--max-attempts' with value '0': --max-attempts must be at least 1",
        ),
        (
            &["work", p(&q), "--concurrency", "0", "--", "true"],
            "'--concurrency' with value '0'",
        ),
        (
            &["work", p(&q), "--concurrency", "1025", "--", "true"],
            "'--concurrency' with value '1025'",
        ),
    ];
    for (args, want) in cases {
        let out = steadq(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(snapshot(&q), before, "{args:?} changed the queue");
    }
    assert!(!q.join("steadq.limits").exists());
}

/// `work --timeout 0s` was accepted and stopped every command at once (jobs ended dead,
/// exhausted): refused at parsing like `--lease 0s`, and --help says so.
#[test]
fn work_refuses_a_zero_timeout() {
    let d = TempDir::new("cli-timeout0");
    let q = p(d.path());
    assert!(steadq(&["init", q]).status.success());
    assert!(steadq_in(&["enqueue", q], b"job").status.success());
    let before = snapshot(d.path());
    // Nor one shorter than a process takes to start (`0.0001ms` was accepted).
    for t in ["0s", "0.0001ms", "0.5ms"] {
        let o = steadq(&["work", q, "--once", "--timeout", t, "--", "true"]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{t}: {err}");
        let want = format!("'--timeout' with value '{t}': bad --timeout '{t}': at least 1ms");
        assert!(err.contains(&want), "{t}: {err}");
        assert_eq!(snapshot(d.path()), before, "{t}");
    }
    let help = text(&steadq(&["work", "--help"]).stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(help.contains("0s is refused"), "{help}");
    let o = steadq(&["work", q, "--once", "--timeout", "10s", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

/// `claim --help` lists exit 4 (a claim's barrier can fail, and a job whose handle or payload
/// could not be delivered may be left leased): it listed 2 and 3 only.
#[test]
fn claim_help_lists_every_exit_code_it_returns() {
    let help = text(&steadq(&["claim", "--help"]).stdout);
    for code in ["2", "3", "4"] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{code} "))),
            "no exit {code}: {help}"
        );
    }
    let four = help
        .lines()
        .find(|l| l.trim_start().starts_with("4 "))
        .unwrap();
    assert!(four.contains("indeterminate"), "{four}");
}

#[test]
fn work_refuses_a_backoff_longer_than_its_cap() {
    let d = TempDir::new("cli-backoff");
    let q = p(d.path());
    assert_eq!(steadq(&["init", q]).status.code(), Some(0));
    assert_eq!(steadq_in(&["enqueue", q], b"j").status.code(), Some(0));
    let before = snapshot(d.path());
    let args = [
        "work",
        q,
        "--once",
        "--backoff",
        "1h",
        "--max-backoff",
        "1s",
        "--",
        "true",
    ];
    let out = steadq(&args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "bad usage: {err}");
    assert!(
        err.contains("--backoff (3600s) is longer than --max-backoff (1s)"),
        "{err}"
    );
    assert_eq!(
        snapshot(d.path()),
        before,
        "the job must not have been claimed"
    );
}

/// `dead requeue --all` that fails part-way tries every dead job and says how many moved.
/// It stopped at the first failure and exited 4 with no count, so the user could not tell
/// what happened to the others. A real refusal: one ready shard made immutable (`chattr
/// +i`: even root's rename into it fails with EPERM).
#[test]
fn a_requeue_of_every_dead_job_that_fails_part_way_says_how_many_moved() {
    if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_QEMU_USER").is_some() {
        eprintln!("skipped: chattr +i needs root (CAP_LINUX_IMMUTABLE), and a real kernel");
        return;
    }
    let d = TempDir::new("cli-requeue-part");
    let q = d.path();
    assert!(steadq(&["init", p(q), "--shards", "2"]).status.success());
    let in_shard = |s: &str| std::fs::read_dir(q.join("ready").join(s)).unwrap().count();
    // Jobs in both shards: a job's shard comes from its id, so enqueue until each has some.
    while in_shard("00") < 2 || in_shard("01") < 1 {
        assert!(steadq_in(&["enqueue", p(q)], b"j").status.success());
    }
    let (stay, moves) = (in_shard("01"), in_shard("00"));
    for _ in 0..stay + moves {
        let h = steadq(&["claim", p(q), "--payload-out", "/dev/null"]);
        assert!(h.status.success(), "{}", text(&h.stderr));
        let f = steadq(&["fail", p(q), text(&h.stdout).trim()]);
        assert!(f.status.success(), "{}", text(&f.stderr));
    }
    let shard = q.join("ready/01");
    let chattr = |flag: &str| {
        Command::new("chattr")
            .args([flag, p(&shard)])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !chattr("+i") {
        eprintln!("skipped: this filesystem has no immutable flag");
        return;
    }
    let o = steadq(&["dead", "requeue", p(q), "--all"]);
    assert!(chattr("-i"));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "indeterminate: part moved. {err}");
    assert_eq!(text(&o.stdout), format!("requeued {moves} jobs\n"));
    assert!(
        err.contains(&format!(
            "{stay} dead jobs could not be requeued ({moves} others were); first:"
        )) && err.contains("ready/01"),
        "{err}"
    );
    assert_eq!((in_shard("00"), in_shard("01")), (moves, 0));
    // Nothing moved at all: not done (exit 2), still with its count.
    assert!(chattr("+i"));
    let o = steadq(&["dead", "requeue", p(q), "--all"]);
    assert!(chattr("-i"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "");
    assert!(text(&o.stderr).contains(&format!(
        "{stay} dead jobs could not be requeued (0 others were)"
    )));
    // And once the shard takes renames again, the rest move.
    let o = steadq(&["dead", "requeue", p(q), "--all"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), format!("requeued {stay} jobs\n"));
    assert_eq!(in_shard("01"), stay);
}

/// A command line whose values are wrong in a way argh cannot see (options that exclude each
/// other, a malformed job id, reason or key, `--max-payload 0`) is bad usage, exit 1, like
/// what argh refuses; these exited 2 ("not done", which a script reads as "try again") while
/// retrying can never help (breaker finding). Nothing changes.
#[test]
fn checks_of_the_command_lines_own_values_exit_1_and_change_nothing() {
    let d = TempDir::new("cli-usage");
    let q = p(d.path());
    assert!(steadq(&["init", q, "--shards", "1"]).status.success());
    assert_eq!(steadq_in(&["enqueue", q], b"j").status.code(), Some(0));
    let before = snapshot(d.path());
    let id = "0123456789abcdef0123456789abcdef";
    // A name of this queue that is not a lease: its ready job's name.
    let ready = before
        .iter()
        .find(|f| f.starts_with("ready/") && f.ends_with(".sqj"))
        .and_then(|f| f.rsplit('/').next())
        .expect("the enqueued job's ready name")
        .to_string();
    let ready = ready.as_str();
    let cases: [(&[&str], &str); 21] = [
        (
            &["config", q, "--evidence-max", "0"],
            "bad --evidence-max '0'",
        ),
        (
            &["init", q, "--evidence-max", "0"],
            "bad --evidence-max '0'",
        ),
        (&["fail", q, "x", "--reason", "BAD"], "bad --reason 'BAD'"),
        (&["status", q, "--json", "--prometheus"], "exclusive"),
        (&["dead", "requeue", q], "needs a job id or --all"),
        (
            &["dead", "requeue", q, id, "--all"],
            "needs a job id or --all",
        ),
        (&["claim", q, "--max-payload", "0"], "bad --max-payload '0'"),
        (&["work", q, "--once"], "needs a command after --"),
        (&["show", q, "nope"], "bad job id 'nope'"),
        (&["enqueue", q, "--key", "a b"], "bad --key 'a b'"),
        (
            &["claim", q, "--payload-out", "-"],
            "--payload-out -: stdout",
        ),
        // A handle that is no lease name at all (it was exit 2, "not a lease handle of this
        // queue", after opening the queue), or a name of a job that is not leased.
        (
            &["ack", q, "garbage"],
            "handle \"garbage\" is not a lease handle",
        ),
        (&["nack", q, id], "is not a lease handle"),
        (&["renew", q, "x.sqj"], "is not a lease handle"),
        (
            &["fail", q, "x", "--reason", "oops"],
            "is not a lease handle",
        ),
        (&["ack", q, ready], "names a job that is not leased"),
        // Empty paths name no file (they were exit 2, ": No such file or directory").
        (
            &["enqueue", q, "--file", ""],
            "'--file' with value '': an empty path",
        ),
        (&["claim", q, "--payload-out", ""], "an empty path"),
        (&["status", ""], "an empty path"),
        (&["dead", "purge", ""], "an empty path"),
        (
            &["work", q, "--once", "--", ""],
            "an empty one names no program",
        ),
    ];
    for (args, want) in cases {
        let o = steadq(args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
        assert_eq!(snapshot(d.path()), before, "{args:?} changed the queue");
    }
}

/// An argument that is not UTF-8 was shown in messages as the placeholder argh parsed in
/// its stead (`handle "\u{10fffd}steadq-raw-arg-0" is not a lease handle`, breaker
/// finding); it is shown as typed now, its other bytes escaped, and still exits 1.
#[test]
fn a_refused_argument_that_is_not_utf8_is_shown_as_typed() {
    let d = TempDir::new("cli-raw-arg");
    let q = p(d.path());
    assert!(steadq(&["init", q, "--shards", "1"]).status.success());
    let before = snapshot(d.path());
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"caf\xe9");
    let cases: [(&[&str], &str); 4] = [
        (&["ack", q], "handle \"caf\\xE9\" is not a lease handle"),
        (&["show", q], "bad job id 'caf\\xE9'"),
        (&["fail", q, "x", "--reason"], "bad --reason 'caf\\xE9'"),
        (&["status", q], "Unrecognized argument: caf\\xE9"),
    ];
    for (args, want) in cases {
        let o = Command::new(BIN)
            .args(args)
            .arg(bad)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
        assert!(!err.contains("steadq-raw-arg"), "{args:?}: {err}");
        assert_eq!(snapshot(d.path()), before, "{args:?} changed the queue");
    }
}

/// Messages a breaker found wrong: a non-job file in `tmp/` was "a job name of the wrong
/// kind" (it is not a job name); a symlink in place of `steadq.limits` was "unreadable: Too
/// many levels of symbolic links" (it is a symlink, never followed); `--max-payload` and
/// `--evidence-max` past u64 said "at least 1"; `show` of a corrupt ready job said fsck
/// would dead-letter it (fsck reports or quarantines it; a claim dead-letters it).
#[test]
fn messages_name_what_is_there() {
    let d = TempDir::new("cli-messages");
    std::fs::create_dir_all(d.path()).unwrap();
    let q = d.path().join("q");
    let qs = p(&q);
    assert!(steadq(&["init", qs, "--shards", "1"]).status.success());
    std::fs::write(q.join("tmp/notes.txt"), b"x").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", q.join("steadq.limits")).unwrap();
    let o = steadq(&["fsck", qs]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(5), "{out}");
    assert!(
        out.contains("tmp/notes.txt: foreign: not a SteadQ job name"),
        "{out}"
    );
    assert!(out.contains("steadq.limits: foreign: symlink"), "{out}");
    assert_eq!(out.lines().count(), 2, "{out}");
    for flag in ["--max-payload", "--evidence-max"] {
        let cmd = if flag == "--max-payload" {
            "claim"
        } else {
            "init"
        };
        let o = steadq(&[cmd, qs, flag, "18446744073709551616"]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("a byte count from 1 to 18446744073709551615"),
            "{err}"
        );
    }
    // A corrupt ready job, shown.
    let q2 = d.path().join("q2");
    let q2s = p(&q2);
    assert!(steadq(&["init", q2s, "--shards", "1"]).status.success());
    let id = text(&steadq_in(&["enqueue", q2s], b"hello").stdout)
        .trim()
        .to_string();
    let job = std::fs::read_dir(q2.join("ready/00"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&job).unwrap();
    let at = bytes.len() - 1;
    bytes[at] ^= 1;
    std::fs::write(&job, &bytes).unwrap();
    let o = steadq(&["show", q2s, &id]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("the next claim that reaches it"), "{err}");
    assert!(!err.contains("fsck` will"), "{err}");
}

#[test]
fn a_missing_queue_directory_is_named_with_the_command_that_makes_one() {
    let d = TempDir::new("cli-missing");
    let missing = d.path().join("nope");
    for args in [
        vec!["enqueue", p(&missing)],
        vec!["claim", p(&missing)],
        vec!["status", p(&missing)],
        vec!["list", p(&missing)],
    ] {
        let out = steadq_in(&args, b"x");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!(
                "{}: no such directory (make a queue there with `steadq init {}`)",
                p(&missing),
                p(&missing)
            )),
            "{args:?}: {err}"
        );
        assert!(!missing.exists(), "{args:?} made the directory");
    }
}

/// A refused argument with terminal controls in it (ESC, BEL) is named escaped, `\x1b`,
/// never written raw to stderr, where it would drive the reader's terminal (hostile trial:
/// `enqueue --after $'a\e[31mred'`, `--group $'a\e]0;pwn\a'` echoed them).
#[test]
fn a_refused_argument_never_writes_terminal_controls() {
    let d = TempDir::new("args-controls");
    assert!(steadq(&["init", p(d.path())]).status.success());
    for args in [
        vec!["enqueue", p(d.path()), "--after", "a\x1b[31mred"],
        vec!["enqueue", p(d.path()), "--group", "a\x1b]0;pwn\x07"],
        vec![
            "limit",
            p(d.path()),
            "--group",
            "b\x1b[2J",
            "--max-leased",
            "1",
        ],
        vec!["show", p(d.path()), "c\x1b[31m"],
    ] {
        let o = steadq_in(&args, b"x");
        assert_ne!(o.status.code(), Some(0), "{args:?}");
        assert!(
            !o.stderr.iter().any(|&b| b == 0x1b || b == 0x07),
            "{args:?}: {:?}",
            text(&o.stderr)
        );
        assert!(
            text(&o.stderr).contains("\\x1b"),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
}
