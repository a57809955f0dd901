//! Administration: what an operator runs on a queue rather than a worker: listing,
//! status, requeue and purge of dead-letters ([`view`]), the checker ([`fsck`]), and the
//! receipt policy, evidence log and compaction ([`receipts`]).

pub(crate) mod fsck;
pub(crate) mod receipts;
pub(crate) mod view;
