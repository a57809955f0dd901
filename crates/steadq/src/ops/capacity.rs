//! Capacity limits and backpressure: at most `max_jobs` jobs and `max_bytes` bytes of job
//! files in ready, leased, delayed and waiting together.
//!
//! **Where the limits live.** In a sidecar file, `<root>/steadq.limits`, not in the identity
//! file: the identity is published once with a no-replace rename and never rewritten (losing it
//! makes `init` re-identify the queue from job headers), while limits change at run time. The
//! sidecar has its own checksum and is replaced atomically (temp file in `tmp/`, fsync, `rename`,
//! fsync of the root). A handle reads it at its first enqueue after putting an inotify watch
//! on the root, and again only after that watch reports an event about the file (the kernel
//! queues it inside the `rename`, `unlink` or `write`), so a change is seen by every producer
//! at its next enqueue, as if it read the file every time; an enqueue pays one `read` of the
//! watch that finds nothing. No sidecar: no limit. Where no watch can be made (inotify
//! missing, or the per-user instance limit reached) the file is read at every enqueue (one
//! failed `openat` when there is none). Old queues open unchanged; old SteadQ builds ignore
//! the file.
//!
//! ```text
//! steadq-limits
//! version=1
//! max_jobs=<decimal or "none">
//! max_bytes=<decimal or "none">
//! sum=<16 hex: first 8 bytes of SHA-256 of every byte before this line>
//! ```
//!
//! With group limits (DESIGN.md, Groups) the file says `version=2` and has one line per
//! group after `max_bytes`, sorted by name, before the sum: `max_leased.<group>=<1..=1000>`.
//! A file without group lines is byte for byte the version-1 file. A SteadQ build older than
//! groups finds a version-2 file damaged (its enqueues with a capacity check fail, not done)
//! rather than ignore a group's limit.
//!
//! **How the count stays cheap.** Each queue handle keeps a tally (built at its first checked
//! enqueue) of the ready, leased, delayed and waiting jobs: one listing of the ready shards,
//! delayed buckets and `waiting/` (plus one `fstatat` per job when a byte limit is set), then inotify (`inotify(7)`)
//! on those directories keeps it current from event names alone: a job name created or moved
//! into a watched directory adds the job, one moved out or removed takes it away, keyed by
//! (job id, directory) so that events already reflected in the first listing change nothing.
//! A checked enqueue then reads only the events queued since the last one. Memory: about
//! 50 bytes per counted job. An event queue overflow rebuilds the tally; where inotify is
//! missing or its watch limit is reached, every checked enqueue counts by listing (correct,
//! slow, logged once).
//!
//! **How strict.** The kernel queues an inotify event inside the `linkat`/`renameat2` call, so
//! a check sees every job whose publication finished before it started. Enqueues through one
//! handle (any number of threads) also reserve their job until it is published. So with `P`
//! handles (processes, or handles in one process) enqueueing at the same moment, a queue holds
//! at most `max_jobs + P - 1` jobs and `max_bytes + (P - 1) * (128 + max payload)` bytes:
//! each of the others can have one enqueue between its check and its link.
//! `tests/it/capacity.rs` measures it with 8 producers.

use crate::disk::barrier::Barrier;
use crate::disk::layout::{parse_bucket, DELAYED_DIR, TMP_DIR, WAITING_DIR};
use crate::disk::name::{GroupName, JobName, Kind};
use crate::disk::sys::{Call, Errno};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use crate::queue::Queue;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

/// The limits sidecar's name in the queue root.
pub use crate::disk::layout::LIMITS_FILE;

/// A queue's capacity limits over ready + leased + delayed + waiting jobs. `None` is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Most jobs (ready, leased, delayed and waiting together).
    pub max_jobs: Option<u64>,
    /// Most bytes of job files (128-byte header plus payload each) in those states.
    pub max_bytes: Option<u64>,
}

fn limits_sum(body: &[u8]) -> u64 {
    use sha2::{Digest, Sha256};
    let d: [u8; 32] = Sha256::digest(body).into();
    u64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

impl Limits {
    /// True when neither limit is set.
    pub fn is_unlimited(&self) -> bool {
        self.max_jobs.is_none() && self.max_bytes.is_none()
    }

    #[cfg(test)]
    fn encode(&self) -> String {
        LimitsFile {
            limits: *self,
            groups: Vec::new(),
        }
        .encode()
    }

    #[cfg(test)]
    fn decode(text: &str) -> Option<Limits> {
        LimitsFile::decode(text).map(|f| f.limits)
    }
}

/// The most jobs of one group leased at once that a limit may allow (a claim of a full group
/// lists its slots, one file each).
pub const MAX_GROUP_LIMIT: u32 = 1000;

/// The whole limits file: the capacity limits and each group's limit, sorted by group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LimitsFile {
    pub(crate) limits: Limits,
    pub(crate) groups: Vec<(GroupName, u32)>,
}

impl LimitsFile {
    /// The group's limit, if it has one.
    pub(crate) fn group(&self, g: &GroupName) -> Option<u32> {
        let i = self.groups.binary_search_by(|(n, _)| n.cmp(g)).ok()?;
        Some(self.groups[i].1)
    }

