use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use steadq::sys::FaultPlan;
use steadq::{EnqueueOptions, Options, Queue};

const BIN: &str = env!("CARGO_BIN_EXE_steadq");

#[path = "../../crates/steadq/tests/support/mod.rs"]
mod support;
pub use support::*;

/// Every file under `dir/sub`, recursively, as paths relative to `dir`.
pub fn files(dir: &Path, sub: &str) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, p: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(p) else { return };
        for e in rd.flatten() {
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(base, &e.path(), out);
            } else {
                out.push(
                    e.path()
                        .strip_prefix(base)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    walk(dir, &dir.join(sub), &mut out);
    out.sort();
    out
}

/// The names in `dir` (no `.`, `..`) as one `getdents64(2)` call returns them. One call holds
/// the directory's `i_rwsem` for its whole walk (`iterate_dir`, fs/readdir.c) and a rename
/// into, out of or within `dir` takes it exclusively (`lock_rename`, fs/namei.c), so the
/// names are one moment of the directory. The 64 KiB buffer holds about 500 names of 110
/// bytes; a directory the call cannot return whole panics. Errors: those of `open(2)` and
/// `getdents64(2)`. std's `read_dir` goes through
/// libc's `readdir`, whose buffer is 2 KiB on musl: that listing takes many calls and can
/// count a job both before and after a rename.
pub fn names_at_one_moment(dir: &Path) -> std::io::Result<Vec<String>> {
    use std::mem::MaybeUninit;
    let fd = rustix::fs::open(
        dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let buf_len = 64 << 10;
    let mut buf = vec![MaybeUninit::<u8>::uninit(); buf_len];
    let mut raw = rustix::fs::RawDir::new(&fd, &mut buf);
    let (mut names, mut bytes) = (Vec::new(), 0usize);
    while let Some(e) = raw.next() {
        let name = e?.file_name().to_bytes().to_vec();
        // A linux_dirent64 record: 19 bytes of header, the name, its NUL, padded to 8.
        bytes += (19 + name.len() + 1).next_multiple_of(8);
        if name != b"." && name != b".." {
            names.push(String::from_utf8_lossy(&name).into_owned());
        }
    }
    assert!(
        bytes <= buf_len,
        "{}: {bytes} bytes of entries, more than one call",
        dir.display()
    );
    Ok(names)
}

/// Write `input` to a child's stdin and close it. A child that exits without reading its
/// input (refused at argument parsing, say) closes the pipe first: that `EPIPE` is not the
/// test's failure, the child's exit code and output say what happened.
pub fn feed(stdin: Option<std::process::ChildStdin>, input: &[u8]) {
    use std::io::Write;
    match stdin.expect("stdin was piped").write_all(input) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        r => r.unwrap(),
    }
}

/// Run the built `steadq` with `args`, `input` on its stdin (see [`feed`]), and collect its
/// exit status, stdout and stderr.
pub fn steadq_in(args: &[&str], input: &[u8]) -> std::process::Output {
    use std::process::{Command, Stdio};
    let mut c = Command::new(env!("CARGO_BIN_EXE_steadq"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    feed(c.stdin.take(), input);
    c.wait_with_output().unwrap()
}

/// Open the queue at `dir` with a fault plan, not yet armed, that fails the `nth` call of
/// kind `call` with `errno` once armed (`plan.arm()`).
pub fn open_failing(
    dir: &Path,
    call: steadq::sys::Call,
    nth: u32,
    errno: rustix::io::Errno,
) -> (Queue, std::sync::Arc<steadq::sys::FaultPlan>) {
    use steadq::sys::{Fault, FaultAction, FaultPlan};
    let plan = FaultPlan::disarmed(vec![Fault {
        call,
        nth,
        action: FaultAction::Fail(errno),
    }]);
    let o = Options {
        faults: Some(plan.clone()),
        ..Options::default()
    };
    (Queue::open_with(dir, o).unwrap(), plan)
}

/// A memory bound in KiB for a process's `VmHWM`: `native` on the machine itself, plus 20 MiB
/// under qemu-user (`STEADQ_QEMU_USER`, set by .ci/cross), where the emulator's own memory is
/// counted in the guest process's high-water mark. Seen under qemu-aarch64: 19.4 MiB for a
/// 40 MiB streamed enqueue and 19.3 MiB for a 12 MiB job's worker, against 4.4 MiB natively.
/// Holding the payload would add at least its size, which every bound here still catches.
pub fn rss_bound_kib(native: u64) -> u64 {
    match std::env::var_os("STEADQ_QEMU_USER") {
        Some(_) => native + 20 * 1024,
        None => native,
    }
}

/// Wait, up to 60 s, until process `pid` holds a descriptor on each directory in `dirs`
/// (a queue handle holds its directories open from [`Queue::open`] on): a directory removed
/// or replaced from then on is one the process can tell was replaced. A fixed delay after
/// spawning it could, under load, run out before it had opened anything, and it would then
/// open the new directories and never notice. `dirs` must be canonical paths, as
/// `/proc/<pid>/fd` shows them.
pub fn wait_until_held(pid: u32, dirs: &[PathBuf]) {
    let t = std::time::Instant::now();
    loop {
        let held: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .collect()
            })
            .unwrap_or_default();
        if dirs.iter().all(|d| held.contains(d)) {
            return;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "process {pid} did not open {dirs:?} in 60 s; it holds {held:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Wait, up to 60 s, until process `pid` holds an inotify descriptor: a waiting claim or an
/// idle worker makes its watches after its first look at the queue found no job, so from
/// then on what changes in the queue is a change it must notice (a fixed delay after
/// spawning it could, under load, run out before it had looked).
pub fn wait_until_watching(pid: u32) {
    let t = std::time::Instant::now();
    let fds = format!("/proc/{pid}/fd");
    while !std::fs::read_dir(&fds).is_ok_and(|rd| {
        rd.flatten().any(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().contains("inotify"))
        })
    }) {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "process {pid} made no inotify watch in 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The directories a handle of the new queue at `q` holds open, as canonical paths: `q`,
/// and below it each directory without subdirectories, down to the shards (`tmp`, `dead`,
/// `ready/00`, `receipts/00`, ...; `ready` and `receipts` themselves are not held).
pub fn queue_dirs(q: &Path) -> Vec<PathBuf> {
    let root = std::fs::canonicalize(q).unwrap();
    let subdirs = |d: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        v.sort();
        v
    };
    let mut out = vec![root.clone()];
    for d in subdirs(&root) {
        match subdirs(&d) {
            shards if shards.is_empty() => out.push(d),
            shards => out.extend(shards),
        }
    }
    out
}

/// A child's stderr read line by line on a thread: lines can be waited for while the child
/// runs ([`StderrLines::wait_for`]), and all of it is there at the end ([`StderrLines::join`]).
pub struct StderrLines {
    rx: std::sync::mpsc::Receiver<String>,
    reader: std::thread::JoinHandle<String>,
}

impl StderrLines {
    /// Take `child`'s piped stderr and read it on a thread.
    pub fn new(child: &mut std::process::Child) -> StderrLines {
        let stderr = child.stderr.take().expect("stderr was piped");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            let mut all = String::new();
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line.clone());
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        StderrLines { rx, reader }
    }

    /// Wait, up to 60 s, for a line containing `what`; panic naming `what` if none comes
    /// (the child ended or the time ran out).
    pub fn wait_for(&self, what: &str) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) if line.contains(what) => return line,
                Ok(_) => {}
                Err(e) => panic!("no line with {what:?} on stderr in 60 s: {e}"),
            }
        }
    }

    /// All of stderr, once the child closed it (call after the child ended).
    pub fn join(self) -> String {
        self.reader.join().unwrap()
    }
}

