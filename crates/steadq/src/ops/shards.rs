//! What a queue handle knows about its ready directories ("slots": each shard of each priority
//! level, `ready/<ss>` and, in version 3, `prio/<l>/<ss>`), so that a claim on a nearly empty
//! queue does not list every one (on an empty 8-shard queue that was 8 listings per claim; a
//! version-3 queue has 64 slots, and a claim over mostly empty levels lists none of them).
//! Below, "shard" means a slot.
//!
//! A shard is *known empty* after a listing of it found no ready job, until one of these:
//! - an inotify event (`inotify(7)`, one instance per queue handle, watching every
//!   `ready/<ss>` for `IN_CREATE | IN_MOVED_TO`) names a ready name in it (an enqueue, a
//!   release, a recovered lease, a due delayed job), or any name it cannot account for;
//! - the earliest live lease the listing (or a later event) showed in it reaches its deadline
//!   on `CLOCK_BOOTTIME`, when it must be listed again to be recovered;
//! - the event queue overflowed (`IN_Q_OVERFLOW`): every shard is listed again;
//! - for a level's slot that did not exist when it was listed (it is made by the first job
//!   placed at its level, `ops/levels.rs`): an event in the directory above it that names
//!   the next directory down. The slot is then watched again (itself once it exists) before
//!   it is listed again.
//!
//! Events are drained before a claim picks shards: non-blocking `read(2)`s of 4 KiB, another
//! only while the last one may have stopped short of the queue's end (one read in the
//! common case; a backlog of lease events left a batch's arrivals unread). A listing
//! records the shard's generation when it starts and marks the shard empty only if no event
//! for it was drained meanwhile; an event that arrives after that stays queued in the kernel
//! until the next drain.
//!
//! Each slot also keeps the smallest id of a ready name that appeared in it since its last
//! listing began ([`Shards::arrived_before`]). A claim holding candidates of that listing
//! lists the slot again when that id is older than a candidate it holds: a job that comes
//! back with its old id (a release, a recovered lease, a due delayed job, a requeued
//! dead-letter) is not passed over by newer candidates. A new job's id is newer than every
//! candidate already held, so enqueues cost no relisting.
//!
//! A ready name of its own (tag, level and shard checked) that appears in a shard known
//! empty does not end that state: the shard then holds exactly the ready jobs named by such
//! events, so they are kept as *pending* candidates (up to [`PENDING_MAX`]) and the next
//! claim takes them without listing (one `fstatat` each, so that only a regular file is
//! ever renamed, except for a job this handle linked itself: [`Shards::linking`]). On a
//! nearly empty queue an enqueue and its claim thus cost no listing at
//! all. The events of names this handle made itself (its enqueues' ready names, its claims'
//! lease names) are not even parsed: it keeps up to [`MADE_MAX`] of them with the fields
//! they were formatted from ([`Shards::made`]). Any other name, more than [`PENDING_MAX`]
//! arrivals, or an overflow ends the empty state as before, and the listing that follows sees
//! the pending names too.
//!
//! Where inotify is unavailable (no `CONFIG_INOTIFY_USER`, the
//! per-user instance or watch limit reached) nothing is ever known empty: every claim lists
//! as before. The knowledge is only ever a reason to skip a listing, never to skip a job.

use crate::disk::name::{JobName, Kind, NameBuf};
use crate::disk::scan::{lease_expired, leased_len};
use crate::disk::sys::Errno;
use crate::ops::levels::SlotWatch;
use crate::queue::Queue;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;

/// Per-handle shard knowledge (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Shards {
    /// Set up on first use; `None` inside: inotify unavailable (never skip).
    watch: std::sync::OnceLock<Option<Watch>>,
    inner: Mutex<Known>,
    /// Pending names held over all shards (a claim skips the lock when there are none).
    pending: std::sync::atomic::AtomicUsize,
}

