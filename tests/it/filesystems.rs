//! Run the whole suite again on tmpfs and on loop-mounted ext4, xfs and btrfs images.
//!
//! Needs root, loop devices and mkfs.{ext4,xfs,btrfs}; without them it says why and skips
//! (CI installs them and runs as root, so there it runs). Set `STEADQ_FS=ext4,xfs` to choose.

use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) fn sh(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

pub(crate) struct Mount {
    pub dir: PathBuf,
    img: Option<PathBuf>,
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = sh("umount", &[self.dir.to_str().unwrap()]);
        if let Some(i) = &self.img {
            let _ = std::fs::remove_file(i);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn mount(fs: &str, base: &Path) -> Result<Mount, String> {
    let dir = base.join(format!("mnt-{fs}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    if fs == "tmpfs" {
        sh(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                "size=512m",
                "steadq-test",
                dir.to_str().unwrap(),
            ],
        )?;
        return Ok(Mount { dir, img: None });
    }
    let img = base.join(format!("{fs}.img"));
    let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
    f.set_len(1 << 30).map_err(|e| e.to_string())?;
    let i = img.to_str().unwrap();
    match fs {
        "ext4" => sh("mkfs.ext4", &["-q", "-F", i])?,
        "xfs" => sh("mkfs.xfs", &["-q", "-f", i])?,
        "btrfs" => sh("mkfs.btrfs", &["-q", "-f", i])?,
        _ => return Err(format!("unknown filesystem {fs}")),
    }
    let mut last = String::new();
    for _ in 0..4 {
        // Loop devices are torn down asynchronously; a quick remount can fail once.
        match sh("mount", &["-o", "loop", "-t", fs, i, dir.to_str().unwrap()]) {
            Ok(()) => {
                return Ok(Mount {
                    dir,
                    img: Some(img),
                })
            }
            Err(e) => last = e,
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let _ = std::fs::remove_file(&img);
    Err(last)
}

/// A small ext4 image (`size_mb` MiB, at most `inodes` inodes) loop-mounted under `base`, for
/// full-disk tests. Needs root.
pub(crate) fn mount_small_ext4(base: &Path, size_mb: u64, inodes: u32) -> Result<Mount, String> {
    mount_ext4_with(base, size_mb, &["-N", &inodes.to_string()])
}

/// An ext4 image of `size_mb` MiB made with extra `mkfs.ext4` arguments (say `-b 4096 -m 0`),
/// loop-mounted under `base`. Needs root.
pub(crate) fn mount_ext4_with(base: &Path, size_mb: u64, mkfs: &[&str]) -> Result<Mount, String> {
    let dir = base.join("mnt-small");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let img = base.join("small.img");
    let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
    f.set_len(size_mb << 20).map_err(|e| e.to_string())?;
    let i = img.to_str().unwrap();
    let mut args = vec!["-q", "-F"];
    args.extend_from_slice(mkfs);
    args.push(i);
    sh("mkfs.ext4", &args)?;
    sh("mount", &["-o", "loop", i, dir.to_str().unwrap()])?;
    Ok(Mount {
        dir,
        img: Some(img),
    })
}

#[test]
fn suite_passes_on_real_filesystems() {
    if std::env::var_os("STEADQ_TEST_DIR").is_some() {
        return; // already inside a per-filesystem run
    }
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIP suite_passes_on_real_filesystems: needs root for loop mounts (CI runs it as root)");
        return;
    }
    let wanted = std::env::var("STEADQ_FS").unwrap_or_else(|_| "tmpfs,ext4,xfs,btrfs".into());
    let base = std::env::temp_dir().join(format!("steadq-fs-{}", std::process::id()));
    std::fs::create_dir_all(&base).unwrap();
    let mut ran = Vec::new();
    for fs in wanted.split(',') {
        let m = match mount(fs, &base) {
            Ok(m) => m,
            Err(e) => {
                assert!(
                    std::env::var_os("STEADQ_REQUIRE_FS").is_none(),
                    "cannot mount {fs}: {e}"
                );
                crate::common::summary(&format!("SKIP filesystem {fs}: {e}"));
                continue;
            }
        };
        let t = std::time::Instant::now();
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--skip", "filesystems::", "--test-threads=2"])
            .env("STEADQ_TEST_DIR", &m.dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let summary = text
            .lines()
            .rev()
            .find(|l| l.starts_with("test result"))
            .unwrap_or("no summary")
            .to_string();
        assert!(
            out.status.success(),
            "suite failed on {fs}:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        crate::common::summary(&format!(
            "filesystem {fs}: whole suite rerun: {summary} ({:.1} s)",
            t.elapsed().as_secs_f64()
        ));
        ran.push(fs.to_string());
        drop(m);
    }
    let _ = std::fs::remove_dir_all(&base);
    eprintln!("filesystems run: {ran:?}");
}
