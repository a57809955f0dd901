//! The key layout and the small text records. See DESIGN-S3.md for why.
//!
//! ```text
//! P/queue                                  identity: "stowq 1\nqueue <32 hex>\n"
//! P/j/<id>/00000000                        the job envelope (steadq::format), generation 0
//! P/j/<id>/<gen 8 hex>                     generation gen >= 1: a Record (the job's state)
//! P/i/<state>/<shard>/<sort 13>.<id>.<gen 8 hex>.<attempt>   index marker (a hint)
//! P/i/<state>/<shard>/<sort 13>.<id>.<gen 8 hex>.<attempt>.p<L>   the same, priority L != 3
//!                                          (a ready one under P/i/ready-<L>/, not P/i/ready/)
//! P/i/ready/<shard>/-p<L>                  flag: level L != 3 is in use (in all 16 shards)
//! P/i/leased|done/<shard>/<sort 13>.<batch 32 hex>.b   batch marker: its body names the
//!                                          jobs of a claim or ack batch (encode_batch)
//! ```
//!
//! The chain `P/j/<id>/` is the truth: the job's state is its highest generation, and each
//! generation is created once with `If-None-Match: *`. Index markers (empty objects) only make
//! finding jobs cheap; a marker whose generation is no longer the last is stale and is removed
//! by whoever notices.

use std::fmt::Write;

/// A job's state, as in its newest generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Waiting to be claimed (maybe not before a due time).
    Ready,
    /// Claimed under a lease.
    Leased,
    /// Acked; its record is the receipt.
    Done,
    /// Failed to the dead-letter state, with a reason.
    Dead,
}

impl State {
    /// All states, in index order.
    pub const ALL: [State; 4] = [State::Ready, State::Leased, State::Done, State::Dead];

    /// The name used in keys and records.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ready => "ready",
            State::Leased => "leased",
            State::Done => "done",
            State::Dead => "dead",
        }
    }

    /// Parse a name from [`State::as_str`].
    pub fn parse(s: &str) -> Option<State> {
        State::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// The state a generation records. Generation 0 (the envelope) is `Ready`, attempt 0, due at
/// its creation time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// State.
    pub state: State,
    /// Claims so far.
    pub attempt: u32,
    /// Service time this generation was written, unix ms.
    pub at_ms: i64,
    /// Ready: not before (unix ms, service clock). Leased: the lease deadline. Else 0.
    pub due_ms: i64,
    /// Lease token (leased, and done: the lease that acked), 32 hex; empty otherwise.
    pub token: String,
    /// Random per write: tells our own create apart from anyone else's on read-back.
    pub nonce: String,
    /// Why (dead, or a nack's note); one line.
    pub reason: String,
    /// Priority level, 0..=7 (higher is claimed first). Written as a last line `prio L`
    /// only when it is not [`crate::DEFAULT_LEVEL`], so a record of a job of the default
    /// level is byte for byte what a StowQ without levels writes; a decoder without levels
    /// ignores the line.
    pub level: u8,
}

impl Record {
    /// Encode as the object body.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = String::new();
        let reason: String = self.reason.replace(['\n', '\r'], " ");
        let _ = write!(
            s,
            "stowq-record 1\nstate {}\nattempt {}\nat {}\ndue {}\ntoken {}\nnonce {}\nreason {}\n",
            self.state.as_str(),
            self.attempt,
            self.at_ms,
            self.due_ms,
            self.token,
            self.nonce,
            reason
        );
        if self.level != crate::DEFAULT_LEVEL {
            let _ = writeln!(s, "prio {}", self.level);
        }
        s.into_bytes()
    }

    /// Decode an object body; `None` if it is not a record.
    pub fn decode(b: &[u8]) -> Option<Record> {
        let s = std::str::from_utf8(b).ok()?;
        let mut lines = s.lines();
        if lines.next()? != "stowq-record 1" {
            return None;
        }
        let mut field = |name: &str| -> Option<String> {
            let l = lines.next()?;
            let v = l.strip_prefix(name)?.strip_prefix(' ').unwrap_or("");
            Some(v.to_string())
        };
        let mut r = Record {
            state: State::parse(&field("state")?)?,
            attempt: field("attempt")?.parse().ok()?,
            at_ms: field("at")?.parse().ok()?,
            due_ms: field("due")?.parse().ok()?,
            token: field("token")?,
            nonce: field("nonce")?,
            reason: field("reason")?,
            level: crate::DEFAULT_LEVEL,
        };
        if let Some(l) = lines.next() {
            r.level = l
                .strip_prefix("prio ")?
                .parse()
                .ok()
                .filter(|l| *l <= MAX_LEVEL)?;
        }
        Some(r)
    }

    /// The value a marker sorts by: due time (ready), deadline (leased), write time (else).
    pub fn sort_ms(&self) -> i64 {
        match self.state {
            State::Ready | State::Leased => self.due_ms,
            State::Done | State::Dead => self.at_ms,
        }
    }
}

