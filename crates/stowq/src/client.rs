//! The few S3 requests StowQ makes, path-style, each signed: conditional create, plain put,
//! get, delete, list (ListObjectsV2) and create bucket. No retries here; callers decide.

use crate::clock::{amz_date, local_ms, ServiceClock};
use crate::config::Config;
use crate::error::{Error, ErrorKind};
use crate::http::{self, Fail, Response};
use crate::sigv4::{sign, uri_encode, ToSign};
use std::sync::atomic::{AtomicU64, Ordering};
use steadq::Outcome;

/// A signed S3 client for one bucket, with the service clock and a request counter.
#[derive(Debug)]
pub struct Client {
    /// Endpoint, credentials, region, timeout.
    pub config: Config,
    /// Bucket name.
    pub bucket: String,
    /// The service's clock, from every response's `Date`.
    pub clock: ServiceClock,
    requests: AtomicU64,
    /// Kept-alive connections to the endpoint.
    pub pool: http::Pool,
}

/// One entry of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Full key.
    pub key: String,
    /// Last-Modified, unix ms (0 if the server gave none).
    pub modified_ms: i64,
}

/// One page of a listing.
#[derive(Clone, Debug, Default)]
pub struct Page {
    /// Entries in key order.
    pub entries: Vec<Entry>,
    /// Continuation token if more keys follow.
    pub next: Option<String>,
}

/// Walk the XML document `xml` with `quick-xml` (entities and character references decoded,
/// CDATA taken as text), whose root element must be `root`: `on_end(parent, name, text)` is
/// called at each element's end with its parent's name and its text (which it may take).
/// `None` if the document is not well-formed, its root is another element, or `on_end`
/// returns `None`; an empty root element (`<root/>`) is a document without children.
fn walk_xml(
    xml: &str,
    root: &[u8],
    mut on_end: impl FnMut(Option<&[u8]>, &[u8], &mut String) -> Option<()>,
) -> Option<()> {
    use quick_xml::events::Event;
    let mut r = quick_xml::Reader::from_str(xml);
    let mut path: Vec<Vec<u8>> = Vec::new();
    let mut text = String::new();
    let mut seen = false;
    loop {
        match r.read_event().ok()? {
            Event::Start(e) => {
                let name = e.local_name().as_ref().to_vec();
                if path.is_empty() {
                    if name != root {
                        return None;
                    }
                    seen = true;
                }
                path.push(name);
                text.clear();
            }
            Event::Text(t) => text.push_str(&t.unescape().ok()?),
            Event::CData(t) => text.push_str(std::str::from_utf8(&t).ok()?),
            Event::End(_) => {
                let name = path.pop()?;
                on_end(path.last().map(Vec::as_slice), &name, &mut text)?;
                text.clear();
            }
            Event::Empty(e) if path.is_empty() => {
                return (e.local_name().as_ref() == root).then_some(())
            }
            Event::Eof => break,
            _ => {}
        }
    }
    (seen && path.is_empty()).then_some(())
}

/// Parse a ListObjectsV2 result ([`walk_xml`]: entities and character references decoded);
/// `None` if it is not one or is not well-formed.
pub fn parse_list(xml: &str) -> Option<Page> {
    let mut page = Page::default();
    let (mut key, mut modified, mut truncated, mut token) = (None, 0, false, None);
    walk_xml(xml, b"ListBucketResult", |parent, name, text| {
        match (parent, name) {
            (Some(b"Contents"), b"Key") => key = Some(std::mem::take(text)),
            (Some(b"Contents"), b"LastModified") => {
                modified = parse_iso8601(text.trim()).unwrap_or(0)
            }
            (Some(b"ListBucketResult"), b"Contents") => page.entries.push(Entry {
                key: key.take()?,
                modified_ms: std::mem::take(&mut modified),
            }),
            (Some(b"ListBucketResult"), b"IsTruncated") => truncated = text.trim() == "true",
            (Some(b"ListBucketResult"), b"NextContinuationToken") => {
                token = Some(std::mem::take(text))
            }
            _ => {}
        }
        Some(())
    })?;
    if truncated {
        page.next = Some(token?);
    }
    Some(page)
}

/// `&`, `<`, `>`, `"` and `'` as XML entities.
fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The keys a `DeleteResult` names in its `<Error>` elements ([`walk_xml`]); `None` if it is
/// no `DeleteResult`.
pub fn parse_delete_result(xml: &str) -> Option<Vec<String>> {
    let mut failed = Vec::new();
    walk_xml(xml, b"DeleteResult", |parent, name, text| {
        if parent == Some(b"Error") && name == b"Key" {
            failed.push(std::mem::take(text));
        }
        Some(())
    })?;
    Some(failed)
}

