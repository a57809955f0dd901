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
//! Where one directory fsync commits every change made before it started, in any directory
//! ([`Reach::Journal`]: ext4 with a jbd2 journal, f2fs), the held directories share one
//! [`DirSync`]: a barrier asked for in `ready/03` may be run as the fsync of `receipts/05`.
//!
//! Before a barrier starts, its runner gathers ([`Gather`]): it waits briefly for the other
//! threads of the handle that are inside an operation to reach their barriers, so that one
//! journal commit covers them all.
//!
//! A failed fsync is reported to every caller it was meant to cover (indeterminate), and to
//! any caller whose barrier range includes it: `fsync(2)` is never retried, because after a
//! failure a later fsync can succeed without the lost writes (see [`crate::sys::Sys::fsync`]).
//! Directories opened per call (delayed and dead buckets) are not grouped.

use crate::disk::sys::{Errno, Sys};
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What a completed fsync of a directory makes durable, on the queue's filesystem (DESIGN.md,
/// Barriers). Learnt once per handle, from `statfs` magic and the ext4 superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// The directory's own entries only (btrfs, tmpfs, ext2, ext4 without a journal or with
    /// fast commits, network filesystems, or when a check cannot be made): a move between
    /// directories needs both fsyncs, and each directory its own barrier.
    Dir,
    /// Every change of the log transaction that last changed the directory, and every earlier
    /// one, since commits reach the disk in order (xfs: `xfs_dir_fsync` forces the log up to
    /// the directory's last commit sequence, fs/xfs/xfs_file.c). A move needs one fsync, of
    /// its destination; a run of renames by one thread, one fsync of the directory changed
    /// last. Another thread's later rename in another directory is *not* covered.
    Rename,
    /// Every metadata change that completed before the fsync started, in any directory (ext4
    /// with a jbd2 journal and no fast commits: a directory is a journalled-data inode, so its
    /// fsync calls `ext4_force_commit`, which commits the running transaction and waits for
    /// it, fs/ext4/fsync.c; e360c6ed7274, in 6.4-rc1, lost this for directories until Jan
    /// Kara's "ext4: Fix fsync for non-directories", May 2023, so every 6.4 kernel is left
    /// out). All held directories then share one group: one fsync covers the renames of
    /// every thread, whatever directory.
    ///
    /// f2fs too: there the fsync of a directory is a checkpoint (`f2fs_do_sync_file` sends a
    /// directory straight to `need_do_checkpoint`, which answers `CP_NON_REGULAR`, and
    /// `f2fs_sync_fs(sb, 1)` runs a checkpoint that starts after the request, merged with
    /// others or not, unless nothing is dirty, fs/f2fs/file.c and checkpoint.c), and a
    /// checkpoint writes every node and directory block of the filesystem. It does not write
    /// a regular file's dirty data: a job file is written out before its link, as on ext4.
    /// Mounted with `checkpoint=disable` or `nobarrier` f2fs makes no fsync durable, under
    /// this rule or any other.
    Journal,
}

/// The group-commit state of every directory a handle holds (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Group {
    dirs: Vec<(RawFd, DirSync)>,
    /// The one group of every held directory, where a directory fsync reaches the whole
    /// journal ([`Reach::Journal`]).
    shared: DirSync,
    /// Which threads of the handle are inside an operation and which are at a barrier.
    pub(crate) gather: Gather,
    /// What one directory fsync covers on the queue's filesystem; learnt at first use.
    reach: OnceLock<Reach>,
}

impl Group {
    /// One [`DirSync`] for each of `fds` (directories held open for the handle's lifetime).
    pub(crate) fn new(fds: impl IntoIterator<Item = RawFd>) -> Group {
        let mut dirs: Vec<(RawFd, DirSync)> =
            fds.into_iter().map(|f| (f, DirSync::default())).collect();
        dirs.sort_unstable_by_key(|(f, _)| *f);
        Group {
            dirs,
            ..Group::default()
        }
    }

    /// What one fsync of a directory covers on the filesystem of `dir` (any directory of the
    /// queue), learnt at first use: see [`Reach`] and [`reach_fs`].
    pub(crate) fn reach(&self, sys: &Sys, dir: BorrowedFd<'_>) -> Reach {
        *self.reach.get_or_init(|| reach_fs(sys, dir))
    }

