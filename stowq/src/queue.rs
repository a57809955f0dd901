//! The queue operations. Each transition is one conditional create of the job's next
//! generation (the linearization point), followed by index upkeep that is only a hint:
//! the new marker is put first, the old one deleted after, so a job is never unindexed
//! while its markers are healthy.

use crate::error::{Error, ErrorKind, Result};
use crate::http::Fail;
use crate::keys::{id_hex, Keys, Marker, Record, State, SHARDS};
use crate::s3::Client;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use steadq::format;

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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            lease_ms: 30_000,
            max_attempts: 5,
            tries: 3,
            backoff: Duration::from_millis(50),
            page: 100,
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
    keys: Keys,
    queue_id: u128,
    lost_races: AtomicU64,
}

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
    gen: u64,
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
}

/// How a conditional create ended.
enum Create {
    /// Ours is in place.
    Done,
    /// Someone else's is: ours did not and will not happen.
    Taken,
}

fn random_u128() -> u128 {
    let mut b = [0u8; 16];
    // getrandom only fails without an entropy source; ids would then collide, so stop.
    getrandom::fill(&mut b).expect("no system random source");
    u128::from_be_bytes(b)
}

fn transport(f: &Fail) -> ErrorKind {
    match f {
        Fail::NotSent(m) | Fail::MaybeSent(m) => ErrorKind::Transport(m.clone()),
    }
}

fn is_taken(status: u16) -> bool {
    status == 412
}

