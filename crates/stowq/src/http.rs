//! A small blocking HTTP/1.1 client over `std::net::TcpStream` (and rustls with the `tls`
//! feature). [`send`] opens one connection per request (`Connection: close`); [`send_pooled`]
//! keeps connections alive in a [`Pool`] and sends the next request on an idle one.
//!
//! A failure is [`Fail::NotSent`] only when a new connection could not be opened, so no byte
//! of the request left this process. Every later failure (write, read, timeout, torn or garbled
//! response), also on a kept-alive connection the server closed meanwhile, is
//! [`Fail::MaybeSent`]: the server may have acted on it. An idle connection is checked before
//! reuse (a peer that closed it shows end of file to a non-blocking peek) and dropped after
//! [`IDLE_KEEP`], so that case is rare; callers' retries absorb it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an idle kept-alive connection may wait in a [`Pool`] before it is closed
/// instead of reused (servers close idle connections after 5 s (Go's default keep-alive
/// tuning behind some proxies) to minutes (S3 about 20 s)).
pub const IDLE_KEEP: Duration = Duration::from_secs(4);

/// Idle connections a [`Pool`] keeps at most; more are closed.
pub const POOL_MAX: usize = 64;

/// An open connection, plain or TLS.
enum Conn {
    Tcp(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Tcp(s) => s,
            #[cfg(feature = "tls")]
            Conn::Tls(s) => &s.sock,
        }
    }

    /// Whether the peer has neither closed the connection nor sent anything unasked: a
    /// non-blocking peek would block.
    fn idle_and_open(&self) -> bool {
        let s = self.tcp();
        if s.set_nonblocking(true).is_err() {
            return false;
        }
        let mut b = [0u8; 1];
        let open = matches!(s.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        s.set_nonblocking(false).is_ok() && open
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Tcp(s) => s.flush(),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// Idle kept-alive connections to one endpoint (a [`crate::Client`] has one), shared by its
/// threads: each request takes one out while it runs.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<Vec<(Conn, Instant)>>,
    opened: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.idle.lock().map(|v| v.len()).unwrap_or(0);
        write!(f, "Pool {{ idle: {n} }}")
    }
}

impl Pool {
    /// Connections opened through this pool so far (requests on reused connections open none).
    pub fn opened(&self) -> u64 {
        self.opened.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The most recently used idle connection that is still open, or none.
    fn take(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().ok()?;
        while let Some((c, since)) = idle.pop() {
            if since.elapsed() < IDLE_KEEP && c.idle_and_open() {
                return Some(c);
            }
        }
        None
    }

    fn put(&self, c: Conn) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.retain(|(_, since)| since.elapsed() < IDLE_KEEP);
            if idle.len() < POOL_MAX {
                idle.push((c, Instant::now()));
            }
        }
    }
}

/// A parsed HTTP response.
#[derive(Clone, Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body (chunked encoding removed).
    pub body: Vec<u8>,
}

impl Response {
    /// The first header called `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request has no response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fail {
    /// The connection (or its TLS handshake) failed: no byte of the request was sent.
    NotSent(String),
    /// The request may have reached the server: connection lost, timed out or answered with
    /// something that is not HTTP.
    MaybeSent(String),
}

/// One request: `host` and `port` to connect to, the `Host` header value, the request target
/// (path and query, already encoded), headers and body. `timeout` bounds the connect and each
/// read and write.
pub struct Request<'a> {
    /// Method.
    pub method: &'a str,
    /// Host to connect to.
    pub host: &'a str,
    /// TCP port.
    pub port: u16,
    /// Request target, e.g. `/bucket/key?x=1`.
    pub target: &'a str,
    /// Headers besides Host, Content-Length and Connection.
    pub headers: &'a [(String, String)],
    /// Body (sent with Content-Length, also when empty for PUT).
    pub body: &'a [u8],
    /// Timeout for connect and for each read or write.
    pub timeout: Duration,
    /// Speak TLS (needs the `tls` feature; refused as not sent without it).
    pub tls: bool,
}