    /// Whether, on the filesystem of `dir` (any directory of the queue), a completed fsync of
    /// a rename's destination directory also makes the rename's removal from its source
    /// directory durable, so that a move between directories needs one directory fsync, not
    /// two: [`Reach::Rename`] or [`Reach::Journal`]. True only where the rigs showed it
    /// (DESIGN.md, Barriers): xfs, f2fs, and ext4 with a jbd2 journal attached and no fast
    /// commits.
    /// Everywhere else both fsyncs stay.
    pub(crate) fn one_barrier_per_rename(&self, sys: &Sys, dir: BorrowedFd<'_>) -> bool {
        self.reach(sys, dir) != Reach::Dir
    }

    /// The barrier group of held directory `fd` (`dir`, borrowed), or `None` for a directory
    /// opened per call: the directory's own, or with [`Reach::Journal`] the one group all
    /// held directories share.
    pub(crate) fn get(&self, sys: &Sys, dir: BorrowedFd<'_>) -> Option<&DirSync> {
        use std::os::fd::AsRawFd;
        let fd = dir.as_raw_fd();
        let own = self
            .dirs
            .binary_search_by_key(&fd, |(f, _)| *f)
            .ok()
            .map(|i| &self.dirs[i].1)?;
        Some(match self.reach(sys, dir) {
            Reach::Journal => &self.shared,
            Reach::Dir | Reach::Rename => own,
        })
    }
}

/// The check behind [`Group::one_barrier_per_rename`], made afresh.
#[cfg(feature = "faults")]
pub(crate) fn one_barrier_fs(sys: &Sys, dir: BorrowedFd<'_>) -> bool {
    reach_fs(sys, dir) != Reach::Dir
}

/// The check behind [`Group::reach`], made afresh: [`Reach::Rename`] on xfs,
/// [`Reach::Journal`] on f2fs and on ext2/3/4 with a jbd2 journal attached and no fast
/// commits (see [`ext4_journal_attached`]) on a kernel other than 6.4
/// (`/proc/sys/kernel/osrelease`; [`Reach::Rename`] there or when it cannot be read),
/// [`Reach::Dir`] everywhere else and whenever a check fails.
pub(crate) fn reach_fs(sys: &Sys, dir: BorrowedFd<'_>) -> Reach {
    match sys.fs_magic(dir).map(|m| m as u32) {
        Ok(0x5846_5342) => Reach::Rename,  // xfs
        Ok(0xF2F5_2010) => Reach::Journal, // f2fs
        Ok(0xEF53) if ext4_journal_attached(dir) => {
            // The running kernel's release (uname -r); unknown is treated as unsure.
            match std::fs::read_to_string("/proc/sys/kernel/osrelease") {
                Ok(r) if !dir_fsync_may_skip_commit(r.trim()) => Reach::Journal,
                _ => Reach::Rename,
            }
        }
        _ => Reach::Dir,
    }
}

/// Whether kernel `release` (`uname -r`) may be one whose ext4 fsync of a directory waited
/// only for the directory's own transaction (e360c6ed7274, merged for 6.4-rc1, until "ext4:
/// Fix fsync for non-directories", posted in May 2023 as a fix of that release cycle):
/// [`Reach::Rename`] still holds there. Every 6.4 kernel, candidate or release, is treated
/// so, rather than guess at which one took the fix.
fn dir_fsync_may_skip_commit(release: &str) -> bool {
    let mut v = release.split(['.', '-']);
    v.next() == Some("6") && v.next() == Some("4")
}

/// Whether the ext2/3/4 filesystem holding `dir` runs a jbd2 journal without fast commits
/// ([`ext4_compat_features`] has `has_journal` and not `fast_commit`). With fast commits the
/// rigs were not run on the one-fsync rules, and the block rig found ext4's own recovery
/// failing there (DESIGN.md, "ext4 with fast commits"). False when unsure, for example when
/// the device cannot be read (not root): both fsyncs stay.
fn ext4_journal_attached(dir: BorrowedFd<'_>) -> bool {
    ext4_compat_features(dir).is_some_and(|c| c & HAS_JOURNAL != 0 && c & FAST_COMMIT == 0)
}

/// Whether the ext2/3/4 filesystem holding `dir` runs a jbd2 journal *with* fast commits
/// (`mkfs.ext4 -O fast_commit`): the block rig found ext4 unable to recover some of its own
/// crash states there (DESIGN.md, "ext4 with fast commits"). False when unsure (see
/// [`ext4_compat_features`]).
pub(crate) fn ext4_fast_commit(dir: BorrowedFd<'_>) -> bool {
    ext4_compat_features(dir).is_some_and(|c| c & HAS_JOURNAL != 0 && c & FAST_COMMIT != 0)
}

/// `s_feature_compat`'s `has_journal` and `fast_commit` bits (Documentation/filesystems/ext4/super.rst).
const HAS_JOURNAL: u32 = 0x4;
const FAST_COMMIT: u32 = 0x400;

