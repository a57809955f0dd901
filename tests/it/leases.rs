//! Leases: expiry while a claim waits, renew/ack/nack/fail that are not done, and the lease
//! handles a script passes to `steadq renew`, `ack`, `nack`, `fail`.

use crate::common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use steadq::sys::{Call, Errno, Fault, FaultAction, FaultPlan};
use steadq::{Outcome, Queue, Reason, SettleError, State};

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

/// A plain claim that finds nothing ready recovers an expired lease (attempt 2).
#[test]
fn plain_claim_takes_an_expired_lease() {
    let d = TempDir::new("strand-lease");
    let q = Queue::create(d.path(), opts(4)).unwrap();
    q.enqueue(b"job").unwrap();
    let handle = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(10)),
            ..Default::default()
        })
        .unwrap()
        .unwrap()
        .into_handle();
    assert!(q.claim().unwrap().is_none(), "still leased");
    q.clock().shift_boot(11_000_000_000);
    let l = q.claim().unwrap().expect("expired lease claimed again");
    assert_eq!(l.attempt(), 2);
    assert!(q.lease_from_handle(&handle).unwrap_err().is_lease_lost());
}

/// A lease whose holder died expires while another claim waits: the waiting claim takes it
/// when it expires (a leased name's length was once mis-stated, and the waiter slept through).
#[test]
fn claim_wait_takes_a_lease_that_expires_while_it_waits() {
    let d = TempDir::new("wait-expiry");
    let q = Queue::create(d.path(), opts(4)).unwrap();
    q.enqueue(b"orphan").unwrap();
    let h = q
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_millis(1200)),
            ..Default::default()
        })
        .unwrap()
        .unwrap()
        .into_handle();
    let other = Queue::open(d.path()).unwrap();
    let t = Instant::now();
    let l = other
        .claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(30)),
            wait: Some(Duration::from_secs(15)),
            ..Default::default()
        })
        .unwrap()
        .expect("the expired lease is taken");
    assert!(
        t.elapsed() < Duration::from_secs(6),
        "after {:?}",
        t.elapsed()
    );
    assert_eq!((l.payload().unwrap(), l.attempt()), (&b"orphan"[..], 2));
    assert!(q.lease_from_handle(&h).unwrap_err().is_lease_lost());
}

/// A renew whose rename happened but whose directory fsync failed (any errno, EIO included)
/// is indeterminate, and the lease goes on under its new name: the next renew and the ack
/// work (they used to report "lease lost" and `work` killed a valid command).
#[test]
fn a_renew_whose_barrier_failed_keeps_the_lease() {
    for errno in [Errno::IO, Errno::NOSPC] {
        let d = TempDir::new("renew-barrier");
        let plan = FaultPlan::disarmed(vec![Fault {
            call: Call::FsyncDir,
            nth: 1,
            action: FaultAction::Fail(errno),
        }]);
        let q = with_plan(&d, &plan, opts(2));
        q.enqueue(b"long job").unwrap();
        let mut l = q.claim().unwrap().unwrap();
        plan.arm();
        let e = l.renew(Duration::from_secs(60)).unwrap_err();
        assert_eq!(e.outcome(), Outcome::Indeterminate, "{e}");
        assert!(plan.fired());
        l.renew(Duration::from_secs(60))
            .expect("the lease lives under its new name");
        assert_eq!(l.name().generation, 3);
        l.ack().expect("ack after the failed barrier");
        assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
    }
}

/// An ack does not read the job again (it was verified once, at claim): a read fault armed
/// after the claim does not touch it.
#[test]
fn an_ack_does_not_read_the_job_again() {
    let d = TempDir::new("ack-read");
    let plan = FaultPlan::disarmed(vec![Fault {
        call: Call::Read,
        nth: 1,
        action: FaultAction::Fail(Errno::IO),
    }]);
    let q = with_plan(&d, &plan, opts(2));
    q.enqueue(b"job").unwrap();
    let l = q.claim().unwrap().unwrap();
    plan.arm();
    l.ack().unwrap();
    assert_eq!(plan.count(Call::Read), 0);
    assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
}

