//! The on-disk layer: the bytes of a job file, the grammar of its name, how a directory
//! listing becomes typed entries, the clocks a name's times come from, and every syscall.
//!
//! Nothing here knows about transitions: it only encodes, decodes and calls the kernel.
//! Fault injection reaches every syscall because [`sys::Sys`] is the only door to it.

pub mod barrier;
pub(crate) mod clock;
pub mod counts;
pub(crate) mod fault;
pub mod format;
pub(crate) mod identity;
pub mod layout;
pub mod name;
pub mod outside;
pub mod scan;
pub mod slot;
pub mod state;
pub mod sys;
pub(crate) mod tempname;
