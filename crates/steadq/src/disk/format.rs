//! The job file: a 128-byte header followed by the payload, written once and never changed.
//!
//! ```text
//! offset size field
//!      0    8 magic            b"STEADQJ\0"
//!      8    2 format version   u16 little-endian, currently 1
//!     10    2 header length    u16 LE, 128
//!     12    4 flags            u32 LE, 0 (readers reject unknown bits)
//!     16   16 job id           u128 big-endian (the same 32 hex as the name)
//!     32   16 queue id         u128 BE
//!     48    8 created          u64 LE, unix ns (CLOCK_REALTIME at enqueue)
//!     56    8 payload length   u64 LE, bytes
//!     64   32 payload digest   SHA-256(payload)
//!     96   32 envelope digest  SHA-256(bytes 0..96 || payload)
//!    128    - payload
//! ```
//!
//! Verification checks, in order: total length, magic, version, header length, flags, job id
//! against the name, queue id, payload length against the file length, the payload digest and
//! the envelope digest. Any failure is a [`Corruption`]. [`Verifier`] makes the same checks
//! on a file read in pieces (memory does not grow with the payload).

use sha2::{Digest, Sha256};

/// Header length in bytes.
pub const HEADER_LEN: usize = 128;
/// The magic bytes at offset 0.
pub const MAGIC: [u8; 8] = *b"STEADQJ\0";
/// The job file format version this build writes and reads.
pub const VERSION: u16 = 1;

const OFF_VERSION: usize = 8;
const OFF_HLEN: usize = OFF_VERSION + 2;
const OFF_FLAGS: usize = OFF_HLEN + 2;
const OFF_ID: usize = OFF_FLAGS + 4;
const OFF_QUEUE: usize = OFF_ID + 16;
const OFF_CREATED: usize = OFF_QUEUE + 16;
const OFF_LEN: usize = OFF_CREATED + 8;
const OFF_PAYLOAD_SHA: usize = OFF_LEN + 8;
const OFF_ENVELOPE_SHA: usize = OFF_PAYLOAD_SHA + 32;
const _: () = assert!(OFF_ENVELOPE_SHA + 32 == HEADER_LEN);

/// The decoded header of a verified job file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Job id (the same as in the name).
    pub id: u128,
    /// Queue id of the queue that wrote it.
    pub queue_id: u128,
    /// Creation time, unix ns.
    pub created_ns: u64,
    /// Payload length, bytes.
    pub payload_len: u64,
    /// SHA-256 of the payload.
    pub payload_sha256: [u8; 32],
    /// SHA-256 of header bytes 0..96 and the payload.
    pub envelope_sha256: [u8; 32],
}

/// Why a job file failed verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// Shorter than the header (includes empty and truncated files).
    Truncated,
    /// Magic bytes wrong (includes zero-filled files).
    Magic,
    /// A format version this build does not know.
    Version(u16),
    /// Header length or flags not as this version defines them.
    Header,
    /// The job id inside differs from the name's.
    JobId,
    /// Written by another queue.
    QueueId,
    /// The payload length field disagrees with the file length.
    Length,
    /// SHA-256 of the payload differs.
    PayloadDigest,
    /// SHA-256 of the envelope differs.
    EnvelopeDigest,
    /// Not a regular file (symlink, fifo, device, directory).
    NotRegular,
    /// Sparse by far (`crate::sys::sparse`): `declared` bytes over `allocated` bytes on
    /// disk. SteadQ writes every byte of a job file; this one is forged, and is not read.
    Sparse {
        /// Its size (`st_size`), bytes.
        declared: u64,
        /// Bytes allocated to it (`st_blocks × 512`).
        allocated: u64,
    },
}

