//! The test harness itself: a SeaweedFS server leaves nothing behind once dropped.

use crate::common::*;

/// `weed` 4.48 creates `/tmp/seaweedfs-<service>-grpc-<port>.sock` for each gRPC port (a
/// fixed path) and, without `-logdir`, glog files `weed.*.<pid>` in the temp dir; a suite run
/// left hundreds. After the server is dropped none of its sockets, logs or data remain.
#[test]
fn a_dropped_seaweedfs_server_leaves_nothing_in_tmp() {
    if kind() != Kind::Seaweed {
        report("seaweedfs only, skipped on moto: what weed leaves in /tmp");
        return;
    }
    let Some(s) = seaweed() else { return };
    bucket(s.port, "harness");
    let q = queue(s.port, "harness", "q", stowq::Options::default());
    q.enqueue(b"x").unwrap();
    let (ports, dir) = s.leftovers().expect("a seaweedfs server");
    let (ports, dir) = (ports.to_vec(), dir.to_path_buf());
    let sockets: Vec<_> = ports.iter().flat_map(|p| weed_sockets(*p)).collect();
    let live = sockets.iter().filter(|p| p.exists()).count();
    assert!(
        live >= 3,
        "the running server has its master, volume and filer sockets in /tmp: {live} of {sockets:?}"
    );
    assert!(
        dir.join("logs").read_dir().unwrap().next().is_some(),
        "logs in -logdir"
    );
    let pid = s.pid();
    drop(s);
    let left: Vec<_> = sockets.iter().filter(|p| p.exists()).collect();
    assert!(left.is_empty(), "sockets left: {left:?}");
    assert!(!dir.exists(), "{} left", dir.display());
    let tmp = std::env::temp_dir();
    let logs: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("weed.") && n.ends_with(&format!(".{pid}")))
        .collect();
    assert!(
        logs.is_empty(),
        "weed logs of pid {pid} in {}: {logs:?}",
        tmp.display()
    );
}
