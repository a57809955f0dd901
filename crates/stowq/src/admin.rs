//! Reading and upkeep of the index: listing due markers, recovery of expired leases,
//! requeue, repair, list, status and the true state of one job.

use crate::error::{Error, ErrorKind, Result};
use crate::keys::{decode_batch, id_hex, BatchEntry, Marker, Record, State, MAX_LEVEL, SHARDS};
use crate::queue::{
    batch, random_u128, ready0, CheckReport, Listed, Queue, RecoverReport, RepairReport, Status,
    DEFAULT_LEVEL,
};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// What [`Queue::repair`] would change, from one reading of the index and the chains.
#[derive(Default)]
struct IndexPlan {
    /// Each job with a stale marker or without its newest generation's marker.
    jobs: Vec<JobPlan>,
    /// Markers of no job.
    orphans: Vec<String>,
    /// Keys under the index or chain prefixes that are no marker or generation.
    strangers: Vec<String>,
    /// Newest generations that are not records (their jobs are left as they are).
    not_records: Vec<String>,
    /// Batch markers none of whose jobs is at the generation it names: (key, a job it
    /// names, that job's newest generation).
    stale_batches: Vec<(String, u128, u64)>,
    /// Chains and markers read.
    chains: u64,
    markers: u64,
}

/// Per-job markers (key, parsed) and batch markers (keys) of one index.
pub(crate) type MarkersAndBatches = (Vec<(String, Marker)>, Vec<String>);

/// What a batch marker's key holds.
pub(crate) enum BatchBody {
    /// Nothing (deleted meanwhile).
    Absent,
    /// An object that is not a batch marker.
    Foreign,
    /// The jobs it names.
    Entries(Vec<BatchEntry>),
}

/// One job's part of an [`IndexPlan`].
struct JobPlan {
    id: u128,
    /// Its newest generation.
    gen: u64,
    /// Its markers of older generations.
    stale: Vec<String>,
    /// The marker its newest generation lacks: key, generation, state.
    missing: Option<(String, u64, State)>,
}

impl Queue {
    /// Up to `options.page` index markers of `state` due by `until_ms` (all if `None`),
    /// starting at a random shard and wrapping around: markers sort by time within a shard,
    /// so the first one past `until_ms` ends that shard and the listing jumps to the next.
    /// One LIST in the common case; a second when nothing due came after the start shard.
    pub(crate) fn due_markers(
        &self,
        state: State,
        until_ms: Option<i64>,
        want: usize,
    ) -> Result<Vec<(String, Marker)>> {
        Ok(self.due_markers_and_batches(state, until_ms, want)?.0)
    }

    /// [`Queue::due_markers`], and the batch markers due by `until_ms` met on the way (keys;
    /// only the leased index holds due ones: a claim batch's, sorted by its deadline). The
    /// listing wraps around to the shards before its start when fewer than `want` (at least
    /// 1) markers were found after it.
    pub(crate) fn due_markers_and_batches(
        &self,
        state: State,
        until_ms: Option<i64>,
        want: usize,
    ) -> Result<MarkersAndBatches> {
        let base = self.keys.index(state);
        let first = (random_u128() % 16) as usize;
        let start = format!("{base}{}/", SHARDS[first]);
        let mut out = Vec::new();
        let mut batches = Vec::new();
        self.collect(
            &base,
            Some(start.clone()),
            None,
            until_ms,
            &mut out,
            &mut batches,
        )?;
        // Wrap around only when the shards after the start held nothing due.
        if first > 0 && out.len() + batches.len() < want.max(1) {
            self.collect(&base, None, Some(&start), until_ms, &mut out, &mut batches)?;
        }
        Ok((out, batches))
    }