impl core::fmt::Display for Corruption {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Corruption::Truncated => f.write_str("file shorter than the 128-byte header"),
            Corruption::Magic => f.write_str("bad magic (not a SteadQ job file)"),
            Corruption::Version(v) => write!(f, "unknown job format version {v}"),
            Corruption::Header => f.write_str("bad header length or flags"),
            Corruption::JobId => f.write_str("job id in the file differs from the name"),
            Corruption::QueueId => f.write_str("written by another queue"),
            Corruption::Length => f.write_str("payload length disagrees with file size"),
            Corruption::PayloadDigest => f.write_str("payload SHA-256 mismatch"),
            Corruption::EnvelopeDigest => f.write_str("envelope SHA-256 mismatch"),
            Corruption::NotRegular => f.write_str("not a regular file"),
            Corruption::Sparse {
                declared,
                allocated,
            } => write!(
                f,
                "sparse: {declared} bytes declared over {allocated} bytes allocated (not read)"
            ),
        }
    }
}

/// Build the 128-byte header for `payload`.
pub fn encode_header(
    id: u128,
    queue_id: u128,
    created_ns: u64,
    payload: &[u8],
) -> [u8; HEADER_LEN] {
    let p: [u8; 32] = Sha256::digest(payload).into();
    let mut h = encode_prefix(id, queue_id, created_ns, payload.len() as u64, p);
    let mut e = Envelope::new(&h);
    e.update(payload);
    e.seal(&mut h);
    h
}

/// A header with every field but the envelope digest (zero until [`Envelope::seal`]): for a
/// payload written in pieces, whose length and digest are known only at its end.
pub fn encode_prefix(
    id: u128,
    queue_id: u128,
    created_ns: u64,
    payload_len: u64,
    payload_sha256: [u8; 32],
) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[OFF_VERSION..OFF_HLEN].copy_from_slice(&VERSION.to_le_bytes());
    h[OFF_HLEN..OFF_FLAGS].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
    h[OFF_ID..OFF_QUEUE].copy_from_slice(&id.to_be_bytes());
    h[OFF_QUEUE..OFF_CREATED].copy_from_slice(&queue_id.to_be_bytes());
    h[OFF_CREATED..OFF_LEN].copy_from_slice(&created_ns.to_le_bytes());
    h[OFF_LEN..OFF_PAYLOAD_SHA].copy_from_slice(&payload_len.to_le_bytes());
    h[OFF_PAYLOAD_SHA..OFF_ENVELOPE_SHA].copy_from_slice(&payload_sha256);
    h
}

/// SHA-256 of a payload taken in pieces (about 110 bytes of state).
#[derive(Clone, Debug, Default)]
pub struct PayloadDigest(Sha256);

impl PayloadDigest {
    /// Take the next bytes of the payload.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The digest of every byte taken.
    pub fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }
}

/// The envelope digest of a header made by [`encode_prefix`] and a payload taken in pieces.
#[derive(Clone, Debug)]
pub struct Envelope(Sha256);

impl Envelope {
    /// Start with the header's first 96 bytes (every field the envelope covers).
    pub fn new(h: &[u8; HEADER_LEN]) -> Self {
        let mut d = Sha256::new();
        d.update(&h[..OFF_ENVELOPE_SHA]);
        Envelope(d)
    }

    /// Take the next bytes of the payload.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// Write the digest into the header's last 32 bytes.
    pub fn seal(self, h: &mut [u8; HEADER_LEN]) {
        let e: [u8; 32] = self.0.finalize().into();
        h[OFF_ENVELOPE_SHA..].copy_from_slice(&e);
    }
}

/// The length in bytes of the whole job file (header and payload) that the header at the
/// start of `head` declares, or `None` when `head` is shorter than a header, its magic is
/// wrong or the sum overflows. Unverified: a hint for how much to read, nothing more.
pub fn declared_len(head: &[u8]) -> Option<u64> {
    if head.len() < HEADER_LEN || head[..8] != MAGIC {
        return None;
    }
    u64_at(head, OFF_LEN).checked_add(HEADER_LEN as u64)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

fn u128_at(b: &[u8], off: usize) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    u128::from_be_bytes(a)
}

/// Verify a whole job file (`file` = header + payload) for job `id` of queue `queue_id`.
///
/// # Errors
/// The first [`Corruption`] found, in the order the module docs list.
pub fn verify(file: &[u8], id: u128, queue_id: u128) -> Result<Header, Corruption> {
    let mut v = Verifier::new(file, file.len() as u64, id, queue_id)?;
    v.update(&file[HEADER_LEN..]);
    v.finish()
}

