//! In-band marks and the workload/verifier interface.
//!
//! A workload running in the guest records "this step is durable" by writing a 4 KiB block with
//! O_DIRECT to the raw block device at `markbase + seq * 4096`, past the end of the filesystem.
//! The block holds `MARK <seq> <op> <arg>\n` padded with NULs. Because the write is issued only
//! after the step's fsyncs returned, every mark appears in the write log after the flushes that
//! made its step durable. The replay does not apply such writes to the image; it collects them,
//! and at each crash state hands the marks seen so far to the verifier as a file of
//! `<seq> <op> <arg>` lines (one per mark, in log order).
//!
//! Interface between the rig and the binaries it runs (see crashlab/README.md):
//! - workload: `WORKLOAD <mountpoint> <blockdev> <markbase> [args...]`, exit 0 on success;
//! - verifier: `VERIFY --marks <FILE> <MOUNTPOINT>`, exit 0 = state OK, 1 = violation
//!   (explained on stdout/stderr), anything else = the verifier itself failed (aborts the replay).
//!
//! The rig's are `steadq-workload` and `steadq-verify`; each parses its command line with argh
//! ([`crate::args`]).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Size and alignment of one in-band mark block.
pub const MARK_BLOCK: usize = 4096;
const PREFIX: &[u8] = b"MARK ";

/// One mark: `<seq> <op> <arg>`. `arg` is `-` when the op has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub seq: u64,
    pub op: String,
    pub arg: String,
}

impl Mark {
    pub fn new(seq: u64, op: &str, arg: &str) -> Mark {
        Mark {
            seq,
            op: op.to_string(),
            arg: if arg.is_empty() {
                "-".into()
            } else {
                arg.into()
            },
        }
    }

    /// Parses `<seq> <op> [<arg...>]` (the marks-file line, or a mark block after `MARK `).
    pub fn parse_line(line: &str) -> Option<Mark> {
        let mut it = line.trim().splitn(3, ' ');
        let seq = it.next()?.parse().ok()?;
        let op = it.next().filter(|s| !s.is_empty())?;
        let arg = it.next().map(str::trim).unwrap_or("");
        if op.chars().any(char::is_whitespace) {
            return None;
        }
        Some(Mark::new(seq, op, arg))
    }

    /// The 4 KiB in-band block: `MARK <seq> <op> <arg>\n` + NULs.
    pub fn encode_block(&self) -> Vec<u8> {
        let text = format!("MARK {}\n", self);
        assert!(text.len() < MARK_BLOCK, "mark text too long");
        let mut b = vec![0u8; MARK_BLOCK];
        b[..text.len()].copy_from_slice(text.as_bytes());
        b
    }

    /// Decodes an in-band block; None if it is not a mark.
    pub fn decode_block(block: &[u8]) -> Option<Mark> {
        let rest = block.strip_prefix(PREFIX)?;
        let end = rest
            .iter()
            .position(|&c| c == b'\n' || c == 0)
            .unwrap_or(rest.len());
        Mark::parse_line(std::str::from_utf8(&rest[..end]).ok()?)
    }

    /// Interprets the string of a dm-log-writes MARK entry (`dmsetup message ... mark <text>`):
    /// `MARK <seq> <op> <arg>` or `<seq> <op> <arg>` as usual, anything else becomes
    /// `<fallback_seq> mark <text>` with whitespace replaced by `_`.
    pub fn from_dm_mark(text: &[u8], fallback_seq: u64) -> Mark {
        let s = String::from_utf8_lossy(text);
        let s = s.trim();
        let body = s.strip_prefix("MARK ").unwrap_or(s);
        Mark::parse_line(body).unwrap_or_else(|| {
            let arg: String = s
                .chars()
                .map(|c| if c.is_whitespace() { '_' } else { c })
                .collect();
            Mark::new(fallback_seq, "mark", &arg)
        })
    }
}

impl fmt::Display for Mark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.seq, self.op, self.arg)
    }
}

/// Reads a marks file (`<seq> <op> <arg>` lines; blank lines and `#` comments ignored).
pub fn read_marks(path: &Path) -> io::Result<Vec<Mark>> {
    let f = File::open(path)?;
    let mut out = Vec::new();
    for (n, line) in BufReader::new(f).lines().enumerate() {
        let line = line?;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let m = Mark::parse_line(t).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}:{}: not a mark line: {t:?}", path.display(), n + 1),
            )
        })?;
        out.push(m);
    }
    Ok(out)
}

pub fn write_marks(path: &Path, marks: &[Mark]) -> io::Result<()> {
    let mut s = String::with_capacity(marks.len() * 24);
    for m in marks {
        s.push_str(&m.to_string());
        s.push('\n');
    }
    std::fs::write(path, s)
}

/// A 4096-aligned buffer for O_DIRECT.
struct AlignedBlock {
    ptr: *mut u8,
}

impl AlignedBlock {
    fn layout() -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(MARK_BLOCK, MARK_BLOCK).unwrap()
    }
    fn new() -> Self {
        // SAFETY: non-zero size layout; null checked.
        let ptr = unsafe { std::alloc::alloc_zeroed(Self::layout()) };
        assert!(!ptr.is_null(), "out of memory");
        AlignedBlock { ptr }
    }
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live allocation of MARK_BLOCK bytes owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, MARK_BLOCK) }
    }
}

// SAFETY: the block is a heap allocation owned by this value alone (no aliases, freed on
// drop), like a `Box<[u8]>`; moving it to another thread moves that ownership.
unsafe impl Send for AlignedBlock {}

