//! Journal commits per job on ext3/ext4: jbd2's commit count for the filesystem under the
//! benchmark directory, read before and after each case; and, on any filesystem with a
//! block device, the device's cache flushes and sectors written per job.
//!
//! On a journalled filesystem every `fsync(2)` that has something to commit waits for a
//! jbd2 transaction commit, and a commit costs the device's flushes whatever it carries.
//! So the commits a system needs per job, more than its syscalls, bound its strict rate.
//! Source: `/proc/fs/jbd2/<dev>-<ino>/info`, whose first line is "`N` transactions (`M`
//! requested), each up to `B` blocks" (fs/jbd2/journal.c, `jbd2_seq_info_show`).

use std::path::{Path, PathBuf};

/// The `/sys/dev/block/MAJ:MIN` directory of the block device holding `dir` (`None` on
/// tmpfs and other filesystems without one).
fn sys_block(dir: &Path) -> Option<PathBuf> {
    let st = rustix::fs::stat(dir).ok()?;
    let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    let p = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    p.join("stat").exists().then_some(p)
}

/// What the block device did: cache flushes completed and 512-byte sectors written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Device {
    pub flushes: u64,
    pub sectors: u64,
}

/// The block device's `stat` file for `dir`'s filesystem, when it has one.
pub fn device_file(dir: &Path) -> Option<PathBuf> {
    sys_block(dir).map(|p| p.join("stat"))
}

/// Flushes and sectors written from the text of a block device's `stat` file: fields 7
/// (sectors written) and 16 (flush requests completed), counted from 1
/// (Documentation/block/stat.rst; the flush fields exist since Linux 5.5).
pub fn parse_device(stat: &str) -> Option<Device> {
    let f: Vec<u64> = stat
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    Some(Device {
        sectors: *f.get(6)?,
        flushes: *f.get(15)?,
    })
}

/// The device's counters now, from `stat` (see [`device_file`]).
pub fn device(stat: &Path) -> Option<Device> {
    parse_device(&std::fs::read_to_string(stat).ok()?)
}

/// The jbd2 `info` file of the filesystem holding `dir`, when it has one (ext3/ext4 with a
/// journal; `None` on tmpfs, xfs, btrfs, or without `/proc/fs/jbd2`).
pub fn info_file(dir: &Path) -> Option<PathBuf> {
    let st = rustix::fs::stat(dir).ok()?;
    let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    // /sys/dev/block/MAJ:MIN links to .../block/<name>[/<partition>].
    let link = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    let dev = link.file_name()?.to_str()?.to_string();
    let prefix = format!("{dev}-");
    std::fs::read_dir("/proc/fs/jbd2")
        .ok()?
        .flatten()
        .find(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .map(|e| e.path().join("info"))
}

/// The number of transactions jbd2 has committed, from the text of an `info` file.
pub fn parse_commits(info: &str) -> Option<u64> {
    let first = info.lines().next()?;
    let (n, rest) = first.split_once(' ')?;
    rest.starts_with("transactions").then_some(())?;
    n.trim().parse().ok()
}

/// The commit count now, from `info` (see [`info_file`]).
pub fn commits(info: &Path) -> Option<u64> {
    parse_commits(&std::fs::read_to_string(info).ok()?)
}

/// What a case's meter read at one instant: jbd2 commits and the device's counters, each
/// where it is counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reading {
    pub commits: Option<u64>,
    pub device: Option<Device>,
}

/// Where the journal commits and the device counters of the filesystem under test are
/// read. [`Meter::around`] reads them just before and just after the timed part of a case,
/// each time after `syncfs(2)`, so a case is charged what its lifecycles wrote (write-back
/// of `Durability::None` included) and not its setup, its clean-up or the previous case's.
pub struct Meter {
    /// A directory on the filesystem under test (the bench's base directory).
    fs: PathBuf,
    /// jbd2's `info` file, on ext3/ext4.
    info: Option<PathBuf>,
    /// The block device's `stat` file.
    stat: Option<PathBuf>,
    /// Freeze and thaw the filesystem before each reading (`--settle`).
    settle: bool,
}

impl Meter {
    /// The meter of the filesystem holding `fs`. `device` names the block device whose
    /// `/sys/block/<device>/stat` is read (for example the disk under a dm-delay target,
    /// whose own counters do not include flushes); `None` takes the device `fs` is on.
    /// Errors: a named device without a `stat` file.
    pub fn new(fs: &Path, device: Option<&str>) -> Result<Self, String> {
        let stat = match device {
            Some(d) => {
                let p = PathBuf::from(format!("/sys/block/{d}/stat"));
                if !p.exists() {
                    return Err(format!("--device {d}: {} does not exist", p.display()));
                }
                Some(p)
            }
            None => device_file(fs),
        };
        Ok(Meter {
            fs: fs.to_path_buf(),
            info: info_file(fs),
            stat,
            settle: false,
        })
    }

