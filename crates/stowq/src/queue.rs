//! The queue handle, its types, and the requests every operation is built from (the
//! operations themselves are in `lifecycle.rs` and `admin.rs`). Each transition is one
//! conditional create of the job's next generation ([`Queue::step`]: the linearization
//! point), followed by index upkeep that is only a hint: the new marker is put first, the old
//! one deleted after, so a job is never unindexed while its markers are healthy.

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::http::Fail;
use crate::keys::{id_hex, Keys, Marker, Record, State};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Queue options.
#[derive(Clone, Debug)]
pub struct Options {
    /// Lease length given by `claim`, ms of the service's clock.
    pub lease_ms: i64,
    /// Claims after which a nack or an expired lease sends the job to dead.
    pub max_attempts: u32,
    /// Sends of one request before giving up (at least 1).
    pub tries: u32,
    /// Pause before the second send; doubles each time.
    pub backoff: Duration,
    /// Keys asked for per listing page.
    pub page: u32,
    /// The youngest finished chain [`Queue::compact`] may delete, ms since its done record
    /// (default 1 h); `compact` refuses an `older_than` below it. A lease transition made
    /// later than this after its lease's generation checks that the chain was not compacted
    /// under it (one GET). Every client of a queue must use the same value, or a larger one
    /// for compaction than for leases.
    pub compact_guard_ms: i64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            lease_ms: 30_000,
            max_attempts: 5,
            tries: 3,
            backoff: Duration::from_millis(50),
            page: 100,
            compact_guard_ms: 3_600_000,
        }
    }
}

/// A queue under one prefix of one bucket.
#[derive(Debug)]
pub struct Queue {
    /// The S3 client (its clock and request counter are public).
    pub client: Client,
    /// Options.
    pub options: Options,
    pub(crate) keys: Keys,
    pub(crate) queue_id: u128,
    pub(crate) lost_races: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    /// Due ready markers left over from this handle's last claim listing, and when it was
    /// made: the next claims try them before listing again ([`CANDIDATES_KEEP`]).
    pub(crate) candidates: Mutex<Candidates>,
    /// Priority levels (a bit per level) this handle saw flagged in use in the ready index
    /// ([`Keys::level_flag`]): its claims list those levels' indexes too.
    pub(crate) levels_seen: AtomicU8,
    /// Levels whose flags this handle knows exist in all 16 shards (it put them, or found
    /// the last one): its enqueues of them skip the check.
    pub(crate) levels_flagged: AtomicU8,
    /// The service refused a multi-object delete: this handle deletes one key at a time.
    pub(crate) multi_delete_refused: AtomicBool,
}

/// When a claim listing was made, and its due ready markers (key, parsed) not yet tried.
pub(crate) type Candidates = (Option<Instant>, Vec<(String, Marker)>);

/// The priority level of a job enqueued without one (as a local queue's default, 3). Its
/// markers and records are those of a StowQ without levels.
pub const DEFAULT_LEVEL: u8 = steadq::DEFAULT_PRIORITY;

/// How long the due ready markers of one claim listing are kept for the claims after it.
/// A marker is a hint whatever its age (a claim's conditional create decides), so a stale one
/// costs one refused create (412), like a lost race; a lost race drops the rest, since
/// other workers are then claiming from the same markers.
pub const CANDIDATES_KEEP: Duration = Duration::from_secs(2);

/// A claimed job: the verified payload and what the next transition needs.
#[derive(Clone, Debug)]
pub struct Lease {
    /// Job id.
    pub id: u128,
    /// Verified payload (the envelope checked against its SHA-256 digests).
    pub payload: Vec<u8>,
    /// This claim's attempt number (1 for the first claim).
    pub attempt: u32,
    /// Lease deadline, unix ms of the service's clock. The holder should finish (or renew)
    /// about 1 s before: its own reading of the service clock may lag by that much.
    pub deadline_ms: i64,
    /// Lease token, 32 hex.
    pub token: String,
    /// The job's priority level, 0..=7.
    pub priority: u8,
    pub(crate) gen: u64,
    /// When the held generation was written, unix ms of the service's clock (its record's
    /// `at`): the compaction fence's reference time.
    pub(crate) base_at_ms: i64,
    /// The batch this lease was claimed in ([`Queue::claim_batch`]), whose one leased
    /// marker indexes it; `None` for a lease with its own leased marker.
    pub(crate) batch: Option<Arc<BatchHold>>,
}