#[derive(Debug, Default)]
struct Known {
    /// Per shard: bumped by every event that may mean a ready job.
    generation: Vec<u64>,
    /// Per shard: `Some(t)`: known empty until `CLOCK_BOOTTIME` reaches `t` ns.
    empty_until: Vec<Option<u64>>,
    /// Per shard, after a listing that found ready jobs: the generation it started at and
    /// the earliest deadline of a live lease it saw or this handle made since.
    listed_at: Vec<Option<(u64, u64)>>,
    /// Per shard: the smallest job id (0 for a name that does not parse) of a ready name
    /// seen since its last listing began.
    arrived: Vec<Option<u128>>,
    /// Per shard known empty: the ready jobs that arrived in it since, by name, up to
    /// [`PENDING_MAX`] (the claim takes them as candidates without listing the shard), each
    /// with whether this handle linked it itself (its event matched an id in `own`).
    pending: Vec<Vec<(JobName, bool)>>,
    /// Per shard known empty: ids of jobs this handle is linking into it whose event has
    /// not been drained yet, up to [`PENDING_MAX`] (see [`Shards::linking`]).
    own: Vec<Vec<u128>>,
    /// Per shard: its watch could not be set up again because this user may not search a
    /// directory on its way (`EACCES`, `EPERM`: a level another user is making, a shard at
    /// mode 700), so it is never known empty until a later try succeeds. Only that shard:
    /// the whole handle went blind for it, and every claim then listed every slot (a worker
    /// beside a producer at umask 077, 256 shards, 8 levels: 1.5 cores).
    unwatched: Vec<bool>,
    /// `CLOCK_BOOTTIME` ns of the last try to watch the unwatched shards again (at most one
    /// a second).
    unwatched_tried: u64,
    /// Names this handle made in watched shards (ready names it linked, lease names it
    /// renamed to) whose events were not drained yet, up to [`MADE_MAX`]: an event naming
    /// one exactly takes its fields from here instead of parsing the name (see
    /// [`Shards::made`]).
    made: Vec<Made>,
}

/// A name this handle made in shard `slot`, and the fields it was formatted from.
#[derive(Debug)]
struct Made {
    slot: u16,
    name: NameBuf,
    job: JobName,
}

/// Names [`Known::made`] keeps; the oldest goes when a new one comes (its event then parses
/// the name, as any other).
const MADE_MAX: usize = 16;

/// Ready names an empty shard may collect from events before it is listed again instead.
const PENDING_MAX: usize = 16;

/// Bytes per `read(2)` of the inotify fd.
const EVENT_BUF: usize = 4096;

/// Reads of the inotify fd per drain at most (256 KiB of events, about 2,300 arrivals).
const MAX_READS: u32 = 64;

/// Bytes an event naming `name_len` bytes takes in a read: `struct inotify_event` (16
/// bytes) and the name with its NUL padded to a multiple of 16 (`inotify(7)`; fs/notify/
/// inotify/inotify_user.c, `round_event_name_len`). No name: 16.
const fn event_len(name_len: usize) -> usize {
    if name_len == 0 {
        16
    } else {
        16 + (name_len + 1).div_ceil(16) * 16
    }
}

#[derive(Debug)]
struct Watch {
    fd: OwnedFd,
    /// The watches of each slot, by slot: its own, or those on the way to it.
    slots: Mutex<Vec<SlotWatch>>,
    /// A slot could not be watched again: nothing is known empty any more.
    blind: std::sync::atomic::AtomicBool,
    /// Per slot: not watched when the watches were set up, this user may not search a
    /// directory on its way (see `Known::unwatched`).
    refused: Vec<bool>,
}

/// The watch flags of a ready slot.
const SLOT_WATCH: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DONT_FOLLOW)
    .union(WatchFlags::ONLYDIR);