    /// With `settle`, each reading first freezes and thaws the filesystem ([`settle`]), so a
    /// case is charged every block its lifecycles made the filesystem write, in the journal
    /// or log and in place, not only what reached the journal by its last barrier.
    pub fn settling(self, settle: bool) -> Self {
        Meter { settle, ..self }
    }

    /// The jbd2 `info` file read, if any.
    pub fn info(&self) -> Option<&Path> {
        self.info.as_deref()
    }

    /// The device `stat` file read, if any.
    pub fn stat(&self) -> Option<&Path> {
        self.stat.as_deref()
    }

    /// `syncfs(2)` on the filesystem under test (and with `settle` a freeze and a thaw),
    /// then its counters. A failed sync is ignored and a failed freeze named on stderr: the
    /// counters are read anyway (they only count less).
    pub fn read(&self) -> Reading {
        if let Ok(f) = std::fs::File::open(&self.fs) {
            let _ = rustix::fs::syncfs(&f);
            if self.settle {
                if let Err(e) = settle(&f) {
                    eprintln!("--settle: cannot freeze {}: {e}", self.fs.display());
                }
            }
        }
        Reading {
            commits: self.info.as_deref().and_then(commits),
            device: self.stat.as_deref().and_then(device),
        }
    }

    /// Run `f` (the timed part of a case) between two readings; the differences are what
    /// it made the filesystem and the device do.
    pub fn around<T>(&self, f: impl FnOnce() -> T) -> (T, Reading) {
        let before = self.read();
        let out = f();
        let after = self.read();
        (out, difference(before, after))
    }
}