impl Queue {
    /// Create the queue under `prefix` (or open it if it exists): its identity object is
    /// created with `If-None-Match: *`, so concurrent creators agree on one queue id.
    ///
    /// # Errors
    /// Not done when nothing was created; indeterminate if the identity's create may have been
    /// applied but could not be read back.
    pub fn create(client: Client, prefix: &str, options: Options) -> Result<Queue> {
        let keys = Keys::new(prefix);
        let mut q = Queue {
            client,
            options,
            keys,
            queue_id: 0,
            lost_races: AtomicU64::new(0),
        };
        let id = random_u128();
        let body = format!("stowq 1\nqueue {}\n", id_hex(id));
        match q.create_once(&q.keys.identity(), body.as_bytes())? {
            Create::Done => {
                q.queue_id = id;
                Ok(q)
            }
            Create::Taken => {
                q.queue_id = q.read_identity()?;
                Ok(q)
            }
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
        };
        q.queue_id = q.read_identity()?;
        Ok(q)
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
                gen,
            }),
            _ => Err(Error::not_done(ErrorKind::NotFound)),
        }
    }

    /// Claims lost to another worker's create (412) so far.
    pub fn lost_races(&self) -> u64 {
        self.lost_races.load(Ordering::Relaxed)
    }

    fn pause(&self, attempt: u32) {
        std::thread::sleep(self.options.backoff * (1 << attempt.min(6)));
    }

    /// GET with retries: `Ok(None)` on 404.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let mut last = ErrorKind::Transport("no try".into());
        for i in 0..self.options.tries.max(1) {
            if i > 0 {
                self.pause(i - 1);
            }
            match self.client.get(key) {
                Ok(r) if r.status == 200 => return Ok(Some(r.body)),
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
    fn list_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        token: Option<&str>,
        max: u32,
    ) -> Result<crate::s3::Page> {
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
    fn hint(&self, put: bool, key: &str) -> bool {
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

    /// The conditional create that linearizes a transition: sends `body` to `key` with
    /// `If-None-Match: *` up to `tries` times. After any send that may have been applied
    /// (lost response, timeout, 5xx), a 412 or a final failure is settled by reading the key
    /// back and comparing with `body` (which holds a random nonce).
    fn create_once(&self, key: &str, body: &[u8]) -> Result<Create> {
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
    fn read_back(&self, key: &str, body: &[u8]) -> Result<Create> {
        match self.get(key) {
            Ok(Some(b)) if b == body => Ok(Create::Done),
            Ok(Some(_)) => Ok(Create::Taken),
            Ok(None) => Err(Error::indeterminate(ErrorKind::NotFound)),
            Err(e) => Err(Error::indeterminate(e.kind)),
        }
    }

    fn new_record(
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
        }
    }

    /// Move job `id` from generation `gen` (indexed by `old_marker`) to `rec` at `gen + 1`.
    /// `Ok(false)`: someone else created `gen + 1` first.
    fn step(&self, id: u128, gen: u64, old_marker: &str, rec: &Record) -> Result<bool> {
        match self.create_once(&self.keys.gen(id, gen + 1), &rec.encode())? {
            Create::Taken => Ok(false),
            Create::Done => {
                // New marker first, then the old one goes: if the put fails the old marker
                // stays, and whoever finds it sees that gen + 1 exists and repairs.
                if self.hint(true, &self.keys.marker(id, gen + 1, rec)) {
                    self.hint(false, old_marker);
                }
                Ok(true)
            }
        }
    }

    /// Enqueue `payload`; returns the job id.
    ///
    /// One conditional create of generation 0 (the envelope), then its ready marker.
    ///
    /// # Errors
    /// Not done if the create surely did not happen; indeterminate if it may have.
    pub fn enqueue(&self, payload: &[u8]) -> Result<u128> {
        let now = self.client.clock.now_ms();
        // Random, not time-ordered: chains spread over the store's key-range partitions.
        let id = random_u128();
        let created_ns = (now as u64).saturating_mul(1_000_000);
        let mut file = format::encode_header(id, self.queue_id, created_ns, payload).to_vec();
        file.extend_from_slice(payload);
        match self.create_once(&self.keys.gen(id, 0), &file)? {
            Create::Done => {
                self.hint(true, &self.keys.marker(id, 0, &ready0(now)));
                Ok(id)
            }
            // A random 80-bit collision, or someone else's object at our key.
            Create::Taken => Err(Error::not_done(ErrorKind::Status {
                status: 412,
                what: "enqueue: key exists".into(),
            })),
        }
    }

    /// Up to `options.page` index markers of `state` due by `until_ms` (all if `None`),
    /// starting at a random shard and wrapping around: markers sort by time within a shard,
    /// so the first one past `until_ms` ends that shard and the listing jumps to the next.
    /// One LIST in the common case; a second when nothing due came after the start shard.
    fn due_markers(&self, state: State, until_ms: Option<i64>) -> Result<Vec<(String, Marker)>> {
        let base = self.keys.index(state);
        let first = (random_u128() % 16) as usize;
        let start = format!("{base}{}/", SHARDS[first]);
        let mut out = Vec::new();
        self.collect(&base, Some(start.clone()), None, until_ms, &mut out)?;
        // Wrap around only when the shards after the start held nothing due.
        if first > 0 && out.is_empty() {
            self.collect(&base, None, Some(&start), until_ms, &mut out)?;
        }
        Ok(out)
    }

    /// Append due markers listed under `base` after key `after` and before key `stop`.
    fn collect(
        &self,
        base: &str,
        mut after: Option<String>,
        stop: Option<&str>,
        until_ms: Option<i64>,
        out: &mut Vec<(String, Marker)>,
    ) -> Result<()> {
        while (out.len() as u32) < self.options.page {
            let page = self.list_page(base, after.as_deref(), None, self.options.page)?;
            let more = page.next.is_some() || page.entries.len() as u32 >= self.options.page;
            after = page.entries.last().map(|e| e.key.clone());
            for e in page.entries {
                if stop.is_some_and(|s| e.key.as_str() >= s) {
                    return Ok(());
                }
                let Some(m) = self.keys.parse_marker(&e.key) else {
                    continue;
                };
                if until_ms.is_some_and(|u| m.sort_ms > u) {
                    // Not due, nor is the rest of this shard: jump to the next shard.
                    let shard = e.key[base.len()..].chars().next().unwrap_or('f');
                    after = Some(format!("{base}{shard}/~"));
                    break;
                }
                out.push((e.key, m));
            }
            let jumped = after.as_deref().is_some_and(|a| a.ends_with('~'));
            if !(more
                || jumped
                    && !after
                        .as_deref()
                        .is_some_and(|a| a.starts_with(&format!("{base}f/"))))
            {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Claim one due job with a lease of `options.lease_ms`, or `Ok(None)` if none is ready
    /// (after recovering expired leases once).
    ///
    /// Lists ready markers (one LIST in the common case), picks a random due one, and creates
    /// its next generation (leased). A 412 is a lost race: another one is tried. The envelope
    /// is then read and verified; a corrupt one is sent to dead and the claim goes on.
    ///
    /// # Errors
    /// Not done when no create was done; indeterminate if a claim's create may have been
    /// applied; [`ErrorKind::PayloadUnavailable`] (indeterminate) if the claim was done but
    /// the payload could not be read.
    pub fn claim(&self) -> Result<Option<Lease>> {
        for pass in 0..2 {
            let now = self.client.clock.upper_ms();
            let mut cands = self.due_markers(State::Ready, Some(now))?;
            shuffle(&mut cands);
            for (key, m) in cands {
                if let Some(lease) = self.try_claim(&key, &m)? {
                    return Ok(Some(lease));
                }
            }
            // Nothing claimed: recover expired leases once and look again. A failed recovery
            // is not this claim's outcome (it claimed nothing); `recover` reports its own.
            if pass == 0 && !self.recover().is_ok_and(|r| r.ready > 0) {
                break;
            }
        }
        Ok(None)
    }

    fn try_claim(&self, marker: &str, m: &Marker) -> Result<Option<Lease>> {
        let now = self.client.clock.now_ms();
        let token = id_hex(random_u128());
        let deadline = now + self.options.lease_ms;
        let rec = self.new_record(State::Leased, m.attempt + 1, deadline, &token, "");
        if !self.step(m.id, m.gen, marker, &rec)? {
            self.lost_races.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        let lease = Lease {
            id: m.id,
            payload: Vec::new(),
            attempt: rec.attempt,
            deadline_ms: deadline,
            token,
            gen: m.gen + 1,
        };
        let file = match self.get(&self.keys.gen(m.id, 0)) {
            Ok(Some(f)) => f,
            Ok(None) => Vec::new(),
            Err(e) => {
                return Err(Error::indeterminate(ErrorKind::PayloadUnavailable(
                    e.to_string(),
                )))
            }
        };
        match format::verify(&file, m.id, self.queue_id) {
            Ok(_) => Ok(Some(Lease {
                payload: file[format::HEADER_LEN..].to_vec(),
                ..lease
            })),
            Err(c) => {
                // The worker never sees it: dead, with the reason.
                let reason = format!("corrupt envelope: {c}");
                self.fail(&lease, &reason)?;
                Ok(None)
            }
        }
    }

    fn finish(&self, lease: &Lease, rec: &Record) -> Result<()> {
        let old = self
            .keys
            .marker(lease.id, lease.gen, &self.leased_record(lease));
        if self.step(lease.id, lease.gen, &old, rec)? {
            Ok(())
        } else {
            Err(Error::not_done(ErrorKind::LeaseLost))
        }
    }

    fn leased_record(&self, lease: &Lease) -> Record {
        Record {
            state: State::Leased,
            attempt: lease.attempt,
            at_ms: 0,
            due_ms: lease.deadline_ms,
            token: lease.token.clone(),
            nonce: String::new(),
            reason: String::new(),
        }
    }

    /// Extend the lease to `lease_ms` from now (service clock); the lease moves to its new
    /// generation only when done.
    ///
    /// # Errors
    /// Not done ([`ErrorKind::LeaseLost`] if it was recovered or finished meanwhile);
    /// indeterminate if the create may have been applied (then the lease object is stale:
    /// stop work, as its next transition would be refused).
    pub fn renew(&self, lease: &mut Lease, lease_ms: i64) -> Result<()> {
        let deadline = self.client.clock.now_ms() + lease_ms;
        let rec = self.new_record(State::Leased, lease.attempt, deadline, &lease.token, "");
        self.finish(lease, &rec)?;
        lease.gen += 1;
        lease.deadline_ms = deadline;
        Ok(())
    }

    /// Ack: the job is done; its done generation is the receipt.
    ///
    /// # Errors
    /// As [`Queue::renew`].
    pub fn ack(&self, lease: &Lease) -> Result<Receipt> {
        let rec = self.new_record(State::Done, lease.attempt, 0, &lease.token, "");
        self.finish(lease, &rec)?;
        Ok(Receipt {
            id: lease.id,
            gen: lease.gen + 1,
            at_ms: rec.at_ms,
            attempt: lease.attempt,
        })
    }

    /// Nack: ready again after `delay` (service clock), or dead when `max_attempts` claims
    /// have been made.
    ///
    /// # Errors
    /// As [`Queue::renew`].
    pub fn nack(&self, lease: &Lease, delay: Duration, reason: &str) -> Result<Nacked> {
        if lease.attempt >= self.options.max_attempts {
            let why = format!("nacked after {} attempts: {reason}", lease.attempt);
            self.fail(lease, &why)?;
            return Ok(Nacked::Dead);
        }
        let due = self.client.clock.now_ms() + delay.as_millis() as i64;
        let rec = self.new_record(State::Ready, lease.attempt, due, "", reason);
        self.finish(lease, &rec)?;
        Ok(Nacked::Ready(due))
    }

    /// Fail to dead-letter with `reason`.
    ///
    /// # Errors
    /// As [`Queue::renew`].
    pub fn fail(&self, lease: &Lease, reason: &str) -> Result<()> {
        let rec = self.new_record(State::Dead, lease.attempt, 0, &lease.token, reason);
        self.finish(lease, &rec)
    }

    /// Recover expired leases: each leased marker whose deadline the service clock has passed
    /// gets its next generation, ready (or dead when out of attempts). A marker whose job has
    /// moved on is stale and is deleted. At most `options.page` expired leases per call.
    ///
    /// # Errors
    /// Not done if nothing was moved; indeterminate once a move was done or may have been
    /// (the batch rule of the local queue).
    pub fn recover(&self) -> Result<RecoverReport> {
        let mut rep = RecoverReport::default();
        let now = self.client.clock.now_ms();
        let expired = self.due_markers(State::Leased, Some(now - 1))?;
        for (key, m) in expired {
            let out = if m.attempt >= self.options.max_attempts {
                let why = format!("lease expired after {} attempts", m.attempt);
                (
                    State::Dead,
                    self.new_record(State::Dead, m.attempt, 0, "", &why),
                )
            } else {
                let why = "lease expired";
                (
                    State::Ready,
                    self.new_record(State::Ready, m.attempt, now, "", why),
                )
            };
            match self.step(m.id, m.gen, &key, &out.1) {
                Ok(true) if out.0 == State::Dead => rep.dead += 1,
                Ok(true) => rep.ready += 1,
                Ok(false) => {
                    if self.hint(false, &key) {
                        rep.stale += 1;
                    }
                }
                Err(e) => return Err(batch(e, rep.ready + rep.dead)),
            }
        }
        Ok(rep)
    }

    /// Requeue dead jobs (all of them, or only `only`): each becomes ready with its attempt
    /// count reset. Returns how many.
    ///
    /// # Errors
    /// As [`Queue::recover`]; [`ErrorKind::NotFound`] (not done) if `only` is not dead.
    pub fn requeue(&self, only: Option<u128>) -> Result<u32> {
        let mut n = 0;
        let dead = self.markers(State::Dead)?;
        for (key, m) in dead {
            if only.is_some_and(|id| id != m.id) {
                continue;
            }
            let rec = self.new_record(State::Ready, 0, self.client.clock.now_ms(), "", "requeued");
            match self.step(m.id, m.gen, &key, &rec) {
                Ok(true) => n += 1,
                Ok(false) => {
                    self.hint(false, &key);
                }
                Err(e) => return Err(batch(e, n)),
            }
        }
        if only.is_some() && n == 0 {
            return Err(Error::not_done(ErrorKind::NotFound));
        }
        Ok(n)
    }

    /// Make the index agree with the chains, after crash windows (see DESIGN.md): every job's
    /// newest generation gets its marker, and markers of older generations, or of no job, are
    /// deleted. Chains are never touched. Markers are listed before chains, so a marker
    /// written meanwhile is never taken for stale.
    ///
    /// Cost: one LIST per 1,000 objects, plus one GET per job whose marker was missing.
    ///
    /// # Errors
    /// As [`Queue::recover`] (the batch rule), though only hints change.
    pub fn repair(&self) -> Result<RepairReport> {
        let mut marks: BTreeMap<u128, Vec<(String, Marker)>> = BTreeMap::new();
        for state in State::ALL {
            for (k, m) in self.markers(state)? {
                marks.entry(m.id).or_default().push((k, m));
            }
        }
        let mut latest: BTreeMap<u128, (u64, i64)> = BTreeMap::new();
        let mut token: Option<String> = None;
        loop {
            let page = self.list_page(&self.keys.chains(), None, token.as_deref(), 1000)?;
            for e in &page.entries {
                if let Some((id, g)) = self.keys.parse_gen(&e.key) {
                    let l = latest.entry(id).or_insert((g, e.modified_ms));
                    l.0 = l.0.max(g);
                }
            }
            match page.next {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        let mut rep = RepairReport::default();
        let fail = |e: Error, rep: &RepairReport| batch(e, rep.put + rep.deleted);
        for (id, (gen, modified)) in &latest {
            let ms = marks.remove(id).unwrap_or_default();
            for (k, _) in ms.iter().filter(|(_, m)| m.gen != *gen) {
                if !self.hint(false, k) {
                    return Err(fail(Error::not_done(ErrorKind::Transport(k.clone())), &rep));
                }
                rep.deleted += 1;
            }
            if ms.iter().any(|(_, m)| m.gen == *gen) {
                continue;
            }
            let rec = if *gen == 0 {
                ready0(*modified)
            } else {
                let key = self.keys.gen(*id, *gen);
                let body = self.get(&key).map_err(|e| fail(e, &rep))?;
                match body.as_deref().and_then(Record::decode) {
                    Some(r) => r,
                    None => continue, // not a record: left for a human, like fsck
                }
            };
            let key = self.keys.marker(*id, *gen, &rec);
            if !self.hint(true, &key) {
                return Err(fail(Error::not_done(ErrorKind::Transport(key)), &rep));
            }
            rep.put += 1;
        }
        for (k, _) in marks.into_values().flatten() {
            if !self.hint(false, &k) {
                return Err(fail(Error::not_done(ErrorKind::Transport(k)), &rep));
            }
            rep.deleted += 1;
        }
        Ok(rep)
    }

    /// Every marker of `state`, in key order.
    fn markers(&self, state: State) -> Result<Vec<(String, Marker)>> {
        let base = self.keys.index(state);
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self.list_page(&base, None, token.as_deref(), 1000)?;
            for e in page.entries {
                if let Some(m) = self.keys.parse_marker(&e.key) {
                    out.push((e.key, m));
                }
            }
            match page.next {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    /// Every job the index knows, with its state (one LIST per 1,000 jobs).
    ///
    /// # Errors
    /// Not done (it changes nothing): transport or status errors.
    pub fn list(&self) -> Result<Vec<Listed>> {
        let mut out = Vec::new();
        for s in State::ALL {
            for (_, m) in self.markers(s)? {
                out.push(Listed {
                    id: m.id,
                    state: m.state,
                    gen: m.gen,
                    attempt: m.attempt,
                    sort_ms: m.sort_ms,
                });
            }
        }
        // A crash between a marker put and the old marker's delete shows a job twice: keep
        // the newest generation.
        out.sort_by_key(|l| (l.id, std::cmp::Reverse(l.gen)));
        out.dedup_by_key(|l| l.id);
        Ok(out)
    }

    /// Counts per state.
    ///
    /// # Errors
    /// As [`Queue::list`].
    pub fn status(&self) -> Result<Status> {
        let now = self.client.clock.now_ms();
        let mut st = Status::default();
        for l in self.list()? {
            let c = match l.state {
                State::Ready if l.sort_ms > now => &mut st.delayed,
                State::Ready => &mut st.ready,
                State::Leased if l.sort_ms < now => &mut st.expired,
                State::Leased => &mut st.leased,
                State::Done => &mut st.done,
                State::Dead => &mut st.dead,
            };
            *c += 1;
        }
        Ok(st)
    }

    /// The true state of job `id`: its newest generation and that generation's record
    /// (generation 0 reads as ready, attempt 0). `Ok(None)` if there is no such job. Costs a
    /// LIST of the chain and a GET.
    ///
    /// # Errors
    /// Not done (it changes nothing): transport or status errors, or a record that does not
    /// parse ([`ErrorKind::Corrupt`] is not used for records; `Status` 200 with `what`).
    pub fn inspect(&self, id: u128) -> Result<Option<(u64, Record)>> {
        let prefix = format!("{}{}/", self.keys.chains(), id_hex(id));
        let mut last = None;
        let mut token: Option<String> = None;
        loop {
            let page = self.list_page(&prefix, None, token.as_deref(), 1000)?;
            for e in &page.entries {
                if let Some((_, g)) = self.keys.parse_gen(&e.key) {
                    last = last.max(Some(g));
                }
            }
            match page.next {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        let Some(gen) = last else { return Ok(None) };
        if gen == 0 {
            return Ok(Some((0, ready0(0))));
        }
        let key = self.keys.gen(id, gen);
        let body = self.get(&key)?.unwrap_or_default();
        let rec = Record::decode(&body).ok_or_else(|| {
            Error::not_done(ErrorKind::Status {
                status: 200,
                what: format!("{key} is not a record"),
            })
        })?;
        Ok(Some((gen, rec)))
    }
}

/// Generation 0's implied record: ready, attempt 0, due at `created_ms`.
fn ready0(created_ms: i64) -> Record {
    Record {
        state: State::Ready,
        attempt: 0,
        at_ms: created_ms,
        due_ms: created_ms,
        token: String::new(),
        nonce: String::new(),
        reason: String::new(),
    }
}

/// The batch rule: once a move was done, a later failure makes the whole call indeterminate.
fn batch(e: Error, done: u32) -> Error {
    if done > 0 {
        Error::indeterminate(e.kind)
    } else {
        e
    }
}

fn shuffle<T>(v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = (random_u128() % (i as u128 + 1)) as usize;
        v.swap(i, j);
    }
}
