//! AWS Signature Version 4 for S3, header form, on top of `sha2` with a hand-rolled HMAC.
//!
//! Every request is signed, conditional writes included: S3-compatible servers (moto among them)
//! answer an unsigned conditional write with 403, not with the 412 the protocol relies on.

use sha2::{Digest, Sha256};

/// Access key, secret and optional session token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key: String,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_key: String,
    /// `AWS_SESSION_TOKEN`, sent as `x-amz-security-token` when present.
    pub session_token: Option<String>,
}

/// HMAC-SHA256 (RFC 2104) of `msg` under `key`, by the `hmac` crate.
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(msg);
    mac.finalize().into_bytes().into()
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Lowercase hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// URI-encode per SigV4: unreserved characters kept, `/` kept only when `keep_slash`.
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        let unreserved = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~');
        if unreserved || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What is signed: method, encoded path, canonical query (already sorted and encoded), and the
/// headers that must be signed (lowercase names), besides host and the x-amz ones added here.
pub struct ToSign<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// URI-encoded absolute path.
    pub path: &'a str,
    /// Canonical query string (`a=1&b=2`, sorted, encoded), maybe empty.
    pub query: &'a str,
    /// `host[:port]` as sent.
    pub host: &'a str,
    /// Extra headers to sign, lowercase names, trimmed values.
    pub headers: &'a [(&'a str, String)],
    /// The body.
    pub body: &'a [u8],
}

/// Sign a request made at `amz_date` (`YYYYMMDDTHHMMSSZ`) in `region`; returns the headers to
/// send: `x-amz-date`, `x-amz-content-sha256`, maybe `x-amz-security-token`, `authorization`.
pub fn sign(
    req: &ToSign<'_>,
    creds: &Credentials,
    region: &str,
    amz_date: &str,
) -> Vec<(String, String)> {
    let payload_hash = sha256_hex(req.body);
    let mut hs: Vec<(String, String)> = vec![
        ("host".into(), req.host.to_string()),
        ("x-amz-content-sha256".into(), payload_hash.clone()),
        ("x-amz-date".into(), amz_date.to_string()),
    ];
    if let Some(t) = &creds.session_token {
        hs.push(("x-amz-security-token".into(), t.clone()));
    }
    for (n, v) in req.headers {
        hs.push((n.to_string(), v.trim().to_string()));
    }
    hs.sort();
    let signed: Vec<&str> = hs.iter().map(|(n, _)| n.as_str()).collect();
    let signed = signed.join(";");
    let mut canonical = format!("{}\n{}\n{}\n", req.method, req.path, req.query);
    for (n, v) in &hs {
        canonical.push_str(&format!("{n}:{v}\n"));
    }
    canonical.push_str(&format!("\n{signed}\n{payload_hash}"));
    let day = &amz_date[..8];
    let scope = format!("{day}/{region}/s3/aws4_request");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical.as_bytes())
    );
    let k = hmac_sha256(
        format!("AWS4{}", creds.secret_key).as_bytes(),
        day.as_bytes(),
    );
    let k = hmac_sha256(&k, region.as_bytes());
    let k = hmac_sha256(&k, b"s3");
    let k = hmac_sha256(&k, b"aws4_request");
    let sig = hex(&hmac_sha256(&k, string_to_sign.as_bytes()));
    let auth = format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={sig}",
        creds.access_key
    );
    let mut out: Vec<(String, String)> = hs
        .into_iter()
        .filter(|(n, _)| n.starts_with("x-amz-"))
        .collect();
    out.push(("authorization".into(), auth));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn get_object_matches_the_aws_documented_example() {
        // From the S3 SigV4 documentation ("GET Object" example, header-based auth).
        let creds = Credentials {
            access_key: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        };
        let headers = [("range", "bytes=0-9".to_string())];
        let req = ToSign {
            method: "GET",
            path: "/test.txt",
            query: "",
            host: "examplebucket.s3.amazonaws.com",
            headers: &headers,
            body: b"",
        };
        let out = sign(&req, &creds, "us-east-1", "20130524T000000Z");
        let auth = &out.iter().find(|(n, _)| n == "authorization").unwrap().1;
        assert!(auth.ends_with(
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        ));
        assert!(auth.contains("SignedHeaders=host;range;x-amz-content-sha256;x-amz-date"));
    }
}
