//! Blocking claim: sleep on inotify (`inotify(7)`) for new ready jobs, and on a timer for the
//! next delayed job's due time and the next lease expiry, instead of polling. Where inotify is
//! unavailable (no `CONFIG_INOTIFY_USER`, or the watch limit is reached) it polls, backing off
//! from 50 ms to 1 s.

use crate::error::Result;
use crate::lease::Lease;
use crate::queue::Queue;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

impl Queue {
    /// Claim a job, waiting up to `timeout` for one. `Ok(None)` on timeout. While waiting it
    /// runs [`Queue::recover`] when a delayed job falls due or a lease expires, so one waiting
    /// worker is enough to keep a queue moving.
    ///
    /// # Errors
    /// As [`Queue::claim`] and [`Queue::recover`].
    pub fn claim_wait(&self, lease: Duration, timeout: Duration) -> Result<Option<Lease<'_>>> {
        let deadline = self
            .clock
            .boot_ns()
            .saturating_add(timeout.as_nanos().min(u64::MAX as u128) as u64);
        let watch = self.watch_ready();
        let mut backoff_ms = 50u64;
        let mut need_recover = true;
        loop {
            if let Some(l) = self.claim_for(lease)? {
                return Ok(Some(l));
            }
            let mut sleep_ns = u64::MAX;
            if need_recover {
                let r = self.recover()?;
                if r.moved() > 0 {
                    continue;
                }
                if let Some(due) = r.next_due_wall_ns {
                    sleep_ns = sleep_ns.min(due.saturating_sub(self.clock.wall_ns()));
                }
                if let Some(exp) = r.next_expiry_boot_ns {
                    sleep_ns = sleep_ns.min(exp.saturating_sub(self.clock.boot_ns()));
                }
            }
            let now = self.clock.boot_ns();
            if now >= deadline {
                return Ok(None);
            }
            sleep_ns = sleep_ns.min(deadline - now).max(1_000_000);
            need_recover = match &watch {
                Some(fd) => !wait_readable(fd, sleep_ns),
                None => {
                    std::thread::sleep(Duration::from_nanos(sleep_ns.min(backoff_ms * 1_000_000)));
                    backoff_ms = (backoff_ms * 2).min(1000);
                    true
                }
            };
        }
    }

    /// An inotify fd watching every ready shard for new names, or `None`.
    fn watch_ready(&self) -> Option<OwnedFd> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
        for s in 0..self.ident.shards {
            let p = self
                .root
                .join("ready")
                .join(crate::name::shard_name(s).as_str());
            let flags = WatchFlags::CREATE
                | WatchFlags::MOVED_TO
                | WatchFlags::DONT_FOLLOW
                | WatchFlags::ONLYDIR;
            if let Err(e) = inotify::add_watch(&fd, &p, flags) {
                log::info!(
                    "inotify watch on {} failed ({e}); polling instead",
                    p.display()
                );
                return None;
            }
        }
        Some(fd)
    }
}

/// Wait up to `ns` for events; drain them. True if any arrived.
fn wait_readable(fd: &OwnedFd, ns: u64) -> bool {
    let ts = rustix::time::Timespec {
        tv_sec: (ns / 1_000_000_000) as _,
        tv_nsec: (ns % 1_000_000_000) as _,
    };
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    match poll(&mut fds, Some(&ts)) {
        Ok(n) if n > 0 => {
            let mut buf = [core::mem::MaybeUninit::<u8>::uninit(); 4096];
            let mut reader = inotify::Reader::new(fd.as_fd(), &mut buf);
            while reader.next().is_ok() {}
            true
        }
        _ => false,
    }
}
