//! The bare protocol: the same renames and fsyncs as SteadQ's lifecycle, in a handful of
//! direct syscalls (rustix) and nothing else: no names to parse, no digests, no listing
//! (a worker claims the job it just enqueued by name), no group commit.
//!
//! Two opt-in additions take SteadQ's tmpfs gap to the bare loop apart: `long_names` gives
//! the three names SteadQ's lengths ([`STEADQ_NAME_LEN`]: the kernel hashes and copies every
//! byte), and `watch` reads an inotify watch on the ready directory once per job, as an
//! idle SteadQ worker is woken.

use crate::run::Res;
use rustix::fs::{self, AtFlags, Mode, OFlags, RenameFlags};
use std::os::fd::{AsFd, OwnedFd};

/// Durability of the bare protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sync {
    /// fsync the file before its link and each directory after each rename.
    Strict,
    /// The fewest barriers a strict lifecycle needs where a directory fsync commits every
    /// earlier transaction (journaled ext4 and xfs; DESIGN.md "Barriers and outcomes"):
    /// the file written out (`sync_file_range`, no fsync) before its link, then one fsync of
    /// the directory each step changed last. Three journal commits a job, as SteadQ makes
    /// there, and no other work: the ceiling of any strict queue with that pattern.
    Min,
    /// Every step committed through the job file's own fsync and no directory fsync: the
    /// lever "commit a rename through the moved file's fsync where the filesystem logs the
    /// directory entry with it" (issue 43), measured, not proven: on most filesystems a
    /// crash can lose the names. On f2fs it shows whether such an fsync stays a roll-forward
    /// node write or becomes a checkpoint for a linked or renamed file.
    File,
    /// One syncfs per batch of lifecycles.
    SyncfsPer(usize),
    /// A batch taken step by step, as SteadQ's `Durability::Batched` takes it: `n` enqueues
    /// then one syncfs, `n` claims then one syncfs, `n` acks then one syncfs. Each step
    /// durable before the next starts, one barrier a step: the bare protocol of a batched
    /// lifecycle (`SyncfsPer` leaves claims and acks without one).
    SyncfsPerStep(usize),
    /// No fsync.
    None,
}

/// A new unnamed file (`O_TMPFILE`) in `dir` holding `payload`: a job file before its link.
fn new_file(dir: &OwnedFd, payload: &[u8]) -> Res<OwnedFd> {
    let f = fs::openat(
        dir,
        ".",
        OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )?;
    rustix::io::write(&f, payload)?;
    Ok(f)
}

/// The lengths (bytes) of a SteadQ job's names with default options: ready, leased and
/// receipt. A unit test checks them against names a real queue makes.
pub const STEADQ_NAME_LEN: [usize; 3] = [92, 196, 144];

pub struct Bare {
    ready: Vec<OwnedFd>,
    receipts: Vec<OwnedFd>,
    sync: Sync,
    tag: String,
    n: u64,
    long_names: bool,
    watch: Option<OwnedFd>,
}