    fn encode(&self) -> String {
        let f = |v: Option<u64>| v.map_or("none".to_string(), |v| v.to_string());
        let version = if self.groups.is_empty() { 1 } else { 2 };
        let mut body = format!(
            "steadq-limits\nversion={version}\nmax_jobs={}\nmax_bytes={}\n",
            f(self.limits.max_jobs),
            f(self.limits.max_bytes)
        );
        for (g, n) in &self.groups {
            body += &format!("max_leased.{g}={n}\n");
        }
        let sum = limits_sum(body.as_bytes());
        format!("{body}sum={sum:016x}\n")
    }

    fn decode(text: &str) -> Option<LimitsFile> {
        let at = text.find("sum=")?;
        let (body, sum) = text.split_at(at);
        let sum = sum.strip_prefix("sum=")?.strip_suffix('\n')?;
        if sum.len() != 16 || u64::from_str_radix(sum, 16).ok()? != limits_sum(body.as_bytes()) {
            return None;
        }
        let mut l = body.lines();
        let version = match (l.next()?, l.next()?) {
            ("steadq-limits", "version=1") => 1,
            ("steadq-limits", "version=2") => 2,
            _ => return None,
        };
        let mut val = |k: &str| -> Option<Option<u64>> {
            match l.next()?.strip_prefix(k)?.strip_prefix('=')? {
                "none" => Some(None),
                v => v.parse().ok().map(Some),
            }
        };
        let max_jobs = val("max_jobs")?;
        let max_bytes = val("max_bytes")?;
        let mut groups: Vec<(GroupName, u32)> = Vec::new();
        for line in l {
            let (g, n) = line.strip_prefix("max_leased.")?.split_once('=')?;
            let g = GroupName::new(g)?;
            let n: u32 = n
                .parse()
                .ok()
                .filter(|n| (1..=MAX_GROUP_LIMIT).contains(n))?;
            // Sorted, each group once: one file, one text.
            if version == 1 || groups.last().is_some_and(|(last, _)| *last >= g) {
                return None;
            }
            groups.push((g, n));
        }
        Some(LimitsFile {
            limits: Limits {
                max_jobs,
                max_bytes,
            },
            groups,
        })
    }
}

/// The end of the warning for a replaced damaged limits file: the group limits it held,
/// lost, named to be set again (`groups` as read from the damaged file; any, when none can
/// be read from it).
fn lost_groups_note(dir: &std::path::Path, groups: &[&str]) -> String {
    let dir = dir.display();
    match groups {
        [] => format!(
            "; any group limits it held are lost: set them again with `steadq limit {dir} \
             --group G --max-leased N`"
        ),
        gs => format!(
            "; the limits of group{} {} are lost: set them again with `steadq limit {dir} \
             --group G --max-leased N`",
            if gs.len() == 1 { "" } else { "s" },
            gs.join(", ")
        ),
    }
}

/// Per-handle state: the tally and the in-flight reservations.
#[derive(Debug, Default)]
pub(crate) struct CapState {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The limits as last read, kept current by an inotify watch on the root.
    known: Option<KnownLimits>,
    /// No watch on the root could be made: read the limits file at every check.
    no_root_watch: bool,
    tally: Option<Tally>,
    /// Inotify unavailable: count by listing at every check.
    no_inotify: bool,
    reserved_jobs: u64,
    reserved_bytes: u64,
}

/// The limits a handle last read, with the inotify watch on the root made before that read:
/// any later change of `steadq.limits` (a rename over it, a removal, a write) queues an event
/// inside the changing call, so a check that finds no event knows the limits it holds are
/// those in force when the check started.
#[derive(Debug)]
struct KnownLimits {
    ino: OwnedFd,
    file: LimitsFile,
}

/// Events on the root that can change the limits file.
const ROOT_WATCH: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::DONT_FOLLOW)
    .union(WatchFlags::ONLYDIR);

/// Whether events queued on `ino` (drained) may have changed the limits file: one about it,
/// an overflow or a lost watch. An unreadable watch counts as a change.
fn limits_touched(ino: &OwnedFd) -> bool {
    let mut buf = [core::mem::MaybeUninit::<u8>::uninit(); 1024];
    let mut r = inotify::Reader::new(ino.as_fd(), &mut buf);
    let mut touched = false;
    loop {
        match r.next() {
            Ok(ev) => {
                let about = ev
                    .file_name()
                    .is_some_and(|n| n.to_bytes() == LIMITS_FILE.as_bytes());
                touched |= about
                    || ev
                        .events()
                        .intersects(ReadFlags::QUEUE_OVERFLOW | ReadFlags::IGNORED);
            }
            Err(Errno::AGAIN) => return touched,
            Err(Errno::INTR) => continue,
            Err(_) => return true,
        }
    }
}

/// A watched directory.
#[derive(Debug)]
struct WDir {
    fd: OwnedFd,
    delayed_root: bool,
}