/// Send `req` and read the whole response.
///
/// # Errors
/// [`Fail::NotSent`] if no connection (or TLS session) could be opened, else
/// [`Fail::MaybeSent`].
pub fn send(req: &Request<'_>) -> Result<Response, Fail> {
    let mut c = open(req)?;
    exchange(&mut c, &head(req, true), req).map(|(r, _)| r)
}

/// Send `req` on an idle connection of `pool` (or a new one) and read the whole response; the
/// connection goes back to the pool unless the server said `Connection: close` or the
/// response was delimited by the end of the connection.
///
/// # Errors
/// [`Fail::NotSent`] if no idle connection was open and no new one could be opened, else
/// [`Fail::MaybeSent`].
pub fn send_pooled(req: &Request<'_>, pool: &Pool) -> Result<Response, Fail> {
    let out = head(req, false);
    let (mut c, reused) = match pool.take() {
        Some(c) => (c, true),
        None => {
            let c = open(req)?;
            pool.opened
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (c, false)
        }
    };
    if reused {
        let s = c.tcp();
        let maybe = |e: std::io::Error| Fail::MaybeSent(format!("kept-alive socket: {e}"));
        s.set_read_timeout(Some(req.timeout)).map_err(maybe)?;
        s.set_write_timeout(Some(req.timeout)).map_err(maybe)?;
    }
    let (r, keep) = exchange(&mut c, &out, req).map_err(|f| match f {
        Fail::MaybeSent(m) if reused => Fail::MaybeSent(format!("{m} (kept-alive connection)")),
        f => f,
    })?;
    let close = r
        .header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close"));
    if keep && !close {
        pool.put(c);
    }
    Ok(r)
}

/// Open a connection for `req` (TLS session included), with its timeouts set.
fn open(req: &Request<'_>) -> Result<Conn, Fail> {
    // An IPv6 literal is bracketed in the URL and the Host header (`[::1]:9000`), not in the
    // address to connect to.
    let ip = req.host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    let endpoint = format!("{}:{}", req.host, req.port);
    let addrs: Vec<SocketAddr> = (ip.unwrap_or(req.host), req.port)
        .to_socket_addrs()
        .map_err(|e| Fail::NotSent(format!("resolve {endpoint}: {e}")))?
        .collect();
    let s = connect_any(&endpoint, &addrs, req.timeout)?;
    let unsent = |e: std::io::Error| Fail::NotSent(format!("socket: {e}"));
    s.set_read_timeout(Some(req.timeout)).map_err(unsent)?;
    s.set_write_timeout(Some(req.timeout)).map_err(unsent)?;
    let _ = s.set_nodelay(true);
    if req.tls {
        return tls::open_tls(req, s);
    }
    Ok(Conn::Tcp(s))
}

/// Connect to the first of `addrs` (as the resolver ordered them) that accepts, trying each in
/// turn as curl does: a name that resolves to `::1` first and `127.0.0.1` second reaches a
/// server listening on `127.0.0.1` only. The whole call is bounded by `timeout`: each try
/// gets an even share of what is left of it (the last try all of it), so an address that
/// drops every SYN cannot use up the time of those after it (each try had all of `timeout`,
/// and a name of two such addresses took twice as long as configured). `endpoint`
/// (`host:port`) names the target in errors.
///
/// # Errors
/// [`Fail::NotSent`] when no address accepted (or there was none): it names `endpoint` and
/// each address tried with its error.
pub fn connect_any(
    endpoint: &str,
    addrs: &[SocketAddr],
    timeout: Duration,
) -> Result<TcpStream, Fail> {
    let mut tried = Vec::new();
    let deadline = std::time::Instant::now() + timeout;
    for (i, addr) in addrs.iter().enumerate() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        // `addrs.len() - i` >= 1; a zero timeout is refused by connect_timeout (EINVAL).
        let share = left / u32::try_from(addrs.len() - i).unwrap_or(u32::MAX);
        if share.is_zero() {
            tried.push(format!(
                "{addr}: not tried, the {timeout:?} timeout was used up"
            ));
            continue;
        }
        match TcpStream::connect_timeout(addr, share) {
            Ok(s) => return Ok(s),
            Err(e) => tried.push(format!("{addr}: {e}")),
        }
    }
    if tried.is_empty() {
        return Err(Fail::NotSent(format!(
            "connect {endpoint}: the name resolved to no address"
        )));
    }
    Err(Fail::NotSent(format!(
        "connect {endpoint}: tried {} address(es): {}",
        tried.len(),
        tried.join("; ")
    )))
}