/// The highest priority level (levels are `0..=MAX_LEVEL`, as a local queue's).
pub const MAX_LEVEL: u8 = 7;

/// The 16 index shards: the last hex digit of the job id.
pub const SHARDS: [char; 16] = [
    '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'a', 'b', 'c', 'd', 'e', 'f',
];

/// Lowercase 32-hex job id.
pub fn id_hex(id: u128) -> String {
    format!("{id:032x}")
}

/// The shard of job `id`.
pub fn shard(id: u128) -> char {
    SHARDS[(id & 0xf) as usize]
}

/// Key layout under one prefix (`""` or `a/b`, no trailing slash).
#[derive(Clone, Debug)]
pub struct Keys {
    base: String,
}

/// A parsed index marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marker {
    /// The state it indexes.
    pub state: State,
    /// Due, deadline or write time, unix ms.
    pub sort_ms: i64,
    /// Job id.
    pub id: u128,
    /// The generation it points at.
    pub gen: u64,
    /// That generation's attempt count.
    pub attempt: u32,
    /// The job's priority level.
    pub level: u8,
}

impl Keys {
    /// Keys under `prefix` (slashes at either end are trimmed).
    pub fn new(prefix: &str) -> Keys {
        let p = prefix.trim_matches('/');
        Keys {
            base: if p.is_empty() {
                String::new()
            } else {
                format!("{p}/")
            },
        }
    }

    /// The identity object.
    pub fn identity(&self) -> String {
        format!("{}queue", self.base)
    }

    /// Generation `gen` of job `id`.
    pub fn gen(&self, id: u128, gen: u64) -> String {
        format!("{}j/{}/{gen:08x}", self.base, id_hex(id))
    }

    /// The object of idempotency key `key` (`P/k/<key>`), which names its job.
    pub fn idem(&self, key: &str) -> String {
        format!("{}k/{key}", self.base)
    }

    /// Prefix of every chain.
    pub fn chains(&self) -> String {
        format!("{}j/", self.base)
    }

    /// Prefix of one state's index.
    pub fn index(&self, state: State) -> String {
        format!("{}i/{}/", self.base, state.as_str())
    }

    /// Prefix of one state's index shard.
    pub fn index_shard(&self, state: State, shard: char) -> String {
        format!("{}i/{}/{shard}/", self.base, state.as_str())
    }

    /// Prefix of the ready index of priority `level` (`P/i/ready/` for the default level,
    /// `P/i/ready-<level>/` for another).
    pub fn ready_index(&self, level: u8) -> String {
        if level == crate::DEFAULT_LEVEL {
            self.index(State::Ready)
        } else {
            format!("{}i/ready-{level}/", self.base)
        }
    }

    /// Prefix of every ready index, of every level: `P/i/ready` (no slash), one listing.
    pub fn ready_indexes(&self) -> String {
        format!("{}i/ready", self.base)
    }

    /// The flag that level `level` (not the default) is in use, in shard `shard` of the
    /// default ready index: it sorts before every marker of the shard (`-` before the
    /// digits), so a claim's listing of that shard meets it first.
    pub fn level_flag(&self, shard: char, level: u8) -> String {
        format!("{}{shard}/-p{level}", self.index(State::Ready))
    }

    /// The level a key of [`Keys::level_flag`]'s shape flags; `None` if it is none.
    pub fn parse_level_flag(&self, key: &str) -> Option<u8> {
        let rest = key.strip_prefix(&self.index(State::Ready))?;
        let (shard_part, name) = rest.split_once('/')?;
        let l: u8 = name.strip_prefix("-p")?.parse().ok()?;
        (shard_part.len() == 1
            && SHARDS.contains(&shard_part.chars().next()?)
            && l <= MAX_LEVEL
            && l != crate::DEFAULT_LEVEL
            && name.len() == 3)
            .then_some(l)
    }

