//! Shared definitions of the placeholder workload (`crashlab-workload`) and its verifier
//! (`crashlab-verify`). They imitate a queue without using SteadQ: jobs are files that move
//! `tmp/ -> new/` (enqueue), `new/ -> cur/` (claim) and are unlinked from `cur/` (ack), each step
//! made durable with fsyncs before its mark is written. To be replaced by SteadQ's own workload
//! and verifier; nothing else in the rig depends on this module.

/// Directory (under the mount point) holding the queue.
pub const ROOT: &str = "q";
pub const TMP: &str = "tmp";
pub const NEW: &str = "new";
pub const CUR: &str = "cur";

pub fn job_id(i: u64) -> String {
    format!("j{i:05}")
}

pub fn parse_job_id(name: &str) -> Option<u64> {
    let digits = name.strip_prefix('j')?;
    if digits.len() != 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn fnv1a(s: &str) -> u64 {
    let mut h = 0xcbf29ce484222325u64;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The exact content of job `id`: a header line naming the job, then pseudo-random bytes.
/// Sizes vary from about 100 bytes to `max_size` so that both partial blocks and multi-block
/// files occur. The verifier recomputes it from the name alone (the size is in the header).
pub fn job_content(id: &str, max_size: usize) -> Vec<u8> {
    let h = fnv1a(id);
    let size = 100 + (h % (max_size.max(200) as u64 - 99)) as usize;
    content_of_size(id, size)
}

pub fn content_of_size(id: &str, size: usize) -> Vec<u8> {
    let header = format!("crashlab job {id} size {size}\n");
    let mut out = Vec::with_capacity(size.max(header.len()));
    out.extend_from_slice(header.as_bytes());
    let mut x = fnv1a(id) | 1;
    while out.len() < size {
        // xorshift64
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(size.max(header.len()));
    out
}

/// Checks a job file's bytes; Err explains what is wrong.
pub fn check_content(id: &str, data: &[u8]) -> Result<(), String> {
    if data.is_empty() {
        return Err("empty file".into());
    }
    let nl = data
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header line")?;
    let header = std::str::from_utf8(&data[..nl]).map_err(|_| "header not UTF-8")?;
    let size: usize = header
        .strip_prefix(&format!("crashlab job {id} size "))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad header {header:?}"))?;
    if data.len() != size {
        return Err(format!("{} bytes, header says {size}", data.len()));
    }
    if data != content_of_size(id, size).as_slice() {
        let first = data
            .iter()
            .zip(content_of_size(id, size))
            .position(|(a, b)| *a != b);
        return Err(format!("content differs from byte {}", first.unwrap_or(0)));
    }
    Ok(())
}

/// The operation schedule for `n` jobs: enqueue i, claim i-1, ack i-2, ... then drain.
pub fn schedule(n: u64) -> Vec<(&'static str, u64)> {
    let mut ops = Vec::new();
    for i in 0..n {
        ops.push(("enqueue", i));
        if i >= 1 {
            ops.push(("claim", i - 1));
        }
        if i >= 2 {
            ops.push(("ack", i - 2));
        }
    }
    if n >= 1 {
        ops.push(("claim", n - 1));
    }
    for i in n.saturating_sub(2)..n {
        ops.push(("ack", i));
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_roundtrip_and_damage() {
        for i in 0..50 {
            let id = job_id(i);
            let c = job_content(&id, 65536);
            assert!(c.len() >= 100 && c.len() <= 65536, "{}", c.len());
            check_content(&id, &c).unwrap();
            assert!(check_content(&job_id(i + 1), &c).is_err());
            assert!(check_content(&id, &c[..c.len() - 1]).is_err());
            assert!(check_content(&id, &[]).is_err());
            let mut z = c.clone();
            let at = z.len() - 1;
            z[at] ^= 1;
            assert!(check_content(&id, &z).is_err());
            let mut zeros = c.clone();
            zeros[40..].iter_mut().for_each(|b| *b = 0);
            assert!(check_content(&id, &zeros).is_err());
        }
    }

    #[test]
    fn ids() {
        assert_eq!(job_id(7), "j00007");
        assert_eq!(parse_job_id("j00007"), Some(7));
        assert_eq!(parse_job_id("j7"), None);
        assert_eq!(parse_job_id("x00007"), None);
    }

    #[test]
    fn schedule_visits_every_job_three_times_in_order() {
        for n in 0..6 {
            let s = schedule(n);
            assert_eq!(s.len() as u64, 3 * n);
            for j in 0..n {
                let ops: Vec<_> = s.iter().filter(|(_, i)| *i == j).map(|(o, _)| *o).collect();
                assert_eq!(ops, vec!["enqueue", "claim", "ack"]);
            }
        }
    }
}
