//! Performance-driven API and resource properties: a lease moves between threads and
//! outlives its handle; leases hold no file descriptor; group commit keeps each caller's
//! rename behind a completed barrier.

use crate::common::*;
use steadq::*;

#[test]
fn a_lease_moves_to_another_thread_and_outlives_its_handle() {
    let d = TempDir::new("lease-thread");
    let q = Queue::create(d.path(), opts(2)).unwrap();
    let id = q.enqueue(b"move me").unwrap();
    let lease = q.claim().unwrap().unwrap();
    drop(q); // the lease holds its own clone of the queue
    let r = std::thread::spawn(move || {
        assert_eq!(lease.payload(), b"move me");
        lease.ack().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(r.id, id);
    let q = Queue::open(d.path()).unwrap();
    assert_eq!(counts(&q), [0, 0, 0, 0, 1]);
}