    /// The marker for generation `gen` of `id` holding `rec`. A job of the default level has
    /// the markers of a StowQ without levels; another level's names end in `.p<level>`, and
    /// its ready markers are in its own index ([`Keys::ready_index`]).
    pub fn marker(&self, id: u128, gen: u64, rec: &Record) -> String {
        let dir = match rec.state {
            State::Ready => format!("{}{}/", self.ready_index(rec.level), shard(id)),
            s => self.index_shard(s, shard(id)),
        };
        let tag = if rec.level == crate::DEFAULT_LEVEL {
            String::new()
        } else {
            format!(".p{}", rec.level)
        };
        format!(
            "{dir}{:013}.{}.{gen:08x}.{}{tag}",
            rec.sort_ms().max(0),
            id_hex(id),
            rec.attempt
        )
    }

    /// Parse a marker key; `None` if it is not one of ours: its shard part must be the one
    /// hex digit [`shard`] gives its id (a claim's listing jumps past a shard by that digit,
    /// so a foreign `i/ready/00/...` taken for a marker made it list the same keys forever).
    pub fn parse_marker(&self, key: &str) -> Option<Marker> {
        let rest = key.strip_prefix(&self.base)?.strip_prefix("i/")?;
        let mut p = rest.split('/');
        let dir = p.next()?;
        // `ready-<L>`: the ready index of level L (not the default).
        let (state, dir_level) = match dir.strip_prefix("ready-") {
            Some(l) => (State::Ready, Some(l.parse::<u8>().ok()?)),
            None => (State::parse(dir)?, None),
        };
        let shard_part = p.next()?;
        let name = p.next()?;
        if p.next().is_some() {
            return None;
        }
        let mut f = name.split('.');
        let sort_ms = f.next()?.parse().ok()?;
        let id = u128::from_str_radix(f.next()?, 16).ok()?;
        let gen = u64::from_str_radix(f.next()?, 16).ok()?;
        let attempt = f.next()?.parse().ok()?;
        let level = match f.next() {
            None => crate::DEFAULT_LEVEL,
            Some(t) => {
                let l: u8 = t.strip_prefix('p')?.parse().ok()?;
                if l == crate::DEFAULT_LEVEL || l > MAX_LEVEL || t.len() != 2 {
                    return None;
                }
                l
            }
        };
        // A ready marker of another level is in that level's index, and only there.
        if state == State::Ready && dir_level.unwrap_or(crate::DEFAULT_LEVEL) != level {
            return None;
        }
        if f.next().is_some() || shard_part.len() != 1 || !shard_part.starts_with(shard(id)) {
            return None;
        }
        Some(Marker {
            state,
            sort_ms,
            id,
            gen,
            attempt,
            level,
        })
    }

    /// The batch marker of batch `batch` in the index of `state` (leased or done), sorted
    /// by `sort_ms` (the batch's lease deadline, or its ack time): `P/i/<state>/<shard of
    /// batch>/<sort 13>.<batch 32 hex>.b`. Its body ([`encode_batch`]) names the jobs.
    pub fn batch_marker(&self, state: State, sort_ms: i64, batch: u128) -> String {
        format!(
            "{}{:013}.{}.b",
            self.index_shard(state, shard(batch)),
            sort_ms.max(0),
            id_hex(batch)
        )
    }

    /// Parse a batch marker key into (state, sort ms, batch id); `None` if it is not one.
    /// Only the leased and done indexes hold them.
    pub fn parse_batch_marker(&self, key: &str) -> Option<(State, i64, u128)> {
        let rest = key.strip_prefix(&self.base)?.strip_prefix("i/")?;
        let mut p = rest.split('/');
        let state = State::parse(p.next()?)?;
        let shard_part = p.next()?;
        let name = p.next()?;
        if p.next().is_some() || !matches!(state, State::Leased | State::Done) {
            return None;
        }
        let mut f = name.split('.');
        let sort_s = f.next()?;
        let id_s = f.next()?;
        if f.next()? != "b" || f.next().is_some() || sort_s.len() != 13 || id_s.len() != 32 {
            return None;
        }
        let sort_ms = sort_s.parse().ok()?;
        let batch = u128::from_str_radix(id_s, 16).ok()?;
        (shard_part.len() == 1 && shard_part.starts_with(shard(batch)))
            .then_some((state, sort_ms, batch))
    }