/// A claim batch's leased marker and which of its jobs this handle has settled (acked,
/// nacked, failed, renewed or lost): the marker is deleted when all of them are.
#[derive(Debug)]
pub(crate) struct BatchHold {
    /// The batch leased marker.
    pub(crate) key: String,
    /// Jobs the marker names.
    pub(crate) jobs: usize,
    /// Jobs settled so far.
    pub(crate) settled: Mutex<std::collections::HashSet<u128>>,
}

impl BatchHold {
    /// Job `id` of the batch is settled: true when it was the last one (the marker may go);
    /// a job settled again (a spent lease acked twice) changes nothing.
    pub(crate) fn settle(&self, id: u128) -> bool {
        let Ok(mut s) = self.settled.lock() else {
            return false;
        };
        s.insert(id) && s.len() == self.jobs
    }
}

impl Lease {
    /// The generation this lease holds (the next transition creates `gen + 1`).
    pub fn generation(&self) -> u64 {
        self.gen
    }
}

/// Proof of an ack: the done generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// Job id.
    pub id: u128,
    /// The done generation's number.
    pub gen: u64,
    /// Service time of the ack, unix ms.
    pub at_ms: i64,
    /// Attempt that succeeded.
    pub attempt: u32,
}

/// Where a nack sent the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nacked {
    /// Ready again, not before this service time (unix ms).
    Ready(i64),
    /// Out of attempts: dead.
    Dead,
}

/// What a recovery pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoverReport {
    /// Expired leases made ready.
    pub ready: u32,
    /// Expired leases out of attempts, sent to dead.
    pub dead: u32,
    /// Stale markers removed (their job had moved on).
    pub stale: u32,
}

/// What a repair did to the index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Markers put for jobs whose newest generation had none.
    pub put: u32,
    /// Stale markers deleted.
    pub deleted: u32,
    /// Objects that are not StowQ's: a job's newest generation that is not a record (the job
    /// left as it is, markers included), and keys under the index or chain prefixes that are
    /// no marker or generation. Left as they are; logged (`log::warn!`, the first 20 named).
    pub foreign: u32,
}

/// What [`Queue::check`] found: what [`Queue::repair`] would change, and the objects it
/// would leave as they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Chains read (jobs, compacted ones included).
    pub chains: u64,
    /// Index markers read.
    pub markers: u64,
    /// Jobs whose newest generation has no marker: (id, generation, its state, the marker
    /// `repair` would put).
    pub missing: Vec<(u128, u64, State, String)>,
    /// Markers of a job's older generation: (key, job id, the job's newest generation); a
    /// batch marker ([`Queue::claim_batch`], [`Queue::ack_batch`]) is stale when none of the
    /// jobs it names is at the generation it names (then one of them is given).
    pub stale: Vec<(String, u128, u64)>,
    /// Markers of no job (no chain, or a compacted one; a batch marker none of whose jobs
    /// has a chain).
    pub orphans: Vec<String>,
    /// Keys under the index or chain prefixes that are no marker or generation, and newest
    /// generations that are not records.
    pub foreign: Vec<String>,
}

impl CheckReport {
    /// Problems found: missing, stale and orphaned markers and foreign objects.
    pub fn problems(&self) -> usize {
        self.missing.len() + self.stale.len() + self.orphans.len() + self.foreign.len()
    }
}

/// What a compaction did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// Chains compacted to their receipt.
    pub chains: u32,
    /// Objects deleted (generations and done markers).
    pub objects: u32,
}