/// An ack whose rename finds the disk full is not done, and the error hands the lease back
/// (`SettleError::NotDone`): renew, then ack again (before `try_ack`, the job stayed leased
/// until expiry and ran again).
#[test]
fn a_not_done_ack_hands_the_lease_back_when_the_disk_is_full() {
    let d = TempDir::new("tryack");
    let plan = FaultPlan::disarmed(vec![Fault {
        call: Call::Rename,
        nth: 1,
        action: FaultAction::Fail(Errno::NOSPC),
    }]);
    let q = with_plan(&d, &plan, opts(2));
    q.enqueue(b"job").unwrap();
    let l = q.claim().unwrap().unwrap();
    let (id, handle) = (l.id(), l.handle());
    plan.arm();
    let e = l.ack().unwrap_err();
    assert_eq!(
        (e.outcome(), e.errno()),
        (Outcome::NotDone, Some(Errno::NOSPC.into()))
    );
    assert!(e.to_string().contains("disk full"), "{e}");
    assert_eq!(counts(&q), [0, 1, 0, 0, 0]);
    let SettleError::NotDone { mut lease, .. } = e else {
        panic!("not the not-done variant: {e:?}")
    };
    assert_eq!((lease.id(), lease.handle()), (id, handle), "the same lease");
    lease.renew(Duration::from_secs(30)).unwrap();
    let attempt = lease.attempt();
    let r = lease.ack().unwrap();
    assert_eq!((r.id, attempt), (id, 1));
    assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
}

/// A nack or fail that cannot make its bucket (a full disk) is not done, and leaves the job
/// leased under its name: the guard must not release it on the way out (it used to, while
/// reporting "nothing changed").
#[test]
fn a_nack_or_fail_that_is_not_done_keeps_the_lease() {
    for fail in [false, true] {
        let d = TempDir::new("nack-full");
        let plan = FaultPlan::disarmed(vec![Fault {
            call: Call::Mkdir,
            nth: 1,
            action: FaultAction::Fail(Errno::NOSPC),
        }]);
        let q = with_plan(&d, &plan, opts(1));
        q.enqueue(b"x").unwrap();
        let l = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(60)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        let handle = l.handle();
        plan.arm();
        let e = if fail {
            l.fail(Reason::new("bad").unwrap()).unwrap_err()
        } else {
            l.nack(Duration::from_secs(600)).unwrap_err()
        };
        assert_eq!(e.outcome(), Outcome::NotDone, "{e}");
        assert!(e.to_string().contains("disk full"), "{e}");
        assert_eq!(
            counts(&q),
            [0, 1, 0, 0, 0],
            "fail={fail}: the job must stay leased"
        );
        // The lease still holds: its handle acks.
        q.lease_from_handle(&handle).unwrap().ack().unwrap();
        assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
    }
}

