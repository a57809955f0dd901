//! `steadq`'s own subcommands on `s3://bucket/prefix` queues (the binary built with `s3`),
//! against moto.

use crate::common::*;
use crate::sigkill::{cli, out};
use std::process::Stdio;
use std::time::{Duration, Instant};
use stowq::Options;
/// `steadq work URL --once EXTRA -- sh -c SCRIPT` whose command marks that it started (a
/// file `started` in a fresh directory `steadq-s3-TAG-PID` under the temp directory) and
/// then waits until the test makes `go` there. Returns once the command runs (at most
/// 30 s), with the worker (stderr piped) and that directory.
fn gated_work(
    port: u16,
    url: &str,
    tag: &str,
    extra: &[&str],
) -> (std::process::Child, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("steadq-s3-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (started, go) = (dir.join("started"), dir.join("go"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        started.display(),
        go.display()
    );
    let worker = cli(port)
        .args(["work", url, "--once"])
        .args(extra)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !started.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the command never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (worker, dir)
}

fn status(port: u16, url: &str) -> Vec<String> {
    let (code, s) = out(cli(port).args(["status", url]));
    assert_eq!(code, 0, "status {url}");
    s.lines().map(String::from).collect()
}

#[test]
fn enqueue_work_and_status_on_an_s3_queue() {
    let Some(m) = moto() else { return };
    let url = "s3://cliw/jobs";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let dir = std::env::temp_dir().join(format!("steadq-s3-work-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut ids = Vec::new();
    for i in 0..3 {
        let mut c = cli(m.port);
        c.args(["enqueue", url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = c.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("job {i}").as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0));
        ids.push(String::from_utf8(o.stdout).unwrap().trim().to_string());
    }
    assert!(ids.iter().all(|id| id.len() == 32), "{ids:?}");
    assert_eq!(status(m.port, url)[0], "ready 3");
    let outdir = dir.display().to_string();
    let script = format!("cat > {outdir}/$STEADQ_JOB_ID");
    let mut worker = cli(m.port)
        .args(["work", url, "--lease", "5s", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while status(m.port, url)[4] != "done 3" {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{:?}",
            status(m.port, url)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // SIGTERM: the idle worker stops within its pause (at most 100 ms after the signal).
    let _ = std::process::Command::new("kill")
        .arg(worker.id().to_string())
        .status();
    let t1 = Instant::now();
    let code = worker.wait().unwrap().code();
    assert_eq!(code, Some(0));
    assert!(
        t1.elapsed() < Duration::from_secs(5),
        "stopped in {:?}",
        t1.elapsed()
    );
    for (i, id) in ids.iter().enumerate() {
        let got = std::fs::read_to_string(dir.join(id)).unwrap();
        assert_eq!(got, format!("job {i}"), "the payload reached CMD's stdin");
    }
    assert_eq!(
        status(m.port, url),
        [
            "ready 0",
            "delayed 0",
            "leased 0",
            "expired 0",
            "done 3",
            "dead 0"
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_cli_round_trip() {
    let Some(m) = moto() else { return };
    let url = "s3://clib/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let p = std::env::temp_dir().join(format!("steadq-s3-cli-{}", std::process::id()));
    std::fs::write(&p, b"hello").unwrap();
    let file = p.to_str().unwrap();
    let (code, id) = out(cli(m.port).args(["enqueue", url, "--file", file]));
    assert_eq!((code, id.len()), (0, 32));
    let got = p.with_extension("out");
    let (code, h) = out(cli(m.port).args(["claim", url, "--payload-out", got.to_str().unwrap()]));
    assert_eq!(code, 0);
    assert_eq!(std::fs::read(&got).unwrap(), b"hello");
    assert!(h.starts_with(&id));
    assert_eq!(
        out(cli(m.port).args(["claim", url])).0,
        3,
        "nothing else ready"
    );
    let (code, h2) = out(cli(m.port).args(["renew", url, &h]));
    assert_eq!(code, 0);
    let lost = out(cli(m.port).args(["ack", url, &h])).0;
    assert_eq!(lost, 6, "the old handle lost its lease");
    assert_eq!(out(cli(m.port).args(["ack", url, &h2])).0, 0);
    assert_eq!(status(m.port, url)[4], "done 1");
    let (code, j) = out(cli(m.port).args(["status", url, "--json"]));
    assert_eq!(code, 0);
    assert!(
        j.starts_with("{\"queue\":\"s3://clib/q\",\"queue_id\":\""),
        "{j}"
    );
    assert!(
        j.ends_with(
            ",\"ready\":0,\"leased\":0,\"delayed\":0,\"dead\":0,\"acked\":1,\"expired_leases\":0,\"ready_by_priority\":[0,0,0,0,0,0,0,0]}"
        ),
        "{j}"
    );
    let (code, p8s) = out(cli(m.port).args(["status", url, "--prometheus"]));
    assert_eq!(code, 0);
    assert!(
        p8s.contains("steadq_jobs{queue=\"s3://clib/q\",state=\"acked\"} 1\n"),
        "{p8s}"
    );
    assert!(
        p8s.contains("steadq_expired_leases{queue=\"s3://clib/q\"} 0"),
        "{p8s}"
    );
    assert_eq!(
        out(cli(m.port).args(["status", url, "--json", "--prometheus"])).0,
        1,
        "exclusive"
    );
    let (code, l) = out(cli(m.port).args(["list", url, "--state", "acked"]));
    assert_eq!(code, 0);
    assert!(l.starts_with(&format!("{id} done 3 1 ")), "{l}");
    // work --once: exit 65 dead-letters, then `dead requeue --all` brings it back.
    out(cli(m.port).args(["enqueue", url, "--file", file]));
    let (code, _) = out(cli(m.port).args(["work", url, "--once", "--", "sh", "-c", "exit 65"]));
    assert_eq!(code, 0);
    assert_eq!(status(m.port, url)[5], "dead 1");
    let (code, dead) = out(cli(m.port).args(["dead", "list", url]));
    assert_eq!((code, dead.lines().count()), (0, 1));
    let requeued = out(cli(m.port).args(["dead", "requeue", url, "--all"]));
    assert_eq!(requeued, (0, "1".into()));
    let (code, _) = out(cli(m.port).args(["work", url, "--once", "--", "cat"]));
    assert_eq!(code, 0);
    assert_eq!(status(m.port, url)[4], "done 2");
    let (code, rec) = out(cli(m.port).args(["recover", url]));
    assert_eq!(
        (code, rec.as_str()),
        (
            0,
            "ready 0 dead 0 stale 0\nindex: put 0 deleted 0 foreign 0"
        )
    );
    // Compaction below the 1 h guard is refused and changes nothing; at 1 h nothing is old
    // enough.
    let (code, _) = out(cli(m.port).args(["compact", url, "--older-than", "1m"]));
    assert_eq!(code, 2);
    let c = out(cli(m.port).args(["compact", url, "--older-than", "1h"]));
    assert_eq!(c, (0, "compacted 0 chains, 0 objects deleted".into()));
    assert_eq!(status(m.port, url)[4], "done 2");
    // Options a queue in a bucket does not have are refused, naming them.
    let o = cli(m.port)
        .args([
            "enqueue",
            url,
            "--priority",
            "5",
            "--key",
            "k1",
            "--file",
            file,
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("enqueue --priority with --key"), "{err}");
    assert_eq!(status(m.port, url)[0], "ready 0", "nothing enqueued");
    let _ = std::fs::remove_file(&p);
    let _ = std::fs::remove_file(&got);
}

/// What an idle worker costs: requests per empty claim (each is followed by a jittered
/// pause of 5-10 s at the cap, so 480 empty claims an hour on average).
#[test]
fn an_empty_claim_costs_a_few_lists() {
    let Some(m) = moto() else { return };
    bucket(m.port, "idle");
    let q = queue(m.port, "idle", "q", Options::default());
    let n = 64;
    let before = q.client.requests();
    for _ in 0..n {
        assert!(q.claim().unwrap().is_none());
    }
    let per = (q.client.requests() - before) as f64 / n as f64;
    // Ready LIST (+1 wrapping when the start shard is not the first), then the same for
    // the leased index in recover: 2 to 4.
    assert!((2.0..=4.0).contains(&per), "{per} requests per empty claim");
    let mean_pause = (stowq::IDLE_MAX.as_secs_f64() * 0.75).max(0.001);
    report(&format!(
        "s3 idle: {per:.2} requests (LISTs) per empty claim; at the {} s cap one empty claim \
         per {mean_pause:.1} s: {:.0} LISTs per idle worker-hour (${:.4} at $0.005/1,000)",
        stowq::IDLE_MAX.as_secs(),
        per * 3600.0 / mean_pause,
        per * 3600.0 / mean_pause * 0.005 / 1000.0
    ));
}

/// Run `steadq` with `args` and stdout on `/dev/full` (or closed, `>&-`); exit code and
/// stderr.
fn lost_output(port: u16, args: &[&str], closed: bool) -> (i32, String) {
    let mut c = if closed {
        let mut c = std::process::Command::new("sh");
        c.args(["-c", "exec \"$0\" \"$@\" >&-", env!("CARGO_BIN_EXE_steadq")]);
        c.envs(cli(port).get_envs().filter_map(|(k, v)| Some((k, v?))));
        c
    } else {
        let mut c = cli(port);
        c.stdout(std::fs::File::create("/dev/full").unwrap());
        c
    };
    let o = c.args(args).stdin(Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.code().unwrap_or(-1), err)
}

/// A command that was done but whose output (a job id, a receipt) could not be written exits
/// 8 with what was done on stderr, as on a local queue: an `enqueue` to a full or closed
/// stdout exited 2 ("not done": a retry enqueues the job twice) or 0 with its id lost. A
/// `claim` whose handle cannot be written gives the job back (exit 2).
#[test]
fn done_commands_whose_output_is_lost_exit_8_not_2() {
    let Some(m) = moto() else { return };
    let url = "s3://clilost/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let (code, err) = lost_output(m.port, &["enqueue", url], false);
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("WAS enqueued"), "{err}");
    let (code, err) = lost_output(m.port, &["enqueue", url], true);
    assert_eq!(code, 8, "{err}");
    assert_eq!(status(m.port, url)[0], "ready 2", "both enqueues were done");
    // A closed stdout is refused before the claim: nothing is leased.
    let (code, err) = lost_output(m.port, &["claim", url], true);
    assert_eq!(code, 2, "{err}");
    assert_eq!(status(m.port, url)[2], "leased 0");
    // A full one fails after it: nobody got the handle, so the job goes back to ready with
    // its attempt given back, exit 2, as on a local queue (it exited 8 with the job leased
    // until its lease expired, an attempt used).
    let (code, err) = lost_output(m.port, &["claim", url], false);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("lease handle could not be written to stdout")
            && err.contains("released to ready, its attempt given back"),
        "{err}"
    );
    let s = status(m.port, url);
    assert_eq!((s[0].as_str(), s[2].as_str()), ("ready 2", "leased 0"));
    let (code, h) = out(cli(m.port).args(["claim", url]));
    assert_eq!(code, 0, "claim");
    let (code, err) = lost_output(m.port, &["ack", url, &h], false);
    assert_eq!(code, 8, "the ack was done: {err}");
    assert_eq!(status(m.port, url)[4], "done 1");
}

/// `work --once` whose job could not be settled exits by the settle's outcome (README: 2,
/// 4 when unknown, 6 when the lease was lost), so a cron job sees it: it exited 0 with
/// the job not acked. Here the lease is settled elsewhere while the command runs, so the
/// worker's ack finds it lost.
#[test]
fn work_once_whose_ack_was_not_done_does_not_exit_0() {
    let Some(m) = moto() else { return };
    let url = "s3://cliunsettled/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "cliunsettled", "q", Options::default());
    let id = q.enqueue(b"job").unwrap();
    let (worker, dir) = gated_work(m.port, url, "unsettled", &[]);
    let go = dir.join("go");
    // Someone else settles the lease (generation 1) first.
    let body = q.client.get(&q.keys().gen(id, 1)).unwrap().body;
    let rec = stowq::keys::Record::decode(&body).expect("the claim's record");
    let lease = q.resume_lease(id, 1, &rec.token).unwrap();
    q.ack(&lease).unwrap();
    std::fs::write(&go, b"").unwrap();
    let o = worker.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(6), "lease lost: {err}");
    assert!(err.contains(&format!("{id:032x}")), "names the job: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `STOWQ_TIMEOUT_MS` that is 0 or not a number is refused naming it, before any request:
/// 0 failed every request with "cannot set a 0 duration timeout", and `10s` was silently
/// taken as the default.
#[test]
fn a_bad_stowq_timeout_is_refused_by_name() {
    let Some(m) = moto() else { return };
    let url = "s3://clitimeout/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    for bad in ["0", "10s", "-1"] {
        let o = cli(m.port)
            .env("STOWQ_TIMEOUT_MS", bad)
            .args(["status", url])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "STOWQ_TIMEOUT_MS={bad}: {err}");
        assert!(err.contains("STOWQ_TIMEOUT_MS"), "names it: {err}");
    }
    let ok = out(cli(m.port)
        .env("STOWQ_TIMEOUT_MS", "5000")
        .args(["status", url]));
    assert_eq!(ok.0, 0);
}

/// A malformed job id is bad usage (exit 1, README's exit table), checked before anything is
/// read, as on a local queue: `dead requeue s3://... zz` exited 2, and `+123` was taken
/// for a job id.
#[test]
fn a_malformed_job_id_is_bad_usage() {
    let Some(m) = moto() else { return };
    let url = "s3://clijobid/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    for bad in ["zz", "+123", "0123456789ABCDEF0123456789ABCDEF"] {
        let o = cli(m.port)
            .args(["dead", "requeue", url, bad])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{bad}: {err}");
        assert!(err.contains(bad), "names it: {err}");
    }
    let none = "0123456789abcdef0123456789abcdef";
    let code = out(cli(m.port).args(["dead", "requeue", url, none])).0;
    assert_eq!(code, 2, "a well-formed id that is not dead: not done");
}

/// `work --once` handles at most one job (`--help`), whatever `--concurrency` says: with
/// `--concurrency 4` it ran up to 4 jobs, and exited 3 ("no job was ready") after running
/// some when one of its threads found none.
#[test]
fn work_once_handles_one_job_whatever_the_concurrency() {
    let Some(m) = moto() else { return };
    let url = "s3://clionce/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clionce", "q", Options::default());
    for i in 0..3 {
        q.enqueue(format!("job {i}").as_bytes()).unwrap();
    }
    let args = ["work", url, "--once", "--concurrency", "4", "--", "cat"];
    let (code, _) = out(cli(m.port).args(args));
    assert_eq!(code, 0, "one job handled");
    assert_eq!(status(m.port, url)[0], "ready 2");
    assert_eq!(status(m.port, url)[4], "done 1");
}

/// An enqueue's input is named when it cannot be read, and a payload over `--max-payload`
/// is refused after reading just past the limit: the whole input was read into memory first
/// (`--file /dev/zero` ran out of memory; here, of a 400 MB address-space limit), and a
/// missing file was "read payload: No such file or directory", naming nothing.
#[test]
fn enqueue_input_is_named_and_read_only_to_the_limit() {
    let Some(m) = moto() else { return };
    let url = "s3://clipayload/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let o = cli(m.port)
        .args(["enqueue", url, "--file", "/nonexistent/payload"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent/payload"), "names it: {err}");
    let mut c = std::process::Command::new("sh");
    c.args(["-c", "ulimit -v 400000; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_steadq"))
        .args([
            "enqueue",
            url,
            "--file",
            "/dev/zero",
            "--max-payload",
            "1000",
        ])
        .envs(cli(m.port).get_envs().filter_map(|(k, v)| Some((k, v?))));
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--max-payload"), "{err}");
    assert_eq!(status(m.port, url)[0], "ready 0", "nothing enqueued");
}

/// A worker whose command succeeded retries an ack that met a short outage (1, 2, 4 s
/// apart) instead of giving up at once: the job stayed leased until its lease expired and
/// then ran again, after a blip of a second or two (the local worker's ack retries, README).
#[test]
fn work_retries_an_ack_through_a_short_outage() {
    ack_through_an_outage(Fault::Outage, "cliackretry");
}

/// As [`work_retries_an_ack_through_a_short_outage`], but the outage loses the answers, not
/// the requests: the first ack was applied, so a later try meets its own generation (412).
/// That is our ack (done, exit 0), not a lost lease.
#[test]
fn work_takes_its_own_applied_ack_for_done_not_a_lost_lease() {
    ack_through_an_outage(Fault::OutageAfter, "cliackown");
}

/// `work --once` through a proxy that has `outage` for 1.5 s as the command ends.
fn ack_through_an_outage(outage: Fault, bucket: &str) {
    let Some(m) = moto() else { return };
    let url = format!("s3://{bucket}/q");
    let url = url.as_str();
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, bucket, "q", Options::default());
    let id = q.enqueue(b"job").unwrap();
    let p = Proxy::start(m.port);
    let (worker, dir) = gated_work(p.port, url, bucket, &[]);
    let go = dir.join("go");
    // The server goes away as the command ends, and comes back 1.5 s later.
    p.arm(Some((outage, 0)));
    std::fs::write(&go, b"").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    p.arm(None);
    let o = worker.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "acked after the outage: {err}");
    let (gen, rec) = q.inspect(id).unwrap().unwrap();
    assert_eq!((gen, rec.state, rec.attempt), (2, stowq::State::Done, 1));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `init`'s bucket creation reports its outcome as it is: a connection refused is not done
/// (exit 2; it exited 4, "indeterminate", printing `NotSent("connect ...")`), and a refusal
/// names the service's error code (`HTTP 400` named nothing).
#[test]
fn init_reports_a_refused_connection_as_not_done() {
    let Some(m) = moto() else { return };
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let o = cli(port)
        .args(["init", "s3://initdown/q"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("create bucket initdown: not done"), "{err}");
    // A bucket name S3 refuses (too short).
    let o = cli(m.port).args(["init", "s3://b1/q"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("InvalidBucketName"), "{err}");
}

/// An IPv6 literal endpoint (`http://[::1]:9000`, a MinIO on IPv6) works: the brackets
/// were kept in the name to resolve ("resolve [::1]: failed to lookup address").
#[test]
fn an_ipv6_literal_endpoint_works() {
    let Some(m) = moto() else { return };
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        report("SKIPPED an_ipv6_literal_endpoint_works: no IPv6 loopback here");
        return;
    }
    let p = Proxy::start_on("[::1]:0", m.port);
    let mut c = cli(m.port);
    c.env("AWS_ENDPOINT_URL", format!("http://[::1]:{}", p.port));
    let (code, id) = out(c.args(["init", "s3://ipsix/q"]));
    assert_eq!((code, id.len()), (0, 32));
    assert_eq!(status(m.port, "s3://ipsix/q")[0], "ready 0");
}

/// A renewal whose answer was lost (applied, but neither it nor the read-back answered)
/// left the worker holding the generation below its own renewal: every later renewal met
/// that renewal (412, "lease lost"), so the lease ran out while the command still ran (and
/// another worker could take the job). A renewal that finds its lease's next generation
/// leased under its own token takes it up and goes on.
#[test]
fn work_takes_up_its_own_renewal_after_lost_answers() {
    let Some(m) = moto() else { return };
    let url = "s3://clirenewlost/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clirenewlost", "q", Options::default());
    let id = q.enqueue(b"job").unwrap();
    let p = Proxy::start(m.port);
    // A 3 s lease is renewed every second.
    let (worker, dir) = gated_work(p.port, url, "renewlost", &["--lease", "3s"]);
    let go = dir.join("go");
    // Answers are lost over the first renewal (about 1 s after the claim).
    std::thread::sleep(Duration::from_millis(200));
    p.arm(Some((Fault::OutageAfter, 0)));
    std::thread::sleep(Duration::from_millis(1500));
    p.arm(None);
    // Past the deadline of that lost renewal: the lease must have been renewed since.
    std::thread::sleep(Duration::from_millis(4500));
    let (gen, rec) = q.inspect(id).unwrap().unwrap();
    let now = q.client.clock.now_ms();
    std::fs::write(&go, b"").unwrap();
    let o = worker.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(rec.state, stowq::State::Leased, "{err}");
    assert!(
        rec.due_ms > now,
        "generation {gen} expired while the command ran: {err}"
    );
    assert_eq!(o.status.code(), Some(0), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `renew` whose outcome is unknown says which handle holds the lease if it was done (its
/// next generation's, known in advance), as on a local queue: it exited 4 naming none, and
/// the old handle is refused once the renewal was applied (exit 6), so the script lost a
/// lease it held.
#[test]
fn an_indeterminate_renew_names_the_handle_it_may_have_made() {
    let Some(m) = moto() else { return };
    let url = "s3://clirenewhint/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clirenewhint", "q", Options::default());
    q.enqueue(b"job").unwrap();
    let (code, h) = out(cli(m.port).args(["claim", url]));
    assert_eq!(code, 0);
    let p = Proxy::start(m.port);
    // Answers lost from the renewal's create on (after the identity and the lease's GETs).
    p.arm(Some((Fault::OutageAfter, 2)));
    let o = cli(p.port).args(["renew", url, &h]).output().unwrap();
    p.arm(None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    let new = err
        .split("its handle is then ")
        .nth(1)
        .and_then(|r| r.split([',', ' ']).next())
        .unwrap_or_else(|| panic!("no handle in {err:?}"));
    assert_eq!(
        out(cli(m.port).args(["ack", url, &h])).0,
        6,
        "the old one lost it"
    );
    assert_eq!(
        out(cli(m.port).args(["ack", url, new])).0,
        0,
        "the named one holds it"
    );
}

/// A queue in a bucket that does not exist (a typo) says so, naming the bucket: it said
/// "not a stowq queue: no q/queue", as if the bucket held something else.
#[test]
fn a_missing_bucket_is_named_as_missing() {
    let Some(m) = moto() else { return };
    for args in [
        &["status", "s3://nosuchbucket/q"][..],
        &["claim", "s3://nosuchbucket/q"],
    ] {
        let o = cli(m.port).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("bucket nosuchbucket does not exist"), "{err}");
    }
}

/// `list --state delayed` lists the jobs `status` counts as delayed (ready, not yet due),
/// and `--state ready` the due ones: each listed both.
#[test]
fn list_tells_ready_from_delayed_as_status_does() {
    let Some(m) = moto() else { return };
    let url = "s3://clilist/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clilist", "q", Options::default());
    let later = q.enqueue(b"later").unwrap();
    let l = q.claim().unwrap().unwrap();
    q.nack(&l, Duration::from_secs(3600), "later").unwrap();
    let now = q.enqueue(b"now").unwrap();
    assert_eq!(&status(m.port, url)[..2], ["ready 1", "delayed 1"]);
    let ids = |state: &str| {
        let (code, s) = out(cli(m.port).args(["list", url, "--state", state]));
        assert_eq!(code, 0);
        s.lines()
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids("delayed"), [format!("{later:032x}")]);
    assert_eq!(ids("ready"), [format!("{now:032x}")]);
}

/// A job whose envelope fails verification is dead-lettered by the claim that meets it, and
/// that is said: a warning names the job, `claim` says it dead-lettered one, and `work
/// --once` exits 0 (it handled a job), as on a local queue. It was silent: `claim` and
/// `work --once` exited 3, "no job ready".
#[test]
fn a_claim_says_which_corrupt_job_it_dead_lettered() {
    let Some(m) = moto() else { return };
    let url = "s3://clicorrupt/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clicorrupt", "q", Options::default());
    let corrupt = |q: &stowq::Queue| {
        let id = q.enqueue(b"precious payload").unwrap();
        let key = q.keys().gen(id, 0);
        let mut body = q.client.get(&key).unwrap().body;
        let last = body.len() - 1;
        body[last] ^= 1;
        assert_eq!(q.client.put(&key, &body).unwrap().status, 200);
        format!("{id:032x}")
    };
    let id = corrupt(&q);
    let o = cli(m.port)
        .args(["work", url, "--once", "--", "cat"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&id) && err.contains("corrupt envelope"),
        "{err}"
    );
    let id = corrupt(&q);
    let o = cli(m.port).args(["claim", url]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&id) && err.contains("1 job(s) dead-lettered"),
        "{err}"
    );
    assert_eq!(status(m.port, url)[5], "dead 2");
}

/// `nack` prints the job's new state as on a local queue (`ready`, `delayed until UTC (unix
/// SECS.mmm)`, `dead (attempts exhausted)`), and `work` says what its nack did in words: both
/// printed Rust's debug form, `Ready(1796438078004)`.
#[test]
fn nack_prints_the_new_state_in_words() {
    let Some(m) = moto() else { return };
    let url = "s3://clinack/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clinack", "q", Options::default());
    q.enqueue(b"job").unwrap();
    let max = Options::default().max_attempts;
    let claim = || {
        let (code, h) = out(cli(m.port).args(["claim", url]));
        assert_eq!(code, 0, "claim");
        h
    };
    for _ in 1..max {
        assert_eq!(
            out(cli(m.port).args(["nack", url, &claim()])),
            (0, "ready".into())
        );
    }
    assert_eq!(
        out(cli(m.port).args(["nack", url, &claim()])),
        (0, "dead (attempts exhausted)".into())
    );
    assert_eq!(status(m.port, url)[5], "dead 1");
    // Delayed: until the service's time plus the delay, in seconds with 3 decimals.
    q.enqueue(b"later").unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let (code, s) = out(cli(m.port).args(["nack", url, &claim(), "--delay", "1h"]));
    assert_eq!(code, 0);
    let secs = s
        .split_once(" (unix ")
        .and_then(|(_, t)| t.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{s:?}"));
    assert!(
        s.starts_with("delayed until 20") && s.contains("Z (unix "),
        "{s}"
    );
    assert_eq!(secs.split_once('.').map(|(_, f)| f.len()), Some(3), "{s}");
    let secs: f64 = secs.parse().unwrap();
    assert!((secs - now - 3600.0).abs() < 60.0, "{s} vs now {now}");
    // `work`: the outcome of its nack in words.
    let id2 = q.enqueue(b"fails").unwrap();
    let o = cli(m.port)
        .args(["work", url, "--once", "--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("{id2:032x} exit status: 3, failed: retry in 10s")),
        "{err}"
    );
    assert!(!err.contains("Ready("), "{err}");
}

/// `claim --payload-out` as on a local queue: a path that cannot be opened is refused
/// before the claim (exit 2, nothing leased; it claimed the job and exited 4 with it leased
/// and an attempt used), and a payload that cannot be written after the claim gives the job
/// back to ready with its attempt (exit 2). Without a job a new payload file is removed
/// again and an existing one keeps its bytes.
#[test]
fn claim_payload_out_that_cannot_be_written_leaves_the_job_ready() {
    let Some(m) = moto() else { return };
    let url = "s3://clipayloadout/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clipayloadout", "q", Options::default());
    let tmp = std::env::temp_dir().join(format!("steadq-s3-po-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let file = tmp.join("payload");
    let missing = tmp.join("no-such-dir/payload");
    let claim = |port: u16, path: &std::path::Path| {
        let o = cli(port)
            .args(["claim", url, "--payload-out", path.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let h = String::from_utf8_lossy(&o.stdout).trim().to_string();
        (o.status.code().unwrap_or(-1), h, err)
    };
    let state = |id: u128| {
        let (gen, rec) = q.inspect(id).unwrap().unwrap();
        (gen, rec.state, rec.attempt)
    };
    // No job: exit 3; the new file is removed again, an existing one is left as it was.
    let (code, _, err) = claim(m.port, &file);
    assert_eq!(code, 3, "{err}");
    assert!(!file.exists());
    std::fs::write(&file, b"old").unwrap();
    assert_eq!(claim(m.port, &file).0, 3);
    assert_eq!(std::fs::read(&file).unwrap(), b"old");
    let id = q.enqueue(b"payload").unwrap();
    // A path that cannot be opened: refused before the claim, naming the option and path.
    let (code, h, err) = claim(m.port, &missing);
    assert_eq!((code, h.as_str()), (2, ""), "{err}");
    assert!(
        err.contains(&format!("--payload-out {}", missing.display()))
            && err.contains("no job was claimed"),
        "{err}"
    );
    assert_eq!(state(id), (0, stowq::State::Ready, 0), "not claimed");
    // Written after the claim and failing (ENOSPC): given back with its attempt.
    let (code, h, err) = claim(m.port, std::path::Path::new("/dev/full"));
    assert_eq!((code, h.as_str()), (2, ""), "{err}");
    assert!(
        err.contains("/dev/full") && err.contains("released to ready, its attempt given back"),
        "{err}"
    );
    assert_eq!(
        state(id),
        (2, stowq::State::Ready, 0),
        "ready, attempt given back"
    );
    assert_eq!(
        status(m.port, url)[..3],
        ["ready 1", "delayed 0", "leased 0"]
    );
    // The next claim is its first attempt, and delivers the payload.
    let (code, h, err) = claim(m.port, &file);
    assert_eq!(code, 0, "{err}");
    assert!(h.starts_with(&format!("{id:032x}.3.")), "{h}");
    assert_eq!(std::fs::read(&file).unwrap(), b"payload");
    assert_eq!(state(id), (3, stowq::State::Leased, 1));
    assert_eq!(out(cli(m.port).args(["nack", url, &h])).0, 0);
    // The give-back itself fails (the service is gone from the create of generation 6, the
    // release of the lease at 5, on): the job stays leased, and the message names its
    // handle, which still holds it.
    let p = Proxy::start(m.port);
    p.outage_from(&format!("/q/j/{id:032x}/00000006 "));
    let o = cli(p.port)
        .env("STOWQ_TIMEOUT_MS", "300")
        .args(["claim", url, "--payload-out", "/dev/full"])
        .output()
        .unwrap();
    p.arm(None);
    let err = String::from_utf8_lossy(&o.stderr);
    // Its create was dropped unanswered: whether it was applied is unknown (exit 4).
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains(&format!("releasing the job {id:032x} failed too"))
            && err.contains("it may still be leased until its lease expires"),
        "{err}"
    );
    let h = err
        .split("its lease handle is ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no handle in {err:?}"));
    assert_eq!(state(id), (5, stowq::State::Leased, 2), "{err}");
    assert_eq!(out(cli(m.port).args(["nack", url, h])), (0, "ready".into()));
    let _ = std::fs::remove_dir_all(&tmp);
}

/// A command that cannot start never uses up a job's attempts, as on a local queue: one
/// that is not there (or not executable) is refused before any claim, and one that passes
/// that check but cannot be started (a script whose `#!` interpreter is missing) gives the
/// job back with its attempt. Both nacked the job: five `work --once` runs dead-lettered a
/// job that never ran.
#[test]
fn a_command_that_cannot_start_uses_up_no_attempt() {
    let Some(m) = moto() else { return };
    let url = "s3://clinostart/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clinostart", "q", Options::default());
    let id = q.enqueue(b"job").unwrap();
    let state = || {
        let (gen, rec) = q.inspect(id).unwrap().unwrap();
        (gen, rec.state, rec.attempt)
    };
    let work = |args: &[&str]| {
        let o = cli(m.port).args(["work", url]).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        (o.status.code().unwrap_or(-1), err)
    };
    let max = Options::default().max_attempts;
    for _ in 0..=max {
        let (code, err) = work(&["--once", "--", "/nonexistent/program"]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("cannot run \"/nonexistent/program\"")
                && err.contains("no job was claimed"),
            "{err}"
        );
        assert_eq!(state(), (0, stowq::State::Ready, 0), "{err}");
    }
    let dir = std::env::temp_dir().join(format!("steadq-s3-nostart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("job.sh");
    std::fs::write(&script, "#!/nonexistent/interpreter\ncat\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = script.to_str().unwrap();
    for i in 1..=u64::from(max) {
        // The long-running worker stops too: its command will not start for any job.
        let once: &[&str] = if i == 1 { &[] } else { &["--once"] };
        let (code, err) = work(&[once, &["--", script]].concat());
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("cannot run {script:?}"))
                && err.contains(&format!(
                    "the job {id:032x} was released to ready, its attempt given back"
                )),
            "{err}"
        );
        assert_eq!(
            state(),
            (2 * i, stowq::State::Ready, 0),
            "given back with its attempt: {err}"
        );
    }
    // The job never ran: its first run is attempt 1.
    let (code, err) = work(&["--once", "--", "cat"]);
    assert_eq!(code, 0, "{err}");
    let g = 2 * u64::from(max);
    assert_eq!(state(), (g + 2, stowq::State::Done, 1), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `work`'s command gets its arguments byte for byte, also those that are not UTF-8, as on
/// a local queue: it got the placeholder the CLI parses them as (`\u{10fffd}steadq-raw-arg-0`).
#[test]
fn work_passes_non_utf8_arguments_byte_for_byte() {
    use std::os::unix::ffi::OsStrExt;
    let Some(m) = moto() else { return };
    let url = "s3://clirawarg/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clirawarg", "q", Options::default());
    q.enqueue(b"job").unwrap();
    let dir = std::env::temp_dir().join(format!("steadq-s3-rawarg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let got = dir.join("arg");
    let script = format!("printf '%s' \"$0\" > {}", got.display());
    let o = cli(m.port)
        .args(["work", url, "--once", "--", "sh", "-c", &script])
        .arg(std::ffi::OsStr::from_bytes(b"a\xffb"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(std::fs::read(&got).unwrap(), b"a\xffb");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The descriptor numbers `pid` has open now (its `/proc/PID/fd` entries).
fn open_fds(pid: u32) -> std::collections::BTreeSet<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// A long-running `work` whose command cannot start for want of descriptors (EMFILE: its
/// soft RLIMIT_NOFILE is lowered with prlimit(2) to leave one descriptor free: room for a
/// request's socket but not for the command's stdin pipe) gives the job back with its
/// attempt, waits a second and carries on, as `work` on a local queue does; once the limit
/// is raised again the job runs, as its first attempt. It stopped (exit 2) at the first
/// such spawn, a whole worker lost to a moment's shortage.
#[test]
fn work_outlasts_commands_that_cannot_start_for_want_of_descriptors() {
    use rustix::process::{prlimit, Pid, Resource, Rlimit};

    use std::io::Read;
    use std::sync::{Arc, Mutex};
    let Some(m) = moto() else { return };
    let url = "s3://clinofd/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clinofd", "q", Options::default());
    let dir = std::env::temp_dir().join(format!("steadq-s3-nofd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!("cat > {}/$STEADQ_JOB_ID", dir.display());
    let mut worker = cli(m.port)
        .args(["work", url, "--lease", "30s", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = Arc::new(Mutex::new(String::new()));
    let mut pipe = worker.stderr.take().unwrap();
    let e2 = err.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            e2.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let stderr = || err.lock().unwrap().clone();
    // Idle (an empty queue): the descriptors it holds between requests (those open in
    // every sample; a request's socket comes and goes).
    std::thread::sleep(Duration::from_millis(1500));
    let held = (0..20)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(50));
            open_fds(worker.id())
        })
        .reduce(|a, b| a.intersection(&b).copied().collect())
        .unwrap();
    assert!(held.is_superset(&[0, 1, 2].into()), "{held:?}");
    // RLIMIT_NOFILE bounds descriptor numbers: the smallest limit that leaves exactly one
    // number free below it (a request's socket fits, a pipe's two ends do not).
    let limit = (1..)
        .find(|&l| l - held.range(..l).count() as u64 == 1)
        .unwrap();
    let pid = Pid::from_raw(worker.id() as i32).unwrap();
    // The hard limit stays (the worker inherited this process's); the old limits come back.
    let hard = rustix::process::getrlimit(Resource::Nofile).maximum;
    let lower = Rlimit {
        current: Some(limit),
        maximum: hard,
    };
    let before = prlimit(Some(pid), Resource::Nofile, lower).unwrap();
    let id = q.enqueue(b"job").unwrap();
    let refusals = || stderr().matches("Too many open files").count();
    let t0 = Instant::now();
    while refusals() < 3 {
        assert!(
            worker.try_wait().unwrap().is_none(),
            "the worker stopped: {}",
            stderr()
        );
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no three refused spawns: {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let e = stderr();
    assert!(
        e.contains(&format!("job {id:032x}: cannot start \"sh\" now: "))
            && e.contains("its attempt given back"),
        "{e}"
    );
    assert!(!dir.join(format!("{id:032x}")).exists(), "it never ran");
    // Room again: the job runs, as its first attempt.
    prlimit(Some(pid), Resource::Nofile, before).unwrap();
    let t1 = Instant::now();
    loop {
        let (_, rec) = q.inspect(id).unwrap().unwrap();
        if rec.state == stowq::State::Done {
            assert_eq!(rec.attempt, 1, "{}", stderr());
            break;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(30),
            "not done: {rec:?} {}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let got = std::fs::read_to_string(dir.join(format!("{id:032x}"))).unwrap();
    assert_eq!(got, "job");
    let _ = std::process::Command::new("kill")
        .arg(worker.id().to_string())
        .status();
    assert_eq!(worker.wait().unwrap().code(), Some(0), "{}", stderr());
    reader.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// As on a local queue: a `--payload-out` file written part-way (`ulimit -f 1`: EFBIG after
/// 1,024 bytes of 5,000) is not left behind for a script to read as the payload: one the
/// claim made is removed, one that existed is emptied, and the job is ready again with its
/// attempt given back.
#[test]
fn claim_payload_out_written_part_way_is_not_left_behind() {
    let Some(m) = moto() else { return };
    let url = "s3://clipartial/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clipartial", "q", Options::default());
    let payload: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let id = q.enqueue(&payload).unwrap();
    let tmp = std::env::temp_dir().join(format!("steadq-s3-partial-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let file = tmp.join("payload");
    for (existed, left) in [(false, "removed"), (true, "emptied")] {
        if existed {
            std::fs::write(&file, b"an older file").unwrap();
        }
        let mut c = std::process::Command::new("sh");
        c.args([
            "-c",
            "ulimit -f 1; exec \"$0\" claim \"$1\" --payload-out \"$2\"",
        ])
        .args([env!("CARGO_BIN_EXE_steadq"), url, file.to_str().unwrap()])
        .envs(cli(m.port).get_envs().filter_map(|(k, v)| Some((k, v?))));
        let o = c.stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("; the partial file was {left}"))
                && err.contains("released to ready, its attempt given back"),
            "{err}"
        );
        match std::fs::metadata(&file) {
            Ok(md) => assert!(existed && md.len() == 0, "{} bytes left", md.len()),
            Err(_) => assert!(!existed, "the existing file is kept, emptied"),
        }
        let (_, rec) = q.inspect(id).unwrap().unwrap();
        assert_eq!((rec.state, rec.attempt), (stowq::State::Ready, 0));
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `claim --wait D` on an `s3://` queue (was refused): on an empty queue it looks again after
/// the idle pauses and exits 3 once `D` has passed, not before; a job enqueued during the
/// wait is claimed (exit 0, its handle printed) well before `D` ends.
#[test]
fn claim_wait_waits_for_a_job_on_s3() {
    let Some(m) = moto() else { return };
    bucket(m.port, "cwait");
    let url = "s3://cwait/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let t0 = Instant::now();
    let (code, _) = out(cli(m.port).args(["claim", "--wait", "1s", url]));
    let took = t0.elapsed();
    assert_eq!(code, 3, "no job within the wait");
    assert!(took >= Duration::from_secs(1), "waited {took:?}");
    let port = m.port;
    let late = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        let mut c = cli(port);
        c.args(["enqueue", url]).stdin(Stdio::piped());
        let mut ch = c.stdout(Stdio::piped()).spawn().unwrap();
        std::io::Write::write_all(&mut ch.stdin.take().unwrap(), b"late job").unwrap();
        let o = ch.wait_with_output().unwrap();
        assert!(o.status.success());
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    });
    let t0 = Instant::now();
    let (code, handle) = out(cli(m.port).args(["claim", "--wait", "30s", url]));
    let took = t0.elapsed();
    let id = late.join().unwrap();
    assert_eq!(code, 0);
    assert!(
        handle.starts_with(&format!("{id}.")),
        "{handle} for job {id}"
    );
    assert!(took < Duration::from_secs(10), "claimed after {took:?}");
    report(&format!(
        "s3 claim --wait: a job enqueued 0.8 s into the wait claimed after {took:?}"
    ));
}

/// `enqueue --key K` on an `s3://` queue (was refused): the second enqueue of a key prints
/// the first one's id, says `duplicate` on stderr and exits 0; one job exists.
#[test]
fn enqueue_key_on_s3_names_the_existing_job() {
    let Some(m) = moto() else { return };
    bucket(m.port, "ckey");
    let url = "s3://ckey/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let run = |payload: &[u8]| {
        let mut ch = cli(m.port)
            .args(["enqueue", "--key", "order-7", url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut ch.stdin.take().unwrap(), payload).unwrap();
        let o = ch.wait_with_output().unwrap();
        (
            o.status.code().unwrap(),
            String::from_utf8(o.stdout).unwrap().trim().to_string(),
            String::from_utf8(o.stderr).unwrap(),
        )
    };
    let (c1, id1, _) = run(b"one");
    let (c2, id2, err2) = run(b"two");
    assert_eq!((c1, c2), (0, 0));
    assert_eq!(id1, id2);
    assert!(
        err2.contains(&format!("duplicate: key order-7 already names job {id1}")),
        "{err2}"
    );
    assert_eq!(status(m.port, url)[0], "ready 1");
}

/// `enqueue --delay D` on an s3:// queue: the job is not claimed before it is due (claim exit
/// 3), `status` counts it delayed, `list` names it `delayed` (as a local queue's does) and
/// `show` says when it is due; a claim waiting for it gets it once due, not before. It was
/// refused.
#[test]
fn enqueue_delay_on_s3_is_claimed_only_once_due() {
    let Some(m) = moto() else { return };
    let url = "s3://clidelay/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clidelay", "q", Options::default());
    let t0 = Instant::now();
    let before = q.client.clock.now_ms();
    let (code, id) = out(cli(m.port)
        .args(["enqueue", url, "--delay", "4s"])
        .stdin(Stdio::null()));
    assert_eq!((code, id.len()), (0, 32), "{id}");
    assert_eq!(out(cli(m.port).args(["claim", url])).0, 3, "not due yet");
    assert_eq!(&status(m.port, url)[..2], ["ready 0", "delayed 1"]);
    let (code, l) = out(cli(m.port).args(["list", url]));
    assert_eq!(code, 0);
    let f: Vec<&str> = l.split(' ').collect();
    assert_eq!(f[..4], [id.as_str(), "delayed", "1", "0"], "{l}");
    let due: i64 = f[4].parse().unwrap();
    assert!(
        (before + 3_000..=before + 6_000).contains(&due),
        "due {due}, enqueued at {before}"
    );
    let (code, ids) = out(cli(m.port).args(["list", url, "--state", "delayed"]));
    assert_eq!((code, ids.split(' ').next()), (0, Some(id.as_str())));
    // A due time past the year 2262 (a local queue's limit; the CLI takes at most 100
    // years) is refused by the library, not done, and nothing is made.
    let e = q
        .enqueue_delayed(b"never", Duration::from_secs(400 * 365 * 86_400))
        .unwrap_err();
    assert_eq!(e.outcome, stowq::Outcome::NotDone, "{e}");
    assert!(e.to_string().contains("past the year 2262"), "{e}");
    let (code, h) = out(cli(m.port).args(["claim", url, "--wait", "20s"]));
    assert_eq!(code, 0);
    assert!(h.starts_with(&id), "{h}");
    assert_eq!(
        &status(m.port, url)[..3],
        ["ready 0", "delayed 0", "leased 1"]
    );
    // Due 4 s after the enqueue on the service's clock (counted from the enqueuer's upper
    // bound of it); a claim takes it up to 1 s early (its own upper bound), never sooner.
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(2_900),
        "claimed after {waited:?}"
    );
}

/// Options an s3:// queue still refuses are refused by name, with the reason, and nothing is
/// enqueued: `--after`, `--group`, `--delay` with `--key`, and `limit --group`.
#[test]
fn options_still_refused_on_s3_are_named_with_their_reason() {
    let Some(m) = moto() else { return };
    let url = "s3://clirefused/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let id = "0123456789abcdef0123456789abcdef";
    let cases: [(&[&str], &str, &str); 6] = [
        (
            &["enqueue", url, "--after", id],
            "enqueue --after",
            "no dependencies",
        ),
        (
            &["enqueue", url, "--group", "g1"],
            "enqueue --group",
            "no groups",
        ),
        (
            &["enqueue", url, "--delay", "1m", "--key", "k1"],
            "enqueue --delay with --key",
            "generation 0",
        ),
        (
            &["enqueue", url, "--max-attempts", "2"],
            "enqueue --max-attempts",
            "not stored per job",
        ),
        (
            &["limit", url, "--group", "g1", "--max-leased", "2"],
            "limit --group",
            "no groups",
        ),
        (&["limit", url], "limit", "no groups"),
    ];
    for (args, what, why) in cases {
        let o = cli(m.port)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("{what}: not supported on s3:// queues (")),
            "{err}"
        );
        assert!(err.contains(why), "{err}");
    }
    assert_eq!(
        &status(m.port, url)[..2],
        ["ready 0", "delayed 0"],
        "nothing enqueued"
    );
}

/// `show JOB` on an s3:// queue prints the fields a local queue's `show` prints, in its
/// order (state, the newest generation's key as `path`, attempt, generation, the envelope's
/// header and the payload); `--raw` prints the payload alone. A malformed id is bad usage
/// (exit 1) and an unknown one not done (exit 2), each named, as locally. It was refused.
#[test]
fn show_on_s3_prints_what_a_local_show_does() {
    let Some(m) = moto() else { return };
    let url = "s3://clishow/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clishow", "q", Options::default());
    let id = format!("{:032x}", q.enqueue(b"hello").unwrap());
    let (code, s) = out(cli(m.port).args(["show", url, &id]));
    assert_eq!(code, 0);
    let fields = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect()
    };
    // The same fields as a local queue's show of the same payload.
    let dir = scratch_dir("clishow-local");
    let local = dir.join("q");
    let local = local.to_str().unwrap();
    assert_eq!(out(cli(m.port).args(["init", local])).0, 0);
    let (code, lid) = out(cli(m.port)
        .args(["enqueue", local])
        .stdin(std::fs::File::open(write_tmp(&dir, b"hello")).unwrap()));
    assert_eq!(code, 0);
    let (code, ls) = out(cli(m.port).args(["show", local, &lid]));
    assert_eq!(code, 0);
    assert_eq!(fields(&s), fields(&ls), "s3:\n{s}\nlocal:\n{ls}");
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines[0], format!("job       {id}"));
    assert_eq!(lines[1].trim_end(), "state     ready");
    assert_eq!(lines[2], format!("path      q/j/{id}/00000000"));
    assert_eq!(lines[3..6], ["attempt   0/5", "gen       0", "priority  3"]);
    assert_eq!(lines[7], "bytes     5");
    let sha = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
    assert_eq!(lines[8], format!("sha256    {sha}"));
    assert_eq!(
        lines[8],
        ls.lines().nth(8).unwrap(),
        "the same payload digest"
    );
    assert_eq!(lines[10], "payload   hello");
    let raw = cli(m.port)
        .args(["show", url, &id, "--raw"])
        .output()
        .unwrap();
    assert_eq!(
        (raw.status.code(), &raw.stdout[..]),
        (Some(0), &b"hello"[..])
    );
    // Claimed: leased at generation 1; acked: the receipt and its token.
    let l = q.claim().unwrap().unwrap();
    let (code, s) = out(cli(m.port).args(["show", url, &id]));
    assert_eq!(code, 0);
    assert!(s.contains("\nstate     leased lease expires in "), "{s}");
    assert!(
        s.contains(&format!(
            "\npath      q/j/{id}/00000001\nattempt   1/5\ngen       1\n"
        )),
        "{s}"
    );
    q.ack(&l).unwrap();
    let (code, s) = out(cli(m.port).args(["show", url, &id]));
    assert_eq!(code, 0);
    assert!(
        s.contains(&format!("\nstate     acked token {}\n", l.token)),
        "{s}"
    );
    // Delayed: its record above the envelope, and when it is due.
    let later = q
        .enqueue_delayed(b"later", Duration::from_secs(3600))
        .unwrap();
    let later = format!("{later:032x}");
    let (code, s) = out(cli(m.port).args(["show", url, &later]));
    assert_eq!(code, 0);
    assert!(
        s.contains("\nstate     delayed due in 59m\n")
            || s.contains("\nstate     delayed due in 60m\n"),
        "{s}"
    );
    assert!(
        s.contains(&format!(
            "\npath      q/j/{later}/00000001\nattempt   0/5\ngen       1\n"
        )),
        "{s}"
    );
    assert!(s.ends_with("\npayload   later"), "{s}");
    // An envelope that fails verification: the job's fields, not its header; exit 2 naming
    // the key while the job is not dead yet, as locally.
    let bad = q.enqueue(b"precious").unwrap();
    let key = q.keys().gen(bad, 0);
    let mut body = q.client.get(&key).unwrap().body;
    *body.last_mut().unwrap() ^= 1;
    assert_eq!(q.client.put(&key, &body).unwrap().status, 200);
    let o = cli(m.port)
        .args(["show", url, &format!("{bad:032x}")])
        .output()
        .unwrap();
    let (so, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&key) && err.contains("corrupt envelope"),
        "{err}"
    );
    assert!(
        so.contains("\nfile      corrupt (") && !so.contains("\npayload "),
        "{so}"
    );
    // Malformed: exit 1; unknown: exit 2; each named.
    for (job, code) in [
        ("zz", 1),
        ("0123456789ABCDEF0123456789ABCDEF", 1),
        ("0123456789abcdef0123456789abcdef", 2),
    ] {
        let o = cli(m.port).args(["show", url, job]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{job}: {err}");
        assert!(err.contains(job), "names it: {err}");
        assert!(o.stdout.is_empty(), "{job}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn write_tmp(dir: &std::path::Path, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join("payload");
    std::fs::write(&p, bytes).unwrap();
    p
}

/// `fsck` on an s3:// queue is `recover`'s index repair as a read-only report: a job's
/// missing marker, a stale marker, a marker of no job and a foreign object are each named
/// on a line, exit 5 (as a local fsck with problems), and no object is created or deleted;
/// after `recover` only the foreign object (which repair leaves) is reported, and without
/// it fsck exits 0. `--quarantine` is refused by name. It was refused.
#[test]
fn fsck_on_s3_reports_what_repair_would_fix_and_changes_nothing() {
    let Some(m) = moto() else { return };
    let url = "s3://clifsck/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, "clifsck", "q", Options::default());
    let fsck = || {
        let o = cli(m.port).args(["fsck", url]).output().unwrap();
        (
            o.status.code().unwrap(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let keys = || -> Vec<String> {
        let p = q.client.list("q/", None, None, 1000).unwrap().unwrap();
        assert!(p.next.is_none());
        p.entries.into_iter().map(|e| e.key).collect()
    };
    let marker_of = |id: u128| -> String {
        keys()
            .into_iter()
            .find(|k| k.starts_with("q/i/") && k.contains(&format!("{id:032x}")))
            .unwrap()
    };
    q.enqueue(b"fine").unwrap();
    let (code, so, se) = fsck();
    assert_eq!((code, so.as_str()), (0, ""), "{se}");
    assert!(
        se.contains("1 chains and 1 index markers read") && se.ends_with("0 problems\n"),
        "{se}"
    );
    // A job without its marker (a crash between its create and its marker's put).
    let lost = q.enqueue(b"unindexed").unwrap();
    let lost_marker = marker_of(lost);
    assert_eq!(q.client.delete(&lost_marker).unwrap().status, 204);
    // A stale marker: a claimed job's ready marker put back.
    let moved = q.enqueue(b"claimed").unwrap();
    let old = marker_of(moved);
    let l = loop {
        let l = q.claim().unwrap().unwrap();
        if l.id == moved {
            break l;
        }
    };
    assert_eq!(q.client.put(&old, b"").unwrap().status, 200);
    // A marker of no job, and a foreign object under the index.
    let ghost = old.replace(&format!("{moved:032x}"), &format!("{:032x}", moved ^ 0x10));
    assert_eq!(q.client.put(&ghost, b"").unwrap().status, 200);
    assert_eq!(
        q.client.put("q/i/ready/notes.txt", b"x").unwrap().status,
        200
    );
    let before = keys();
    let (code, so, se) = fsck();
    assert_eq!(code, 5, "{so}{se}");
    let lines: Vec<&str> = so.lines().collect();
    assert_eq!(lines.len(), 4, "{so}");
    // Its marker again, in its shard, sorted by the envelope's modification time.
    let shard = &lost_marker[..lost_marker.rfind('/').unwrap() + 1];
    let tail = format!(".{lost:032x}.00000000.0");
    let want = format!(
        "missing marker: job {lost:032x} generation 0 (ready) is not indexed; repair puts {shard}"
    );
    assert!(
        lines[0].starts_with(&want) && lines[0].ends_with(&tail),
        "{so}\nnot {want}...{tail}"
    );
    assert_eq!(
        lines[1],
        format!("stale marker: {old}: job {moved:032x} is at generation 1")
    );
    assert_eq!(lines[2], format!("marker of no job: {ghost}"));
    assert!(
        lines[3].starts_with("foreign object: q/i/ready/notes.txt: "),
        "{so}"
    );
    assert!(
        se.contains("; 4 problems (`steadq recover` repairs"),
        "{se}"
    );
    assert_eq!(keys(), before, "fsck changed nothing");
    // The leased job is still its holder's.
    q.ack(&l).unwrap();
    let (code, rec) = out(cli(m.port).args(["recover", url]));
    assert_eq!(code, 0);
    assert!(rec.ends_with("index: put 1 deleted 2 foreign 1"), "{rec}");
    let (code, so, _) = fsck();
    assert_eq!((code, so.lines().count()), (5, 1), "{so}");
    assert!(
        so.starts_with("foreign object: q/i/ready/notes.txt"),
        "{so}"
    );
    assert_eq!(q.client.delete("q/i/ready/notes.txt").unwrap().status, 204);
    let (code, so, se) = fsck();
    assert_eq!((code, so.as_str()), (0, ""), "{se}");
    let o = cli(m.port)
        .args(["fsck", url, "--quarantine"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("fsck --quarantine: not supported on s3:// queues ("),
        "{err}"
    );
}

/// `python3 -c` reading JSON lines on stdin: each line must parse (`json.loads`), and comes
/// back as `id|state|attempt|priority|gen|deadline|reason as UTF-8 hex|path|handle|keys`.
fn parse_json_lines(text: &str) -> Vec<Vec<String>> {
    let script = r#"
import json, sys
for l in sys.stdin.read().splitlines():
    o = json.loads(l)
    r = o["reason"]
    print("|".join([o["id"], o["state"], str(o["attempt"]), str(o["priority"]), str(o["gen"]),
        repr(o["deadline"]), "null" if r is None else r.encode().hex(), o["path"],
        o.get("handle", "-"), ",".join(o)]))
"#;
    let mut c = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success(), "not JSON lines:\n{text}");
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('|').map(String::from).collect())
        .collect()
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `list --json` on an s3:// queue: one JSON object per job and line, with the local
/// field names and units (`acked` for done, `delayed` for a ready job not yet due, the
/// deadline in unix seconds), each line parsed by Python's `json.loads` and its values
/// checked against what was done to the jobs; a dead job's reason with `"`, `\` and
/// non-ASCII comes back intact. `claim --json` prints the same object with the handle. Both
/// were refused.
#[test]
fn list_json_on_s3_gives_each_job_as_a_local_list_does() {
    let Some(m) = moto() else { return };
    let url = "s3://clijson/q";
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let enq = |extra: &[&str]| {
        let (code, id) = out(cli(m.port)
            .args(["enqueue", url])
            .args(extra)
            .stdin(Stdio::null()));
        assert_eq!(code, 0);
        id
    };
    let acked = enq(&[]);
    let (code, h) = out(cli(m.port).args(["claim", url]));
    assert_eq!(code, 0);
    assert!(h.starts_with(&acked));
    let t_ack = unix_now();
    assert_eq!(out(cli(m.port).args(["ack", url, &h])).0, 0);
    let dead = enq(&[]);
    let (code, h) = out(cli(m.port).args(["claim", url]));
    assert!(code == 0 && h.starts_with(&dead));
    let reason = "said \"no\" \\ back: é ✓";
    assert_eq!(
        out(cli(m.port).args(["fail", url, &h, "--reason", reason])).0,
        0
    );
    let leased = enq(&[]);
    let t_claim = unix_now();
    let (code, j) = out(cli(m.port).args(["claim", url, "--json", "--lease", "60s"]));
    assert_eq!(code, 0, "{j}");
    let claimed = parse_json_lines(&j);
    assert_eq!(claimed.len(), 1, "{j}");
    let c = &claimed[0];
    assert_eq!(
        (
            &c[0],
            c[1].as_str(),
            c[2].as_str(),
            c[3].as_str(),
            c[4].as_str()
        ),
        (&leased, "leased", "1", "3", "1")
    );
    assert!(c[8].starts_with(&format!("{leased}.1.")), "handle {}", c[8]);
    assert_eq!(
        c[9], "id,state,attempt,priority,gen,deadline,reason,path,handle",
        "the local fields but max"
    );
    let lease_deadline: f64 = c[5].parse().unwrap();
    assert!(
        (lease_deadline - (t_claim + 60.0)).abs() < 5.0,
        "{lease_deadline} vs {t_claim}"
    );
    let ready = enq(&[]);
    let t_delay = unix_now();
    let delayed = enq(&["--delay", "1h"]);
    let (code, text) = out(cli(m.port).args(["list", url, "--json"]));
    assert_eq!(code, 0);
    let rows = parse_json_lines(&text);
    assert_eq!(rows.len(), 5, "{text}");
    let row = |id: &str| rows.iter().find(|r| r[0] == id).unwrap().clone();
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    for r in &rows {
        assert_eq!(
            r[7],
            format!("q/j/{}/{:08x}", r[0], r[4].parse::<u64>().unwrap())
        );
        assert_eq!(r[8], "-", "no handle in list");
        assert_eq!(
            r[9], "id,state,attempt,priority,gen,deadline,reason,path",
            "{r:?}"
        );
        assert_eq!(r[3], "3", "the default level");
    }
    let a = row(&acked);
    assert_eq!(
        (a[1].as_str(), a[2].as_str(), a[4].as_str(), a[6].as_str()),
        ("acked", "1", "2", "null")
    );
    let at: f64 = a[5].parse().unwrap();
    assert!(
        (at - t_ack).abs() < 5.0,
        "acked at {at}, ack sent at {t_ack}"
    );
    let d = row(&dead);
    assert_eq!(
        (d[1].as_str(), d[2].as_str(), d[4].as_str(), d[5].as_str()),
        ("dead", "1", "2", "None")
    );
    assert_eq!(
        d[6],
        hex(reason),
        "the reason, escaped and read back intact"
    );
    let l = row(&leased);
    assert_eq!(
        (l[1].as_str(), l[2].as_str(), l[4].as_str()),
        ("leased", "1", "1")
    );
    assert_eq!(
        l[5].parse::<f64>().unwrap(),
        lease_deadline,
        "as claim --json said"
    );
    let r = row(&ready);
    assert_eq!(
        (
            r[1].as_str(),
            r[2].as_str(),
            r[4].as_str(),
            r[5].as_str(),
            r[6].as_str()
        ),
        ("ready", "0", "0", "None", "null")
    );
    let y = row(&delayed);
    assert_eq!(
        (y[1].as_str(), y[2].as_str(), y[4].as_str()),
        ("delayed", "0", "1")
    );
    let due: f64 = y[5].parse().unwrap();
    assert!((due - (t_delay + 3600.0)).abs() < 5.0, "due {due}");
    // --state filters the JSON lines as it does the text ones.
    let (code, text) = out(cli(m.port).args(["list", url, "--json", "--state", "dead"]));
    assert_eq!(code, 0);
    let rows = parse_json_lines(&text);
    assert_eq!((rows.len(), rows[0][0].as_str()), (1, dead.as_str()));
}

/// `work --concurrency 4` claims in batches (one job per thread holding no lease: a batch
/// leased marker and one multi-object delete per batch) and acks jobs that finish together
/// in batches (one done marker): every job runs once at attempt 1, and the index is left
/// clean (each batch's marker deleted with its last job). Through a proxy that logs the
/// request lines.
#[test]
fn work_with_concurrency_claims_in_batches() {
    let Some(m) = moto() else { return };
    // 5 + 5/4 requests per job with 4 threads, 5 + 5/8 with 8, and the open's few; a batch
    // whose jobs end apart (a loaded machine) is acked in two and the next claims are
    // smaller, 5 requests more each time: single claims and acks cost 9-10.
    work_in_batches(&m, 4, 12, 7.5);
    work_in_batches(&m, 8, 24, 7.0);
}

/// `work --concurrency threads` on `n` jobs; at most `most` requests per job up to the
/// last ack, the enqueue's 2 included.
fn work_in_batches(m: &Server, threads: u32, n: u64, most: f64) {
    let bucket = format!("cliworkbatch{threads}");
    let url = format!("s3://{bucket}/q");
    let url = url.as_str();
    assert_eq!(out(cli(m.port).args(["init", url])).0, 0);
    let q = queue(m.port, &bucket, "q", Options::default());
    for i in 0..n {
        q.enqueue(format!("job {i}").as_bytes()).unwrap();
    }
    let p = Proxy::start(m.port);
    let mut worker = cli(p.port)
        .args([
            "work",
            url,
            "--concurrency",
            &threads.to_string(),
            "--quiet",
            "--",
        ])
        .args(["sh", "-c", "cat >/dev/null; sleep 0.2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while q.status().unwrap().done < n {
        assert!(t0.elapsed() < Duration::from_secs(90), "{:?}", q.status());
        std::thread::sleep(Duration::from_millis(100));
    }
    let at_done = p.lines().len();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(worker.wait().unwrap().code(), Some(0));
    let lines = p.lines();
    let posts = lines.iter().filter(|l| l.starts_with("POST ")).count();
    assert!(posts >= 1, "no multi-object delete: no batch claim");
    let batch_markers = lines
        .iter()
        .filter(|l| l.starts_with("PUT ") && l.contains("/i/leased/") && l.contains(".b "))
        .count();
    assert!(batch_markers >= 1, "no batch leased marker");
    let done_batches = lines
        .iter()
        .filter(|l| l.starts_with("PUT ") && l.contains("/i/done/") && l.contains(".b "))
        .count();
    assert!(done_batches >= 1, "no acks made together");
    // Up to the last done marker and the leased marker's DELETE after it. Threads whose jobs
    // ended before the others' make empty claims meanwhile (LISTs, as many as the machine's
    // load makes them wait): the jobs are charged one LIST per claim batch, not those.
    let last = (2 + lines
        .iter()
        .rposition(|l| l.starts_with("PUT ") && l.contains("/i/done/"))
        .unwrap())
    .min(lines.len());
    let lists = lines[..last]
        .iter()
        .filter(|l| l.contains("list-type=2"))
        .count();
    let charged = last - lists + batch_markers;
    let per_job = charged as f64 / n as f64 + 2.0;
    report(&format!(
        "work --concurrency {threads}, {n} jobs ({:?}): {last} requests up to the last ack, \
         {lists} of them LISTs ({at_done} when status saw all done); with one LIST per claim \
         batch and the enqueue's 2: {per_job:.2} per job (the open's included); \
         {batch_markers} claim batches, {posts} multi-object deletes, {done_batches} ack batches",
        m.kind
    ));
    assert!(per_job <= most, "{per_job} requests per job");
    let listed = q.list().unwrap();
    assert_eq!(listed.len(), n as usize);
    assert!(
        listed
            .iter()
            .all(|l| l.state == stowq::State::Done && (l.gen, l.attempt) == (2, 1)),
        "{listed:?}"
    );
    let st = q.status().unwrap();
    assert_eq!((st.ready, st.leased, st.expired, st.done), (0, 0, 0, n));
    assert_eq!(q.check().unwrap().problems(), 0, "{:?}", q.check());
}
