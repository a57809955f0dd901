//! DESIGN.md is the specification: these tests fail when a name a real queue writes, or an
//! entry it creates at its root, no longer matches the document (the transition table has its
//! own test in `crates/steadq/src/disk/state.rs`).

use crate::common::*;
use std::time::Duration;
use steadq::*;

/// The fenced block that follows `heading` in DESIGN.md, one string per line.
fn design_block(heading: &str) -> Vec<String> {
    let doc = include_str!("../../DESIGN.md");
    let at = doc
        .find(heading)
        .unwrap_or_else(|| panic!("DESIGN.md lacks {heading}"));
    let rest = &doc[at..];
    let open = rest.find("```text\n").expect("a text block") + "```text\n".len();
    let close = open + rest[open..].find("```").expect("its end");
    rest[open..close].lines().map(str::to_owned).collect()
}

/// Does `s` match `pattern`? In a pattern `<name16>` stands for exactly 16 lowercase hex
/// digits (any width), `<reason>` for 1 to 16 of `[a-z0-9]`, `<ss>` for a 2-digit shard,
/// `<path>` for anything; every other byte stands for itself.
fn matches(pattern: &str, s: &str) -> bool {
    let Some(open) = pattern.find('<') else {
        return pattern == s;
    };
    let close = open + pattern[open..].find('>').expect("a closed <field>");
    let (lit, field, after) = (
        &pattern[..open],
        &pattern[open + 1..close],
        &pattern[close + 1..],
    );
    let Some(s) = s.strip_prefix(lit) else {
        return false;
    };
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    let width: String = field.chars().filter(char::is_ascii_digit).collect();
    match field {
        "path" => !s.is_empty(),
        "reason" | "group" => (1..=16).any(|n| {
            s.len() >= n
                && s.as_bytes()[..n]
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && matches(after, &s[n..])
        }),
        "ss" => {
            s.len() >= 2 && s.as_bytes()[..2].iter().all(|&b| hex(b)) && matches(after, &s[2..])
        }
        _ => {
            let n: usize = width
                .parse()
                .unwrap_or_else(|_| panic!("no width in <{field}>"));
            s.len() >= n && s.as_bytes()[..n].iter().all(|&b| hex(b)) && matches(after, &s[n..])
        }
    }
}

#[test]
fn the_pattern_matcher_is_strict() {
    assert!(matches("<id4>.g<gen2>", "0a1f.g00"));
    assert!(!matches("<id4>.g<gen2>", "0a1f.g0"));
    assert!(!matches("<id4>.g<gen2>", "0A1F.g00"));
    assert!(matches("x<reason>.k", "xcorrupt.k"));
    assert!(!matches("x<reason>.k", "x.k"));
    assert!(!matches("x<reason>.k", "xbad-input.k"));
}

#[test]
fn every_name_kind_matches_its_design_line_and_no_other() {
    names_match_design(3, None, None);
    names_match_design(3, Some(6), None);
    names_match_design(3, Some(0), None);
    names_match_design(3, Some(7), GroupName::new("zzzzzzzzzzzzzzzz"));
    names_match_design(2, None, None);
    names_match_design(1, None, None);
}

