//! The virtual board's disk at a power cut: a volatile write cache keeps everything up to the
//! last completed flush, plus a seeded random subset (not only a prefix) of the writes issued
//! after it. Input: the image as it was at boot and the QEMU blklogwrites log of that boot
//! (read past its super block's count: QEMU was killed). Output: the image the next boot sees.

use crate::apply::Applier;
use crate::logwrites::{Entry, LogReader};
use crate::rng::Rng;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader};
use std::path::Path;

/// What one cut kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    /// Log entries (writes, flushes, discards).
    pub entries: u64,
    /// Entries up to and including the last flush (all kept).
    pub flushed: u64,
    /// Writes and discards after the last flush.
    pub after: u64,
    /// How many of those the disk kept.
    pub kept: u64,
}

/// Which entries survive: all up to the last flush, then each later write with `keep_percent`
/// chance, independently (so any subset can survive, in any pattern).
pub fn choose(entries: &[Entry], rng: &mut Rng, keep_percent: u64) -> (Vec<bool>, Cut) {
    let last_flush = entries.iter().rposition(|e| e.is_flush());
    let mut c = Cut {
        entries: entries.len() as u64,
        ..Cut::default()
    };
    let keep = entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            if last_flush.is_some_and(|f| i <= f) {
                c.flushed += 1;
                return true;
            }
            if e.is_flush() || !(e.is_write() || e.is_discard()) {
                return false;
            }
            c.after += 1;
            let k = rng.chance(keep_percent);
            c.kept += u64::from(k);
            k
        })
        .collect();
    (keep, c)
}

/// Turn `image` (the disk as it was at boot) into the disk after the cut, from `log`.
pub fn cut(image: &Path, log: &Path, rng: &mut Rng, keep_percent: u64) -> io::Result<Cut> {
    let r = LogReader::new(BufReader::with_capacity(1 << 20, File::open(log)?))?;
    let ss = r.sectorsize();
    let entries: Vec<Entry> = r.to_eof().collect::<io::Result<_>>()?;
    let (keep, c) = choose(&entries, rng, keep_percent);
    let img = OpenOptions::new().read(true).write(true).open(image)?;
    let mut a = Applier::new(img, ss, None);
    for (e, k) in entries.iter().zip(keep) {
        if k {
            a.apply(e)?;
        }
    }
    a.sync()?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logwrites::LogBuilder;
    use std::os::unix::fs::FileExt;

    fn log() -> Vec<u8> {
        let mut lb = LogBuilder::new(512);
        lb.write(0, &[1; 512], 0).flush();
        for s in 1..=8u8 {
            lb.write(u64::from(s), &[s + 1; 512], 0);
        }
        // The super block counts only up to the flush, as after a kill.
        lb.build(Some(2))
    }

    #[test]
    fn a_cut_keeps_every_flushed_write_and_a_seeded_subset_of_the_rest() {
        let dir = std::env::temp_dir().join(format!("crashlab-diskmodel-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (img, lp) = (dir.join("img"), dir.join("log"));
        std::fs::write(&lp, log()).unwrap();
        let mut patterns = std::collections::HashSet::new();
        for seed in 0..16 {
            std::fs::write(&img, vec![0u8; 16 * 512]).unwrap();
            let c = cut(&img, &lp, &mut Rng(seed), 50).unwrap();
            assert_eq!((c.entries, c.flushed, c.after), (10, 2, 8));
            let f = File::open(&img).unwrap();
            let mut b = [0u8; 1];
            f.read_exact_at(&mut b, 0).unwrap();
            assert_eq!(b[0], 1, "the write before the flush is always kept");
            let mut kept = Vec::new();
            for s in 1..=8u64 {
                f.read_exact_at(&mut b, s * 512).unwrap();
                kept.push(b[0] != 0);
            }
            assert_eq!(kept.iter().filter(|&&k| k).count() as u64, c.kept);
            // Same seed, same choice.
            let again = choose(
                &LogReader::new(&log()[..])
                    .unwrap()
                    .to_eof()
                    .collect::<io::Result<Vec<_>>>()
                    .unwrap(),
                &mut Rng(seed),
                50,
            );
            assert_eq!(again.0[2..].to_vec(), kept);
            patterns.insert(kept);
        }
        let not_a_prefix = patterns.iter().any(|k| k.windows(2).any(|w| !w[0] && w[1]));
        assert!(
            not_a_prefix,
            "some cut keeps a later write but not an earlier one"
        );
        assert!(patterns.len() > 8, "{} patterns", patterns.len());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