/// [`verify`] for a job file read in pieces, so memory does not grow with the payload: two
/// SHA-256 states (about 250 bytes) and the decoded header. [`Verifier::new`] checks the
/// header against the file's length, [`Verifier::update`] takes the payload bytes in order,
/// [`Verifier::finish`] checks the count and both digests. The checks and their order are
/// [`verify`]'s.
#[derive(Clone, Debug)]
pub struct Verifier {
    header: Header,
    payload: Sha256,
    envelope: Sha256,
    seen: u64,
}

impl Verifier {
    /// Start verifying a job file of `file_len` bytes (its `fstat` size) for job `id` of
    /// queue `queue_id`; `head` holds the file's first bytes, at least [`HEADER_LEN`] of them
    /// unless the file is shorter (bytes past the header are not taken: pass them to
    /// [`Verifier::update`]).
    ///
    /// # Errors
    /// The header's [`Corruption`]s ([`Corruption::Truncated`] to
    /// [`Corruption::QueueId`]), then [`Corruption::Length`] when the declared payload length
    /// disagrees with `file_len`.
    pub fn new(head: &[u8], file_len: u64, id: u128, queue_id: u128) -> Result<Self, Corruption> {
        if file_len < HEADER_LEN as u64 {
            return Err(Corruption::Truncated);
        }
        let header = verify_header(head, id, queue_id)?;
        if header.payload_len != file_len - HEADER_LEN as u64 {
            return Err(Corruption::Length);
        }
        let mut envelope = Sha256::new();
        envelope.update(&head[..OFF_ENVELOPE_SHA]);
        Ok(Verifier {
            header,
            payload: Sha256::new(),
            envelope,
            seen: 0,
        })
    }

    /// The header, checked up to the queue id and the length (its digests are checked by
    /// [`Verifier::finish`]).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Take the next payload bytes.
    pub fn update(&mut self, payload: &[u8]) {
        self.payload.update(payload);
        self.envelope.update(payload);
        self.seen = self.seen.saturating_add(payload.len() as u64);
    }

    /// Check the payload bytes taken against the header's length and both digests.
    ///
    /// # Errors
    /// [`Corruption::Length`] when more or fewer bytes than declared were taken, then
    /// [`Corruption::PayloadDigest`], then [`Corruption::EnvelopeDigest`].
    pub fn finish(self) -> Result<Header, Corruption> {
        if self.seen != self.header.payload_len {
            return Err(Corruption::Length);
        }
        let p: [u8; 32] = self.payload.finalize().into();
        if p != self.header.payload_sha256 {
            return Err(Corruption::PayloadDigest);
        }
        let e: [u8; 32] = self.envelope.finalize().into();
        if e != self.header.envelope_sha256 {
            return Err(Corruption::EnvelopeDigest);
        }
        Ok(self.header)
    }
}

/// SHA-256 of a payload read in pieces, checked against the digest a verified header gave:
/// what a payload reader uses to notice a job file changed after its claim.
#[derive(Clone, Debug)]
pub struct PayloadCheck {
    digest: Sha256,
    expected: [u8; 32],
    left: u64,
}

impl PayloadCheck {
    /// Expect the payload `header` describes (its length and payload digest).
    pub fn new(header: &Header) -> PayloadCheck {
        PayloadCheck {
            digest: Sha256::new(),
            expected: header.payload_sha256,
            left: header.payload_len,
        }
    }

    /// Payload bytes not taken yet.
    pub fn left(&self) -> u64 {
        self.left
    }

    /// Take the next payload bytes (at most [`PayloadCheck::left`] of them count).
    pub fn update(&mut self, payload: &[u8]) {
        self.digest.update(payload);
        self.left = self.left.saturating_sub(payload.len() as u64);
    }

    /// Whether the bytes taken are the whole payload, unchanged.
    pub fn matches(self) -> bool {
        self.left == 0 && <[u8; 32]>::from(self.digest.finalize()) == self.expected
    }
}

