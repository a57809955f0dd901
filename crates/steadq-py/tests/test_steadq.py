"""Tests of the steadq Python package against real queues in temporary directories.

Run with the package installed (`pip install .` at the repository root, then
`pytest crates/steadq-py/tests`). The `steadq` command is the one the wheel installed beside
this interpreter.
"""

import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import steadq

STEADQ = shutil.which("steadq", path=os.path.dirname(sys.executable)) or shutil.which("steadq")


@pytest.fixture
def qdir(tmp_path):
    return tmp_path / "q"


@pytest.fixture
def q(qdir):
    return steadq.Queue.create(qdir)


def poll(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


# --- round trip ------------------------------------------------------------------------


def test_round_trip_bytes_and_str(q, qdir):
    a = q.enqueue(b"\x00binary\xff")
    time.sleep(0.002)  # ids of one millisecond are in random order
    b = q.enqueue("text é")
    assert len(a) == 32 and a != b
    assert q.status()["ready"] == 2
    assert steadq.Queue.open(qdir).path == qdir

    first = q.claim(lease=30)
    assert (first.id, first.payload(), first.attempt, first.size) == (a, b"\x00binary\xff", 1, 8)
    receipt = first.ack()
    assert a in receipt
    second = q.claim()
    assert second.payload() == "text é".encode()
    second.ack()
    assert q.claim() is None
    s = q.status()
    assert (s["ready"], s["leased"], s["acked"]) == (0, 0, 2)
    assert s["barriers_voided_by"] is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a loop mount")
def test_status_names_a_mount_option_that_voids_barriers(tmp_path):
    img, mnt = tmp_path / "ext4.img", tmp_path / "mnt"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(img)], check=True)
    subprocess.run(["mount", "-o", "loop,nobarrier", str(img), str(mnt)], check=True)
    try:
        q = steadq.Queue.create(mnt / "q")
        assert q.status()["barriers_voided_by"] == "ext4 mounted nobarrier"
        del q
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_options_priority_delay_key_max_attempts(q):
    low = q.enqueue(b"low", priority=1)
    high = q.enqueue(b"high", priority=7)
    later = q.enqueue(b"later", delay=3600)
    keyed = q.enqueue(b"once", key="order-1234", max_attempts=2)
    again = q.enqueue(b"once", key="order-1234")
    assert again == keyed
    s = q.status()
    assert (s["ready"], s["delayed"], s["live_keys"]) == (3, 1, 1)
    assert s["ready_by_priority"][7] == 1 and s["ready_by_priority"][1] == 1

    job = q.claim()
    assert (job.id, job.priority) == (high, 7)
    job.ack()
    job = q.claim()
    assert (job.id, job.max_attempts) == (keyed, 2)
    job.ack()
    job = q.claim()
    assert job.id == low
    job.ack()
    assert q.claim() is None  # `later` is not due
    assert later not in (low, high, keyed)


def test_after_waits_for_its_dependencies(q):
    transcode = q.enqueue(b"transcode 42")
    thumb = q.enqueue(b"thumbnail 42", after=[transcode])
    assert q.status()["waiting"] == 1
    job = q.claim()
    assert job.id == transcode
    assert q.claim() is None  # the thumbnail waits
    job.ack()
    job = q.claim()
    assert job.id == thumb
    job.ack()
    with pytest.raises(steadq.NotDone) as e:
        q.enqueue(b"x", after=["f" * 32])
    assert e.value.kind == "BadDependency" and "f" * 32 in str(e.value)
    with pytest.raises(steadq.NotDone) as e:
        q.enqueue(b"x", after=["not-an-id"])
    assert e.value.kind == "InvalidArgument"
    assert q.status()["waiting"] == 0


def test_groups_share_a_limit(q):
    q.set_group_limit("ffmpeg", 1)
    a = q.enqueue(b"a", group="ffmpeg")
    time.sleep(0.002)  # ids of one millisecond are in random order
    q.enqueue(b"b", group="ffmpeg")
    time.sleep(0.002)
    plain = q.enqueue(b"plain")
    first = q.claim()
    assert first.id == a
    # The group is full: the ungrouped job is next, then nothing.
    second = q.claim()
    assert second.id == plain
    assert q.claim() is None
    g = q.status()["groups"]["ffmpeg"]
    assert (g["ready"], g["leased"], g["max_leased"]) == (1, 1, 1)
    first.ack()
    second.ack()
    with pytest.raises(steadq.NotDone):
        q.enqueue(b"x", group="FFMPEG")
    q.set_group_limit("ffmpeg", None)
    assert q.status()["groups"]["ffmpeg"]["max_leased"] is None