/// The live count of ready + leased + delayed + waiting jobs, kept by inotify.
#[derive(Debug)]
struct Tally {
    ino: OwnedFd,
    dirs: HashMap<i32, WDir>,
    /// job id -> (file size or 0 when not known, watch descriptor of its directory).
    jobs: HashMap<u128, (u64, i32)>,
    bytes: u64,
    sizes: bool,
    /// Watches on the directories leading to a level's slot not made yet (`ops/levels.rs`):
    /// a directory made there means a rebuild.
    parents: Vec<i32>,
}

/// A reservation for jobs being enqueued through this handle; released on drop.
pub(crate) struct Room<'q> {
    q: &'q Queue,
    jobs: u64,
    bytes: u64,
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        let mut g = self.q.cap.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.reserved_jobs -= self.jobs;
        g.reserved_bytes -= self.bytes;
    }
}

/// How much of its capacity a queue uses, from [`Queue::capacity_use`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapacityUse {
    /// Ready + leased + delayed + waiting jobs.
    pub jobs: u64,
    /// Bytes of their job files (0 when no byte limit is set: sizes are then not read).
    pub bytes: u64,
    /// The limits in force.
    pub limits: Limits,
}

/// Names made, moved in, moved out or removed in a directory (never followed): what changes
/// a count of its entries (the tally here; `admin/drain.rs`'s wait for an empty queue).
pub(crate) const WATCH: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::DONT_FOLLOW)
    .union(WatchFlags::ONLYDIR);

impl Queue {
    /// The capacity limits in force (`steadq.limits`; none when the file is missing).
    ///
    /// # Errors
    /// [`ErrorKind::BadLimits`] (not done) when the file is damaged (checksum or syntax);
    /// [`ErrorKind::Io`] when it cannot be read.
    pub fn limits(&self) -> crate::Result<Limits> {
        Ok(self.limits_file()?.limits)
    }

    /// The whole limits file (capacity and group limits); empty when it is missing.
    ///
    /// # Errors
    /// As [`Queue::limits`].
    pub(crate) fn limits_file(&self) -> crate::Result<LimitsFile> {
        let Some(text) = self.read_root_file(LIMITS_FILE)? else {
            return Ok(LimitsFile::default());
        };
        let file = LimitsFile::decode(&text);
        let p = self.path(LIMITS_FILE);
        Ok(file.ok_or_else(|| Cause::not_done(ErrorKind::BadLimits, Some(p)))?)
    }

    /// The group limits in force (`max_leased.<group>` lines of `steadq.limits`), sorted by
    /// group: at most that many jobs of the group are leased at once (DESIGN.md, Groups).
    ///
    /// # Errors
    /// As [`Queue::limits`].
    pub fn group_limits(&self) -> crate::Result<Vec<(GroupName, u32)>> {
        Ok(self.limits_file()?.groups)
    }

    /// Set group `group`'s limit to at most `max_leased` jobs leased at once (`None` removes
    /// it; `Some(0)` or more than [`MAX_GROUP_LIMIT`] is [`ErrorKind::InvalidArgument`], not
    /// done). The other limits are kept. Claims see the change at their next claim of a job
    /// of the group; jobs already leased over a lowered limit keep their leases.
    ///
    /// # Errors
    /// [`ErrorKind::BadLimits`] (not done) when the limits file is damaged; otherwise as
    /// [`Queue::set_limits`].
    pub fn set_group_limit(
        &self,
        group: &GroupName,
        max_leased: Option<u32>,
    ) -> Result<(), crate::Error> {
        if max_leased.is_some_and(|n| n == 0 || n > MAX_GROUP_LIMIT) {
            return Err(Cause::not_done(
                ErrorKind::InvalidArgument("max leased must be 1..=1000 (or none)"),
                None,
            )
            .into());
        }
        let mut file = match self.limits_file() {
            Ok(f) => f,
            // Replaced whole: what it held cannot be trusted, and is named to be set again.
            Err(e) if *e.kind() == ErrorKind::BadLimits => {
                let lost = self.damaged_limits_groups();
                let others: Vec<&str> = lost
                    .iter()
                    .map(|g| g.as_str())
                    .filter(|g| *g != group.as_str())
                    .collect();
                log::warn!(
                    "{}: damaged; replaced by a file with group {group}'s limit alone: the \
                     capacity limits it held are lost (none now: set them again with `steadq \
                     init {} --max-jobs N|none --max-bytes N|none`){}",
                    self.path(LIMITS_FILE).display(),
                    self.root.display(),
                    lost_groups_note(&self.root, &others)
                );
                LimitsFile::default()
            }
            Err(e) => return Err(e),
        };
        file.groups.retain(|(g, _)| g != group);
        if let Some(n) = max_leased {
            file.groups.push((*group, n));
            file.groups.sort_unstable();
        }
        let text = file.encode();
        self.replace_root_file(Barrier::Limits, LIMITS_FILE, text.as_bytes())?;
        // This handle's claims try the group again at once (others within FULL_RECHECK).
        self.forget_full(group);
        Ok(())
    }