impl Shards {
    /// Drain pending events (one non-blocking `read(2)` when there are none), setting the
    /// watches up on first use.
    pub(crate) fn drain(&self, q: &Queue) {
        let Some(w) = self.watch.get_or_init(|| watch(q)) else {
            return;
        };
        let mut k = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut ws = w.slots.lock().unwrap_or_else(|p| p.into_inner());
        if k.generation.is_empty() {
            k.size_for(ws.len(), &w.refused);
        }
        k.unwatched.resize(ws.len(), false);
        let mut buf = [core::mem::MaybeUninit::<u8>::uninit(); EVENT_BUF];
        let mut reader = inotify::Reader::new(w.fd.as_fd(), &mut buf);
        let mut learnt = false;
        // Bytes of the current read's events, and reads so far (see below).
        let (mut filled, mut reads) = (0usize, 1u32);
        while let Ok(ev) = reader.next() {
            learnt = true;
            let name = ev.file_name().and_then(|n| n.to_str().ok()).unwrap_or("");
            filled += event_len(name.len());
            if ev.events().contains(ReadFlags::QUEUE_OVERFLOW) {
                k.forget_all();
                for s in 0..ws.len() {
                    if ws[s].slot.is_none() {
                        k.unwatched[s] = w.rewatch(q, &mut ws[s], s);
                    }
                }
            } else if let Some(s) = ws.iter().position(|x| x.slot == Some(ev.wd())) {
                k.learn(q, s, name);
            } else {
                for s in 0..ws.len() {
                    if ws[s].made_by(q, s as u16, ev.wd(), name) {
                        // Watched again before it is listed again: no job is missed.
                        k.unwatched[s] = w.rewatch(q, &mut ws[s], s);
                        k.forget(s);
                    }
                }
            }
            if reader.is_buffer_empty() {
                // A read that may have stopped short of the queue's end (no room left for
                // one more event of the longest name) is followed by another: one read per
                // drain left a backlog behind (a batch's 64 lease events then its 64
                // arrivals: the next claim_batch read only lease events and said "no job"
                // with 64 ready). At most MAX_READS reads per drain.
                if filled + event_len(255) <= EVENT_BUF || reads >= MAX_READS {
                    // Whatever came after this read stays queued in the kernel for the
                    // next drain: a listing started since then saw it or leaves the
                    // shard unknown.
                    break;
                }
                filled = 0;
                reads += 1;
            }
        }
        // Shards whose watch was refused: tried again once a second; one watched again is
        // listed again (events may have been missed meanwhile).
        // The clock is read only when some shard is unwatched (a read per claim otherwise).
        let retry_at = |now: u64| now.saturating_sub(k.unwatched_tried) >= 1_000_000_000;
        if k.unwatched.contains(&true) && retry_at(q.clock.boot_ns()) {
            k.unwatched_tried = q.clock.boot_ns();
            for s in 0..ws.len() {
                if k.unwatched[s] && !w.rewatch(q, &mut ws[s], s) {
                    k.unwatched[s] = false;
                    k.forget(s);
                    learnt = true;
                }
            }
        }
        if learnt {
            self.recount(&k);
        }
    }

    /// Into `out` (cleared first), per shard, `Some(until)` where [`Shards::skip`] would
    /// skip it at `boot_ns` (`CLOCK_BOOTTIME`) and it holds no pending names
    /// ([`Shards::take_pending`] would take none), else `None`: one lock for a whole claim's
    /// walk. Empty before the first drain.
    pub(crate) fn known_empty(&self, boot_ns: u64, out: &mut Vec<Option<u64>>) {
        out.clear();
        let blind = self.watch.get().and_then(|w| w.as_ref());
        if blind.is_some_and(|w| w.blind.load(std::sync::atomic::Ordering::Relaxed)) {
            return;
        }
        let k = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let pending = |s: usize| k.pending.get(s).map_or(0, Vec::len);
        let live = |(s, e): (usize, &Option<u64>)| e.filter(|t| boot_ns < *t && pending(s) == 0);
        out.extend(k.empty_until.iter().enumerate().map(live));
    }

    /// `Ok(until)` when shard `s` is known empty at `boot_ns` (`CLOCK_BOOTTIME`): skip it,
    /// and list it again at `until` (a waiting claim must wake then). Otherwise its
    /// generation, to hand to [`Shards::listed`] after listing it.
    pub(crate) fn skip(&self, s: u16, boot_ns: u64) -> Result<u64, u64> {
        let blind = self.watch.get().and_then(|w| w.as_ref());
        let blind = blind.is_some_and(|w| w.blind.load(std::sync::atomic::Ordering::Relaxed));
        let mut k = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if blind {
            k.empty_until.iter_mut().for_each(|e| *e = None);
        }
        match (k.empty_until.get(s as usize), k.generation.get(s as usize)) {
            (Some(Some(t)), _) if boot_ns < *t => Ok(*t),
            (_, g) => {
                let g = g.copied().unwrap_or(0);
                // A listing begins: it sees what arrived so far.
                if let Some(a) = k.arrived.get_mut(s as usize) {
                    *a = None;
                }
                if let Some(p) = k.pending.get_mut(s as usize).filter(|p| !p.is_empty()) {
                    p.clear();
                    self.recount(&k);
                }
                Err(g)
            }
        }
    }

