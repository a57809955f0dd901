//! Reader for the dm-log-writes log format.
//!
//! The same format is written by the kernel's dm-log-writes target
//! (Documentation/admin-guide/device-mapper/log-writes.rst) and by QEMU's
//! `blklogwrites` block driver. All integers are little endian.
//!
//! ```text
//! sector 0:   super  { magic u64, version u64, nr_entries u64, sectorsize u32 }, padded to one sector
//! sector 1..: entry  { sector u64, nr_sectors u64, flags u64, data_len u64 },   padded to one sector
//!             followed by nr_sectors sectors of data (none for DISCARD and MARK entries)
//! ```
//!
//! `sector` and `nr_sectors` are in units of the log's `sectorsize` (512 for QEMU by default, the
//! device's logical block size for dm-log-writes). A MARK entry carries its string (`data_len`
//! bytes) inside the entry's own sector, right after the 32-byte header; the kernel refuses marks
//! that do not fit. `nr_entries` is the number of entries the writer had committed when it last
//! rewrote the super block (dm-log-writes: on FUA/MARK; QEMU: on every flush and every
//! `log-super-update-interval` writes); entries past it are ignored, as xfstests' replay-log does.

use std::fmt;
use std::io::{self, Read};

pub const MAGIC: u64 = 0x6a736677736872;
pub const VERSION: u64 = 1;

pub const FLUSH: u64 = 1;
pub const FUA: u64 = 2;
pub const DISCARD: u64 = 4;
pub const MARK: u64 = 8;

const SUPER_LEN: usize = 28;
const ENTRY_LEN: usize = 32;
/// Refuse single entries larger than this (a corrupt header would otherwise ask for terabytes).
const MAX_ENTRY_BYTES: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Super {
    pub version: u64,
    pub nr_entries: u64,
    pub sectorsize: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// 0-based position in the log.
    pub index: u64,
    /// Target position, in units of the log's sector size.
    pub sector: u64,
    pub nr_sectors: u64,
    pub flags: u64,
    /// Written data: `nr_sectors * sectorsize` bytes for a write, empty otherwise.
    pub data: Vec<u8>,
    /// The mark's string for a MARK entry (trailing NULs removed).
    pub mark: Option<Vec<u8>>,
}