    /// The due ready markers a claim picks from: those of the highest level that has any.
    /// The default level's index is listed as before ([`Queue::due_markers`], one LIST in
    /// the common case), and its listing shows the levels flagged in use (each shard's
    /// head holds the flags); the index of each level above the default that this handle
    /// knows in use is listed first (one LIST each, from its start), and of each level below
    /// only when no level above had a due job. So a queue without other levels costs a claim
    /// what it did, and each level in use above the default one LIST more while it is empty.
    pub(crate) fn due_ready(&self, now: i64, want: usize) -> Result<Vec<(String, Marker)>> {
        let level = |l: u8| -> Result<Vec<(String, Marker)>> {
            let mut out = Vec::new();
            let mut batches = Vec::new();
            self.collect(
                &self.keys.ready_index(l),
                None,
                None,
                Some(now),
                &mut out,
                &mut batches,
            )?;
            Ok(out)
        };
        let above = |seen: u8| {
            (DEFAULT_LEVEL + 1..=MAX_LEVEL)
                .rev()
                .filter(move |l| seen & (1 << l) != 0)
        };
        let known = self.levels_seen.load(Ordering::Relaxed);
        for l in above(known) {
            let c = level(l)?;
            if !c.is_empty() {
                return Ok(c);
            }
        }
        let default = self.due_markers(State::Ready, Some(now), want)?;
        // Levels above the default that this listing showed for the first time.
        let learned = self.levels_seen.load(Ordering::Relaxed) & !known;
        for l in above(learned) {
            let c = level(l)?;
            if !c.is_empty() {
                return Ok(c);
            }
        }
        if !default.is_empty() {
            return Ok(default);
        }
        let seen = self.levels_seen.load(Ordering::Relaxed);
        for l in (0..DEFAULT_LEVEL).rev().filter(|l| seen & (1 << l) != 0) {
            let c = level(l)?;
            if !c.is_empty() {
                return Ok(c);
            }
        }
        Ok(Vec::new())
    }

