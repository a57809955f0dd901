//! Streaming enqueue: a payload read from an [`std::io::Read`] in [`CHUNK`]-byte pieces, so
//! memory does not grow with it (one 64 KiB buffer and two SHA-256 states).
//!
//! A payload that ends within the first chunk takes the in-memory path (one `writev`, as
//! [`Queue::enqueue_with`]). A longer one is written into the unnamed (or `tmp/`) file of
//! [`Queue::write_with`] at offset [`HEADER_LEN`] as it is read, its SHA-256 taken on the
//! way; past the payload limit it is refused at once. Its length is then known: the header
//! needs it before the envelope digest, so the payload is read back from the file for that
//! digest, and the header is written at offset 0 (`pwrite`). Publication is the in-memory
//! path's ([`Queue::publish_durably`]), with the same three outcomes. Everything before the
//! link or rename is not done and leaves nothing behind.

use crate::disk::format::{encode_prefix, Envelope, PayloadDigest, HEADER_LEN};
use crate::disk::sys::Call;
use crate::error::{Cause, ErrorKind, Result};
use crate::ops::enqueue::EnqueueError;
use crate::ops::enqueue::{Body, EnqueueOptions, FillError, Prepared, Written};
use crate::ops::keys::Enqueued;
use crate::queue::Queue;
use crate::JobId;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

/// Bytes read, written and hashed at a time.
pub const CHUNK: usize = 64 * 1024;

/// A job streamed into its file, not yet published. Dropped unpublished, it leaves nothing
/// (an unnamed file vanishes with its fd; a named one in `tmp/` is unlinked).
pub(crate) struct Staged<'a> {
    q: &'a Queue,
    p: Prepared<'a>,
    w: Option<Written>,
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        if let Some(Written::Named(tmp, _)) = self.w.take() {
            let _ = self.q.sys.unlink(self.q.dirs.tmp.as_fd(), &tmp);
        }
    }
}

impl Staged<'_> {
    /// Publish it (once): the linearization point and the barriers after it.
    pub(crate) fn publish(&mut self) -> Result<JobId> {
        let w = self.w.take().ok_or_else(|| {
            Cause::not_done(
                ErrorKind::InvalidArgument("a streamed job is published once"),
                None,
            )
        })?;
        self.q.publish_durably(&self.p, w)
    }
}

/// The payload of an enqueue: bytes in memory, or a job already streamed into its file.
pub(crate) enum Source<'a> {
    Bytes(&'a [u8]),
    Staged(Box<Staged<'a>>),
}

impl Source<'_> {
    /// Payload bytes (for the capacity check).
    pub(crate) fn len(&self) -> u64 {
        match self {
            Source::Bytes(b) => b.len() as u64,
            Source::Staged(s) => match s.p.body {
                Body::Streamed { len } => len,
                Body::Bytes { payload, .. } => payload.len() as u64,
            },
        }
    }

    /// The id the job already has (a staged job's header names it).
    pub(crate) fn id(&self) -> Option<JobId> {
        match self {
            Source::Bytes(_) => None,
            Source::Staged(s) => Some(s.p.name.id),
        }
    }
}

