//! Redis with appendonly yes and appendfsync always, started on 127.0.0.1 with a private
//! directory on the filesystem under test and stopped afterwards. Enqueue is RPUSH, claim
//! LMOVE to a processing list, ack LREM from it; a minimal RESP client over TCP.

use crate::run::Res;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

/// A running redis-server; killed and waited for on drop.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start redis-server in `dir`, or `None` when it is not installed.
pub fn start(dir: &std::path::Path) -> Res<Option<Server>> {
    if Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        return Ok(None);
    }
    std::fs::create_dir_all(dir)?;
    let port = 20000 + (std::process::id() % 20000) as u16;
    let mut cmd = Command::new("redis-server");
    cmd.args([
        "--bind",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--save",
        "",
    ])
    .args([
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--protected-mode",
        "yes",
    ])
    .arg("--dir")
    .arg(dir)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec and makes only two
    // async-signal-safe system calls (prctl, getppid); it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            // If the bench dies (Ctrl-C, kill, timeout) the server dies with it instead of
            // holding its port and directory (prctl(2) PR_SET_PDEATHSIG).
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // The parent may have died before the prctl: then nothing would ever signal us.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::other(
                    "the bench exited before redis-server started",
                ));
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let s = Server { child, port };
    for _ in 0..100 {
        if let Ok(mut c) = Client::connect(port) {
            if c.cmd(&[b"PING"]).is_ok() {
                return Ok(Some(s));
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Err("redis-server did not answer PING".into())
}

pub struct Client {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Client {
    pub fn connect(port: u16) -> Res<Client> {
        let w = TcpStream::connect(("127.0.0.1", port))?;
        w.set_nodelay(true)?;
        Ok(Client {
            r: BufReader::new(w.try_clone()?),
            w,
        })
    }

    /// Send one command; return a bulk reply's bytes (or an empty Vec).
    pub fn cmd(&mut self, args: &[&[u8]]) -> Res<Vec<u8>> {
        self.send(&[args])?;
        self.reply()
    }

    /// Send commands in one write (a pipeline): redis-server reads them in one event-loop
    /// pass and, with `appendfsync always`, makes one AOF write and fsync for them before it
    /// replies.
    fn send(&mut self, cmds: &[&[&[u8]]]) -> Res<()> {
        let mut out = Vec::new();
        for args in cmds {
            out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
            for a in *args {
                out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                out.extend_from_slice(a);
                out.extend_from_slice(b"\r\n");
            }
        }
        Ok(self.w.write_all(&out)?)
    }

    /// Read one reply: a bulk reply's bytes (or an empty Vec).
    fn reply(&mut self) -> Res<Vec<u8>> {
        let mut line = String::new();
        self.r.read_line(&mut line)?;
        match line.as_bytes().first() {
            Some(b'$') => {
                let n: i64 = line[1..].trim().parse()?;
                if n < 0 {
                    return Ok(Vec::new());
                }
                let mut b = vec![0u8; n as usize + 2];
                std::io::Read::read_exact(&mut self.r, &mut b)?;
                b.truncate(n as usize);
                Ok(b)
            }
            Some(b'-') => Err(line.trim().to_string().into()),
            _ => Ok(Vec::new()),
        }
    }

    /// A worker's step, SteadQ's `strict-next` in Redis: RPUSH a unique job, then the ack
    /// of the job held (LREM) and the claim of the next (LMOVE) pipelined, so that one AOF
    /// fsync covers both. Returns 1 when a job was acked.
    pub fn step_next(&mut self, job: &[u8], held: &mut Option<Vec<u8>>) -> Res<usize> {
        self.cmd(&[b"RPUSH", b"q", job])?;
        let lmove: &[&[u8]] = &[b"LMOVE", b"q", b"processing", b"LEFT", b"RIGHT"];
        let acked = match held.take() {
            Some(h) => {
                self.send(&[&[b"LREM", b"processing", b"1", &h], lmove])?;
                self.reply()?;
                1
            }
            None => {
                self.send(&[lmove])?;
                0
            }
        };
        let got = self.reply()?;
        *held = (!got.is_empty()).then_some(got);
        Ok(acked)
    }

    /// One lifecycle: RPUSH a unique job, LMOVE it to processing, LREM it.
    pub fn lifecycle(&mut self, job: &[u8]) -> Res<usize> {
        self.cmd(&[b"RPUSH", b"q", job])?;
        let got = self.cmd(&[b"LMOVE", b"q", b"processing", b"LEFT", b"RIGHT"])?;
        self.cmd(&[b"LREM", b"processing", b"1", &got])?;
        Ok(usize::from(!got.is_empty()))
    }
}
