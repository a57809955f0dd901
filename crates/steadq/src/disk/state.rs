//! The state machine: one table that the code asserts against, the docs print and the crash
//! verifier models.
//!
//! Every transition is one `renameat2(RENAME_NOREPLACE)` (or, for enqueue, one `linkat`)
//! from the exact current name to the next, followed by the durability barriers listed. The
//! rename is the linearization point: a failure before it is "not done", a failure of a
//! barrier after it is "indeterminate". Every transition adds 1 to the generation; only
//! `Claim` adds 1 to the attempt count.

/// Where a job is. The directory and the name kind always agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// `ready/<shard>/`, ready name.
    Ready,
    /// `ready/<shard>/`, leased name.
    Leased,
    /// `delayed/<bucket>/`.
    Delayed,
    /// `dead/<bucket>/`.
    Dead,
    /// `receipts/<shard>/`.
    Acked,
    /// `waiting/`, ready name: a job whose dependencies are not all acked yet
    /// (`needs/<id>/` lists them; `ops/deps.rs`). Never claimed.
    Waiting,
}

/// What moves a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A producer publishes a new job.
    Enqueue,
    /// A producer publishes a job with a not-before time.
    EnqueueDelayed,
    /// A worker takes the lease (attempt + 1).
    Claim,
    /// A claim finds no attempt left.
    ClaimExhausted,
    /// A claim finds the file corrupt.
    ClaimCorrupt,
    /// A claim may not open the job it moved (`EACCES`, `EPERM`: another user's file at
    /// mode 600 in a shard both may write): the job goes back to ready with the claim's
    /// attempt given back, for a worker that may read it.
    ClaimUnreadable,
    /// The holder could not hand the job over to what would run it (the payload or the
    /// lease handle could not be written: `steadq claim` with a full disk), so nothing ran:
    /// back to ready with the claim's attempt given back ([`crate::Lease::release_undelivered`]).
    ClaimUndelivered,
    /// The holder extends the deadlines.
    Renew,
    /// The holder is done; the job becomes a receipt.
    Ack,
    /// Ack found the file corrupt on re-verification.
    AckCorrupt,
    /// The holder asks for a retry after a delay.
    Nack,
    /// The holder asks for an immediate retry (delay zero), or drops the lease unsettled.
    Release,
    /// Nack or release with no attempt left.
    NackExhausted,
    /// The holder gives up: dead-letter with a reason.
    Fail,
    /// Recovery finds an expired lease (or one from another boot).
    Expire,
    /// Recovery finds an expired lease with no attempt left.
    ExpireExhausted,
    /// Recovery finds a delayed job due.
    Due,
    /// An operator requeues a dead job (attempts reset).
    Requeue,
    /// A producer publishes a job that waits for other jobs (`EnqueueOptions::after`).
    EnqueueWaiting,
    /// The last dependency of a waiting job was acked: the job becomes ready.
    DependenciesMet,
    /// A dependency of a waiting job was dead-lettered: the job is dead-lettered with
    /// reason `dependency`.
    DependencyDead,
    /// An operator requeues a dead job whose dependencies are not all acked (attempts
    /// reset): it waits again.
    RequeueWaiting,
}

/// The whole table: `(from, op, to)`; `None` as `from` means "new".
pub const TRANSITIONS: &[(Option<State>, Op, State)] = &[
    (None, Op::Enqueue, State::Ready),
    (None, Op::EnqueueDelayed, State::Delayed),
    (Some(State::Ready), Op::Claim, State::Leased),
    (Some(State::Ready), Op::ClaimExhausted, State::Dead),
    (Some(State::Leased), Op::ClaimCorrupt, State::Dead),
    (Some(State::Leased), Op::ClaimUnreadable, State::Ready),
    (Some(State::Leased), Op::ClaimUndelivered, State::Ready),
    (Some(State::Leased), Op::Renew, State::Leased),
    (Some(State::Leased), Op::Ack, State::Acked),
    (Some(State::Leased), Op::AckCorrupt, State::Dead),
    (Some(State::Leased), Op::Nack, State::Delayed),
    (Some(State::Leased), Op::Release, State::Ready),
    (Some(State::Leased), Op::NackExhausted, State::Dead),
    (Some(State::Leased), Op::Fail, State::Dead),
    (Some(State::Leased), Op::Expire, State::Ready),
    (Some(State::Leased), Op::ExpireExhausted, State::Dead),
    (Some(State::Delayed), Op::Due, State::Ready),
    (Some(State::Dead), Op::Requeue, State::Ready),
    (None, Op::EnqueueWaiting, State::Waiting),
    (Some(State::Waiting), Op::DependenciesMet, State::Ready),
    (Some(State::Waiting), Op::DependencyDead, State::Dead),
    (Some(State::Dead), Op::RequeueWaiting, State::Waiting),
];