/// The compatible feature bits (`s_feature_compat`) of the ext2/3/4 filesystem holding `dir`,
/// whose block device (`/sys/dev/block/<major>:<minor>`) has a jbd2 journal attached
/// (`/proc/fs/jbd2/<device>-8`): read from its superblock on `/dev/<device>` (1024 bytes at
/// offset 1024; `s_magic` at 0x38, `s_feature_compat` at 0x5C). `None` when any step fails,
/// for example when the device cannot be read (not root).
fn ext4_compat_features(dir: BorrowedFd<'_>) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    let st = rustix::fs::fstat(dir).ok()?;
    let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    let dev = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    let name = dev.file_name().and_then(|n| n.to_str())?;
    if !std::path::Path::new(&format!("/proc/fs/jbd2/{name}-8")).is_dir() {
        return None;
    }
    let mut sb = [0u8; 0x60];
    std::fs::File::open(format!("/dev/{name}"))
        .and_then(|f| f.read_exact_at(&mut sb, 1024))
        .ok()?;
    (sb[0x38..0x3A] == [0x53, 0xEF])
        .then(|| u32::from_le_bytes([sb[0x5C], sb[0x5D], sb[0x5E], sb[0x5F]]))
}

/// The gathering step of group commit: a thread about to run a barrier first waits, for at
/// most the recent fsync time, until every other thread of the handle that is inside an
/// operation (enqueue, claim, ack, nack, release, fail) has reached a barrier too, so that one
/// journal commit covers all of their renames.
///
/// Without it, threads of one handle fell into two alternating groups on ext4: the threads a
/// commit released made their next renames while the next commit (asked for by the other
/// group, which had renamed during the first commit) was already running, so they waited for
/// the one after it; each commit carried about half of the threads (8 workers: 3.2 operations
/// per jbd2 commit, `/proc/fs/jbd2/<dev>/info`). jbd2 batches this way only for synchronous
/// handles, not for fsync (`jbd2_journal_stop`, `j_max_batch_time`).
///
/// A thread alone never waits (it is the only one inside an operation, and at its barrier).
/// The wait changes only when a barrier starts, never what it covers: each caller is still
/// covered by a barrier that started after its request.
#[derive(Debug, Default)]
pub(crate) struct Gather {
    /// Threads inside an operation ([`Gather::op`]).
    active: AtomicU32,
    /// Threads at a barrier and not yet released by one that covers them.
    at_barrier: AtomicU32,
    /// Leaders waiting to gather (no lock, no wake-up when there are none).
    gathering: AtomicU32,
    /// An exponential average of the fsync time of the handle's barriers, ns: the longest a
    /// leader waits.
    fsync_ns: AtomicU64,
    lock: Mutex<()>,
    changed: Condvar,
}

/// A thread inside an operation, for [`Gather`]; counted until dropped. Only a thread's
/// outermost operation counts (`enqueue_batch` runs `enqueue`s, `claim_batch` claims): a
/// thread counted twice would never be "all at a barrier", and every leader would wait its
/// full time.
pub(crate) struct Op<'a>(Option<&'a Gather>);

std::thread_local! {
    /// Operations the calling thread is inside, outermost included.
    static DEPTH: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get() - 1));
        if let Some(g) = self.0 {
            g.active.fetch_sub(1, SeqCst);
            g.wake();
        }
    }
}

/// The longest a leader waits to gather, whatever the fsync time: 2 ms.
const GATHER_MAX: Duration = Duration::from_millis(2);

