//! `show`: one job's state, name fields, header, digests and payload, or its evidence line
//! once compaction removed its receipt. Not in the appliance build (the size-limited
//! aarch64 binary: about 7 KB of it); `list` and `status` are there.

use super::args::Show;
use super::cmd::{now, parse_job_id};
use super::exit::Exit;
use super::{encode, fixed, stdout, CliError};
use steadq::{Error, ErrorKind, JobId, Queue, State};

pub fn cmd_show(a: Show) -> Result<Exit, CliError> {
    let id = parse_job_id(&a.job)?;
    let q = super::open_read_only(&a.dir)?;
    let l = match q.find(id) {
        Ok(l) => l,
        Err(e) if matches!(e.kind(), ErrorKind::NoSuchJob) => return show_compacted(&a, &q, id),
        Err(e) => return Err(e.into()),
    };
    // Verified in 64 KiB chunks; the payload is streamed, never held whole.
    let (h, mut payload) = match q.open_job(&l) {
        Ok(x) => x,
        // A corrupt file is shown by its name (which is verified on its own); its header and
        // payload cannot be trusted. `open_job` moves nothing.
        Err(e) if matches!(e.kind(), ErrorKind::Corrupt(_)) => return show_corrupt(&a, &q, &l, &e),
        Err(e) => return Err(e.into()),
    };
    // A receipt cut to its 128-byte header (`--receipts header`, or `compact`) verifies, but
    // its payload is gone: its stream is empty although the header counts bytes.
    let not_kept = || {
        CliError::not_done(format!(
            "{}: job {id} is a receipt cut to its header: its {}-byte payload was not kept",
            a.dir.display(),
            h.payload_len
        ))
    };
    if a.raw {
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0u64;
        loop {
            match std::io::Read::read(&mut payload, &mut buf) {
                Ok(0) if total == 0 && h.payload_len > 0 => return Err(not_kept()),
                Ok(0) => return Ok(Exit::Done),
                Ok(n) if !stdout::write(&buf[..n]) => return Ok(Exit::Done),
                Ok(n) => total += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(CliError::not_done(e.to_string())),
            }
        }
    }
    show_name(&q, &l);
    header_lines(&h, &mut payload)?;
    Ok(Exit::Done)
}

/// Print the lines `show` gives for a verified job file or envelope: `created` (UTC and unix
/// seconds), `bytes`, `sha256`, `envelope`, then `payload`: the payload itself when it is
/// UTF-8 of at most 4096 bytes, else its size and kind. An empty stream of a header that
/// counts bytes is a receipt cut to its header. Used by local and `s3://` queues alike.
/// Errors: a read of `payload` that fails (not done; nothing was changed).
pub(super) fn header_lines(
    h: &steadq::format::Header,
    payload: &mut impl std::io::Read,
) -> Result<(), CliError> {
    out!("created   {}", fixed::moment(u128::from(h.created_ns)));
    out!("bytes     {}", h.payload_len);
    out!("sha256    {}", encode::hex(&h.payload_sha256));
    out!("envelope  {}", encode::hex(&h.envelope_sha256));
    let (text, head) = utf8_head(payload).map_err(|e| CliError::not_done(e.to_string()))?;
    match head {
        Some(t) if t.is_empty() && h.payload_len > 0 => out!(
            "payload   (not kept: the receipt was cut to its header; {} bytes)",
            h.payload_len
        ),
        Some(t) if text => out!("payload   {t}"),
        _ => out!(
            "payload   ({} bytes of {}; --raw prints it)",
            h.payload_len,
            if text { "text" } else { "binary" }
        ),
    }
    Ok(())
}