/// A queue of format `version` writes names that each match their kind's line (version 1:
/// its own delayed and receipt lines in place of the version-2 ones; a job of a priority
/// other than the default: the priority lines; a job of a group: the group lines) and no
/// other.
fn names_match_design(version: u32, priority: Option<u8>, group: Option<GroupName>) {
    let d = TempDir::new("design-names");
    let q = Queue::create(
        d.path(),
        Options {
            format_version: version,
            ..fast(2)
        },
    )
    .unwrap();
    let lines = design_block("## Names");
    let v1 = design_block("### Version-1 names");
    let prio = design_block("### Priority names");
    let split = |l: &String| -> Option<(String, String)> {
        l.split_once(char::is_whitespace)
            .map(|(k, p)| (k.to_owned(), p.trim().to_owned()))
    };
    let mut kinds: Vec<(String, String)> = lines.iter().filter_map(split).collect();
    assert_eq!(kinds.len(), 5, "{lines:?}");
    // A job's names match its own variant's lines, and none of the others'.
    let mut others: Vec<(String, String)> = prio.iter().filter_map(split).collect();
    let grouped: Vec<(String, String)> = design_block("### Group names")
        .iter()
        .filter_map(split)
        .collect();
    assert_eq!(grouped.len(), 5);
    if group.is_some() {
        others.extend(std::mem::replace(&mut kinds, grouped));
    } else if priority.is_some() {
        std::mem::swap(&mut kinds, &mut others);
        assert_eq!(kinds.len(), 5, "{prio:?}");
        others.extend(grouped);
    } else {
        others.extend(grouped);
    }
    if version == 1 {
        for (k, p) in v1.iter().filter_map(split) {
            let slot = kinds.iter_mut().find(|(kk, _)| *kk == k).expect("a kind");
            slot.1 = p;
        }
    }
    let kinds: Vec<(&str, &str)> = kinds
        .iter()
        .map(|(k, p)| (k.as_str(), p.as_str()))
        .collect();

    // One job in each state, written by the library itself.
    let plain = EnqueueOptions {
        priority,
        group,
        ..Default::default()
    };
    q.enqueue_with(b"ready", &plain).unwrap().id();
    let delay = EnqueueOptions {
        delay: Some(Duration::from_secs(3600)),
        ..plain.clone()
    };
    q.enqueue_with(b"delayed", &delay).unwrap().id();
    for _ in 0..3 {
        q.enqueue_with(b"more", &plain).unwrap().id();
    }
    let a = q.claim().unwrap().unwrap();
    let b = q.claim().unwrap().unwrap();
    let c = q.claim().unwrap().unwrap();
    a.ack().unwrap();
    b.fail(Reason::new("badinput").unwrap()).unwrap();
    let leased = c.handle();
    let mut seen = std::collections::HashMap::new();
    for l in q.list(None).unwrap() {
        let name = l.rel_path(q.id()).rsplit('/').next().unwrap().to_owned();
        seen.entry(l.state).or_insert(name);
    }
    assert_eq!(seen.len(), 5, "one job in each state: {seen:?}");
    let kind_of = |s: State| match s {
        State::Ready => "ready",
        State::Leased => "leased",
        State::Delayed => "delayed",
        State::Dead => "dead",
        State::Acked => "receipt",
        State::Waiting => "ready",
    };
    let mut longest = 0;
    for (state, name) in &seen {
        let hits: Vec<&str> = kinds
            .iter()
            .filter(|(_, p)| matches(p, name))
            .map(|(k, _)| *k)
            .collect();
        assert_eq!(hits, vec![kind_of(*state)], "{name} matched {hits:?}");
        assert!(
            !others.iter().any(|(_, p)| matches(p, name)),
            "{name} matched another variant's line"
        );
        longest = longest.max(name.len());
    }
    assert!(
        leased.ends_with(&seen[&State::Leased]),
        "{leased} is the leased job's name"
    );
    // The document's figure for the longest name is the leased one's real length.
    let figure = format!("at most {longest} bytes (a leased name");
    assert!(
        include_str!("../../DESIGN.md").contains(&figure),
        "DESIGN.md should say {figure:?}"
    );
}