/// Parse `2026-12-01T04:07:25.123Z` (fraction optional) to unix ms.
pub fn parse_iso8601(s: &str) -> Option<i64> {
    let (date, time) = s.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, dd) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, se) = (t.next()??, t.next()??, t.next()??);
    let frac = format!("{:0<3}", &frac[..frac.len().min(3)]);
    let ms: i64 = frac.parse().ok()?;
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let http = format!(
        "X, {dd:02} {} {y} {h:02}:{mi:02}:{se:02} GMT",
        months.get((m - 1) as usize)?
    );
    Some(crate::clock::parse_http_date(&http)? + ms)
}

impl Client {
    /// A client for `bucket` at the configured endpoint.
    pub fn new(config: Config, bucket: &str) -> Client {
        Client {
            config,
            bucket: bucket.to_string(),
            clock: ServiceClock::default(),
            requests: AtomicU64::new(0),
            pool: http::Pool::default(),
        }
    }

    /// Requests sent (or attempted) so far by this client.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Send one signed request for `key` (empty: the bucket itself) with `query` pairs
    /// (unencoded) and extra headers (lowercase names).
    ///
    /// # Errors
    /// [`Fail`] as [`http::send`] reports it.
    pub fn request(
        &self,
        method: &str,
        key: &str,
        query: &[(&str, &str)],
        headers: &[(&str, String)],
        body: &[u8],
    ) -> Result<Response, Fail> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let path = if key.is_empty() {
            format!("/{}", uri_encode(&self.bucket, false))
        } else {
            format!(
                "/{}/{}",
                uri_encode(&self.bucket, false),
                uri_encode(key, true)
            )
        };
        let mut q: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
            .collect();
        q.sort();
        let query_s: Vec<String> = q.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let query_s = query_s.join("&");
        let c = &self.config;
        let host = if c.port == if c.tls { 443 } else { 80 } {
            c.host.clone()
        } else {
            format!("{}:{}", c.host, c.port)
        };
        let ts = ToSign {
            method,
            path: &path,
            query: &query_s,
            host: &host,
            headers,
            body,
        };
        // Sign with the service's time when known: a skewed local clock must not make the
        // server refuse the signature (S3 allows 15 minutes).
        let mut all = sign(
            &ts,
            &c.credentials,
            &c.region,
            &amz_date(self.clock.now_ms()),
        );
        for (n, v) in headers {
            all.push((n.to_string(), v.clone()));
        }
        let target = if query_s.is_empty() {
            path
        } else {
            format!("{path}?{query_s}")
        };
        let resp = http::send_pooled(
            &http::Request {
                method,
                host: &c.host,
                port: c.port,
                target: &target,
                headers: &all,
                body,
                timeout: c.timeout,
                tls: c.tls,
            },
            &self.pool,
        )?;
        if let Some(d) = resp.header("date") {
            self.clock.observe(d);
        }
        Ok(resp)
    }

    /// `PUT` with `If-None-Match: *`: 200 created, 412 the key exists, 409 a conflicting
    /// write was in progress (not applied; callers send again).
    ///
    /// # Errors
    /// [`Fail`] from the transport.
    pub fn put_if_absent(&self, key: &str, body: &[u8]) -> Result<Response, Fail> {
        self.request("PUT", key, &[], &[("if-none-match", "*".into())], body)
    }

    /// Plain `PUT` (used only for index markers, which are hints).
    ///
    /// # Errors
    /// [`Fail`] from the transport.
    pub fn put(&self, key: &str, body: &[u8]) -> Result<Response, Fail> {
        self.request("PUT", key, &[], &[], body)
    }

    /// `GET` of one object.
    ///
    /// # Errors
    /// [`Fail`] from the transport.
    pub fn get(&self, key: &str) -> Result<Response, Fail> {
        self.request("GET", key, &[], &[], b"")
    }

    /// `DELETE` of one object (204 whether or not it existed).
    ///
    /// # Errors
    /// [`Fail`] from the transport.
    pub fn delete(&self, key: &str) -> Result<Response, Fail> {
        self.request("DELETE", key, &[], &[], b"")
    }

    /// Multi-object delete (`POST /bucket?delete`, DeleteObjects, quiet, with the
    /// `Content-MD5` S3 requires) of up to 1,000 `keys`. `Ok(Ok(failed))`: answered 200 with
    /// a `DeleteResult`, `failed` the keys it named in an `<Error>` (not deleted);
    /// `Ok(Err(status))`: refused as a whole (a 200 whose body is no `DeleteResult` is taken
    /// as 501: the server does not know the operation).
    ///
    /// # Errors
    /// [`Fail`] from the transport.
    pub fn delete_many(&self, keys: &[String]) -> Result<Result<Vec<String>, u16>, Fail> {
        let mut body = String::from("<Delete><Quiet>true</Quiet>");
        for k in keys {
            body.push_str("<Object><Key>");
            body.push_str(&xml_escape(k));
            body.push_str("</Key></Object>");
        }
        body.push_str("</Delete>");
        let md5 = content_md5(body.as_bytes());
        let r = self.request(
            "POST",
            "",
            &[("delete", "")],
            &[("content-md5", md5)],
            body.as_bytes(),
        )?;
        if r.status != 200 {
            return Ok(Err(r.status));
        }
        Ok(parse_delete_result(&String::from_utf8_lossy(&r.body)).ok_or(501))
    }

    /// One ListObjectsV2 page of keys under `prefix`, after `start_after` (if any) or from a
    /// continuation token, at most `max` keys. `Ok(Err(status))` if the server refused.
    ///
    /// # Errors
    /// [`Fail`] from the transport, or `MaybeSent` if a 200 body is not a listing or lists a
    /// key that is not after `start_after` (a service that ignores it).
    pub fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        token: Option<&str>,
        max: u32,
    ) -> Result<Result<Page, u16>, Fail> {
        let max_s = max.to_string();
        let mut q = vec![("list-type", "2"), ("prefix", prefix), ("max-keys", &max_s)];
        if let Some(s) = start_after {
            q.push(("start-after", s));
        }
        if let Some(t) = token {
            q.push(("continuation-token", t));
        }
        let r = self.request("GET", "", &q, &[], b"")?;
        if r.status != 200 {
            return Ok(Err(r.status));
        }
        let xml = String::from_utf8_lossy(&r.body);
        let page = parse_list(&xml)
            .ok_or_else(|| Fail::MaybeSent("listing body is not ListBucketResult".into()))?;
        // A service that ignores `start-after` lists from the prefix's start on every page:
        // the listings that page or jump by it (due markers, index repair) would then read
        // the same page for ever, a billed request each time. Refused at the first key that
        // is not after it.
        if let Some((s, e)) = start_after.and_then(|s| {
            page.entries
                .iter()
                .find(|e| e.key.as_str() <= s)
                .map(|e| (s, e))
        }) {
            return Err(Fail::MaybeSent(format!(
                "the service ignored start-after={s} (it listed {}); StowQ needs ListObjectsV2's start-after",
                e.key
            )));
        }
        Ok(Ok(page))
    }

    /// Create the bucket unless it exists (`PUT /bucket`; 200, or 409 when it exists).
    ///
    /// # Errors
    /// [`ErrorKind::Bucket`]: not done when the request never left this process (connection
    /// refused) or the service refused it (its error `<Code>` named, e.g.
    /// `InvalidBucketName`); indeterminate when the answer was lost or was a 5xx: it may
    /// have been applied.
    pub fn create_bucket(&self) -> Result<(), Error> {
        let bucket = self.bucket.clone();
        let fail = |outcome, why: String| Error {
            outcome,
            kind: ErrorKind::Bucket {
                bucket: bucket.clone(),
                why,
            },
        };
        let r = match self.put_bucket() {
            Ok(r) => r,
            Err(Fail::NotSent(m)) => {
                return Err(fail(Outcome::NotDone, format!("no connection: {m}")))
            }
            Err(Fail::MaybeSent(m)) => {
                return Err(fail(Outcome::Indeterminate, format!("no answer: {m}")))
            }
        };
        if r.status == 200 || r.status == 409 {
            return Ok(());
        }
        let body = String::from_utf8_lossy(&r.body);
        let code = body
            .split_once("<Code>")
            .and_then(|(_, rest)| rest.split_once("</Code>"))
            .map_or(String::new(), |(c, _)| format!(" {c}"));
        Err(if r.status >= 500 {
            fail(
                Outcome::Indeterminate,
                format!("HTTP {}{code}: may have been applied", r.status),
            )
        } else {
            fail(Outcome::NotDone, format!("HTTP {}{code}", r.status))
        })
    }

    /// `PUT /bucket`, with the region's location constraint outside us-east-1.
    fn put_bucket(&self) -> Result<Response, Fail> {
        let body = if self.config.region == "us-east-1" {
            String::new()
        } else {
            format!(
                "<CreateBucketConfiguration><LocationConstraint>{}</LocationConstraint></CreateBucketConfiguration>",
                self.config.region
            )
        };
        self.request("PUT", "", &[], &[], body.as_bytes())
    }

    /// Local wall ms (for callers that want it beside the service's).
    pub fn local_ms(&self) -> i64 {
        local_ms()
    }
}

