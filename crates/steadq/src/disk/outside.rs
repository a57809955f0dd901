//! A file outside any queue that a command writes for its caller (the binary's `claim
//! --payload-out PATH`), opened so that whoever may write its directory cannot redirect
//! the bytes: the final component of the path is never followed, the open never blocks,
//! and every fact about the file comes from `fstat(2)` of the descriptor that is written,
//! never from the path again. What may be written (which file types, how many links) is
//! the caller's rule; this module only opens, reports and removes.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::FileType;

use super::sys::{Errno, Meta, Sys};

/// What kind of file an [`OutsideFile`] is (`fstat(2)`'s `S_IFMT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A FIFO (named pipe).
    Fifo,
    /// A character device (`/dev/null`, a terminal).
    CharDevice,
    /// A block device (a disk).
    BlockDevice,
    /// A directory.
    Directory,
    /// A socket.
    Socket,
    /// A symbolic link.
    Symlink,
    /// Anything else.
    Unknown,
}

/// Why [`OutsideFile::open_write`] opened nothing.
#[derive(Debug)]
pub enum Refused {
    /// The path ends in `/` or names no final component (`/`, `..`).
    NoFileName,
    /// Its final component is a symbolic link (dangling or not, a hard link to one too, or
    /// a magic link such as `/proc/self/fd/1`): not followed (`ELOOP`).
    Symlink,
    /// A directory is there (`EISDIR`).
    Directory,
    /// A FIFO with no reader (`ENXIO`): the open would have waited for one.
    FifoWithoutReader,
    /// A socket, or a device with nothing behind it (`ENXIO`).
    NoDevice,
    /// Opening its directory failed (the path of the directory, the error).
    Dir(PathBuf, std::io::Error),
    /// Another error of `openat(2)` or `fstat(2)` (`EACCES`, `ENOENT`, `EROFS`, ...).
    Io(std::io::Error),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NoFileName => f.write_str("names a directory, not a file"),
            Refused::Symlink => f.write_str("is a symbolic link; not followed"),
            Refused::Directory => f.write_str("is a directory"),
            Refused::FifoWithoutReader => {
                f.write_str("is a FIFO with no reader (opening it would wait for one); not opened")
            }
            Refused::NoDevice => f.write_str("is a socket or a device with nothing behind it"),
            Refused::Dir(d, e) => write!(f, "its directory {}: {e}", d.display()),
            Refused::Io(e) => write!(f, "{e}"),
        }
    }
}

/// A file outside the queue opened for writing by [`OutsideFile::open_write`], with the
/// directory it was found in held open (an `O_PATH` handle), so that it can be removed by
/// name only while that name still names it.
#[derive(Debug)]
pub struct OutsideFile {
    file: std::fs::File,
    dir: OwnedFd,
    name: PathBuf,
    meta: Meta,
    created: bool,
    sys: Sys,
}