/// The request's bytes: head (with `Connection: close` when `close`) and body.
fn head(req: &Request<'_>, close: bool) -> Vec<u8> {
    let mut head = format!("{} {} HTTP/1.1\r\n", req.method, req.target);
    let default_port = if req.tls { 443 } else { 80 };
    if req.port == default_port {
        head.push_str(&format!("host: {}\r\n", req.host));
    } else {
        head.push_str(&format!("host: {}:{}\r\n", req.host, req.port));
    }
    for (n, v) in req.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n", req.body.len()));
    if close {
        head.push_str("connection: close\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(req.body);
    out
}

/// Write the request and read the whole response on an open connection; also whether the
/// response ended by its own framing (the connection may carry another request) rather
/// than by the end of the connection.
fn exchange<S: Read + Write>(
    s: &mut S,
    out: &[u8],
    req: &Request<'_>,
) -> Result<(Response, bool), Fail> {
    let maybe = |what: &str, e: std::io::Error| Fail::MaybeSent(format!("{what}: {e}"));
    s.write_all(out).map_err(|e| maybe("send", e))?;
    s.flush().map_err(|e| maybe("send", e))?;
    let head_only = req.method == "HEAD";
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut framed = true;
    // Read until the response is complete (a server that keeps the connection open despite
    // `Connection: close` costs nothing) or the server closes.
    while !complete(&raw, head_only) {
        match s.read(&mut buf) {
            Ok(0) => {
                framed = false;
                break;
            }
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A TLS peer that closes without close_notify: what was read is judged below.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                framed = false;
                break;
            }
            Err(e) => return Err(maybe("receive", e)),
        }
    }
    let framed = framed && exact_len(&raw, head_only);
    let r = parse(&raw, head_only).ok_or_else(|| {
        Fail::MaybeSent(format!(
            "torn or bad response ({} bytes) to {} {}",
            raw.len(),
            req.method,
            req.target
        ))
    })?;
    Ok((r, framed))
}

/// Whether `raw`, a complete response, holds nothing after it (so the connection carries no
/// stray bytes into the next exchange): its Content-Length body ends the buffer, or it has no
/// body, or its chunked body's end does.
fn exact_len(raw: &[u8], head_only: bool) -> bool {
    let Some(end) = find(raw, b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).unwrap_or("");
    let body = raw.len() - end - 4;
    if head_only || status == "204" || status == "304" {
        return body == 0;
    }
    for line in head.split("\r\n").skip(1) {
        let (n, v) = line.split_once(':').unwrap_or((line, ""));
        match (n.trim(), v.trim()) {
            ("content-length", v) => return v.parse() == Ok(body),
            ("transfer-encoding", "chunked") => return raw.ends_with(b"0\r\n\r\n"),
            _ => {}
        }
    }
    false
}

#[cfg(feature = "tls")]
mod tls {
    use super::{Conn, Fail, Request};
    use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
    use std::net::TcpStream;
    use std::sync::{Arc, OnceLock};

    /// Mozilla's roots, plus the PEM certificates in `STOWQ_CA_FILE` if set.
    fn config() -> Result<Arc<rustls::ClientConfig>, String> {
        static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
        CONFIG
            .get_or_init(|| {
                let mut roots = rustls::RootCertStore::empty();
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                if let Ok(path) = std::env::var("STOWQ_CA_FILE") {
                    let certs = CertificateDer::pem_file_iter(&path)
                        .map_err(|e| format!("STOWQ_CA_FILE {path}: {e}"))?;
                    for c in certs {
                        let c = c.map_err(|e| format!("STOWQ_CA_FILE {path}: {e}"))?;
                        roots
                            .add(c)
                            .map_err(|e| format!("STOWQ_CA_FILE {path}: {e}"))?;
                    }
                }
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let cfg = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                Ok(Arc::new(cfg))
            })
            .clone()
    }

    /// The handshake (a failure there sent no request: not sent).
    pub fn open_tls(req: &Request<'_>, mut tcp: TcpStream) -> Result<Conn, Fail> {
        let cfg = config().map_err(Fail::NotSent)?;
        let name = ServerName::try_from(req.host.to_string())
            .map_err(|e| Fail::NotSent(format!("TLS name {}: {e}", req.host)))?;
        let mut conn = rustls::ClientConnection::new(cfg, name)
            .map_err(|e| Fail::NotSent(format!("TLS: {e}")))?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)
                .map_err(|e| Fail::NotSent(format!("TLS handshake with {}: {e}", req.host)))?;
        }
        Ok(Conn::Tls(Box::new(rustls::StreamOwned::new(conn, tcp))))
    }
}

