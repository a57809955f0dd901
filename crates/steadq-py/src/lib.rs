//! `steadq._steadq`: the steadq library for Python (PyO3, stable ABI 3.9+).
//!
//! A thin layer over the public API of the `steadq` crate: [`Queue::create`] / [`Queue::open`],
//! [`Queue::enqueue_with`], [`Queue::claim_with`], the [`Lease`] and its settling calls,
//! [`Queue::status`]. The outcomes become exceptions: `NotDone` (nothing changed; its
//! subclasses `LeaseLost` and `QueueFull`), `Indeterminate` (it may have happened), all
//! `SteadqError`s carrying the message, the path, the error kind's name and the errno.
//!
//! Every call that touches the disk runs with the GIL released (`Python::detach`): other
//! Python threads run while a claim waits or an enqueue fsyncs. A waiting claim or enqueue
//! waits in slices of at most [`SLICE`], checking for signals between them, so Ctrl-C
//! interrupts it. No Python object crosses a detached section: payloads are held as
//! `PyBackedBytes`/`PyBackedStr` (immutable, `Send`), and a lease's mutex is only ever
//! locked with the GIL released, so a thread holding it never waits for the GIL.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyIOError};
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyBytes, PyDict, PyType};
use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use steadq::{
    Cause, ClaimOptions, EnqueueOptions, ErrorKind, JobId, Key, Lease, Limits, Nacked, Options,
    Outcome, PayloadReader, Queue, Reason,
};

create_exception!(
    steadq,
    SteadqError,
    PyException,
    "A steadq call failed. Attributes: `path` (str or None), `kind` (the library's ErrorKind \
     name, e.g. 'Io', 'InvalidArgument'), `errno` (int or None), `job_id` (the job an \
     indeterminate enqueue may have made, else None)."
);
create_exception!(
    steadq,
    NotDone,
    SteadqError,
    "Not done: nothing changed. Safe to retry."
);
create_exception!(
    steadq,
    Indeterminate,
    SteadqError,
    "Indeterminate: it may have happened, or may not survive a crash. Look (status, the \
     job id) before redoing it."
);
create_exception!(
    steadq,
    LeaseLost,
    NotDone,
    "The lease is gone: it expired and was recovered, or was settled already. Nothing \
     changed; the job is someone else's now."
);
create_exception!(
    steadq,
    QueueFull,
    NotDone,
    "The queue is at its capacity limit: the enqueue was not done."
);

/// The longest stretch a waiting claim or enqueue spends without the GIL before it checks
/// for signals (KeyboardInterrupt) and goes on waiting.
const SLICE: Duration = Duration::from_secs(1);

/// The exception for `outcome` and `cause`, with `message` and the cause's attributes.
fn raise(
    py: Python<'_>,
    outcome: Outcome,
    cause: &Cause,
    message: String,
    job: Option<String>,
) -> PyErr {
    let e = match (outcome, cause.kind()) {
        (Outcome::Indeterminate, _) => Indeterminate::new_err(message),
        (_, ErrorKind::LeaseLost) => LeaseLost::new_err(message),
        (_, ErrorKind::QueueFull { .. }) => QueueFull::new_err(message),
        _ => NotDone::new_err(message),
    };
    let kind = format!("{:?}", cause.kind());
    let kind: String = kind
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let path = cause.path().map(|p| p.display().to_string());
    let errno = cause.errno().map(|e| e.raw_os_error());
    annotate(py, e, path, Some(kind), errno, job)
}

/// Set the attributes every `SteadqError` carries.
fn annotate(
    py: Python<'_>,
    e: PyErr,
    path: Option<String>,
    kind: Option<String>,
    errno: Option<i32>,
    job: Option<String>,
) -> PyErr {
    let v = e.value(py);
    // Setting attributes on a fresh exception instance cannot fail but for memory.
    let _ = v.setattr("path", path);
    let _ = v.setattr("kind", kind);
    let _ = v.setattr("errno", errno);
    let _ = v.setattr("job_id", job);
    e
}