    /// Append due markers listed under `base` after key `after` and before key `stop`.
    fn collect(
        &self,
        base: &str,
        mut after: Option<String>,
        stop: Option<&str>,
        until_ms: Option<i64>,
        out: &mut Vec<(String, Marker)>,
        batches: &mut Vec<String>,
    ) -> Result<()> {
        while ((out.len() + batches.len()) as u32) < self.options.page {
            let page = self.list_page(base, after.as_deref(), None, self.options.page)?;
            if page.entries.is_empty() {
                return Ok(());
            }
            let more = page.next.is_some() || page.entries.len() as u32 >= self.options.page;
            after = page.entries.last().map(|e| e.key.clone());
            for e in page.entries {
                if stop.is_some_and(|s| e.key.as_str() >= s) {
                    return Ok(());
                }
                let parsed = self.keys.parse_marker(&e.key).map(|m| (m.sort_ms, Some(m)));
                let parsed = parsed.or_else(|| {
                    self.keys
                        .parse_batch_marker(&e.key)
                        .map(|(_, sort, _)| (sort, None))
                });
                let Some((sort_ms, m)) = parsed else {
                    // A level's flag at a shard's head: claims list that level's index too.
                    if let Some(l) = self.keys.parse_level_flag(&e.key) {
                        self.levels_seen.fetch_or(1 << l, Ordering::Relaxed);
                    }
                    continue;
                };
                if until_ms.is_some_and(|u| sort_ms > u) {
                    // Not due, nor is the rest of this shard: jump to the next shard.
                    let shard = e.key[base.len()..].chars().next().unwrap_or('f');
                    after = Some(format!("{base}{shard}/~"));
                    break;
                }
                match m {
                    Some(m) => out.push((e.key, m)),
                    None => batches.push(e.key),
                }
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
        let (expired, batches) = self.due_markers_and_batches(State::Leased, Some(now - 1), 1)?;
        for (key, m) in expired {
            let e = BatchEntry {
                id: m.id,
                gen: m.gen,
                attempt: m.attempt,
                level: m.level,
            };
            match self.expire(&e, Some(&key), now) {
                Ok(Some(State::Dead)) => rep.dead += 1,
                Ok(Some(_)) => rep.ready += 1,
                Ok(None) => {
                    if self.hint(false, &key) {
                        rep.stale += 1;
                    }
                }
                Err(e) => return Err(batch(e, rep.ready + rep.dead)),
            }
        }
        for key in batches {
            self.recover_batch(&key, now, &mut rep)
                .map_err(|e| batch(e, rep.ready + rep.dead))?;
        }
        Ok(rep)
    }

    /// Expire the lease that `e` names (from per-job marker `marker`, or a batch marker's
    /// entry): its next generation ready (or dead when out of attempts), at its level, with
    /// its marker. `Ok(None)`: not stepped (the job moved on; the marker is stale).
    fn expire(&self, e: &BatchEntry, marker: Option<&str>, now: i64) -> Result<Option<State>> {
        let rec = if e.attempt >= self.options.max_attempts {
            let why = format!("lease expired after {} attempts", e.attempt);
            self.new_record(State::Dead, e.attempt, 0, "", &why)
        } else {
            self.new_record(State::Ready, e.attempt, now, "", "lease expired")
        };
        // The job keeps its level.
        let rec = Record {
            level: e.level,
            ..rec
        };
        if !self.create_from_marker(e.id, e.gen, marker, &rec)? {
            return Ok(None);
        }
        self.upkeep(e.id, e.gen, marker, &rec);
        Ok(self
            .chain_alive(e.id, e.gen + 1, &rec)?
            .then_some(rec.state))
    }

    /// Recover the jobs of an expired claim batch's leased marker `key`: each job still at
    /// the generation it names is expired; the marker is deleted once every entry is settled
    /// (expired here, or moved on before). One GET of the marker, then per job what a
    /// per-job marker's recovery costs. A body that is not a batch is left as it is (foreign,
    /// reported by `check`).
    fn recover_batch(&self, key: &str, now: i64, rep: &mut RecoverReport) -> Result<()> {
        let entries = match self.batch_body(key)? {
            BatchBody::Absent => return Ok(()),
            BatchBody::Foreign => {
                log::warn!("recover: {key} is not a batch marker: left as it is");
                return Ok(());
            }
            BatchBody::Entries(es) => es,
        };
        for e in &entries {
            match self.expire(e, None, now)? {
                Some(State::Dead) => rep.dead += 1,
                Some(_) => rep.ready += 1,
                None => {}
            }
        }
        if self.hint(false, key) {
            rep.stale += 1;
        }
        Ok(())
    }

    /// The body of batch marker `key` (one GET).
    pub(crate) fn batch_body(&self, key: &str) -> Result<BatchBody> {
        Ok(match self.get(key)? {
            None => BatchBody::Absent,
            Some(b) => decode_batch(&b).map_or(BatchBody::Foreign, BatchBody::Entries),
        })
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
            let rec = Record {
                level: m.level,
                ..self.new_record(State::Ready, 0, self.client.clock.now_ms(), "", "requeued")
            };
            let moved = self
                .step_from_marker(m.id, m.gen, &key, &rec)
                .and_then(|done| Ok(done && self.chain_alive(m.id, m.gen + 1, &rec)?));
            match moved {
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
    /// written meanwhile is never taken for stale. A job whose newest generation is not a
    /// record (a foreign object at a generation's key) is left as it is, its markers too, and
    /// reported ([`RepairReport::foreign`], and a warning naming the key); so is any other
    /// object under the index or chain prefixes that is no marker or generation (the first 20
    /// named in warnings). [`Queue::check`] reports the same without changing anything.
    ///
    /// Cost: one LIST per 1,000 objects, plus one GET per job whose marker was missing.
    ///
    /// # Errors
    /// As [`Queue::recover`] (the batch rule), though only hints change: a failed read
    /// before any change is not done.
    pub fn repair(&self) -> Result<RepairReport> {
        let plan = self.index_plan()?;
        // Named one by one up to 20 (a bucket shared with another tool may hold thousands).
        for k in plan.strangers.iter().take(20) {
            log::warn!("repair: {k} is not a job generation or index marker: left as it is");
        }
        if plan.strangers.len() > 20 {
            log::warn!("repair: {} more such objects", plan.strangers.len() - 20);
        }
        for key in &plan.not_records {
            log::warn!(
                "repair: {key} is not a record: left as it is, with its job's index markers"
            );
        }
        let mut rep = RepairReport {
            foreign: u32::try_from(plan.strangers.len() + plan.not_records.len())
                .unwrap_or(u32::MAX),
            ..RepairReport::default()
        };
        let fail = |e: Error, rep: &RepairReport| batch(e, rep.put + rep.deleted);
        for job in &plan.jobs {
            for k in &job.stale {
                if !self.hint(false, k) {
                    return Err(fail(Error::not_done(ErrorKind::Transport(k.clone())), &rep));
                }
                rep.deleted += 1;
            }
            let Some((key, _, _)) = &job.missing else {
                continue;
            };
            if !self.hint(true, key) {
                return Err(fail(
                    Error::not_done(ErrorKind::Transport(key.clone())),
                    &rep,
                ));
            }
            rep.put += 1;
        }
        for (k, _, _) in &plan.stale_batches {
            if !self.hint(false, k) {
                return Err(fail(Error::not_done(ErrorKind::Transport(k.clone())), &rep));
            }
            rep.deleted += 1;
        }
        for k in &plan.orphans {
            if !self.hint(false, k) {
                return Err(fail(Error::not_done(ErrorKind::Transport(k.clone())), &rep));
            }
            rep.deleted += 1;
        }
        Ok(rep)
    }

    /// What [`Queue::repair`] would do, done by nobody: a read-only check of the index
    /// against the chains (`steadq fsck s3://...`). Envelopes are not read (that is a GET
    /// per job; a claim verifies each one it hands out).
    ///
    /// Cost: one LIST per 1,000 objects, plus one GET per job whose marker is missing.
    ///
    /// # Errors
    /// Not done (it changes nothing): transport or status errors.
    pub fn check(&self) -> Result<CheckReport> {
        let plan = self.index_plan()?;
        let mut r = CheckReport {
            chains: plan.chains,
            markers: plan.markers,
            foreign: plan.strangers,
            ..CheckReport::default()
        };
        r.foreign.extend(plan.not_records);
        for job in plan.jobs {
            r.stale
                .extend(job.stale.into_iter().map(|k| (k, job.id, job.gen)));
            if let Some((key, gen, state)) = job.missing {
                r.missing.push((job.id, gen, state, key));
            }
        }
        r.stale.extend(plan.stale_batches);
        r.orphans = plan.orphans;
        Ok(r)
    }

    /// One reading of every marker and chain (markers first, so a marker written meanwhile
    /// is never taken for stale), and what would make them agree: [`Queue::repair`] applies
    /// it, [`Queue::check`] reports it. Reads only: the LISTs, and a GET of the newest
    /// record of each job without its marker.
    fn index_plan(&self) -> Result<IndexPlan> {
        let mut marks: BTreeMap<u128, Vec<(String, Marker)>> = BTreeMap::new();
        let mut plan = IndexPlan::default();
        // Batch markers and the jobs they name: each entry indexes its job as a marker of
        // its own would, but the marker is shared, so it is stale (or an orphan) only when
        // none of its entries is its job's newest generation.
        let mut batches: BTreeMap<String, Vec<BatchEntry>> = BTreeMap::new();
        for state in State::ALL {
            let mut keys = Vec::new();
            for (k, m) in self.markers_noting(state, &mut plan.strangers, &mut keys)? {
                plan.markers += 1;
                marks.entry(m.id).or_default().push((k, m));
            }
            for key in keys {
                plan.markers += 1;
                let sort_ms = self.keys.parse_batch_marker(&key).map_or(0, |b| b.1);
                match self.batch_body(&key)? {
                    BatchBody::Absent => {}
                    BatchBody::Foreign => plan.strangers.push(key),
                    BatchBody::Entries(es) => {
                        for e in &es {
                            let m = Marker {
                                state,
                                sort_ms,
                                id: e.id,
                                gen: e.gen,
                                attempt: e.attempt,
                                level: e.level,
                            };
                            marks.entry(e.id).or_default().push((key.clone(), m));
                        }
                        batches.insert(key, es);
                    }
                }
            }
        }
        let latest = self.chain_heads(&mut plan.strangers)?;
        plan.chains = latest.len() as u64;
        let mut keep = std::collections::BTreeSet::new();
        for (id, (gen, modified, has0)) in &latest {
            let ms = marks.remove(id).unwrap_or_default();
            if !has0 && ms.is_empty() {
                continue; // compacted: the receipt is kept, unindexed
            }
            let indexed = ms.iter().any(|(_, m)| m.gen == *gen);
            // The newest generation's record, read before any marker goes: when it is not a
            // record (a foreign object at a generation's key), the job's markers are its only
            // way to be found, so they stay, and the object is reported, like fsck's.
            let rec = match (indexed, *gen) {
                (true, _) => None,
                (false, 0) => Some(ready0(*modified)),
                (false, g) => {
                    let key = self.keys.gen(*id, g);
                    let body = self.get(&key)?;
                    let Some(r) = body.as_deref().and_then(Record::decode) else {
                        plan.not_records.push(key);
                        // Its batch markers stay too.
                        keep.extend(ms.iter().map(|(k, _)| k.clone()));
                        continue;
                    };
                    Some(r)
                }
            };
            plan.jobs.push(JobPlan {
                id: *id,
                gen: *gen,
                stale: ms
                    .into_iter()
                    .filter(|(k, m)| m.gen != *gen && !batches.contains_key(k))
                    .map(|(k, _)| k)
                    .collect(),
                missing: rec.map(|r| (self.keys.marker(*id, *gen, &r), *gen, r.state)),
            });
        }
        plan.orphans = marks
            .into_values()
            .flatten()
            .filter(|(k, _)| !batches.contains_key(k))
            .map(|(k, _)| k)
            .collect();
        for (key, es) in batches {
            if keep.contains(&key) {
                continue;
            }
            let live = es
                .iter()
                .any(|e| latest.get(&e.id).is_some_and(|l| l.0 == e.gen));
            if live {
                continue;
            }
            match es
                .iter()
                .find_map(|e| latest.get(&e.id).map(|l| (e.id, l.0)))
            {
                Some((id, gen)) => plan.stale_batches.push((key, id, gen)),
                None => plan.orphans.push(key),
            }
        }
        Ok(plan)
    }

    /// For [`Queue::repair`]: per job, (newest generation, its time, generation 0 present)
    /// from a listing of the chains; a chain without generation 0 was compacted and keeps no
    /// marker. Keys that are no generation go to `strangers`.
    fn chain_heads(&self, strangers: &mut Vec<String>) -> Result<BTreeMap<u128, (u64, i64, bool)>> {
        let mut latest: BTreeMap<u128, (u64, i64, bool)> = BTreeMap::new();
        let mut token: Option<String> = None;
        loop {
            let page = self.list_page(&self.keys.chains(), None, token.as_deref(), 1000)?;
            for e in &page.entries {
                if let Some((id, g)) = self.keys.parse_gen(&e.key) {
                    let l = latest.entry(id).or_insert((g, e.modified_ms, false));
                    l.0 = l.0.max(g);
                    l.2 |= g == 0;
                } else {
                    strangers.push(e.key.clone());
                }
            }
            match page.next {
                Some(t) => token = Some(t),
                None => return Ok(latest),
            }
        }
    }

    /// Every marker of `state`, in key order.
    pub(crate) fn markers(&self, state: State) -> Result<Vec<(String, Marker)>> {
        self.markers_noting(state, &mut Vec::new(), &mut Vec::new())
    }

    /// Every marker of `state` and every batch marker of it (keys), in key order.
    pub(crate) fn markers_and_batches(&self, state: State) -> Result<MarkersAndBatches> {
        let mut batches = Vec::new();
        let m = self.markers_noting(state, &mut Vec::new(), &mut batches)?;
        Ok((m, batches))
    }

    /// [`Queue::markers`], adding to `batches` every batch marker's key and to `strangers`
    /// every other key under the state's index that is no marker.
    fn markers_noting(
        &self,
        state: State,
        strangers: &mut Vec<String>,
        batches: &mut Vec<String>,
    ) -> Result<Vec<(String, Marker)>> {
        // Every level's ready index in one listing (`P/i/ready` matches `P/i/ready/` and
        // `P/i/ready-<L>/`); the level flags in it are no strangers.
        let base = match state {
            State::Ready => self.keys.ready_indexes(),
            s => self.keys.index(s),
        };
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self.list_page(&base, None, token.as_deref(), 1000)?;
            for e in page.entries {
                match self.keys.parse_marker(&e.key) {
                    Some(m) if m.state == state => out.push((e.key, m)),
                    None if self.keys.parse_level_flag(&e.key).is_some() => {}
                    None if self
                        .keys
                        .parse_batch_marker(&e.key)
                        .is_some_and(|(s, _, _)| s == state) =>
                    {
                        batches.push(e.key)
                    }
                    _ => strangers.push(e.key),
                }
            }
            match page.next {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    /// Every job the index knows, with its state (one LIST per 1,000 markers, and a GET
    /// per batch marker: [`Queue::claim_batch`], [`Queue::ack_batch`]).
    ///
    /// # Errors
    /// Not done (it changes nothing): transport or status errors.
    pub fn list(&self) -> Result<Vec<Listed>> {
        let mut out = Vec::new();
        for s in State::ALL {
            let (markers, batches) = self.markers_and_batches(s)?;
            for key in batches {
                let Some((_, sort_ms, _)) = self.keys.parse_batch_marker(&key) else {
                    continue;
                };
                if let BatchBody::Entries(es) = self.batch_body(&key)? {
                    out.extend(es.into_iter().map(|e| Listed {
                        id: e.id,
                        state: s,
                        gen: e.gen,
                        attempt: e.attempt,
                        sort_ms,
                        priority: e.level,
                    }));
                }
            }
            for (_, m) in markers {
                out.push(Listed {
                    id: m.id,
                    state: m.state,
                    gen: m.gen,
                    attempt: m.attempt,
                    sort_ms: m.sort_ms,
                    priority: m.level,
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
        // Due as a claim decides it: by the upper bound of the service's time (its `Date`
        // has whole seconds). With the lower bound, a job enqueued within that second was
        // counted delayed, not ready (the CLI test's "ready 2" of 3, one run in three).
        let due_by = self.client.clock.upper_ms();
        let mut st = Status::default();
        for l in self.list()? {
            let c = match l.state {
                State::Ready if l.sort_ms > due_by => &mut st.delayed,
                State::Ready => {
                    st.ready_by_priority[usize::from(l.priority.min(7))] += 1;
                    &mut st.ready
                }
                State::Leased if l.sort_ms < now => &mut st.expired,
                State::Leased => &mut st.leased,
                State::Done => &mut st.done,
                State::Dead => &mut st.dead,
            };
            *c += 1;
        }
        Ok(st)
    }

    /// The envelope of job `id` (generation 0: header and payload) as stored, not verified
    /// (`steadq::format::verify` checks it); `Ok(None)` if it is absent: no such job, or its
    /// chain was compacted to its receipt. One GET.
    ///
    /// # Errors
    /// Not done (it changes nothing): transport or status errors.
    pub fn envelope(&self, id: u128) -> Result<Option<Vec<u8>>> {
        self.get(&self.keys.gen(id, 0))
    }

    /// The record of generation `gen` (at least 1) of job `id` as stored: `Ok(None)` if that
    /// generation is absent (a stale marker's, a compacted chain's) or is not a record. One
    /// GET. `list --json` reads a dead job's reason with it.
    ///
    /// # Errors
    /// Not done (it changes nothing): transport or status errors.
    pub fn record(&self, id: u128, gen: u64) -> Result<Option<Record>> {
        Ok(self
            .get(&self.keys.gen(id, gen))?
            .as_deref()
            .and_then(Record::decode))
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