fn dir(p: &std::path::Path) -> Res<OwnedFd> {
    std::fs::create_dir_all(p)?;
    Ok(fs::open(
        p,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

impl Bare {
    /// A worker's view of `root` (shared by all workers), its names tagged `worker`; names
    /// of SteadQ's lengths with `long_names`, an inotify watch read per job with `watch`.
    pub fn new(
        root: &std::path::Path,
        worker: usize,
        sync: Sync,
        long_names: bool,
        watch: bool,
        shards: usize,
    ) -> Res<Bare> {
        use rustix::fs::inotify;
        let sub = |d: &str| -> Res<Vec<OwnedFd>> {
            if shards <= 1 {
                return Ok(vec![dir(&root.join(d))?]);
            }
            (0..shards)
                .map(|i| dir(&root.join(d).join(format!("{i:02}"))))
                .collect()
        };
        let ready = sub("ready")?;
        let watch = if watch {
            let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
            let events = inotify::WatchFlags::CREATE
                | inotify::WatchFlags::MOVED_TO
                | inotify::WatchFlags::MOVED_FROM;
            inotify::add_watch(&fd, root.join("ready"), events)?;
            if shards > 1 {
                for i in 0..shards {
                    inotify::add_watch(&fd, root.join("ready").join(format!("{i:02}")), events)?;
                }
            }
            Some(fd)
        } else {
            None
        };
        Ok(Bare {
            ready,
            receipts: sub("receipts")?,
            sync,
            tag: format!("w{worker}"),
            n: 0,
            long_names,
            watch,
        })
    }

    /// Keep receipts in the ready directories (`bare:strict-min-onedir`): an ack renames
    /// within one directory, as a claim does, so its commit logs one directory's blocks
    /// instead of two. A measurement of a layout SteadQ does not have; without shards (the
    /// `onedir` mode has none), so a job's receipt directory is its own ready directory.
    pub fn receipts_in_ready(&mut self) -> Res<()> {
        self.receipts = self
            .ready
            .iter()
            .map(|d| d.try_clone())
            .collect::<Result<_, _>>()?;
        Ok(())
    }

    /// The name of this worker's job `n` in state `state` (0 ready, 1 leased, 2 receipt).
    fn name(&self, n: u64, state: usize) -> String {
        let suffix = ["ready", "leased", "rct"][state];
        let mut s = format!("{}.{n}.{suffix}", self.tag);
        if self.long_names {
            let want = STEADQ_NAME_LEN[state];
            let pad = want.saturating_sub(s.len());
            s.insert_str(0, &"0".repeat(pad));
        }
        s
    }

    /// Drain the watch's events, as a woken worker reads them (nonblocking).
    fn read_watch(&self) -> Res<()> {
        if let Some(fd) = &self.watch {
            let mut buf = [0u8; 4096];
            loop {
                match rustix::io::read(fd, &mut buf) {
                    Ok(0) | Err(rustix::io::Errno::AGAIN) => break,
                    Ok(_) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    fn fsync(&self, fd: impl AsFd) -> Res<()> {
        if self.sync == Sync::Strict {
            fs::fsync(fd)?;
        }
        Ok(())
    }

    /// The barrier `File` makes instead of a directory's: an fsync of the job file itself.
    fn fsync_own(&self, fd: impl AsFd) -> Res<()> {
        if self.sync == Sync::File {
            fs::fsync(fd)?;
        }
        Ok(())
    }

    /// The barrier `Min` keeps: an fsync of the directory a step changed last.
    fn fsync_last(&self, fd: impl AsFd) -> Res<()> {
        if matches!(self.sync, Sync::Strict | Sync::Min) {
            fs::fsync(fd)?;
        }
        Ok(())
    }

    /// `Min`'s write-out of a new file before its link: `sync_file_range(2)` with
    /// WAIT_BEFORE | WRITE | WAIT_AFTER, as SteadQ's `Sys::write_out`.
    fn write_out(&self, fd: impl AsFd) -> Res<()> {
        if self.sync != Sync::Min {
            return Ok(());
        }
        use std::os::fd::AsRawFd;
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: sync_file_range(2) takes a descriptor `fd` keeps open for the call and
        // plain integers; it reads and writes no memory of this process.
        let r = unsafe { libc::sync_file_range(fd.as_fd().as_raw_fd(), 0, 0, flags) };
        if r != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
    }

    /// One lifecycle: O_TMPFILE, write, fsync, linkat, fsync dir; rename to leased, fsync
    /// dir, open + read + close; rename to receipts, fsync both directories. `Min` writes
    /// the file out instead of its fsync and leaves out the ready directory's fsync after
    /// the ack (three directory fsyncs). `File` fsyncs no directory, only the job file after
    /// its link, after its claim and after its ack.
    pub fn lifecycle(&mut self, payload: &[u8]) -> Res<()> {
        self.n += 1;
        let n = self.n;
        let (r, l, a) = (self.name(n, 0), self.name(n, 1), self.name(n, 2));
        let (ready, receipts) = self.dirs_of(n);
        let f = new_file(ready, payload)?;
        self.fsync(&f)?;
        self.write_out(&f)?;
        fs::linkat(&f, "", ready, &r, AtFlags::EMPTY_PATH)?;
        self.fsync_own(&f)?;
        drop(f);
        self.fsync_last(ready)?;
        self.read_watch()?;
        fs::renameat_with(ready, &r, ready, &l, RenameFlags::NOREPLACE)?;
        self.fsync_last(ready)?;
        let f = fs::openat(ready, &l, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
        self.fsync_own(&f)?;
        let mut buf = vec![0u8; payload.len()];
        rustix::io::pread(&f, &mut buf[..], 0)?;
        // `File` keeps the file open for its fsync after the ack; the others close it here.
        let held = (self.sync == Sync::File).then_some(f);
        fs::renameat_with(ready, &l, receipts, &a, RenameFlags::NOREPLACE)?;
        if let Some(f) = held {
            fs::fsync(f)?;
        }
        self.fsync_last(receipts)?;
        self.fsync(ready)?;
        Ok(())
    }

    /// The ready and receipt directories of this worker's job `n` (picked apart with
    /// shards, as SteadQ's are: by the job's id there, by its number here).
    fn dirs_of(&self, n: u64) -> (&OwnedFd, &OwnedFd) {
        let n = n as usize;
        (
            &self.ready[n % self.ready.len()],
            &self.receipts[n.wrapping_mul(5).wrapping_add(3) % self.receipts.len()],
        )
    }

    /// `n` lifecycles a step at a time ([`Sync::SyncfsPerStep`]): every enqueue (O_TMPFILE,
    /// write, linkat) then a syncfs; every claim (rename to leased) then a syncfs; every ack
    /// (open, read, close, rename to the receipts) then a syncfs.
    fn batch_by_steps(&mut self, payload: &[u8], n: usize) -> Res<()> {
        let jobs = self.n + 1..=self.n + n as u64;
        self.n += n as u64;
        for j in jobs.clone() {
            let (ready, _) = self.dirs_of(j);
            let f = new_file(ready, payload)?;
            fs::linkat(&f, "", ready, self.name(j, 0), AtFlags::EMPTY_PATH)?;
        }
        fs::syncfs(&self.ready[0])?;
        self.read_watch()?;
        for j in jobs.clone() {
            let (r, l) = (self.name(j, 0), self.name(j, 1));
            let (ready, _) = self.dirs_of(j);
            fs::renameat_with(ready, &r, ready, &l, RenameFlags::NOREPLACE)?;
        }
        fs::syncfs(&self.ready[0])?;
        let mut buf = vec![0u8; payload.len()];
        for j in jobs {
            let (l, a) = (self.name(j, 1), self.name(j, 2));
            let (ready, receipts) = self.dirs_of(j);
            let f = fs::openat(ready, &l, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
            rustix::io::pread(&f, &mut buf[..], 0)?;
            drop(f);
            fs::renameat_with(ready, &l, receipts, &a, RenameFlags::NOREPLACE)?;
        }
        fs::syncfs(&self.ready[0])?;
        Ok(())
    }

    /// A step: one lifecycle, or a batch of them then one syncfs, or a batch step by step.
    pub fn step(&mut self, payload: &[u8]) -> Res<usize> {
        match self.sync {
            Sync::SyncfsPer(n) => {
                for _ in 0..n {
                    self.lifecycle(payload)?;
                }
                fs::syncfs(&self.ready[0])?;
                Ok(n)
            }
            Sync::SyncfsPerStep(n) => self.batch_by_steps(payload, n).map(|_| n),
            _ => self.lifecycle(payload).map(|_| 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The padded names are as long as the names a real SteadQ queue gives a job in each
    /// state (default options, default priority).
    #[test]
    fn long_names_are_as_long_as_steadqs() {
        let root = std::env::temp_dir().join(format!("bench-names-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let q = steadq::Queue::create(&root, steadq::Options::default()).unwrap();
        q.enqueue(b"x").unwrap();
        let lens = |state: steadq::State| -> Vec<usize> {
            q.list(Some(state))
                .unwrap()
                .iter()
                .map(|l| l.rel_path(q.id()).rsplit('/').next().unwrap().len())
                .collect()
        };
        let ready = lens(steadq::State::Ready);
        let lease = q
            .claim_with(&steadq::ClaimOptions {
                lease: Some(std::time::Duration::from_secs(60)),
                ..Default::default()
            })
            .unwrap()
            .unwrap();
        let leased = lens(steadq::State::Leased);
        lease.ack().unwrap();
        let acked = lens(steadq::State::Acked);
        assert_eq!(
            [ready[0], leased[0], acked[0]],
            STEADQ_NAME_LEN,
            "ready {ready:?} leased {leased:?} acked {acked:?}"
        );
        let mut b = Bare::new(&root.join("bare"), 3, Sync::None, true, true, 1).unwrap();
        b.n = 123_456;
        for (state, want) in STEADQ_NAME_LEN.iter().enumerate() {
            assert_eq!(b.name(b.n, state).len(), *want);
        }
        b.lifecycle(b"x").unwrap();
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The fewest-barriers loop and the file-fsync loop each do the whole lifecycle: the
    /// receipt holds the payload and the ready directory is empty again.
    #[test]
    fn a_batch_by_steps_acks_every_job_of_it_once() {
        let root = std::env::temp_dir().join(format!("bench-steps-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut b = Bare::new(&root, 0, Sync::SyncfsPerStep(5), true, false, 8).unwrap();
        assert_eq!(b.step(b"p").unwrap(), 5);
        assert_eq!(b.step(b"p").unwrap(), 5);
        let listed = |d: &str| -> Vec<Vec<u8>> {
            (0..8)
                .flat_map(|i| std::fs::read_dir(root.join(d).join(format!("{i:02}"))).unwrap())
                .map(|e| std::fs::read(e.unwrap().path()).unwrap())
                .collect()
        };
        assert_eq!(listed("ready").len(), 0);
        assert_eq!(listed("receipts"), vec![b"p".to_vec(); 10]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn strict_min_and_file_leave_the_payload_in_its_receipt() {
        for (sync, what) in [(Sync::Min, "min"), (Sync::File, "file")] {
            let root = std::env::temp_dir().join(format!("bench-{what}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            let mut b = Bare::new(&root, 0, sync, false, false, 1).unwrap();
            assert_eq!(b.step(b"payload-1").unwrap(), 1, "{what}");
            assert_eq!(
                std::fs::read_dir(root.join("ready")).unwrap().count(),
                0,
                "{what}"
            );
            let receipts: Vec<_> = std::fs::read_dir(root.join("receipts"))
                .unwrap()
                .map(|e| std::fs::read(e.unwrap().path()).unwrap())
                .collect();
            assert_eq!(receipts, vec![b"payload-1".to_vec()], "{what}");
            std::fs::remove_dir_all(&root).unwrap();
        }
    }
}