#[cfg(not(feature = "tls"))]
mod tls {
    use super::{Conn, Fail, Request};
    use std::net::TcpStream;

    /// Without the `tls` feature nothing is sent.
    pub fn open_tls(_: &Request<'_>, _: TcpStream) -> Result<Conn, Fail> {
        Err(Fail::NotSent(
            "https needs stowq built with --features tls".into(),
        ))
    }
}

/// Whether `raw` holds a whole response: headers, then a Content-Length body, or a chunked
/// body's last chunk, or no body (HEAD, 204, 304). Without either, only EOF ends it.
fn complete(raw: &[u8], head_only: bool) -> bool {
    let Some(end) = find(raw, b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).unwrap_or("");
    if head_only || status == "204" || status == "304" {
        return true;
    }
    let body = &raw[end + 4..];
    for line in head.split("\r\n").skip(1) {
        let (n, v) = line.split_once(':').unwrap_or((line, ""));
        match (n.trim(), v.trim()) {
            ("content-length", v) => return v.parse().is_ok_and(|len: usize| body.len() >= len),
            ("transfer-encoding", "chunked") => return body.ends_with(b"0\r\n\r\n"),
            _ => {}
        }
    }
    false
}

fn find(h: &[u8], pat: &[u8]) -> Option<usize> {
    h.windows(pat.len()).position(|w| w == pat)
}

