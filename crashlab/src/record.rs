//! The power-cut rig's wire records: one text line each, from the device agent to the
//! controller, over TCP or a serial line.
//!
//! At every boot the agent sends its report, then one record per operation that returned done:
//! ```text
//! boot <queue id hex> mount_ms=<n> recover_ms=<n> moved=<n>
//! entry <path under the queue root> <payload sha256 | bad | ->   (every entry; `-`: not a job)
//! fsck <problem>
//! evidence <id>                                                (each id the evidence log names)
//! report <entries>                                             (ends the report)
//! op <seq> enq <id> <payload sha256>
//! op <seq> claim <id> <attempt>
//! op <seq> ack <id> | fail <id> | renew <id> | requeue <id>
//! op <seq> nack <id> <delay s>
//! op <seq> recover <id> <moved>        (recovery after job <id>'s lease ran out)
//! op <seq> compact <id> <removed>      (compaction of every receipt; <id> acked before it)
//! ```
//! The controller answers `report` and every `op` with `ok <seq>` only after the line is in
//! its records file and fsynced: the agent goes on only then, so a confirmed operation is one
//! the controller will check after every later boot.

use crate::invariants::{allow_setting, state_of, Expect, Found, Snapshot};
use std::io::{self, BufRead};
use steadq::{JobId, JobName, State};

/// Reads complete lines only: a record torn by the cut (the stream ended mid-line) is
/// dropped, never parsed. `Ok(None)` at the end of the stream.
pub fn read_record(r: &mut impl BufRead) -> io::Result<Option<String>> {
    let mut buf = Vec::new();
    let n = r.read_until(b'\n', &mut buf)?;
    if n == 0 || buf.last() != Some(&b'\n') {
        return Ok(None);
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "record is not UTF-8"))
}

/// Splits a byte stream read in chunks (with timeouts in between) into complete lines. What
/// is left without a newline when the stream ends is a torn record: [`LineBuf::torn`] says how
/// long it was, and it is never returned as a line.
#[derive(Debug, Default)]
pub struct LineBuf {
    pending: Vec<u8>,
}

impl LineBuf {
    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// The next complete line, if one has arrived.
    pub fn next_line(&mut self) -> Option<String> {
        let at = self.pending.iter().position(|&b| b == b'\n')?;
        let mut line: Vec<u8> = self.pending.drain(..=at).collect();
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Some(String::from_utf8_lossy(&line).into_owned())
    }

    /// Bytes of an incomplete last line.
    pub fn torn(&self) -> usize {
        self.pending.len()
    }
}

/// The `boot` line's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Boot {
    pub queue_id: u128,
    pub mount_ms: u64,
    pub recover_ms: u64,
    pub moved: u64,
}

impl Boot {
    pub fn line(&self) -> String {
        format!(
            "boot {:032x} mount_ms={} recover_ms={} moved={}",
            self.queue_id, self.mount_ms, self.recover_ms, self.moved
        )
    }

    pub fn parse(line: &str) -> Option<Boot> {
        let mut f = line.strip_prefix("boot ")?.split(' ');
        let queue_id = u128::from_str_radix(f.next()?, 16).ok()?;
        let mut b = Boot {
            queue_id,
            ..Boot::default()
        };
        for kv in f {
            let (k, v) = kv.split_once('=')?;
            let v: u64 = v.parse().ok()?;
            match k {
                "mount_ms" => b.mount_ms = v,
                "recover_ms" => b.recover_ms = v,
                "moved" => b.moved = v,
                _ => {}
            }
        }
        Some(b)
    }
}

/// A device's boot report, collected line by line.
#[derive(Debug, Default)]
pub struct Report {
    pub boot: Boot,
    pub entries: Vec<(String, String)>,
    pub fsck: Vec<String>,
    /// Ids in the evidence log (receipts compacted away).
    pub compacted: std::collections::HashSet<JobId>,
    /// Group `g`'s limit as the agent read it (`limit N`, `none`, `unreadable`).
    pub limit: Option<String>,
    /// The receipt policy the identity file holds (`policy P`).
    pub policy: Option<String>,
    /// `steadq.counts` (`counts ACKED DEAD`, or `counts unreadable`: `None`).
    pub counts: Option<(u64, u64)>,
    /// Each queue beside this one and whether it opens (`created NAME ok` or `... ERROR`).
    pub created: Vec<(String, bool)>,
}