/// Counts per state, from the index (hints: exact unless a crash left a marker behind).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// Ready and due.
    pub ready: u64,
    /// Ready but not yet due (nacked with a delay).
    pub delayed: u64,
    /// Leased, deadline not passed.
    pub leased: u64,
    /// Leased past the deadline (recoverable).
    pub expired: u64,
    /// Acked.
    pub done: u64,
    /// Dead-lettered.
    pub dead: u64,
    /// Ready and due jobs per priority level (index = level, 0..=7), as a local queue's
    /// `ready_by_priority`.
    pub ready_by_priority: [u64; 8],
}

/// One job as the index lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Job id.
    pub id: u128,
    /// State.
    pub state: State,
    /// Generation.
    pub gen: u64,
    /// Attempts.
    pub attempt: u32,
    /// Due, deadline or finish time, unix ms.
    pub sort_ms: i64,
    /// Priority level, 0..=7 (higher is claimed first; [`DEFAULT_LEVEL`] unless enqueued
    /// with another).
    pub priority: u8,
}

/// How a conditional create ended.
pub(crate) enum Create {
    /// Ours is in place.
    Done,
    /// Someone else's is: ours did not and will not happen.
    Taken,
}

pub(crate) fn random_u128() -> u128 {
    let mut b = [0u8; 16];
    // getrandom only fails without an entropy source; ids would then collide, so stop.
    getrandom::fill(&mut b).expect("no system random source");
    u128::from_be_bytes(b)
}

pub(crate) fn transport(f: &Fail) -> ErrorKind {
    match f {
        Fail::NotSent(m) | Fail::MaybeSent(m) => ErrorKind::Transport(m.clone()),
    }
}

/// Whether an error body is S3's `NoSuchBucket`.
fn no_such_bucket(body: &[u8]) -> bool {
    let code = b"<Code>NoSuchBucket</Code>";
    body.windows(code.len()).any(|w| w == code)
}

pub(crate) fn is_taken(status: u16) -> bool {
    status == 412
}

/// Extra reads [`Queue::open`] and [`Queue::create`] make at most to learn the service's
/// clock when the `Date` headers seen so far do not agree (with the wall clock, or two in a
/// row).
const CLOCK_SAMPLES: u32 = 3;

impl Queue {
    /// Create the queue under `prefix` (or open it if it exists): its identity object is
    /// created with `If-None-Match: *`, so concurrent creators agree on one queue id. A
    /// queue it creates is checked to be on a service that honours that header (one
    /// conditional create more, which must be refused).
    ///
    /// # Errors
    /// Not done when nothing was created (also when the service ignores `If-None-Match`);
    /// indeterminate if the identity's create may have been applied but could not be read
    /// back.
    pub fn create(client: Client, prefix: &str, options: Options) -> Result<Queue> {
        let keys = Keys::new(prefix);
        let mut q = Queue {
            client,
            options,
            keys,
            queue_id: 0,
            lost_races: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            candidates: Mutex::default(),
            levels_seen: AtomicU8::new(0),
            levels_flagged: AtomicU8::new(0),
            multi_delete_refused: AtomicBool::new(false),
        };
        // An existing queue is opened as it is: on a service that ignores If-None-Match the
        // create below would rewrite its identity, and every job's envelope would then fail
        // verification.
        let key = q.keys.identity();
        if q.get(&key)?.is_some() {
            q.queue_id = q.read_identity()?;
            q.learn_clock()?;
            return Ok(q);
        }
        let id = random_u128();
        let body = format!("stowq 1\nqueue {}\n", id_hex(id));
        match q.create_once(&key, body.as_bytes())? {
            Create::Done => {
                q.refuse_unconditional_service(&key, body.as_bytes())?;
                q.queue_id = id;
                q.learn_clock()?;
                Ok(q)
            }
            Create::Taken => {
                q.queue_id = q.read_identity()?;
                q.learn_clock()?;
                Ok(q)
            }
        }
    }

