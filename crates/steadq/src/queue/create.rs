//! Creating a queue: the layout's directories, then its identity, published last.

use super::*;
use crate::disk::identity::Identity;
use crate::disk::layout::shard_name;
use crate::disk::layout::{CREATED_DIRS, EVIDENCE_FILE, READY_DIR, RECEIPTS_DIR};
use crate::disk::sys::{Barrier, Call, Errno, Sys};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use crate::disk::layout::IDENTITY_FILE;

impl Queue {
    /// Create the queue at `root` (the last path component is created if missing), or open it
    /// if it exists. Crash-safe and idempotent: the identity is published with one
    /// no-replace rename, so two processes creating at once end up with the same queue; a
    /// crash part-way is completed by running `create` again. `opts.shards` and
    /// `opts.delayed_bucket_ns` apply only to a new queue.
    ///
    ///
    /// A directory whose identity is missing or damaged but which holds job files is never
    /// given a new identity: the queue id is read from the job headers and the identity is
    /// published again with it (shards: the count of `ready/<ss>` directories; delayed bucket
    /// width: `opts.delayed_bucket_ns`, as it cannot be read back), with a warning. A damaged
    /// file is first moved aside to `.steadq.queue.damaged.<32 hex>`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for an option out of range (see [`Options::validate`]);
    /// [`ErrorKind::IdentityLost`] (not done) when the identity is missing or damaged and the
    /// job headers do not agree on one queue id; otherwise as [`Queue::open`]. Outcome:
    /// indeterminate once anything was created.
    pub fn create(root: impl AsRef<Path>, opts: Options) -> Result<Queue, crate::Error> {
        opts.validate()?;
        let root = root.as_ref().to_path_buf();
        let sys = make_sys(&opts);
        // The directory made here, as its parent and name: removed again when the new
        // queue is refused (its filesystem, or too few inodes), so that a refusal changes
        // nothing.
        let made = make_root(&sys, &root)?;
        let rootfd = sys
            .open_queue_root(&root)
            .map_err(|e| Cause::io(Call::Open, e, Outcome::NotDone, Some(root.clone())))?;
        if let Err(e) = check_filesystem(&sys, rootfd.as_fd(), &root) {
            unmake_root(&sys, &made);
            return Err(e.into());
        }
        if crate::ops::group::ext4_fast_commit(rootfd.as_fd()) {
            log::warn!(
                "{}: ext4 fast_commit may fail to mount after a power cut (DESIGN.md); turn it off: tune2fs -O ^fast_commit",
                root.display()
            );
        }
        // Whether this call changed anything yet: a later failure is indeterminate once it
        // did, not done before (a `mkdir` that failed did not happen).
        let mut changed = made.is_some();
        let ident = identity_for(&sys, rootfd.as_fd(), &root, &opts, &made, &mut changed)?;
        // Make every directory (idempotent), each made durable in its parent. The priority
        // levels' `prio/<l>/<ss>/` are made by the first job placed at their level.
        for d in CREATED_DIRS {
            ensure_dir(&sys, rootfd.as_fd(), d, &root, &mut changed)?;
        }
        for parent in [READY_DIR, RECEIPTS_DIR] {
            make_shards(
                &sys,
                rootfd.as_fd(),
                &root,
                parent,
                ident.shards,
                &mut changed,
            )?;
        }
        make_evidence_file(&sys, rootfd.as_fd(), &root);
        sys.fsync_dir(Barrier::Create, rootfd.as_fd())
            .map_err(|e| ind(Call::FsyncDir, e, &root))?;
        Ok(Queue::assemble(
            root, sys, rootfd, ident, opts, false, true,
        )?)
    }
}

/// A failed call after which the outcome is indeterminate, naming `p`.
fn ind(call: Call, e: Errno, p: &Path) -> Cause {
    Cause::io(call, e, Outcome::Indeterminate, Some(p.to_path_buf()))
}