def test_claim_waits_with_the_gil_released(q):
    """A claim waiting in one thread lets another Python thread run and enqueue."""
    got = {}

    def worker():
        t0 = time.monotonic()
        job = q.claim(lease=30, wait=10)
        got["after"] = time.monotonic() - t0
        got["payload"] = job.payload()
        job.ack()

    t = threading.Thread(target=worker)
    t.start()
    ticks = 0
    end = time.monotonic() + 0.3
    while time.monotonic() < end:  # pure Python: runs only while the claim holds no GIL
        ticks += 1
    q.enqueue(b"wake")
    t.join(10)
    assert got["payload"] == b"wake"
    assert 0.25 < got["after"] < 5
    assert ticks > 1000


def test_claim_wait_ends_with_none(q):
    t0 = time.monotonic()
    assert q.claim(wait=0.3) is None
    assert 0.25 < time.monotonic() - t0 < 3


# --- outcomes as exceptions ------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.claim(lease=0),
        lambda q: q.claim(lease=-1),
        lambda q: q.enqueue(b"x", priority=9),
        lambda q: q.enqueue(b"x", key="no spaces"),
        lambda q: q.enqueue(b"x", delay=float("nan")),
        lambda q: q.enqueue(b"x", max_attempts=0),
    ],
)
def test_bad_arguments_are_not_done(q, call):
    with pytest.raises(steadq.NotDone) as e:
        call(q)
    assert e.value.kind == "InvalidArgument"
    assert not isinstance(e.value, (steadq.LeaseLost, steadq.QueueFull))
    assert isinstance(e.value, steadq.SteadqError)
    s = q.status()
    assert (s["ready"], s["delayed"]) == (0, 0)


def test_open_of_a_non_queue_names_the_path(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(steadq.NotDone) as e:
        steadq.Queue.open(tmp_path / "plain")
    assert e.value.kind == "NotAQueue"
    assert "plain" in e.value.path
    assert "plain" in str(e.value)


def test_fail_reason_checked(q):
    q.enqueue(b"x")
    job = q.claim()
    with pytest.raises(steadq.NotDone):
        job.fail("Bad Reason")
    job.fail("badinput")
    assert q.status()["dead"] == 1


def test_ack_twice_is_lease_lost(q):
    q.enqueue(b"x")
    job = q.claim()
    job.ack()
    assert job.settled
    with pytest.raises(steadq.LeaseLost) as e:
        job.ack()
    assert isinstance(e.value, steadq.NotDone)
    with pytest.raises(steadq.LeaseLost):
        job.payload()
    assert q.status()["acked"] == 1


def _claim_and_ack(path, out):
    q = steadq.Queue.open(path)
    job = q.claim(lease=30, wait=10)
    out.put((job.id, job.attempt))
    job.ack()


def test_lease_lost_after_another_process_recovered(q, qdir):
    jid = q.enqueue(b"slow")
    job = q.claim(lease=0.2)
    assert poll(lambda: q.status()["expired_leases"] == 1)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_claim_and_ack, args=(str(qdir), out))
    p.start()
    assert out.get(timeout=30) == (jid, 2)
    p.join(30)
    assert p.exitcode == 0
    for settle in (job.ack, job.nack, job.renew):
        with pytest.raises(steadq.LeaseLost) as e:
            settle(30) if settle == job.renew else settle()
        assert e.value.kind == "LeaseLost"
    assert q.status()["acked"] == 1


def test_queue_full_set_by_the_command(q, qdir):
    subprocess.run([STEADQ, "init", str(qdir), "--max-jobs", "2"], check=True, capture_output=True)
    q.enqueue(b"1")
    q.enqueue(b"2")
    with pytest.raises(steadq.QueueFull) as e:
        q.enqueue(b"3")
    assert isinstance(e.value, steadq.NotDone)
    assert e.value.kind == "QueueFull"
    t0 = time.monotonic()
    with pytest.raises(steadq.QueueFull):
        q.enqueue(b"3", wait=0.3)
    assert time.monotonic() - t0 >= 0.3
    assert q.status()["ready"] == 2 and q.status()["max_jobs"] == 2


