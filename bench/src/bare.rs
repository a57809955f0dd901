//! The bare protocol: the same renames and fsyncs as SteadQ's lifecycle, in a handful of
//! direct syscalls (rustix) and nothing else: no names to parse, no digests, no listing
//! (a worker claims the job it just enqueued by name), no group commit.

use crate::run::Res;
use rustix::fs::{self, AtFlags, Mode, OFlags, RenameFlags};
use std::os::fd::{AsFd, OwnedFd};

/// Durability of the bare protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sync {
    /// fsync the file before its link and each directory after each rename.
    Strict,
    /// One syncfs per batch of lifecycles.
    SyncfsPer(usize),
    /// No fsync.
    None,
}

pub struct Bare {
    ready: OwnedFd,
    receipts: OwnedFd,
    sync: Sync,
    tag: String,
    n: u64,
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
    /// A worker's view of `root` (shared by all workers), its names tagged `worker`.
    pub fn new(root: &std::path::Path, worker: usize, sync: Sync) -> Res<Bare> {
        Ok(Bare {
            ready: dir(&root.join("ready"))?,
            receipts: dir(&root.join("receipts"))?,
            sync,
            tag: format!("w{worker}"),
            n: 0,
        })
    }

    fn fsync(&self, fd: impl AsFd) -> Res<()> {
        if self.sync == Sync::Strict {
            fs::fsync(fd)?;
        }
        Ok(())
    }

    /// One lifecycle: O_TMPFILE, write, fsync, linkat, fsync dir; rename to leased, fsync
    /// dir, open + read + close; rename to receipts, fsync both directories.
    pub fn lifecycle(&mut self, payload: &[u8]) -> Res<()> {
        self.n += 1;
        let (r, l, a) = (
            format!("{}.{}.ready", self.tag, self.n),
            format!("{}.{}.leased", self.tag, self.n),
            format!("{}.{}.rct", self.tag, self.n),
        );
        let f = fs::openat(
            &self.ready,
            ".",
            OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )?;
        rustix::io::write(&f, payload)?;
        self.fsync(&f)?;
        fs::linkat(&f, "", &self.ready, &r, AtFlags::EMPTY_PATH)?;
        drop(f);
        self.fsync(&self.ready)?;
        fs::renameat_with(&self.ready, &r, &self.ready, &l, RenameFlags::NOREPLACE)?;
        self.fsync(&self.ready)?;
        let f = fs::openat(
            &self.ready,
            &l,
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut buf = vec![0u8; payload.len()];
        rustix::io::pread(&f, &mut buf[..], 0)?;
        drop(f);
        fs::renameat_with(&self.ready, &l, &self.receipts, &a, RenameFlags::NOREPLACE)?;
        self.fsync(&self.receipts)?;
        self.fsync(&self.ready)?;
        Ok(())
    }

    /// A step: one lifecycle, or a batch of them then one syncfs.
    pub fn step(&mut self, payload: &[u8]) -> Res<usize> {
        match self.sync {
            Sync::SyncfsPer(n) => {
                for _ in 0..n {
                    self.lifecycle(payload)?;
                }
                fs::syncfs(&self.ready)?;
                Ok(n)
            }
            _ => self.lifecycle(payload).map(|_| 1),
        }
    }
}