/// Make the last component of `root` if missing, durable in its parent: its parent and name
/// when this call made it, `None` when it existed.
fn make_root<'a>(sys: &Sys, root: &'a Path) -> Result<Option<(OwnedFd, &'a str)>> {
    match sys.mkdir_path(root) {
        Ok(()) => {
            let parent = root
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let pfd = sys
                .open_dir_path(parent)
                .map_err(|e| ind(Call::Open, e, parent))?;
            sys.fsync_dir(Barrier::Create, pfd.as_fd())
                .map_err(|e| ind(Call::FsyncDir, e, parent))?;
            Ok(root.file_name().and_then(|n| n.to_str()).map(|n| (pfd, n)))
        }
        Err(Errno::EXIST) => Ok(None),
        Err(e) => Err(Cause::io(
            Call::Mkdir,
            e,
            Outcome::NotDone,
            Some(root.to_path_buf()),
        )),
    }
}

/// Remove the root this call made (`made`), empty, when the queue is refused: best effort,
/// the error says what was refused either way.
fn unmake_root(sys: &Sys, made: &Option<(OwnedFd, &str)>) {
    if let Some((pfd, name)) = made {
        if sys.rmdir(pfd.as_fd(), name).is_ok() {
            let _ = sys.fsync_dir(Barrier::Create, pfd.as_fd());
        }
    }
}

/// The identity of the queue at `root`: read, or for a directory without one (or with a
/// damaged one) established (`changed` set) after the checks a new queue needs: no foreign
/// entries, enough inodes (a refusal removes the root this call `made`).
fn identity_for(
    sys: &Sys,
    rootfd: BorrowedFd<'_>,
    root: &Path,
    opts: &Options,
    made: &Option<(OwnedFd, &str)>,
    changed: &mut bool,
) -> Result<Identity> {
    match read_identity(sys, rootfd, root) {
        Ok(i) => Ok(i),
        Err(e) if matches!(e.kind(), ErrorKind::NotAQueue | ErrorKind::BadIdentity) => {
            let damaged = *e.kind() == ErrorKind::BadIdentity;
            if !damaged {
                refuse_foreign_entries(sys, rootfd, root)?;
                if let Err(e) = check_inodes(sys, rootfd, root, opts.shards, made.is_some()) {
                    unmake_root(sys, made);
                    return Err(e);
                }
            }
            *changed = true;
            establish_identity(sys, rootfd, root, opts, damaged)
        }
        Err(e) => Err(e),
    }
}

/// Make `parent` (`ready/` or `receipts/`) sticky and its `shards` shard directories.
fn make_shards(
    sys: &Sys,
    rootfd: BorrowedFd<'_>,
    root: &Path,
    parent: &str,
    shards: u16,
    changed: &mut bool,
) -> Result<()> {
    let pfd = sys
        .open_dir_beneath(rootfd, parent)
        .map_err(|e| ind(Call::Open, e, &root.join(parent)))?;
    // The sticky bit: the shard directories in it are the owner's, and a member of the
    // queue's group (who may write here) may then neither rename nor remove them (replace
    // `ready/03` by a symlink or her own directory). Not on the shards: their entries are
    // the jobs of every user, moved by every user. An existing queue gets it at its owner's
    // next `init`. Best effort: without it such a swap is found and skipped when the queue
    // is opened (`open_dirs`).
    match sys.make_sticky(pfd.as_fd()) {
        Ok(set) => *changed |= set,
        Err(e) => log::warn!(
            "{}: could not set the sticky bit ({}); a member of the queue's group may \
             move its shard directories",
            root.join(parent).display(),
            std::io::Error::from(e)
        ),
    }
    for s in 0..shards {
        let name = shard_name(s);
        let at = root.join(parent);
        match ensure_dir(sys, pfd.as_fd(), name.as_str(), &at, changed) {
            // A symlink or a file in a shard's place (never followed): reported when the
            // queue is opened and by fsck; the other shards work, so `init` (a unit's
            // `ExecStartPre`) does not fail for it.
            Err(e)
                if e.errno().is_some_and(|x| {
                    [Errno::LOOP, Errno::NOTDIR]
                        .iter()
                        .any(|n| n.raw_os_error() == x.raw_os_error())
                }) => {}
            r => r?,
        }
    }
    Ok(())
}