impl Entry {
    pub fn is_flush(&self) -> bool {
        self.flags & FLUSH != 0
    }
    pub fn is_fua(&self) -> bool {
        self.flags & FUA != 0
    }
    pub fn is_discard(&self) -> bool {
        self.flags & DISCARD != 0
    }
    pub fn is_mark(&self) -> bool {
        self.flags & MARK != 0
    }
    /// A point where a crash state is worth checking: everything before it was flushed (FLUSH),
    /// or this write is durable (FUA). Same rule as replay-log's `--check flush` / `--check fua`.
    pub fn is_checkpoint(&self) -> bool {
        self.flags & (FLUSH | FUA) != 0
    }
    pub fn is_write(&self) -> bool {
        !self.is_discard() && !self.is_mark() && !self.data.is_empty()
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names = Vec::new();
        for (bit, name) in [
            (FLUSH, "FLUSH"),
            (FUA, "FUA"),
            (DISCARD, "DISCARD"),
            (MARK, "MARK"),
        ] {
            if self.flags & bit != 0 {
                names.push(name);
            }
        }
        if self.flags & !(FLUSH | FUA | DISCARD | MARK) != 0 {
            names.push("?");
        }
        write!(
            f,
            "#{} sector={} nr_sectors={} flags={}",
            self.index,
            self.sector,
            self.nr_sectors,
            if names.is_empty() {
                "-".to_string()
            } else {
                names.join("|")
            }
        )?;
        if let Some(m) = &self.mark {
            write!(f, " mark={:?}", String::from_utf8_lossy(m))?;
        }
        Ok(())
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Streams entries from a log. Reads sequentially, so a `BufReader<File>` or a pipe both work.
pub struct LogReader<R: Read> {
    r: R,
    sup: Super,
    next: u64,
    sector_buf: Vec<u8>,
    to_eof: bool,
}

impl<R: Read> LogReader<R> {
    pub fn new(mut r: R) -> io::Result<Self> {
        let mut head = [0u8; SUPER_LEN];
        r.read_exact(&mut head)
            .map_err(|e| bad(format!("log too short for a super block: {e}")))?;
        let magic = le64(&head, 0);
        if magic != MAGIC {
            return Err(bad(format!(
                "bad log magic {magic:#x}, expected {MAGIC:#x}"
            )));
        }
        let version = le64(&head, 8);
        if version != VERSION {
            return Err(bad(format!("unsupported log version {version}")));
        }
        let nr_entries = le64(&head, 16);
        let sectorsize = u32::from_le_bytes(head[24..28].try_into().unwrap());
        if !sectorsize.is_power_of_two() || !(512..=65536).contains(&sectorsize) {
            return Err(bad(format!("bad log sector size {sectorsize}")));
        }
        let mut rest = vec![0u8; sectorsize as usize - SUPER_LEN];
        r.read_exact(&mut rest)
            .map_err(|e| bad(format!("log truncated in super block: {e}")))?;
        Ok(LogReader {
            r,
            sup: Super {
                version,
                nr_entries,
                sectorsize,
            },
            next: 0,
            sector_buf: vec![0u8; sectorsize as usize],
            to_eof: false,
        })
    }

    pub fn super_block(&self) -> Super {
        self.sup
    }

    pub fn sectorsize(&self) -> u64 {
        self.sup.sectorsize as u64
    }

    /// Read past the super block's entry count, up to the end of the log: a log whose writer
    /// was killed (QEMU at a power cut) holds entries its super block does not count yet. The
    /// first entry that is truncated or all zeros ends the log.
    pub fn to_eof(mut self) -> Self {
        self.to_eof = true;
        self
    }

    pub fn next_entry(&mut self) -> io::Result<Option<Entry>> {
        if self.to_eof {
            return match self.next_entry_counted() {
                Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(None),
                r => r,
            };
        }
        if self.next >= self.sup.nr_entries {
            return Ok(None);
        }
        self.next_entry_counted()
    }

    fn next_entry_counted(&mut self) -> io::Result<Option<Entry>> {
        let index = self.next;
        let ss = self.sup.sectorsize as usize;
        self.r
            .read_exact(&mut self.sector_buf)
            .map_err(|e| bad(format!("log truncated at entry {index} header: {e}")))?;
        if self.to_eof && self.sector_buf.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let h = &self.sector_buf;
        let sector = le64(h, 0);
        let nr_sectors = le64(h, 8);
        let flags = le64(h, 16);
        let data_len = le64(h, 24);
        let mut e = Entry {
            index,
            sector,
            nr_sectors,
            flags,
            data: Vec::new(),
            mark: None,
        };
        if flags & MARK != 0 {
            if data_len > (ss - ENTRY_LEN) as u64 {
                return Err(bad(format!(
                    "entry {index}: mark of {data_len} bytes does not fit in a {ss}-byte sector"
                )));
            }
            let mut m = h[ENTRY_LEN..ENTRY_LEN + data_len as usize].to_vec();
            while m.last() == Some(&0) {
                m.pop();
            }
            e.mark = Some(m);
        } else if flags & DISCARD == 0 && nr_sectors > 0 {
            let len = nr_sectors
                .checked_mul(ss as u64)
                .filter(|&l| l <= MAX_ENTRY_BYTES)
                .ok_or_else(|| bad(format!("entry {index}: absurd nr_sectors {nr_sectors}")))?;
            e.data = vec![0u8; len as usize];
            self.r
                .read_exact(&mut e.data)
                .map_err(|err| bad(format!("log truncated in entry {index} data: {err}")))?;
        }
        self.next += 1;
        Ok(Some(e))
    }
}

impl<R: Read> Iterator for LogReader<R> {
    type Item = io::Result<Entry>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_entry().transpose()
    }
}

/// Builds logs in the dm-log-writes format. Used by the tests to make synthetic logs.
pub struct LogBuilder {
    ss: usize,
    nr: u64,
    body: Vec<u8>,
}

impl LogBuilder {
    pub fn new(sectorsize: u32) -> Self {
        LogBuilder {
            ss: sectorsize as usize,
            nr: 0,
            body: Vec::new(),
        }
    }