    /// The groups a damaged limits file names on its `max_leased.<group>=` lines (best
    /// effort, for a warning: a line that does not parse is left out), sorted.
    fn damaged_limits_groups(&self) -> Vec<GroupName> {
        let text = self
            .read_root_file(LIMITS_FILE)
            .ok()
            .flatten()
            .unwrap_or_default();
        let mut groups: Vec<GroupName> = text
            .lines()
            .filter_map(|l| l.strip_prefix("max_leased.")?.split_once('='))
            .filter_map(|(g, _)| GroupName::new(g))
            .collect();
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    /// Settings file `name` of the root (a regular file, never followed), at most 4096
    /// bytes; `None` when it is missing. Text that is not UTF-8 is read as empty (it then
    /// fails to decode).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] (not done) when it cannot be opened or read.
    pub(crate) fn read_root_file(&self, name: &str) -> Result<Option<String>> {
        let p = || Some(self.path(name));
        let fd = match self.sys.open_regular_ro(self.dirs.root.as_fd(), name) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(Cause::io(Call::Open, e, Outcome::NotDone, p())),
        };
        let mut buf = Vec::new();
        self.sys
            .read_all(fd.as_fd(), 4096, &mut buf)
            .map_err(|e| Cause::io(Call::Read, e, Outcome::NotDone, p()))?;
        Ok(Some(String::from_utf8(buf).unwrap_or_default()))
    }

    /// Set (or with [`Limits::default`], remove the effect of) the capacity limits. Jobs
    /// already over a new, lower limit stay; enqueues are refused until there is room. The
    /// group limits ([`Queue::set_group_limit`]) are kept.
    ///
    /// The file is written to `tmp/`, fsynced, renamed over `steadq.limits` (the
    /// linearization point) and the root fsynced.
    ///
    /// # Errors
    /// [`ErrorKind::Io`]: not done before the rename (the temp file is removed), indeterminate
    /// if the rename fails with `EIO` or the root's fsync fails.
    pub fn set_limits(&self, limits: Limits) -> Result<(), crate::Error> {
        // The group lines are kept; a damaged file is replaced whole, its group lines lost
        // (named, to be set again).
        let groups = match self.limits_file() {
            Ok(f) => f.groups,
            Err(e) if *e.kind() == ErrorKind::BadLimits => {
                let lost = self.damaged_limits_groups();
                let lost: Vec<&str> = lost.iter().map(|g| g.as_str()).collect();
                log::warn!(
                    "{}: damaged; replaced by a file with these capacity limits alone{}",
                    self.path(LIMITS_FILE).display(),
                    lost_groups_note(&self.root, &lost)
                );
                Vec::new()
            }
            Err(_) => Vec::new(),
        };
        let text = LimitsFile { limits, groups }.encode();
        Ok(self.replace_root_file(Barrier::Limits, LIMITS_FILE, text.as_bytes())?)
    }

    /// Replace settings file `name` in the root with `bytes`: written to `tmp/`, fsynced,
    /// renamed over `name` (the linearization point), the root fsynced. Its owner and mode
    /// are those of `steadq.queue` (every user reads it).
    ///
    /// # Errors
    /// [`ErrorKind::Io`]: not done before the rename (the temp file is removed), indeterminate
    /// if the rename fails with `EIO` or the root's fsync fails.
    pub(crate) fn replace_root_file(&self, b: Barrier, name: &str, bytes: &[u8]) -> Result<()> {
        // Read by every enqueue of every user: shared like `steadq.queue`, whatever this
        // process's umask (made 600 at umask 077, it failed every other user's enqueue).
        let like = Some(crate::queue::IDENTITY_FILE);
        let tmp = self.durable_temp_file(b, bytes, like)?;
        let t = self.dirs.tmp.as_fd();
        if let Err(e) = self
            .sys
            .rename_replace(t, &tmp, self.dirs.root.as_fd(), name)
        {
            let outcome = if e == Errno::IO {
                Outcome::Indeterminate
            } else {
                let _ = self.sys.unlink(t, &tmp);
                Outcome::NotDone
            };
            return Err(Cause::io(Call::Rename, e, outcome, Some(self.path(name))));
        }
        self.barrier(b, self.dirs.root.as_fd()).map_err(|e| {
            Cause::io(
                Call::FsyncDir,
                e,
                Outcome::Indeterminate,
                Some(self.root.clone()),
            )
        })?;
        Ok(())
    }

    /// A new file in `tmp/` holding `bytes`, fsynced (a settings file or a key entry on the
    /// named route, about to be renamed into place); its name. On failure it is removed and
    /// the error is not done. `b` names its fsync.
    pub(crate) fn durable_temp_file(
        &self,
        b: Barrier,
        bytes: &[u8],
        like: Option<&str>,
    ) -> Result<String> {
        let tmp = self.fresh_temp_name();
        let nd = |c, e| {
            Cause::io(
                c,
                e,
                Outcome::NotDone,
                Some(self.path(&format!("{TMP_DIR}/{tmp}"))),
            )
        };
        let t = self.dirs.tmp.as_fd();
        let fd = self
            .sys
            .create_file(t, &tmp)
            .map_err(|e| nd(Call::Open, e))?;
        match like {
            Some(template) => self.share_file(fd.as_fd(), template, &format!("{TMP_DIR}/{tmp}")),
            None => self.share_job_file(fd.as_fd()),
        }
        let written = self
            .sys
            .write_all(fd.as_fd(), bytes)
            .map_err(|e| nd(Call::Write, e))
            .and_then(|()| {
                self.barrier_file(b, fd.as_fd())
                    .map_err(|e| nd(Call::Fsync, e))
            });
        if let Err(e) = written {
            let _ = self.sys.unlink(t, &tmp);
            return Err(e);
        }
        Ok(tmp)
    }