/// A bad argument, refused before any call: `NotDone` (kind `InvalidArgument`).
fn bad_arg(py: Python<'_>, message: String) -> PyErr {
    annotate(
        py,
        NotDone::new_err(message),
        None,
        Some("InvalidArgument".into()),
        None,
        None,
    )
}

fn from_error(py: Python<'_>, e: steadq::Error) -> PyErr {
    raise(py, e.outcome(), e.cause(), e.to_string(), None)
}

/// Seconds (int or float) as a Duration: finite and not negative, else `NotDone`.
fn secs(py: Python<'_>, name: &str, v: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(v).map_err(|_| {
        bad_arg(
            py,
            format!("{name}: a number of seconds >= 0 is needed, got {v}"),
        )
    })
}

fn opt_secs(py: Python<'_>, name: &str, v: Option<f64>) -> PyResult<Option<Duration>> {
    v.map(|v| secs(py, name, v)).transpose()
}

/// A payload: bytes (or bytearray) as they are, str as UTF-8.
#[derive(FromPyObject)]
enum Payload {
    Bytes(PyBackedBytes),
    Str(PyBackedStr),
}

impl Payload {
    fn as_bytes(&self) -> &[u8] {
        match self {
            Payload::Bytes(b) => b,
            Payload::Str(s) => s.as_bytes(),
        }
    }
}

/// A queue: a directory on a local filesystem. `Queue.create(path)` makes one (or opens the
/// queue already there), `Queue.open(path)` opens one. Cheap to share between threads.
#[pyclass(module = "steadq", name = "Queue", frozen)]
struct PyQueue {
    q: Queue,
}

#[pymethods]
impl PyQueue {
    /// Create a queue at `path` (an empty or missing directory; a queue already there is
    /// opened). `shards`, `max_attempts` (claims before a job is dead-lettered), `lease`
    /// (seconds, the default lease of claims) and `max_payload` (bytes) default to the
    /// library's. Raises NotDone or Indeterminate.
    #[classmethod]
    #[pyo3(signature = (path, *, shards=None, max_attempts=None, lease=None, max_payload=None))]
    fn create(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        path: std::path::PathBuf,
        shards: Option<u16>,
        max_attempts: Option<u32>,
        lease: Option<f64>,
        max_payload: Option<u64>,
    ) -> PyResult<PyQueue> {
        let mut o = Options::default();
        if let Some(s) = shards {
            o.shards = s;
        }
        if let Some(m) = max_attempts {
            o.max_attempts = m;
        }
        if let Some(l) = opt_secs(py, "lease", lease)? {
            o.lease = l;
        }
        if let Some(m) = max_payload {
            o.max_payload = m;
        }
        let q = py
            .detach(|| Queue::create(&path, o))
            .map_err(|e| from_error(py, e))?;
        Ok(PyQueue { q })
    }

    /// Open the queue at `path`. Raises NotDone (not a queue, unreadable, ...).
    #[classmethod]
    fn open(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        path: std::path::PathBuf,
    ) -> PyResult<PyQueue> {
        let q = py
            .detach(|| Queue::open(&path))
            .map_err(|e| from_error(py, e))?;
        Ok(PyQueue { q })
    }

    /// The queue's directory.
    #[getter]
    fn path(&self) -> std::path::PathBuf {
        self.q.root().to_path_buf()
    }

