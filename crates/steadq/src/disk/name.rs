//! Job file names: the whole state of a job, parsed once into a [`JobName`].
//!
//! Every numeric field is fixed-width lowercase hex, so names stay within `[0-9a-z.]` (safe on
//! vfat) and a sorted listing is oldest job first. The five kinds (see also [`crate::disk::state`]):
//!
//! ```text
//! ready    <id32>.g<gen16>.a<att8>.m<max8>.k<tag16>.sqj
//! leased   <id32>.g<gen16>.a<att8>.m<max8>.o<boot32>.b<bootdl16>.w<walldl16>.t<token32>.k<tag16>.sqj
//! delayed  <id32>.g<gen16>.a<att8>.m<max8>.d<notbefore16>.k<tag16>.sqj                       (v1)
//! delayed  <id32>.g<gen16>.a<att8>.m<max8>.d<notbefore16>.o<boot32>.b<bootnb16>.k<tag16>.sqj (v2)
//! dead     <id32>.g<gen16>.a<att8>.m<max8>.x<reason>.k<tag16>.sqj
//! receipt  <id32>.g<gen16>.a<att8>.m<max8>.t<token32>.k<tag16>.rct                          (v1)
//! receipt  <id32>.g<gen16>.a<att8>.m<max8>.t<token32>.r<acked16>.k<tag16>.rct               (v2)
//! ```
//!
//! Queue version 3 adds an optional priority field after `.m<max8>`: `.p<l>`, one decimal
//! digit `0`..=`7`, present only when the job's priority is not [`DEFAULT_PRIORITY`] (3). A
//! default-priority job's names are byte for byte those of version 2, so version-1 and
//! version-2 queues never see the field (they refuse a non-default priority). Every kind
//! carries it, so a delayed, dead or leased job keeps its priority through every transition.
//!
//! Version 3 queues also take an optional group field right after the priority field's
//! place: `.q<group>`, 1 to 16 characters of `[a-z0-9]` ([`GroupName`]), present only when
//! the job was enqueued with a group. Every kind carries it too, and the tag covers it; a job
//! without a group has the names it had before groups existed.
//!
//! Queue version 2 writes the longer delayed and receipt forms; version 1 queues keep the
//! short ones. Both forms parse in every queue. In a v2 delayed name `boot` is the boot id of
//! the boot that set the delay and `bootnb` the not-before time on that boot's
//! `CLOCK_BOOTTIME` (ns): within that boot it decides ([`delay_due`]). In a v2 receipt `acked`
//! is the ack time (unix ns), which compaction ages by.
//!
//! `gen` counts state changes, `att` successful claims, `max` the attempts allowed; `boot` is
//! the claimer's `/proc/sys/kernel/random/boot_id`, `bootdl` the lease deadline on
//! `CLOCK_BOOTTIME` (ns), `walldl` the same deadline on `CLOCK_REALTIME` (unix ns, for people
//! and other boots), `token` the 128-bit random lease token, `notbefore` a unix time in ns, and
//! `reason` 1 to 16 characters of `[a-z0-9]`.
//!
//! # The tag
//! `tag` is the first 8 bytes, big-endian, of
//! `SHA-256("steadq-name-v1" || 0x00 || queue_id as 16 bytes big-endian || canonical)`, where
//! `canonical` is the ASCII name with its `.k<tag16>` field removed (for example
//! `<id32>.g0000000000000000.a00000000.m00000005.sqj`). It catches corruption and names from
//! another queue; it is not a MAC (anyone who knows the queue id can compute it).
//!
//! Parsing allocates nothing; a name that does not parse or whose tag does not match is
//! foreign.

use sha2::{Digest, Sha256};

/// Longest name SteadQ writes, in bytes (a leased name, the longest, is 196; 199 with a
/// priority field; 217 with a priority field and a 16-character group). Linux allows 255.
pub const NAME_MAX: usize = 224;

/// Priority levels: `0..PRIORITY_LEVELS` (0 lowest, 7 highest: the higher number is claimed
/// first).
pub const PRIORITY_LEVELS: u8 = 8;

/// The priority a job gets when none is given: 3, so four levels (4..=7) rank above it and
/// three (0..=2) below. Its names carry no priority field.
pub const DEFAULT_PRIORITY: u8 = 3;

/// A formatted name: at most [`NAME_MAX`] ASCII bytes kept inline, no heap allocation. Read
/// it as a `&str` ([`NameBuf::as_str`], `Deref`, `Display`).
///
/// Its own type, not a `heapless::String`: heapless 0.8 fills and clones a `String` one byte
/// at a time, and copying names that way was most of [`JobName::format`]'s CPU (perf on
/// tmpfs, 2026-12-04); this one is a plain array copy.
#[derive(Clone)]
pub struct NameBuf {
    buf: [u8; NAME_MAX],
    len: usize,
}

impl NameBuf {
    /// The name.
    pub fn as_str(&self) -> &str {
        // Only `NameWriter` makes one, and it writes ASCII alone (hex digits, field keys, a
        // reason of `[a-z0-9]`): never the empty fallback.
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }
}

impl core::ops::Deref for NameBuf {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for NameBuf {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl core::fmt::Display for NameBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::fmt::Debug for NameBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for NameBuf {
    fn eq(&self, other: &NameBuf) -> bool {
        self.buf[..self.len] == other.buf[..other.len]
    }
}

impl Eq for NameBuf {}

impl PartialEq<str> for NameBuf {
    fn eq(&self, other: &str) -> bool {
        self.buf[..self.len] == *other.as_bytes()
    }
}

impl PartialEq<&str> for NameBuf {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Tags [`JobName::format`] keeps per thread.
pub const MEMO: usize = 4;

/// One kept tag: the queue id, the fields, their tag.
type Kept = Option<(u128, JobName, u64)>;

std::thread_local! {
    /// The tags of the last `MEMO` names formatted on this thread, and the slot the next
    /// one takes.
    static FORMATTED: core::cell::RefCell<([Kept; MEMO], usize)> =
        const { core::cell::RefCell::new(([const { None }; MEMO], 0)) };
}

/// The kept tag of `n` in queue `queue_id`, if this thread formatted it lately.
fn memo_find(queue_id: u128, n: &JobName) -> Option<u64> {
    FORMATTED.with(|m| {
        let m = m.borrow();
        m.0.iter()
            .flatten()
            .find(|(q, j, _)| *q == queue_id && j == n)
            .map(|&(_, _, tag)| tag)
    })
}

/// Keep `tag`, the tag of `n` in queue `queue_id`, in place of the oldest kept one.
fn memo_keep(queue_id: u128, n: &JobName, tag: u64) {
    FORMATTED.with(|m| {
        let mut m = m.borrow_mut();
        let at = m.1;
        m.0[at] = Some((queue_id, *n, tag));
        m.1 = (at + 1) % MEMO;
    })
}

/// A 128-bit job id: 48 bits of unix milliseconds, then 80 random bits. Formats as 32 hex.
/// `Debug` and `Display` agree: both print the 32 hex digits a name and `steadq` show.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub u128);

impl JobId {
    /// A new id for time `unix_ms` (ms since 1970) and 80 random bits from `getrandom`.
    pub fn new(unix_ms: u64, random: u128) -> JobId {
        let r = random & ((1u128 << 80) - 1);
        JobId(((unix_ms as u128 & 0xFFFF_FFFF_FFFF) << 80) | r)
    }