    /// How many jobs and bytes count against the limits now (through this handle's tally, so
    /// the first call lists the queue once; see the module docs).
    ///
    /// # Errors
    /// As [`Queue::limits`]; [`ErrorKind::Io`] (not done) if a directory cannot be listed.
    pub fn capacity_use(&self) -> crate::Result<CapacityUse> {
        let limits = self.limits()?;
        let mut g = self.cap.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (jobs, bytes) = self.tally_now(&mut g, limits.max_bytes.is_some())?;
        Ok(CapacityUse {
            jobs,
            bytes,
            limits,
        })
    }

    /// The limits in force, as [`Queue::limits`], without reading the file when the handle's
    /// watch on the root saw no change since it last did (one `read` of the inotify fd, which
    /// finds nothing, instead of an `openat`, a `read` and a `close`; or, on a queue without
    /// limits, a failed `openat`). Exact: see [`KnownLimits`].
    fn limits_now(&self) -> Result<Limits> {
        self.limits_file_now(|f| f.limits)
    }

    /// Group `g`'s limit in force, read as [`Queue::limits_now`] reads the limits (the file
    /// only after the root's watch saw a change).
    pub(crate) fn group_limit_now(&self, g: &GroupName) -> Result<Option<u32>> {
        self.limits_file_now(|f| f.group(g))
    }

    /// `f` of the limits file in force; see [`Queue::limits_now`].
    fn limits_file_now<T>(&self, f: impl FnOnce(&LimitsFile) -> T) -> Result<T> {
        let mut g = self.cap.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.no_root_watch {
            drop(g);
            return self
                .limits_file()
                .map(|l| f(&l))
                .map_err(crate::Error::into_internal);
        }
        let ino = match g.known.take() {
            Some(k) if !limits_touched(&k.ino) => {
                let out = f(&k.file);
                g.known = Some(k);
                return Ok(out);
            }
            Some(k) => k.ino,
            None => match inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
                .and_then(|ino| inotify::add_watch(&ino, &self.root, ROOT_WATCH).map(|_| ino))
            {
                Ok(ino) => ino,
                Err(_) => {
                    g.no_root_watch = true;
                    drop(g);
                    return self
                        .limits_file()
                        .map(|l| f(&l))
                        .map_err(crate::Error::into_internal);
                }
            },
        };
        // Watched before this read: a change from now on is seen at the next check.
        let file = self.limits_file().map_err(crate::Error::into_internal)?;
        let out = f(&file);
        g.known = Some(KnownLimits { ino, file });
        Ok(out)
    }