    /// The ready jobs that arrived in shard `s` while it was known empty (see
    /// [`Known::learn`]), taken: with the shard's empty state they are all its ready jobs
    /// this handle has not claimed, so a claim takes them as candidates instead of listing.
    /// A name taken by another handle meanwhile costs the claim a failed rename (lease lost),
    /// as a listed one does.
    ///
    /// None once the shard's recheck time (`CLOCK_BOOTTIME` ns, the earliest lease deadline
    /// in it) has come: the shard must be listed then, to recover that lease, and the
    /// listing sees the pending names too. (Handing them out regardless kept a steady trickle
    /// of new jobs ahead of an abandoned lease for as long as the trickle lasted.)
    ///
    /// Each name comes with whether this handle linked it itself ([`Shards::linking`]).
    pub(crate) fn take_pending(&self, s: u16, boot_ns: u64) -> Vec<(JobName, bool)> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.pending.load(Relaxed) == 0 {
            return Vec::new();
        }
        let mut k = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(k.empty_until.get(s as usize), Some(Some(t)) if boot_ns < *t) {
            return Vec::new();
        }
        let taken = k
            .pending
            .get_mut(s as usize)
            .map(core::mem::take)
            .unwrap_or_default();
        // Under the lock, like every store of the count.
        let left = self.pending.load(Relaxed).saturating_sub(taken.len());
        self.pending.store(left, Relaxed);
        taken
    }

    /// A pending name of shard `s` turned out not to be a regular file (or could not be
    /// checked): forget the shard's empty state, so the next claim lists it (and reports
    /// what it finds).
    pub(crate) fn unknown(&self, s: u16) {
        let mut k = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let s = s as usize;
        if s < k.generation.len() {
            k.generation[s] += 1;
            k.empty_until[s] = None;
            k.pending[s].clear();
            k.own[s].clear();
            self.recount(&k);
        }
    }

    /// This handle is about to link ready job `id` into slot `s` (an `O_TMPFILE` it wrote
    /// itself, so a regular file). If the slot is known empty, the id is remembered until
    /// its event is drained, and the claim that takes it as a pending name skips the
    /// `fstatat` that makes sure an arrival is a regular file (one syscall per job when one
    /// handle both enqueues and claims: a library user's producer and worker threads). The
    /// check it skips was never a guarantee: a name replaced between the check and the
    /// claim's rename was always possible, and the claim's `open(O_NOFOLLOW | O_NONBLOCK)`
    /// of what it renamed dead-letters anything but a regular file (`take_leased`). Only
    /// the first event naming the id matches: a name made again later is checked. Nothing
    /// is remembered before the first claim of this handle set up its watches.
    ///
    /// `name` is `job` formatted: it is also remembered as [`Shards::made`] does.
    pub(crate) fn linking(&self, s: u16, name: &NameBuf, job: &JobName) {
        if self.watch.get().is_none_or(|w| w.is_none()) {
            return;
        }
        let mut k = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        k.remember_made(s, name, job);
        let s = s as usize;
        if matches!(k.empty_until.get(s), Some(Some(_))) {
            if let Some(own) = k.own.get_mut(s) {
                if own.len() == PENDING_MAX {
                    own.remove(0);
                }
                own.push(job.id.0);
            }
        }
    }

    /// This handle is about to make name `name` (`job` formatted) in watched slot `s` (a
    /// claim's lease name): the event it causes takes `job` instead of parsing `name`
    /// again. A name's parse is a function of the name alone, so what is remembered is
    /// never stale; a rename that then fails leaves an entry no event matches, pushed out
    /// by later ones. (Parsing this handle's own events, a ready name at enqueue and a
    /// lease name at claim, was about 2% of a tmpfs lifecycle's CPU.)
    pub(crate) fn made(&self, s: u16, name: &NameBuf, job: &JobName) {
        if self.watch.get().is_none_or(|w| w.is_none()) {
            return;
        }
        let mut k = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        k.remember_made(s, name, job);
    }

    /// Store the count of pending names over all shards (with `k`'s lock held).
    fn recount(&self, k: &Known) {
        let n = k.pending.iter().map(Vec::len).sum();
        self.pending.store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a ready name made in an earlier millisecond than job `id` appeared in shard
    /// `s` since its last listing began (or, without inotify, never: a held listing is then
    /// used up first). Ids of one millisecond count as equally old, so a burst of enqueues
    /// in the millisecond of a held candidate causes no relisting.
    pub(crate) fn arrived_before(&self, s: u16, id: u128) -> bool {
        let k = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        matches!(k.arrived.get(s as usize), Some(Some(a)) if *a >> 80 < id >> 80)
    }

    /// A listing of shard `s` that started at generation `generation` found no ready job
    /// (`empty`) and live leases expiring from `next_expiry` on (boot ns).
    pub(crate) fn listed(&self, s: u16, generation: u64, empty: bool, next_expiry: Option<u64>) {
        let mut k = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if k.generation.get(s as usize) != Some(&generation) {
            return;
        }
        let until = next_expiry.unwrap_or(u64::MAX);
        // A shard not watched is never known empty: its jobs' arrivals would go unseen.
        let empty = empty && !k.unwatched.get(s as usize).copied().unwrap_or(false);
        k.empty_until[s as usize] = empty.then_some(until);
        k.listed_at[s as usize] = (!empty).then_some((generation, until));
    }

    /// This handle claimed a job of shard `s`, leased until `deadline` (boot ns); `last`: no
    /// other candidate of that listing is left. If no event came since the listing, the
    /// shard then holds no ready job this handle does not know of: known empty until the
    /// earliest lease deadline.
    pub(crate) fn claimed(&self, s: u16, deadline: u64, last: bool) {
        let mut k = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let s = s as usize;
        let Some(Some((g, m))) = k.listed_at.get(s).copied() else {
            return;
        };
        if k.generation[s] != g {
            k.listed_at[s] = None;
        } else if last {
            k.listed_at[s] = None;
            k.empty_until[s] = Some(m.min(deadline));
        } else {
            k.listed_at[s] = Some((g, m.min(deadline)));
        }
    }
}