impl OutsideFile {
    /// Open `path` write-only without changing any existing file's bytes: a new file with
    /// `O_CREAT | O_EXCL` (mode 0666 less the umask, as a shell's `>` makes it; `O_EXCL`
    /// fails on any symlink at the name, a dangling one too), or else the file already
    /// there with `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`. The descriptor stays non-blocking
    /// until [`OutsideFile::set_blocking`]; the caller checks [`OutsideFile::kind`] and
    /// [`OutsideFile::links`] first. A name that comes and goes between the two opens is
    /// tried again, three times at most. Directories above the final component are
    /// followed as `open(2)` follows them (they are the caller's path). `openat(2)`.
    ///
    /// # Errors
    /// [`Refused`]: nothing was opened or made.
    pub fn open_write(path: &Path) -> Result<OutsideFile, Refused> {
        let sys = Sys::new();
        if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
            return Err(Refused::NoFileName);
        }
        let name = PathBuf::from(path.file_name().ok_or(Refused::NoFileName)?);
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let dir = sys
            .open_dir_handle_path(parent)
            .map_err(|e| Refused::Dir(parent.to_path_buf(), io(e)))?;
        let (fd, created) = open_no_follow(&sys, dir.as_fd(), &name)?;
        let meta = match sys.fstat_meta(fd.as_fd()) {
            Ok(m) => m,
            Err(e) => {
                if created {
                    let _ = sys.unlink_outside(dir.as_fd(), &name);
                }
                return Err(Refused::Io(io(e)));
            }
        };
        Ok(OutsideFile {
            file: std::fs::File::from(fd),
            dir,
            name,
            meta,
            created,
            sys,
        })
    }

    /// The open file (write-only).
    pub fn file(&self) -> &std::fs::File {
        &self.file
    }

    /// The open file, to write to.
    pub fn file_mut(&mut self) -> &mut std::fs::File {
        &mut self.file
    }

    /// Its kind, by `fstat(2)` of the descriptor right after the open.
    pub fn kind(&self) -> FileKind {
        match self.meta.file_type {
            FileType::RegularFile => FileKind::Regular,
            FileType::Fifo => FileKind::Fifo,
            FileType::CharacterDevice => FileKind::CharDevice,
            FileType::BlockDevice => FileKind::BlockDevice,
            FileType::Directory => FileKind::Directory,
            FileType::Socket => FileKind::Socket,
            FileType::Symlink => FileKind::Symlink,
            FileType::Unknown => FileKind::Unknown,
        }
    }

    /// Its link count (`st_nlink`) right after the open: more than 1 means it has other
    /// names, anywhere on its filesystem.
    pub fn links(&self) -> u64 {
        self.meta.links
    }

    /// Whether the open made it (nothing was at its name before).
    pub fn created(&self) -> bool {
        self.created
    }

    /// Whether this is a file that was already there, owned by neither this process's user
    /// nor its directory's owner, in a sticky directory others may write (`/tmp`, a group's
    /// drop directory): the files the kernel's `protected_regular` and `protected_fifos`
    /// refuse to an `O_CREAT` open (Documentation/admin-guide/sysctl/fs.rst), because
    /// another user may have put it there to receive what is written. The open above does
    /// not pass `O_CREAT` for an existing file, so the kernel does not check it: this does.
    /// False when the owners cannot be read.
    pub fn planted_in_shared_dir(&self) -> bool {
        if self.created {
            return false;
        }
        let (Ok((file_uid, _, _)), Ok((dir_uid, _, dir_mode))) = (
            self.sys.owner_mode_of(self.file.as_fd()),
            self.sys.owner_mode_of(self.dir.as_fd()),
        ) else {
            return false;
        };
        let me = rustix::process::geteuid().as_raw();
        file_uid != me && file_uid != dir_uid && dir_mode & 0o1000 != 0 && dir_mode & 0o022 != 0
    }

    /// Whether open descriptor `fd` refers to this same file (`(st_dev, st_ino)` by
    /// `fstat(2)` of both descriptors). False when `fd` cannot be stat'ed (closed).
    pub fn same_file_as(&self, fd: BorrowedFd<'_>) -> bool {
        self.sys.file_id(fd).is_ok_and(|id| id == self.meta.file)
    }

    /// Make the descriptor blocking (clear `O_NONBLOCK`, `fcntl(2)`): writes to a FIFO or
    /// a terminal then wait for room; a signal without `SA_RESTART` still interrupts them.
    ///
    /// # Errors
    /// `fcntl(2)`'s error.
    pub fn set_blocking(&self) -> std::io::Result<()> {
        self.sys.set_blocking(self.file.as_fd()).map_err(io)
    }

    /// Remove the file when [`OutsideFile::open_write`] made it and its name in the
    /// directory held since the open still names that same regular file (`fstatat(2)`
    /// without following, then `unlinkat(2)`): never a file or symlink someone put at the
    /// name since. True when removed.
    pub fn remove_if_made(&self) -> bool {
        self.created
            && self
                .sys
                .stat_outside(self.dir.as_fd(), &self.name)
                .is_ok_and(|m| m.file == self.meta.file && m.file_type == FileType::RegularFile)
            && self
                .sys
                .unlink_outside(self.dir.as_fd(), &self.name)
                .is_ok()
    }
}

/// Open `name` in `dir` for writing, never following it: see [`OutsideFile::open_write`].
/// `true` with the descriptor when this call made the file.
fn open_no_follow(sys: &Sys, dir: BorrowedFd<'_>, name: &Path) -> Result<(OwnedFd, bool), Refused> {
    let mut last = Errno::NOENT;
    for _ in 0..3 {
        match sys.create_new_outside(dir, name) {
            Ok(fd) => return Ok((fd, true)),
            Err(Errno::EXIST) => {}
            Err(e) => return Err(Refused::Io(io(e))),
        }
        match sys.open_existing_outside(dir, name) {
            Ok(fd) => return Ok((fd, false)),
            Err(Errno::NOENT) => last = Errno::NOENT,
            Err(Errno::LOOP) => return Err(Refused::Symlink),
            Err(Errno::ISDIR) => return Err(Refused::Directory),
            Err(Errno::NXIO) => {
                let fifo = sys
                    .stat_outside(dir, name)
                    .is_ok_and(|m| m.file_type == FileType::Fifo);
                return Err(match fifo {
                    true => Refused::FifoWithoutReader,
                    false => Refused::NoDevice,
                });
            }
            Err(e) => return Err(Refused::Io(io(e))),
        }
    }
    Err(Refused::Io(io(last)))
}

/// An errno as `std::io::Error` prints it ("No such file or directory (os error 2)").
fn io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}
