//! Typed queues (feature `serde`): values in, values out, encoded with `postcard`.
//!
//! Why postcard: a compact, documented wire format (varint integers, no field names, no
//! padding: a `(u32, String)` of a 10-byte string is 12 bytes) that is stable across its 1.x
//! releases, small in code, and maintained; bincode's 1.x format is larger (fixed-width
//! integers by default) and its 2.x changed both API and format. Like any serde codec without
//! field names, a struct's fields must keep their order: add new fields at the end and as
//! `Option`s read by new workers only, or version the type.
//!
//! A job's bytes are the plain postcard encoding of the value; the file envelope (header and
//! SHA-256 digests) is the same as for any job, so `steadq show` and `fsck` work unchanged.

use crate::{
    Cause, ClaimOptions, EnqueueOptions, Enqueued, ErrorKind, JobId, Lease, Nacked, Queue, Reason,
};
use crate::{EnqueueError, Error, Receipt, RenewError, Result, SettleError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::marker::PhantomData;
use std::time::Duration;

/// A queue of `T` values: [`Queue`] with a codec (postcard). Every call has the meaning,
/// outcomes and errors of the [`Queue`] call it wraps, plus [`ErrorKind::Decode`].
/// Clones share one handle, as [`Queue`]'s do (its group commit and claim cursor), whatever
/// `T` is: clone it for each thread rather than open the queue again.
#[derive(Debug)]
pub struct TypedQueue<T> {
    q: Queue,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for TypedQueue<T> {
    fn clone(&self) -> Self {
        TypedQueue {
            q: self.q.clone(),
            _t: PhantomData,
        }
    }
}

/// A claimed typed job: the decoded value and its lease. Settle it as a [`Lease`]; dropping
/// it unsettled releases the job.
#[derive(Debug)]
pub struct TypedLease<T> {
    lease: Lease,
    value: T,
}

fn decode_error(what: String) -> Cause {
    Cause::new(ErrorKind::Decode(what), None)
}

impl<T: Serialize + DeserializeOwned> TypedQueue<T> {
    /// Wrap an open queue.
    pub fn new(q: Queue) -> TypedQueue<T> {
        TypedQueue { q, _t: PhantomData }
    }

    /// The untyped queue (status, recovery, limits).
    pub fn queue(&self) -> &Queue {
        &self.q
    }

    /// Unwrap.
    pub fn into_inner(self) -> Queue {
        self.q
    }

    /// Encode `v` (postcard) and enqueue it. Returns the job id once durable.
    ///
    /// # Errors
    /// [`ErrorKind::Decode`] (not done) if `v` cannot be encoded; otherwise as
    /// [`Queue::enqueue`].
    pub fn enqueue(&self, v: &T) -> Result<JobId, EnqueueError> {
        self.enqueue_with(v, &EnqueueOptions::default())
            .map(Enqueued::id)
    }

    /// Encode `v` and enqueue it with options (delay, priority, max attempts, idempotency
    /// key, wait for room), as [`Queue::enqueue_with`].
    ///
    /// # Errors
    /// As [`TypedQueue::enqueue`] and [`Queue::enqueue_with`].
    pub fn enqueue_with(&self, v: &T, o: &EnqueueOptions) -> Result<Enqueued, EnqueueError> {
        let bytes = postcard::to_stdvec(v)
            .map_err(|e| EnqueueError::NotDone(decode_error(e.to_string())))?;
        self.q.enqueue_with(&bytes, o)
    }

    /// Claim a job with the handle's lease and decode it: [`TypedQueue::claim_with`] with
    /// the default [`ClaimOptions`].
    ///
    /// # Errors
    /// As [`TypedQueue::claim_with`].
    pub fn claim(&self) -> Result<Option<TypedLease<T>>, Error> {
        self.claim_with(&ClaimOptions::default())
    }

    /// Claim a job as [`Queue::claim_with`] does (lease, wait, stop flag) and decode it.
    /// `Ok(None)` when no job is ready (within the wait). A payload that does not decode as
    /// `T` is dead-lettered with reason `decode` (it would fail on every attempt) and
    /// reported as [`ErrorKind::Decode`].
    ///
    /// # Errors
    /// [`ErrorKind::Decode`]: the claim was done and the job is now dead (if moving it to
    /// `dead/` failed, that error is returned instead, with its outcome); its outcome says
    /// not done (no job was handed out), so a worker loop should claim again, not stop; the errors of
    /// [`Lease::payload`] for a payload larger than 64 KiB (the job is released); otherwise
    /// as [`Queue::claim_with`].
    pub fn claim_with(&self, o: &ClaimOptions<'_>) -> Result<Option<TypedLease<T>>, Error> {
        self.q.claim_with(o)?.map(decode).transpose()
    }
}

/// Decode a claimed job, dead-lettering it when it is not a `T`. The payload is decoded from
/// memory ([`Lease::payload`]: a large one is loaded once); when loading it fails the error is
/// returned and the job released (a file changed since the claim is dead-lettered by the
/// next claim's check).
pub(crate) fn decode<T: DeserializeOwned>(lease: Lease) -> Result<TypedLease<T>, Error> {
    match postcard::from_bytes::<T>(lease.payload()?) {
        Ok(value) => Ok(TypedLease { lease, value }),
        Err(e) => {
            let what = format!("job {}: {e}", lease.id());
            lease
                .fail(Reason::new("decode").expect("a valid reason"))
                .map_err(|f| {
                    log::warn!("{what}; dead-lettering it failed: {f}");
                    f
                })?;
            Err(decode_error(what).into())
        }
    }
}

impl<T: DeserializeOwned> TypedLease<T> {
    /// [`Lease::ack_and_claim`]: ack this job and claim the next one under the same barrier,
    /// decoding it as [`TypedQueue::claim_with`] does. Returns the receipt (the ack is done)
    /// and the next job: `Ok(None)` when none is ready, or the claim's or the decoding's
    /// error (a payload that is not a `T` is dead-lettered with reason `decode`).
    ///
    /// # Errors
    /// As [`Lease::ack_and_claim`]; a not-done ack hands back the [`Lease`] (not the value).
    #[allow(clippy::type_complexity)]
    pub fn ack_and_claim(
        self,
        lease: Duration,
    ) -> Result<(Receipt, Result<Option<TypedLease<T>>, Error>), SettleError> {
        let step = self.lease.ack_and_claim(lease)?;
        let next = step.next.and_then(|l| l.map(decode).transpose());
        Ok((step.receipt, next))
    }
}

impl<T> TypedLease<T> {
    /// The decoded value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The lease (id, attempt, renew).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The lease, mutable (for [`Lease::renew`]).
    pub fn lease_mut(&mut self) -> &mut Lease {
        &mut self.lease
    }

    /// Split into the value and the lease.
    pub fn into_parts(self) -> (T, Lease) {
        (self.value, self.lease)
    }

    /// [`Lease::ack`].
    ///
    /// # Errors
    /// As [`Lease::ack`]; a not-done ack hands back the [`Lease`] (not the value).
    pub fn ack(self) -> Result<Receipt, SettleError> {
        self.lease.ack()
    }

    /// [`Lease::nack`].
    ///
    /// # Errors
    /// As [`Lease::nack`].
    pub fn nack(self, delay: Duration) -> Result<Nacked, SettleError> {
        self.lease.nack(delay)
    }

    /// [`Lease::fail`].
    ///
    /// # Errors
    /// As [`Lease::fail`].
    pub fn fail(self, reason: Reason) -> Result<(), SettleError> {
        self.lease.fail(reason)
    }

    /// [`Lease::renew`]: extend the lease to `lease` (ns precision, at most
    /// [`crate::MAX_LEASE`]) from now; the value stays.
    ///
    /// # Errors
    /// As [`Lease::renew`] (lease lost, not done, indeterminate).
    pub fn renew(&mut self, lease: Duration) -> Result<(), RenewError> {
        self.lease.renew(lease)
    }

    /// [`Lease::release`]: the job back to ready now (what dropping the lease does, with the
    /// error reported); the claim's attempt stays counted, as attempts count claims.
    ///
    /// # Errors
    /// As [`Lease::release`]; a not-done release hands back the [`Lease`].
    pub fn release(self) -> Result<(), SettleError> {
        self.lease.release()
    }
}