impl Report {
    /// Feed one line; returns true when it was `report N` and N matches the entries seen.
    pub fn feed(&mut self, line: &str) -> Result<bool, String> {
        if let Some(b) = Boot::parse(line) {
            self.boot = b;
        } else if let Some(rest) = line.strip_prefix("entry ") {
            let (path, d) = rest.rsplit_once(' ').ok_or(format!("bad entry {line:?}"))?;
            self.entries.push((path.to_string(), d.to_string()));
        } else if let Some(p) = line.strip_prefix("fsck ") {
            self.fsck.push(p.to_string());
        } else if let Some(l) = line.strip_prefix("limit ") {
            self.limit = Some(l.to_string());
        } else if let Some(p) = line.strip_prefix("policy ") {
            self.policy = Some(p.to_string());
        } else if let Some(c) = line.strip_prefix("counts ") {
            let mut f = c.split(' ').map(|n| n.parse::<u64>().ok());
            self.counts = f.next().flatten().zip(f.next().flatten());
        } else if let Some(c) = line.strip_prefix("created ") {
            let (name, how) = c.split_once(' ').ok_or(format!("bad {line:?}"))?;
            self.created.push((name.to_string(), how == "ok"));
        } else if let Some(id) = line.strip_prefix("evidence ") {
            let id = JobId::parse(id).ok_or(format!("bad {line:?}"))?;
            self.compacted.insert(id);
        } else if let Some(n) = line.strip_prefix("report ") {
            let n: usize = n.parse().map_err(|_| format!("bad {line:?}"))?;
            if n != self.entries.len() {
                return Err(format!(
                    "report says {n} entries, {} arrived",
                    self.entries.len()
                ));
            }
            return Ok(true);
        } else {
            return Err(format!("unexpected line in a report: {line:?}"));
        }
        Ok(false)
    }

    /// The reported jobs: every entry under a job directory whose name parses for this queue.
    /// Entries that do not parse are left to fsck (which the agent ran and reported).
    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot {
            compacted: self.compacted.clone(),
            ..Snapshot::default()
        };
        for (path, d) in &self.entries {
            let top = path.split('/').next().unwrap_or("");
            if !matches!(
                top,
                "ready" | "prio" | "delayed" | "dead" | "receipts" | "waiting"
            ) {
                continue;
            }
            let file = path.rsplit('/').next().unwrap_or("");
            if let Ok(name) = JobName::parse(file, self.boot.queue_id) {
                s.jobs.push(Found {
                    rel: path.clone(),
                    name,
                    digest: (d.len() == 64).then(|| d.clone()),
                });
            }
        }
        s
    }

    /// Number of job files among the entries.
    pub fn jobs(&self) -> usize {
        self.snapshot().jobs.len()
    }
}

/// Every kind of operation a record may carry, in the order `--cut-after rotate` takes them
/// (new kinds go last, so a seed's rotation stays as it was).
pub const KINDS: &[&str] = &[
    "enq",
    "after",
    "claim",
    "renew",
    "ack",
    "nack",
    "fail",
    "requeue",
    "recover",
    "compact",
    "key",
    "limit",
    "purging",
    "purged",
    "setting",
    "policy",
    "create",
    "planted",
    "quarantined",
    "limiting",
];

/// One confirmed operation: `op <seq> <what> <id> [arg]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub seq: u64,
    pub what: String,
    pub id: JobId,
    pub arg: String,
}

impl Op {
    pub fn line(&self) -> String {
        if self.arg.is_empty() {
            format!("op {} {} {}", self.seq, self.what, self.id)
        } else {
            format!("op {} {} {} {}", self.seq, self.what, self.id, self.arg)
        }
    }

    pub fn parse(line: &str) -> Result<Option<Op>, String> {
        let Some(rest) = line.strip_prefix("op ") else {
            return Ok(None);
        };
        let mut f = rest.splitn(4, ' ');
        let bad = || format!("bad op record {line:?}");
        let seq = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let what = f.next().ok_or_else(bad)?.to_string();
        let id = f.next().and_then(JobId::parse).ok_or_else(bad)?;
        let arg = f.next().unwrap_or("").to_string();
        if !KINDS.contains(&what.as_str()) {
            return Err(bad());
        }
        Ok(Some(Op { seq, what, id, arg }))
    }
}

