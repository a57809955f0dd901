"""SteadQ for Python: a durable local job queue where the filesystem is the queue.

    import steadq

    q = steadq.Queue.create("/var/lib/jobs")        # or steadq.Queue.open(path)
    q.enqueue(b"resize img_0042.jpg", priority=5)   # bytes or str; returns the job id

    job = q.claim(lease=60, wait=5)                 # a Lease, or None
    if job is not None:
        with job:                                   # ack on a clean exit, nack on an exception
            handle(job.payload())

Every call that changes the queue returns only when it is done (durable). Otherwise it raises
``NotDone`` (nothing changed; ``LeaseLost`` and ``QueueFull`` are kinds of it) or
``Indeterminate`` (it may have happened), both ``SteadqError``. The ``steadq`` command comes
with the package (the same binary as the Debian package's). See docs/python.md.
"""

from ._steadq import (
    DEFAULT_PRIORITY,
    MAX_LEASE,
    PRIORITY_LEVELS,
    Indeterminate,
    Lease,
    LeaseLost,
    NotDone,
    PayloadReader,
    Queue,
    QueueFull,
    SteadqError,
    __version__,
    backoff,
)

__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_LEASE",
    "PRIORITY_LEVELS",
    "Indeterminate",
    "Lease",
    "LeaseLost",
    "NotDone",
    "PayloadReader",
    "Queue",
    "QueueFull",
    "SteadqError",
    "__version__",
    "backoff",
]