    /// The creation time encoded in the id, in unix ms.
    pub fn unix_ms(self) -> u64 {
        (self.0 >> 80) as u64
    }

    /// The shard (0..shards) this job lives in: the low random bits modulo the shard count.
    pub fn shard(self, shards: u16) -> u16 {
        ((self.0 as u64) % shards.max(1) as u64) as u16
    }

    /// Parse exactly 32 lowercase hex digits.
    pub fn parse(s: &str) -> Option<JobId> {
        parse_hex(s.as_bytes(), 32).map(JobId)
    }
}

impl core::fmt::Display for JobId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl core::fmt::Debug for JobId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "JobId({self})")
    }
}

/// A dead-letter reason: 1 to 16 characters of `[a-z0-9]`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reason {
    bytes: [u8; 16],
    len: u8,
}

impl Reason {
    /// Attempts were exhausted (claim, nack or recovery found `attempt >= max`).
    pub const EXHAUSTED: Reason = Reason::lit(b"exhausted");
    /// The job file failed verification (header, payload digest or envelope digest).
    pub const CORRUPT: Reason = Reason::lit(b"corrupt");
    /// A claim found the payload larger than the worker's limit (not corrupt).
    pub const TOO_LARGE: Reason = Reason::lit(b"toolarge");
    /// A worker called fail without a reason of its own.
    pub const FAILED: Reason = Reason::lit(b"failed");
    /// A job this one waited for (`EnqueueOptions::after`) was dead-lettered or purged.
    pub const DEPENDENCY: Reason = Reason::lit(b"dependency");

    const fn lit(b: &[u8]) -> Reason {
        let mut bytes = [0u8; 16];
        let mut i = 0;
        while i < b.len() {
            bytes[i] = b[i];
            i += 1;
        }
        Reason {
            bytes,
            len: b.len() as u8,
        }
    }

    /// Parse a reason; `None` unless it is 1..=16 characters of `[a-z0-9]`.
    pub fn new(s: &str) -> Option<Reason> {
        let b = s.as_bytes();
        if b.is_empty()
            || b.len() > 16
            || !b
                .iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        {
            return None;
        }
        Some(Reason::lit(b))
    }

    /// The reason as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored.
        core::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl core::fmt::Debug for Reason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Reason({})", self.as_str())
    }
}

impl core::fmt::Display for Reason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job group's name: 1 to 16 characters of `[a-z0-9]`. Jobs of a group share the group's
/// concurrency limit (`steadq limit DIR --group NAME --max-leased N`; DESIGN.md, Groups).
/// Made only by [`GroupName::new`], so a value of this type is always a valid name.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupName(Reason);

impl GroupName {
    /// Parse a group name; `None` unless it is 1..=16 characters of `[a-z0-9]`.
    pub fn new(s: &str) -> Option<GroupName> {
        Reason::new(s).map(GroupName)
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl core::str::FromStr for GroupName {
    type Err = &'static str;
    /// # Errors
    /// A text that is not 1..=16 characters of `[a-z0-9]`.
    fn from_str(s: &str) -> Result<GroupName, &'static str> {
        GroupName::new(s).ok_or("a group name is 1 to 16 characters of a-z and 0-9")
    }
}

impl core::fmt::Debug for GroupName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "GroupName({})", self.as_str())
    }
}

impl core::fmt::Display for GroupName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The lease fields of a leased name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseFields {
    /// The claimer's boot id (`/proc/sys/kernel/random/boot_id` as 128 bits).
    pub boot_id: u128,
    /// Lease deadline on `CLOCK_BOOTTIME`, in ns.
    pub boot_deadline_ns: u64,
    /// The same deadline on `CLOCK_REALTIME`, in unix ns.
    pub wall_deadline_ns: u64,
    /// The 128-bit random lease token.
    pub token: u128,
}

/// The state-specific part of a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Waiting in `ready/<shard>/`.
    Ready,
    /// Held by a worker, in `ready/<shard>/`.
    Leased(LeaseFields),
    /// Waiting in `delayed/<bucket>/` until `not_before` (unix ns), or, on the boot that set
    /// the delay, until its boot-clock time (see [`delay_due`]).
    Delayed {
        /// Earliest time to run, unix ns (wall clock); picks the bucket.
        not_before_ns: u64,
        /// The boot clock's not-before (queue version 2); `None` in version-1 names.
        boot: Option<BootDue>,
    },
    /// Dead-lettered in `dead/<bucket>/`.
    Dead {
        /// Why.
        reason: Reason,
    },
    /// Acked, in `receipts/<shard>/`; `token` is the lease token that acked it.
    Receipt {
        /// The lease token of the acking lease.
        token: u128,
        /// When it was acked, unix ns (queue version 2); `None` in version-1 names.
        acked_ns: Option<u64>,
    },
}

/// The boot-clock part of a version-2 delayed name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BootDue {
    /// The boot id of the boot that set the delay.
    pub boot_id: u128,
    /// Not-before time on that boot's `CLOCK_BOOTTIME`, ns.
    pub not_before_boot_ns: u64,
}

/// Whether a delayed job is due: on the boot that set the delay, when the boot clock
/// (`boot_now_ns`, `CLOCK_BOOTTIME` ns of boot `boot_id`) reaches its boot-clock not-before, so
/// a wall clock that jumps either way neither runs it early nor strands it; on any other boot,
/// or for a version-1 name, when the wall clock (`wall_now_ns`, unix ns) reaches
/// `not_before_ns`. The one place the due rule lives. `kind` other than delayed: `true`.
pub fn delay_due(kind: &Kind, boot_id: u128, boot_now_ns: u64, wall_now_ns: u64) -> bool {
    match *kind {
        Kind::Delayed { boot: Some(b), .. } if b.boot_id == boot_id => {
            boot_now_ns >= b.not_before_boot_ns
        }
        Kind::Delayed { not_before_ns, .. } => wall_now_ns >= not_before_ns,
        _ => true,
    }
}

/// When a delayed job becomes due by the wall clock as it reads now (unix ns): for one of this
/// boot, now plus what its boot clock still has to run; otherwise its `not_before_ns`. For
/// timers and for people; [`delay_due`] decides.
pub fn due_wall_ns(kind: &Kind, boot_id: u128, boot_now_ns: u64, wall_now_ns: u64) -> u64 {
    match *kind {
        Kind::Delayed { boot: Some(b), .. } if b.boot_id == boot_id => {
            wall_now_ns.saturating_add(b.not_before_boot_ns.saturating_sub(boot_now_ns))
        }
        Kind::Delayed { not_before_ns, .. } => not_before_ns,
        _ => wall_now_ns,
    }
}