/// Verify a receipt: a whole job file as [`verify`], or a receipt cut to its header (exactly
/// [`HEADER_LEN`] bytes, by the `header` receipt policy or by compaction on a full disk),
/// whose header is checked up to the queue id; its digests still name the payload it had.
///
/// # Errors
/// As [`verify`].
pub fn verify_receipt(file: &[u8], id: u128, queue_id: u128) -> Result<Header, Corruption> {
    if file.len() == HEADER_LEN && u64_at(file, OFF_LEN) != 0 {
        return verify_header(file, id, queue_id);
    }
    verify(file, id, queue_id)
}

/// Bytes from a receipt's start that [`interrupted_cut`] looks at: the smallest block a
/// Linux filesystem uses.
pub const CUT_BLOCK: usize = 512;

/// A receipt cut to its header by a truncate that a crash interrupted: the file still has
/// its old length (`file_len`, the header's payload length plus the header), its header
/// verifies as [`verify_receipt`] checks a cut receipt's, and every byte from the header to
/// the end of the first 512-byte block (or of the file) is zero. xfs leaves such a file: a
/// truncate zeroes the tail of the new last block (`xfs_setattr_size`, fs/xfs/xfs_iops.c)
/// and that write can reach the disk before the size change commits (found by the crash
/// lab's block rig, all barriers in place). Its digests still name the payload it had, as a
/// cut receipt's do; it reads as one. `head` holds the file's first `min(file_len, 512)`
/// bytes or more. `None`: not such a file (a whole receipt that fails its digests is
/// corrupt).
pub fn interrupted_cut(head: &[u8], file_len: u64, id: u128, queue_id: u128) -> Option<Header> {
    let end = (file_len as usize).min(CUT_BLOCK);
    if file_len <= HEADER_LEN as u64 || head.len() < end {
        return None;
    }
    let h = verify_header(head, id, queue_id).ok()?;
    let whole = h.payload_len.checked_add(HEADER_LEN as u64)? == file_len;
    (whole && head[HEADER_LEN..end].iter().all(|b| *b == 0)).then_some(h)
}

/// The header checks of [`verify`], up to the queue id.
fn verify_header(file: &[u8], id: u128, queue_id: u128) -> Result<Header, Corruption> {
    if file.len() < HEADER_LEN {
        return Err(Corruption::Truncated);
    }
    if file[..8] != MAGIC {
        return Err(Corruption::Magic);
    }
    let version = u16::from_le_bytes([file[OFF_VERSION], file[OFF_VERSION + 1]]);
    if version != VERSION {
        return Err(Corruption::Version(version));
    }
    let hlen = u16::from_le_bytes([file[OFF_HLEN], file[OFF_HLEN + 1]]);
    if hlen as usize != HEADER_LEN || file[OFF_FLAGS..OFF_ID] != [0; 4] {
        return Err(Corruption::Header);
    }
    let header = Header {
        id: u128_at(file, OFF_ID),
        queue_id: u128_at(file, OFF_QUEUE),
        created_ns: u64_at(file, OFF_CREATED),
        payload_len: u64_at(file, OFF_LEN),
        payload_sha256: file[OFF_PAYLOAD_SHA..OFF_ENVELOPE_SHA]
            .try_into()
            .unwrap_or([0; 32]),
        envelope_sha256: file[OFF_ENVELOPE_SHA..HEADER_LEN]
            .try_into()
            .unwrap_or([0; 32]),
    };
    if header.id != id {
        return Err(Corruption::JobId);
    }
    if header.queue_id != queue_id {
        return Err(Corruption::QueueId);
    }
    Ok(header)
}

