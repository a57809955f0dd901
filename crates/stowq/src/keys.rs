//! The key layout and the small text records. See DESIGN-S3.md for why.
//!
//! ```text
//! P/queue                                  identity: "stowq 1\nqueue <32 hex>\n"
//! P/j/<id>/00000000                        the job envelope (steadq::format), generation 0
//! P/j/<id>/<gen 8 hex>                     generation gen >= 1: a Record (the job's state)
//! P/i/<state>/<shard>/<sort 13>.<id>.<gen 8 hex>.<attempt>   index marker (a hint)
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
        Some(Record {
            state: State::parse(&field("state")?)?,
            attempt: field("attempt")?.parse().ok()?,
            at_ms: field("at")?.parse().ok()?,
            due_ms: field("due")?.parse().ok()?,
            token: field("token")?,
            nonce: field("nonce")?,
            reason: field("reason")?,
        })
    }

    /// The value a marker sorts by: due time (ready), deadline (leased), write time (else).
    pub fn sort_ms(&self) -> i64 {
        match self.state {
            State::Ready | State::Leased => self.due_ms,
            State::Done | State::Dead => self.at_ms,
        }
    }
}

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

    /// The marker for generation `gen` of `id` holding `rec`.
    pub fn marker(&self, id: u128, gen: u64, rec: &Record) -> String {
        format!(
            "{}{:013}.{}.{gen:08x}.{}",
            self.index_shard(rec.state, shard(id)),
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
        let state = State::parse(p.next()?)?;
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
        if f.next().is_some() || shard_part.len() != 1 || !shard_part.starts_with(shard(id)) {
            return None;
        }
        Some(Marker {
            state,
            sort_ms,
            id,
            gen,
            attempt,
        })
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
}
