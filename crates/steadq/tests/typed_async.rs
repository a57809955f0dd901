//! The optional features: `serde` (TypedQueue with postcard) and `tokio` (AsyncQueue on
//! tokio's reactor). Run with `cargo test -p steadq --features serde,tokio --test typed_async`.

#[allow(dead_code)] // each test target uses some of the helpers
mod support;

#[cfg(feature = "serde")]
mod typed {
    use crate::support::*;
    use std::time::Duration;
    use steadq::*;

    type Job = (String, u32, Vec<u8>);

    #[test]
    fn typed_values_round_trip_compactly() {
        let d = TempDir::new("typed");
        let q: TypedQueue<Job> = TypedQueue::new(Queue::create(d.path(), fast(2)).unwrap());
        let v: Job = ("resize".into(), 42, vec![1, 2, 3]);
        let id = q.enqueue(&v).unwrap();
        // postcard: 1 length byte + 6, one varint byte for 42, 1 + 3.
        let l = q.queue().list(None).unwrap();
        let (_, payload) = q.queue().read_job(&l[0]).unwrap();
        assert_eq!(payload.len(), 12, "{payload:?}");
        let lease = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(30)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        assert_eq!((lease.lease().id(), lease.value()), (id, &v));
        lease.ack().unwrap();
        // Keys work through the typed API.
        let o = EnqueueOptions {
            key: Key::new("k1"),
            ..Default::default()
        };
        let a = q.enqueue_with(&v, &o).unwrap();
        assert_eq!(q.enqueue_with(&v, &o).unwrap(), Enqueued::Duplicate(a.id()));
        q.claim_with(&steadq::ClaimOptions {
            lease: Some(Duration::from_secs(30)),
            wait: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .unwrap()
        .unwrap()
        .ack()
        .unwrap();
    }

    #[test]
    fn an_undecodable_payload_is_dead_lettered_and_reported() {
        let d = TempDir::new("typed-bad");
        let raw = Queue::create(d.path(), fast(1)).unwrap();
        raw.enqueue(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).unwrap();
        let q: TypedQueue<Job> = TypedQueue::new(raw);
        let e = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(30)),
                ..Default::default()
            })
            .unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Decode(_)), "{e}");
        assert_eq!(counts(q.queue()), [0, 0, 0, 1, 0], "dead, reason decode");
        let dead = q.queue().list(Some(State::Dead)).unwrap();
        assert!(matches!(dead[0].name.kind, Kind::Dead { .. }));
        assert!(q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(30)),
                ..Default::default()
            })
            .unwrap()
            .is_none());
    }

    /// `TypedLease::ack_and_claim` acks and hands over the next job decoded; a next job that
    /// is not a `T` is dead-lettered (reason `decode`) and reported in the second field,
    /// with the ack done.
    #[test]
    fn a_typed_ack_and_claim_decodes_the_next_job() {
        let d = TempDir::new("typed-next");
        let raw = Queue::create(d.path(), opts(1)).unwrap();
        let q: TypedQueue<Job> = TypedQueue::new(raw.clone());
        let a: Job = ("a".into(), 1, vec![]);
        let b: Job = ("b".into(), 2, vec![7]);
        q.enqueue(&a).unwrap();
        std::thread::sleep(Duration::from_millis(2)); // ids order by millisecond
        q.enqueue(&b).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        raw.enqueue(&[0xff; 6]).unwrap();
        let first = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(30)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        assert_eq!(first.value(), &a);
        let (r, next) = first.ack_and_claim(Duration::from_secs(30)).unwrap();
        assert!(r.name.ends_with(".rct"));
        let second = next.unwrap().expect("b is next");
        assert_eq!(second.value(), &b);
        let (_, next) = second.ack_and_claim(Duration::from_secs(30)).unwrap();
        let e = next.unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Decode(_)), "{e}");
        assert_eq!(
            counts(&raw),
            [0, 0, 0, 1, 2],
            "two acked, one dead (decode)"
        );
    }

    /// A typed lease renews and releases without being taken apart: the released job comes
    /// back with the same value at attempt 2.
    #[test]
    fn a_typed_lease_renews_and_releases() {
        let d = TempDir::new("typed-renew");
        let q: TypedQueue<Job> = TypedQueue::new(Queue::create(d.path(), fast(1)).unwrap());
        let v: Job = ("transcode".into(), 7, vec![9]);
        let id = q.enqueue(&v).unwrap();
        let mut l = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(5)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        let deadline = |l: &TypedLease<Job>| match l.lease().name().kind {
            Kind::Leased(f) => (l.lease().name().generation, f.boot_deadline_ns),
            k => panic!("not leased: {k:?}"),
        };
        let (g0, d0) = deadline(&l);
        l.renew(Duration::from_secs(600)).unwrap();
        let (g1, d1) = deadline(&l);
        assert_eq!(g1, g0 + 1, "a renew is a state change");
        assert!(d1 > d0 + 500_000_000_000, "deadline {d0} -> {d1} ns");
        assert_eq!(l.value(), &v, "the value stays across a renew");
        l.release().unwrap();
        let again = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(30)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        assert_eq!(
            (again.lease().id(), again.lease().attempt(), again.value()),
            (id, 2, &v)
        );
        again.ack().unwrap();
    }

    /// Clones of a typed queue share one handle and need no `Clone` from `T`: `Mutex<u32>`
    /// is serde but not `Clone`. Four threads enqueue through clones; every value comes back.
    #[test]
    fn a_typed_queue_clones_for_threads_whatever_its_type() {
        use std::sync::Mutex;
        let d = TempDir::new("typed-clone");
        let q: TypedQueue<Mutex<u32>> = TypedQueue::new(Queue::create(d.path(), fast(2)).unwrap());
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let q = q.clone();
                s.spawn(move || {
                    for i in 0..5 {
                        q.enqueue(&Mutex::new(t * 10 + i)).unwrap();
                    }
                });
            }
        });
        let mut got = Vec::new();
        while let Some(l) = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(30)),
                ..Default::default()
            })
            .unwrap()
        {
            got.push(*l.value().lock().unwrap());
            l.ack().unwrap();
        }
        got.sort_unstable();
        let want: Vec<u32> = (0..4)
            .flat_map(|t| (0..5).map(move |i| t * 10 + i))
            .collect();
        assert_eq!(got, want);
        assert_eq!(counts(q.queue()), [0, 0, 0, 0, 20]);
    }
}