    fn header(&mut self, sector: u64, nr_sectors: u64, flags: u64, data_len: u64, extra: &[u8]) {
        let mut h = vec![0u8; self.ss];
        h[0..8].copy_from_slice(&sector.to_le_bytes());
        h[8..16].copy_from_slice(&nr_sectors.to_le_bytes());
        h[16..24].copy_from_slice(&flags.to_le_bytes());
        h[24..32].copy_from_slice(&data_len.to_le_bytes());
        h[32..32 + extra.len()].copy_from_slice(extra);
        self.body.extend_from_slice(&h);
        self.nr += 1;
    }

    /// A write of `data` (a whole number of sectors) at `sector`, with extra `flags` (FLUSH/FUA).
    pub fn write(&mut self, sector: u64, data: &[u8], flags: u64) -> &mut Self {
        assert_eq!(data.len() % self.ss, 0, "write data must be whole sectors");
        self.header(sector, (data.len() / self.ss) as u64, flags, 0, &[]);
        self.body.extend_from_slice(data);
        self
    }

    /// An empty flush (what a guest's fsync turns into).
    pub fn flush(&mut self) -> &mut Self {
        self.header(0, 0, FLUSH, 0, &[]);
        self
    }

    pub fn discard(&mut self, sector: u64, nr_sectors: u64) -> &mut Self {
        self.header(sector, nr_sectors, DISCARD, 0, &[]);
        self
    }

    /// A dm-log-writes mark (`dmsetup message <dev> 0 mark <text>`).
    pub fn mark(&mut self, text: &str) -> &mut Self {
        self.header(0, 0, MARK, text.len() as u64, text.as_bytes());
        self
    }