/// The `Content-MD5` header's value for `body` (RFC 1864: base64 of the MD5 digest).
fn content_md5(body: &[u8]) -> String {
    use base64ct::Encoding;
    use md5::Digest;
    base64ct::Base64::encode_string(&md5::Md5::digest(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from Python's `base64.b64encode(hashlib.md5(body).digest())`.
    #[test]
    fn content_md5_is_the_base64_md5_of_the_body() {
        assert_eq!(content_md5(b""), "1B2M2Y8AsgTpgAmY7PhCfg==");
        let body =
            b"<Delete><Quiet>true</Quiet><Object><Key>q/i/ready/0/a&amp;b</Key></Object></Delete>";
        assert_eq!(content_md5(body), "YMSg8XPqRkl9+zQviSonbQ==");
    }

    #[test]
    fn listings_parse() {
        let xml = "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>\
            <Contents><Key>a/b&amp;c</Key><LastModified>2026-12-01T04:07:25.5Z</LastModified></Contents>\
            <Contents><Key>a/d</Key><LastModified>2026-12-01T04:07:25Z</LastModified></Contents>\
            <NextContinuationToken>tok</NextContinuationToken></ListBucketResult>";
        let p = parse_list(xml).unwrap();
        assert_eq!(p.entries.len(), 2);
        assert_eq!(p.entries[0].key, "a/b&c");
        assert_eq!(p.entries[0].modified_ms, 1_796_098_045_500);
        assert_eq!(p.entries[1].modified_ms, 1_796_098_045_000);
        assert_eq!(p.next.as_deref(), Some("tok"));
        assert!(parse_list("<Error/>").is_none());
    }

    #[test]
    fn listing_keys_with_entities_and_non_ascii_decode() {
        let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult \
            xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>\
            <Contents><Key>q/a&amp;b&lt;c&gt;&quot;&apos;</Key></Contents>\
            <Contents><Key>q/caf\u{e9}-&#xE9;-&#233;</Key><Size>3</Size></Contents>\
            <Contents><Key><![CDATA[q/<raw>]]></Key></Contents>\
            <IsTruncated>false</IsTruncated><NextContinuationToken>x</NextContinuationToken>\
            </ListBucketResult>";
        let p = parse_list(xml).unwrap();
        let keys: Vec<&str> = p.entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            ["q/a&b<c>\"'", "q/caf\u{e9}-\u{e9}-\u{e9}", "q/<raw>"]
        );
        assert_eq!(p.next, None, "not truncated");
        // A key element outside Contents, an unclosed document, a bad entity: not listings.
        assert!(parse_list("<ListBucketResult><Contents><Key>a</Key>").is_none());
        assert!(parse_list(
            "<ListBucketResult><Contents><Key>&bogus;</Key></Contents></ListBucketResult>"
        )
        .is_none());
        assert!(parse_list("<Error><Code>NoSuchBucket</Code></Error>").is_none());
        assert_eq!(parse_list("<ListBucketResult/>").unwrap().entries.len(), 0);
    }

    #[test]
    fn delete_results_name_the_keys_not_deleted() {
        let xml =
            "<?xml version=\"1.0\"?><DeleteResult xmlns=\"x\"><Deleted><Key>a</Key></Deleted>\
            <Error><Key>q/b&amp;c</Key><Code>AccessDenied</Code></Error></DeleteResult>";
        assert_eq!(parse_delete_result(xml), Some(vec!["q/b&c".to_string()]));
        assert_eq!(parse_delete_result("<DeleteResult/>"), Some(vec![]));
        assert_eq!(
            parse_delete_result("<DeleteResult></DeleteResult>"),
            Some(vec![])
        );
        assert_eq!(
            parse_delete_result("<Error><Code>NotImplemented</Code></Error>"),
            None
        );
        assert_eq!(xml_escape("a&<'"), "a&amp;&lt;&apos;");
    }
}