impl Drop for AlignedBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with the same layout.
        unsafe { std::alloc::dealloc(self.ptr, Self::layout()) }
    }
}

/// Guest side: writes in-band marks to the raw block device with O_DIRECT.
pub struct MarkWriter {
    dev: File,
    markbase: u64,
    capacity: u64,
    next_seq: u64,
    buf: AlignedBlock,
}

impl MarkWriter {
    pub fn open(blockdev: &Path, markbase: u64) -> io::Result<MarkWriter> {
        if !markbase.is_multiple_of(MARK_BLOCK as u64) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "markbase must be 4096-aligned",
            ));
        }
        let mut dev = OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
            .open(blockdev)?;
        let size = dev.seek(SeekFrom::End(0))?;
        if size < markbase + MARK_BLOCK as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: {size} bytes, no room for marks at {markbase}",
                    blockdev.display()
                ),
            ));
        }
        let capacity = (size - markbase) / MARK_BLOCK as u64;
        Ok(MarkWriter {
            dev,
            markbase,
            capacity,
            next_seq: 0,
            buf: AlignedBlock::new(),
        })
    }

    /// Number of marks the reserved area holds.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Writes the next mark (sequence numbers 0, 1, 2, ...) and returns its sequence number.
    /// Call it only after the step it records is durable (its fsyncs returned).
    pub fn mark(&mut self, op: &str, arg: &str) -> io::Result<u64> {
        let seq = self.next_seq;
        self.mark_seq(seq, op, arg)?;
        self.next_seq = seq + 1;
        Ok(seq)
    }

    /// Writes mark `seq` explicitly (for workloads that number marks themselves).
    pub fn mark_seq(&mut self, seq: u64, op: &str, arg: &str) -> io::Result<()> {
        if seq >= self.capacity {
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "mark {seq} beyond the reserved area ({} marks)",
                    self.capacity
                ),
            ));
        }
        let m = Mark::new(seq, op, arg);
        self.buf.as_mut().copy_from_slice(&m.encode_block());
        let off = self.markbase + seq * MARK_BLOCK as u64;
        self.dev.write_all_at(self.buf.as_mut(), off)
    }
}

/// Parses `1234`, `0x400`, `448M`, `4K`, `1G` (binary units).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok();
    }
    let (num, mul) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

/// Writes `text` to stdout and flushes (the guest console is the only log the workload has).
pub fn say(text: &str) {
    let mut o = io::stdout().lock();
    let _ = writeln!(o, "{text}");
    let _ = o.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_roundtrip() {
        let m = Mark::new(42, "enqueue", "j00042");
        let b = m.encode_block();
        assert_eq!(b.len(), MARK_BLOCK);
        assert!(b.starts_with(b"MARK 42 enqueue j00042\n\0"));
        assert_eq!(Mark::decode_block(&b), Some(m));
        assert_eq!(Mark::decode_block(&[0u8; 4096]), None);
        assert_eq!(Mark::decode_block(b"MARK x y\n"), None);
        assert_eq!(
            Mark::decode_block(b"MARK 1 setup\n"),
            Some(Mark::new(1, "setup", "-"))
        );
    }

    #[test]
    fn dm_marks() {
        assert_eq!(
            Mark::from_dm_mark(b"MARK 3 ack j1", 9),
            Mark::new(3, "ack", "j1")
        );
        assert_eq!(
            Mark::from_dm_mark(b"4 claim j2", 9),
            Mark::new(4, "claim", "j2")
        );
        assert_eq!(
            Mark::from_dm_mark(b"after mkfs", 9),
            Mark::new(9, "mark", "after_mkfs")
        );
    }

    #[test]
    fn marks_file_roundtrip() {
        let dir = std::env::temp_dir().join(format!("crashlab-marks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("marks");
        let ms = vec![Mark::new(0, "setup", ""), Mark::new(1, "enqueue", "j00000")];
        write_marks(&p, &ms).unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "0 setup -\n1 enqueue j00000\n"
        );
        assert_eq!(read_marks(&p).unwrap(), ms);
        std::fs::write(&p, "# c\n\n0 a b\nnonsense\n").unwrap();
        assert!(read_marks(&p).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0x1000"), Some(4096));
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("448M"), Some(448 << 20));
        assert_eq!(parse_size("12"), Some(12));
        assert_eq!(parse_size("x"), None);
    }

    #[test]
    fn mark_writer_on_a_file() {
        // O_DIRECT works on regular files on most local filesystems; tmpfs refuses it, so skip there.
        let p = std::env::temp_dir().join(format!("crashlab-mw-{}", std::process::id()));
        std::fs::write(&p, vec![0u8; 16384]).unwrap();
        match MarkWriter::open(&p, 8192) {
            Ok(mut w) => {
                assert_eq!(w.capacity(), 2);
                assert_eq!(w.mark("setup", "").unwrap(), 0);
                assert_eq!(w.mark("enqueue", "j1").unwrap(), 1);
                assert!(w.mark("x", "y").is_err());
                let data = std::fs::read(&p).unwrap();
                assert_eq!(
                    Mark::decode_block(&data[8192..12288]),
                    Some(Mark::new(0, "setup", "-"))
                );
                assert_eq!(
                    Mark::decode_block(&data[12288..]),
                    Some(Mark::new(1, "enqueue", "j1"))
                );
            }
            Err(e) => eprintln!("skipping: O_DIRECT unsupported here: {e}"),
        }
        std::fs::remove_file(&p).unwrap();
    }
}