/// Run the binary with `args` and no stdin; its exit status and output.
pub fn steadq(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_steadq"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// Run the built `steadq` with `args`, stdin empty, its clocks `secs` seconds ahead
/// (`STEADQ_TEST_CLOCK_SHIFT_S`, honoured only by the tests' build of the library, feature
/// `faults`): a lease or a delay is past without sleeping.
pub fn steadq_later(secs: i64, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .env("STEADQ_TEST_CLOCK_SHIFT_S", secs.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Output bytes as text (lossy).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A path as `&str` (test paths are UTF-8).
pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A queue whose calls go through `plan` (counted, and failed where it says).
pub fn with_plan(d: &TempDir, plan: &Arc<FaultPlan>, o: Options) -> Queue {
    Queue::create(
        d.path(),
        Options {
            faults: Some(plan.clone()),
            ..o
        },
    )
    .unwrap()
}

pub fn delayed(q: &Queue, payload: &[u8], delay: Duration) {
    q.enqueue_with(
        payload,
        &EnqueueOptions {
            delay: Some(delay),
            ..Default::default()
        },
    )
    .unwrap();
}

pub fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Runs `sh -c script` as `user` with umask 002, returning (exit code, stderr).
pub fn as_user(user: &str, script: &str) -> (Option<i32>, String) {
    let out = Command::new("su")
        .args(["-s", "/bin/sh", user, "-c", &format!("umask 002; {script}")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A directory for a test run as `nobody`, outside the test's temp dir tree (which `nobody`
/// may not traverse), mode 777, with a copy of the binary: (the directory, the binary's path).
pub fn nobody_sandbox(tag: &str) -> (std::path::PathBuf, String) {
    use std::os::unix::fs::PermissionsExt;
    let base = std::path::PathBuf::from(format!("/tmp/steadq-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let bin = base.join("steadq");
    std::fs::copy(BIN, &bin).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
    let bin = bin.to_str().unwrap().to_string();
    (base, bin)
}

/// Run `script` with `sh` as `nobody`: (exit code, stdout, stderr).
pub fn as_nobody(script: &str) -> (Option<i32>, String, String) {
    let out = Command::new("su")
        .args(["-s", "/bin/sh", "nobody", "-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// A queue made by `nobody` under /tmp (outside the test's temp dir tree, which `nobody` may
/// not traverse), with a copy of the binary; removed on drop. `None` unless run as root.
pub struct AsNobody {
    pub base: std::path::PathBuf,
    pub q: std::path::PathBuf,
}

impl AsNobody {
    pub fn new(tag: &str) -> Option<AsNobody> {
        if !rustix::process::geteuid().is_root() || std::env::var_os("STEADQ_TEST_DIR").is_some() {
            eprintln!("SKIP {tag}: needs root, runs once");
            return None;
        }
        let base = std::path::PathBuf::from(format!("/tmp/steadq-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        std::fs::copy(BIN, base.join("steadq")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
        let q = base.join("q");
        Some(AsNobody { base, q })
    }

    /// `sh -c script` as `nobody`, with `$S` the binary and `$Q` the queue: (code, out, err).
    pub fn run(&self, script: &str) -> (Option<i32>, String, String) {
        let out = Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .args(["sh", "-c", script])
            .env("S", self.base.join("steadq"))
            .env("Q", &self.q)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    }

    /// `sh -c script` as root at umask 077 (an admin or a producer with a strict umask),
    /// with `$S` and `$Q` as in [`AsNobody::run`]; it must succeed: its stdout, trimmed.
    pub fn run_root_077(&self, script: &str) -> String {
        let out = Command::new("sh")
            .args(["-c", &format!("umask 077; {script}")])
            .env("S", self.base.join("steadq"))
            .env("Q", &self.q)
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `chmod -R a+rwX` the queue: a queue opened to every user.
    pub fn open_to_all(&self) {
        let status = Command::new("chmod")
            .arg("-R")
            .arg("a+rwX")
            .arg(&self.q)
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn chmod(&self, rel: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        let p = self.q.join(rel);
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// The entries of directory `rel` of the queue, sorted.
    pub fn ls(&self, rel: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.q.join(rel))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }
}

impl Drop for AsNobody {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

pub fn snapshot(dir: &Path) -> Vec<String> {
    files(dir, "")
}

pub fn job_files(q: &Path, sub: &str, ext: &str) -> Vec<String> {
    files(q, sub)
        .into_iter()
        .filter(|f| f.ends_with(ext))
        .collect()
}
