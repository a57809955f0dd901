//! A multi-node SeaweedFS on 127.0.0.1 (a master, two volume servers holding a replica each,
//! a filer, the S3 gateway, five processes) under StowQ workers; one volume server is killed
//! (SIGKILL) mid-run and started again. Runs in the `STOWQ_SERVER=seaweedfs` pass.

use crate::common::*;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stowq::{Client, Options, Queue, State};

/// One `weed` process; SIGKILLed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn weed_proc(dir: &Path, log: &str, args: &[String]) -> Proc {
    let child = weed_command(dir)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(log)).unwrap())
        .spawn()
        .expect("spawn weed");
    Proc(child)
}

fn volume_args(dir: &Path, i: usize, port: u16, grpc: u16, master: &str) -> Vec<String> {
    let d = dir.join(format!("v{i}"));
    std::fs::create_dir_all(&d).unwrap();
    vec![
        "volume".into(),
        "-ip=127.0.0.1".into(),
        "-ip.bind=127.0.0.1".into(),
        format!("-port={port}"),
        format!("-port.grpc={grpc}"),
        format!("-dir={}", d.display()),
        "-max=16".into(),
        format!("-master={master}"),
    ]
}

/// Events of one job, in the order they happened.
#[derive(Debug, PartialEq, Eq)]
enum Ev {
    /// A claim handed the job to a worker (its handler would run now).
    Ran,
    /// An ack of the job was answered done.
    Acked,
}

