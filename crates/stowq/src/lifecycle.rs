//! The job lifecycle: enqueue, claim, renew, ack, nack and fail. Each is one conditional
//! create of the job's next generation ([`Queue::step`] in `queue.rs`).

use crate::error::{Error, ErrorKind, Result};
use crate::keys::{id_hex, Marker, Record, State, MAX_LEVEL, SHARDS};
use crate::queue::{
    random_u128, ready0, shuffle, Create, Lease, Nacked, Queue, Receipt, CANDIDATES_KEEP,
    DEFAULT_LEVEL,
};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use steadq::format;

impl Queue {
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

    /// Enqueue `payload`, not to be claimed before `delay` has passed on the service's clock;
    /// returns the job id. A zero `delay` is [`Queue::enqueue`]. The due time is counted from
    /// this handle's upper bound of the service's time, so the lag of its reading never cuts
    /// the delay; a claim takes a job that may be due by its own upper bound, so up to 1 s
    /// early (the `Date` header's resolution), as after a nack.
    ///
    /// Three requests: a conditional create of generation 1 (`ready, attempt 0, due = now +
    /// delay`), then of generation 0 (the envelope), then generation 1's ready marker. The
    /// record goes first so that no claim can ever step the job from generation 0: until the
    /// envelope exists the record belongs to no job (a chain without generation 0 and without
    /// markers is skipped by [`Queue::repair`] and is found by nothing else), and once it
    /// exists the job's newest generation is the delayed record, which `repair` indexes as it
    /// is. A crash at any point never makes the job due early.
    ///
    /// # Errors
    /// Not done ([`ErrorKind::Config`]) for a due time past the year 2262 (as a local
    /// queue's limit); not done if the envelope surely was not created (the record made before
    /// it is deleted again, best effort: if that fails it stays, found by nothing);
    /// indeterminate if the envelope may have been (if it was, the job is delayed as asked
    /// but unindexed until `repair`, which `steadq recover` runs).
    pub fn enqueue_delayed(&self, payload: &[u8], delay: Duration) -> Result<u128> {
        self.enqueue_with(payload, delay, DEFAULT_LEVEL)
    }

    /// Enqueue `payload` at priority `level` (0..=7, higher claimed first;
    /// [`DEFAULT_LEVEL`] is [`Queue::enqueue_delayed`]), not to be claimed before `delay`
    /// has passed; returns the job id.
    ///
    /// The level is stored in the chain: a job of another level is made as a delayed one is,
    /// a record at generation 1 (`ready, attempt 0, due = now + delay`, its `prio` line)
    /// created before the envelope, and every later record of the job carries the level, so
    /// `repair` puts its marker back at its level. Its ready markers are in the level's own
    /// index (`P/i/ready-<level>/`), which claims list before the default one. Before its
    /// first job, a level is flagged in use in every shard of the default ready index
    /// ([`crate::keys::Keys::level_flag`], 16 PUTs, once per queue), where every claim's
    /// listing meets it: a queue whose jobs are all at the default level costs its claims
    /// nothing more. Requests: a GET of the last flag (none once this handle knows the
    /// flags), the record, the envelope and the marker.
    ///
    /// # Errors
    /// Not done ([`ErrorKind::Config`]) for a level above 7; not done if the flags could not
    /// be put (nothing enqueued); otherwise as [`Queue::enqueue_delayed`].
    pub fn enqueue_with(&self, payload: &[u8], delay: Duration, level: u8) -> Result<u128> {
        if level > MAX_LEVEL {
            return Err(Error::not_done(ErrorKind::Config(format!(
                "priority {level}: levels are 0 to {MAX_LEVEL}"
            ))));
        }
        if delay.is_zero() && level == DEFAULT_LEVEL {
            return self.enqueue(payload);
        }
        if level != DEFAULT_LEVEL {
            self.flag_level(level)?;
        }
        // As a nack does before it writes a due time: a clock in doubt is settled first.
        self.settle_clock();
        let now = self.client.clock.now_ms();
        // Without a delay, due at once (by the lower bound: any claim takes it).
        let from = if delay.is_zero() {
            now
        } else {
            self.client.clock.upper_ms()
        };
        let due = i64::try_from(delay.as_millis())
            .ok()
            .and_then(|d| from.checked_add(d))
            .filter(|d| *d <= i64::MAX / 1_000_000)
            .ok_or_else(|| {
                Error::not_done(ErrorKind::Config(format!(
                    "delay {} s: the job would be due past the year 2262; not done, nothing changed",
                    delay.as_secs()
                )))
            })?;
        let id = random_u128();
        let rec = Record {
            level,
            ..self.new_record(State::Ready, 0, due, "", "")
        };
        let key1 = self.keys.gen(id, 1);
        match self.create_once(&key1, &rec.encode()) {
            Ok(Create::Done) => {}
            Ok(Create::Taken) => {
                return Err(Error::not_done(ErrorKind::Status {
                    status: 412,
                    what: "enqueue: key exists".into(),
                }))
            }
            // Without the envelope no job exists whatever became of this record: an
            // indeterminate create of it leaves at most a record that nothing finds.
            Err(e) => return Err(Error::not_done(e.kind)),
        }
        let created_ns = (now as u64).saturating_mul(1_000_000);
        let mut file = format::encode_header(id, self.queue_id, created_ns, payload).to_vec();
        file.extend_from_slice(payload);
        match self.create_once(&self.keys.gen(id, 0), &file) {
            Ok(Create::Done) => {
                self.hint(true, &self.keys.marker(id, 1, &rec));
                Ok(id)
            }
            // Someone else's object at generation 0: the record made above is ours, and
            // must not stay on another's chain.
            Ok(Create::Taken) => {
                self.hint(false, &key1);
                Err(Error::not_done(ErrorKind::Status {
                    status: 412,
                    what: "enqueue: key exists".into(),
                }))
            }
            Err(e) if e.outcome == steadq::Outcome::NotDone => {
                self.hint(false, &key1);
                Err(e)
            }
            // The envelope may yet land: the record stays, so that the job is delayed if
            // it does.
            Err(e) => Err(e),
        }
    }