/// Freezes the filesystem holding `f` and thaws it at once (`ioctl(2)` `FIFREEZE`, `FITHAW`;
/// Documentation/filesystems/vfs.rst, `freeze_fs`): a freeze writes every dirty block to its
/// final place, ext4 checkpointing its journal, xfs pushing its log's items, f2fs making a
/// checkpoint. Root only (CAP_SYS_ADMIN); errors: EOPNOTSUPP on tmpfs, EPERM, EBUSY.
pub fn settle(f: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // _IOWR('X', 119, int) and _IOWR('X', 120, int), linux/fs.h.
    const FIFREEZE: libc::c_ulong = 0xC004_5877;
    const FITHAW: libc::c_ulong = 0xC004_5878;
    let call = |op: libc::c_ulong| {
        // SAFETY: FIFREEZE and FITHAW take an int argument they do not read or write (passed
        // by value, 0); `f` stays open for the call.
        match unsafe { libc::ioctl(f.as_raw_fd(), op as _, 0) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    };
    call(FIFREEZE)?;
    // Thawed whatever happens after a freeze that took: a frozen filesystem blocks every write.
    call(FITHAW)
}

/// The counts from `before` to `after` (`None` where either was not read).
pub fn difference(before: Reading, after: Reading) -> Reading {
    Reading {
        commits: before
            .commits
            .zip(after.commits)
            .map(|(b, a)| a.saturating_sub(b)),
        device: before.device.zip(after.device).map(|(b, a)| Device {
            flushes: a.flushes.saturating_sub(b.flushes),
            sectors: a.sectors.saturating_sub(b.sectors),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A settled reading charges the in-place write-back a plain one leaves for later: after
    /// files made and synced on a loop xfs, a second plain reading counts no more writes, a
    /// settled one counts their inodes written in place (xfs's `syncfs` forces the log, not
    /// its items; on ext4 `syncfs` writes the block device's dirty buffers, the checkpoint
    /// included, so there the two readings agree). On tmpfs the freeze is refused and
    /// reading goes on. Root (loop mounts); skipped otherwise unless `STEADQ_REQUIRE_FS` is set.
    #[test]
    fn a_settled_reading_counts_the_write_back_a_plain_one_leaves_for_later() {
        let shm = std::fs::File::open("/dev/shm").unwrap();
        assert_eq!(
            settle(&shm).map_err(|e| e.raw_os_error()),
            Err(Some(libc::EOPNOTSUPP))
        );
        if !rustix::process::geteuid().is_root() {
            assert!(
                std::env::var_os("STEADQ_REQUIRE_FS").is_none(),
                "needs root"
            );
            eprintln!("SKIP: needs root for a loop mount");
            return;
        }
        let base = std::env::temp_dir().join(format!("bench-settle-{}", std::process::id()));
        let (img, mnt) = (base.join("img"), base.join("mnt"));
        std::fs::create_dir_all(&mnt).unwrap();
        let sh = |cmd: &str, args: &[&str]| {
            let ok = std::process::Command::new(cmd)
                .args(args)
                .status()
                .unwrap()
                .success();
            assert!(ok, "{cmd} {args:?} failed");
        };
        sh("truncate", &["-s", "320M", img.to_str().unwrap()]);
        sh("mkfs.xfs", &["-q", "-f", img.to_str().unwrap()]);
        sh(
            "mount",
            &["-o", "loop", img.to_str().unwrap(), mnt.to_str().unwrap()],
        );
        let run = std::panic::catch_unwind(|| {
            let meter = Meter::new(&mnt, None).unwrap();
            for i in 0..200 {
                std::fs::write(mnt.join(format!("f{i}")), b"job").unwrap();
            }
            let sectors = |r: Reading| r.device.unwrap().sectors;
            let synced = meter.read();
            let again = meter.read();
            let settled = Meter::new(&mnt, None).unwrap().settling(true).read();
            (
                sectors(difference(synced, again)),
                sectors(difference(again, settled)),
            )
        });
        sh("umount", &[mnt.to_str().unwrap()]);
        let _ = std::fs::remove_dir_all(&base);
        let (plain, settled) = run.unwrap();
        assert_eq!(plain, 0, "a second syncfs wrote {plain} sectors");
        // 200 inodes of 512 bytes (xfs v5), written in place: at least 200 sectors.
        assert!(settled >= 200, "settling wrote {settled} sectors");
    }

    #[test]
    fn flushes_and_sectors_are_fields_16_and_7_of_the_device_stat() {
        let stat = "  5463614  2886 35106708 870239 10208286 13707723 255916895 2459921 \
                    0 1546836 4526244 61 0 4723736 160 5268809 1195922\n";
        assert_eq!(
            parse_device(stat),
            Some(Device {
                flushes: 5268809,
                sectors: 255916895
            })
        );
        // A kernel before 5.5 has no flush fields: nothing is made up.
        assert_eq!(parse_device("1 2 3 4 5 6 7 8 9 10 11"), None);
        assert_eq!(parse_device("x y"), None);
    }

    /// A difference is taken field by field, and is `None` where either reading lacks it.
    #[test]
    fn a_difference_counts_what_happened_between_two_readings() {
        let r = |c, f, s| Reading {
            commits: c,
            device: Some(Device {
                flushes: f,
                sectors: s,
            }),
        };
        let d = difference(r(Some(10), 100, 1000), r(Some(13), 106, 1180));
        assert_eq!(d.commits, Some(3));
        assert_eq!(
            d.device,
            Some(Device {
                flushes: 6,
                sectors: 180
            })
        );
        let d = difference(r(None, 1, 1), r(Some(5), 1, 1));
        assert_eq!(d.commits, None);
        let none = Reading::default();
        assert_eq!(difference(none, r(Some(1), 2, 3)).device, None);
    }

    /// A device named with `--device` must exist; the error names it.
    #[test]
    fn a_named_device_without_a_stat_file_is_refused() {
        let e = Meter::new(Path::new("/"), Some("no-such-disk"))
            .err()
            .unwrap();
        assert!(e.contains("no-such-disk"), "{e}");
    }

    #[test]
    fn the_commit_count_is_the_first_number_of_the_first_line() {
        let info = "5123 transactions (5120 requested), each up to 8192 blocks\n\
                    average: \n  0ms waiting for transaction\n";
        assert_eq!(parse_commits(info), Some(5123));
        assert_eq!(parse_commits("garbage\n"), None);
        assert_eq!(parse_commits(""), None);
        assert_eq!(parse_commits("12 blocks\n"), None);
    }

    /// /tmp's filesystem: a journal is found only when /proc/fs/jbd2 lists its device, and
    /// then its count reads.
    #[test]
    fn the_info_file_is_found_for_a_journalled_filesystem_only() {
        let dir = std::env::temp_dir();
        match info_file(&dir) {
            Some(p) => {
                assert!(p.starts_with("/proc/fs/jbd2"), "{}", p.display());
                assert!(commits(&p).is_some());
            }
            None => {
                let st = rustix::fs::stat(&dir).unwrap();
                let name = format!(
                    "{}:{}",
                    rustix::fs::major(st.st_dev),
                    rustix::fs::minor(st.st_dev)
                );
                let dev = std::fs::read_link(format!("/sys/dev/block/{name}"))
                    .ok()
                    .and_then(|l| l.file_name().map(|f| f.to_string_lossy().into_owned()));
                let listed = std::fs::read_dir("/proc/fs/jbd2").ok().is_some_and(|rd| {
                    rd.flatten().any(|e| {
                        dev.as_ref().is_some_and(|d| {
                            e.file_name()
                                .to_string_lossy()
                                .starts_with(&format!("{d}-"))
                        })
                    })
                });
                assert!(!listed, "{name} has a journal but none was found");
            }
        }
    }
}