impl Queue {
    /// Enqueue the payload `input` yields until its end, reading it in 64 KiB chunks:
    /// memory stays about 64 KiB (plus two SHA-256 states) whatever the payload's size, up
    /// to [`crate::Options::max_payload`]. Options (a key, a wait for room included) work
    /// as in [`Queue::enqueue_with`], whose result it returns. A payload of less than 64 KiB is
    /// written with one `writev`, as [`Queue::enqueue_with`] does; a longer one is written
    /// as it is read, then read back once for its envelope digest. A delay counts from the
    /// start of the call.
    ///
    /// # Errors
    /// As [`Queue::enqueue_with`]; [`ErrorKind::PayloadTooLarge`] as soon as the input
    /// passes the limit (its `len` is the bytes read by then), and [`ErrorKind::Input`] when
    /// `input` fails: both not done, nothing left behind.
    ///
    /// # Examples
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("steadq-doc-reader-{}", std::process::id()));
    /// let q = steadq::Queue::create(&dir, Default::default())?;
    /// let big = vec![7u8; 200_000];
    /// let id = q.enqueue_reader(&mut &big[..], &Default::default())?.id();
    /// let lease = q.claim()?.expect("one job is ready");
    /// assert_eq!((lease.id(), lease.payload()?), (id, &big[..]));
    /// # lease.ack()?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), steadq::Error>(())
    /// ```
    pub fn enqueue_reader(
        &self,
        input: &mut impl Read,
        o: &EnqueueOptions,
    ) -> Result<Enqueued, EnqueueError> {
        if !o.after.is_empty() {
            // A job with dependencies is read into memory (at most the payload limit) and
            // enqueued as `enqueue_with` does (ops/deps.rs).
            let payload = self
                .read_payload(input)
                .map_err(EnqueueError::from_internal)?;
            return self.enqueue_with(&payload, o);
        }
        self.enqueue_reader_as(input, o, o.wait)
            .map_err(EnqueueError::from_internal)
    }

    /// All of `input`, refused past the queue's payload limit ([`ErrorKind::PayloadTooLarge`])
    /// or when it cannot be read ([`ErrorKind::Input`]); not done.
    fn read_payload(&self, input: &mut dyn Read) -> Result<Vec<u8>> {
        let limit = self.opts.max_payload;
        let mut payload = Vec::new();
        input
            .take(limit.saturating_add(1))
            .read_to_end(&mut payload)
            .map_err(|e| Cause::not_done(ErrorKind::Input(e.to_string()), None))?;
        let len = payload.len() as u64;
        if len > limit {
            return Err(Cause::not_done(
                ErrorKind::PayloadTooLarge { len, limit },
                None,
            ));
        }
        Ok(payload)
    }

    fn enqueue_reader_as(
        &self,
        input: &mut dyn Read,
        o: &EnqueueOptions,
        wait: Option<Duration>,
    ) -> Result<Enqueued> {
        o.priority_on(&self.ident)?;
        let mut buf = vec![0u8; CHUNK];
        let n = read_full(input, &mut buf)?;
        let mut src = if n < CHUNK {
            Source::Bytes(&buf[..n])
        } else {
            if wait.is_none() && o.key.is_none() {
                // A full queue refuses before the payload is read (a duplicate key is
                // answered even when full, and a wait waits after it).
                drop(self.admit(1, n as u64)?);
            }
            Source::Staged(Box::new(self.stage(input, &mut buf, o)?))
        };
        match wait {
            Some(t) => self.enqueue_wait_source(&mut src, o, t),
            None => self.enqueue_unique_source(&mut src, o),
        }
    }

    /// Write the job file of the payload whose first [`CHUNK`] bytes are in `buf` and whose
    /// rest `input` yields, unpublished.
    fn stage<'a>(
        &'a self,
        input: &mut dyn Read,
        buf: &mut [u8],
        o: &EnqueueOptions,
    ) -> Result<Staged<'a>> {
        let mut p = self.prepare(None, o, None)?;
        let mut len = 0u64;
        let w = self.write_with(&p, true, &mut |fd| {
            self.fill_stream(fd, input, buf, &p, &mut len)
        })?;
        p.body = Body::Streamed { len };
        Ok(Staged {
            q: self,
            p,
            w: Some(w),
        })
    }

    /// Write the payload (first `buf`, then what `input` yields) at offset [`HEADER_LEN`] of
    /// `fd`, then the header at offset 0; `len` ends as the payload's length.
    fn fill_stream(
        &self,
        fd: BorrowedFd<'_>,
        input: &mut dyn Read,
        buf: &mut [u8],
        p: &Prepared<'_>,
        len: &mut u64,
    ) -> core::result::Result<(), FillError> {
        let limit = self.opts.max_payload;
        let mut digest = PayloadDigest::default();
        let mut n = buf.len();
        while n > 0 {
            let total = *len + n as u64;
            if total > limit {
                let kind = ErrorKind::PayloadTooLarge { len: total, limit };
                return Err(FillError::Other(Cause::not_done(kind, None)));
            }
            digest.update(&buf[..n]);
            let at = HEADER_LEN as u64 + *len;
            self.sys
                .write_all_at(fd, &buf[..n], at)
                .map_err(|e| (Call::Write, e))?;
            *len = total;
            if n < buf.len() {
                break; // the input ended within this chunk
            }
            n = read_full(input, buf).map_err(FillError::Other)?;
        }
        let mut h = encode_prefix(
            p.name.id.0,
            self.ident.id,
            p.created_ns,
            *len,
            digest.finish(),
        );
        // The envelope digest covers the length, known only now: read the payload back.
        let mut env = Envelope::new(&h);
        self.copy_range(fd, None, *len, HEADER_LEN as u64, buf, &mut |b| {
            env.update(b)
        })?;
        env.seal(&mut h);
        self.sys
            .write_all_at(fd, &h, 0)
            .map_err(|e| (Call::Write, e))?;
        Ok(())
    }

    /// Read `len` bytes of `from` from offset `at` through `buf`, handing each piece to `f`
    /// and writing it at the same offset of `to` when given.
    fn copy_range(
        &self,
        from: BorrowedFd<'_>,
        to: Option<BorrowedFd<'_>>,
        len: u64,
        at: u64,
        buf: &mut [u8],
        f: &mut dyn FnMut(&[u8]),
    ) -> core::result::Result<(), FillError> {
        let mut off = 0u64;
        while off < len {
            let m = (len - off).min(buf.len() as u64) as usize;
            self.sys
                .read_exact_at(from, &mut buf[..m], at + off)
                .map_err(|e| (Call::Read, e))?;
            f(&buf[..m]);
            if let Some(to) = to {
                self.sys
                    .write_all_at(to, &buf[..m], at + off)
                    .map_err(|e| (Call::Write, e))?;
            }
            off += m as u64;
        }
        Ok(())
    }

    /// A streamed job's file copied from the unnamed file `from` into a new one under `tmp/`
    /// (neither `linkat` route works here; its input was read once and is gone).
    pub(crate) fn copy_job(
        &self,
        p: &Prepared<'_>,
        from: BorrowedFd<'_>,
        len: u64,
        sync: bool,
    ) -> Result<Written> {
        let mut buf = vec![0u8; CHUNK];
        let total = HEADER_LEN as u64 + len;
        self.write_with(p, sync, &mut |to| {
            self.copy_range(from, Some(to), total, 0, &mut buf, &mut |_| {})
        })
    }
}

/// Read from `input` until `buf` is full or the input ends; the bytes read.
fn read_full(input: &mut dyn Read, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Cause::not_done(ErrorKind::Input(e.to_string()), None)),
        }
    }
    Ok(n)
}
