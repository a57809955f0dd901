//! Batched claims and acks: the jobs of a batch share one leased marker, one multi-object
//! delete of their ready markers and one done marker, so a job costs at most six requests
//! from enqueue to ack (see `DESIGN-S3.md`, "Batched claims and acks"). Each job's
//! transition is still its own conditional create.

use crate::error::{Error, ErrorKind, Result};
use crate::keys::{encode_batch, id_hex, BatchEntry, Marker, Record, State};
use crate::queue::{random_u128, shuffle, BatchHold, Create, Lease, Queue, Receipt};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use steadq::format;

/// Listings one [`Queue::claim_batch`] makes at most (a lost race drops the kept markers,
/// since others claim from them too, and lists afresh).
const BATCH_LISTINGS: u32 = 3;

impl Queue {
    /// Claim up to `k` due jobs (1 to 1,000) with one lease deadline (`options.lease_ms`
    /// from now); an empty vector if none is ready (after recovering expired leases once).
    ///
    /// Each job is leased by its own conditional create, as by [`Queue::claim`]; the batch is
    /// then indexed by one leased marker naming its jobs, their ready markers are deleted by
    /// one multi-object delete (single DELETEs if the service refuses it), and each envelope
    /// is read and verified (a corrupt one is dead-lettered and left out, as `claim` does).
    /// Requests: a LIST (none when the handle's kept markers suffice), then per job the
    /// create and the envelope's GET (and a GET of the record for a marker above generation
    /// 0), then two for the batch.
    ///
    /// # Errors
    /// Only when no job was claimed: not done when no create was done, indeterminate when one
    /// may have been. A failure after the first claim ends the batch early and returns the
    /// jobs claimed (logged); a job whose create may have been applied is named in the batch
    /// marker, so recovery finds it at the deadline. A claimed job whose payload cannot be
    /// read is given back ([`Queue::release_undelivered`], best effort) and left out.
    pub fn claim_batch(&self, k: usize) -> Result<Vec<Lease>> {
        let k = k.clamp(1, 1000);
        self.settle_clock();
        let deadline = self.client.clock.now_ms() + self.options.lease_ms;
        // (ready marker, marker, lease record)
        let mut won: Vec<(String, Marker, Record)> = Vec::new();
        let mut maybe: Vec<BatchEntry> = Vec::new();
        let mut failure: Option<Error> = None;
        let (mut listings, mut recovered) = (0, false);
        // Markers this batch tried: a second listing shows them again (their deletes come
        // after the batch's creates), so it looks for that many more.
        let mut tried = std::collections::HashSet::new();
        while won.len() < k {
            let Some((key, m)) = self.next_candidate() else {
                if listings >= BATCH_LISTINGS {
                    break;
                }
                listings += 1;
                let mut cands = match self
                    .due_ready(self.client.clock.upper_ms(), k - won.len() + tried.len())
                {
                    Ok(c) => c,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                };
                if cands.is_empty() {
                    // Nothing due: recover expired leases once (if nothing was claimed yet)
                    // and look again.
                    if !won.is_empty() || recovered {
                        break;
                    }
                    recovered = true;
                    if !self.recover().is_ok_and(|r| r.ready > 0) {
                        break;
                    }
                    continue;
                }
                cands.retain(|(key, _)| !tried.contains(key));
                if cands.is_empty() {
                    break;
                }
                shuffle(&mut cands);
                self.keep_candidates(Instant::now(), cands);
                continue;
            };
            if !tried.insert(key.clone()) {
                continue;
            }
            let rec = Record {
                level: m.level,
                ..self.new_record(
                    State::Leased,
                    m.attempt + 1,
                    deadline,
                    &id_hex(random_u128()),
                    "",
                )
            };
            match self.create_from_marker(m.id, m.gen, Some(&key), &rec) {
                Ok(true) => won.push((key, m, rec)),
                Ok(false) => {
                    self.lost_races.fetch_add(1, Ordering::Relaxed);
                    self.take_candidates();
                }
                Err(e) => {
                    if e.outcome == steadq::Outcome::Indeterminate {
                        maybe.push(BatchEntry {
                            id: m.id,
                            gen: m.gen + 1,
                            attempt: rec.attempt,
                            level: m.level,
                        });
                    }
                    failure = Some(e);
                    break;
                }
            }
        }
        if won.is_empty() && maybe.is_empty() {
            return failure.map_or(Ok(Vec::new()), Err);
        }
        let mut entries: Vec<BatchEntry> = won
            .iter()
            .map(|(_, m, r)| BatchEntry {
                id: m.id,
                gen: m.gen + 1,
                attempt: r.attempt,
                level: m.level,
            })
            .collect();
        entries.extend(maybe.iter().copied());
        let key = self
            .keys
            .batch_marker(State::Leased, deadline, random_u128());
        // A job whose create may have been applied is never settled here: its entry keeps
        // the marker until recovery, which expires the job if it was leased.
        let hold = Arc::new(BatchHold {
            key: key.clone(),
            jobs: entries.len(),
            settled: Default::default(),
        });
        // As a single claim: the new marker first, then the old ones go (if the put fails they
        // stay, and `repair` indexes the leased jobs).
        if self.put_hint(&key, &encode_batch(&entries)) {
            let ready: Vec<String> = won.iter().map(|(k, _, _)| k.clone()).collect();
            self.delete_hints(&ready);
        }
        if let Some(e) = &failure {
            log::warn!(
                "claim batch: ended after {} claim(s): {e}{}",
                won.len(),
                if maybe.is_empty() {
                    ""
                } else {
                    " (that job may be leased: recovered at the batch's deadline)"
                }
            );
        }
        if won.is_empty() {
            return Err(failure.unwrap_or_else(|| Error::indeterminate(ErrorKind::NotFound)));
        }
        let mut out = Vec::new();
        for (_, m, rec) in won {
            let lease = Lease {
                id: m.id,
                payload: Vec::new(),
                attempt: rec.attempt,
                deadline_ms: deadline,
                token: rec.token.clone(),
                priority: m.level,
                gen: m.gen + 1,
                base_at_ms: rec.at_ms,
                batch: Some(hold.clone()),
            };
            if let Some(l) = self.deliver(lease, &rec) {
                out.push(l);
            }
        }
        Ok(out)
    }