impl Known {
    /// Size the per-slot vectors for `n` slots, on the first drain; `refused`: the slots
    /// whose watch was refused.
    fn size_for(&mut self, n: usize, refused: &[bool]) {
        self.generation = vec![0; n];
        self.empty_until = vec![None; n];
        self.listed_at = vec![None; n];
        self.arrived = vec![None; n];
        self.pending = vec![Vec::new(); n];
        self.own = vec![Vec::new(); n];
        self.unwatched = refused.to_vec();
    }

    /// Forget what is known of slot `s` (watched again, or made meanwhile): not known
    /// empty, a new listing generation, and every name arrived there stands for a listing.
    fn forget(&mut self, s: usize) {
        self.generation[s] += 1;
        self.empty_until[s] = None;
        self.arrived[s] = Some(0);
        self.pending[s].clear();
    }

    /// Forget what is known of every slot (the kernel's event queue overflowed), this
    /// handle's own pending names included.
    fn forget_all(&mut self) {
        self.empty_until.iter_mut().for_each(|e| *e = None);
        self.generation.iter_mut().for_each(|g| *g += 1);
        self.arrived.iter_mut().for_each(|a| *a = Some(0));
        self.pending.iter_mut().for_each(Vec::clear);
        self.own.iter_mut().for_each(Vec::clear);
    }

    /// Remember name `name` made from `job` in slot `s` (see [`Shards::made`]).
    fn remember_made(&mut self, s: u16, name: &NameBuf, job: &JobName) {
        if self.made.len() == MADE_MAX {
            self.made.remove(0);
        }
        self.made.push(Made {
            slot: s,
            name: name.clone(),
            job: *job,
        });
    }

    /// The fields of `name`, an event's name in slot `s`, if this handle made it (taken).
    fn take_made(&mut self, s: usize, name: &str) -> Option<JobName> {
        let i = self
            .made
            .iter()
            .position(|m| usize::from(m.slot) == s && m.name == *name)?;
        Some(self.made.swap_remove(i).job)
    }