/// The state `op` leads to from `from`, if the table allows it.
pub fn next(from: Option<State>, op: Op) -> Option<State> {
    TRANSITIONS
        .iter()
        .find(|t| t.0 == from && t.1 == op)
        .map(|t| t.2)
}

/// Assert (in debug builds) that `from --op--> to` is in the table; every rename site calls it.
#[inline]
pub fn check(from: Option<State>, op: Op, to: State) {
    debug_assert_eq!(
        next(from, op),
        Some(to),
        "transition {from:?} --{op:?}--> {to:?} is not in the table"
    );
}

/// What an operation does to a job's attempt count (claims so far).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Unchanged.
    Keep,
    /// Plus one: a claim uses an attempt.
    Add,
    /// Back to zero: an operator's requeue gives the job its attempts again.
    Reset,
    /// Minus one: a claim that could not open the job, or hand it over, gives back the
    /// attempt it added.
    GiveBack,
}

impl Op {
    /// The attempt rule: only a claim adds one, only a requeue resets, only a claim that
    /// could not open its job or hand it over gives one back; every other move keeps the
    /// count. Every
    /// rename asserts it ([`attempt_after`]).
    pub fn attempt(self) -> Attempt {
        match self {
            Op::Claim => Attempt::Add,
            Op::Requeue | Op::RequeueWaiting => Attempt::Reset,
            Op::ClaimUnreadable | Op::ClaimUndelivered => Attempt::GiveBack,
            _ => Attempt::Keep,
        }
    }
}

/// The attempt count after `op` moves a job that had `attempt`.
pub fn attempt_after(op: Op, attempt: u32) -> u32 {
    match op.attempt() {
        Attempt::Keep => attempt,
        Attempt::Add => attempt + 1,
        Attempt::Reset => 0,
        Attempt::GiveBack => attempt.saturating_sub(1),
    }
}

#[cfg(any(test, feature = "faults"))]
/// The table as Markdown rows (with each op's attempt rule), for the docs and for the
/// doc-matches-code test.
pub fn table_markdown() -> String {
    let mut s = String::from("| from | op | to | attempt |\n|---|---|---|---|\n");
    for (f, o, t) in TRANSITIONS {
        let f = f
            .map(|f| format!("{f:?}"))
            .unwrap_or_else(|| "(new)".into());
        let a = match o.attempt() {
            Attempt::Keep => "=",
            Attempt::Add => "+1",
            Attempt::Reset => "0",
            Attempt::GiveBack => "-1",
        };
        s.push_str(&format!("| {f} | {o:?} | {t:?} | {a} |\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_a_function() {
        for (i, a) in TRANSITIONS.iter().enumerate() {
            for b in &TRANSITIONS[i + 1..] {
                assert!(!(a.0 == b.0 && a.1 == b.1), "duplicate {a:?}");
            }
        }
        assert_eq!(next(Some(State::Acked), Op::Claim), None);
        assert_eq!(next(Some(State::Ready), Op::Claim), Some(State::Leased));
    }

    #[test]
    fn receipts_are_terminal() {
        assert!(TRANSITIONS.iter().all(|t| t.0 != Some(State::Acked)));
    }

    #[test]
    fn design_doc_shows_the_table() {
        let doc = include_str!("../../../../DESIGN.md");
        assert!(
            doc.contains(&table_markdown()),
            "DESIGN.md's transition table differs from state::TRANSITIONS:\n{}",
            table_markdown()
        );
    }
}
