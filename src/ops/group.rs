//! Group commit: the threads of one process share directory fsyncs.
//!
//! Each directory a queue handle holds open (every `ready/<ss>`, every `receipts/<ss>`, and
//! `tmp/`) has one [`DirSync`]. A caller that has finished its rename asks it for a barrier
//! and gets one that *started after its request*: if an fsync of that directory is running
//! already, it may have started before the rename, so the caller waits for it to finish and
//! then for the next one, which one of the waiters runs on behalf of all of them. Under load
//! one fsync serves every rename that completed before it started, and strict durability
//! keeps its meaning: no call returns done before its own rename is covered by a completed
//! barrier. A single thread sees exactly the fsyncs it made before (one per barrier).
//!
//! A failed fsync is reported to every caller it was meant to cover (indeterminate), and to
//! any caller whose barrier range includes it: `fsync(2)` is never retried, because after a
//! failure a later fsync can succeed without the lost writes (see [`crate::sys::Sys::fsync`]).
//! Directories opened per call (delayed and dead buckets) are not grouped.

use crate::disk::sys::{Errno, Sys};
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::{Condvar, Mutex, OnceLock};

/// The group-commit state of every directory a handle holds (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Group {
    dirs: Vec<(RawFd, DirSync)>,
    /// Whether the queue's filesystem makes a rename durable in both directories with one
    /// fsync of either (see [`Group::one_barrier_per_rename`]); learnt at first use.
    one_barrier: OnceLock<bool>,
}

impl Group {
    /// One [`DirSync`] for each of `fds` (directories held open for the handle's lifetime).
    pub(crate) fn new(fds: impl IntoIterator<Item = RawFd>) -> Group {
        let mut dirs: Vec<(RawFd, DirSync)> =
            fds.into_iter().map(|f| (f, DirSync::default())).collect();
        dirs.sort_unstable_by_key(|(f, _)| *f);
        Group {
            dirs,
            one_barrier: OnceLock::new(),
        }
    }

    /// Whether, on the filesystem of `dir` (any directory of the queue), a completed fsync of
    /// a rename's destination directory also makes the rename's removal from its source
    /// directory durable, so that a move between directories needs one directory fsync, not
    /// two. True only where the block rig showed it (DESIGN.md, Barriers): xfs, and ext4 with
    /// a jbd2 journal attached and no fast commits, whose fsync of a directory commits the
    /// whole journal transaction (or log checkpoint) holding the rename, and every earlier
    /// one. Everywhere else (btrfs, f2fs, ext2 or ext4 without a journal or with fast commits,
    /// tmpfs, network filesystems, or when a check cannot be made) both fsyncs stay.
    pub(crate) fn one_barrier_per_rename(&self, sys: &Sys, dir: BorrowedFd<'_>) -> bool {
        *self.one_barrier.get_or_init(|| one_barrier_fs(sys, dir))
    }

    /// The barrier state of held directory `fd`, or `None` for a directory opened per call.
    pub(crate) fn get(&self, fd: RawFd) -> Option<&DirSync> {
        self.dirs
            .binary_search_by_key(&fd, |(f, _)| *f)
            .ok()
            .map(|i| &self.dirs[i].1)
    }
}

/// The check behind [`Group::one_barrier_per_rename`], made afresh.
pub(crate) fn one_barrier_fs(sys: &Sys, dir: BorrowedFd<'_>) -> bool {
    match sys.fs_magic(dir).map(|m| m as u32) {
        Ok(0x5846_5342) => true, // xfs
        Ok(0xEF53) => ext4_journal_attached(dir),
        _ => false,
    }
}