    /// After creating the identity `key` with `body`: the same conditional create again must
    /// be refused (412). A service that answers 200 ignores `If-None-Match` and cannot run a
    /// queue (every race would have many winners): the identity is deleted again and the
    /// creation reported not done (indeterminate if that delete fails).
    fn refuse_unconditional_service(&self, key: &str, body: &[u8]) -> Result<()> {
        let Ok(r) = self.client.put_if_absent(key, body) else {
            return Ok(()); // no answer: nothing learned, the create stands
        };
        if r.status != 200 {
            return Ok(());
        }
        let why = format!(
            "the service ignores If-None-Match: a second conditional create of {key} was \
             answered 200; StowQ needs conditional writes (If-None-Match: *)"
        );
        if self.hint(false, key) {
            Err(Error::not_done(ErrorKind::Config(format!(
                "{why}; nothing created"
            ))))
        } else {
            let left = format!("{why}; {key} could not be deleted again");
            Err(Error::indeterminate(ErrorKind::Config(left)))
        }
    }

    /// Open the queue under `prefix`.
    ///
    /// # Errors
    /// Not done: [`ErrorKind::NotAQueue`] if the identity is missing or malformed, or a
    /// transport or status error.
    pub fn open(client: Client, prefix: &str, options: Options) -> Result<Queue> {
        let mut q = Queue {
            client,
            options,
            keys: Keys::new(prefix),
            queue_id: 0,
            lost_races: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            candidates: Mutex::default(),
            levels_seen: AtomicU8::new(0),
            levels_flagged: AtomicU8::new(0),
            multi_delete_refused: AtomicBool::new(false),
        };
        q.queue_id = q.read_identity()?;
        q.learn_clock()?;
        Ok(q)
    }

    /// Make the service's clock known before this handle writes any deadline: a handle whose
    /// `Date` headers so far agreed neither with this machine's wall clock nor with each other
    /// ([`crate::clock::ServiceClock`]) reads the identity again, up to [`CLOCK_SAMPLES`]
    /// times, until they do (no extra read in the common case). A service
    /// that sends no `Date` leaves this machine's wall clock in use, as before.
    ///
    /// # Errors
    /// Not done ([`ErrorKind::Config`]) if the answers' `Date` headers never agree (with the
    /// wall clock or two in a row): leases could be judged by nothing trustworthy. A transport or status error of a
    /// read, as [`Queue::open`].
    fn learn_clock(&self) -> Result<()> {
        let clock = &self.client.clock;
        for _ in 0..CLOCK_SAMPLES {
            if !clock.unconfirmed() {
                return Ok(());
            }
            self.get(&self.keys.identity())?;
        }
        if !clock.unconfirmed() {
            return Ok(());
        }
        Err(Error::not_done(ErrorKind::Config(format!(
            "{}:{}: the Date headers of {} answers in a row disagree by more than {} s (with each \
             other and with this machine's clock): the service's clock (which leases are measured by) cannot be learned; is a proxy \
             rewriting Date?",
            self.client.config.host,
            self.client.config.port,
            CLOCK_SAMPLES + 1,
            crate::clock::SKEW_TOLERANCE_MS / 1000
        ))))
    }

    /// Before a lease deadline is written: if the last `Date` was far ahead of this handle's
    /// service clock and awaits confirmation ([`crate::clock::ServiceClock::in_doubt`]),
    /// read the identity once more, so that a real step (the service's clock corrected, this
    /// machine back from sleep) is taken before the deadline is computed, and a single bogus
    /// `Date` is dropped. Without this the first claim or renewal after a step wrote its
    /// deadline by the old clock: expired at birth to every handle that knew the new time,
    /// so its job was delivered again. Nothing is read in the common case; a failed read
    /// changes nothing (the deadline is then written as before).
    pub(crate) fn settle_clock(&self) {
        if self.client.clock.in_doubt() {
            let _ = self.client.get(&self.keys.identity());
        }
    }

    fn read_identity(&self) -> Result<u128> {
        let key = self.keys.identity();
        let body = self
            .get(&key)?
            .ok_or_else(|| Error::not_done(ErrorKind::NotAQueue(format!("no {key}"))))?;
        let s = String::from_utf8_lossy(&body);
        let hex = s
            .strip_prefix("stowq 1\nqueue ")
            .map(str::trim)
            .ok_or_else(|| Error::not_done(ErrorKind::NotAQueue(format!("bad {key}"))))?;
        u128::from_str_radix(hex, 16)
            .map_err(|_| Error::not_done(ErrorKind::NotAQueue(format!("bad id in {key}"))))
    }

