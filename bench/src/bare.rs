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
    /// No fsync.
    None,
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

    /// The name of this worker's job `n` in state `state` (0 ready, 1 leased, 2 receipt).
    fn name(&self, state: usize) -> String {
        let suffix = ["ready", "leased", "rct"][state];
        let mut s = format!("{}.{}.{suffix}", self.tag, self.n);
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
        let (r, l, a) = (self.name(0), self.name(1), self.name(2));
        // With shards, a job's ready and receipt directories are picked apart, as
        // SteadQ's are (by the job's id there, by its number here).
        let n = self.n as usize;
        let ready = &self.ready[n % self.ready.len()];
        let receipts = &self.receipts[n.wrapping_mul(5).wrapping_add(3) % self.receipts.len()];
        let f = fs::openat(
            ready,
            ".",
            OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )?;
        rustix::io::write(&f, payload)?;
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

    /// A step: one lifecycle, or a batch of them then one syncfs.
    pub fn step(&mut self, payload: &[u8]) -> Res<usize> {
        match self.sync {
            Sync::SyncfsPer(n) => {
                for _ in 0..n {
                    self.lifecycle(payload)?;
                }
                fs::syncfs(&self.ready[0])?;
                Ok(n)
            }
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
            assert_eq!(b.name(state).len(), *want);
        }
        b.lifecycle(b"x").unwrap();
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The fewest-barriers loop and the file-fsync loop each do the whole lifecycle: the
    /// receipt holds the payload and the ready directory is empty again.
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