/// Parse a whole response read to EOF; `None` if torn or not HTTP.
pub fn parse(raw: &[u8], head_only: bool) -> Option<Response> {
    let end = find(raw, b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let mut parts = status_line.splitn(3, ' ');
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let status: u16 = parts.next()?.parse().ok()?;
    let mut headers = Vec::new();
    for l in lines {
        let (n, v) = l.split_once(':')?;
        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let resp = Response {
        status,
        headers,
        body: Vec::new(),
    };
    let rest = &raw[end + 4..];
    if head_only || status == 204 || status == 304 {
        return Some(resp);
    }
    let body = if resp
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        dechunk(rest)?
    } else if let Some(len) = resp.header("content-length") {
        let len: usize = len.parse().ok()?;
        rest.get(..len)?.to_vec()
    } else {
        rest.to_vec()
    };
    Some(Response { body, ..resp })
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = find(b, b"\r\n")?;
        let size = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_length_and_chunked_bodies_and_refuses_torn_ones() {
        let r = parse(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nETag: \"x\"\r\n\r\nabc",
            false,
        );
        let r = r.unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"abc"[..]));
        assert_eq!(r.header("etag"), Some("\"x\""));
        let c =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1\r\nc\r\n0\r\n\r\n";
        assert_eq!(parse(c, false).unwrap().body, b"abc");
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", false).is_none());
        assert!(parse(b"HTTP/1.1 200 OK\r\nContent-", false).is_none());
        assert!(parse(b"", false).is_none());
        assert!(complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
            false
        ));
        assert!(!complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab",
            false
        ));
        assert!(complete(b"HTTP/1.1 204 No Content\r\n\r\n", false));
        assert!(complete(c, false));
        assert!(
            !complete(b"HTTP/1.1 200 OK\r\n\r\nabc", false),
            "no length: until EOF"
        );
    }

    /// A port free on both 127.0.0.1 and ::1 (nothing listens on it once this returns), and
    /// a listener on `which` of the two at that port.
    fn listener_on_one(which: &str) -> (std::net::TcpListener, u16) {
        use std::net::TcpListener;
        for _ in 0..50 {
            let l = TcpListener::bind(format!("{which}:0")).unwrap();
            let port = l.local_addr().unwrap().port();
            let other = if which == "127.0.0.1" {
                "[::1]"
            } else {
                "127.0.0.1"
            };
            // The other family's address at this port must refuse: bindable, so free.
            if TcpListener::bind(format!("{other}:{port}")).is_ok() {
                return (l, port);
            }
        }
        panic!("no port free on both 127.0.0.1 and ::1");
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn each_resolved_address_is_tried_in_turn() {
        let t = Duration::from_secs(5);
        // ::1 first, as getaddrinfo orders `localhost` on many machines, but the server
        // listens on 127.0.0.1 only.
        let (l, port) = listener_on_one("127.0.0.1");
        let addrs = [
            sa(&format!("[::1]:{port}")),
            sa(&format!("127.0.0.1:{port}")),
        ];
        let s = connect_any(&format!("localhost:{port}"), &addrs, t).unwrap();
        assert_eq!(s.peer_addr().unwrap(), addrs[1]);
        let (_, from) = l.accept().unwrap();
        assert_eq!(from, s.local_addr().unwrap());
        // And the other way round: 127.0.0.1 first, the server on ::1 only.
        let (l, port) = listener_on_one("[::1]");
        let addrs = [
            sa(&format!("127.0.0.1:{port}")),
            sa(&format!("[::1]:{port}")),
        ];
        let s = connect_any(&format!("localhost:{port}"), &addrs, t).unwrap();
        assert_eq!(s.peer_addr().unwrap(), addrs[1]);
        let (_, from) = l.accept().unwrap();
        assert_eq!(from, s.local_addr().unwrap());
    }

    /// Three addresses that each drop every SYN (a listener whose accept queue is full)
    /// took three times the timeout; the call now ends within it.
    #[test]
    fn addresses_that_drop_every_syn_share_one_timeout() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        // Fill the accept queue (std listens with a backlog of 128, capped by somaxconn):
        // once it is full the kernel drops new SYNs, and a connect waits out its timeout.
        let mut held = Vec::new();
        let full = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
                Ok(s) => held.push(s),
                Err(_) => break true,
            }
            if held.len() > 5000 {
                break false;
            }
        };
        assert!(full, "the accept queue never filled");
        let t = Duration::from_millis(1500);
        let t0 = std::time::Instant::now();
        let e = connect_any("silent:1", &[addr, addr, addr], t).unwrap_err();
        let took = t0.elapsed();
        assert!(took < t * 2, "took {took:?} for a {t:?} timeout");
        let Fail::NotSent(msg) = e else {
            panic!("not NotSent: {e:?}")
        };
        assert!(
            msg.starts_with("connect silent:1: tried 3 address(es): "),
            "{msg}"
        );
        drop(l);
    }

    #[test]
    fn when_no_address_accepts_the_error_names_the_endpoint_and_each_address() {
        let (l, port) = listener_on_one("127.0.0.1");
        drop(l);
        let addrs = [
            sa(&format!("[::1]:{port}")),
            sa(&format!("127.0.0.1:{port}")),
        ];
        let e = connect_any(&format!("localhost:{port}"), &addrs, Duration::from_secs(5));
        let Err(Fail::NotSent(msg)) = e else {
            panic!("not NotSent: {e:?}")
        };
        assert!(
            msg.starts_with(&format!("connect localhost:{port}: tried 2 address(es): ")),
            "{msg}"
        );
        assert!(msg.contains(&format!("[::1]:{port}: ")), "{msg}");
        assert!(msg.contains(&format!("127.0.0.1:{port}: ")), "{msg}");
        assert!(msg.contains("refused"), "{msg}");
        let e = connect_any("nowhere:80", &[], Duration::from_secs(1)).unwrap_err();
        assert_eq!(
            e,
            Fail::NotSent("connect nowhere:80: the name resolved to no address".into())
        );
        // Through send: the endpoint as configured, resolved here.
        let e = send(&Request {
            method: "GET",
            host: "localhost",
            port,
            target: "/",
            headers: &[],
            body: b"",
            timeout: Duration::from_secs(5),
            tls: false,
        })
        .unwrap_err();
        let Fail::NotSent(msg) = e else {
            panic!("not NotSent: {e:?}")
        };
        assert!(
            msg.starts_with(&format!("connect localhost:{port}: tried ")),
            "{msg}"
        );
        assert!(msg.contains(&format!(":{port}: ")), "{msg}");
    }

    /// A server on 127.0.0.1 that answers each request on a connection with `200` and a
    /// body naming the connection and the request's number on it; after `per_conn` answers
    /// it closes the connection (an idle close, as servers do), or sends `Connection: close`
    /// with the last one when `say_close`.
    fn keep_alive_server(per_conn: usize, say_close: bool) -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for (conn, s) in l.incoming().enumerate() {
                let mut s = s.unwrap();
                std::thread::spawn(move || {
                    let mut raw = Vec::new();
                    let mut buf = [0u8; 4096];
                    for n in 0..per_conn {
                        while find(&raw, b"\r\n\r\n").is_none() {
                            match s.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(k) => raw.extend_from_slice(&buf[..k]),
                            }
                        }
                        let end = find(&raw, b"\r\n\r\n").unwrap();
                        raw.drain(..end + 4);
                        let body = format!("c{conn} r{n}");
                        let close = if say_close && n + 1 == per_conn {
                            "Connection: close\r\n"
                        } else {
                            ""
                        };
                        let r = format!(
                            "HTTP/1.1 200 OK\r\n{close}Content-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        s.write_all(r.as_bytes()).unwrap();
                    }
                });
            }
        });
        port
    }

    fn get(port: u16, pool: &Pool) -> String {
        let r = send_pooled(
            &Request {
                method: "GET",
                host: "127.0.0.1",
                port,
                target: "/",
                headers: &[],
                body: b"",
                timeout: Duration::from_secs(5),
                tls: false,
            },
            pool,
        )
        .unwrap();
        String::from_utf8(r.body).unwrap()
    }

    /// Requests share one connection; one the server closed while idle is not reused (no
    /// error, a new connection), nor one whose last answer said `Connection: close`.
    #[test]
    fn kept_alive_connections_are_reused_until_the_server_closes_them() {
        let port = keep_alive_server(3, false);
        let pool = Pool::default();
        let got: Vec<String> = (0..3).map(|_| get(port, &pool)).collect();
        assert_eq!(got, ["c0 r0", "c0 r1", "c0 r2"]);
        assert_eq!(pool.opened(), 1);
        // The server closes connection 0 after its third answer: wait until the pool's
        // connection shows it, then the next request opens connection 1, without error.
        let t0 = Instant::now();
        while pool.idle.lock().unwrap()[0].0.idle_and_open() {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the server's close is seen"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(get(port, &pool), "c1 r0");
        assert_eq!(pool.opened(), 2);

        let port = keep_alive_server(2, true);
        let pool = Pool::default();
        let got: Vec<String> = (0..4).map(|_| get(port, &pool)).collect();
        assert_eq!(got, ["c0 r0", "c0 r1", "c1 r0", "c1 r1"]);
        assert_eq!(pool.opened(), 2);
        // `send` never keeps a connection: each request says `Connection: close`.
        let req = Request {
            method: "GET",
            host: "h",
            port: 80,
            target: "/",
            headers: &[],
            body: b"",
            timeout: Duration::from_secs(1),
            tls: false,
        };
        let h = String::from_utf8(head(&req, true)).unwrap();
        assert!(
            h.ends_with("content-length: 0\r\nconnection: close\r\n\r\n"),
            "{h}"
        );
        let h = String::from_utf8(head(&req, false)).unwrap();
        assert!(!h.contains("connection:"), "{h}");
    }
}