#[test]
fn a_volume_server_killed_mid_run_loses_no_ack_and_runs_nothing_after_one() {
    if kind() != Kind::Seaweed {
        report("seaweedfs only, skipped on moto: a multi-node SeaweedFS with a node killed");
        return;
    }
    if !has_weed() {
        let _ = seaweed(); // reports or panics as the rest of the suite does
        return;
    }
    let dir = scratch_dir("cluster");
    std::fs::write(dir.join("s3.json"), SEAWEED_IDENTITIES).unwrap();
    std::fs::create_dir_all(dir.join("m")).unwrap();
    std::fs::create_dir_all(dir.join("f")).unwrap();
    let p = free_ports(12);
    // Declared before the processes, so dropped after them.
    let _leftovers = WeedLeftovers {
        grpc_ports: vec![p[1], p[3], p[5], p[7], p[9]],
        dir: dir.clone(),
    };
    let master = format!("127.0.0.1:{}.{}", p[0], p[1]);
    let _master = weed_proc(
        &dir,
        "master.log",
        &[
            "master".into(),
            "-ip=127.0.0.1".into(),
            "-ip.bind=127.0.0.1".into(),
            format!("-port={}", p[0]),
            format!("-port.grpc={}", p[1]),
            format!("-mdir={}", dir.join("m").display()),
            "-volumeSizeLimitMB=64".into(),
            // Every volume on both volume servers: a killed one loses nothing written.
            "-defaultReplication=001".into(),
        ],
    );
    let v1 = volume_args(&dir, 1, p[2], p[3], &master);
    let v2 = volume_args(&dir, 2, p[4], p[5], &master);
    let _vol1 = weed_proc(&dir, "v1.log", &v1);
    let mut vol2 = Some(weed_proc(&dir, "v2.log", &v2));
    let _filer = weed_proc(
        &dir,
        "filer.log",
        &[
            "filer".into(),
            "-ip=127.0.0.1".into(),
            "-ip.bind=127.0.0.1".into(),
            format!("-port={}", p[6]),
            format!("-port.grpc={}", p[7]),
            format!("-master={master}"),
            format!("-defaultStoreDir={}", dir.join("f").display()),
            format!("-localSocket={}", dir.join("filer.sock").display()),
        ],
    );
    let mut s3 = weed_proc(
        &dir,
        "s3.log",
        &[
            "s3".into(),
            "-ip.bind=127.0.0.1".into(),
            format!("-port={}", p[8]),
            format!("-port.grpc={}", p[9]),
            format!("-filer=127.0.0.1:{}.{}", p[6], p[7]),
            format!("-config={}", dir.join("s3.json").display()),
            format!("-localSocket={}", dir.join("s3.sock").display()),
            "-port.iceberg=0".into(),
            "-port.lance=0".into(),
        ],
    );
    let port = p[8];
    assert!(wait_s3(port, &mut s3.0), "the S3 gateway answers");
    // The first writes wait for the master to see both volume servers and grow volumes.
    let t0 = Instant::now();
    let c = Client::new(config(port, 10_000), "cluster");
    while c.create_bucket().is_err() {
        assert!(t0.elapsed() < Duration::from_secs(60), "bucket created");
        std::thread::sleep(Duration::from_millis(200));
    }
    let opts = Options {
        lease_ms: 4_000,
        ..Options::default()
    };
    let q = loop {
        match Queue::create(
            Client::new(config(port, 10_000), "cluster"),
            "q",
            opts.clone(),
        ) {
            Ok(q) => break q,
            Err(e) => {
                assert!(t0.elapsed() < Duration::from_secs(60), "queue: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let jobs = env_num("STOWQ_CLUSTER_JOBS", 120) as usize;
    let want: HashMap<u128, Vec<u8>> = enqueue_parallel(port, "cluster", "q", jobs)
        .into_iter()
        .collect();
    assert_eq!(want.len(), jobs);
    let events: Arc<Mutex<Vec<(u128, Ev)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let failed: Arc<Mutex<Vec<String>>> = Arc::default();
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (events, stop, failed, opts) =
                (events.clone(), stop.clone(), failed.clone(), opts.clone());
            std::thread::spawn(move || {
                let q =
                    Queue::open(Client::new(config(port, 3_000), "cluster"), "q", opts).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let l = match q.claim() {
                        Ok(Some(l)) => l,
                        Ok(None) => {
                            std::thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                        Err(e) => {
                            failed.lock().unwrap().push(format!("claim: {e}"));
                            std::thread::sleep(Duration::from_millis(100));
                            continue;
                        }
                    };
                    events.lock().unwrap().push((l.id, Ev::Ran));
                    match q.ack(&l) {
                        Ok(_) => events.lock().unwrap().push((l.id, Ev::Acked)),
                        // Not done: the lease runs out and the job is claimed again.
                        // Indeterminate: either; the server's state decides below.
                        Err(e) => failed.lock().unwrap().push(format!("ack: {e}")),
                    }
                }
            })
        })
        .collect();
    let acked = |events: &Mutex<Vec<(u128, Ev)>>| {
        let ev = events.lock().unwrap();
        let mut ids: Vec<u128> = ev
            .iter()
            .filter(|(_, e)| *e == Ev::Acked)
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        ids.dedup();
        ids.len()
    };
    let deadline = Instant::now() + Duration::from_secs(240);
    while acked(&events) < jobs / 4 {
        assert!(Instant::now() < deadline, "a quarter acked before the kill");
        std::thread::sleep(Duration::from_millis(20));
    }
    let at_kill = acked(&events);
    drop(vol2.take()); // SIGKILL volume server 2
    std::thread::sleep(Duration::from_secs(3));
    let during = acked(&events) - at_kill;
    vol2 = Some(weed_proc(&dir, "v2-again.log", &v2));
    loop {
        let st = q.status();
        if st.as_ref().is_ok_and(|s| s.done == jobs as u64) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "every job done within 240 s: {:?}; failures: {:?}",
            st.map(|s| (s.ready, s.leased, s.done, s.dead)),
            failed.lock().unwrap().iter().take(5).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    // Nothing runs after its ack: per job, no `Ran` follows an `Acked`.
    let ev = events.lock().unwrap();
    let mut seen_ack: HashMap<u128, bool> = HashMap::new();
    for (id, e) in ev.iter() {
        match e {
            Ev::Acked => {
                seen_ack.insert(*id, true);
            }
            Ev::Ran => assert!(
                !seen_ack.get(id).copied().unwrap_or(false),
                "job {id:x} ran after its ack"
            ),
        }
    }
    // Nothing acked is lost: every acked job's chain ends done, read from the server with
    // volume server 2 back.
    assert_eq!(seen_ack.len(), jobs, "every job acked");
    for id in seen_ack.keys() {
        let (_, rec) = q.inspect(*id).unwrap().expect("chain present");
        assert_eq!(rec.state, State::Done, "job {id:x}");
    }
    let st = q.status().unwrap();
    assert_eq!(
        (st.done, st.ready, st.leased, st.dead),
        (jobs as u64, 0, 0, 0)
    );
    let failures = failed.lock().unwrap();
    let indeterminate = failures.iter().filter(|f| f.contains("ndetermin")).count();
    report(&format!(
        "stowq cluster (seaweedfs: master, 2 volume servers, filer, s3): {jobs} jobs, volume \
         server 2 SIGKILLed after {at_kill} acks and restarted 3 s later; {during} acks while it \
         was down; {} failed calls ({indeterminate} indeterminate) retried; every acked job done, \
         none ran after its ack",
        failures.len()
    ));
    drop(vol2);
}