    /// The queue id written into every envelope.
    pub fn queue_id(&self) -> u128 {
        self.queue_id
    }

    /// The key layout.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Take up lease `token` on generation `gen` of job `id` again (another process claimed
    /// it, e.g. `stowq claim`): one GET checks that the generation is leased under `token`.
    /// The payload is not fetched (empty).
    ///
    /// # Errors
    /// Not done: [`ErrorKind::NotFound`] if that generation is not a lease with that token,
    /// or transport or status errors.
    pub fn resume_lease(&self, id: u128, gen: u64, token: &str) -> Result<Lease> {
        let body = self.get(&self.keys.gen(id, gen))?;
        let rec = body.as_deref().and_then(Record::decode);
        match rec {
            Some(r) if r.state == State::Leased && r.token == token => Ok(Lease {
                id,
                payload: Vec::new(),
                attempt: r.attempt,
                deadline_ms: r.due_ms,
                token: r.token,
                priority: r.level,
                gen,
                base_at_ms: r.at_ms,
                batch: None,
            }),
            _ => Err(Error::not_done(ErrorKind::NotFound)),
        }
    }

    /// Jobs claims dead-lettered so far because their envelope failed verification (each
    /// also logged with `log::warn!`).
    pub fn claims_dead_lettered(&self) -> u64 {
        self.dead_lettered.load(Ordering::Relaxed)
    }

    /// Claims lost to another worker's create (412) so far.
    pub fn lost_races(&self) -> u64 {
        self.lost_races.load(Ordering::Relaxed)
    }

    pub(crate) fn pause(&self, attempt: u32) {
        std::thread::sleep(self.options.backoff * (1 << attempt.min(6)));
    }