    /// Make sure level `level` is flagged in use in all 16 shards of the default ready index
    /// before a job of it exists: a GET of the last flag (shard `f`, put last), and when it
    /// is missing the 16 PUTs in shard order. Nothing once this handle knows the flags.
    ///
    /// # Errors
    /// Not done: the check or a PUT failed (flags put so far stay; they only make claims list
    /// the level's index).
    fn flag_level(&self, level: u8) -> Result<()> {
        let bit = 1u8 << level;
        if self.levels_flagged.load(Ordering::Relaxed) & bit != 0 {
            return Ok(());
        }
        if self.get(&self.keys.level_flag('f', level))?.is_none() {
            for s in SHARDS {
                let key = self.keys.level_flag(s, level);
                if !self.hint(true, &key) {
                    return Err(Error::not_done(ErrorKind::Transport(format!(
                        "PUT {key} (the flag that priority {level} is in use) failed: nothing enqueued"
                    ))));
                }
            }
        }
        self.levels_flagged.fetch_or(bit, Ordering::Relaxed);
        self.levels_seen.fetch_or(bit, Ordering::Relaxed);
        Ok(())
    }

    /// Enqueue `payload` under idempotency key `key` (1 to 128 of `A-Z a-z 0-9 . _ : -`):
    /// the first enqueue of a key makes the job; later ones make nothing and name it.
    /// Returns the job id and whether this call made it.
    ///
    /// The key is an object `P/k/<key>` naming a job id, created conditionally before the
    /// job: of all the enqueues racing with one key exactly one creates it, and every one
    /// then creates that id's generation 0 conditionally, so the job exists once, with the
    /// payload of whichever create came first. An enqueue that finds the key (its maker
    /// died before the job, or is still on its way) completes the job itself. One that
    /// creates generation 0 after finding the key also lists the chain: a job compacted since
    /// (generation 0 deleted, its receipt kept) is not made again, the stray generation 0 is
    /// deleted and the call names the job as a duplicate. Three requests when new (key,
    /// envelope, marker); a duplicate costs a GET, a refused create and a LIST. Keys are
    /// kept as long as the queue (compaction does not expire them).
    ///
    /// # Errors
    /// Not done ([`ErrorKind::Config`]) for a malformed key or a key object that names no
    /// job; otherwise as [`Queue::enqueue`].
    pub fn enqueue_keyed(&self, payload: &[u8], key: &str) -> Result<(u128, bool)> {
        let ok = (1..=128).contains(&key.len())
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-_:".contains(&b));
        if !ok {
            return Err(Error::not_done(ErrorKind::Config(format!(
                "idempotency key {key:?}: 1 to 128 of A-Z a-z 0-9 . _ : -"
            ))));
        }
        let kkey = self.keys.idem(key);
        let mine = random_u128();
        let body = format!("stowq-key 1\njob {}\n", id_hex(mine));
        let (id, made_key) = match self.create_once(&kkey, body.as_bytes())? {
            Create::Done => (mine, true),
            Create::Taken => {
                let b = self.get(&kkey)?.unwrap_or_default();
                let named = String::from_utf8_lossy(&b)
                    .strip_prefix("stowq-key 1\njob ")
                    .and_then(|h| u128::from_str_radix(h.trim(), 16).ok());
                let Some(id) = named else {
                    return Err(Error::not_done(ErrorKind::Config(format!(
                        "{kkey} names no job: not an idempotency key of this queue"
                    ))));
                };
                (id, false)
            }
        };
        let now = self.client.clock.now_ms();
        let created_ns = (now as u64).saturating_mul(1_000_000);
        let mut file = format::encode_header(id, self.queue_id, created_ns, payload).to_vec();
        file.extend_from_slice(payload);
        let made = match self.create_once(&self.keys.gen(id, 0), &file) {
            Ok(Create::Done) => {
                // Found the key: the job may have been compacted meanwhile (its generation
                // 0 deleted under its receipt). Ours is then a stray below the receipt.
                if !made_key && !self.unless_stray(id, 0, &ready0(now))? {
                    return Ok((id, false));
                }
                self.hint(true, &self.keys.marker(id, 0, &ready0(now)));
                true
            }
            Ok(Create::Taken) => false,
            // Not done leaves the key naming a job that does not exist yet: the next enqueue
            // with the key makes it.
            Err(e) => return Err(e),
        };
        Ok((id, made))
    }