/// Lowercase hex of a digest (64 characters).
pub(crate) fn hex32(d: &[u8; 32]) -> heapless::String<64> {
    let mut s = heapless::String::new();
    for b in d {
        let _ = core::fmt::Write::write_fmt(&mut s, format_args!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(payload: &[u8]) -> Vec<u8> {
        let mut v = encode_header(7, 9, 1234, payload).to_vec();
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn round_trip() {
        let f = file(b"hello");
        let h = verify(&f, 7, 9).unwrap();
        assert_eq!(
            (h.id, h.queue_id, h.created_ns, h.payload_len),
            (7, 9, 1234, 5)
        );
        assert_eq!(
            hex32(&h.payload_sha256).as_str(),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
    }

    #[test]
    fn every_bit_flip_is_caught() {
        let f = file(b"payload bytes");
        for i in 0..f.len() {
            for bit in 0..8 {
                let mut g = f.clone();
                g[i] ^= 1 << bit;
                assert!(verify(&g, 7, 9).is_err(), "byte {i} bit {bit}");
            }
        }
    }

    /// `f` verified in pieces of `step` payload bytes, as a claim reads a large file.
    fn verify_in_pieces(f: &[u8], step: usize) -> Result<Header, Corruption> {
        let mut v = Verifier::new(&f[..HEADER_LEN.min(f.len())], f.len() as u64, 7, 9)?;
        for piece in f[HEADER_LEN..].chunks(step) {
            v.update(piece);
        }
        v.finish()
    }

    #[test]
    fn verifying_in_pieces_agrees_with_verify() {
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 251) as u8).collect();
        let f = file(&payload);
        for step in [1, 7, 64, 999, 1000] {
            assert_eq!(verify_in_pieces(&f, step), verify(&f, 7, 9), "step {step}");
        }
        for i in [0, 9, 60, 100, 127, 128, 500, f.len() - 1] {
            let mut g = f.clone();
            g[i] ^= 0x10;
            assert_eq!(verify_in_pieces(&g, 64), verify(&g, 7, 9), "byte {i}");
            assert!(verify_in_pieces(&g, 64).is_err(), "byte {i}");
        }
        assert_eq!(verify_in_pieces(&f[..100], 64), Err(Corruption::Truncated));
        // A verifier fed fewer or more bytes than the header declares says Length.
        let mut v = Verifier::new(&f, f.len() as u64, 7, 9).unwrap();
        v.update(&payload[..999]);
        assert_eq!(v.finish(), Err(Corruption::Length));
        let mut v = Verifier::new(&f, f.len() as u64, 7, 9).unwrap();
        v.update(&payload);
        v.update(b"x");
        assert_eq!(v.finish(), Err(Corruption::Length));
    }

    #[test]
    fn payload_check_matches_only_the_whole_unchanged_payload() {
        let f = file(b"some payload bytes");
        let h = verify(&f, 7, 9).unwrap();
        let mut c = PayloadCheck::new(&h);
        c.update(b"some payload");
        assert_eq!(c.left(), 6);
        c.update(b" bytes");
        assert!(c.matches());
        let mut c = PayloadCheck::new(&h);
        c.update(b"some payload byteZ");
        assert_eq!(c.left(), 0);
        assert!(!c.matches());
        let mut c = PayloadCheck::new(&h);
        c.update(b"some payload byte");
        assert!(!c.matches());
    }

    #[test]
    fn named_failures() {
        let f = file(b"abc");
        assert_eq!(verify(&f[..100], 7, 9), Err(Corruption::Truncated));
        // A receipt cut to its header is a receipt, not a job.
        assert_eq!(verify(&f[..HEADER_LEN], 7, 9), Err(Corruption::Length));
        assert_eq!(verify_receipt(&f[..HEADER_LEN], 7, 9), verify(&f, 7, 9));
        assert_eq!(
            verify_receipt(&f[..HEADER_LEN], 8, 9),
            Err(Corruption::JobId)
        );
        assert_eq!(
            verify_receipt(&f[..HEADER_LEN + 1], 7, 9),
            Err(Corruption::Length)
        );
        assert_eq!(verify(&[0u8; 200], 7, 9), Err(Corruption::Magic));
        assert_eq!(verify(&f, 8, 9), Err(Corruption::JobId));
        assert_eq!(verify(&f, 7, 10), Err(Corruption::QueueId));
        assert_eq!(verify(&f[..f.len() - 1], 7, 9), Err(Corruption::Length));
        let mut g = f.clone();
        *g.last_mut().unwrap() ^= 1;
        assert_eq!(verify(&g, 7, 9), Err(Corruption::PayloadDigest));
        let mut g = f.clone();
        g[OFF_CREATED] ^= 1;
        assert_eq!(verify(&g, 7, 9), Err(Corruption::EnvelopeDigest));
        let mut g = f.clone();
        g[OFF_VERSION] = 2;
        assert_eq!(verify(&g, 7, 9), Err(Corruption::Version(2)));
    }
}
