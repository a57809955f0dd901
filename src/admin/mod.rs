//! Administration: what an operator runs on a queue rather than a worker: listing,
//! status, requeue and purge of dead-letters ([`view`]), and the checker ([`fsck`]).

pub(crate) mod fsck;
pub(crate) mod view;
