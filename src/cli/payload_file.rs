//! The file `claim --payload-out PATH` writes a claimed job's payload to, on a local queue
//! and on StowQ alike. It is opened before the claim ([`steadq::outside::OutsideFile`]:
//! the final component of PATH never followed, the open never blocking), so that a path it
//! must not write changes nothing, and every check is made on the descriptor that is
//! written, never on the path again:
//!
//! - a symlink at PATH is refused (a dangling one is not made either): one planted by
//!   whoever may write its directory redirected a root claim's bytes into a file of their
//!   choice, or made a new one;
//! - it must be a regular file, a FIFO with a reader or a character device (`/dev/null`, a
//!   terminal): a FIFO with no reader is refused at once (its open would wait for one,
//!   past a stop signal), as are a directory, a socket and a block device;
//! - it must not be another user's file in a sticky directory others may write (`/tmp`):
//!   the files the kernel's `protected_regular` refuses to an `O_CREAT` open;
//! - it must have exactly one link: another name of the file may be one this claim must
//!   not overwrite (a hard link to a symlink is a symlink, refused above);
//! - it must not be the file this process's stdout or stderr writes to (by `(st_dev,
//!   st_ino)`): the payload would be mixed into the lease handle that `h=$(...)` captures.
//!   `/dev/stdout` and `/proc/self/fd/1` are symlinks, refused as such. A character device
//!   holds nothing to mix into (`/dev/null` takes both and keeps neither), so it is not
//!   refused for that.
//!
//! Once the checks pass the descriptor is made blocking: a reader's FIFO or a terminal gets
//! the bytes as it takes them, and a stop signal still interrupts the writes. A file the
//! claim made is removed again when no payload is delivered, but only while its name still
//! names the inode made.

use std::os::fd::AsFd;
use std::path::Path;

use super::CliError;
use steadq::outside::{FileKind, OutsideFile};

/// An opened, checked `--payload-out` file.
pub struct PayloadFile(OutsideFile);

impl PayloadFile {
    /// Open `path` for `claim --payload-out` as the module describes, changing no existing
    /// file's bytes. `queue_check` may refuse the opened file for a reason of the caller's
    /// (a local queue's own file, reached by a hard link or a bind mount): it gets the open
    /// file and returns why, or `None`; it runs after the type checks and before the link
    /// count's.
    ///
    /// # Errors
    /// Not done (exit 2), naming the path and why the file cannot take the payload, e.g.
    /// "--payload-out /x/p: is a symbolic link; not followed; nothing done (no job was
    /// claimed)". A file this call made is removed again first.
    pub fn open(
        path: &Path,
        queue_check: impl FnOnce(&std::fs::File) -> Option<String>,
    ) -> Result<PayloadFile, CliError> {
        let why = match OutsideFile::open_write(path) {
            Err(e) => e.to_string(),
            Ok(f) => match refused(&f, queue_check) {
                None => return Ok(PayloadFile(f)),
                Some(why) => {
                    f.remove_if_made();
                    why
                }
            },
        };
        Err(CliError::not_done(format!(
            "--payload-out {}: {why}; nothing done (no job was claimed)",
            path.display()
        )))
    }

    /// The file to write the payload to.
    pub fn file_mut(&mut self) -> &mut std::fs::File {
        self.0.file_mut()
    }

    /// The file (for the messages' `set_len`).
    pub fn file(&self) -> &std::fs::File {
        self.0.file()
    }

    /// Whether it is a regular file: the only kind cut before the payload and fsynced after
    /// it (a FIFO or a character device takes the bytes as they come; `ftruncate` and
    /// `fsync` fail there with `EINVAL`, which used up the attempt of a job that never ran).
    pub fn regular(&self) -> bool {
        self.0.kind() == FileKind::Regular
    }

    /// Cut a regular file to 0 bytes, once a job is claimed (nothing else is cut).
    ///
    /// # Errors
    /// `ftruncate(2)`'s error, as text.
    pub fn cut(&self) -> Result<(), String> {
        match self.regular() {
            true => self.0.file().set_len(0).map_err(|e| e.to_string()),
            false => Ok(()),
        }
    }

    /// Remove the file when this claim made it and its name still names the inode made
    /// (no job was claimed, or none delivered). True when removed.
    pub fn remove_if_made(&self) -> bool {
        self.0.remove_if_made()
    }

    /// After a delivery failed part-way (disk full, `ulimit -f`, a stop signal): what was
    /// written goes, so that a script that misses the exit status does not read part of a
    /// payload as the whole of it. A regular file this claim made is removed; one that
    /// existed (already cut for the payload) is emptied; a FIFO or a character device took
    /// the bytes as they came. Returns what was done, for the message ("" for nothing).
    pub fn discard_partial(&self) -> String {
        if !self.regular() {
            return String::new();
        }
        if self.remove_if_made() {
            return "; the partial file was removed".into();
        }
        match self.0.file().set_len(0) {
            Ok(()) => "; the partial file was emptied".into(),
            Err(e) => format!("; emptying the partial file failed too ({e}): do not read it"),
        }
    }
}

/// Why opened file `f` may not take the payload, if it may not; when it may, its
/// descriptor is made blocking.
fn refused(
    f: &OutsideFile,
    queue_check: impl FnOnce(&std::fs::File) -> Option<String>,
) -> Option<String> {
    let why = match f.kind() {
        FileKind::Regular | FileKind::Fifo | FileKind::CharDevice => None,
        FileKind::Symlink => Some("is a symbolic link; not followed"),
        FileKind::Directory => Some("is a directory"),
        FileKind::Socket => Some("is a socket"),
        FileKind::BlockDevice => Some("is a block device (a disk), not a file for a payload"),
        FileKind::Unknown => Some("is of an unknown file type"),
    };
    if let Some(why) = why {
        return Some(why.into());
    }
    if f.planted_in_shared_dir() {
        return Some(
            "is another user's file in a sticky directory others may write (as the kernel's \
             protected_regular refuses it): it may have been put there to receive the payload"
                .into(),
        );
    }
    if let Some(why) = queue_check(f.file()) {
        return Some(why);
    }
    if f.links() != 1 {
        return Some(format!(
            "is a file with {} hard links: another of its names may be a file this claim \
             must not overwrite",
            f.links()
        ));
    }
    if f.kind() != FileKind::CharDevice {
        if f.same_file_as(std::io::stdout().as_fd()) {
            return Some(
                "is the file this claim's stdout writes to: the payload would be mixed into \
                 the lease handle printed there"
                    .into(),
            );
        }
        if f.same_file_as(std::io::stderr().as_fd()) {
            return Some(
                "is the file this claim's stderr writes to: the payload would be mixed into \
                 its messages"
                    .into(),
            );
        }
    }
    f.set_blocking()
        .err()
        .map(|e| format!("making it blocking (fcntl): {e}"))
}