/// `evidence.log`, empty, made now while inodes are free: on a filesystem out of inodes,
/// compaction (which frees them, a receipt at a time) could not make it, and failed "disk
/// full" before removing anything. Shared like `ready/`: every user's ack appends to it.
/// Best effort: the first append makes it otherwise.
fn make_evidence_file(sys: &Sys, rootfd: BorrowedFd<'_>, root: &Path) {
    let path = root.join(EVIDENCE_FILE);
    match sys.open_append(rootfd, EVIDENCE_FILE) {
        Ok(fd) => {
            if let Err(e) = sys.share_file_like(fd.as_fd(), rootfd, READY_DIR) {
                log::warn!(
                    "{}: could not share it like ready/ ({})",
                    path.display(),
                    std::io::Error::from(e)
                );
            }
        }
        // Something not a regular file is there (a fifo, socket, device, directory or
        // symlink planted by a member of the queue's group), or a hard link: never written,
        // named.
        Err(e @ (Errno::NXIO | Errno::ISDIR | Errno::LOOP | Errno::MLINK)) => log::warn!(
            "{}: {}",
            path.display(),
            Cause::io(Call::Open, e, Outcome::NotDone, None)
        ),
        // It exists (an `init` of an existing queue by a user who may not write it): nothing
        // to make, nothing to say.
        Err(_) if sys.stat_nofollow(rootfd, EVIDENCE_FILE).is_ok() => {}
        Err(e) => log::warn!(
            "{}: not made now ({}); the first compaction makes it",
            path.display(),
            std::io::Error::from(e)
        ),
    }
}

/// Publish an identity for a directory whose identity file is missing or (`damaged`)
/// unusable: the one the job headers agree on, a new one if there are no jobs, or refuse.
pub(super) fn establish_identity(
    sys: &Sys,
    root: BorrowedFd<'_>,
    path: &Path,
    opts: &Options,
    damaged: bool,
) -> Result<Identity> {
    // What a restored identity takes from the options, not from the queue: said, so that
    // settings the old file held (`steadq config`) are not reset without a word.
    let from_options = format!(
        "receipt policy {}, evidence log limit {} bytes x {} rotated files, delayed bucket \
         width {} ns from the options (pass them to `init`, or run `steadq config`, if the \
         queue had others)",
        opts.receipts, opts.evidence.max_bytes, opts.evidence.keep, opts.delayed_bucket_ns
    );
    let mine = match survey_jobs(sys, root) {
        Survey::Empty => new_identity(sys, root, path, opts, damaged, &from_options),
        Survey::Agreed { id, headers } => {
            restored_identity(sys, root, path, opts, (id, headers), damaged, &from_options)?
        }
        Survey::Lost { jobs, ids } => {
            return Err(Cause::not_done(
                ErrorKind::IdentityLost { jobs, ids },
                Some(path.to_path_buf()),
            ))
        }
    };
    if damaged {
        set_aside_damaged(sys, root, path)?;
    }
    publish_identity(sys, root, path, &mine)?;
    read_identity(sys, root, path)
}

/// A new identity, for a directory with no job file (a warning when it had an identity, or
/// a queue's layout: the old id is not coming back).
fn new_identity(
    sys: &Sys,
    root: BorrowedFd<'_>,
    path: &Path,
    opts: &Options,
    damaged: bool,
    from_options: &str,
) -> Identity {
    let id = random_u128();
    // A missing identity beside a queue's layout (a `--receipts none` queue whose
    // jobs were all acked keeps no job file) is a queue that had an id too: said,
    // as for a damaged one (it was made anew without a word).
    let had_layout = sys.open_dir_beneath(root, READY_DIR).is_ok();
    if damaged || had_layout {
        log::warn!(
            "{}: identity file {IDENTITY_FILE} was {} and no job file names a \
             queue id: this is a NEW queue id {id:032x}, not the old one (receipts, \
             evidence lines and lease handles of the old id do not match it); \
             {from_options}",
            path.display(),
            if damaged { "damaged" } else { "missing" },
        );
    }
    // No job to go by, but the layout may still tell (a queue whose every shard
    // directory is there), so that 16 shards are not restored as 8 with `ready/08`..`0f`
    // left foreign.
    let shards = match shard_evidence(sys, root) {
        OrphanShards::Told(n) => n,
        _ => opts.shards,
    };
    Identity {
        version: opts.format_version,
        id,
        shards,
        delayed_bucket_ns: opts.delayed_bucket_ns,
        receipts: opts.receipts,
        evidence: opts.evidence,
    }
    .settled()
}