#[cfg(feature = "tokio")]
mod asynq {
    use crate::support::*;
    use std::time::{Duration, Instant};
    use steadq::*;

    /// Clones of an async queue share one handle and move into spawned tasks: three tasks
    /// wait, three jobs are enqueued through the original, each task claims and acks one.
    #[tokio::test]
    async fn async_queue_clones_move_into_tasks() {
        let d = TempDir::new("async-clone");
        let q = AsyncQueue::new(Queue::create(d.path(), fast(2)).unwrap());
        let tasks: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move {
                    let l = q
                        .claim_with(&steadq::ClaimOptions {
                            lease: Some(Duration::from_secs(30)),
                            wait: Some(Duration::from_secs(20)),
                            ..Default::default()
                        })
                        .await
                        .unwrap()
                        .expect("a job");
                    let p = l.payload().unwrap().to_vec();
                    l.ack().unwrap();
                    p
                })
            })
            .collect();
        for i in 0..3u8 {
            q.enqueue_with(&[i], &EnqueueOptions::default())
                .await
                .unwrap();
        }
        let mut got: Vec<u8> = Vec::new();
        for t in tasks {
            got.extend(t.await.unwrap());
        }
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2]);
        assert_eq!(counts(q.queue()), [0, 0, 0, 0, 3]);
    }

    /// A waiting async claim with a stop flag returns `Ok(None)` soon after the flag is set
    /// (it looks between sleeps of at most 250 ms), not at the end of its wait; one whose
    /// flag is set already claims nothing, though a job is ready.
    #[tokio::test]
    async fn async_claim_with_stops_on_its_flag() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let d = TempDir::new("async-stop");
        let q = AsyncQueue::new(Queue::create(d.path(), fast(1)).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            flag.store(true, Ordering::SeqCst);
        });
        let o = ClaimOptions {
            wait: Some(Duration::from_secs(10)),
            stop: Some(&stop),
            ..Default::default()
        };
        let t = Instant::now();
        assert!(q.claim_with(&o).await.unwrap().is_none());
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        q.enqueue(b"x").await.unwrap();
        assert!(q.claim_with(&o).await.unwrap().is_none(), "the flag is set");
        assert_eq!(counts(q.queue()), [1, 0, 0, 0, 0]);
        assert!(q.claim().await.unwrap().is_some());
    }

    #[tokio::test]
    async fn async_claim_wakes_on_inotify_and_times_out() {
        let d = TempDir::new("async-claim");
        let q = AsyncQueue::new(Queue::create(d.path(), fast(2)).unwrap());
        let t = Instant::now();
        assert!(q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(30)),
                wait: Some(Duration::from_millis(200)),
                ..Default::default()
            })
            .await
            .unwrap()
            .is_none());
        assert!(t.elapsed() >= Duration::from_millis(200));
        let path = d.path().to_path_buf();
        let producer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let p = Queue::open(&path).unwrap();
            let sent = Instant::now();
            p.enqueue(b"hello").unwrap();
            sent
        });
        let l = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(30)),
                wait: Some(Duration::from_secs(20)),
                ..Default::default()
            })
            .await
            .unwrap()
            .expect("a job");
        let got = Instant::now();
        let sent = producer.join().unwrap();
        assert_eq!(l.payload().unwrap(), b"hello");
        l.ack().unwrap();
        let lag = got.duration_since(sent);
        summary(&format!(
            "async claim (tokio, AsyncFd on inotify): job claimed {} ms after its enqueue",
            lag.as_millis()
        ));
        assert!(lag < Duration::from_secs(2), "{lag:?}");
    }

    /// An async waiting claim on a queue removed under its handle waited out its timeout and
    /// answered "no job"; it fails now, not done with `ErrorKind::Replaced`, soon after the
    /// removal, and when the queue was removed before the wait began.
    #[tokio::test]
    async fn async_claim_wait_on_a_removed_queue_fails_instead_of_waiting_out_its_timeout() {
        let d = TempDir::new("async-removed");
        let q = AsyncQueue::new(Queue::create(d.path(), fast(2)).unwrap());
        let path = d.path().to_path_buf();
        let rm = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            std::fs::remove_dir_all(&path).unwrap();
        });
        // A waiting claim fails Replaced, not done, well before its 20 s timeout: removed
        // while it waits, then removed before it began.
        let q = &q;
        let fails_replaced = || async move {
            let t = Instant::now();
            let e = q
                .claim_with(&steadq::ClaimOptions {
                    lease: Some(Duration::from_secs(5)),
                    wait: Some(Duration::from_secs(20)),
                    ..Default::default()
                })
                .await
                .map(|l| l.is_some())
                .unwrap_err();
            assert_eq!(
                (e.outcome(), e.kind()),
                (Outcome::NotDone, &ErrorKind::Replaced)
            );
            assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        };
        fails_replaced().await;
        rm.join().unwrap();
        fails_replaced().await;
    }

    /// An async waiting claim wakes for a job at a priority level whose directories did not
    /// exist when it started waiting (they are made by the level's first job).
    #[tokio::test]
    async fn async_claim_wakes_for_a_job_at_a_level_made_while_it_waits() {
        let d = TempDir::new("async-claim-level");
        let q = AsyncQueue::new(Queue::create(d.path(), fast(2)).unwrap());
        assert!(!d.path().join("prio").exists());
        let path = d.path().to_path_buf();
        let producer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(500));
            let o = EnqueueOptions {
                priority: Some(5),
                ..Default::default()
            };
            Queue::open(&path)
                .unwrap()
                .enqueue_with(b"x", &o)
                .unwrap()
                .id()
        });
        let t = Instant::now();
        let l = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(Duration::from_secs(30)),
                wait: Some(Duration::from_secs(20)),
                ..Default::default()
            })
            .await
            .unwrap()
            .expect("a job");
        assert_eq!((l.id(), l.priority()), (producer.join().unwrap(), 5));
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }

    /// Many waiting claims on a current-thread runtime: one thread, no thread per waiter.
    #[tokio::test(flavor = "current_thread")]
    async fn many_waiters_share_one_thread_and_a_delayed_job_wakes_one() {
        let d = TempDir::new("async-many");
        let q = Queue::create(d.path(), fast(2)).unwrap();
        q.enqueue_with(
            b"soon",
            &EnqueueOptions {
                delay: Some(Duration::from_millis(300)),
                ..Default::default()
            },
        )
        .unwrap()
        .id();
        let q = AsyncQueue::new(q);
        let o = steadq::ClaimOptions {
            lease: Some(Duration::from_secs(30)),
            wait: Some(Duration::from_secs(3)),
            ..Default::default()
        };
        let waits = (0..16).map(|_| q.claim_with(&o));
        let t = Instant::now();
        let got = futures_join(waits).await;
        let claimed: Vec<_> = got.into_iter().filter_map(|r| r.unwrap()).collect();
        assert_eq!(claimed.len(), 1, "the delayed job went to one waiter");
        assert!(t.elapsed() < Duration::from_secs(4));
        for l in claimed {
            l.ack().unwrap();
        }
    }

    /// Join futures without a futures crate: poll them all on this task.
    async fn futures_join<F: std::future::Future>(fs: impl Iterator<Item = F>) -> Vec<F::Output> {
        let mut fs: Vec<_> = fs.map(Box::pin).collect();
        let mut out: Vec<Option<F::Output>> = fs.iter().map(|_| None).collect();
        std::future::poll_fn(|cx| {
            let mut pending = false;
            for (f, o) in fs.iter_mut().zip(out.iter_mut()) {
                if o.is_none() {
                    match f.as_mut().poll(cx) {
                        std::task::Poll::Ready(v) => *o = Some(v),
                        std::task::Poll::Pending => pending = true,
                    }
                }
            }
            if pending {
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(())
            }
        })
        .await;
        out.into_iter().map(|o| o.unwrap()).collect()
    }

    #[tokio::test]
    async fn async_enqueue_waits_for_room() {
        let d = TempDir::new("async-room");
        let q = Queue::create(d.path(), fast(1)).unwrap();
        q.set_limits(Limits {
            max_jobs: Some(1),
            max_bytes: None,
        })
        .unwrap();
        let q = AsyncQueue::new(q);
        let o = EnqueueOptions::default();
        q.enqueue_with(b"one", &o).await.unwrap();
        let e = q.enqueue_with(b"two", &o).await.unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::QueueFull { .. }));
        let path = d.path().to_path_buf();
        let acker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let c = Queue::open(&path).unwrap();
            c.claim().unwrap().unwrap().ack().unwrap();
        });
        let r = q
            .enqueue_with(
                b"two",
                &steadq::EnqueueOptions {
                    wait: Some(Duration::from_secs(20)),
                    ..o
                },
            )
            .await
            .unwrap();
        assert!(!r.is_duplicate());
        acker.join().unwrap();
    }
}