impl Gather {
    /// Count the calling thread as inside an operation until the guard drops.
    pub(crate) fn op(&self) -> Op<'_> {
        let outermost = DEPTH.with(|d| {
            d.set(d.get() + 1);
            d.get() == 1
        });
        if !outermost {
            return Op(None);
        }
        self.active.fetch_add(1, SeqCst);
        Op(Some(self))
    }

    fn arrive(&self) {
        self.at_barrier.fetch_add(1, SeqCst);
        self.wake();
    }

    fn leave(&self, n: u32) {
        self.at_barrier.fetch_sub(n, SeqCst);
    }

    fn wake(&self) {
        if self.gathering.load(SeqCst) > 0 {
            let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.changed.notify_all();
        }
    }

    fn gathered(&self) -> bool {
        self.at_barrier.load(SeqCst) >= self.active.load(SeqCst)
    }

    /// Wait until every thread inside an operation is at a barrier, or for the average fsync
    /// time (at most [`GATHER_MAX`]), whichever comes first.
    fn wait(&self) {
        if self.gathered() {
            return;
        }
        let limit = Duration::from_nanos(self.fsync_ns.load(SeqCst)).min(GATHER_MAX);
        let end = Instant::now() + limit;
        self.gathering.fetch_add(1, SeqCst);
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while !self.gathered() {
            let now = Instant::now();
            if now >= end {
                break;
            }
            g = self
                .changed
                .wait_timeout(g, end - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(g);
        self.gathering.fetch_sub(1, SeqCst);
    }

    /// Fold one fsync's time into the average (weight 1/8).
    fn took(&self, d: Duration) {
        let ns = d.as_nanos().min(u64::MAX as u128) as u64;
        let old = self.fsync_ns.load(SeqCst);
        let new = if old == 0 { ns } else { old - old / 8 + ns / 8 };
        self.fsync_ns.store(new, SeqCst);
    }
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
    /// A caller is gathering ([`Gather::wait`]) before it starts the next barrier.
    pending: bool,
    /// Callers the next barrier will cover (arrived since the running one started).
    next: u32,
    /// Callers the running barrier covers.
    covered: u32,
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
    pub(crate) fn barrier(
        &self,
        gather: &Gather,
        fsync: impl FnOnce() -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        let mut fsync = Some(fsync);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // A running barrier may have started before our rename: the next one is ours.
        let need = st.started + 1;
        st.next += 1;
        gather.arrive();
        loop {
            if st.finished >= need {
                return match st.last_failure {
                    Some((epoch, e)) if epoch >= need => Err(e),
                    _ => Ok(()),
                };
            }
            if st.running || st.pending {
                st.waiters += 1;
                st = self.done.wait(st).unwrap_or_else(|p| p.into_inner());
                st.waiters -= 1;
                continue;
            }
            // Ours to run: first let the handle's other threads reach their barriers; who
            // arrives here meanwhile is covered by it (it has not started).
            st.pending = true;
            drop(st);
            gather.wait();
            st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.pending = false;
            st.running = true;
            st.started += 1;
            st.covered = core::mem::take(&mut st.next);
            let mine = st.started;
            drop(st);
            // `mine >= need`, so this runs at most once per call.
            let t = Instant::now();
            let r = fsync.take().map_or(Ok(()), |f| f());
            gather.took(t.elapsed());
            st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.running = false;
            st.finished = mine;
            gather.leave(core::mem::take(&mut st.covered));
            if let Err(e) = r {
                st.last_failure = Some((mine, e));
            }
            if st.waiters > 0 {
                self.done.notify_all();
            }
        }
    }
}

/// Whether a queue in directory `dir` makes one fsync per move between directories and
/// writes a job file out (`sync_file_range`) instead of fsyncing it: true on xfs, on f2fs and on ext4 with a jbd2
/// journal and no fast commits (DESIGN.md, Barriers), false elsewhere or when `dir` cannot be
/// opened. For tests that count barriers (feature `faults`, as the module's export).
#[cfg(feature = "faults")]
pub fn one_fsync_per_move(dir: &std::path::Path) -> bool {
    let sys = crate::disk::sys::Sys::new();
    sys.open_dir_path(dir)
        .is_ok_and(|fd| one_barrier_fs(&sys, std::os::fd::AsFd::as_fd(&fd)))
}

/// Whether the held directories of a queue in directory `dir` share one group-commit barrier
/// (one fsync serves every thread's renames, whatever directory): true on ext4 with a jbd2
/// journal and no fast commits, where a directory fsync commits the running journal
/// transaction, and on f2fs, where it is a checkpoint (`ops/group.rs`, `Reach::Journal`;
/// DESIGN.md, Barriers), false elsewhere or
/// when `dir` cannot be opened. For tests (feature `faults`, as the module's export).
#[cfg(feature = "faults")]
pub fn shared_barriers(dir: &std::path::Path) -> bool {
    let sys = crate::disk::sys::Sys::new();
    sys.open_dir_path(dir)
        .is_ok_and(|fd| reach_fs(&sys, std::os::fd::AsFd::as_fd(&fd)) == Reach::Journal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_6_4_kernels_are_treated_as_unsure() {
        for r in [
            "6.4.0-rc1",
            "6.4.0-rc4-00012-gabc",
            "6.4-rc2",
            "6.4.0",
            "6.4.12-arm64",
        ] {
            assert!(dir_fsync_may_skip_commit(r), "{r}");
        }
        for r in [
            "6.1.0-27-amd64",
            "6.18.0",
            "6.40.0-rc1",
            "5.4.0-rc1",
            "6.5.0",
            "5.10.4",
        ] {
            assert!(!dir_fsync_may_skip_commit(r), "{r}");
        }
    }

    /// Held directories share one barrier group only where a directory fsync reaches the
    /// whole journal; a directory opened per call has none.
    #[test]
    fn held_directories_share_one_group_only_where_an_fsync_reaches_the_journal() {
        use std::os::fd::{AsFd, AsRawFd};
        let sys = Sys::new();
        let d = std::env::temp_dir().join(format!("group-reach-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for sub in ["a", "b", "c"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let open = |sub: &str| sys.open_dir_path(&d.join(sub)).unwrap();
        let (a, b, c) = (open("a"), open("b"), open("c"));
        let same = |g: &Group, x: BorrowedFd<'_>, y: BorrowedFd<'_>| {
            std::ptr::eq(g.get(&sys, x).unwrap(), g.get(&sys, y).unwrap())
        };
        for (reach, shared) in [
            (Reach::Dir, false),
            (Reach::Rename, false),
            (Reach::Journal, true),
        ] {
            let g = Group::new([a.as_raw_fd(), b.as_raw_fd()]);
            g.reach.set(reach).unwrap();
            assert_eq!(same(&g, a.as_fd(), b.as_fd()), shared, "{reach:?}");
            assert!(same(&g, a.as_fd(), a.as_fd()), "{reach:?}");
            assert!(g.get(&sys, c.as_fd()).is_none(), "{reach:?}: not held");
            assert_eq!(
                g.one_barrier_per_rename(&sys, a.as_fd()),
                reach != Reach::Dir
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn one_thread_gets_one_fsync_per_barrier() {
        let d = DirSync::default();
        let n = AtomicU64::new(0);
        for _ in 0..5 {
            d.barrier(&Gather::default(), || {
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
                        d.barrier(&Gather::default(), || {
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

    /// Two threads inside operations on one directory: the first at its barrier waits for
    /// the second to arrive, and one fsync covers both. Without the gathering step the first
    /// fsyncs at once, the second arrives after it started and needs a second fsync: always
    /// 2. (Tried up to 5 times: a loaded machine may hold the second thread past the 2 ms a
    /// leader waits.)
    #[test]
    fn a_leader_waits_for_a_thread_inside_an_operation_and_one_fsync_covers_both() {
        let pair = || {
            let g = Arc::new(Gather::default());
            g.took(GATHER_MAX); // a slow disk: leaders may wait up to GATHER_MAX
            let d = Arc::new(DirSync::default());
            let fsyncs = Arc::new(AtomicU64::new(0));
            let (tx, rx) = std::sync::mpsc::channel();
            let second = {
                let (g, d, fsyncs) = (g.clone(), d.clone(), fsyncs.clone());
                std::thread::spawn(move || {
                    let _op = g.op();
                    tx.send(()).unwrap();
                    // Its rename, slower than the first thread's.
                    std::thread::sleep(Duration::from_micros(300));
                    d.barrier(&g, || {
                        fsyncs.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })
                })
            };
            let _op = g.op();
            rx.recv().unwrap();
            d.barrier(&g, || {
                std::thread::sleep(Duration::from_micros(200));
                fsyncs.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
            second.join().unwrap().unwrap();
            fsyncs.load(Ordering::SeqCst)
        };
        let tries: Vec<u64> = (0..5).map(|_| pair()).take_while(|&n| n != 1).collect();
        assert!(tries.len() < 5, "fsyncs per pair: {tries:?}");
    }

    /// Nested operations of one thread count once: alone, its barrier never waits.
    #[test]
    fn a_thread_alone_never_waits_even_inside_nested_operations() {
        let g = Gather::default();
        g.took(Duration::from_secs(1));
        let d = DirSync::default();
        let outer = g.op();
        let inner = g.op();
        assert_eq!(g.active.load(SeqCst), 1, "counted once");
        g.arrive();
        assert!(g.gathered(), "alone and at its barrier");
        g.leave(1);
        drop(inner);
        assert_eq!(g.active.load(SeqCst), 1, "still inside the outer one");
        drop(outer);
        assert_eq!(g.active.load(SeqCst), 0);
        d.barrier(&g, || Ok(())).unwrap();
        assert_eq!(g.at_barrier.load(SeqCst), 0, "released by its barrier");
    }

    #[test]
    fn a_failed_barrier_fails_every_caller_it_covered() {
        let d = DirSync::default();
        assert_eq!(
            d.barrier(&Gather::default(), || Err(Errno::IO)),
            Err(Errno::IO)
        );
        // The next caller needs a new barrier, which succeeds.
        assert_eq!(d.barrier(&Gather::default(), || Ok(())), Ok(()));
    }
}