/// Read a payload to its end in 64 KiB pieces: whether it is all UTF-8, and the payload
/// itself when it is at most 4096 bytes (what `show` prints). Memory: one buffer.
pub(super) fn utf8_head(r: &mut impl std::io::Read) -> std::io::Result<(bool, Option<String>)> {
    let mut buf = vec![0u8; 64 * 1024];
    let (mut carry, mut text, mut head, mut total) = (Vec::new(), true, Vec::new(), 0usize);
    loop {
        let n = match r.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        total += n;
        if head.len() < 4097 {
            head.extend_from_slice(&buf[..n.min(4097 - head.len())]);
        }
        if !text {
            continue;
        }
        // Check the carried bytes (an incomplete character at the last piece's end) with
        // this piece.
        carry.extend_from_slice(&buf[..n]);
        match std::str::from_utf8(&carry) {
            Ok(_) => carry.clear(),
            Err(e) if e.error_len().is_none() => {
                let rest = carry.split_off(e.valid_up_to());
                carry = rest;
            }
            Err(_) => text = false,
        }
    }
    text = text && carry.is_empty();
    let head = (total <= 4096)
        .then(|| String::from_utf8(head).ok())
        .flatten();
    Ok((text, head))
}

/// The fields of a job's name: state, path, attempt, generation.
fn show_name(q: &Queue, l: &steadq::Listed) {
    let n = &l.name;
    out!("job       {}", n.id);
    out!(
        "state     {} {}",
        encode::state_name(l.state),
        encode::describe(&now(q), &n.kind)
    );
    out!("path      {}", l.rel_path(q.id()));
    out!("attempt   {}/{}", n.attempt, n.max_attempts);
    out!("gen       {}", n.generation);
    out!("priority  {}", n.priority);
    if let Some(g) = &n.group {
        out!("group     {g}");
    }
    // The jobs it still waits for (a dead job keeps its markers: requeued, it waits again).
    if matches!(l.state, State::Waiting | State::Dead) {
        match q.waiting_for(n.id) {
            Ok(xs) if xs.is_empty() => {}
            Ok(xs) => out!(
                "after     {}",
                xs.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Err(e) => eprintln!("steadq: {}: its dependencies cannot be read: {e}", n.id),
        }
    }
}

/// Show a job whose file fails verification. Dead-lettered already (reason corrupt): exit 0;
/// in any other state: exit 2 (a claim or `fsck` will dead-letter it).
fn show_corrupt(a: &Show, q: &Queue, l: &steadq::Listed, e: &Error) -> Result<Exit, CliError> {
    let ErrorKind::Corrupt(c) = e.kind() else {
        unreachable!("show_corrupt is called for corrupt jobs only")
    };
    let path = a.dir.join(l.rel_path(q.id()));
    if a.raw {
        return Err(CliError::not_done(format!(
            "{}: corrupt job file ({c}): its payload cannot be verified, so --raw prints nothing",
            path.display()
        )));
    }
    show_name(q, l);
    out!("file      corrupt ({c}): header and payload not shown");
    if l.state == State::Dead {
        return Ok(Exit::Done);
    }
    let when = match l.state {
        State::Waiting => {
            "it waits for its dependencies; the first claim that reaches it once it is ready"
        }
        _ => "the next claim that reaches it",
    };
    Err(CliError::not_done(format!(
        "{}: corrupt job file ({c}), not yet dead-lettered: {when} moves it to dead/ \
         (`steadq fsck` reports it; `--quarantine` moves it to quarantine/)",
        path.display()
    )))
}

/// `show` of a job with no file left: its evidence line, when compaction (or receipt policy
/// `none`) removed its receipt; else "no job" (exit 2).
pub fn show_compacted(a: &Show, q: &Queue, id: JobId) -> Result<Exit, CliError> {
    let d = a.dir.display();
    let Some(e) = q.evidence_of(id)? else {
        return Err(CliError::not_done(format!("{d}: no job {id}")));
    };
    if a.raw {
        return Err(CliError::not_done(format!(
            "{d}: job {id} was acked and its receipt compacted: its payload was not kept"
        )));
    }
    out!(
        "job       {id}\nstate     acked, receipt removed (compacted): from its evidence line\n\
         receipt   {}\nacked     {}\nsha256    {}\nenvelope  {}",
        e.receipt,
        super::fixed::moment(u128::from(e.acked_ns)),
        encode::hex(&e.payload_sha256),
        encode::hex(&e.envelope_sha256)
    );
    Ok(Exit::Done)
}