    /// Enqueue `payload` (bytes, or str stored as UTF-8); returns the job id (str). Done
    /// when it returns: the job is durable.
    ///
    /// `priority` 0..=7 (7 first; default 3), `key` an idempotency key (at most one job per
    /// key: when it is taken nothing is enqueued and the id of the job holding it is
    /// returned), `delay` seconds before the job is handed out, `max_attempts` claims before
    /// it is dead-lettered, `wait` seconds to wait for room when the queue is full (else
    /// QueueFull at once), `after` a list of job ids (str) to wait for: the job is not
    /// claimable until each is acked, and is dead-lettered (reason "dependency") if one is
    /// (at most 64, each in this queue; not with `delay`, `key` or `wait`), `group` the
    /// job's group (1 to 16 of a-z 0-9: at most the group's limit of its jobs are leased at
    /// once, see `set_group_limit`). Raises NotDone (QueueFull; kind "BadDependency" naming a
    /// bad id; InvalidArgument for a bad group) or Indeterminate (its `job_id` may exist).
    #[pyo3(signature = (payload, *, priority=None, key=None, delay=None, max_attempts=None, wait=None, after=None, group=None))]
    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &self,
        py: Python<'_>,
        payload: Payload,
        priority: Option<u8>,
        key: Option<&str>,
        delay: Option<f64>,
        max_attempts: Option<u32>,
        wait: Option<f64>,
        after: Option<Vec<String>>,
        group: Option<&str>,
    ) -> PyResult<String> {
        let after = after
            .unwrap_or_default()
            .iter()
            .map(|s| {
                JobId::parse(s).ok_or_else(|| {
                    bad_arg(
                        py,
                        format!("after: {s:?} is not a job id (32 lowercase hex digits)"),
                    )
                })
            })
            .collect::<PyResult<Vec<JobId>>>()?;
        let group = match group {
            None => None,
            Some(g) => Some(steadq::GroupName::new(g).ok_or_else(|| {
                bad_arg(
                    py,
                    format!("group: 1 to 16 characters of [a-z0-9] are needed, got {g:?}"),
                )
            })?),
        };
        let key = match key {
            None => None,
            Some(k) => Some(Key::new(k).ok_or_else(|| {
                bad_arg(
                    py,
                    format!(
                        "key: 1 to {} characters of [A-Za-z0-9._:-] are needed, got {k:?}",
                        Key::MAX_LEN
                    ),
                )
            })?),
        };
        let mut o = EnqueueOptions {
            max_attempts,
            delay: opt_secs(py, "delay", delay)?,
            key,
            priority,
            wait: None,
            after,
            group,
        };
        let deadline = opt_secs(py, "wait", wait)?.map(|w| Instant::now() + w);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            o.wait = left.map(|l| l.min(SLICE));
            let r = py.detach(|| self.q.enqueue_with(payload.as_bytes(), &o));
            match r {
                Ok(e) => return Ok(e.id().to_string()),
                Err(e) => {
                    let more = matches!(e.cause().kind(), ErrorKind::QueueFull { .. })
                        && e.outcome() == Outcome::NotDone
                        && left.is_some_and(|l| l > SLICE);
                    if more {
                        py.check_signals()?;
                        continue;
                    }
                    let job = e.id().map(|i| i.to_string());
                    return Err(raise(py, e.outcome(), e.cause(), e.to_string(), job));
                }
            }
        }
    }

    /// Claim the next job: a Lease, or None when no job is ready (after waiting up to `wait`
    /// seconds for one). `lease` is the lease's length in seconds (default: the queue's,
    /// 30 s): settle or renew it within that time. The GIL is released while it waits;
    /// Ctrl-C interrupts the wait. Raises NotDone or Indeterminate.
    #[pyo3(signature = (*, lease=None, wait=None))]
    fn claim(
        &self,
        py: Python<'_>,
        lease: Option<f64>,
        wait: Option<f64>,
    ) -> PyResult<Option<PyLease>> {
        let lease = opt_secs(py, "lease", lease)?;
        let deadline = opt_secs(py, "wait", wait)?.map(|w| Instant::now() + w);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let o = ClaimOptions {
                lease,
                wait: left.map(|l| l.min(SLICE)),
                stop: None,
            };
            match py.detach(|| self.q.claim_with(&o)) {
                Ok(Some(l)) => return Ok(Some(PyLease::new(l))),
                Ok(None) if left.is_some_and(|l| l > SLICE) => py.check_signals()?,
                Ok(None) => return Ok(None),
                Err(e) => return Err(from_error(py, e)),
            }
        }
    }

    /// Counts of the queue's jobs: a dict with `ready`, `leased`, `expired_leases`,
    /// `delayed`, `dead`, `acked`, `live_keys`, `oldest_ready_age` (seconds or None),
    /// `ready_by_priority` (8 counts, priority 0 first), `max_jobs` and `max_bytes` (the
    /// capacity limits, None when unset), `groups` (per group: `ready`, `leased`,
    /// `max_leased`, `limit_unknown`: the limits file is damaged), `barriers_voided_by` (the
    /// mount option under which no fsync here is durable, such as `"ext4 mounted
    /// nobarrier"`, or None). Read-only; raises NotDone.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = py
            .detach(|| self.q.status())
            .map_err(|e| from_error(py, e))?;
        let d = PyDict::new(py);
        d.set_item("ready", s.ready)?;
        d.set_item("leased", s.leased)?;
        d.set_item("expired_leases", s.expired_leases)?;
        d.set_item("delayed", s.delayed)?;
        d.set_item("waiting", s.waiting)?;
        d.set_item("dead", s.dead)?;
        d.set_item("acked", s.acked)?;
        d.set_item("live_keys", s.live_keys)?;
        d.set_item(
            "oldest_ready_age",
            s.oldest_ready_age.map(|a| a.as_secs_f64()),
        )?;
        d.set_item("ready_by_priority", s.ready_by_priority.to_vec())?;
        d.set_item("max_jobs", s.limits.max_jobs)?;
        d.set_item("max_bytes", s.limits.max_bytes)?;
        d.set_item("barriers_voided_by", s.barriers_voided_by.as_deref())?;
        let groups = PyDict::new(py);
        for u in &s.groups {
            let g = PyDict::new(py);
            g.set_item("ready", u.ready)?;
            g.set_item("leased", u.leased)?;
            g.set_item("max_leased", u.max_leased)?;
            g.set_item("limit_unknown", u.limit_unknown)?;
            groups.set_item(u.group.as_str(), g)?;
        }
        d.set_item("groups", groups)?;
        Ok(d)
    }

    /// Set group `group`'s limit: at most `max_leased` (1..=1000) of its jobs leased at
    /// once, across every process; None removes it. Raises NotDone (a bad group or limit)
    /// or Indeterminate.
    #[pyo3(signature = (group, max_leased))]
    fn set_group_limit(
        &self,
        py: Python<'_>,
        group: &str,
        max_leased: Option<u32>,
    ) -> PyResult<()> {
        let g = steadq::GroupName::new(group).ok_or_else(|| {
            bad_arg(
                py,
                format!("group: 1 to 16 characters of [a-z0-9] are needed, got {group:?}"),
            )
        })?;
        py.detach(|| self.q.set_group_limit(&g, max_leased))
            .map_err(|e| from_error(py, e))
    }

    /// Set the capacity limits (None: no limit): enqueues past them raise QueueFull, or wait
    /// for room with `wait`. Raises NotDone or Indeterminate.
    #[pyo3(signature = (*, max_jobs=None, max_bytes=None))]
    fn set_limits(
        &self,
        py: Python<'_>,
        max_jobs: Option<u64>,
        max_bytes: Option<u64>,
    ) -> PyResult<()> {
        py.detach(|| {
            self.q.set_limits(Limits {
                max_jobs,
                max_bytes,
            })
        })
        .map_err(|e| from_error(py, e))
    }

    fn __repr__(&self) -> String {
        format!("steadq.Queue({:?})", self.q.root().display().to_string())
    }
}