    /// The envelope of a freshly claimed `lease`, verified: the lease with its payload, or
    /// `None` when it cannot be handed out (a stray of a compacted chain: deleted, a lost
    /// race; a corrupt envelope: dead-lettered; unreadable: given back, best effort).
    fn deliver(&self, lease: Lease, rec: &Record) -> Option<Lease> {
        let file = match self.get(&self.keys.gen(lease.id, 0)) {
            Ok(Some(f)) => f,
            Ok(None) => match self.unless_stray(lease.id, lease.gen, rec) {
                Ok(false) => {
                    self.lost_races.fetch_add(1, Ordering::Relaxed);
                    self.settle_in_batch(&lease);
                    return None;
                }
                Ok(true) => Vec::new(),
                Err(e) => return self.undelivered(&lease, &e),
            },
            Err(e) => return self.undelivered(&lease, &e),
        };
        match format::verify(&file, lease.id, self.queue_id) {
            Ok(_) => Some(Lease {
                payload: file[format::HEADER_LEN..].to_vec(),
                ..lease
            }),
            Err(c) => {
                let reason = format!("corrupt envelope: {c}");
                if let Err(e) = self.fail(&lease, &reason) {
                    log::warn!("job {}: {reason}; dead-lettering it: {e}", id_hex(lease.id));
                    return None;
                }
                self.dead_lettered.fetch_add(1, Ordering::Relaxed);
                log::warn!("job {}: {reason}: dead-lettered", id_hex(lease.id));
                None
            }
        }
    }

    fn undelivered(&self, lease: &Lease, e: &Error) -> Option<Lease> {
        log::warn!(
            "job {}: claimed, but its payload could not be read ({e}): given back",
            id_hex(lease.id)
        );
        let _ = self.release_undelivered(lease, "payload unavailable");
        None
    }

    /// Ack every lease of `leases`: one result per lease, in order, each done, not done or
    /// indeterminate as [`Queue::ack`]'s.
    ///
    /// Each job's done generation is its own conditional create (with the compaction fence
    /// of `ack`); the acks are then indexed by one done marker naming them, and the leased
    /// markers whose jobs are all settled (a claim batch's, once its last job is; a single
    /// lease's own) are deleted, by one multi-object delete when there are several.
    /// Requests: one create per job, then one PUT and one or more deletes for the batch.
    pub fn ack_batch(&self, leases: &[Lease]) -> Vec<Result<Receipt>> {
        let mut out = Vec::with_capacity(leases.len());
        let mut entries = Vec::new();
        let mut gone = Vec::new();
        let mut at_max = 0;
        for lease in leases {
            let rec = Record {
                level: lease.priority,
                ..self.new_record(State::Done, lease.attempt, 0, &lease.token, "")
            };
            let r = self
                .create_once(&self.keys.gen(lease.id, lease.gen + 1), &rec.encode())
                .and_then(|c| {
                    Ok(matches!(c, Create::Done)
                        && (!self.may_be_compacted(lease.base_at_ms)
                            || self.chain_alive(lease.id, lease.gen + 1, &rec)?))
                });
            let done = match r {
                Ok(d) => d,
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
            };
            // Settled, done or lost: its leased marker may go.
            match &lease.batch {
                Some(b) if b.settle(lease.id) => gone.push(b.key.clone()),
                Some(_) => {}
                None => gone.push(self.keys.marker(
                    lease.id,
                    lease.gen,
                    &self.leased_record(lease),
                )),
            }
            if !done {
                out.push(Err(Error::not_done(ErrorKind::LeaseLost)));
                continue;
            }
            at_max = at_max.max(rec.at_ms);
            entries.push(BatchEntry {
                id: lease.id,
                gen: lease.gen + 1,
                attempt: lease.attempt,
                level: lease.priority,
            });
            out.push(Ok(Receipt {
                id: lease.id,
                gen: lease.gen + 1,
                at_ms: rec.at_ms,
                attempt: lease.attempt,
            }));
        }
        // The done marker first, then the leased ones go: if the put fails they stay, and
        // recovery (412 on each job) or `repair` (per-job done markers) sees to it.
        let indexed = entries.is_empty() || {
            let key = self.keys.batch_marker(State::Done, at_max, random_u128());
            self.put_hint(&key, &encode_batch(&entries))
        };
        if indexed && !gone.is_empty() {
            self.delete_hints(&gone);
        }
        out
    }
}