    /// The log bytes; `nr_entries` in the super block is `committed` if given (to imitate a
    /// writer that died before updating it), else the number of entries added.
    pub fn build(&self, committed: Option<u64>) -> Vec<u8> {
        let mut out = vec![0u8; self.ss];
        out[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        out[8..16].copy_from_slice(&VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&committed.unwrap_or(self.nr).to_le_bytes());
        out[24..28].copy_from_slice(&(self.ss as u32).to_le_bytes());
        out.extend_from_slice(&self.body);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(log: &[u8]) -> io::Result<(Super, Vec<Entry>)> {
        let mut r = LogReader::new(log)?;
        let sup = r.super_block();
        let entries = r.by_ref().collect::<io::Result<Vec<_>>>()?;
        Ok((sup, entries))
    }

    #[test]
    fn to_eof_reads_entries_the_super_block_does_not_count_and_stops_at_a_torn_one() {
        let mut lb = LogBuilder::new(512);
        lb.write(8, &[1; 512], 0).flush().write(9, &[2; 1024], 0);
        // The writer was killed after the flush updated the count to 2 entries, and in the
        // middle of a fourth entry's data.
        let mut log = lb.build(Some(2));
        log.extend_from_within(512..1024);
        log.truncate(log.len() - 100);
        assert_eq!(all(&log).unwrap().1.len(), 2);
        let e: Vec<Entry> = LogReader::new(&log[..])
            .unwrap()
            .to_eof()
            .collect::<io::Result<_>>()
            .unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!((e[2].sector, e[2].data.len()), (9, 1024));
        // A zeroed tail (a preallocated file) ends the log too.
        let mut z = lb.build(Some(0));
        z.extend_from_slice(&[0u8; 2048]);
        assert_eq!(LogReader::new(&z[..]).unwrap().to_eof().count(), 3);
    }

    #[test]
    fn parses_writes_flushes_fua_discard_mark_512() {
        let a = vec![0xaa; 1024];
        let b = vec![0xbb; 512];
        let mut lb = LogBuilder::new(512);
        lb.write(8, &a, 0)
            .flush()
            .write(100, &b, FUA)
            .discard(200, 16)
            .mark("hello");
        lb.write(2, &b, FLUSH);
        let (sup, es) = all(&lb.build(None)).unwrap();
        assert_eq!(
            sup,
            Super {
                version: 1,
                nr_entries: 6,
                sectorsize: 512
            }
        );
        assert_eq!(es.len(), 6);
        assert_eq!(
            (es[0].sector, es[0].nr_sectors, es[0].data.clone()),
            (8, 2, a.clone())
        );
        assert!(es[0].is_write() && !es[0].is_checkpoint());
        assert!(es[1].is_flush() && es[1].data.is_empty() && es[1].is_checkpoint());
        assert!(es[2].is_fua() && es[2].is_checkpoint() && es[2].data == b);
        assert!(es[3].is_discard() && es[3].nr_sectors == 16 && es[3].data.is_empty());
        assert!(es[4].is_mark() && es[4].mark.as_deref() == Some(&b"hello"[..]));
        assert_eq!(es[4].index, 4);
        assert!(es[5].is_flush() && es[5].is_write() && es[5].sector == 2);
    }

    #[test]
    fn parses_4k_sector_log() {
        let d = vec![7u8; 8192];
        let mut lb = LogBuilder::new(4096);
        lb.mark("MARK 3 enqueue j1")
            .write(5, &d, FLUSH | FUA)
            .discard(1, 1);
        let (sup, es) = all(&lb.build(None)).unwrap();
        assert_eq!(sup.sectorsize, 4096);
        assert_eq!(es[0].mark.as_deref(), Some(&b"MARK 3 enqueue j1"[..]));
        assert_eq!((es[1].nr_sectors, es[1].data.len()), (2, 8192));
        assert!(es[1].is_flush() && es[1].is_fua());
        assert!(es[2].is_discard());
        // Display names the flags
        assert!(es[1].to_string().contains("FLUSH|FUA"));
    }

    #[test]
    fn stops_at_nr_entries_from_super() {
        let mut lb = LogBuilder::new(512);
        lb.write(0, &[1; 512], 0).flush().write(1, &[2; 512], 0);
        let (sup, es) = all(&lb.build(Some(2))).unwrap();
        assert_eq!(sup.nr_entries, 2);
        assert_eq!(es.len(), 2);
    }

    #[test]
    fn mark_nuls_trimmed_and_empty_mark() {
        let mut lb = LogBuilder::new(512);
        lb.mark("x\0\0").mark("");
        let (_, es) = all(&lb.build(None)).unwrap();
        assert_eq!(es[0].mark.as_deref(), Some(&b"x"[..]));
        assert_eq!(es[1].mark.as_deref(), Some(&b""[..]));
    }

    #[test]
    fn rejects_bad_magic_version_sectorsize() {
        let good = LogBuilder::new(512).build(None);
        let mut m = good.clone();
        m[0] ^= 1;
        assert!(LogReader::new(&m[..]).is_err());
        let mut v = good.clone();
        v[8] = 2;
        assert!(LogReader::new(&v[..]).is_err());
        let mut s = good.clone();
        s[24..28].copy_from_slice(&1000u32.to_le_bytes());
        assert!(LogReader::new(&s[..]).is_err());
        assert!(LogReader::new(&good[..20]).is_err());
    }

    #[test]
    fn truncated_log_is_an_error_not_a_short_log() {
        let mut lb = LogBuilder::new(512);
        lb.write(0, &[1; 1024], 0).flush();
        let log = lb.build(None);
        let cut = &log[..512 + 512 + 700]; // super + header + part of the data
        let mut r = LogReader::new(cut).unwrap();
        let err = r.next_entry().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("entry 0"), "{err}");
    }

    #[test]
    fn oversized_mark_rejected() {
        let mut log = LogBuilder::new(512).build(Some(1));
        let mut h = vec![0u8; 512];
        h[16..24].copy_from_slice(&MARK.to_le_bytes());
        h[24..32].copy_from_slice(&600u64.to_le_bytes());
        log.extend_from_slice(&h);
        let mut r = LogReader::new(&log[..]).unwrap();
        assert!(r.next_entry().is_err());
    }
}