/// What every confirmed operation in `records` (the observer's file) says must hold.
pub fn expect_from(records: &str) -> Result<Expect, String> {
    let mut e = Expect::default();
    for line in records.lines() {
        let Some(op) = Op::parse(line)? else { continue };
        match op.what.as_str() {
            "enq" => {
                e.enqueued.insert(op.id);
                if op.arg.len() == 64 {
                    e.digests.insert(op.id, op.arg);
                }
            }
            "ack" => {
                e.acked.insert(op.id);
            }
            // `op N after ID DEP[,DEP...]`: the enqueue just before it had dependencies.
            "after" => {
                let deps = op
                    .arg
                    .split(',')
                    .map(|d| JobId::parse(d).ok_or(format!("bad dependency in {line:?}")))
                    .collect::<Result<Vec<_>, _>>()?;
                e.after.insert(op.id, deps);
            }
            "claim" => {
                let a: u32 = op
                    .arg
                    .parse()
                    .map_err(|_| format!("bad attempt in {line:?}"))?;
                let slot = e.claimed.entry(op.id).or_default();
                *slot = (*slot).max(a);
            }
            // `op N key ID KEY`: a keyed enqueue of ID returned done.
            "key" => e.keys.push((op.arg, op.id)),
            // `op N limiting ID MAX` before group `g`'s limit is written, `op N limit ID MAX`
            // after it returned done (ID: the loop's last job, not used). A cut between the
            // two leaves the write indeterminate: the queue may read either value.
            "limiting" | "limit" => {
                let max: u32 = op
                    .arg
                    .parse()
                    .map_err(|_| format!("bad limit in {line:?}"))?;
                allow_setting(&mut e.group_limits, max, op.what == "limit");
            }
            // The admin step (invariant 10, `crate::invariants`): a purge begun and done, a
            // receipt policy being set and set (ID: the loop's last job, not used), a
            // compaction's count, a queue created beside this one, a job file damaged on
            // purpose and moved aside by fsck --quarantine.
            "purging" => {
                e.keys.retain(|(_, k)| *k != op.id);
                e.purging.insert(op.id);
            }
            "purged" => {
                e.purging.remove(&op.id);
                e.purged.insert(op.id);
            }
            "setting" | "policy" => {
                e.cut_receipts |= op.arg == "header";
                allow_setting(&mut e.policies, op.arg, op.what == "policy");
            }
            "compact" => {
                let n: u64 = op
                    .arg
                    .parse()
                    .map_err(|_| format!("bad count in {line:?}"))?;
                e.compacted_receipts += n;
            }
            "create" => e.created.push(op.arg),
            "planted" => {
                e.planted.insert(op.id);
            }
            "quarantined" => {
                e.planted.remove(&op.id);
                e.quarantined.insert(op.id);
            }
            // A requeue resets the attempts, and the agent requeues every job it fails right
            // after: from the fail on, a lower attempt may be the requeue's.
            "fail" | "requeue" => {
                e.claimed.remove(&op.id);
            }
            _ => {}
        }
    }
    Ok(e)
}

/// What keyed enqueues, limit changes and the admin step's operations that returned done
/// must have left in `report`, beyond [`crate::invariants::check`]: each key's entry
/// `keys/<64 hex>` (or its retired tombstone `keys/<64 hex>.<id>.gone`); group `g`'s limit
/// as last set, or as being set when the cut came; a receipt policy the records allow;
/// `steadq.counts` at least the receipts compacted and the jobs purged; every queue created
/// beside this one opens. A key entry that does not decode is fsck's to report. One line
/// per violation.
pub fn check_report(report: &Report, expect: &Expect) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(p) = &report.policy {
        if !expect.policies.is_empty() && !expect.policies.contains(p) {
            out.push(format!(
                "receipt policy {:?} set (returned done), but the identity file says {p}",
                expect.policies
            ));
        }
    }
    let (acked, dead) = (expect.compacted_receipts, expect.purged.len() as u64);
    if acked + dead > 0 {
        match report.counts {
            Some((a, d)) if a >= acked && d >= dead => {}
            got => out.push(format!(
                "{acked} receipts compacted and {dead} dead jobs purged (returned done), but \
                 steadq.counts says {got:?}"
            )),
        }
    }
    for d in &expect.created {
        if !report.created.iter().any(|(n, ok)| n == d && *ok) {
            out.push(format!(
                "create of queue {d} returned done, but it does not open"
            ));
        }
    }
    for (key, id) in &expect.keys {
        let Some(k) = steadq::Key::new(key) else {
            out.push(format!("key record of {id}: bad key {key:?}"));
            continue;
        };
        let entry = format!("keys/{}", k.entry_name(report.boot.queue_id));
        let tomb = format!("{entry}.{id}");
        let found = report
            .entries
            .iter()
            .any(|(p, _)| *p == entry || p.starts_with(&tomb));
        if !found {
            out.push(format!(
                "keyed enqueue of {id} returned done, but its key entry {entry} is gone"
            ));
        }
    }
    if let Some(&max) = expect.group_limits.first() {
        let got = report.limit.as_deref().unwrap_or("(not reported)");
        if !expect.group_limits.iter().any(|m| got == m.to_string()) {
            let also = match expect.group_limits.get(1) {
                Some(m) => format!(" (or {m}, being set at the cut)"),
                None => String::new(),
            };
            out.push(format!(
                "group limit set to {max} returned done{also}, but the queue reads {got}"
            ));
        }
    }
    out
}