    /// Claim one due job with a lease of `options.lease_ms`, or `Ok(None)` if none is ready
    /// (after recovering expired leases once).
    ///
    /// Tries the due ready markers kept from this handle's last listing (at most
    /// [`CANDIDATES_KEEP`] old; none after a lost race), else lists ready markers (one LIST in
    /// the common case); picks a random due one, and creates
    /// its next generation (leased). A 412 is a lost race: another one is tried. The envelope
    /// is then read and verified; a corrupt one is sent to dead and the claim goes on.
    ///
    /// # Errors
    /// Not done when no create was done; indeterminate if a claim's create may have been
    /// applied; [`ErrorKind::PayloadUnavailable`] (indeterminate) if the claim was done but
    /// the payload could not be read.
    pub fn claim(&self) -> Result<Option<Lease>> {
        // The markers left from this handle's last listing first: no LIST for them.
        while let Some((key, m)) = self.next_candidate() {
            let lost = self.lost_races.load(Ordering::Relaxed);
            if let Some(lease) = self.try_claim(&key, &m)? {
                return Ok(Some(lease));
            }
            if self.lost_races.load(Ordering::Relaxed) > lost {
                // Others claim from the same markers: list afresh.
                self.take_candidates();
            }
        }
        for pass in 0..2 {
            let now = self.client.clock.upper_ms();
            let mut cands = self.due_ready(now, 1)?;
            let listed = Instant::now();
            shuffle(&mut cands);
            while let Some((key, m)) = cands.pop() {
                if let Some(lease) = self.try_claim(&key, &m)? {
                    self.keep_candidates(listed, cands);
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

    /// The next kept candidate of this handle's last claim listing, if it is recent.
    pub(crate) fn next_candidate(&self) -> Option<(String, Marker)> {
        let mut c = self.candidates.lock().ok()?;
        if c.0.is_none_or(|t| t.elapsed() >= CANDIDATES_KEEP) {
            c.1.clear();
            return None;
        }
        c.1.pop()
    }

    pub(crate) fn take_candidates(&self) {
        if let Ok(mut c) = self.candidates.lock() {
            c.1.clear();
        }
    }

    pub(crate) fn keep_candidates(&self, listed: Instant, cands: Vec<(String, Marker)>) {
        if let Ok(mut c) = self.candidates.lock() {
            *c = (Some(listed), cands);
        }
    }

    fn try_claim(&self, marker: &str, m: &Marker) -> Result<Option<Lease>> {
        self.settle_clock();
        let now = self.client.clock.now_ms();
        let token = id_hex(random_u128());
        let deadline = now + self.options.lease_ms;
        let rec = Record {
            level: m.level,
            ..self.new_record(State::Leased, m.attempt + 1, deadline, &token, "")
        };
        if !self.step_from_marker(m.id, m.gen, marker, &rec)? {
            self.lost_races.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        let lease = Lease {
            id: m.id,
            payload: Vec::new(),
            attempt: rec.attempt,
            deadline_ms: deadline,
            token,
            priority: m.level,
            gen: m.gen + 1,
            base_at_ms: rec.at_ms,
            batch: None,
        };
        let file = match self.get(&self.keys.gen(m.id, 0)) {
            Ok(Some(f)) => f,
            // No envelope. With a newer generation above ours, our create met a finished chain
            // being compacted (through a stale ready marker): it was a stray, now deleted; a
            // lost race. Otherwise the envelope was lost: corrupt, to dead below.
            Ok(None) => match self.unless_stray(m.id, m.gen + 1, &rec) {
                Ok(false) => {
                    self.lost_races.fetch_add(1, Ordering::Relaxed);
                    return Ok(None);
                }
                Ok(true) => Vec::new(),
                Err(e) => {
                    return Err(Error::indeterminate(ErrorKind::PayloadUnavailable(
                        e.to_string(),
                    )))
                }
            },
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
                self.dead_lettered.fetch_add(1, Ordering::Relaxed);
                log::warn!("job {}: {reason}: dead-lettered", id_hex(m.id));
                Ok(None)
            }
        }
    }

    /// Step `lease` to `rec` (at the lease's level: a job keeps its level through every
    /// transition). A lease of a batch has no leased marker of its own: its new marker is
    /// put and nothing deleted, and the job counts as settled for its batch (done, or lost
    /// to another's create), whose marker goes with the last one.
    fn finish(&self, lease: &Lease, rec: &Record) -> Result<()> {
        let rec = &Record {
            level: lease.priority,
            ..rec.clone()
        };
        let old = self
            .keys
            .marker(lease.id, lease.gen, &self.leased_record(lease));
        let old = lease.batch.is_none().then_some(old.as_str());
        let r = self.step(lease.id, lease.gen, old, rec).and_then(|done| {
            Ok(done
                && (!self.may_be_compacted(lease.base_at_ms)
                    || self.chain_alive(lease.id, lease.gen + 1, rec)?))
        });
        if r.is_ok() {
            self.settle_in_batch(lease);
        }
        if r? {
            Ok(())
        } else {
            Err(Error::not_done(ErrorKind::LeaseLost))
        }
    }

    /// `lease`'s job is settled (its lease generation is no longer the newest): if it was
    /// the last of its claim batch, the batch's leased marker is deleted.
    pub(crate) fn settle_in_batch(&self, lease: &Lease) {
        if let Some(b) = &lease.batch {
            if b.settle(lease.id) {
                self.hint(false, &b.key);
            }
        }
    }

    pub(crate) fn leased_record(&self, lease: &Lease) -> Record {
        Record {
            state: State::Leased,
            attempt: lease.attempt,
            at_ms: 0,
            due_ms: lease.deadline_ms,
            token: lease.token.clone(),
            nonce: String::new(),
            reason: String::new(),
            level: lease.priority,
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
        self.settle_clock();
        let deadline = self.client.clock.now_ms() + lease_ms;
        let rec = self.new_record(State::Leased, lease.attempt, deadline, &lease.token, "");
        self.finish(lease, &rec)?;
        lease.gen += 1;
        lease.deadline_ms = deadline;
        lease.base_at_ms = rec.at_ms;
        // Its new generation has its own leased marker: it left its batch.
        lease.batch = None;
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
        // As a claim and a renewal do before they write a time: a clock in doubt (the last
        // answer's `Date` stepped ahead, unconfirmed) is settled first, or the due time was
        // counted from the old clock, the step's length early: a nack of 60 s after an
        // hour's step made the job due at once.
        self.settle_clock();
        let due = self.client.clock.now_ms() + delay.as_millis() as i64;
        let rec = self.new_record(State::Ready, lease.attempt, due, "", reason);
        self.finish(lease, &rec)?;
        Ok(Nacked::Ready(due))
    }

    /// Give back a job that was never handed over (its payload could not be delivered, or
    /// the command could not be started): ready at once, with this claim's attempt given
    /// back, so a job that never ran is never dead-lettered as out of attempts. As the local
    /// queue's `Lease::release_undelivered`.
    ///
    /// # Errors
    /// As [`Queue::renew`].
    pub fn release_undelivered(&self, lease: &Lease, reason: &str) -> Result<()> {
        let now = self.client.clock.now_ms();
        let attempt = lease.attempt.saturating_sub(1);
        let rec = self.new_record(State::Ready, attempt, now, "", reason);
        self.finish(lease, &rec)
    }

    /// Fail to dead-letter with `reason`.
    ///
    /// # Errors
    /// As [`Queue::renew`].
    pub fn fail(&self, lease: &Lease, reason: &str) -> Result<()> {
        let rec = self.new_record(State::Dead, lease.attempt, 0, &lease.token, reason);
        self.finish(lease, &rec)
    }
}
