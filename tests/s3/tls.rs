//! `https://` endpoints (the `tls` feature): moto (on either STOWQ_SERVER: the client's TLS is
//! under test, not the server's) serving a certificate from a private CA
//! made here with `openssl`, trusted through `STOWQ_CA_FILE`.
//! Run with `cargo test -p stowq --features tls --test tls`.
#![cfg(feature = "tls")]

use crate::common::*;
use std::process::Command;
use stowq::{Client, Config, Options, Queue};

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let st = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl");
    assert!(
        st.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&st.stderr)
    );
}

#[test]
fn a_queue_over_https_with_a_private_ca() {
    let dir = std::env::temp_dir().join(format!("stowq-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ext = "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
               keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n";
    std::fs::write(dir.join("leaf.ext"), ext).unwrap();
    let quiet = ["-days", "2"];
    openssl(
        &dir,
        &[
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-subj",
                "/CN=stowq test CA",
            ][..],
            &quiet[..],
        ]
        .concat(),
    );
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "leaf.key",
            "-out",
            "leaf.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    openssl(
        &dir,
        &[
            &[
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "leaf.pem",
                "-extfile",
                "leaf.ext",
            ][..],
            &quiet[..],
        ]
        .concat(),
    );
    let (cert, key) = (dir.join("leaf.pem"), dir.join("leaf.key"));
    let Some(m) = moto_with(&["-c", cert.to_str().unwrap(), "-k", key.to_str().unwrap()]) else {
        return;
    };
    // Read once, at the first TLS connection of this process.
    std::env::set_var("STOWQ_CA_FILE", dir.join("ca.pem"));
    let cfg = Config {
        tls: true,
        ..config(m.port, 10_000)
    };
    let c = Client::new(cfg.clone(), "tls");
    c.create_bucket().expect("TLS handshake and request");
    let q = Queue::create(Client::new(cfg, "tls"), "q", Options::default()).unwrap();
    let id = q.enqueue(b"over tls").unwrap();
    let l = q.claim().unwrap().unwrap();
    assert_eq!((l.id, l.payload.as_slice()), (id, &b"over tls"[..]));
    q.ack(&l).unwrap();
    assert_eq!(q.status().unwrap().done, 1);
    // Plain HTTP to the TLS port is not a response: may have been sent, never "done".
    let plain = Client::new(config(m.port, 2_000), "tls");
    assert!(plain.get("q/queue").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