#[test]
fn manual_claim_renew_nack_ack_from_a_script() {
    let d = TempDir::new("cli-manual");
    let q = d.path();
    assert!(steadq(&["init", p(q)]).status.success());
    let id = text(&steadq_in(&["enqueue", p(q)], b"payload one").stdout)
        .trim()
        .to_string();
    let pf = d.path().with_extension("payload");
    let o = steadq(&["claim", p(q), "--lease", "1m", "--payload-out", p(&pf)]);
    assert!(o.status.success());
    let out = text(&o.stdout);
    let handle = out.strip_suffix('\n').unwrap();
    assert!(handle.starts_with(&id) && !handle.contains('\n'), "{out}");
    assert_eq!(std::fs::read(&pf).unwrap(), b"payload one");
    let _ = std::fs::remove_file(&pf);
    assert_eq!(
        steadq(&["claim", p(q)]).status.code(),
        Some(3),
        "nothing else ready"
    );
    let o = steadq(&["renew", p(q), handle, "--lease", "5m"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let renewed = text(&o.stdout).trim().to_string();
    assert_ne!(renewed, handle);
    let o = steadq(&["ack", p(q), handle]);
    assert_eq!(
        o.status.code(),
        Some(6),
        "the old handle's lease is lost: {}",
        text(&o.stderr)
    );
    assert!(text(&o.stderr).contains("lease lost"));
    let o = steadq(&["nack", p(q), &renewed]);
    assert!(text(&o.stdout).contains("ready"));
    let handle = text(&steadq(&["claim", p(q)]).stdout).trim().to_string();
    let o = steadq(&["ack", p(q), &handle]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = steadq(&["list", p(q)]);
    assert!(
        text(&o.stdout).starts_with(&format!("acked   {id} attempt 2/5")),
        "{}",
        text(&o.stdout)
    );
    let o = steadq(&["status", p(q), "--prometheus"]);
    let prom = text(&o.stdout);
    assert!(
        prom.contains("# TYPE steadq_jobs gauge") && prom.contains("state=\"acked\"} 1"),
        "{prom}"
    );
}

#[test]
fn a_failed_renew_keeps_the_lease_for_the_script() {
    // A real failure of the renew's rename: strace injects EACCES into the second
    // renameat2 (the first is Queue::open's probe in tmp/). Without strace (.ci/run installs
    // it), or under qemu-user (whose syscalls strace would count differently), say so and pass.
    if Command::new("strace").arg("-V").output().is_err()
        || std::env::var_os("STEADQ_QEMU_USER").is_some()
    {
        eprintln!(
            "no strace, or under qemu-user: a_failed_renew_keeps_the_lease_for_the_script skipped"
        );
        return;
    }
    let d = TempDir::new("cli-renewfail");
    let q = d.path();
    assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
    steadq_in(&["enqueue", p(q)], b"x");
    let o = steadq(&["claim", p(q), "--lease", "5m"]);
    let handle = text(&o.stdout).trim().to_string();
    let o = Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=renameat2"])
        .args(["-e", "inject=renameat2:error=EACCES:when=2", BIN])
        .args(["renew", p(q), &handle, "--lease", "5m"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "ready/00/{handle}: renameat2 failed: Permission denied"
        )),
        "the injected failure hit the renew's rename: {err}"
    );
    let l = Queue::open(q).unwrap().list(None).unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(
        (l[0].state, l[0].name.attempt),
        (State::Leased, 1),
        "still leased to the script, not released to ready"
    );
    assert!(err.contains("not released"), "{err}");
    // The script's handle still holds the lease.
    let o = steadq(&["renew", p(q), &handle]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let renewed = text(&o.stdout).trim().to_string();
    // The old handle is now lost (exit 6) and the job stays leased under the new one.
    let o = steadq(&["renew", p(q), &handle]);
    assert_eq!(o.status.code(), Some(6), "{}", text(&o.stderr));
    let l = Queue::open(q).unwrap().list(None).unwrap();
    assert_eq!(l[0].state, State::Leased);
    let o = steadq(&["ack", p(q), &renewed]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

/// A job over the default 16 MiB payload limit, enqueued and claimed with a higher
/// `--max-payload`, is settled by its handle: renew, nack and ack have no `--max-payload`, and
/// the handle's check of the job file applied the default limit (fresh-user trial: each exited
/// 2 with "read failed: File too large (os error 27)", and the job cycled until dead).
#[test]
#[ignore = "slow tier: 16 MiB jobs through claim, renew, nack and ack (~20 s)"]
fn a_lease_over_the_default_payload_limit_settles_by_its_handle() {
    let d = TempDir::new("cli-big-handle");
    let q = p(d.path());
    assert!(steadq(&["init", q]).status.success());
    let big = vec![b'x'; 16 * 1024 * 1024 + 1];
    let o = steadq_in(&["enqueue", q, "--max-payload", "20000000"], &big);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let id = text(&o.stdout).trim().to_string();
    let pf = d.path().with_extension("big");
    let claim = || {
        let o = steadq(&[
            "claim",
            q,
            "--max-payload",
            "20000000",
            "--payload-out",
            p(&pf),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        text(&o.stdout).trim().to_string()
    };
    let h = claim();
    assert_eq!(std::fs::metadata(&pf).unwrap().len(), big.len() as u64);
    let o = steadq(&["renew", q, &h, "--lease", "5m"]);
    assert_eq!(o.status.code(), Some(0), "renew: {}", text(&o.stderr));
    let h = text(&o.stdout).trim().to_string();
    let o = steadq(&["nack", q, &h]);
    assert_eq!(o.status.code(), Some(0), "nack: {}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "ready\n");
    let h = claim();
    let o = steadq(&["ack", q, &h]);
    assert_eq!(o.status.code(), Some(0), "ack: {}", text(&o.stderr));
    let receipt = text(&o.stdout).trim().to_string();
    let list = text(&steadq(&["list", q]).stdout);
    assert!(
        list.starts_with(&format!("acked   {id} attempt 2/5")) && list.lines().count() == 1,
        "{list}"
    );
    let rct = files(d.path(), "receipts");
    assert_eq!(rct.len(), 1, "{rct:?}");
    assert!(rct[0].ends_with(&receipt), "{rct:?} vs {receipt}");
    let _ = std::fs::remove_file(&pf);
}

/// A handle with a stray trailing space or newline (`"$(cat h.txt)"` of a file written with
/// `echo`, a paste) was refused as "not a lease handle of this queue", which sent users
/// looking for the wrong fault (breaker finding). Surrounding whitespace is dropped now; one
/// inside the handle, or an empty one, is refused naming the argument and the character.
#[test]
fn a_handle_with_surrounding_whitespace_names_its_lease() {
    let d = TempDir::new("cli-handle-space");
    let q = p(d.path());
    assert!(steadq(&["init", q]).status.success());
    assert!(steadq_in(&["enqueue", q], b"job").status.success());
    let h = text(&steadq(&["claim", q]).stdout).trim().to_string();
    let o = steadq(&["renew", q, &format!("{h} ")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let h2 = text(&o.stdout).trim().to_string();
    assert_ne!(h2, h);
    let o = steadq(&["ack", q, "a b"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        text(&o.stderr),
        "Error parsing positional argument 'handle' with value 'a b': the handle holds ' ' \
         inside it: pass the one line `claim` or `renew` printed\n"
    );
    let o = steadq(&["ack", q, " \n"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("the handle is empty"),
        "{}",
        text(&o.stderr)
    );
    let o = steadq(&["ack", q, &format!("\t{h2}\n")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let st = Queue::open(d.path()).unwrap().status().unwrap();
    assert_eq!((st.leased, st.acked), (0, 1));
}

/// A lease handle of another queue (two queues, one script: the common slip) is refused
/// by the queue it was given to, exit 2, naming that queue; neither queue changes, and the
/// handle still settles in its own queue.
#[test]
fn a_lease_handle_given_to_another_queue_is_refused_naming_it() {
    let (a, b) = (TempDir::new("cli-handle-a"), TempDir::new("cli-handle-b"));
    for q in [a.path(), b.path()] {
        assert!(steadq(&["init", p(q), "--shards", "1"]).status.success());
        assert!(steadq_in(&["enqueue", p(q)], b"j").status.success());
    }
    let claimed = steadq(&["claim", p(b.path())]);
    assert_eq!(claimed.status.code(), Some(0), "{}", text(&claimed.stderr));
    let handle = text(&claimed.stdout).trim().to_string();
    let (before_a, before_b) = (snapshot(a.path()), snapshot(b.path()));
    for verb in ["ack", "nack", "renew"] {
        let o = steadq(&[verb, p(a.path()), &handle]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{verb}: {err}");
        let want = format!(
            "{}: invalid argument: a lease handle of another queue (or an altered one)",
            p(a.path())
        );
        assert!(err.contains(&want), "{verb}: {err:?} lacks {want:?}");
        assert_eq!(
            snapshot(a.path()),
            before_a,
            "{verb} changed the queue it was given"
        );
        assert_eq!(
            snapshot(b.path()),
            before_b,
            "{verb} changed the handle's queue"
        );
    }
    let o = steadq(&["ack", p(b.path()), &handle]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

/// `renew Q garbage >&-` said "stdout is closed" (exit 2) where `ack Q garbage` said the
/// handle is malformed (exit 1): the handle is checked first now, whatever stdout is.
#[test]
fn a_malformed_handle_is_bad_usage_even_with_stdout_closed() {
    let d = TempDir::new("cli-renew-closed");
    assert!(steadq(&["init", p(d.path()), "--shards", "1"])
        .status
        .success());
    let o = Command::new("sh")
        .arg("-c")
        .arg("\"$0\" renew \"$1\" garbage >&-")
        .arg(BIN)
        .arg(d.path())
        .output()
        .unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("handle \"garbage\" is not a lease handle"),
        "{err}"
    );
}

/// `renew`, `ack`, `nack` and `fail` of a lease whose job file changed after the claim move
/// the job to `dead/` as corrupt: the handle holds no lease any more. They exited 2 ("not
/// done: nothing changed") although the job had moved (breaker finding); now 6, as a lost
/// lease, naming `dead/`.
#[test]
fn settling_a_lease_whose_file_changed_exits_6_and_names_dead() {
    let d = TempDir::new("cli-settle-corrupt");
    std::fs::create_dir_all(d.path()).unwrap();
    for (i, op) in ["renew", "ack", "nack", "fail"].into_iter().enumerate() {
        let q = d.path().join(format!("q{i}"));
        let qs = p(&q);
        assert!(steadq(&["init", qs, "--shards", "1"]).status.success());
        assert!(steadq_in(&["enqueue", qs], b"hello world").status.success());
        let c = steadq(&["claim", qs, "--payload-out", "/dev/null"]);
        assert_eq!(c.status.code(), Some(0), "{}", text(&c.stderr));
        let handle = text(&c.stdout).trim().to_string();
        let job = std::fs::read_dir(q.join("ready/00"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        // Flip one byte of the payload, the file's last but one.
        let mut bytes = std::fs::read(&job).unwrap();
        let at = bytes.len() - 2;
        bytes[at] ^= 0x20;
        std::fs::write(&job, &bytes).unwrap();
        let o = steadq(&[op, qs, &handle]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(6), "{op}: {err}");
        assert!(
            err.contains("corrupt job file") && err.contains("moved to"),
            "{op}: {err}"
        );
        let dead = text(&steadq(&["list", qs, "--state", "dead"]).stdout);
        assert_eq!(dead.lines().count(), 1, "{op}: {dead}");
        assert!(dead.contains("corrupt"), "{op}: {dead}");
    }
}

/// An expired lease with no attempt left, dead-lettered by the sweep of `work --once`'s
/// claim, went unsaid: the job vanished from ready and `work --once` exited 3 "no job
/// ready" (breaker finding). Now the job is named in a warning and `work --once` exits 0,
/// having handled it. A ready job with no attempt left (released by a stopped worker),
/// dead-lettered by the claim itself, is named too ("see above" pointed at nothing).
#[test]
fn an_expired_lease_with_no_attempt_left_is_named_when_dead_lettered() {
    let d = TempDir::new("cli-expired-exhausted");
    std::fs::create_dir_all(d.path()).unwrap();
    // Expired lease, attempt 1/1.
    let q = d.path().join("expired");
    let qs = p(&q);
    assert!(steadq(&["init", qs]).status.success());
    let e = steadq_in(&["enqueue", qs, "--max-attempts", "1"], b"a");
    let id = text(&e.stdout).trim().to_string();
    let c = steadq(&["claim", qs, "--lease", "1s", "--payload-out", "/dev/null"]);
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stderr));
    // Past the 1 s lease by the test clock, without sleeping.
    let o = steadq_later(2, &["work", qs, "--once", "--", "true"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "job {id}: lease expired with no attempt left (attempt 1/1); dead-lettered (reason exhausted)"
        )),
        "{err}"
    );
    assert!(err.contains("1 job(s) dead-lettered (see above)"), "{err}");
    let dead = text(&steadq(&["list", qs, "--state", "dead"]).stdout);
    assert!(dead.contains(&id) && dead.contains("exhausted"), "{dead}");
    // Ready with attempt 1/1: a lease dropped unsettled is released keeping its attempt.
    let q = d.path().join("ready");
    let qs = p(&q);
    assert!(steadq(&["init", qs]).status.success());
    let e = steadq_in(&["enqueue", qs, "--max-attempts", "1"], b"a");
    let id = text(&e.stdout).trim().to_string();
    {
        let lq = Queue::open(&q).unwrap();
        let l = lq
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(60)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        drop(l);
    }
    let listed = text(&steadq(&["list", qs]).stdout);
    assert!(
        listed.starts_with("ready") && listed.contains("attempt 1/1"),
        "{listed}"
    );
    let o = steadq(&["work", qs, "--once", "--", "true"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "job {id}: no attempt left (attempt 1/1); dead-lettered (reason exhausted)"
        )),
        "{err}"
    );
}

/// A whole file passed where a lease handle belongs (`steadq ack Q "$(cat big)"`) was
/// echoed in full in the error, 100 KB on the terminal (breaker finding). The handle is
/// cut after 256 bytes and its length said; a short bad handle is shown whole.
#[test]
fn a_huge_bad_handle_is_not_echoed_in_full() {
    let d = TempDir::new("cli-huge-handle");
    std::fs::create_dir_all(d.path()).unwrap();
    let q = d.path().join("q");
    let qs = p(&q);
    assert!(steadq(&["init", qs]).status.success());
    let huge = "a".repeat(100_000);
    for op in ["ack", "renew", "nack", "fail"] {
        let o = steadq(&[op, qs, &huge]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{op}");
        assert!(err.len() < 600, "{op}: {} bytes of message", err.len());
        assert!(
            err.contains("... (100000 bytes) is not a lease handle"),
            "{err}"
        );
    }
    let o = steadq(&["ack", qs, "nonsense"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("handle \"nonsense\" is not a lease handle"),
        "{err}"
    );
}

/// `status` hints `steadq recover` on its `expired` line only when a lease has expired.
#[test]
fn status_hints_recover_only_for_expired_leases() {
    let d = TempDir::new("status-expired-hint");
    let q = Queue::create(d.path(), opts(1)).unwrap();
    q.enqueue(b"a").unwrap();
    let expired_line = || {
        let out = steadq(&["status", p(d.path())]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let o = text(&out.stdout);
        o.lines()
            .find(|l| l.starts_with("expired"))
            .unwrap_or_else(|| panic!("no expired line: {o}"))
            .to_string()
    };
    assert_eq!(expired_line(), "expired         0");
    let o = steadq::ClaimOptions {
        lease: Some(Duration::from_millis(1)),
        ..Default::default()
    };
    let _l = q.claim_with(&o).unwrap().expect("a job");
    let start = std::time::Instant::now();
    while q.status().unwrap().expired_leases == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the lease never expired"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        expired_line(),
        "expired         1  leases past their deadline (run `steadq recover`)"
    );
}
