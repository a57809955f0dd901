//! Administration: what an operator runs on a queue rather than a worker: the walk over
//! the job areas ([`walk`]), listing and finding jobs ([`view`]), [`status`], requeue and
//! purge of dead-letters ([`dead`]), waiting until a queue is drained ([`drain`]), the
//! checker ([`fsck`]), and the receipt policy, evidence log and compaction ([`receipts`]).

// Declared in the order rustdoc lists `Queue`'s methods: looking first (blank lines keep
// rustfmt from sorting them).
pub(crate) mod status;
pub(crate) mod view;

pub(crate) mod dead;
pub(crate) mod drain;

pub(crate) mod counts;
pub(crate) mod fsck;
pub(crate) mod groups;
pub(crate) mod receipts;
pub(crate) mod walk;
