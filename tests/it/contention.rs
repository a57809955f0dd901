//! 4 producer processes and 4 worker processes on one queue: every job acked exactly once.
//!
//! The children are this test binary run again with `STEADQ_ROLE` set (the sled pattern).

use crate::common::*;
use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;
use steadq::*;

fn child(role: &str, dir: &Path, n: usize, idx: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "contention::contention_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("STEADQ_ROLE", role)
        .env("STEADQ_DIR", dir)
        .env("STEADQ_N", n.to_string())
        .env("STEADQ_IDX", idx.to_string())
        .spawn()
        .unwrap()
}

/// Not a test on its own: does nothing unless run as a child.
#[test]
fn contention_child() {
    let Ok(role) = std::env::var("STEADQ_ROLE") else {
        return;
    };
    let dir = std::path::PathBuf::from(std::env::var("STEADQ_DIR").unwrap());
    let n: usize = std::env::var("STEADQ_N").unwrap().parse().unwrap();
    let idx: usize = std::env::var("STEADQ_IDX").unwrap().parse().unwrap();
    let q = Queue::open_with(
        &dir,
        Options {
            durability: Durability::None,
            ..Options::default()
        },
    )
    .unwrap();
    match role.as_str() {
        "producer" => {
            for j in 0..n {
                q.enqueue(format!("p{idx}-{j}").as_bytes()).unwrap();
            }
        }
        "worker" => {
            let mut acked = String::new();
            let done = dir.with_extension("producers-done");
            loop {
                match q
                    .claim_with(&steadq::ClaimOptions {
                        lease: Some(Duration::from_secs(60)),
                        wait: Some(Duration::from_millis(200)),
                        ..Default::default()
                    })
                    .unwrap()
                {
                    Some(l) => {
                        let p = String::from_utf8(l.payload().unwrap().to_vec()).unwrap();
                        l.ack().unwrap();
                        acked.push_str(&p);
                        acked.push('\n');
                    }
                    None if done.exists() => break,
                    None => {}
                }
            }
            std::fs::write(dir.with_extension(format!("worker{idx}")), acked).unwrap();
        }
        r => panic!("unknown role {r}"),
    }
}

#[test]
#[ignore = "slow tier: 20,000 jobs through 4 producer and 4 worker processes (~90 s)"]
fn four_producers_four_workers_each_job_exactly_once() {
    let total: usize = std::env::var("STEADQ_CONTENTION_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let per = total / 4;
    let d = TempDir::new("contention");
    let q = Queue::create(d.path(), fast(8)).unwrap();
    let done = d.path().with_extension("producers-done");
    let _ = std::fs::remove_file(&done);
    let workers: Vec<Child> = (0..4).map(|i| child("worker", d.path(), 0, i)).collect();
    let producers: Vec<Child> = (0..4)
        .map(|i| child("producer", d.path(), per, i))
        .collect();
    for mut p in producers {
        assert!(p.wait().unwrap().success());
    }
    std::fs::write(&done, b"").unwrap();
    for mut w in workers {
        assert!(w.wait().unwrap().success());
    }
    let mut seen = HashSet::new();
    let mut acks = 0;
    for i in 0..4 {
        let f = d.path().with_extension(format!("worker{i}"));
        for line in std::fs::read_to_string(&f).unwrap().lines() {
            acks += 1;
            assert!(seen.insert(line.to_string()), "{line} acked twice");
        }
        let _ = std::fs::remove_file(f);
    }
    let _ = std::fs::remove_file(&done);
    assert_eq!((acks, seen.len()), (per * 4, per * 4));
    let c = counts(&q);
    assert_eq!(
        c,
        [0, 0, 0, 0, per * 4],
        "nothing left over, one receipt per job"
    );
    let ids: HashSet<JobId> = q
        .list(None)
        .unwrap()
        .into_iter()
        .map(|l| l.name.id)
        .collect();
    assert_eq!(ids.len(), per * 4, "no job in two states");
    assert!(std::fs::read_dir(d.path().join("tmp"))
        .unwrap()
        .next()
        .is_none());
    summary(&format!(
        "contention: 4 producer + 4 worker processes, {} jobs, each acked exactly once",
        per * 4
    ));
}