/// A parsed job name: the job's complete state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JobName {
    /// Job id.
    pub id: JobId,
    /// Generation: state changes so far.
    pub generation: u64,
    /// Successful claims so far.
    pub attempt: u32,
    /// Claims allowed before the job is dead-lettered.
    pub max_attempts: u32,
    /// Priority, `0..`[`PRIORITY_LEVELS`] (higher is claimed first); [`DEFAULT_PRIORITY`]
    /// writes no field (queue version 3 writes the others as `.p<l>`).
    pub priority: u8,
    /// The job's group, if it has one: written as `.q<group>` after the priority field's
    /// place (version-3 queues); no field when `None`.
    pub group: Option<GroupName>,
    /// State-specific fields.
    pub kind: Kind,
}

/// Why a name is foreign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameError {
    /// Not in the grammar above.
    Syntax,
    /// Well-formed, but at generation `u64::MAX` (`g` all `f`s): no job gets there (one
    /// state change per rename), and its next state change would wrap to generation 0, so
    /// the name is forged. Never parsed into a [`JobName`]: nothing moves it but `fsck
    /// --quarantine`.
    LastGeneration,
    /// Well-formed, but the tag does not match (corrupt, or from another queue).
    Tag,
}

/// Each byte's value as a lowercase hex digit, or 0xFF.
const HEX_VALUE: [u8; 256] = {
    let mut t = [0xFF; 256];
    let mut i = 0;
    while i < 16 {
        t[b"0123456789abcdef"[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// Up to 16 lowercase hex digits as a `u64`, without a branch per digit: a bad byte's 0xFF
/// sets a high bit of `bad`. (A name's hex fields are most of a claim's parsing: a branch
/// per digit into a `u128` was about 2% of a tmpfs lifecycle's CPU.)
fn parse_hex64(s: &[u8]) -> Option<u64> {
    let (mut acc, mut bad) = (0u64, 0u8);
    for &c in s {
        let v = HEX_VALUE[c as usize];
        bad |= v;
        acc = acc << 4 | u64::from(v & 0x0F);
    }
    (bad & 0xF0 == 0).then_some(acc)
}

/// Parse exactly `width` lowercase hex digits (width <= 32).
pub(crate) fn parse_hex(s: &[u8], width: usize) -> Option<u128> {
    if s.len() != width || width > 32 {
        return None;
    }
    if width <= 16 {
        return parse_hex64(s).map(u128::from);
    }
    let (hi, lo) = s.split_at(width - 16);
    Some(u128::from(parse_hex64(hi)?) << 64 | u128::from(parse_hex64(lo)?))
}

/// A directory entry's name as text: its UTF-8 runs as they are (a backslash doubled), each
/// byte that is not part of one, and each byte of a control character (`char::is_control`:
/// ESC, BEL, `\r`, `\n`, DEL, C1), as `\xNN`. Reversible ([`unescape_name`]): how a name
/// that is not UTF-8 or would drive the reader's terminal is reported and then found again
/// (`fsck --quarantine`).
pub fn escape_name(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len() + 8);
    for chunk in raw.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() {
                let mut b = [0u8; 4];
                for b in c.encode_utf8(&mut b).bytes() {
                    out.push_str(&format!("\\x{b:02x}"));
                }
                continue;
            }
            if c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The bytes [`escape_name`] made `s` from; `None` when `s` is not such an escape.
pub fn unescape_name(s: &str) -> Option<Vec<u8>> {
    let (mut out, b) = (Vec::with_capacity(s.len()), s.as_bytes());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if b.get(i + 1) == Some(&b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            b'\\' if b.get(i + 1) == Some(&b'x') => {
                out.push(parse_hex(b.get(i + 2..i + 4)?, 2)? as u8);
                i += 4;
            }
            b'\\' => return None,
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(out)
}

impl JobName {
    /// A fresh ready name (generation 0, attempt 0).
    pub fn new_ready(id: JobId, max_attempts: u32) -> JobName {
        JobName {
            id,
            generation: 0,
            attempt: 0,
            max_attempts,
            priority: DEFAULT_PRIORITY,
            group: None,
            kind: Kind::Ready,
        }
    }

    /// The same name with group `group` (`None`: no group).
    pub fn with_group(mut self, group: Option<GroupName>) -> JobName {
        self.group = group;
        self
    }

    /// The same name with priority `priority` (`0..`[`PRIORITY_LEVELS`]).
    pub fn with_priority(mut self, priority: u8) -> JobName {
        self.priority = priority;
        self
    }

    /// The same job in a new state: generation + 1, attempt + `claimed`. A parsed name is
    /// never at generation `u64::MAX` (`NameError::LastGeneration`); one made by hand
    /// there stays at it rather than wrap to 0.
    pub fn next(&self, kind: Kind, claimed: bool) -> JobName {
        JobName {
            id: self.id,
            generation: self.generation.saturating_add(1),
            attempt: self.attempt + claimed as u32,
            max_attempts: self.max_attempts,
            priority: self.priority,
            group: self.group,
            kind,
        }
    }

    /// True when no claim is left (`attempt >= max_attempts`).
    pub fn exhausted(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// Every field of the name but its tag and suffix, in name order, as fixed-width
    /// lowercase hex. Formatting them through `core::fmt` took about 13% of a job's CPU on
    /// tmpfs; [`NameWriter`] keeps the bytes and their count local until the name is done.
    fn write_fields(&self, w: &mut NameWriter) {
        w.hex(self.id.0, 32);
        w.field(b'g', self.generation.into(), 16);
        w.field(b'a', self.attempt.into(), 8);
        w.field(b'm', self.max_attempts.into(), 8);
        if self.priority != DEFAULT_PRIORITY {
            w.bytes(&[b'.', b'p', b'0' + self.priority % 10]);
        }
        if let Some(g) = self.group {
            w.bytes(b".q");
            w.bytes(g.as_str().as_bytes());
        }
        match self.kind {
            Kind::Ready => {}
            Kind::Leased(l) => {
                w.field(b'o', l.boot_id, 32);
                w.field(b'b', l.boot_deadline_ns.into(), 16);
                w.field(b'w', l.wall_deadline_ns.into(), 16);
                w.field(b't', l.token, 32);
            }
            Kind::Delayed {
                not_before_ns,
                boot,
            } => {
                w.field(b'd', not_before_ns.into(), 16);
                if let Some(b) = boot {
                    w.field(b'o', b.boot_id, 32);
                    w.field(b'b', b.not_before_boot_ns.into(), 16);
                }
            }
            Kind::Dead { reason } => {
                w.bytes(b".x");
                w.bytes(reason.as_str().as_bytes());
            }
            Kind::Receipt { token, acked_ns } => {
                w.field(b't', token, 32);
                if let Some(a) = acked_ns {
                    w.field(b'r', a.into(), 16);
                }
            }
        }
    }

    fn suffix(&self) -> &'static [u8] {
        match self.kind {
            Kind::Receipt { .. } => b".rct",
            _ => b".sqj",
        }
    }

    /// The 64-bit tag of this name in queue `queue_id` (see the module docs for the bytes):
    /// taken over the name without its tag field.
    pub fn tag(&self, queue_id: u128) -> u64 {
        let mut w = NameWriter::new();
        self.write_fields(&mut w);
        w.bytes(self.suffix());
        tag_of(queue_id, w.as_bytes())
    }

    /// Format the full name, tag included. The fields are written once: the tag is taken over
    /// them and the suffix, then goes in before the suffix.
    ///
    /// The tags of the last `MEMO` names formatted on the calling thread are kept: an
    /// operation formats the same name several times (a claim's rename, then its open; an
    /// ack's rename, from the lease's name), and the tag is a SHA-256 each time (about 7% of a
    /// lifecycle's CPU on tmpfs before, perf). A tag is a function of the fields and
    /// `queue_id` alone, so a kept one is exact. Only the 8-byte tag is kept, not the name:
    /// copying whole names in and out of the memo cost more than writing the fields again
    /// (4% of a lifecycle's CPU on tmpfs, perf, 2026-12-04).
    pub fn format(&self, queue_id: u128) -> NameBuf {
        let mut w = NameWriter::new();
        self.write_fields(&mut w);
        let fields = w.len;
        let tag = match memo_find(queue_id, self) {
            Some(tag) => tag,
            None => {
                w.bytes(self.suffix());
                let tag = tag_of(queue_id, w.as_bytes());
                w.len = fields;
                memo_keep(queue_id, self, tag);
                tag
            }
        };
        w.field(b'k', tag.into(), 16);
        w.bytes(self.suffix());
        w.into_name()
    }

    /// [`JobName::format`] without the thread's memo.
    #[cfg(test)]
    fn format_fresh(&self, queue_id: u128) -> NameBuf {
        let mut w = NameWriter::new();
        self.write_fields(&mut w);
        w.field(b'k', self.tag(queue_id).into(), 16);
        w.bytes(self.suffix());
        w.into_name()
    }

    /// Parse a name and check its tag against `queue_id`. Allocates nothing.
    ///
    /// # Errors
    /// `NameError::Syntax` if it is not a SteadQ name, `NameError::Tag` if the tag does not
    /// match.
    pub fn parse(name: &str, queue_id: u128) -> Result<JobName, NameError> {
        let (parsed, tag) = JobName::parse_untagged(name)?;
        // A name this thread formatted (an enqueue's, seen again in an inotify event) is
        // known good without its SHA-256: the kept tag is the one `parsed.tag` would give.
        let good = memo_find(queue_id, &parsed).unwrap_or_else(|| parsed.tag(queue_id));
        if good != tag {
            return Err(NameError::Tag);
        }
        Ok(parsed)
    }

    /// Parse a name's fields without checking which queue it belongs to: for telling a
    /// string that is no SteadQ name at all from a name of another queue (a lease handle
    /// given on a command line). Anything acted on is parsed with [`JobName::parse`].
    ///
    /// # Errors
    /// `NameError::Syntax` if it is not a SteadQ name.
    pub fn parse_any_queue(name: &str) -> Result<JobName, NameError> {
        JobName::parse_untagged(name).map(|(n, _)| n)
    }

    /// Parse the fields of a name without checking its tag; returns the name and the tag it
    /// carries. For cheap scans (a lease deadline, a not-before time) that look at many names
    /// and act on few: anything acted on is parsed again with [`JobName::parse`].
    pub(crate) fn parse_untagged(name: &str) -> Result<(JobName, u64), NameError> {
        let b = name.as_bytes();
        let (body, receipt) = if let Some(x) = b.strip_suffix(b".sqj") {
            (x, false)
        } else if let Some(x) = b.strip_suffix(b".rct") {
            (x, true)
        } else {
            return Err(NameError::Syntax);
        };
        // The tag field is always last before the suffix: ".k" + 16 hex.
        if body.len() < 18 || &body[body.len() - 18..body.len() - 16] != b".k" {
            return Err(NameError::Syntax);
        }
        let tag = parse_hex(&body[body.len() - 16..], 16).ok_or(NameError::Syntax)? as u64;
        let body = &body[..body.len() - 18];
        let mut fields = body.split(|&c| c == b'.');
        let id =
            JobId(parse_hex(fields.next().ok_or(NameError::Syntax)?, 32).ok_or(NameError::Syntax)?);
        let mut field = |letter: u8, width: usize| -> Result<u128, NameError> {
            let f = fields.next().ok_or(NameError::Syntax)?;
            hex_field(f, letter, width)
        };
        let generation = field(b'g', 16)? as u64;
        if generation == u64::MAX {
            return Err(NameError::LastGeneration);
        }
        let attempt = field(b'a', 8)? as u32;
        let max_attempts = field(b'm', 8)? as u32;
        let mut rest: heapless::Vec<&[u8], 7> =
            fields.try_fold(heapless::Vec::new(), |mut v, f| {
                v.push(f).map_err(|_| NameError::Syntax)?;
                Ok(v)
            })?;
        let priority = match rest.first() {
            Some([b'p', d]) if (b'0'..b'0' + PRIORITY_LEVELS).contains(d) => {
                let p = d - b'0';
                if p == DEFAULT_PRIORITY {
                    // The default is written as no field: one job, one name.
                    return Err(NameError::Syntax);
                }
                rest.remove(0);
                p
            }
            _ => DEFAULT_PRIORITY,
        };
        let group = match rest.first() {
            Some([b'q', g @ ..]) => {
                let g = core::str::from_utf8(g).ok().and_then(GroupName::new);
                rest.remove(0);
                Some(g.ok_or(NameError::Syntax)?)
            }
            _ => None,
        };
        let parsed = JobName {
            id,
            generation,
            attempt,
            max_attempts,
            priority,
            group,
            kind: parse_kind(receipt, rest.as_slice())?,
        };
        Ok((parsed, tag))
    }
}

/// `f` is `letter` followed by exactly `width` lowercase hex digits.
fn hex_field(f: &[u8], letter: u8, width: usize) -> Result<u128, NameError> {
    match f.split_first() {
        Some((&l, r)) if l == letter => parse_hex(r, width).ok_or(NameError::Syntax),
        _ => Err(NameError::Syntax),
    }
}

/// The state-specific fields of a name (after `.m<max8>` and the optional `.p<l>` and
/// `.q<group>`).
fn parse_kind(receipt: bool, rest: &[&[u8]]) -> Result<Kind, NameError> {
    Ok(match (receipt, rest) {
        (false, []) => Kind::Ready,
        (false, [o, bd, w, t]) => Kind::Leased(LeaseFields {
            boot_id: hex_field(o, b'o', 32)?,
            boot_deadline_ns: hex_field(bd, b'b', 16)? as u64,
            wall_deadline_ns: hex_field(w, b'w', 16)? as u64,
            token: hex_field(t, b't', 32)?,
        }),
        (false, [d]) if d.first() == Some(&b'd') => Kind::Delayed {
            not_before_ns: hex_field(d, b'd', 16)? as u64,
            boot: None,
        },
        (false, [d, o, b]) => Kind::Delayed {
            not_before_ns: hex_field(d, b'd', 16)? as u64,
            boot: Some(BootDue {
                boot_id: hex_field(o, b'o', 32)?,
                not_before_boot_ns: hex_field(b, b'b', 16)? as u64,
            }),
        },
        (false, [x]) if x.first() == Some(&b'x') => Kind::Dead {
            reason: core::str::from_utf8(&x[1..])
                .ok()
                .and_then(Reason::new)
                .ok_or(NameError::Syntax)?,
        },
        (true, [t]) => Kind::Receipt {
            token: hex_field(t, b't', 32)?,
            acked_ns: None,
        },
        (true, [t, r]) => Kind::Receipt {
            token: hex_field(t, b't', 32)?,
            acked_ns: Some(hex_field(r, b'r', 16)? as u64),
        },
        _ => return Err(NameError::Syntax),
    })
}

/// A name being written: its bytes and their count, local to the formatter (a `NameBuf`
/// stores its length on every push). Every name fits (`NAME_MAX`, checked by tests); a write
/// past the end panics rather than truncating a name.
struct NameWriter {
    buf: [u8; NAME_MAX],
    len: usize,
}

impl NameWriter {
    fn new() -> NameWriter {
        NameWriter {
            buf: [0; NAME_MAX],
            len: 0,
        }
    }

    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    /// `v` as exactly `digits` (even) lowercase hex digits, zero-padded: `{:0digits$x}` for a
    /// value that fits, as every name field does by its type.
    fn hex(&mut self, v: u128, digits: usize) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let out = &mut self.buf[self.len..self.len + digits];
        let be = v.to_be_bytes();
        for (pair, x) in out.chunks_exact_mut(2).zip(&be[16 - digits / 2..]) {
            pair[0] = HEX[usize::from(x >> 4)];
            pair[1] = HEX[usize::from(x & 0xf)];
        }
        self.len += digits;
    }

    /// `.<key><v as digits hex digits>`, one field of a name.
    fn field(&mut self, key: u8, v: u128, digits: usize) {
        self.bytes(&[b'.', key]);
        self.hex(v, digits);
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn into_name(self) -> NameBuf {
        NameBuf {
            buf: self.buf,
            len: self.len,
        }
    }
}

/// The tag function itself (module docs give the bytes).
pub(crate) fn tag_of(queue_id: u128, canonical: &[u8]) -> u64 {
    let mut h = Sha256::new();
    h.update(b"steadq-name-v1\0");
    h.update(queue_id.to_be_bytes());
    h.update(canonical);
    let d = h.finalize();
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

pub use crate::disk::tempname::{TempKind, TempName};

#[cfg(feature = "faults")]
pub use crate::disk::layout::{bucket_name, shard_name};

/// [`JobName::parse_untagged`] for the one shape most entries of a deep queue have, a ready
/// name (`<id32>.g<16>.a<8>.m<8>.k<16>.sqj`, 92 bytes), by fixed offsets and a table instead
/// of splitting. `None` when the name is not exactly that shape: the caller then parses it
/// the general way, so this can only be faster, never decide differently (unit-tested against
/// `parse_untagged`).
pub(crate) fn parse_ready(b: &[u8]) -> Option<(JobName, u64)> {
    const SEP: [(usize, u8); 8] = [
        (32, b'.'),
        (33, b'g'),
        (50, b'.'),
        (51, b'a'),
        (60, b'.'),
        (61, b'm'),
        (70, b'.'),
        (71, b'k'),
    ];
    if b.len() != crate::disk::scan::READY_NAME_LEN || &b[88..] != b".sqj" {
        return None;
    }
    if SEP.iter().any(|&(i, c)| b[i] != c) {
        return None;
    }
    let id = (hex64(&b[0..16])? as u128) << 64 | hex64(&b[16..32])? as u128;
    let name = JobName {
        id: JobId(id),
        // The last generation is left to the full parse, which refuses it (`LastGeneration`).
        generation: hex64(&b[34..50]).filter(|&g| g != u64::MAX)?,
        attempt: hex64(&b[52..60])? as u32,
        max_attempts: hex64(&b[62..70])? as u32,
        kind: Kind::Ready,
        priority: crate::disk::name::DEFAULT_PRIORITY,
        group: None,
    };
    Some((name, hex64(&b[72..88])?))
}

/// Up to 16 lowercase hex digits (as `parse_hex`: nothing else is accepted).
fn hex64(s: &[u8]) -> Option<u64> {
    const BAD: u8 = 0x80;
    const T: [u8; 256] = {
        let mut t = [BAD; 256];
        let mut i = 0;
        while i < 10 {
            t[b'0' as usize + i] = i as u8;
            i += 1;
        }
        let mut i = 0;
        while i < 6 {
            t[b'a' as usize + i] = 10 + i as u8;
            i += 1;
        }
        t
    };
    let (mut v, mut bad) = (0u64, 0u8);
    for &c in s {
        let d = T[c as usize];
        bad |= d;
        v = v << 4 | (d & 0x0f) as u64;
    }
    (bad & BAD == 0).then_some(v)
}

/// The tag of a name that [`JobName::parse_untagged`] accepted, computed over the name with
/// its `.k<tag16>` field (always last before the 4-byte suffix) cut out.
pub(crate) fn raw_tag(queue_id: u128, name: &str) -> Option<u64> {
    let b = name.as_bytes();
    let cut = b.len().checked_sub(22)?;
    let mut canon = [0u8; NAME_MAX];
    canon.get_mut(..cut)?.copy_from_slice(&b[..cut]);
    canon
        .get_mut(cut..cut + 4)?
        .copy_from_slice(&b[b.len() - 4..]);
    Some(tag_of(queue_id, &canon[..cut + 4]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name as `core::fmt` writes it: the reference the table-driven formatter must match
    /// byte for byte (it replaced this code).
    fn reference(n: &JobName, queue_id: u128) -> String {
        let mut s = format!(
            "{:032x}.g{:016x}.a{:08x}.m{:08x}",
            n.id.0, n.generation, n.attempt, n.max_attempts
        );
        if n.priority != DEFAULT_PRIORITY {
            s += &format!(".p{}", n.priority);
        }
        if let Some(g) = n.group {
            s += &format!(".q{g}");
        }
        s += &match n.kind {
            Kind::Ready => String::new(),
            Kind::Leased(l) => format!(
                ".o{:032x}.b{:016x}.w{:016x}.t{:032x}",
                l.boot_id, l.boot_deadline_ns, l.wall_deadline_ns, l.token
            ),
            Kind::Delayed {
                not_before_ns,
                boot,
            } => {
                format!(".d{not_before_ns:016x}")
                    + &boot.map_or(String::new(), |b| {
                        format!(".o{:032x}.b{:016x}", b.boot_id, b.not_before_boot_ns)
                    })
            }
            Kind::Dead { reason } => format!(".x{reason}"),
            Kind::Receipt { token, acked_ns } => {
                format!(".t{token:032x}")
                    + &acked_ns.map_or(String::new(), |a| format!(".r{a:016x}"))
            }
        };
        let suffix = if matches!(n.kind, Kind::Receipt { .. }) {
            ".rct"
        } else {
            ".sqj"
        };
        let tag = tag_of(queue_id, format!("{s}{suffix}").as_bytes());
        format!("{s}.k{tag:016x}{suffix}")
    }

    #[test]
    fn the_formatter_writes_what_core_fmt_wrote() {
        let mut x = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834_u128;
        let mut next = || {
            x = x.rotate_left(17) ^ x.wrapping_mul(0x2545_f491_4f6c_dd1d);
            x
        };
        let reason = Reason::new("dataerr").unwrap();
        for round in 0..200 {
            // Small and large values: leading zeros and every digit position.
            let v = next() >> (round % 128);
            let w = v as u64;
            let kinds = [
                Kind::Ready,
                Kind::Leased(LeaseFields {
                    boot_id: next(),
                    boot_deadline_ns: w,
                    wall_deadline_ns: w >> 7,
                    token: v,
                }),
                Kind::Delayed {
                    not_before_ns: w,
                    boot: None,
                },
                Kind::Delayed {
                    not_before_ns: w,
                    boot: Some(BootDue {
                        boot_id: v,
                        not_before_boot_ns: w >> 3,
                    }),
                },
                Kind::Dead { reason },
                Kind::Receipt {
                    token: v,
                    acked_ns: None,
                },
                Kind::Receipt {
                    token: v,
                    acked_ns: Some(w),
                },
            ];
            for kind in kinds {
                let n = JobName {
                    id: JobId(v),
                    generation: w >> 11,
                    attempt: (w >> 32) as u32,
                    max_attempts: w as u32,
                    priority: (round % 8) as u8,
                    group: [
                        None,
                        GroupName::new("ffmpeg"),
                        GroupName::new("0123456789abcdef"),
                    ][round % 3],
                    kind,
                };
                let q = next();
                assert_eq!(n.format(q).as_str(), reference(&n, q), "{n:?}");
                assert_eq!(JobName::parse(n.format(q).as_str(), q), Ok(n));
            }
        }
    }

    /// The thread's kept names: a name comes back only for the same fields in the same
    /// queue, the oldest goes when a new one comes, and a name whose tag is wrong is refused
    /// by `parse` even while its fields are kept.
    #[test]
    fn kept_names_are_exact_per_queue_and_fields_and_never_vouch_for_a_bad_tag() {
        let n = JobName {
            id: JobId(0x0193_0000_0000_aaaa_bbbb_cccc_dddd_eeee),
            generation: 0,
            attempt: 0,
            max_attempts: 5,
            priority: DEFAULT_PRIORITY,
            group: None,
            kind: Kind::Ready,
        };
        let (q1, q2) = (11u128, 12u128);
        let a = n.format(q1);
        let b = n.format(q2);
        assert_ne!(a, b, "another queue, another tag");
        assert_eq!(a, n.format_fresh(q1));
        assert_eq!(b, n.format_fresh(q2));
        // More names than are kept, each one generation on: all exact, and `n` itself is
        // formatted afresh once it was pushed out.
        for g in 1..=(2 * MEMO as u64) {
            let m = JobName { generation: g, ..n };
            assert_eq!(m.format(q1), m.format_fresh(q1), "generation {g}");
        }
        assert!(memo_find(q1, &n).is_none(), "the oldest went");
        assert_eq!(n.format(q1), a);
        assert!(memo_find(q1, &n).is_some());
        // A wrong tag with kept fields: refused.
        let mut bad = a.to_string();
        let k = bad.find(".k").unwrap() + 2;
        let flipped = if &bad[k..k + 1] == "0" { "1" } else { "0" };
        bad.replace_range(k..k + 1, flipped);
        assert_eq!(JobName::parse(&bad, q1), Err(NameError::Tag));
        assert_eq!(JobName::parse(&a, q1), Ok(n));
        assert_eq!(JobName::parse(&a, q2), Err(NameError::Tag));
    }

    const Q: u128 = 0x0123_4567_89ab_cdef_0011_2233_4455_6677;

    fn samples() -> Vec<JobName> {
        let base = JobName::new_ready(JobId::new(1_700_000_000_000, 0xdead_beef_1234_5678_9abc), 5);
        let lease = LeaseFields {
            boot_id: u128::MAX - 7,
            boot_deadline_ns: 123_456_789_000,
            wall_deadline_ns: 1_700_000_030_000_000_000,
            token: 0xfeed_f00d_u128 << 64 | 42,
        };
        vec![
            base,
            base.next(Kind::Leased(lease), true),
            base.next(
                Kind::Delayed {
                    not_before_ns: 1_700_000_100_000_000_000,
                    boot: None,
                },
                false,
            ),
            base.next(
                Kind::Delayed {
                    not_before_ns: 1_700_000_100_000_000_000,
                    boot: Some(BootDue {
                        boot_id: u128::MAX - 3,
                        not_before_boot_ns: 987_654_321_000,
                    }),
                },
                false,
            ),
            base.next(
                Kind::Dead {
                    reason: Reason::EXHAUSTED,
                },
                false,
            ),
            base.next(
                Kind::Dead {
                    reason: Reason::new("z9").unwrap(),
                },
                false,
            ),
            base.next(
                Kind::Receipt {
                    token: lease.token,
                    acked_ns: None,
                },
                false,
            ),
            base.next(
                Kind::Receipt {
                    token: lease.token,
                    acked_ns: Some(1_700_000_200_000_000_000),
                },
                false,
            ),
            base.with_priority(7),
            base.with_priority(0).next(Kind::Leased(lease), true),
            base.with_priority(5).next(
                Kind::Receipt {
                    token: lease.token,
                    acked_ns: Some(1_700_000_200_000_000_000),
                },
                false,
            ),
            JobName {
                id: JobId(u128::MAX),
                generation: u64::MAX - 1,
                attempt: u32::MAX,
                max_attempts: u32::MAX,
                priority: 7,
                group: GroupName::new("zzzzzzzzzzzzzzzz"),
                kind: Kind::Leased(LeaseFields {
                    boot_id: u128::MAX,
                    boot_deadline_ns: u64::MAX,
                    wall_deadline_ns: u64::MAX,
                    token: u128::MAX,
                }),
            },
        ]
    }

    #[test]
    fn names_that_are_not_utf8_escape_and_come_back() {
        for raw in [&b"a\xff\\x41b"[..], b"\x80", b"plain", b"\\\xc3"] {
            let e = escape_name(raw);
            assert_eq!(unescape_name(&e).as_deref(), Some(raw), "{e}");
        }
        assert_eq!(escape_name(b"a\xffb"), "a\\xffb");
        assert_eq!(
            escape_name(b"a\x1b]0;t\x07\r\xc2\x9b"),
            "a\\x1b]0;t\\x07\\x0d\\xc2\\x9b"
        );
        assert_eq!(
            unescape_name(&escape_name(b"a\x1b[2J\n")).unwrap(),
            b"a\x1b[2J\n"
        );
        assert_eq!(unescape_name("a\\q"), None);
    }

    #[test]
    fn the_last_generation_is_refused_never_wrapped() {
        for n in samples() {
            let last = JobName {
                generation: u64::MAX,
                ..n
            };
            let s = last.format(Q);
            assert_eq!(JobName::parse(&s, Q), Err(NameError::LastGeneration), "{s}");
            assert_eq!(parse_ready(s.as_bytes()), None, "{s}");
            assert_eq!(last.next(Kind::Ready, false).generation, u64::MAX);
        }
    }

    #[test]
    fn every_kind_round_trips() {
        for n in samples() {
            let s = n.format(Q);
            assert!(s.len() <= 255 && s.len() <= NAME_MAX, "{s}");
            assert!(
                s.bytes()
                    .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase() || c == b'.'),
                "{s}"
            );
            assert_eq!(JobName::parse(&s, Q), Ok(n), "{s}");
        }
    }

    #[test]
    fn leased_name_matches_article_shape() {
        let s = samples()[1].format(Q);
        let f: Vec<&str> = s.split('.').collect();
        let widths: Vec<usize> = f.iter().map(|x| x.len()).collect();
        assert_eq!(widths, vec![32, 17, 9, 9, 33, 17, 17, 33, 17, 3]);
        assert_eq!(s.len(), 32 + 17 + 9 + 9 + 33 + 17 + 17 + 33 + 17 + 3 + 9);
    }

    #[test]
    fn one_bit_flip_in_any_field_is_caught() {
        for n in samples() {
            let s = n.format(Q);
            let tag_start = s.rfind(".k").unwrap() + 2;
            for i in 0..s.len() {
                if i >= tag_start - 2 {
                    continue; // the tag itself and the suffix
                }
                for bit in 0..4 {
                    let mut b = s.as_bytes().to_vec();
                    let Some(d) = Some(HEX_VALUE[b[i] as usize]).filter(|&v| v < 16) else {
                        continue;
                    };
                    let flipped = d ^ (1 << bit);
                    b[i] = b"0123456789abcdef"[flipped as usize];
                    let t = core::str::from_utf8(&b).unwrap();
                    let is_field_letter = i > 0 && s.as_bytes()[i - 1] == b'.';
                    // `.p3` (the default spelled out) and `.p8`.. are not in the grammar.
                    let is_priority = i > 1 && &s.as_bytes()[i - 2..i] == b".p";
                    if is_field_letter || is_priority {
                        // e.g. ".a" -> ".b": a different field, so not even the grammar fits.
                        assert!(JobName::parse(t, Q).is_err(), "{t}");
                    } else if t.contains(".gffffffffffffffff.") {
                        // A flip into the last generation is refused before the tag.
                        assert_eq!(JobName::parse(t, Q), Err(NameError::LastGeneration), "{t}");
                    } else {
                        assert_eq!(JobName::parse(t, Q), Err(NameError::Tag), "{t}");
                    }
                }
            }
            // and a wrong queue id
            assert_eq!(JobName::parse(&s, Q ^ 1), Err(NameError::Tag));
        }
    }

    #[test]
    fn foreign_names_are_syntax_errors() {
        let good = samples()[0].format(Q);
        let upper = good.to_uppercase();
        let cases = [
            "",
            "README",
            ".sqj",
            "x.sqj",
            upper.as_str(),
            &good[1..],
            &good[..good.len() - 1],
        ];
        for c in cases {
            assert_eq!(JobName::parse(c, Q), Err(NameError::Syntax), "{c:?}");
        }
        let with_extra = good.replace(".k", ".zz.k");
        assert_eq!(JobName::parse(&with_extra, Q), Err(NameError::Syntax));
        let rct_as_sqj = samples()[6].format(Q).replace(".rct", ".sqj");
        assert_eq!(JobName::parse(&rct_as_sqj, Q), Err(NameError::Syntax));
        assert!(Reason::new("Bad").is_none() && Reason::new("").is_none());
        assert!(Reason::new("abcdefghijklmnopq").is_none());
    }

    #[test]
    fn priority_fields_are_one_digit_and_never_the_default() {
        let base = JobName::new_ready(JobId::new(1_700_000_000_000, 5), 5);
        assert!(
            !base.format(Q).contains(".p"),
            "the default writes no field"
        );
        let p7 = base.with_priority(7).format(Q);
        assert_eq!(p7.len(), base.format(Q).len() + 3);
        assert!(p7.contains(".m00000005.p7.k"), "{p7}");
        // `.p3` (the default spelled out) and `.p8` (no such level) are not names.
        for bad in ["3", "8", "07", "a"] {
            let raw = format!(
                "{:032x}.g{:016x}.a{:08x}.m{:08x}.p{bad}",
                base.id.0, 0, 0, 5
            );
            let name = format!(
                "{raw}.k{:016x}.sqj",
                tag_of(Q, format!("{raw}.sqj").as_bytes())
            );
            assert_eq!(JobName::parse(&name, Q), Err(NameError::Syntax), "{name}");
        }
    }

    #[test]
    fn delays_are_due_by_the_boot_clock_on_their_boot_and_by_the_wall_clock_elsewhere() {
        let k = Kind::Delayed {
            not_before_ns: 1_000,
            boot: Some(BootDue {
                boot_id: 9,
                not_before_boot_ns: 500,
            }),
        };
        // This boot: the wall clock (far ahead or far behind) does not matter.
        assert!(!delay_due(&k, 9, 499, u64::MAX));
        assert!(delay_due(&k, 9, 500, 0));
        assert_eq!(due_wall_ns(&k, 9, 400, 10_000), 10_100);
        // Another boot: the wall clock decides.
        assert!(!delay_due(&k, 8, u64::MAX, 999));
        assert!(delay_due(&k, 8, 0, 1_000));
        assert_eq!(due_wall_ns(&k, 8, 400, 10_000), 1_000);
        let v1 = Kind::Delayed {
            not_before_ns: 1_000,
            boot: None,
        };
        assert!(!delay_due(&v1, 9, u64::MAX, 999) && delay_due(&v1, 9, 0, 1_000));
    }

    #[test]
    fn ids_sort_by_time() {
        let a = JobId::new(1000, u128::MAX);
        let b = JobId::new(1001, 0);
        assert!(a < b && a.to_string() < b.to_string());
        assert_eq!(b.unix_ms(), 1001);
    }

    #[test]
    fn tag_bytes_are_as_documented() {
        // Recompute the documented construction by hand for one name.
        let n = samples()[0];
        let canon = format!(
            "{:032x}.g{:016x}.a{:08x}.m{:08x}.sqj",
            n.id.0, n.generation, n.attempt, n.max_attempts
        );
        let mut h = Sha256::new();
        h.update(b"steadq-name-v1");
        h.update([0u8]);
        h.update(Q.to_be_bytes());
        h.update(canon.as_bytes());
        let d = h.finalize();
        let want = u64::from_be_bytes(d[..8].try_into().unwrap());
        assert_eq!(n.tag(Q), want);
        assert!(n.format(Q).ends_with(&format!(".k{want:016x}.sqj")));
    }

    #[test]
    fn the_raw_tag_is_the_tag_of_every_kind() {
        let r = JobName::new_ready(JobId(0x1234_5678_9abc_def0_1122_3344_5566_7788), 5);
        let l = LeaseFields {
            boot_id: 1,
            boot_deadline_ns: 2,
            wall_deadline_ns: 3,
            token: 4,
        };
        let kinds = [
            Kind::Ready,
            Kind::Leased(l),
            Kind::Delayed {
                not_before_ns: 9,
                boot: None,
            },
            Kind::Delayed {
                not_before_ns: 9,
                boot: Some(crate::disk::name::BootDue {
                    boot_id: 7,
                    not_before_boot_ns: 8,
                }),
            },
            Kind::Dead {
                reason: Reason::EXHAUSTED,
            },
            Kind::Receipt {
                token: 4,
                acked_ns: None,
            },
            Kind::Receipt {
                token: 4,
                acked_ns: Some(6),
            },
        ];
        for k in kinds {
            let n = r.next(k, true);
            let qid = 0xfeed_u128 << 64 | 0xbeef;
            let name = n.format(qid);
            assert_eq!(raw_tag(qid, &name), Some(n.tag(qid)), "{name}");
            assert_ne!(raw_tag(qid + 1, &name), Some(n.tag(qid)), "{name}");
        }
    }

    #[test]
    fn the_ready_fast_path_agrees_with_the_general_parser() {
        let n = JobName {
            generation: 0x0123_4567_89ab_cdef,
            attempt: 0xdead_beef,
            max_attempts: 7,
            ..JobName::new_ready(JobId(0xfedc_ba98_7654_3210_0011_2233_4455_6677), 5)
        };
        let good = n.format(42).to_string();
        assert_eq!(
            parse_ready(good.as_bytes()),
            JobName::parse_untagged(&good).ok()
        );
        assert!(parse_ready(good.as_bytes()).is_some());
        // Every single-byte change: the fast path either defers (None) or agrees exactly.
        for i in 0..good.len() {
            for c in [
                b'0', b'9', b'a', b'f', b'g', b'A', b'F', b'.', b'k', b'/', 0xff,
            ] {
                let mut b = good.clone().into_bytes();
                b[i] = c;
                if let Some(fast) = parse_ready(&b) {
                    let s = core::str::from_utf8(&b).expect("ascii");
                    assert_eq!(Some(fast), JobName::parse_untagged(s).ok(), "{s}");
                } else if let Ok(s) = core::str::from_utf8(&b) {
                    assert!(
                        JobName::parse_untagged(s).is_err(),
                        "{s} deferred yet valid"
                    );
                }
            }
        }
        let leased = n.next(
            Kind::Leased(LeaseFields {
                boot_id: 1,
                boot_deadline_ns: 2,
                wall_deadline_ns: 3,
                token: 4,
            }),
            true,
        );
        assert_eq!(parse_ready(leased.format(42).as_bytes()), None);
    }

    #[test]
    fn parse_hex_takes_exactly_width_lowercase_digits() {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for width in [1usize, 2, 8, 15, 16, 17, 31, 32] {
            for _ in 0..200 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let v = (u128::from(x) << 64 | u128::from(x.rotate_left(29))) >> (128 - 4 * width);
                let text = format!("{v:0width$x}");
                assert_eq!(parse_hex(text.as_bytes(), width), Some(v), "{text}");
                let mut bad = text.clone().into_bytes();
                let at = (x as usize) % width;
                for c in [b'A', b'F', b'g', b'/', b':', b'`', b' ', 0xFF] {
                    bad[at] = c;
                    assert_eq!(parse_hex(&bad, width), None, "{:?}", bad);
                }
                assert_eq!(parse_hex(text.as_bytes(), width + 1), None);
            }
        }
        assert_eq!(parse_hex(b"", 0), Some(0));
        assert_eq!(parse_hex(&[b'0'; 33], 33), None);
    }

    /// The group field: round-trips with and without a priority, is covered by the tag,
    /// survives every transition, and a job without one keeps its old name byte for byte.
    #[test]
    fn a_group_field_round_trips_and_is_tagged() {
        let g = GroupName::new("ffmpeg").unwrap();
        let base = JobName::new_ready(JobId(0x0193_0000_0000_aaaa_bbbb_cccc_dddd_eeee), 5);
        for p in [DEFAULT_PRIORITY, 0, 7] {
            let n = base.with_priority(p).with_group(Some(g));
            let s = n.format(Q).to_string();
            assert!(s.contains(".qffmpeg.k"), "{s}");
            assert_eq!(JobName::parse(&s, Q), Ok(n));
            let leased = n.next(
                Kind::Leased(LeaseFields {
                    boot_id: 1,
                    boot_deadline_ns: 2,
                    wall_deadline_ns: 3,
                    token: 4,
                }),
                true,
            );
            assert_eq!(leased.group, Some(g));
            let dead = leased.next(
                Kind::Dead {
                    reason: Reason::FAILED,
                },
                false,
            );
            assert_eq!(JobName::parse(&dead.format(Q), Q).unwrap().group, Some(g));
            // Dropping the field changes the tag: the name no longer parses.
            let forged = s.replace(".qffmpeg", "");
            assert_eq!(JobName::parse(&forged, Q), Err(NameError::Tag), "{forged}");
        }
        // No group: exactly the name without the field (what every older name is).
        let plain = base.format(Q).to_string();
        assert!(!plain.contains(".q"), "{plain}");
        assert_eq!(plain.len(), crate::disk::scan::READY_NAME_LEN);
        assert_eq!(parse_ready(plain.as_bytes()).unwrap().0, base);
        // Bad group fields are no names.
        for bad in ["", "FFMPEG", "a-b", "0123456789abcdefg"] {
            let s = plain.replace(".m00000005", &format!(".m00000005.q{bad}"));
            assert_eq!(
                JobName::parse_untagged(&s).map(|_| ()),
                Err(NameError::Syntax),
                "{s}"
            );
        }
        // The longest name: leased, priority and a 16-character group.
        let longest = samples()
            .into_iter()
            .map(|n| n.format(Q).len())
            .max()
            .unwrap();
        assert_eq!(longest, 217);
        assert!(longest <= NAME_MAX);
    }

    #[test]
    fn group_names_parse_dont_validate() {
        assert_eq!(GroupName::new("ffmpeg").unwrap().as_str(), "ffmpeg");
        assert!(GroupName::new("0123456789abcdef").is_some());
        for bad in ["", "Ffmpeg", "a b", "a.b", "0123456789abcdefg", "é"] {
            assert_eq!(GroupName::new(bad), None, "{bad:?}");
            assert!(bad.parse::<GroupName>().is_err());
        }
    }
}
