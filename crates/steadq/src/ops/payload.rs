//! A claimed job's payload as a stream ([`crate::Lease::reader`]), and the claim's
//! verification of a job file in fixed-size chunks.
//!
//! Memory: a claim verifies a job file by reading it in chunks of [`CHUNK`] bytes, so it costs
//! O([`CHUNK`]) whatever the payload's size; a job file that fits one chunk is read with one
//! `pread(2)` and its payload kept (no second read when it is asked for). A larger payload is
//! not kept: [`crate::Lease::reader`] streams it from the file again (O(1) beyond the caller's
//! buffer) and [`crate::Lease::payload`] loads it once, on its first call.

use crate::disk::format::{Corruption, Header, PayloadCheck, Verifier, HEADER_LEN};
use crate::disk::sys::{Call, Errno, Sys};
use crate::queue::Queue;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

/// Bytes a claim reads from a job file at a time (64 KiB): the most a claim holds of a job,
/// and the largest job file (header included) whose payload a claim keeps in memory.
pub const CHUNK: usize = 64 * 1024;

/// Bytes of a claim's first read of a job file (4 KiB): a file shorter than this is read
/// whole by that one `pread(2)`, with no `fstat(2)` for its size.
pub(crate) const PROBE: usize = 4096;

/// How a claim's check of a job file failed: corrupt, or a call failed.
pub(crate) type LoadFailed = core::result::Result<Corruption, (Call, Errno)>;

/// A job file checked by a claim: its header, and the whole file when it fit one chunk.
#[derive(Debug)]
pub(crate) struct Checked {
    /// The header's 128 bytes.
    pub(crate) raw: [u8; HEADER_LEN],
    /// The header, decoded.
    pub(crate) header: Header,
    /// The whole file (header and payload), when it fit one [`CHUNK`].
    pub(crate) file: Option<Arc<Vec<u8>>>,
}

/// Verify `file`, the whole of a job file read by short `pread(2)`s (see [`PROBE`]), as job
/// `id` of queue `queue_id`, and keep it.
pub(crate) fn check_whole(file: Vec<u8>, id: u128, queue_id: u128) -> Result<Checked, LoadFailed> {
    let mut v = Verifier::new(&file, file.len() as u64, id, queue_id).map_err(Ok)?;
    v.update(&file[HEADER_LEN..]);
    let mut raw = [0u8; HEADER_LEN];
    raw.copy_from_slice(&file[..HEADER_LEN]);
    let header = v.finish().map_err(Ok)?;
    Ok(Checked {
        raw,
        header,
        file: Some(Arc::new(file)),
    })
}

/// Read regular file `fd` of `size` bytes in [`CHUNK`]s and verify it as job `id` of queue
/// `queue_id`; `prefix`: its first bytes, already read. A file of up to one chunk is read
/// with one `pread(2)` (none when `prefix` holds it) and kept.
pub(crate) fn check_file(
    sys: &Sys,
    fd: BorrowedFd<'_>,
    size: u64,
    prefix: &[u8],
    id: u128,
    queue_id: u128,
) -> Result<Checked, LoadFailed> {
    let read = |buf: &mut [u8], off: u64| match sys.read_exact_at(fd, buf, off) {
        Ok(()) => Ok(()),
        // Shorter than fstat said: job files never change, so it was damaged.
        Err(Errno::NODATA) => Err(Ok(Corruption::Length)),
        Err(e) => Err(Err((Call::Read, e))),
    };
    let first = size.min(CHUNK as u64) as usize;
    let mut buf = vec![0u8; first];
    let have = prefix.len().min(first);
    buf[..have].copy_from_slice(&prefix[..have]);
    read(&mut buf[have..], have as u64)?;
    let mut v = Verifier::new(&buf, size, id, queue_id).map_err(Ok)?;
    v.update(&buf[HEADER_LEN..]);
    let mut raw = [0u8; HEADER_LEN];
    raw.copy_from_slice(&buf[..HEADER_LEN]);
    if size <= CHUNK as u64 {
        let header = v.finish().map_err(Ok)?;
        return Ok(Checked {
            raw,
            header,
            file: Some(Arc::new(buf)),
        });
    }
    let mut off = first as u64;
    while off < size {
        let n = (size - off).min(CHUNK as u64) as usize;
        read(&mut buf[..n], off)?;
        v.update(&buf[..n]);
        off += n as u64;
    }
    let header = v.finish().map_err(Ok)?;
    Ok(Checked {
        raw,
        header,
        file: None,
    })
}