    /// Check room for `jobs` more jobs of `bytes` payload bytes in all and reserve it until the
    /// returned guard drops (after the publication). `None`: the queue has no limits.
    pub(crate) fn admit(&self, jobs: u64, payload_bytes: u64) -> Result<Option<Room<'_>>> {
        let limits = self.limits_now()?;
        if limits.is_unlimited() {
            return Ok(None);
        }
        let bytes = payload_bytes + jobs * crate::disk::format::HEADER_LEN as u64;
        let mut g = self.cap.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (have_jobs, have_bytes) = self.tally_now(&mut g, limits.max_bytes.is_some())?;
        let used_jobs = have_jobs + g.reserved_jobs;
        let used_bytes = have_bytes + g.reserved_bytes;
        let over_jobs = limits.max_jobs.is_some_and(|m| used_jobs + jobs > m);
        let over_bytes = limits.max_bytes.is_some_and(|m| used_bytes + bytes > m);
        if over_jobs || over_bytes {
            return Err(Cause::not_done(
                ErrorKind::QueueFull {
                    jobs: used_jobs,
                    bytes: used_bytes,
                    max_jobs: limits.max_jobs,
                    max_bytes: limits.max_bytes,
                    adding_jobs: jobs,
                    adding_bytes: bytes,
                },
                Some(self.root.clone()),
            ));
        }
        g.reserved_jobs += jobs;
        g.reserved_bytes += bytes;
        Ok(Some(Room {
            q: self,
            jobs,
            bytes,
        }))
    }

    /// (jobs, bytes) now: the tally brought up to date, built (or rebuilt) when needed.
    fn tally_now(&self, g: &mut Inner, sizes: bool) -> Result<(u64, u64)> {
        if g.no_inotify {
            return self.count_by_listing(sizes);
        }
        if g.tally.as_ref().is_some_and(|t| sizes && !t.sizes) {
            g.tally = None;
        }
        if g.tally.is_none() {
            match inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK) {
                Ok(ino) => {
                    let mut t = Tally {
                        ino,
                        dirs: HashMap::new(),
                        jobs: HashMap::new(),
                        bytes: 0,
                        sizes,
                        parents: Vec::new(),
                    };
                    match self.tally_build(&mut t) {
                        Ok(true) => g.tally = Some(t),
                        Ok(false) => {
                            log::warn!(
                                "{}: inotify watches unavailable; capacity checks list the queue",
                                self.root.display()
                            );
                            g.no_inotify = true;
                            return self.count_by_listing(sizes);
                        }
                        Err(e) => return Err(e),
                    }
                }
                Err(_) => {
                    g.no_inotify = true;
                    return self.count_by_listing(sizes);
                }
            }
        }
        let t = g.tally.as_mut().expect("built above");
        if !self.tally_drain(t)? {
            g.tally = None;
            return self.tally_now(g, sizes);
        }
        Ok((t.jobs.len() as u64, t.bytes))
    }

    /// Watch and list every ready shard, `delayed/` and each bucket. `Ok(false)`: a watch
    /// could not be added.
    fn tally_build(&self, t: &mut Tally) -> Result<bool> {
        for s in 0..self.ident.slots() {
            let rel = self.ident.slot_rel(s);
            // A level's slot not made yet: its parents are watched instead.
            let Ok(w) = self.watch_slot(t.ino.as_fd(), s, WATCH) else {
                return Ok(false);
            };
            t.parents.extend(w.parents);
            if w.slot.is_some() && !self.tally_watch(t, &rel, false)? {
                return Ok(false);
            }
        }
        if !self.tally_watch(t, DELAYED_DIR, true)? {
            return Ok(false);
        }
        let mut buckets = Vec::new();
        self.sys
            .read_dir(self.dirs.delayed.as_fd(), |n, _, _| {
                if let Some(n) = n.filter(|n| parse_bucket(n).is_some()) {
                    buckets.push(n.to_string());
                }
            })
            .map_err(|e| {
                Cause::io(
                    Call::ReadDir,
                    e,
                    Outcome::NotDone,
                    Some(self.path(DELAYED_DIR)),
                )
            })?;
        for b in buckets {
            if !self.tally_watch(t, &format!("{DELAYED_DIR}/{b}"), false)? {
                return Ok(false);
            }
        }
        // Waiting jobs (`waiting/`, ops/deps.rs) count too. It is made on first use: until
        // then the root is watched, and a directory made there means a rebuild.
        let waiting = || {
            self.sys
                .stat_nofollow(self.dirs.root.as_fd(), WAITING_DIR)
                .is_ok_and(|m| m.file_type == rustix::fs::FileType::Directory)
        };
        if waiting() {
            if !self.tally_watch(t, WAITING_DIR, false)? {
                return Ok(false);
            }
        } else {
            match inotify::add_watch(&t.ino, &self.root, WATCH) {
                Ok(wd) => t.parents.push(wd),
                Err(_) => return Ok(false),
            }
            // Made between the look and the watch: no event will say so.
            if waiting() && !self.tally_watch(t, WAITING_DIR, false)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Watch `rel` (before listing it, so nothing is missed), then count its jobs.
    fn tally_watch(&self, t: &mut Tally, rel: &str, delayed_root: bool) -> Result<bool> {
        let wd = match inotify::add_watch(&t.ino, self.root.join(rel), WATCH) {
            Ok(wd) => wd,
            Err(Errno::NOENT) => return Ok(true), // a bucket removed meanwhile
            Err(_) => return Ok(false),
        };
        let fd = match self.sys.open_dir_beneath(self.dirs.root.as_fd(), rel) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(true),
            Err(e) => {
                return Err(Cause::io(
                    Call::Open,
                    e,
                    Outcome::NotDone,
                    Some(self.path(rel)),
                ))
            }
        };
        if !delayed_root {
            let mut names = Vec::new();
            self.sys
                .read_dir(fd.as_fd(), |n, _, _| {
                    if let Some(n) = n {
                        names.push(n.to_string());
                    }
                })
                .map_err(|e| Cause::io(Call::ReadDir, e, Outcome::NotDone, Some(self.path(rel))))?;
            t.dirs.insert(wd, WDir { fd, delayed_root });
            for n in names {
                self.tally_plus(t, wd, &n);
            }
        } else {
            t.dirs.insert(wd, WDir { fd, delayed_root });
        }
        Ok(true)
    }

    fn tally_plus(&self, t: &mut Tally, wd: i32, name: &str) {
        let Some(id) = counted_id(name) else { return };
        let known = t.jobs.get(&id).map_or(0, |&(s, _)| s);
        let size = if known > 0 || !t.sizes {
            known
        } else {
            t.dirs
                .get(&wd)
                .and_then(|d| self.sys.stat_nofollow(d.fd.as_fd(), name).ok())
                .map_or(0, |m| m.counted_size())
        };
        if let Some((old, _)) = t.jobs.insert(id, (size, wd)) {
            t.bytes -= old;
        }
        t.bytes += size;
    }

    fn tally_minus(t: &mut Tally, wd: i32, name: &str) {
        let Some(id) = counted_id(name) else { return };
        if let Some(&(size, at)) = t.jobs.get(&id) {
            if at == wd {
                t.jobs.remove(&id);
                t.bytes -= size;
            }
        }
    }

    /// Apply the queued events. `Ok(false)`: the event queue overflowed (rebuild).
    fn tally_drain(&self, t: &mut Tally) -> Result<bool> {
        loop {
            let mut evs: Vec<(i32, ReadFlags, String)> = Vec::new();
            {
                let mut buf = [core::mem::MaybeUninit::<u8>::uninit(); 8192];
                let mut r = inotify::Reader::new(t.ino.as_fd(), &mut buf);
                while let Ok(ev) = r.next() {
                    let name = ev
                        .file_name()
                        .and_then(|n| n.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    evs.push((ev.wd(), ev.events(), name));
                    if evs.len() >= 4096 {
                        break;
                    }
                }
            }
            if evs.is_empty() {
                return Ok(true);
            }
            for (wd, fl, name) in evs {
                if fl.contains(ReadFlags::QUEUE_OVERFLOW) {
                    return Ok(false);
                }
                if fl.contains(ReadFlags::IGNORED) {
                    t.dirs.remove(&wd);
                    continue;
                }
                if t.parents.contains(&wd)
                    && fl.contains(ReadFlags::ISDIR)
                    && fl.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO)
                {
                    return Ok(false); // a level's directory was made: rebuild
                }
                let Some(dir) = t.dirs.get(&wd) else { continue };
                if dir.delayed_root {
                    let new_dir = fl.contains(ReadFlags::ISDIR)
                        && fl.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO)
                        && parse_bucket(&name).is_some();
                    if new_dir && !self.tally_watch(t, &format!("{DELAYED_DIR}/{name}"), false)? {
                        return Ok(false);
                    }
                } else if fl.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
                    self.tally_plus(t, wd, &name);
                } else if fl.intersects(ReadFlags::DELETE | ReadFlags::MOVED_FROM) {
                    Queue::tally_minus(t, wd, &name);
                }
            }
        }
    }

    /// Count by listing every ready shard and delayed bucket (no inotify).
    fn count_by_listing(&self, sizes: bool) -> Result<(u64, u64)> {
        let (mut jobs, mut bytes) = (0u64, 0u64);
        self.walk(|s| {
            if let Ok(n) = s.parsed {
                if matches!(n.kind, Kind::Ready | Kind::Leased(_) | Kind::Delayed { .. }) {
                    jobs += 1;
                    if sizes {
                        bytes += self
                            .sys
                            .stat_nofollow(s.dir, s.raw)
                            .map_or(0, |m| m.counted_size());
                    }
                }
            }
        })?;
        let waiting = self.waiting_jobs()?;
        jobs += waiting.len() as u64;
        if sizes {
            bytes += self.waiting_bytes(&waiting);
        }
        Ok((jobs, bytes))
    }

    /// An inotify fd that becomes readable when room may have appeared: a job leaving a ready
    /// shard (ack, fail, dead-letter) or removed from one, or the limits file replaced (or a
    /// level's slot made: watch again). Made
    /// before the check it guards, so no wake-up is lost. `None`: inotify unavailable.
    pub(crate) fn room_watch(&self) -> Option<OwnedFd> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
        let out = WatchFlags::MOVED_FROM | WatchFlags::DELETE | WatchFlags::ONLYDIR;
        for s in 0..self.ident.slots() {
            // A level's slot not made yet holds nothing to leave: its parents are watched
            // (a slot made wakes the waiter, which watches again).
            self.watch_slot(fd.as_fd(), s, out).ok()?;
        }
        // A waiting job dead-lettered with its dependency leaves room too (missing until
        // first use: the root's watch below sees it made).
        match inotify::add_watch(
            &fd,
            self.root.join(WAITING_DIR),
            out | WatchFlags::DONT_FOLLOW,
        ) {
            Ok(_) | Err(Errno::NOENT) => {}
            Err(_) => return None,
        }
        inotify::add_watch(
            &fd,
            &self.root,
            WatchFlags::MOVED_TO | WatchFlags::CREATE | WatchFlags::ONLYDIR,
        )
        .ok()?;
        Some(fd)
    }

    /// [`Queue::enqueue_with`] that waits, up to `timeout`, for room when the queue is full:
    /// it sleeps on inotify (a job leaving `ready/`, or `steadq.limits` replaced) and tries
    /// again; no polling. Keys ([`crate::EnqueueOptions::key`]) work as in
    /// [`Queue::enqueue_unique`], whose result it returns.
    ///
    /// # Errors
    /// [`ErrorKind::QueueFull`] (not done) when there was no room before `timeout`; otherwise
    /// as [`Queue::enqueue_with`].
    pub(crate) fn enqueue_wait(
        &self,
        payload: &[u8],
        o: &crate::EnqueueOptions,
        timeout: Duration,
    ) -> Result<crate::Enqueued, crate::EnqueueError> {
        let mut src = crate::ops::enqueue_stream::Source::Bytes(payload);
        self.enqueue_wait_source(&mut src, o, timeout)
            .map_err(crate::EnqueueError::from_internal)
    }

    /// [`Queue::enqueue_wait`] of bytes or of a streamed job (written once, before the wait),
    /// with the crate's error.
    pub(crate) fn enqueue_wait_source(
        &self,
        src: &mut crate::ops::enqueue_stream::Source<'_>,
        o: &crate::EnqueueOptions,
        timeout: Duration,
    ) -> Result<crate::Enqueued> {
        let start = std::time::Instant::now();
        loop {
            // Watched again each time: a level's slot made meanwhile is watched too.
            let watch = self.room_watch();
            match self.enqueue_unique_source(src, o) {
                Err(e) if matches!(e.kind(), ErrorKind::QueueFull { .. }) => {
                    let left = timeout.saturating_sub(start.elapsed());
                    if left.is_zero() {
                        return Err(e);
                    }
                    match &watch {
                        Some(fd) => wait_readable(fd, left),
                        // No inotify: sleep a little (the only polling, and only here).
                        None => std::thread::sleep(left.min(Duration::from_millis(200))),
                    }
                }
                r => return r,
            }
        }
    }
}