    /// A name appeared in shard `s`. A lease of this boot only brings the recheck time
    /// forward to its deadline; anything else may be a ready job.
    fn learn(&mut self, q: &Queue, s: usize, name: &str) {
        // The tag is `None` for a name this handle made: formatted with this queue's id,
        // so its tag is right.
        let untagged = match self.take_made(s, name) {
            Some(job) => Some((job, None)),
            None => JobName::parse_untagged(name)
                .ok()
                .map(|(n, t)| (n, Some(t))),
        };
        let parsed = untagged.map(|(n, _)| n);
        let mut live_lease = false;
        if leased_len(name.len()) {
            if let Some(n) = parsed {
                if let Kind::Leased(l) = n.kind {
                    let (boot, now) = (q.clock.boot_id(), q.clock.boot_ns());
                    if !lease_expired(&l, boot, now) {
                        if let Some(Some(t)) = self.empty_until.get_mut(s) {
                            *t = (*t).min(l.boot_deadline_ns);
                            return;
                        }
                        // Not known empty: a listing may be under way that missed this
                        // lease. Bump the generation so it cannot conclude "empty until
                        // forever" without it (a killed holder's lease was then never
                        // recovered by a waiting worker).
                        live_lease = true;
                    }
                }
            }
        }
        if let (Some(Some(_)), Some(n)) = (self.empty_until.get(s), parsed) {
            // A ready job of this shard, while it is known empty: the shard now holds it and
            // nothing else unknown, so it stays known empty with the name pending (the next
            // claim takes it without a listing). The generation moves on so that a listing
            // under way (begun before the shard was known empty) cannot conclude without it.
            let (priority, shard) = q.ident.slot_parts(s as u16);
            let ours = untagged.is_some_and(|(_, tag)| tag.is_none_or(|t| n.tag(q.ident.id) == t))
                && crate::disk::scan::fits_ready_shard(&n, priority, shard, q.ident.shards);
            if ours && n.kind == Kind::Ready && self.pending[s].len() < PENDING_MAX {
                self.generation[s] += 1;
                let own = &mut self.own[s];
                let linked = match own.iter().position(|x| *x == n.id.0) {
                    Some(i) => {
                        own.swap_remove(i);
                        true
                    }
                    None => false,
                };
                self.pending[s].push((n, linked));
                return;
            }
        }
        self.generation[s] += 1;
        self.empty_until[s] = None;
        if let Some(p) = self.pending.get_mut(s) {
            p.clear(); // the listing this makes sees them
        }
        if let Some(o) = self.own.get_mut(s) {
            o.clear();
        }
        if live_lease {
            // Not a ready job: no reason to list again for order's sake (every claim makes
            // one of these; counting it would relist the slot at every claim).
            return;
        }
        // A ready name (or an expired lease, ready once recovered, or anything unparsed).
        let id = parsed.map_or(0, |n| n.id.0);
        if let Some(a) = self.arrived.get_mut(s) {
            *a = Some(a.map_or(id, |x| x.min(id)));
        }
    }
}

impl Watch {
    /// Watch slot `s` again (a directory on the way to it was made); whether it is left
    /// unwatched because this user may not search a directory on its way (`EACCES`,
    /// `EPERM`: see `Known::unwatched`). When it fails otherwise, know nothing empty from
    /// now on.
    fn rewatch(&self, q: &Queue, w: &mut SlotWatch, s: usize) -> bool {
        match q.watch_slot(self.fd.as_fd(), s as u16, SLOT_WATCH) {
            Ok(n) => {
                *w = n;
                false
            }
            Err(Errno::ACCESS | Errno::PERM) => true,
            Err(e) => {
                log::debug!("inotify watch for {} failed ({e}); listing every shard", {
                    q.ident.slot_rel(s as u16)
                });
                self.blind.store(true, std::sync::atomic::Ordering::Relaxed);
                false
            }
        }
    }
}

