//! The identity file (`steadq.queue`): read, and published whole through a temp file.

use super::*;
use crate::disk::identity::Identity;
use crate::disk::identity::IdentityError;
use crate::disk::sys::{fs_name, Barrier, Call, Errno, Sys};
use crate::error::{Cause, ErrorKind, Outcome, Result};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use crate::disk::layout::IDENTITY_FILE;

pub(crate) fn read_identity(sys: &Sys, root: BorrowedFd<'_>, path: &Path) -> Result<Identity> {
    let p = path.join(IDENTITY_FILE);
    let fd = match sys.open_regular_ro(root, IDENTITY_FILE) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => {
            return Err(Cause::not_done(
                ErrorKind::NotAQueue,
                Some(path.to_path_buf()),
            ))
        }
        Err(e) => return Err(Cause::io(Call::Open, e, Outcome::NotDone, Some(p))),
    };
    let mut buf = Vec::new();
    sys.read_all(fd.as_fd(), 4096, &mut buf)
        .map_err(|e| Cause::io(Call::Read, e, Outcome::NotDone, Some(p.clone())))?;
    let text = std::str::from_utf8(&buf)
        .map_err(|_| Cause::not_done(ErrorKind::BadIdentity, Some(p.clone())))?;
    Identity::decode(text).map_err(|e| {
        let kind = match e {
            IdentityError::Bad => ErrorKind::BadIdentity,
            IdentityError::Newer { found, supported } => {
                ErrorKind::UnsupportedVersion { found, supported }
            }
        };
        Cause::not_done(kind, Some(p))
    })
}

/// `.steadq.queue.<32 hex>` in the root holding `ident`, written and fsynced, about to be
/// renamed over (or onto) `steadq.queue`; its name. On failure it is removed: not done.
/// With `keep`, the file gets the owner, group and mode of the `steadq.queue` it replaces
/// (best effort: logged): `config` run at umask 077 made it 600, and every other user of the
/// queue was refused it.
pub(super) fn identity_temp_file(
    sys: &Sys,
    root: BorrowedFd<'_>,
    path: &Path,
    ident: &Identity,
    keep: bool,
) -> Result<String> {
    let tmp = format!(".{IDENTITY_FILE}.{:032x}", random_u128());
    let nd = |call, e| Cause::io(call, e, Outcome::NotDone, Some(path.join(&tmp)));
    let fd = sys.create_file(root, &tmp).map_err(|e| nd(Call::Open, e))?;
    if keep {
        if let Err(e) = sys.share_file_like(fd.as_fd(), root, IDENTITY_FILE) {
            log::warn!(
                "{}: could not keep the owner and mode of the file it replaces ({}); other \
                 users may not be able to read it",
                path.join(IDENTITY_FILE).display(),
                std::io::Error::from(e)
            );
        }
    }
    let written = sys
        .write_all(fd.as_fd(), ident.encode().as_bytes())
        .map_err(|e| nd(Call::Write, e))
        .and_then(|()| {
            let b = if keep {
                Barrier::Identity
            } else {
                Barrier::Create
            };
            sys.fsync(b, fd.as_fd()).map_err(|e| nd(Call::Fsync, e))
        });
    if let Err(e) = written {
        let _ = sys.unlink(root, &tmp);
        return Err(e);
    }
    Ok(tmp)
}

pub(crate) fn publish_identity(
    sys: &Sys,
    root: BorrowedFd<'_>,
    path: &Path,
    ident: &Identity,
) -> Result<()> {
    let tmp = identity_temp_file(sys, root, path, ident, false)?;
    let nd = |call, e| Cause::io(call, e, Outcome::NotDone, Some(path.join(&tmp)));
    let cleanup = |e: Cause| {
        let _ = sys.unlink(root, &tmp);
        e
    };
    match sys.rename(root, &tmp, root, IDENTITY_FILE) {
        Ok(()) => {}
        Err(Errno::EXIST) => {
            // Another creator won; theirs is the queue.
            let _ = sys.unlink(root, &tmp);
        }
        Err(Errno::INVAL) => {
            let _ = sys.unlink(root, &tmp);
            let fs_type = sys.fs_magic(root).map(fs_name).unwrap_or("unknown");
            return Err(Cause::not_done(
                ErrorKind::UnsupportedFilesystem { fs_type },
                Some(path.to_path_buf()),
            ));
        }
        Err(e @ (Errno::PERM | Errno::NOSYS)) => return Err(cleanup(rename_refused(e, path))),
        Err(e) => return Err(cleanup(nd(Call::Rename, e))),
    }
    sys.fsync_dir(Barrier::Create, root).map_err(|e| {
        Cause::io(
            Call::FsyncDir,
            e,
            Outcome::Indeterminate,
            Some(path.to_path_buf()),
        )
    })
}

/// Replace the identity file with `ident` (a settings change): a temp file, fsync, a rename
/// over the old file, fsync of the root.
///
/// # Errors
/// [`ErrorKind::Io`]: not done before the rename (the temp file is removed); indeterminate
/// if the rename itself fails with `EIO` (it may have happened) or the root's fsync fails.
pub(crate) fn publish_identity_replacing(
    sys: &Sys,
    root: BorrowedFd<'_>,
    path: &Path,
    ident: &Identity,
) -> Result<()> {
    let tmp = identity_temp_file(sys, root, path, ident, true)?;
    if let Err(e) = sys.rename_replace(root, &tmp, root, IDENTITY_FILE) {
        // Removing the temp name is safe either way: a rename that happened took it away.
        let _ = sys.unlink(root, &tmp);
        return Err(if e == Errno::IO {
            // EIO from the rename itself: the new identity may be in place.
            let at = Some(path.join(IDENTITY_FILE));
            Cause::io(Call::Rename, e, Outcome::Indeterminate, at)
        } else {
            Cause::io(Call::Rename, e, Outcome::NotDone, Some(path.join(&tmp)))
        });
    }
    sys.fsync_dir(Barrier::Identity, root).map_err(|e| {
        Cause::io(
            Call::FsyncDir,
            e,
            Outcome::Indeterminate,
            Some(path.join(IDENTITY_FILE)),
        )
    })
}