/// Sleep until `fd` is readable or `max` passes, then drain it.
pub(crate) fn wait_readable(fd: &OwnedFd, max: Duration) {
    use rustix::event::{poll, PollFd, PollFlags};
    let ts = rustix::time::Timespec {
        tv_sec: max.as_secs() as _,
        tv_nsec: max.subsec_nanos() as _,
    };
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let _ = poll(&mut fds, Some(&ts));
    drain(fd);
}

/// Read and drop every queued event of inotify fd `fd` (non-blocking).
pub(crate) fn drain(fd: &OwnedFd) {
    let mut buf = [core::mem::MaybeUninit::<u8>::uninit(); 4096];
    let mut r = inotify::Reader::new(fd.as_fd(), &mut buf);
    while r.next().is_ok() {}
}

/// The job id of a name that counts (a ready, leased or delayed job), else `None`.
fn counted_id(name: &str) -> Option<u128> {
    match JobName::parse_untagged(name) {
        Ok((n, _)) if matches!(n.kind, Kind::Ready | Kind::Leased(_) | Kind::Delayed { .. }) => {
            Some(n.id.0)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_round_trip_and_damage_is_caught() {
        for l in [
            Limits::default(),
            Limits {
                max_jobs: Some(10),
                max_bytes: None,
            },
            Limits {
                max_jobs: None,
                max_bytes: Some(1 << 30),
            },
        ] {
            assert_eq!(Limits::decode(&l.encode()), Some(l));
        }
        let t = Limits {
            max_jobs: Some(10),
            max_bytes: None,
        }
        .encode();
        assert_eq!(Limits::decode(&t.replace("=10", "=11")), None);
        assert_eq!(Limits::decode("steadq-limits\n"), None);
    }

    #[test]
    fn group_lines_round_trip_and_damage_is_caught() {
        let g = |s| GroupName::new(s).unwrap();
        let f = LimitsFile {
            limits: Limits {
                max_jobs: Some(10),
                max_bytes: None,
            },
            groups: vec![(g("ffmpeg"), 2), (g("thumbs"), 1000)],
        };
        let t = f.encode();
        assert!(
            t.contains("version=2\n") && t.contains("max_leased.ffmpeg=2\n"),
            "{t}"
        );
        assert_eq!(LimitsFile::decode(&t), Some(f.clone()));
        assert_eq!(f.group(&g("thumbs")), Some(1000));
        assert_eq!(f.group(&g("other")), None);
        // Without groups: the version-1 text, byte for byte.
        let plain = LimitsFile {
            limits: f.limits,
            groups: Vec::new(),
        };
        assert_eq!(plain.encode(), f.limits.encode());
        assert!(plain.encode().contains("version=1\n"));
        // A changed value, a bad name, 0 or over 1000, unsorted or repeated lines: damaged,
        // even with a sum that matches.
        assert_eq!(LimitsFile::decode(&t.replace("=2\n", "=3\n")), None);
        let resum = |body: &str| format!("{body}sum={:016x}\n", limits_sum(body.as_bytes()));
        let body = &t[..t.find("sum=").unwrap()];
        for bad in [
            body.replace("ffmpeg", "FFMPEG"),
            body.replace("=2\n", "=0\n"),
            body.replace("=1000\n", "=1001\n"),
            body.replace("thumbs", "aaa"),
            body.replace("thumbs", "ffmpeg"),
            body.replace("version=2", "version=1"),
            body.replace("max_leased.ffmpeg", "max_leased ffmpeg"),
        ] {
            assert_eq!(LimitsFile::decode(&resum(&bad)), None, "{bad}");
        }
        assert_eq!(LimitsFile::decode(&resum(body)), Some(f));
    }
}