/// A claimed job. Settle it once: `ack()`, `nack(delay)`, `fail(reason)` or `release()`;
/// `renew(lease)` extends it. As a context manager it acks on a clean exit and nacks (with
/// backoff) when the block raises, unless the block settled it already. Dropped unsettled,
/// the job goes back to ready at once.
#[pyclass(module = "steadq", name = "Lease", frozen)]
struct PyLease {
    /// The lease; None once settled (or while a settling call runs). Locked only with the
    /// GIL released.
    inner: Mutex<Option<Lease>>,
    id: String,
    attempt: u32,
    max_attempts: u32,
    priority: u8,
    size: u64,
}

impl PyLease {
    fn new(l: Lease) -> PyLease {
        PyLease {
            id: l.id().to_string(),
            attempt: l.attempt(),
            max_attempts: l.max_attempts(),
            priority: l.priority(),
            size: l.payload_len(),
            inner: Mutex::new(Some(l)),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Lease>> {
        // A panic while holding it left an Option, still whole.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn gone(&self, py: Python<'_>) -> PyErr {
        annotate(
            py,
            LeaseLost::new_err(format!(
                "the lease of job {} was settled already (ack, nack, fail or release)",
                self.id
            )),
            None,
            Some("LeaseLost".into()),
            None,
            None,
        )
    }

    /// Run a settling call on the lease (GIL released). Not done hands the lease back.
    fn settle<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(Lease) -> Result<T, steadq::SettleError> + Send,
    ) -> PyResult<T> {
        let r = py.detach(|| {
            let Some(l) = self.slot().take() else {
                return Ok(None);
            };
            match f(l) {
                Ok(v) => Ok(Some(v)),
                Err(e) => {
                    let (outcome, cause, message) = (e.outcome(), e.cause().clone(), e.to_string());
                    if let Some(back) = e.into_lease() {
                        *self.slot() = Some(back);
                    }
                    Err((outcome, cause, message))
                }
            }
        });
        match r {
            Ok(Some(v)) => Ok(v),
            Ok(None) => Err(self.gone(py)),
            Err((o, c, m)) => Err(raise(py, o, &c, m, None)),
        }
    }

    fn default_delay(&self) -> Duration {
        steadq::backoff(
            self.attempt,
            Duration::from_secs(1),
            Duration::from_secs(300),
        )
    }
}

#[pymethods]
impl PyLease {
    /// The job id.
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    /// This claim's attempt (1 for the first).
    #[getter]
    fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Claims allowed before the job is dead-lettered.
    #[getter]
    fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The job's priority, 0..=7.
    #[getter]
    fn priority(&self) -> u8 {
        self.priority
    }