    /// GET with retries: `Ok(None)` on 404.
    pub(crate) fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let mut last = ErrorKind::Transport("no try".into());
        for i in 0..self.options.tries.max(1) {
            if i > 0 {
                self.pause(i - 1);
            }
            match self.client.get(key) {
                Ok(r) if r.status == 200 => return Ok(Some(r.body)),
                // The bucket itself is missing (a typo in s3://bucket/...): say so, not "no
                // such key" (which read as "not a stowq queue: no P/queue").
                Ok(r) if r.status == 404 && no_such_bucket(&r.body) => {
                    return Err(Error::not_done(ErrorKind::Status {
                        status: 404,
                        what: format!(
                            "bucket {} does not exist (NoSuchBucket)",
                            self.client.bucket
                        ),
                    }))
                }
                Ok(r) if r.status == 404 => return Ok(None),
                Ok(r) => {
                    last = ErrorKind::Status {
                        status: r.status,
                        what: format!("GET {key}"),
                    };
                    if r.status < 500 {
                        break;
                    }
                }
                Err(f) => last = transport(&f),
            }
        }
        Err(Error::not_done(last))
    }

    /// One listing page, retried on 5xx (moto answers 500 to some listings racing writes)
    /// and on transport errors: a listing changes nothing.
    pub(crate) fn list_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        token: Option<&str>,
        max: u32,
    ) -> Result<crate::client::Page> {
        let mut last = ErrorKind::Transport("no try".into());
        for i in 0..self.options.tries.max(1) {
            if i > 0 {
                self.pause(i - 1);
            }
            match self.client.list(prefix, after, token, max) {
                Ok(Ok(p)) => return Ok(p),
                Ok(Err(status)) => {
                    last = ErrorKind::Status {
                        status,
                        what: format!("LIST {prefix}"),
                    };
                    if status < 500 {
                        break;
                    }
                }
                Err(f) => last = transport(&f),
            }
        }
        Err(Error::not_done(last))
    }

    /// Idempotent index upkeep (PUT of an empty marker, or DELETE): true when answered 2xx.
    pub(crate) fn hint(&self, put: bool, key: &str) -> bool {
        for i in 0..self.options.tries.max(1) {
            if i > 0 {
                self.pause(i - 1);
            }
            let r = if put {
                self.client.put(key, b"")
            } else {
                self.client.delete(key)
            };
            if let Ok(r) = r {
                if (200..300).contains(&r.status) {
                    return true;
                }
                if r.status < 500 {
                    return false;
                }
            }
        }
        false
    }

    /// Delete index markers `keys` (hints): one multi-object delete per 1,000 keys, or one
    /// DELETE each when the service refuses it (then this handle stops asking). Returns how
    /// many were deleted (answered 2xx).
    pub(crate) fn delete_hints(&self, keys: &[String]) -> usize {
        if keys.len() == 1 || self.multi_delete_refused.load(Ordering::Relaxed) {
            return keys.iter().filter(|k| self.hint(false, k)).count();
        }
        let mut n = 0;
        for chunk in keys.chunks(1000) {
            let left: Vec<String> = match self.client.delete_many(chunk) {
                Ok(Ok(failed)) => failed,
                Ok(Err(status)) if status < 500 || status == 501 => {
                    log::warn!(
                        "the service refused a multi-object delete (HTTP {status}): deleting one key at a time"
                    );
                    self.multi_delete_refused.store(true, Ordering::Relaxed);
                    chunk.to_vec()
                }
                _ => chunk.to_vec(),
            };
            n += chunk.len() - left.len();
            n += left.iter().filter(|k| self.hint(false, k)).count();
        }
        n
    }

    /// Whether this handle stopped using multi-object deletes (the service refused one).
    pub fn multi_delete_refused(&self) -> bool {
        self.multi_delete_refused.load(Ordering::Relaxed)
    }

    /// The conditional create that linearizes a transition: sends `body` to `key` with
    /// `If-None-Match: *` up to `tries` times. After any send that may have been applied
    /// (lost response, timeout, 5xx), a 412 or a final failure is settled by reading the key
    /// back and comparing with `body` (which holds a random nonce).
    pub(crate) fn create_once(&self, key: &str, body: &[u8]) -> Result<Create> {
        let mut maybe = false;
        let mut last = ErrorKind::Transport("no try".into());
        for i in 0..self.options.tries.max(1) {
            if i > 0 {
                self.pause(i - 1);
            }
            match self.client.put_if_absent(key, body) {
                Ok(r) if r.status == 200 => return Ok(Create::Done),
                // 409 (ConditionalRequestConflict): a conflicting write was in progress and
                // ours was not applied; send again.
                Ok(r) if r.status == 409 => {
                    last = ErrorKind::Status {
                        status: 409,
                        what: format!("conditional PUT {key}"),
                    };
                }
                Ok(r) if is_taken(r.status) && !maybe => return Ok(Create::Taken),
                Ok(r) if is_taken(r.status) => return self.read_back(key, body),
                Ok(r) => {
                    last = ErrorKind::Status {
                        status: r.status,
                        what: format!("conditional PUT {key}"),
                    };
                    if r.status < 500 {
                        // A definite refusal of this send; an earlier send may still count.
                        break;
                    }
                    maybe = true;
                }
                Err(f @ Fail::NotSent(_)) => last = transport(&f),
                Err(f @ Fail::MaybeSent(_)) => {
                    last = transport(&f);
                    maybe = true;
                }
            }
        }
        if !maybe {
            return Err(Error::not_done(last));
        }
        self.read_back(key, body).map_err(|e| Error {
            kind: match e.kind {
                ErrorKind::NotFound => last,
                k => k,
            },
            ..e
        })
    }

    /// After a send that may have been applied: our body in place is done, another's is taken.
    /// Absent, or unreadable, is indeterminate: our request may still be in flight.
    pub(crate) fn read_back(&self, key: &str, body: &[u8]) -> Result<Create> {
        match self.get(key) {
            Ok(Some(b)) if b == body => Ok(Create::Done),
            Ok(Some(_)) => Ok(Create::Taken),
            Ok(None) => Err(Error::indeterminate(ErrorKind::NotFound)),
            Err(e) => Err(Error::indeterminate(e.kind)),
        }
    }

    pub(crate) fn new_record(
        &self,
        state: State,
        attempt: u32,
        due_ms: i64,
        token: &str,
        reason: &str,
    ) -> Record {
        Record {
            state,
            attempt,
            at_ms: self.client.clock.now_ms(),
            due_ms,
            token: token.to_string(),
            nonce: id_hex(random_u128()),
            reason: reason.to_string(),
            level: DEFAULT_LEVEL,
        }
    }

    /// The compaction fence, after our create of `rec` as generation `new_gen` of `id`
    /// succeeded: [`Queue::compact`] deletes a finished chain from generation 0 upwards, so a
    /// create that succeeded only because compaction had deleted its key finds generation 0
    /// gone and the receipt above it. Then ours is a stray below the chain's newest
    /// generation: it is deleted with its marker and `Ok(false)` returned (the transition did
    /// not happen). One ranged GET of one byte (and a LIST if generation 0 is gone).
    ///
    /// # Errors
    /// Indeterminate when the check cannot be made: our create is in place, and whether it
    /// counts is unknown.
    pub(crate) fn chain_alive(&self, id: u128, new_gen: u64, rec: &Record) -> Result<bool> {
        let key0 = self.keys.gen(id, 0);
        let mut last = ErrorKind::Transport("no try".into());
        for i in 0..self.options.tries.max(1) {
            if i > 0 {
                self.pause(i - 1);
            }
            let r = self
                .client
                .request("GET", &key0, &[], &[("range", "bytes=0-0".into())], b"");
            match r {
                Ok(r) if r.status == 200 || r.status == 206 => return Ok(true),
                Ok(r) if r.status == 404 => return self.unless_stray(id, new_gen, rec),
                Ok(r) => {
                    last = ErrorKind::Status {
                        status: r.status,
                        what: format!("GET {key0} (compaction fence)"),
                    }
                }
                Err(f) => last = transport(&f),
            }
        }
        Err(Error::indeterminate(last))
    }

    /// Generation 0 of `id` is gone: our create of `new_gen` is a stray of a compacted chain
    /// if a newer generation (the receipt) exists; then it is deleted with its marker and
    /// `Ok(false)` returned. Otherwise generation 0 was lost some other way and ours is the
    /// newest: it counts (`Ok(true)`). One LIST.
    ///
    /// # Errors
    /// Indeterminate if the chain cannot be listed.
    pub(crate) fn unless_stray(&self, id: u128, new_gen: u64, rec: &Record) -> Result<bool> {
        let chain = format!("{}{}/", self.keys.chains(), id_hex(id));
        let page = self
            .list_page(&chain, None, None, 1000)
            .map_err(|e| Error::indeterminate(e.kind))?;
        let newer = page
            .entries
            .iter()
            .filter_map(|e| self.keys.parse_gen(&e.key))
            .any(|(_, g)| g > new_gen);
        if newer {
            self.hint(false, &self.keys.marker(id, new_gen, rec));
            self.hint(false, &self.keys.gen(id, new_gen));
        }
        Ok(!newer)
    }

    /// Whether a create made now, from a generation written at `base_at_ms`, may have met a
    /// compacted chain: only past `compact_guard_ms` after it (less a 10 s margin for the
    /// writers' clock lag and the service's one-second `Date` resolution).
    pub(crate) fn may_be_compacted(&self, base_at_ms: i64) -> bool {
        self.client.clock.upper_ms() + 10_000 >= base_at_ms + self.options.compact_guard_ms
    }

    /// [`Queue::step`] on behalf of index marker `marker` found by a listing (a claim, a
    /// recovery, a requeue): a marker of a generation above 0 first has that generation's
    /// record read (one GET). A marker put by SteadQ always has one (the record is written
    /// first); a marker naming a generation that does not exist is stale (its chain was
    /// compacted) or not SteadQ's (written by hand, restored from an older backup than the
    /// chains). Stepping from it created a generation above a gap in the chain, a second
    /// lease of a job already leased from its true marker. Such a marker is deleted, like
    /// `repair` deletes one that is not its job's newest, with a warning: `Ok(false)`.
    /// Generation 0 is not read: its object is the envelope, which the claim reads anyway.
    pub(crate) fn step_from_marker(
        &self,
        id: u128,
        gen: u64,
        marker: &str,
        rec: &Record,
    ) -> Result<bool> {
        if !self.create_from_marker(id, gen, Some(marker), rec)? {
            return Ok(false);
        }
        self.upkeep(id, gen, Some(marker), rec);
        Ok(true)
    }

    /// The create of [`Queue::step_from_marker`] without its index upkeep: a batch claim or
    /// recovery indexes its jobs with one batch marker. `marker`, the per-job marker the step
    /// is made from (`None`: a batch marker's entry), is deleted when it names a generation
    /// that does not exist. `Ok(false)`: not stepped (taken, or no such generation).
    pub(crate) fn create_from_marker(
        &self,
        id: u128,
        gen: u64,
        marker: Option<&str>,
        rec: &Record,
    ) -> Result<bool> {
        if gen > 0 && self.get(&self.keys.gen(id, gen))?.is_none() {
            let name = marker.map_or_else(|| self.keys.gen(id, gen), str::to_string);
            log::warn!(
                "index marker {name} names generation {gen:08x} of {}, which does not exist: not acted on",
                id_hex(id)
            );
            if let Some(m) = marker {
                self.hint(false, m);
            }
            return Ok(false);
        }
        Ok(matches!(
            self.create_once(&self.keys.gen(id, gen + 1), &rec.encode())?,
            Create::Done
        ))
    }

    /// Move job `id` from generation `gen` (indexed by marker `old`, or by none of its own:
    /// `None` for a job of a batch, indexed by the batch's marker) to `rec` at `gen + 1`.
    /// `Ok(false)`: someone else created `gen + 1` first.
    pub(crate) fn step(&self, id: u128, gen: u64, old: Option<&str>, rec: &Record) -> Result<bool> {
        match self.create_once(&self.keys.gen(id, gen + 1), &rec.encode())? {
            Create::Taken => Ok(false),
            Create::Done => {
                self.upkeep(id, gen, old, rec);
                Ok(true)
            }
        }
    }

    /// Index upkeep after `id` stepped from `gen` to `rec`: the new marker first, then the
    /// old one (if any) goes. If the put fails the old marker stays, and whoever finds it
    /// sees that `gen + 1` exists and repairs.
    pub(crate) fn upkeep(&self, id: u128, gen: u64, old: Option<&str>, rec: &Record) {
        if self.hint(true, &self.keys.marker(id, gen + 1, rec)) {
            if let Some(old) = old {
                self.hint(false, old);
            }
        }
    }

    /// PUT of a batch marker with its body (a hint, as [`Queue::hint`]): true when answered
    /// 2xx.
    pub(crate) fn put_hint(&self, key: &str, body: &[u8]) -> bool {
        for i in 0..self.options.tries.max(1) {
            if i > 0 {
                self.pause(i - 1);
            }
            if let Ok(r) = self.client.put(key, body) {
                if (200..300).contains(&r.status) {
                    return true;
                }
                if r.status < 500 {
                    return false;
                }
            }
        }
        false
    }
}

/// Generation 0's implied record: ready, attempt 0, due at `created_ms`, the default level
/// (a job of another level always has a record above generation 0: [`Queue::enqueue_with`]).
pub(crate) fn ready0(created_ms: i64) -> Record {
    Record {
        state: State::Ready,
        attempt: 0,
        at_ms: created_ms,
        due_ms: created_ms,
        token: String::new(),
        nonce: String::new(),
        reason: String::new(),
        level: DEFAULT_LEVEL,
    }
}

/// The batch rule: once a move was done, a later failure makes the whole call indeterminate.
pub(crate) fn batch(e: Error, done: u32) -> Error {
    if done > 0 {
        Error::indeterminate(e.kind)
    } else {
        e
    }
}

pub(crate) fn shuffle<T>(v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = (random_u128() % (i as u128 + 1)) as usize;
        v.swap(i, j);
    }
}
