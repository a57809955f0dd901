//! Applies log entries to an image file, separating in-band marks from filesystem writes.

use crate::logwrites::Entry;
use crate::marks::{Mark, MARK_BLOCK};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    pub entries: u64,
    pub writes: u64,
    pub bytes_written: u64,
    pub flushes: u64,
    pub fua: u64,
    pub discards: u64,
    /// dm-log-writes MARK entries.
    pub dm_marks: u64,
    /// In-band mark blocks (writes past markbase).
    pub inband_marks: u64,
    /// Non-zero blocks written past markbase that are not marks (should stay 0).
    pub foreign_blocks: u64,
    pub checkpoints: u64,
}

pub struct Applier {
    img: File,
    sectorsize: u64,
    /// Byte offset from which writes are marks, not filesystem data. `u64::MAX` = no in-band marks.
    markbase: u64,
    pub marks: Vec<Mark>,
    pub stats: Stats,
}

impl Applier {
    pub fn new(img: File, sectorsize: u64, markbase: Option<u64>) -> Applier {
        Applier {
            img,
            sectorsize,
            markbase: markbase.unwrap_or(u64::MAX),
            marks: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// Applies one entry; returns true if the image is now a crash state worth checking.
    pub fn apply(&mut self, e: &Entry) -> io::Result<bool> {
        let ss = self.sectorsize;
        self.stats.entries += 1;
        if e.is_flush() {
            self.stats.flushes += 1;
        }
        if e.is_fua() {
            self.stats.fua += 1;
        }
        if e.is_mark() {
            self.stats.dm_marks += 1;
            let text = e.mark.as_deref().unwrap_or(b"");
            let fallback = self.marks.last().map_or(0, |m| m.seq + 1);
            self.marks.push(Mark::from_dm_mark(text, fallback));
        } else if e.is_discard() {
            self.stats.discards += 1;
            let off = e.sector * ss;
            let end = (off + e.nr_sectors * ss).min(self.markbase);
            if end > off {
                self.zero(off, end - off)?;
            }
        } else if !e.data.is_empty() {
            let off = e.sector * ss;
            let below = if off >= self.markbase {
                0
            } else {
                (self.markbase - off).min(e.data.len() as u64) as usize
            };
            if below > 0 {
                self.img.write_all_at(&e.data[..below], off)?;
                self.stats.writes += 1;
                self.stats.bytes_written += below as u64;
            }
            self.collect_marks(off + below as u64, &e.data[below..]);
        }
        let cp = e.is_checkpoint();
        if cp {
            self.stats.checkpoints += 1;
        }
        Ok(cp)
    }

    /// Data written at `off >= markbase`: one mark per 4 KiB block (a block may arrive split over
    /// several entries only if the guest wrote it that way, which the mark writer never does).
    fn collect_marks(&mut self, mut off: u64, mut data: &[u8]) {
        while !data.is_empty() {
            let to_boundary = MARK_BLOCK - ((off - self.markbase) % MARK_BLOCK as u64) as usize;
            let n = to_boundary.min(data.len());
            let chunk = &data[..n];
            if let Some(m) = Mark::decode_block(chunk) {
                self.stats.inband_marks += 1;
                self.marks.push(m);
            } else if chunk.iter().any(|&b| b != 0) {
                self.stats.foreign_blocks += 1;
            }
            off += n as u64;
            data = &data[n..];
        }
    }

    fn zero(&mut self, off: u64, len: u64) -> io::Result<()> {
        use rustix::fs::{fallocate, FallocateFlags};
        if fallocate(
            &self.img,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            off,
            len,
        )
        .is_ok()
        {
            return Ok(());
        }
        let z = vec![0u8; 1 << 20];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(z.len() as u64) as usize;
            self.img.write_all_at(&z[..n], off + done)?;
            done += n as u64;
        }
        Ok(())
    }

    /// Makes the applied data visible to other processes reading the file (it already is through
    /// the page cache; this only surfaces write errors).
    pub fn sync(&self) -> io::Result<()> {
        self.img.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logwrites::{LogBuilder, LogReader, FLUSH, FUA};

    fn tmpfile(name: &str, len: u64) -> (std::path::PathBuf, File) {
        let p = std::env::temp_dir().join(format!("crashlab-apply-{}-{name}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        f.set_len(len).unwrap();
        (p, f)
    }

    #[test]
    fn applies_writes_discards_and_collects_marks() {
        // 64 KiB "disk", fs in the first 32 KiB, marks from 32 KiB on; 512-byte log sectors.
        let markbase = 32768u64;
        let (p, f) = tmpfile("a", 65536);
        let mut lb = LogBuilder::new(512);
        lb.write(0, &[1u8; 1024], 0); // fs write
        lb.flush(); // checkpoint 1
        lb.write(
            markbase / 512,
            &Mark::new(0, "enqueue", "j0").encode_block(),
            0,
        );
        lb.write(4, &[2u8; 512], FUA); // checkpoint 2
        lb.discard(1, 1); // zero 512..1024
                          // a write straddling markbase: its first 512 bytes are fs data, the rest a mark block
        let mut straddle = vec![3u8; 512];
        straddle.extend_from_slice(&Mark::new(1, "claim", "j0").encode_block()[..]);
        lb.write(markbase / 512 - 1, &straddle, FLUSH); // checkpoint 3
        lb.mark("MARK 2 ack j0");
        lb.write(markbase / 512 + 16, &[9u8; 4096], 0); // junk past markbase
        let log = lb.build(None);

        let mut r = LogReader::new(&log[..]).unwrap();
        let mut a = Applier::new(f, r.sectorsize(), Some(markbase));
        let mut cps = Vec::new();
        let mut marks_at_cp = Vec::new();
        while let Some(e) = r.next_entry().unwrap() {
            if a.apply(&e).unwrap() {
                cps.push(e.index);
                marks_at_cp.push(a.marks.len());
            }
        }
        assert_eq!(cps, vec![1, 3, 5]);
        assert_eq!(marks_at_cp, vec![0, 1, 2]);
        assert_eq!(
            a.marks,
            vec![
                Mark::new(0, "enqueue", "j0"),
                Mark::new(1, "claim", "j0"),
                Mark::new(2, "ack", "j0")
            ]
        );
        assert_eq!(a.stats.inband_marks, 2);
        assert_eq!(a.stats.dm_marks, 1);
        assert_eq!(a.stats.foreign_blocks, 1);
        assert_eq!(a.stats.discards, 1);
        assert_eq!(
            (a.stats.flushes, a.stats.fua, a.stats.checkpoints),
            (2, 1, 3)
        );
        drop(a);

        let img = std::fs::read(&p).unwrap();
        assert_eq!(img.len(), 65536);
        assert!(img[..512].iter().all(|&b| b == 1));
        assert!(img[512..1024].iter().all(|&b| b == 0), "discarded");
        assert!(img[2048..2560].iter().all(|&b| b == 2));
        assert!(img[markbase as usize - 512..markbase as usize]
            .iter()
            .all(|&b| b == 3));
        assert!(
            img[markbase as usize..].iter().all(|&b| b == 0),
            "marks are not applied"
        );
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn without_markbase_everything_is_applied() {
        let (p, f) = tmpfile("b", 8192);
        let mut lb = LogBuilder::new(4096);
        lb.write(1, &Mark::new(0, "x", "y").encode_block(), FLUSH);
        let log = lb.build(None);
        let mut r = LogReader::new(&log[..]).unwrap();
        let mut a = Applier::new(f, r.sectorsize(), None);
        while let Some(e) = r.next_entry().unwrap() {
            a.apply(&e).unwrap();
        }
        assert!(a.marks.is_empty());
        let img = std::fs::read(&p).unwrap();
        assert!(img[4096..].starts_with(b"MARK 0 x y\n"));
        std::fs::remove_file(&p).unwrap();
    }
}
