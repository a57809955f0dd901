//! Compaction of finished chains: a job acked longer ago than a given age keeps only its
//! receipt (the done generation); its envelope, its older records and its done marker are
//! deleted. See `DESIGN-S3.md`, "Compaction".

use crate::admin::BatchBody;
use crate::error::{Error, ErrorKind, Result};
use crate::http::Fail;
use crate::keys::State;
use crate::queue::{batch, transport, CompactReport, Queue};
use std::time::Duration;

impl Queue {
    /// Compact every chain acked more than `older_than` ago (service clock): delete its
    /// generations below the receipt, from generation 0 upwards, then its done marker. The
    /// receipt stays at `j/<id>/<gen>` ([`Queue::inspect`] reads it); the done index, and
    /// so `status`'s done count, then holds only uncompacted receipts. Dead jobs are never
    /// compacted (a requeue needs their envelope).
    ///
    /// Cost: one LIST per 1,000 done markers, then per chain one LIST and one DELETE per
    /// object (DELETEs are free on S3).
    ///
    /// Deleting generation 0 first is the fence that keeps stale lease holders truthful: a
    /// create that succeeds only because compaction deleted its key finds generation 0 gone,
    /// deletes itself and reports not done (see [`Queue::claim`] and the lease operations).
    ///
    /// # Errors
    /// Not done: [`ErrorKind::Config`] if `older_than` is below `options.compact_guard_ms`,
    /// or nothing was deleted and no delete may have been applied. Indeterminate once a
    /// delete was done or may have been (the batch rule).
    pub fn compact(&self, older_than: Duration) -> Result<CompactReport> {
        let age = older_than.as_millis().min(i64::MAX as u128) as i64;
        if age < self.options.compact_guard_ms {
            return Err(Error::not_done(ErrorKind::Config(format!(
                "compact: older than {age} ms is below the compaction guard of {} ms",
                self.options.compact_guard_ms
            ))));
        }
        let cutoff = self.client.clock.now_ms() - age;
        let mut rep = CompactReport::default();
        let (markers, batches) = self.markers_and_batches(State::Done)?;
        for (key, m) in markers {
            if m.sort_ms > cutoff {
                continue;
            }
            if !self.compact_chain(m.id, m.gen, &mut rep)? {
                continue; // the marker is not the chain's newest: left for `repair`
            }
            self.delete_one(&key, &mut rep)?;
            rep.chains += 1;
        }
        // A batch done marker ([`Queue::ack_batch`]) goes once every chain it names is a
        // receipt alone.
        for key in batches {
            if self
                .keys
                .parse_batch_marker(&key)
                .is_none_or(|(_, sort, _)| sort > cutoff)
            {
                continue;
            }
            let BatchBody::Entries(es) =
                self.batch_body(&key).map_err(|e| batch(e, rep.objects))?
            else {
                continue; // gone meanwhile, or foreign: left as it is
            };
            let mut all = true;
            for e in &es {
                if self.compact_chain(e.id, e.gen, &mut rep)? {
                    rep.chains += 1;
                } else {
                    all = false;
                }
            }
            if all {
                self.delete_one(&key, &mut rep)?;
            }
        }
        Ok(rep)
    }

    /// Delete the generations of chain `id` below `gen`, from generation 0 upwards, if `gen`
    /// is its newest (one LIST, a DELETE each). `Ok(false)`: it is not (left for `repair`).
    fn compact_chain(&self, id: u128, gen: u64, rep: &mut CompactReport) -> Result<bool> {
        let chain = format!("{}{}/", self.keys.chains(), crate::keys::id_hex(id));
        let page = self
            .list_page(&chain, None, None, 1000)
            .map_err(|e| batch(e, rep.objects))?;
        let mut gens: Vec<u64> = page
            .entries
            .iter()
            .filter_map(|e| self.keys.parse_gen(&e.key).map(|(_, g)| g))
            .collect();
        gens.sort_unstable();
        if gens.last() != Some(&gen) {
            return Ok(false);
        }
        for g in gens.iter().filter(|g| **g < gen) {
            self.delete_one(&self.keys.gen(id, *g), rep)?;
        }
        Ok(true)
    }

    /// DELETE `key`, retried; counted in `rep`. A failure is indeterminate once something
    /// was deleted, or when this delete may have been applied.
    fn delete_one(&self, key: &str, rep: &mut CompactReport) -> Result<()> {
        let mut maybe = false;
        let mut last = ErrorKind::Transport("no try".into());
        for i in 0..self.options.tries.max(1) {
            if i > 0 {
                self.pause(i - 1);
            }
            match self.client.delete(key) {
                Ok(r) if (200..300).contains(&r.status) => {
                    rep.objects += 1;
                    return Ok(());
                }
                Ok(r) => {
                    last = ErrorKind::Status {
                        status: r.status,
                        what: format!("DELETE {key}"),
                    };
                    if r.status < 500 {
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
        if maybe {
            Err(Error::indeterminate(last))
        } else {
            Err(batch(Error::not_done(last), rep.objects))
        }
    }
}