    /// Parse a chain key into (id, gen); `None` if it is not one.
    pub fn parse_gen(&self, key: &str) -> Option<(u128, u64)> {
        let rest = key.strip_prefix(&self.base)?.strip_prefix("j/")?;
        let (id, gen) = rest.split_once('/')?;
        Some((
            u128::from_str_radix(id, 16).ok()?,
            u64::from_str_radix(gen, 16).ok()?,
        ))
    }
}

/// One job a batch marker names: the generation it indexes (leased, or done) and that
/// generation's attempt and level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchEntry {
    /// Job id.
    pub id: u128,
    /// The indexed generation.
    pub gen: u64,
    /// Its attempt count.
    pub attempt: u32,
    /// The job's priority level.
    pub level: u8,
}

/// The body of a batch marker: `stowq-batch 1`, then `<id 32 hex> <gen hex> <attempt>
/// <level>` per job.
pub fn encode_batch(entries: &[BatchEntry]) -> Vec<u8> {
    let mut s = String::from("stowq-batch 1\n");
    for e in entries {
        let _ = writeln!(s, "{} {:x} {} {}", id_hex(e.id), e.gen, e.attempt, e.level);
    }
    s.into_bytes()
}

/// Decode a batch marker's body; `None` if it is not one (a foreign object at a batch
/// marker's key).
pub fn decode_batch(b: &[u8]) -> Option<Vec<BatchEntry>> {
    let s = std::str::from_utf8(b).ok()?;
    let mut lines = s.lines();
    if lines.next()? != "stowq-batch 1" {
        return None;
    }
    lines
        .map(|l| {
            let mut f = l.split(' ');
            let id_s = f.next()?;
            let e = BatchEntry {
                id: u128::from_str_radix(id_s, 16).ok()?,
                gen: u64::from_str_radix(f.next()?, 16).ok()?,
                attempt: f.next()?.parse().ok()?,
                level: f.next()?.parse().ok().filter(|l| *l <= MAX_LEVEL)?,
            };
            (f.next().is_none() && id_s.len() == 32).then_some(e)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_markers_round_trip() {
        let r = Record {
            state: State::Leased,
            attempt: 3,
            at_ms: 5,
            due_ms: 1_796_098_045_000,
            token: "ab".into(),
            nonce: "cd".into(),
            reason: "two\nlines".into(),
            level: crate::DEFAULT_LEVEL,
        };
        let d = Record::decode(&r.encode()).unwrap();
        assert_eq!(d.reason, "two lines");
        assert_eq!(
            Record {
                reason: r.reason.clone(),
                ..d
            },
            r
        );
        let k = Keys::new("/q/x/");
        let id = 0x1234_u128;
        let m = k.marker(id, 7, &r);
        assert_eq!(
            m,
            "q/x/i/leased/4/1796098045000.00000000000000000000000000001234.00000007.3"
        );
        let p = k.parse_marker(&m).unwrap();
        assert_eq!((p.state, p.id, p.gen, p.attempt), (State::Leased, id, 7, 3));
        assert_eq!(k.parse_gen(&k.gen(id, 9)), Some((id, 9)));
        assert_eq!(Keys::new("").identity(), "queue");
        assert!(Record::decode(b"STEADQJ\0").is_none());
        // Only our own shapes: the id's one shard digit, four fields, no deeper path.
        for foreign in [
            "q/x/i/leased/04/1796098045000.00000000000000000000000000001234.00000007.3",
            "q/x/i/leased/5/1796098045000.00000000000000000000000000001234.00000007.3",
            "q/x/i/leased/4/1796098045000.00000000000000000000000000001234.00000007.3.x",
            "q/x/i/leased/4/x/1796098045000.00000000000000000000000000001234.00000007.3",
        ] {
            assert_eq!(k.parse_marker(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn levels_in_records_and_markers() {
        let k = Keys::new("q");
        let id = 0x1234_u128;
        let mut r = Record {
            state: State::Ready,
            attempt: 1,
            at_ms: 5,
            due_ms: 9,
            token: String::new(),
            nonce: "cd".into(),
            reason: String::new(),
            level: crate::DEFAULT_LEVEL,
        };
        // The default level writes what a StowQ without levels wrote, and reads it.
        let plain =
            "stowq-record 1\nstate ready\nattempt 1\nat 5\ndue 9\ntoken \nnonce cd\nreason \n";
        assert_eq!(String::from_utf8(r.encode()).unwrap(), plain);
        assert_eq!(
            k.marker(id, 2, &r),
            "q/i/ready/4/0000000000009.00000000000000000000000000001234.00000002.1"
        );
        r.level = 7;
        let enc = String::from_utf8(r.encode()).unwrap();
        assert_eq!(enc, format!("{plain}prio 7\n"));
        assert_eq!(Record::decode(enc.as_bytes()), Some(r.clone()));
        assert_eq!(Record::decode(b"stowq-record 1\nstate ready\nattempt 1\nat 5\ndue 9\ntoken \nnonce cd\nreason \nprio 8\n"), None);
        let m = k.marker(id, 2, &r);
        assert_eq!(
            m,
            "q/i/ready-7/4/0000000000009.00000000000000000000000000001234.00000002.1.p7"
        );
        assert!(m.starts_with(&k.ready_index(7)) && m.starts_with(&k.ready_indexes()));
        let p = k.parse_marker(&m).unwrap();
        assert_eq!((p.state, p.gen, p.level), (State::Ready, 2, 7));
        r.state = State::Leased;
        let m = k.marker(id, 3, &r);
        assert_eq!(
            m,
            "q/i/leased/4/0000000000009.00000000000000000000000000001234.00000003.1.p7"
        );
        assert_eq!(k.parse_marker(&m).unwrap().level, 7);
        for foreign in [
            // a ready marker outside its level's index, or tagged with the default level
            "q/i/ready/4/0000000000009.00000000000000000000000000001234.00000002.1.p7",
            "q/i/ready-7/4/0000000000009.00000000000000000000000000001234.00000002.1",
            "q/i/ready-5/4/0000000000009.00000000000000000000000000001234.00000002.1.p7",
            "q/i/leased/4/0000000000009.00000000000000000000000000001234.00000003.1.p3",
            "q/i/leased/4/0000000000009.00000000000000000000000000001234.00000003.1.p8",
        ] {
            assert_eq!(k.parse_marker(foreign), None, "{foreign}");
        }
        assert_eq!(k.level_flag('a', 5), "q/i/ready/a/-p5");
        assert_eq!(k.parse_level_flag("q/i/ready/a/-p5"), Some(5));
        assert_eq!(k.parse_level_flag("q/i/ready/a/-p3"), None);
        assert_eq!(k.parse_marker("q/i/ready/a/-p5"), None);
    }
    #[test]
    fn batch_markers_round_trip_and_are_no_job_markers() {
        let k = Keys::new("q");
        let b = 0xabc_u128;
        let m = k.batch_marker(State::Leased, 1_796_098_045_000, b);
        assert_eq!(
            m,
            "q/i/leased/c/1796098045000.00000000000000000000000000000abc.b"
        );
        assert_eq!(
            k.parse_batch_marker(&m),
            Some((State::Leased, 1_796_098_045_000, b))
        );
        assert_eq!(k.parse_marker(&m), None, "not a job marker");
        let d = k.batch_marker(State::Done, 5, b);
        assert_eq!(k.parse_batch_marker(&d), Some((State::Done, 5, b)));
        for foreign in [
            "q/i/leased/b/1796098045000.00000000000000000000000000000abc.b",
            "q/i/ready/c/1796098045000.00000000000000000000000000000abc.b",
            "q/i/leased/c/1796098045000.00000000000000000000000000000abc.b.x",
            "q/i/leased/c/179609804500.00000000000000000000000000000abc.b",
        ] {
            assert_eq!(k.parse_batch_marker(foreign), None, "{foreign}");
        }
        let es = vec![
            BatchEntry {
                id: 1,
                gen: 0x1a,
                attempt: 2,
                level: 3,
            },
            BatchEntry {
                id: u128::MAX,
                gen: 1,
                attempt: 1,
                level: 7,
            },
        ];
        let body = encode_batch(&es);
        assert_eq!(
            String::from_utf8(body.clone()).unwrap(),
            format!(
                "stowq-batch 1\n{:032x} 1a 2 3\n{} 1 1 7\n",
                1,
                "f".repeat(32)
            )
        );
        assert_eq!(decode_batch(&body), Some(es));
        assert_eq!(decode_batch(b"stowq-batch 1\n"), Some(vec![]));
        assert_eq!(decode_batch(b"stowq-batch 1\n1 1 1 3\n"), None);
        assert_eq!(decode_batch(b"stowq-batch 2\n"), None);
    }
}
