//! The operations: the state table and the code that moves a job along it.
//!
//! [`state::TRANSITIONS`] is the table DESIGN.md shows; `transition.rs` is where a rename
//! happens; enqueue, claim/lease, recovery and the blocking wait each own one file.

// Declared in the order rustdoc lists `Queue`'s methods: enqueue and claim first (blank
// lines keep rustfmt from sorting them).
pub(crate) mod enqueue;
pub(crate) mod enqueue_stream;

pub(crate) mod lease;

pub(crate) mod capacity;
pub(crate) mod deps;
pub(crate) mod group;
pub(crate) mod keys;
pub(crate) mod levels;
pub(crate) mod making;
pub(crate) mod payload;
pub(crate) mod recover;
pub(crate) mod shards;
pub(crate) mod slots;
pub(crate) mod split;
pub(crate) mod transition;
pub(crate) mod wait;
