//! Where the bucket is and who we are: the standard AWS environment variables, then the
//! shared profile files (`~/.aws/credentials`, `~/.aws/config`).

use crate::sigv4::Credentials;
use std::path::PathBuf;

/// An S3 endpoint, credentials and region.
#[derive(Clone, Debug)]
pub struct Config {
    /// Host to connect to.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `https://`: TLS (needs the `tls` feature).
    pub tls: bool,
    /// Region used in the signature scope.
    pub region: String,
    /// Signing credentials.
    pub credentials: Credentials,
    /// Timeout for connect and each read or write of one request.
    pub timeout: std::time::Duration,
}

/// Parse `http://host[:port][/]` or `https://...` into host, port and whether it is TLS.
/// `https://` needs the `tls` feature; without it, it is refused here.
///
/// # Errors
/// A message naming the URL when it is malformed or needs TLS this build lacks.
pub fn parse_endpoint(url: &str) -> Result<(String, u16, bool), String> {
    let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(r), _) => (r, false),
        (_, Some(r)) if cfg!(feature = "tls") => (r, true),
        (_, Some(_)) => {
            return Err(format!(
                "endpoint {url:?}: https needs stowq built with --features tls"
            ))
        }
        _ => return Err(format!("endpoint {url:?}: expected http:// or https://")),
    };
    let hostport = rest.trim_end_matches('/');
    if hostport.contains('/') || hostport.is_empty() {
        return Err(format!("endpoint {url:?}: expected http[s]://host[:port]"));
    }
    match hostport.rsplit_once(':') {
        Some((h, p)) => {
            let port = p
                .parse()
                .map_err(|_| format!("endpoint {url:?}: bad port"))?;
            Ok((h.to_string(), port, tls))
        }
        None => Ok((hostport.to_string(), if tls { 443 } else { 80 }, tls)),
    }
}

/// Values of `section` in an INI-style AWS file (`[name]` or `[profile name]`).
pub fn ini_section(text: &str, section: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('#') || l.starts_with(';') || l.is_empty() {
            continue;
        }
        if let Some(name) = l.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
            let name = name.trim();
            inside =
                name == section || name.strip_prefix("profile ").map(str::trim) == Some(section);
            continue;
        }
        if inside {
            if let Some((k, v)) = l.split_once('=') {
                out.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
    }
    out
}

fn home_file(env: &str, rel: &str) -> Option<PathBuf> {
    if let Ok(p) = std::env::var(env) {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rel))
}

fn profile_value(file: Option<PathBuf>, profile: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(file?).ok()?;
    ini_section(&text, profile)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// `STOWQ_TIMEOUT_MS`: whole milliseconds, at least 1 (0 made every request fail with
/// "cannot set a 0 duration timeout"; a value that did not parse, `10s`, was silently 10 s).
///
/// # Errors
/// A message naming the variable and its value.
pub fn parse_timeout_ms(v: &str) -> Result<u64, String> {
    v.trim()
        .parse()
        .ok()
        .filter(|&ms: &u64| ms > 0)
        .ok_or_else(|| format!("STOWQ_TIMEOUT_MS={v:?}: expected whole milliseconds, at least 1"))
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Config {
    /// Read the configuration: `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (required without
    /// the `tls` feature; with it the default is `https://s3.<region>.amazonaws.com`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`, `AWS_REGION` or `AWS_DEFAULT_REGION`; missing values come from the
    /// profile `AWS_PROFILE` (default `default`) in `AWS_SHARED_CREDENTIALS_FILE` /
    /// `~/.aws/credentials` and `AWS_CONFIG_FILE` / `~/.aws/config`. Region defaults to
    /// `us-east-1`; timeout to 10 s (`STOWQ_TIMEOUT_MS`).
    ///
    /// # Errors
    /// A message saying which value is missing or malformed.
    pub fn from_env() -> Result<Config, String> {
        let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".into());
        let creds_file = home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
        let config_file = home_file("AWS_CONFIG_FILE", ".aws/config");
        let get = |var: &str, key: &str| {
            env(var)
                .or_else(|| profile_value(creds_file.clone(), &profile, key))
                .or_else(|| profile_value(config_file.clone(), &profile, key))
        };
        let access_key = get("AWS_ACCESS_KEY_ID", "aws_access_key_id")
            .ok_or("no credentials: set AWS_ACCESS_KEY_ID or a profile in ~/.aws/credentials")?;
        let secret_key = get("AWS_SECRET_ACCESS_KEY", "aws_secret_access_key")
            .ok_or("no AWS_SECRET_ACCESS_KEY (or aws_secret_access_key in the profile)")?;
        let session_token = get("AWS_SESSION_TOKEN", "aws_session_token");
        let region = env("AWS_REGION")
            .or_else(|| get("AWS_DEFAULT_REGION", "region"))
            .unwrap_or_else(|| "us-east-1".into());
        let url =
            match env("AWS_ENDPOINT_URL_S3").or_else(|| get("AWS_ENDPOINT_URL", "endpoint_url")) {
                Some(u) => u,
                None if cfg!(feature = "tls") => format!("https://s3.{region}.amazonaws.com"),
                None => return Err("no endpoint: set AWS_ENDPOINT_URL=http://host:port".into()),
            };
        let (host, port, tls) = parse_endpoint(&url)?;
        let ms = match env("STOWQ_TIMEOUT_MS") {
            Some(v) => parse_timeout_ms(&v)?,
            None => 10_000,
        };
        Ok(Config {
            host,
            port,
            tls,
            region,
            credentials: Credentials {
                access_key,
                secret_key,
                session_token,
            },
            timeout: std::time::Duration::from_millis(ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_profiles_parse() {
        assert_eq!(
            parse_endpoint("http://127.0.0.1:9000/").unwrap(),
            ("127.0.0.1".to_string(), 9000, false)
        );
        assert_eq!(
            parse_endpoint("http://minio").unwrap(),
            ("minio".into(), 80, false)
        );
        let https = parse_endpoint("https://s3.amazonaws.com");
        if cfg!(feature = "tls") {
            assert_eq!(https.unwrap(), ("s3.amazonaws.com".into(), 443, true));
        } else {
            assert!(https.unwrap_err().contains("--features tls"));
        }
        assert!(parse_endpoint("ftp://x").is_err());
        assert_eq!(
            parse_endpoint("http://[::1]:9000").unwrap(),
            ("[::1]".into(), 9000, false)
        );
        assert_eq!(parse_timeout_ms("2500"), Ok(2500));
        for bad in ["0", "10s", "-5", ""] {
            assert!(parse_timeout_ms(bad)
                .unwrap_err()
                .contains("STOWQ_TIMEOUT_MS"));
        }
        let ini = "[default]\naws_access_key_id = A\n[profile x]\nregion=eu-west-1\n[y]\nk=v\n";
        assert_eq!(
            ini_section(ini, "default"),
            vec![("aws_access_key_id".into(), "A".into())]
        );
        assert_eq!(
            ini_section(ini, "x"),
            vec![("region".into(), "eu-west-1".into())]
        );
        assert_eq!(ini_section(ini, "y"), vec![("k".into(), "v".into())]);
    }
}