/// One inotify instance watching every ready shard (or, for a level's slot not made yet,
/// the directories on the way to it), or `None` (never skip).
fn watch(q: &Queue) -> Option<Watch> {
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
    let mut slots: Vec<crate::ops::levels::SlotWatch> =
        Vec::with_capacity(q.ident.slots() as usize);
    let mut refused = vec![false; q.ident.slots() as usize];
    for s in 0..q.ident.slots() {
        // A level not made yet (no `prio/<l>/`) is watched from the same parents for each
        // of its shards: the first shard's watches serve the rest, since an event there
        // names a component every shard of the level shares (three `inotify_add_watch`
        // calls per shard, 1,400 for 64 shards at 8 levels, were most of a new worker's
        // first claim at depth).
        let (level, shard) = q.ident.slot_parts(s);
        if shard > 0 && q.ident.slot_is_lazy(s) {
            let prev = &slots[s as usize - 1];
            if prev.slot.is_none() && prev.parents.len() < 3 && !prev.parents.is_empty() {
                debug_assert_eq!(q.ident.slot_parts(s - 1).0, level);
                slots.push(prev.clone());
                continue;
            }
        }
        match q.watch_slot(fd.as_fd(), s, SLOT_WATCH) {
            Ok(w) => slots.push(w),
            Err(Errno::ACCESS | Errno::PERM) => {
                refused[s as usize] = true;
                slots.push(Default::default());
            }
            Err(e) => {
                log::debug!(
                    "inotify watch for {} failed ({e}); listing every shard",
                    q.ident.slot_rel(s)
                );
                return None;
            }
        }
    }
    Some(Watch {
        fd,
        slots: Mutex::new(slots),
        blind: Default::default(),
        refused,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::name::{JobId, LeaseFields};

    /// A lease that appears while a listing of a shard not known empty is under way must
    /// stop that listing from marking the shard empty: a `steadq work` under qemu-user sat
    /// forever beside the expired lease of a killed worker that way.
    #[test]
    fn a_lease_seen_during_a_listing_keeps_the_shard_listed() {
        let dir = std::env::temp_dir().join(format!("steadq-shards-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let q = Queue::create(&dir, crate::Options::default()).unwrap();
        let lease = LeaseFields {
            boot_id: q.clock.boot_id(),
            boot_deadline_ns: q.clock.boot_ns() + 60_000_000_000,
            wall_deadline_ns: q.clock.wall_ns() + 60_000_000_000,
            token: 7,
        };
        let leased = JobName::new_ready(JobId::new(1_700_000_000_000, 9), 5)
            .next(Kind::Leased(lease), true)
            .format(q.ident.id)
            .to_string();
        let mut k = Known {
            generation: vec![0],
            empty_until: vec![None],
            listed_at: vec![None],
            arrived: vec![None],
            pending: vec![Vec::new()],
            own: vec![Vec::new()],
            ..Known::default()
        };
        // A listing started at generation 0; the lease event arrives before it ends.
        k.learn(&q, 0, &leased);
        assert_eq!(k.generation[0], 1, "the listing's 'empty' must be refused");
        // A shard known empty only brings its recheck forward to the lease's deadline.
        k.empty_until[0] = Some(u64::MAX);
        k.learn(&q, 0, &leased);
        assert_eq!(k.generation[0], 1);
        assert_eq!(k.empty_until[0], Some(lease.boot_deadline_ns));
        drop(q);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A name this handle made is taken back by its exact name in its slot, once, with the
    /// fields it was made from; the same name in another slot, or a name one byte apart, is
    /// not (it is parsed, as any other event).
    #[test]
    fn a_made_name_is_taken_once_by_its_exact_name_and_slot() {
        use crate::disk::name::{JobId, JobName};
        let qid = 0x1234_u128;
        let job = JobName::new_ready(JobId(0x01a2_3b4c_5d6e_7f80_9112_2334_4556_6778), 5);
        let name = job.format(qid);
        let mut k = Known::default();
        k.remember_made(3, &name, &job);
        assert_eq!(k.take_made(2, name.as_str()), None, "another slot");
        let mut other = name.as_str().to_owned().into_bytes();
        other[40] = if other[40] == b'0' { b'1' } else { b'0' };
        let other = String::from_utf8(other).unwrap();
        assert_eq!(k.take_made(3, &other), None, "a byte apart");
        assert_eq!(k.take_made(3, name.as_str()), Some(job));
        assert_eq!(k.take_made(3, name.as_str()), None, "taken once");
        for i in 0..=MADE_MAX as u128 {
            let j = JobName::new_ready(JobId(i << 64 | 7), 5);
            k.remember_made(3, &j.format(qid), &j);
        }
        assert_eq!(k.made.len(), MADE_MAX, "bounded");
        let first = JobName::new_ready(JobId(7), 5);
        assert_eq!(
            k.take_made(3, first.format(qid).as_str()),
            None,
            "the oldest went"
        );
    }
}