/// A claimed job's payload as a [`std::io::Read`] stream, from [`crate::Lease::reader`].
///
/// A payload the claim kept in memory is read from there. A larger one is read from the job
/// file (`pread(2)` straight into the caller's buffer, so memory does not grow with the
/// payload) while its SHA-256 is computed again: if the file no longer holds the payload the
/// claim verified (changed or damaged since), the read that reaches its end fails with
/// [`std::io::ErrorKind::InvalidData`] instead of returning the last bytes, and every read
/// after it fails too. Until a read returns `Ok(0)` the bytes read so far are not proven:
/// **read to the end before acting on them** ([`std::io::Read::read_to_end`] and
/// [`std::io::copy`] do). Other errors are the `pread(2)` errno's. No `Seek`: the check is
/// made in order.
///
/// The reader does not borrow its [`crate::Lease`]: it may move to another thread while the
/// lease is renewed; it holds the job file open until it is dropped.
#[derive(Debug)]
pub struct PayloadReader {
    src: Source,
}

#[derive(Debug)]
enum Source {
    /// The whole job file, read and verified at claim; `pos` is the next offset in it.
    Memory { file: Arc<Vec<u8>>, pos: usize },
    /// The job file, open.
    File(Box<FileSource>),
}

/// A job file being streamed.
#[derive(Debug)]
struct FileSource {
    q: Queue,
    fd: OwnedFd,
    /// The next payload offset.
    pos: u64,
    /// `None` once the end was reached and matched.
    check: Option<PayloadCheck>,
    /// Why the stream failed, once it did (every later read fails the same way).
    broken: Option<&'static str>,
    path: PathBuf,
}

/// Why a streamed read failed: an errno, or the file no longer holds the claimed payload.
pub(crate) enum StreamFailed {
    Errno(Errno),
    Changed(&'static str),
}

impl PayloadReader {
    /// A reader over a payload kept in memory (`file` = header and payload).
    pub(crate) fn memory(file: Arc<Vec<u8>>) -> PayloadReader {
        PayloadReader {
            src: Source::Memory {
                file,
                pos: HEADER_LEN,
            },
        }
    }

    /// A reader over job file `fd` (at `path`) whose header, verified at claim, is `header`.
    pub(crate) fn file(q: Queue, fd: OwnedFd, header: &Header, path: PathBuf) -> PayloadReader {
        PayloadReader {
            src: Source::File(Box::new(FileSource {
                q,
                fd,
                pos: 0,
                check: Some(PayloadCheck::new(header)),
                broken: None,
                path,
            })),
        }
    }

    /// The next bytes into `buf`; `Ok(0)` at the verified end (or for an empty `buf`).
    pub(crate) fn next(&mut self, buf: &mut [u8]) -> Result<usize, StreamFailed> {
        match &mut self.src {
            Source::Memory { file, pos } => {
                let n = buf.len().min(file.len() - *pos);
                buf[..n].copy_from_slice(&file[*pos..*pos + n]);
                *pos += n;
                Ok(n)
            }
            Source::File(f) => f.next(buf),
        }
    }

    /// The job file's path, for messages (`None` for a payload read from memory).
    pub(crate) fn path(&self) -> Option<&std::path::Path> {
        match &self.src {
            Source::Memory { .. } => None,
            Source::File(f) => Some(&f.path),
        }
    }
}

impl FileSource {
    /// `pread(2)` the next bytes into `buf` and take them into the digest; the read that
    /// reaches the payload's end checks it, and fails (returning none of its bytes) when it
    /// does not match.
    fn next(&mut self, buf: &mut [u8]) -> Result<usize, StreamFailed> {
        if let Some(why) = self.broken {
            return Err(StreamFailed::Changed(why));
        }
        let Some(c) = self.check.as_mut() else {
            return Ok(0);
        };
        let want = (buf.len() as u64).min(c.left()) as usize;
        let mut n = 0;
        if want > 0 {
            let at = HEADER_LEN as u64 + self.pos;
            n = self
                .q
                .sys
                .read_at(self.fd.as_fd(), &mut buf[..want], at)
                .map_err(StreamFailed::Errno)?;
            if n == 0 {
                return Err(self.fail("the job file ends before its payload does"));
            }
            c.update(&buf[..n]);
            self.pos += n as u64;
        }
        if c.left() == 0 && !self.check.take().is_some_and(PayloadCheck::matches) {
            return Err(self.fail("payload SHA-256 mismatch"));
        }
        Ok(n)
    }

    fn fail(&mut self, why: &'static str) -> StreamFailed {
        self.broken = Some(why);
        StreamFailed::Changed(why)
    }
}

impl std::io::Read for PayloadReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.next(buf).map_err(|e| match e {
            StreamFailed::Errno(e) => e.into(),
            StreamFailed::Changed(why) => std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{}: changed since the claim verified it ({why})",
                    self.path()
                        .map_or_else(String::new, |p| p.display().to_string())
                ),
            ),
        })
    }
}