/// What the operation a cut came right after (its record confirmed, its `ok` never sent)
/// must have left, beyond [`crate::invariants::check`]: a fail leaves the job dead; a nack
/// by a day leaves it delayed; a requeue leaves it anything but dead. Sound because nothing
/// else touches such a job before the agent's next step, which the cut stopped. `None`:
/// it holds (or the kind has no such check).
pub fn check_cut_op(op: &Op, snap: &Snapshot) -> Option<String> {
    let states: Vec<State> = snap
        .jobs
        .iter()
        .filter(|f| f.name.id == op.id)
        .map(|f| state_of(&f.name))
        .collect();
    let ok = match op.what.as_str() {
        "fail" => states == [State::Dead],
        "nack" if op.arg.parse::<u64>().is_ok_and(|s| s >= 3600) => states == [State::Delayed],
        "requeue" => !states.contains(&State::Dead),
        _ => true,
    };
    (!ok).then(|| {
        format!(
            "{} of {} returned done right before the cut, but the job is {states:?}",
            op.what, op.id
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_the_limit_are_checked_against_the_report() {
        let id = JobId::new(1_700_000_000_000, 7);
        let qid = 0x1234_u128;
        let records = format!("op 1 enq {id}\nop 2 key {id} pc-abc\nop 3 limit {id} 3\n");
        let expect = expect_from(&records).unwrap();
        let entry = format!(
            "keys/{}",
            steadq::Key::new("pc-abc").unwrap().entry_name(qid)
        );
        let report = |entries: &[&str], limit: &str| Report {
            boot: Boot {
                queue_id: qid,
                ..Boot::default()
            },
            entries: entries
                .iter()
                .map(|e| (e.to_string(), "-".into()))
                .collect(),
            limit: Some(limit.into()),
            ..Report::default()
        };
        assert!(check_report(&report(&[&entry], "3"), &expect).is_empty());
        let tomb = format!("{entry}.{id}.gone");
        assert!(check_report(&report(&[&tomb], "3"), &expect).is_empty());
        let v = check_report(&report(&[], "2"), &expect);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("key entry") && v[0].contains(&entry), "{v:?}");
        assert!(
            v[1].contains("set to 3") && v[1].contains("reads 2"),
            "{v:?}"
        );
    }

    #[test]
    fn a_limit_being_set_at_the_cut_may_be_read_or_not() {
        let id = JobId::new(1_700_000_000_000, 8);
        let report = |limit: &str| Report {
            limit: Some(limit.into()),
            ..Report::default()
        };
        // Set to 3 (done), then to 2 begun and cut before its `limit` record: the rename and
        // the root's fsync may both have run, so either value is what the queue may read.
        let cut = expect_from(&format!(
            "op 1 enq {id}\nop 2 limiting {id} 3\nop 3 limit {id} 3\nop 4 limiting {id} 2\n"
        ))
        .unwrap();
        assert_eq!(cut.group_limits, vec![3, 2]);
        assert!(check_report(&report("3"), &cut).is_empty());
        assert!(check_report(&report("2"), &cut).is_empty());
        let v = check_report(&report("none"), &cut);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("set to 3 returned done (or 2, being set at the cut)")
                && v[0].contains("reads none"),
            "{v:?}"
        );
        // Once the set to 2 returned done, 3 is no longer allowed.
        let done = expect_from(&format!(
            "op 1 limit {id} 3\nop 2 limiting {id} 2\nop 3 limit {id} 2\n"
        ))
        .unwrap();
        assert_eq!(done.group_limits, vec![2]);
        assert_eq!(check_report(&report("3"), &done).len(), 1);
        // A set begun before any returned done: the create's limit or it; not checked.
        let first = expect_from(&format!("op 1 limiting {id} 3\n")).unwrap();
        assert!(check_report(&report("2"), &first).is_empty());
    }

    #[test]
    fn the_admin_steps_settings_counts_and_creates_are_checked_against_the_report() {
        let id = JobId::new(1_700_000_000_000, 9);
        let records = format!(
            "op 1 purging {id}\nop 2 purged {id}\nop 3 setting {id} none\nop 4 policy {id} none\n\
             op 5 compact {id} 2\nop 6 create {id} q2-1-ab\n"
        );
        let expect = expect_from(&records).unwrap();
        let report = |policy: &str, counts: Option<(u64, u64)>, created: &[(&str, bool)]| Report {
            policy: Some(policy.into()),
            counts,
            created: created.iter().map(|(n, ok)| (n.to_string(), *ok)).collect(),
            ..Report::default()
        };
        let good = report("none", Some((2, 1)), &[("q2-1-ab", true)]);
        assert!(check_report(&good, &expect).is_empty());
        let v = check_report(&report("job", Some((1, 1)), &[("q2-1-ab", false)]), &expect);
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v[0].contains("identity file says job"), "{v:?}");
        assert!(
            v[1].contains("2 receipts compacted and 1 dead jobs purged"),
            "{v:?}"
        );
        assert!(v[2].contains("q2-1-ab"), "{v:?}");
        // A purged job is gone by design: no "enqueue ... gone" for it.
        assert!(expect.purged.contains(&id) && !expect.purging.contains(&id));
    }

    #[test]
    fn a_torn_last_record_is_dropped() {
        let id = JobId::new(1_700_000_000_000, 42);
        let whole = format!("op 1 enq {id} {}\nop 2 ack {id}\nop 3 cla", "ab".repeat(32));
        let mut r = whole.as_bytes();
        let a = read_record(&mut r).unwrap().unwrap();
        let b = read_record(&mut r).unwrap().unwrap();
        assert_eq!(
            read_record(&mut r).unwrap(),
            None,
            "the torn line is dropped"
        );
        assert_eq!(Op::parse(&a).unwrap().unwrap().what, "enq");
        assert_eq!(
            Op::parse(&b).unwrap().unwrap().line(),
            format!("op 2 ack {id}")
        );
        // A torn line that was parsed would have been an error.
        assert!(Op::parse("op 3 cla").is_err());
    }

    #[test]
    fn a_line_split_across_reads_is_whole_and_a_torn_tail_is_never_a_line() {
        let mut b = LineBuf::default();
        b.push(b"op 1 ack 00");
        assert_eq!(b.next_line(), None);
        b.push(b"ff\r\nop 2 enq 12");
        assert_eq!(b.next_line().as_deref(), Some("op 1 ack 00ff"));
        assert_eq!(b.next_line(), None);
        assert_eq!(b.torn(), "op 2 enq 12".len());
    }

    #[test]
    fn expect_keeps_digests_and_the_highest_attempt() {
        let id = JobId::new(1_700_000_000_000, 7);
        let d = "cd".repeat(32);
        let recs = format!(
            "boot 00 mount_ms=1\nop 1 enq {id} {d}\nop 2 claim {id} 2\nop 3 claim {id} 1\nop 4 ack {id}\n"
        );
        let e = expect_from(&recs).unwrap();
        assert!(e.enqueued.contains(&id) && e.acked.contains(&id));
        assert_eq!(e.claimed[&id], 2);
        assert_eq!(e.digests[&id], d);
    }

    #[test]
    fn dependencies_are_checked_where_each_job_is() {
        use steadq::Kind;
        let (x, d) = (
            JobId::new(1_700_000_000_000, 1),
            JobId::new(1_700_000_000_001, 2),
        );
        let e = expect_from(&format!("op 1 enq {x}\nop 2 enq {d}\nop 3 after {d} {x}\n")).unwrap();
        assert_eq!(e.after[&d], vec![x]);
        let found = |id, dir: &str, kind| Found {
            rel: format!("{dir}/name"),
            name: JobName {
                id,
                generation: 1,
                attempt: 0,
                max_attempts: 5,
                priority: steadq::DEFAULT_PRIORITY,
                group: None,
                kind,
            },
            digest: Some(String::new()),
        };
        let snap = |jobs| Snapshot {
            jobs,
            ..Snapshot::default()
        };
        let dead = Kind::Dead {
            reason: steadq::Reason::FAILED,
        };
        let dep_dead = Kind::Dead {
            reason: steadq::Reason::DEPENDENCY,
        };
        let kept = [
            vec![
                found(x, "ready/00", Kind::Ready),
                found(d, "waiting", Kind::Ready),
            ],
            vec![found(x, "dead/00", dead), found(d, "dead/00", dep_dead)],
        ];
        for jobs in kept {
            let v = crate::invariants::check(&snap(jobs.clone()), &e);
            assert!(v.is_empty(), "{jobs:?}: {v:?}");
        }
        // Ready before its dependency was acked; waiting though it was; alive though it died.
        let broken = [
            (
                vec![
                    found(x, "ready/00", Kind::Ready),
                    found(d, "ready/01", Kind::Ready),
                ],
                "left waiting/",
            ),
            (
                vec![found(x, "dead/00", dead), found(d, "waiting", Kind::Ready)],
                "dead-lettered",
            ),
        ];
        for (jobs, want) in broken {
            let v = crate::invariants::check(&snap(jobs.clone()), &e);
            assert!(v.iter().any(|l| l.contains(want)), "{jobs:?}: {v:?}");
        }
        let compacted = Snapshot {
            jobs: vec![found(d, "waiting", Kind::Ready)],
            compacted: [x].into_iter().collect(),
        };
        let v = crate::invariants::check(&compacted, &e);
        assert!(v.iter().any(|l| l.contains("still waits")), "{v:?}");
    }

    #[test]
    fn the_op_a_cut_came_after_must_have_its_effect() {
        let id = JobId::new(1_700_000_000_000, 9);
        let snap_of = |kind: steadq::Kind| Snapshot {
            jobs: vec![Found {
                rel: String::new(),
                name: JobName {
                    id,
                    generation: 3,
                    attempt: 1,
                    max_attempts: 5,
                    priority: steadq::DEFAULT_PRIORITY,
                    group: None,
                    kind,
                },
                digest: None,
            }],
            ..Snapshot::default()
        };
        let op = |what: &str, arg: &str| Op {
            seq: 1,
            what: what.into(),
            id,
            arg: arg.into(),
        };
        let ready = snap_of(steadq::Kind::Ready);
        assert!(check_cut_op(&op("fail", ""), &ready).is_some());
        assert!(check_cut_op(&op("nack", "86400"), &ready).is_some());
        assert!(check_cut_op(&op("nack", "0"), &ready).is_none());
        assert!(check_cut_op(&op("requeue", ""), &ready).is_none());
        assert!(check_cut_op(&op("renew", ""), &ready).is_none());
        // A fail then a requeue: the claim's attempt no longer bounds the job's.
        let recs = format!("op 1 claim {id} 3\nop 2 fail {id}\nop 3 requeue {id}\n");
        assert!(expect_from(&recs).unwrap().claimed.is_empty());
    }

    #[test]
    fn a_compacted_job_is_no_loss_even_before_its_ack_record() {
        // The bug: an ack by `steadq work`, compacted before its record arrived, was counted
        // as a lost enqueue; and a torn evidence tail (an append the cut stopped) as damage.
        let id = JobId::new(1_700_000_000_000, 11);
        let e = expect_from(&format!("op 1 enq {id}\n")).unwrap();
        let mut snap = Snapshot::default();
        assert_eq!(
            crate::invariants::check(&snap, &e).len(),
            1,
            "gone, no evidence"
        );
        snap.compacted.insert(id);
        assert!(crate::invariants::check(&snap, &e).is_empty());
        assert!(crate::invariants::is_torn_evidence(
            "evidence.log: torn evidence (an append cut short by a crash): 0 line(s) that are \
             not evidence, a last line of 46 byte(s) without its newline"
        ));
    }

    #[test]
    fn a_report_must_be_complete() {
        let mut r = Report::default();
        assert!(!r
            .feed("boot 0000000000000000000000000000002a mount_ms=120 recover_ms=30 moved=2")
            .unwrap());
        assert!(!r.feed("entry steadq.queue -").unwrap());
        let id = JobId::new(1_700_000_000_000, 5);
        assert!(!r.feed(&format!("evidence {id}")).unwrap());
        assert!(
            r.snapshot().compacted.contains(&id),
            "a compacted ack is no loss"
        );
        assert!(r.feed("report 2").is_err());
        assert!(r.feed("report 1").unwrap());
        assert_eq!(r.boot.queue_id, 42);
        assert_eq!(
            (r.boot.mount_ms, r.boot.recover_ms, r.boot.moved),
            (120, 30, 2)
        );
        assert_eq!(r.jobs(), 0);
    }
}