    /// The payload's length in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    /// True once the lease was settled (or lost in a settling call).
    #[getter]
    fn settled(&self, py: Python<'_>) -> bool {
        py.detach(|| self.slot().is_none())
    }

    /// The payload as bytes (verified against its digest). For a large payload use
    /// `reader()`. Raises NotDone, or LeaseLost after settling.
    fn payload<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let r = py.detach(|| {
            self.slot()
                .as_ref()
                .map(|l| l.payload().map(|p| p.to_vec()))
        });
        match r {
            None => Err(self.gone(py)),
            Some(Err(e)) => Err(from_error(py, e)),
            Some(Ok(v)) => Ok(PyBytes::new(py, &v)),
        }
    }

    /// The payload as a stream: a reader with `read(size=-1)`, checking the digest as it
    /// goes (read to the end, b"", before acting on the bytes). Raises NotDone.
    fn reader(&self, py: Python<'_>) -> PyResult<PyPayloadReader> {
        let r = py.detach(|| self.slot().as_ref().map(|l| l.reader()));
        match r {
            None => Err(self.gone(py)),
            Some(Err(e)) => Err(from_error(py, e)),
            Some(Ok(r)) => Ok(PyPayloadReader {
                inner: Mutex::new(Some(r)),
            }),
        }
    }

    /// Extend the lease to `lease` seconds from now. Raises NotDone, LeaseLost or
    /// Indeterminate.
    fn renew(&self, py: Python<'_>, lease: f64) -> PyResult<()> {
        let d = secs(py, "lease", lease)?;
        let r = py.detach(|| self.slot().as_mut().map(|l| l.renew(d)));
        match r {
            None => Err(self.gone(py)),
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(raise(py, e.outcome(), e.cause(), e.to_string(), None)),
        }
    }

    /// Ack: the job is done; returns the receipt's name. Raises NotDone (the lease is kept:
    /// ack again), LeaseLost or Indeterminate.
    fn ack(&self, py: Python<'_>) -> PyResult<String> {
        self.settle(py, |l| l.ack()).map(|r| r.name)
    }