/// Whether the ext2/3/4 filesystem holding `dir` runs a jbd2 journal without fast commits:
/// its block device (`/sys/dev/block/<major>:<minor>`) has `/proc/fs/jbd2/<device>-8`, and
/// its superblock, read from `/dev/<device>`, has `has_journal` and not `fast_commit` (an
/// fsync there writes a fast-commit record, which the rig has not tested). False when unsure,
/// for example when the device cannot be read (not root): both fsyncs stay.
fn ext4_journal_attached(dir: BorrowedFd<'_>) -> bool {
    use std::os::unix::fs::FileExt;
    let Ok(st) = rustix::fs::fstat(dir) else {
        return false;
    };
    let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    let Ok(dev) = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}")) else {
        return false;
    };
    let Some(name) = dev.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    if !std::path::Path::new(&format!("/proc/fs/jbd2/{name}-8")).is_dir() {
        return false;
    }
    // The superblock: 1024 bytes at offset 1024; s_magic at 0x38, s_feature_compat at 0x5C.
    let mut sb = [0u8; 0x60];
    let read = std::fs::File::open(format!("/dev/{name}"))
        .and_then(|f| f.read_exact_at(&mut sb, 1024))
        .is_ok();
    let compat = u32::from_le_bytes([sb[0x5C], sb[0x5D], sb[0x5E], sb[0x5F]]);
    const HAS_JOURNAL: u32 = 0x4;
    const FAST_COMMIT: u32 = 0x400;
    read && sb[0x38..0x3A] == [0x53, 0xEF] && compat & HAS_JOURNAL != 0 && compat & FAST_COMMIT == 0
}

/// Barriers of one directory: numbered as they start; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct DirSync {
    state: Mutex<Epochs>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct Epochs {
    /// Barriers started so far (the running one included).
    started: u64,
    /// The last barrier finished (barriers of one directory never overlap).
    finished: u64,
    running: bool,
    /// Callers blocked in `wait` (no futex wake syscall when there are none).
    waiters: u32,
    /// The latest barrier that failed, and how.
    last_failure: Option<(u64, Errno)>,
}

impl DirSync {
    /// Call after your rename returned: returns once a barrier that started after this call
    /// began has completed, running `fsync` (this directory's fsync) itself when no barrier is
    /// running. `Err`: a barrier from the first one that covers this caller to the last one
    /// completed failed, with its errno.
    pub(crate) fn barrier(&self, fsync: impl FnOnce() -> Result<(), Errno>) -> Result<(), Errno> {
        let mut fsync = Some(fsync);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // A running barrier may have started before our rename: the next one is ours.
        let need = st.started + 1;
        loop {
            if st.finished >= need {
                return match st.last_failure {
                    Some((epoch, e)) if epoch >= need => Err(e),
                    _ => Ok(()),
                };
            }
            if st.running {
                st.waiters += 1;
                st = self.done.wait(st).unwrap_or_else(|p| p.into_inner());
                st.waiters -= 1;
                continue;
            }
            st.running = true;
            st.started += 1;
            let mine = st.started;
            drop(st);
            // `mine >= need`, so this runs at most once per call.
            let r = fsync.take().map_or(Ok(()), |f| f());
            st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.running = false;
            st.finished = mine;
            if let Err(e) = r {
                st.last_failure = Some((mine, e));
            }
            if st.waiters > 0 {
                self.done.notify_all();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn one_thread_gets_one_fsync_per_barrier() {
        let d = DirSync::default();
        let n = AtomicU64::new(0);
        for _ in 0..5 {
            d.barrier(|| {
                n.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(n.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn every_caller_is_covered_by_a_barrier_that_started_after_it() {
        // Each caller records a "rename" (a tick) before asking; each fsync records the last
        // tick it covers when it starts. A caller's own tick must be covered by a barrier
        // that completed before it returned.
        let d = Arc::new(DirSync::default());
        let tick = Arc::new(AtomicU64::new(0));
        let covered = Arc::new(AtomicU64::new(0));
        let fsyncs = Arc::new(AtomicU64::new(0));
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let (d, tick, covered, fsyncs) =
                    (d.clone(), tick.clone(), covered.clone(), fsyncs.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let mine = tick.fetch_add(1, Ordering::SeqCst) + 1;
                        d.barrier(|| {
                            let upto = tick.load(Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_micros(50));
                            fsyncs.fetch_add(1, Ordering::SeqCst);
                            covered.fetch_max(upto, Ordering::SeqCst);
                            Ok(())
                        })
                        .unwrap();
                        assert!(covered.load(Ordering::SeqCst) >= mine);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert!(fsyncs.load(Ordering::SeqCst) <= 1600);
    }

    #[test]
    fn a_failed_barrier_fails_every_caller_it_covered() {
        let d = DirSync::default();
        assert_eq!(d.barrier(|| Err(Errno::IO)), Err(Errno::IO));
        // The next caller needs a new barrier, which succeeds.
        assert_eq!(d.barrier(|| Ok(())), Ok(()));
    }
}
