//! docs/workflows.md's transcode pipeline, run as written there: its worker script and its
//! shell session, with a stand-in `ffmpeg` that records how many transcodes run at once and
//! refuses an input that does not exist yet (a thumbnail cut before its transcode).

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// The `n`th fenced `sh` block of `doc`.
fn sh_block(doc: &str, n: usize) -> String {
    doc.split("```sh\n")
        .nth(n + 1)
        .and_then(|b| b.split("\n```").next())
        .unwrap_or_else(|| panic!("docs/workflows.md has no sh block {n}"))
        .to_string()
}

/// Records each run in `$FAKE_LOG/order`, the transcodes running at each start in
/// `$FAKE_LOG/counts`, and a missing input in `$FAKE_LOG/errors` (then fails, as ffmpeg).
const FAKE_FFMPEG: &str = r#"#!/bin/sh
for a; do out=$a; done
prev=; for a; do [ "$prev" = -i ] && in=$a; prev=$a; done
[ -f "$in" ] || { echo "missing $in" >> "$FAKE_LOG/errors"; exit 1; }
case "$*" in *-frames:v*) kind=thumbnail ;; *) kind=transcode ;; esac
if [ $kind = transcode ]; then
  touch "$FAKE_LOG/running.$$"
  ls "$FAKE_LOG" | grep -c '^running\.' >> "$FAKE_LOG/counts"
  sleep 0.3
  rm "$FAKE_LOG/running.$$"
fi
cp "$in" "$out"
echo "$kind $in" >> "$FAKE_LOG/order"
"#;

fn write_exec(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_transcode_pipeline_of_the_docs_runs_as_written() {
    let doc = include_str!("../../docs/workflows.md");
    let d = TempDir::new("workflows");
    let (bin, log, incoming) = (
        d.path().join("bin"),
        d.path().join("log"),
        d.path().join("in"),
    );
    for p in [&bin, &log, &incoming] {
        std::fs::create_dir_all(p).unwrap();
    }
    write_exec(&bin.join("ffmpeg"), FAKE_FFMPEG);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_steadq"), bin.join("steadq")).unwrap();
    write_exec(&d.path().join("media-job.sh"), &sh_block(doc, 0));
    let videos = 6;
    for i in 0..videos {
        std::fs::write(incoming.join(format!("v{i}.mkv")), format!("video {i}")).unwrap();
    }
    let q = d.path().join("media-jobs");
    let session = sh_block(doc, 1)
        .replace("/var/lib/steadq/media-jobs", p(&q))
        .replace("/srv/incoming", p(&incoming));
    let path = format!("{}:{}", p(&bin), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("sh")
        .args(["-ec", &session])
        .current_dir(d.path())
        .env("PATH", path)
        .env("FAKE_LOG", &log)
        .output()
        .unwrap();
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{o}{e}");
    // Before the workers: every thumbnail waits.
    assert!(o.contains(&format!("waiting         {videos}")), "{o}");
    let read = |f: &str| std::fs::read_to_string(log.join(f)).unwrap_or_default();
    assert_eq!(read("errors"), "", "a thumbnail ran before its transcode");
    let counts: Vec<u32> = read("counts").lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(counts.len(), videos, "one transcode start each");
    assert_eq!(
        counts.iter().max(),
        Some(&2),
        "the group's limit, reached: {counts:?}"
    );
    let order = read("order");
    for i in 0..videos {
        let v = format!("v{i}");
        let t = order.find(&format!("transcode {}/{v}.mkv", p(&incoming)));
        let th = order.find(&format!("thumbnail {}/{v}.mp4", p(&incoming)));
        assert!(t.is_some() && th.is_some() && t < th, "{v}: {order}");
        assert!(incoming.join(format!("{v}.jpg")).exists(), "{v}.jpg");
    }
    let s = steadq::Queue::open(&q).unwrap().status().unwrap();
    assert_eq!(
        (s.acked, s.waiting, s.dead),
        (2 * videos as u64, 0, 0),
        "{s:?}"
    );
}

/// The production hint of docs/workflows.md follows the shipped unit: the queue directory and
/// script the unit's `ExecStart` uses for instance `media-jobs`, and a drop-in `ExecStart` that
/// is the unit's own with only `--concurrency` changed.
#[test]
fn the_production_hint_of_the_docs_matches_the_shipped_unit() {
    let doc = include_str!("../../docs/workflows.md");
    let unit = include_str!("../../systemd/steadq-worker@.service");
    let exec = |text: &str| -> String {
        text.lines()
            .rfind(|l| l.starts_with("ExecStart=/"))
            .unwrap_or_else(|| panic!("no ExecStart in {text}"))
            .replace("%i", "media-jobs")
    };
    let shipped = exec(unit);
    assert!(
        shipped.contains("work /var/lib/steadq/media-jobs --concurrency 2 ")
            && shipped.ends_with("-- /usr/local/lib/steadq/media-jobs"),
        "{shipped}"
    );
    let ini = doc
        .split("```ini\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the drop-in block");
    assert!(
        ini.contains("\nExecStart=\n"),
        "the drop-in resets ExecStart: {ini}"
    );
    assert_eq!(
        exec(ini),
        shipped.replace("--concurrency 2 ", "--concurrency 8 ")
    );
    assert!(sh_block(doc, 1).starts_with("q=/var/lib/steadq/media-jobs\n"));
    assert!(doc.contains("`/usr/local/lib/steadq/media-jobs`"));
}
