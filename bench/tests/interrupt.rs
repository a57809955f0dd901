//! An interrupted bench (Ctrl-C, kill, `timeout`) must not leave redis-server running on its
//! port, nor its directory behind for ever: the server gets PR_SET_PDEATHSIG, and the next
//! run removes directories of runs that are gone.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn redis_children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let comm = &stat[stat.find('(').unwrap() + 1..close];
        let ppid: u32 = stat[close + 2..]
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        // The server, not the `redis-server --version` probe the bench runs first (the
        // server rewrites its command line to "redis-server 127.0.0.1:PORT").
        let serving = std::fs::read(format!("/proc/{p}/cmdline"))
            .is_ok_and(|c| !c.split(|&b| b == 0).any(|a| a == b"--version"));
        if ppid == pid && comm.starts_with("redis-server") && serving {
            out.push(p);
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    // A zombie has been killed already; it only waits for its new parent to reap it.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
        .unwrap_or(false)
}

#[test]
fn a_killed_bench_takes_its_redis_server_and_leaves_its_directory_to_the_next_run() {
    if Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        eprintln!("redis-server not installed: nothing to leak, test skipped");
        return;
    }
    let dir = std::env::temp_dir().join(format!("steadq-bench-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bench = env!("CARGO_BIN_EXE_steadq-bench");
    let args = |d: &Path| {
        let mut c = Command::new(bench);
        c.arg(d)
            .args(["--duration", "0.2", "--rounds", "1", "--workers", "1"])
            .arg("--out")
            .arg(d.join("out"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    };
    let mut child = args(&dir).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let servers = loop {
        let s = redis_children_of(child.id());
        if !s.is_empty() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the bench started no redis-server"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let run_dir = dir.join(format!("steadq-bench-{}", child.id()));
    assert!(run_dir.is_dir(), "{} missing", run_dir.display());
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while servers.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "redis-server {servers:?} outlived the killed bench"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(run_dir.is_dir(), "a SIGKILLed run cannot clean up itself");
    let status = args(&dir).status().unwrap();
    assert!(status.success(), "second run: {status}");
    assert!(
        !run_dir.exists(),
        "{} outlived the next run",
        run_dir.display()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