#[test]
fn every_root_entry_matches_a_layout_line_and_every_line_is_used() {
    let d = TempDir::new("design-layout");
    let evidence = EvidenceLimits {
        max_bytes: 100,
        keep: 3,
    };
    let q = Queue::create(
        d.path(),
        Options {
            evidence,
            ..fast(2)
        },
    )
    .unwrap();
    // Everything a queue can hold: jobs in every state, evidence, quarantine.
    let high = EnqueueOptions {
        priority: Some(7),
        ..Default::default()
    };
    q.enqueue_with(b"p7", &high).unwrap().id();
    q.claim().unwrap().unwrap().ack().unwrap();
    q.enqueue(b"a").unwrap();
    q.enqueue(b"b").unwrap();
    let delay = EnqueueOptions {
        delay: Some(Duration::from_secs(3600)),
        ..Default::default()
    };
    q.enqueue_with(b"c", &delay).unwrap().id();
    q.claim().unwrap().unwrap().ack().unwrap();
    q.claim()
        .unwrap()
        .unwrap()
        .fail(Reason::new("x").unwrap())
        .unwrap();
    q.enqueue(b"d").unwrap();
    q.claim().unwrap().unwrap().ack().unwrap();
    q.compact(Duration::ZERO).unwrap();
    // A second compaction past the (small) evidence limit rotates the log.
    q.enqueue(b"e").unwrap();
    q.claim().unwrap().unwrap().ack().unwrap();
    q.compact(Duration::ZERO).unwrap();
    // Capacity limits, a live key and a retired one (its tombstone).
    q.set_limits(Limits {
        max_jobs: Some(100),
        max_bytes: None,
    })
    .unwrap();
    let key = |k: &str| EnqueueOptions {
        key: Key::new(k),
        ..Default::default()
    };
    q.enqueue_with(b"e", &key("order-1")).unwrap();
    q.enqueue_with(b"f", &key("order-2")).unwrap();
    while let Some(l) = q.claim().unwrap() {
        l.ack().unwrap();
    }
    q.enqueue_with(b"g", &key("order-3")).unwrap();
    q.compact_keys(Duration::ZERO).unwrap();
    // A group with a limit: its directory of slots.
    let ffmpeg = GroupName::new("ffmpeg").unwrap();
    q.set_group_limit(&ffmpeg, Some(2)).unwrap();
    let grouped = EnqueueOptions {
        group: Some(ffmpeg),
        ..Default::default()
    };
    q.enqueue_with(b"h", &grouped).unwrap();
    while let Some(l) = q.claim().unwrap() {
        l.ack().unwrap();
    }
    assert_eq!(q.live_keys().unwrap(), 1);
    // A job waiting for another (waiting/, needs/, after/).
    let first = q.enqueue(b"h").unwrap();
    let waits = EnqueueOptions {
        after: vec![first],
        ..Default::default()
    };
    q.enqueue_with(b"i", &waits).unwrap();
    std::fs::write(d.path().join("ready/00/stray.txt"), b"foreign").unwrap();
    q.fsck_quarantine().unwrap();

    let lines = design_block("## Layout");
    let patterns: Vec<String> = lines
        .iter()
        .map(|l| {
            let p = l.split_whitespace().next().unwrap();
            p.strip_prefix("<root>/")
                .unwrap()
                .trim_end_matches('/')
                .to_owned()
        })
        .collect();
    let mut used = vec![false; patterns.len()];
    let mut entries = Vec::new();
    for top in std::fs::read_dir(d.path()).unwrap() {
        let top = top.unwrap();
        let name = top.file_name().into_string().unwrap();
        if top.file_type().unwrap().is_dir() && name != "tmp" && name != "quarantine" {
            for sub in std::fs::read_dir(top.path()).unwrap() {
                entries.push(format!(
                    "{name}/{}",
                    sub.unwrap().file_name().into_string().unwrap()
                ));
            }
        } else if name == "quarantine" {
            let mut stack = vec![top.path()];
            while let Some(dir) = stack.pop() {
                for e in std::fs::read_dir(&dir).unwrap() {
                    let e = e.unwrap();
                    if e.file_type().unwrap().is_dir() {
                        stack.push(e.path());
                    } else {
                        let rel = e.path().strip_prefix(d.path()).unwrap().to_owned();
                        entries.push(rel.to_string_lossy().into_owned());
                    }
                }
            }
        } else {
            entries.push(name);
        }
    }
    for e in &entries {
        let hit = patterns.iter().position(|p| matches(p, e));
        let i = hit.unwrap_or_else(|| panic!("{e} matches no Layout line of DESIGN.md"));
        used[i] = true;
    }
    for (p, u) in patterns.iter().zip(&used) {
        assert!(
            u,
            "the Layout line {p} matched no entry of a full queue: {entries:?}"
        );
    }
}

/// The root layout's names are defined once (`steadq::layout`), and each is the name on a
/// line of DESIGN.md's Layout block, and every Layout line names one of them (a directory
/// with a trailing `/`); the bucket names follow `<bbbb16>` as the block says.
#[test]
fn the_layout_constants_are_the_layout_block() {
    let lines = design_block("## Layout");
    let entry = |l: &str| -> String {
        let path = l.split_whitespace().next().unwrap_or("");
        let rest = path.strip_prefix("<root>/").expect("a <root>/ line");
        rest.split(['/', '<']).next().unwrap_or("").to_string()
    };
    let documented: std::collections::BTreeSet<String> = lines.iter().map(|l| entry(l)).collect();
    // `evidence.<hex16>.log` is rotated evidence, the one root name that is a pattern.
    let mut named: std::collections::BTreeSet<String> =
        layout::ROOT_ENTRIES.iter().map(|n| n.to_string()).collect();
    named.insert("evidence.".into());
    // `prio/` exists from version 3 on (ROOT_ENTRIES holds the names of every version).
    named.insert(layout::PRIO_DIR.into());
    assert_eq!(documented, named);
    for (dir, constant) in [
        ("tmp/", layout::TMP_DIR),
        ("ready/<ss>/", layout::READY_DIR),
        ("delayed/<bbbb16>/", layout::DELAYED_DIR),
        ("dead/<bbbb16>/", layout::DEAD_DIR),
        ("receipts/<ss>/", layout::RECEIPTS_DIR),
        ("keys/<key64>", layout::KEYS_DIR),
    ] {
        let line = format!("<root>/{dir}");
        assert!(
            lines.iter().any(|l| l.starts_with(&line)),
            "DESIGN.md lacks {line}"
        );
        assert!(dir.starts_with(constant), "{dir} vs {constant}");
    }
    let b = layout::bucket_name(7 * layout::DEAD_BUCKET_NS + 1, layout::DEAD_BUCKET_NS);
    assert_eq!((b.len(), b.as_str()), (16, "0000000000000007"));
    assert!(lines
        .iter()
        .any(|l| l.starts_with("<root>/dead/<bbbb16>/") && l.contains("/ 86400 s")));
}