    /// Nack: retry the job after `delay` seconds (default: the backoff for this attempt,
    /// 1 s doubling up to 300 s); with no attempt left it is dead-lettered. Returns where it
    /// went: "ready", "delayed" or "dead".
    #[pyo3(signature = (delay=None))]
    fn nack(&self, py: Python<'_>, delay: Option<f64>) -> PyResult<&'static str> {
        let d = opt_secs(py, "delay", delay)?.unwrap_or_else(|| self.default_delay());
        self.settle(py, |l| l.nack(d)).map(|n| match n {
            Nacked::Ready => "ready",
            Nacked::Delayed(_) => "delayed",
            Nacked::Dead => "dead",
        })
    }

    /// Fail: dead-letter the job now with `reason` (1 to 16 of [a-z0-9]).
    #[pyo3(signature = (reason="failed"))]
    fn fail(&self, py: Python<'_>, reason: &str) -> PyResult<()> {
        let r = Reason::new(reason).ok_or_else(|| {
            bad_arg(
                py,
                format!("reason: 1 to 16 characters of [a-z0-9] are needed, got {reason:?}"),
            )
        })?;
        self.settle(py, |l| l.fail(r))
    }

    /// Release the job back to ready now (its attempt stays counted).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        self.settle(py, |l| l.release())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Ack on a clean exit; nack with the attempt's backoff when the block raised (the
    /// exception goes on). A lease the block settled is left alone.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if self.settled(py) {
            return Ok(false);
        }
        if exc_type.is_none() {
            self.ack(py)?;
        } else {
            self.nack(py, None)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("steadq.Lease(id={:?}, attempt={})", self.id, self.attempt)
    }
}

/// A claimed job's payload as a stream (`Lease.reader()`): `read(size=-1)`. The bytes are
/// proven only when a read returns b"" (the digest checked at the end); a mismatch raises
/// OSError.
#[pyclass(module = "steadq", name = "PayloadReader", frozen)]
struct PyPayloadReader {
    inner: Mutex<Option<PayloadReader>>,
}

#[pymethods]
impl PyPayloadReader {
    /// Read up to `size` bytes (all the rest when negative); b"" at the end.
    #[pyo3(signature = (size=-1))]
    fn read<'py>(&self, py: Python<'py>, size: i64) -> PyResult<Bound<'py, PyBytes>> {
        let r = py.detach(|| -> std::io::Result<Vec<u8>> {
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let Some(r) = g.as_mut() else {
                return Err(std::io::Error::other("read of a closed PayloadReader"));
            };
            let mut v = Vec::new();
            if size < 0 {
                r.read_to_end(&mut v)?;
            } else {
                v.resize(size as usize, 0);
                let n = r.read(&mut v)?;
                v.truncate(n);
            }
            Ok(v)
        });
        match r {
            Ok(v) => Ok(PyBytes::new(py, &v)),
            Err(e) => Err(PyIOError::new_err(e.to_string())),
        }
    }

    /// True: the reader reads.
    fn readable(&self) -> bool {
        true
    }

    /// Close the job file.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> bool {
        self.close(py);
        false
    }
}

/// The library's backoff: `base * 2**(attempt-1)` seconds, capped at `max`.
#[pyfunction]
#[pyo3(signature = (attempt, base=1.0, max=300.0))]
fn backoff(py: Python<'_>, attempt: u32, base: f64, max: f64) -> PyResult<f64> {
    let b = secs(py, "base", base)?;
    let m = secs(py, "max", max)?;
    Ok(steadq::backoff(attempt, b, m).as_secs_f64())
}

#[pymodule]
fn _steadq(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyQueue>()?;
    m.add_class::<PyLease>()?;
    m.add_class::<PyPayloadReader>()?;
    m.add_function(wrap_pyfunction!(backoff, m)?)?;
    m.add("SteadqError", py.get_type::<SteadqError>())?;
    m.add("NotDone", py.get_type::<NotDone>())?;
    m.add("Indeterminate", py.get_type::<Indeterminate>())?;
    m.add("LeaseLost", py.get_type::<LeaseLost>())?;
    m.add("QueueFull", py.get_type::<QueueFull>())?;
    m.add("PRIORITY_LEVELS", steadq::PRIORITY_LEVELS)?;
    m.add("DEFAULT_PRIORITY", steadq::DEFAULT_PRIORITY)?;
    m.add("MAX_LEASE", steadq::MAX_LEASE.as_secs_f64())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