def test_enqueue_waits_for_room(q):
    q.set_limits(max_jobs=1)
    q.enqueue(b"1")

    def make_room():
        time.sleep(0.3)
        steadq.Queue.open(q.path).claim().ack()

    t = threading.Thread(target=make_room)
    t.start()
    jid = q.enqueue(b"2", wait=10)
    t.join()
    assert q.claim().id == jid
    q.set_limits()
    assert q.status()["max_jobs"] is None


# --- the lease as a context manager ----------------------------------------------------


def test_context_manager_acks_on_a_clean_exit(q):
    q.enqueue(b"x")
    with q.claim(lease=30) as job:
        assert job.payload() == b"x"
    assert job.settled
    assert q.status()["acked"] == 1


def test_context_manager_nacks_with_backoff_and_reraises(q):
    jid = q.enqueue(b"x", max_attempts=3)
    with pytest.raises(ZeroDivisionError):
        with q.claim(lease=30) as job:
            1 / 0
    s = q.status()
    assert (s["delayed"], s["ready"], s["acked"]) == (1, 0, 0)
    assert job.settled
    assert steadq.backoff(1) == 1.0 and steadq.backoff(3) == 4.0 and steadq.backoff(20) == 300.0
    # due after the first attempt's backoff (1 s)
    nxt = q.claim(wait=10)
    assert (nxt.id, nxt.attempt) == (jid, 2)
    nxt.ack()


def test_context_manager_leaves_a_settled_lease_alone(q):
    q.enqueue(b"a")
    q.enqueue(b"b")
    with q.claim() as job:
        job.fail("bad")
    with pytest.raises(KeyError):
        with q.claim() as job:
            job.nack(0)
            raise KeyError("after the nack")
    s = q.status()
    assert (s["dead"], s["ready"], s["delayed"], s["acked"]) == (1, 1, 0, 0)


def test_nack_without_attempts_left_is_dead(q):
    q.enqueue(b"x", max_attempts=1)
    assert q.claim().nack(0) == "dead"
    assert q.status()["dead"] == 1


def test_renew_and_drop_releases(q):
    q.enqueue(b"x")
    job = q.claim(lease=0.5)
    job.renew(60)
    time.sleep(0.6)
    assert q.status()["expired_leases"] == 0
    del job  # an unsettled lease dropped: the job is ready again
    again = q.claim()
    assert again.attempt == 2
    again.release()
    assert q.status()["ready"] == 1


# --- streaming -------------------------------------------------------------------------


def test_streaming_reader(q):
    big = os.urandom(3 * 1024 * 1024 + 17)
    q.enqueue(big)
    job = q.claim(lease=60)
    assert job.size == len(big)
    with job.reader() as r:
        parts = []
        while True:
            chunk = r.read(100_000)
            if not chunk:
                break
            assert len(chunk) <= 100_000
            parts.append(chunk)
    assert b"".join(parts) == big
    with pytest.raises(OSError):
        r.read()
    assert job.reader().read() == big
    job.ack()


# --- across processes ------------------------------------------------------------------


def _produce(path, start, n):
    q = steadq.Queue.open(path)
    for i in range(start, start + n):
        q.enqueue(f"job-{i}")


def _work(path, out):
    q = steadq.Queue.open(path)
    while True:
        job = q.claim(lease=30, wait=1.5)
        if job is None:
            return
        with job:
            out.put(job.payload().decode())


def test_producers_and_workers_in_separate_processes(q, qdir):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    n, per = 3, 40
    procs = [ctx.Process(target=_produce, args=(str(qdir), i * per, per)) for i in range(n)]
    procs += [ctx.Process(target=_work, args=(str(qdir), out)) for _ in range(3)]
    for p in procs:
        p.start()
    got = [out.get(timeout=60) for _ in range(n * per)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sorted(got) == sorted(f"job-{i}" for i in range(n * per))
    s = q.status()
    assert (s["acked"], s["ready"], s["leased"], s["delayed"], s["dead"]) == (n * per, 0, 0, 0, 0)


def test_the_command_in_the_wheel(q, qdir):
    assert STEADQ and Path(STEADQ).is_file()
    r = subprocess.run(
        [STEADQ, "enqueue", str(qdir), "--priority", "6"], input=b"from the command", capture_output=True, check=True
    )
    jid = r.stdout.decode().strip()
    job = q.claim()
    assert (job.id, job.payload(), job.priority) == (jid, b"from the command", 6)
    job.ack()
    st = subprocess.run([STEADQ, "status", str(qdir)], capture_output=True, check=True).stdout.decode()
    assert "acked" in st