/// The identity restored from the queue id its job headers (`headers` of them) agree on:
/// the shard count from the layout, or the options' when every job name fits it.
///
/// # Errors
/// [`ErrorKind::ShardsUnknown`] (not done) when more than one count fits and the options'
/// is not one of them.
fn restored_identity(
    sys: &Sys,
    root: BorrowedFd<'_>,
    path: &Path,
    opts: &Options,
    (id, headers): (u128, u32),
    damaged: bool,
    from_options: &str,
) -> Result<Identity> {
    // The shard count: what the layout tells, else the options' count if every job
    // name fits it (the caller's word: `steadq init` passes it only from --shards),
    // else refused: a count that does not fit strands the jobs it misplaces.
    let (shards, how) = match shard_evidence(sys, root) {
        OrphanShards::Told(n) => (n, "from ready/"),
        OrphanShards::Unknown => (opts.shards, "from the options: no job name in ready/"),
        // Only one count fits: the queue's own always fits, so it is that one.
        OrphanShards::Fits(f) if f.len() == 1 => (f[0], "from the job names: only it fits"),
        OrphanShards::Fits(f) if f.contains(&opts.shards) => {
            (opts.shards, "from the options: the job names fit it")
        }
        OrphanShards::Fits(fits) => {
            return Err(Cause::not_done(
                ErrorKind::ShardsUnknown { fits },
                Some(path.to_path_buf()),
            ))
        }
    };
    log::warn!(
        "{}: identity file {IDENTITY_FILE} was {}; restored queue id {id:032x} from \
         {headers} job headers ({shards} shards {how}; {from_options})",
        path.display(),
        if damaged { "damaged" } else { "missing" },
    );
    Ok(Identity {
        version: opts.format_version,
        id,
        shards,
        delayed_bucket_ns: opts.delayed_bucket_ns,
        receipts: opts.receipts,
        evidence: opts.evidence,
    }
    .settled())
}

/// Move a damaged identity file to `.steadq.queue.damaged.<32 hex>` (kept as evidence) so a
/// new one can be published without replacing anything. If what was moved turns out to be a
/// good identity (another creator published it meanwhile), it is moved back.
pub(super) fn set_aside_damaged(sys: &Sys, root: BorrowedFd<'_>, path: &Path) -> Result<()> {
    let aside = format!(".{IDENTITY_FILE}.damaged.{:032x}", random_u128());
    let nd = |call, e| Cause::io(call, e, Outcome::NotDone, Some(path.join(IDENTITY_FILE)));
    match sys.rename(root, IDENTITY_FILE, root, &aside) {
        Ok(()) => {}
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(nd(Call::Rename, e)),
    }
    let mut buf = Vec::new();
    let good = sys
        .open_regular_ro(root, &aside)
        .and_then(|fd| sys.read_all(fd.as_fd(), 4096, &mut buf))
        .is_ok()
        && std::str::from_utf8(&buf).is_ok_and(|t| Identity::decode(t).is_ok());
    if good {
        match sys.rename(root, &aside, root, IDENTITY_FILE) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(nd(Call::Rename, e)),
        }
    }
    log::warn!("{}: damaged identity file kept as {aside}", path.display());
    Ok(())
}

/// Make directory `name` in `parent` (at `ppath`) unless it is there, and make it durable.
/// `changed` says whether the calling `create` changed anything yet, and is set when this
/// makes the directory. Errors: indeterminate once something changed (the barrier after
/// this `mkdir` included); a `mkdir` or check that fails before then is not done (a queue
/// that runs out of inodes before anything was made is reported not done, not "it may have
/// happened").
pub(super) fn ensure_dir(
    sys: &Sys,
    parent: BorrowedFd<'_>,
    name: &str,
    ppath: &Path,
    changed: &mut bool,
) -> Result<()> {
    let r = match sys.mkdir(parent, name) {
        Ok(()) => {
            *changed = true;
            sys.fsync_dir(Barrier::Create, parent)
                .map_err(|e| (Call::FsyncDir, e, ppath.to_path_buf()))
        }
        // Must be a real directory, not a symlink or file planted under the name.
        Err(Errno::EXIST) => sys
            .open_dir_beneath(parent, name)
            .map(drop)
            .map_err(|e| (Call::Open, e, ppath.join(name))),
        Err(e) => Err((Call::Mkdir, e, ppath.join(name))),
    };
    let o = match changed {
        true => Outcome::Indeterminate,
        false => Outcome::NotDone,
    };
    r.map_err(|(c, e, at)| Cause::io(c, e, o, Some(at)))
}
