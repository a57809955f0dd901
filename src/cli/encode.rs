//! Output encoders: text, JSON and Prometheus. Pure functions from values to strings, so
//! each format is unit-tested without a queue.

use super::fixed;
use std::fmt::Write;
use steadq::{Kind, State, Status};

/// State names in `status` order.
pub const STATE_NAMES: [&str; 6] = ["ready", "leased", "delayed", "dead", "acked", "waiting"];

/// What `status` prints about one queue besides its counts.
pub struct QueueLabel<'a> {
    /// The queue directory as the user gave it.
    pub dir: &'a str,
    /// The queue id (from its identity file).
    pub id: u128,
}

/// A JSON string literal (RFC 8259: quote, backslash and control characters escaped; DEL
/// and the C1 controls too, which RFC 8259 allows raw but a terminal may act on).
pub fn json_string(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if c.is_control() => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// Lowercase hex of a digest (64 characters for SHA-256).
#[cfg(not(feature = "appliance"))]
pub fn hex(d: &[u8]) -> String {
    d.iter()
        .fold(String::with_capacity(d.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// An age or span for people: `42s`, `17m`, `5h`, `3d` (rounded down).
pub fn fmt_age(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// The CLI's name of a state (also the `--state` values).
pub fn state_name(s: State) -> &'static str {
    match s {
        State::Ready => "ready",
        State::Leased => "leased",
        State::Delayed => "delayed",
        State::Dead => "dead",
        State::Acked => "acked",
        State::Waiting => "waiting",
    }
}

fn counts(s: &Status) -> [u64; 6] {
    [s.ready, s.leased, s.delayed, s.dead, s.acked, s.waiting]
}

fn bytes(s: &Status) -> [u64; 6] {
    let b = &s.bytes;
    [b.ready, b.leased, b.delayed, b.dead, b.acked, b.waiting]
}

/// `status --json`: one line, an object with counts, bytes per state and the oldest ready age.
pub fn status_json(q: &QueueLabel, s: &Status) -> String {
    let mut o = format!(
        "{{\"queue\":{},\"queue_id\":\"{:032x}\"",
        json_string(q.dir),
        q.id
    );
    for (n, c) in STATE_NAMES.iter().zip(counts(s)) {
        let _ = write!(o, ",\"{n}\":{c}");
    }
    let _ = write!(
        o,
        ",\"expired_leases\":{},\"foreign\":{},\"unreadable_shards\":{},\"unreadable_dirs\":[{}],\"bytes\":",
        s.expired_leases,
        s.foreign,
        s.unreadable_shards,
        s.unreadable_dirs
            .iter()
            .map(|d| json_string(d))
            .collect::<Vec<_>>()
            .join(",")
    );
    if s.bytes_counted {
        let bytes: Vec<String> = STATE_NAMES
            .iter()
            .zip(bytes(s))
            .map(|(n, b)| format!("\"{n}\":{b}"))
            .collect();
        o += &format!("{{{}}}", bytes.join(","));
    } else {
        o += "null";
    }
    let age = s
        .oldest_ready_age
        .map_or("null".into(), |d| fixed::secs(d.as_nanos(), 3));
    let _ = write!(o, ",\"oldest_ready_age_seconds\":{age}");
    let lim = |v: Option<u64>| v.map_or("null".into(), |v| v.to_string());
    let cap_bytes = lim(Some(s.capacity_bytes()).filter(|_| s.bytes_counted));
    let _ = write!(
        o,
        ",\"capacity\":{{\"jobs\":{},\"bytes\":{},\"max_jobs\":{},\"max_bytes\":{}}},\"live_keys\":{}",
        s.capacity_jobs(),
        cap_bytes,
        lim(s.limits.max_jobs),
        lim(s.limits.max_bytes),
        s.live_keys
    );
    // Ready jobs per priority: index = level (0..=7, 7 claimed first).
    let by: Vec<String> = s.ready_by_priority.iter().map(u64::to_string).collect();
    let _ = write!(o, ",\"ready_by_priority\":[{}]", by.join(","));
    // Per group: ready and leased jobs, the limit (null: none, or not known when
    // limit_unknown: a damaged limits file) and the slots held.
    let groups: Vec<String> = s
        .groups
        .iter()
        .map(|u| {
            format!(
                "{{\"group\":\"{}\",\"ready\":{},\"leased\":{},\"max_leased\":{},\"limit_unknown\":{},\"slots\":{}}}",
                u.group,
                u.ready,
                u.leased,
                lim(u.max_leased.map(u64::from)),
                u.limit_unknown,
                u.slots
            )
        })
        .collect();
    let _ = write!(o, ",\"groups\":[{}]", groups.join(","));
    for (n, v) in totals(s) {
        let _ = write!(o, ",\"{n}\":{}", lim(v));
    }
    let void = s.barriers_voided_by.as_deref();
    let _ = write!(
        o,
        ",\"barriers_voided_by\":{}",
        void.map_or("null".into(), json_string)
    );
    o.push('}');
    o
}

/// The totals that only go up, by their `status --json` names (`None`: `steadq.counts`
/// could not be read).
fn totals(s: &Status) -> [(&'static str, Option<u64>); 2] {
    [("acked_total", s.acked_total), ("dead_total", s.dead_total)]
}

/// `status --prometheus`: the text exposition format for node_exporter's textfile collector.
pub fn status_prometheus(q: &QueueLabel, s: &Status) -> String {
    // Label values escape backslash, quote and newline (Prometheus exposition format).
    let ql = q
        .dir
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    let mut o = String::new();
    let per_state = |vals: [u64; 6]| -> Vec<(Option<&str>, String)> {
        STATE_NAMES
            .iter()
            .zip(vals)
            .map(|(n, v)| (Some(*n), v.to_string()))
            .collect()
    };
    let jobs = per_state(counts(s));
    gauge(&mut o, &ql, "steadq_jobs", "Jobs in each state.", &jobs);
    if s.bytes_counted {
        let bytes = per_state(bytes(s));
        let help = "Bytes of job files in each state.";
        gauge(&mut o, &ql, "steadq_bytes", help, &bytes);
    }
    health_gauges(&mut o, &ql, s);
    capacity_gauges(&mut o, &ql, s);
    ready_by_priority_gauge(&mut o, &ql, s);
    group_gauges(&mut o, &ql, s);
    for (n, v) in totals(s) {
        if let Some(v) = v {
            let _ = writeln!(
                o,
                "# HELP steadq_{n} Jobs ever {}, kept across compaction, requeue and purge.\n# TYPE steadq_{n} counter\nsteadq_{n}{{queue=\"{ql}\"}} {v}",
                &n[..n.len() - 6]
            );
        }
    }
    o
}

/// One gauge of [`status_prometheus`]: its HELP and TYPE lines, then a row per value, with a
/// `state` label where the row names one.
fn gauge(o: &mut String, ql: &str, name: &str, help: &str, rows: &[(Option<&str>, String)]) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
    for (state, v) in rows {
        match state {
            Some(st) => {
                let _ = writeln!(o, "{name}{{queue=\"{ql}\",state=\"{st}\"}} {v}");
            }
            None => {
                let _ = writeln!(o, "{name}{{queue=\"{ql}\"}} {v}");
            }
        }
    }
}

/// The gauges of [`status_prometheus`] that say what needs a look: expired leases, foreign
/// entries, unreadable directories, the oldest ready job's age.
fn health_gauges(o: &mut String, ql: &str, s: &Status) {
    let one = |v: String| [(None, v)];
    gauge(
        o,
        ql,
        "steadq_expired_leases",
        "Leases past their deadline, not yet recovered.",
        &one(s.expired_leases.to_string()),
    );
    gauge(
        o,
        ql,
        "steadq_foreign_entries",
        "Entries that are not valid jobs (see steadq fsck).",
        &one(s.foreign.to_string()),
    );
    gauge(
        o,
        ql,
        "steadq_unreadable_shards",
        "Ready shards this user cannot read; their jobs are not counted or claimed.",
        &one(s.unreadable_shards.to_string()),
    );
    gauge(
        o,
        ql,
        "steadq_unreadable_dirs",
        "Job directories this user cannot read (shards, delayed/, dead/, buckets); their jobs are not counted.",
        &one(s.unreadable_dirs.len().to_string()),
    );
    gauge(
        o,
        ql,
        "steadq_barriers_voided",
        "1 when the queue's filesystem is mounted with an option under which no fsync is durable (steadq status names it).",
        &one(u8::from(s.barriers_voided_by.is_some()).to_string()),
    );
    let age = fixed::secs(s.oldest_ready_age.unwrap_or_default().as_nanos(), 3);
    gauge(
        o,
        ql,
        "steadq_oldest_ready_age_seconds",
        "Age of the oldest ready job (0 when none).",
        &one(age),
    );
}

/// The capacity limits (only those set) and live keys gauges of [`status_prometheus`].
fn capacity_gauges(o: &mut String, ql: &str, s: &Status) {
    if let Some(m) = s.limits.max_jobs {
        let help = "Capacity limit on ready + leased + delayed + waiting jobs.";
        gauge(
            o,
            ql,
            "steadq_capacity_max_jobs",
            help,
            &[(None, m.to_string())],
        );
    }
    if let Some(m) = s.limits.max_bytes {
        let help = "Capacity limit on bytes of ready + leased + delayed + waiting jobs.";
        gauge(
            o,
            ql,
            "steadq_capacity_max_bytes",
            help,
            &[(None, m.to_string())],
        );
    }
    let keys = [(None, s.live_keys.to_string())];
    gauge(o, ql, "steadq_live_keys", "Live idempotency keys.", &keys);
}

/// The per-group gauges of [`status_prometheus`] (none without groups): ready and leased
/// jobs, and the limit of the groups that have one.
fn group_gauges(o: &mut String, ql: &str, s: &Status) {
    if s.groups.is_empty() {
        return;
    }
    let rows = |f: &dyn Fn(&steadq::GroupUse) -> Option<u64>| -> Vec<String> {
        s.groups
            .iter()
            .filter_map(|u| f(u).map(|v| format!("{{queue=\"{ql}\",group=\"{}\"}} {v}", u.group)))
            .collect()
    };
    for (name, help, f) in [
        (
            "steadq_group_ready",
            "Ready jobs per group.",
            &(|u: &steadq::GroupUse| Some(u.ready)) as &dyn Fn(&steadq::GroupUse) -> Option<u64>,
        ),
        (
            "steadq_group_leased",
            "Leased jobs per group (live leases).",
            &|u| Some(u.leased),
        ),
        (
            "steadq_group_max_leased",
            "Group limit: most jobs of the group leased at once.",
            &|u| u.max_leased.map(u64::from),
        ),
    ] {
        let rows = rows(f);
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
        for r in rows {
            let _ = writeln!(o, "{name}{r}");
        }
    }
}

/// The `steadq_ready_by_priority` gauge of [`status_prometheus`]: one row per level, `ql` the
/// escaped queue label.
fn ready_by_priority_gauge(o: &mut String, ql: &str, s: &Status) {
    let name = "steadq_ready_by_priority";
    let _ = writeln!(
        o,
        "# HELP {name} Ready jobs per priority level (7 is claimed first).\n# TYPE {name} gauge"
    );
    for (p, n) in s.ready_by_priority.iter().enumerate() {
        let _ = writeln!(o, "{name}{{queue=\"{ql}\",priority=\"{p}\"}} {n}");
    }
}

/// `status`'s ready depth per priority level (`by[level]` ready jobs), highest level first
/// as `level:count`, or `None` while every ready job is at the default level (3). Shared by
/// local and `s3://` queues.
pub(super) fn ready_by_priority(by: &[u64]) -> Option<String> {
    let default = usize::from(steadq::DEFAULT_PRIORITY);
    if !by.iter().enumerate().any(|(p, n)| p != default && *n > 0) {
        return None;
    }
    let levels: Vec<String> = (0..by.len())
        .rev()
        .filter(|&p| by[p] > 0)
        .map(|p| format!("{p}:{}", by[p]))
        .collect();
    Some(levels.join(" "))
}

/// How a group's limit reads in `status` and `top`: `of 2`, `no limit`, or, with a damaged
/// limits file, `limit unknown: steadq.limits is damaged`.
pub fn group_limit(u: &steadq::GroupUse) -> String {
    match (u.max_leased, u.limit_unknown) {
        (Some(n), _) => format!("of {n}"),
        (None, false) => "no limit".into(),
        (None, true) => "limit unknown: steadq.limits is damaged".into(),
    }
}

/// [`status_text`]'s line per group: leased of its limit, and ready.
fn group_lines(o: &mut String, s: &Status) {
    for u in &s.groups {
        let max = group_limit(u);
        let _ = writeln!(
            o,
            "group    {:<16} {} leased ({max}), {} ready",
            u.group.as_str(),
            u.leased,
            u.ready
        );
    }
}

/// `status` for people: a line per state, expired leases, foreign entries, oldest ready job.
pub fn status_text(q: &QueueLabel, s: &Status) -> String {
    let mut o = format!("queue    {} ({:032x})\n", q.dir, q.id);
    for ((n, c), b) in STATE_NAMES.iter().zip(counts(s)).zip(bytes(s)) {
        if s.bytes_counted {
            let _ = writeln!(o, "{n:<8} {c:>8}  {b:>12} bytes");
        } else {
            let _ = writeln!(o, "{n:<8} {c:>8}");
        }
    }
    // The hint only when there is something to recover.
    match s.expired_leases {
        0 => {
            let _ = writeln!(o, "expired  {:>8}", 0);
        }
        n => {
            let _ = writeln!(
                o,
                "expired  {n:>8}  leases past their deadline (run `steadq recover`)"
            );
        }
    }
    if s.foreign > 0 {
        let _ = writeln!(
            o,
            "foreign  {:>8}  entries that are not jobs (run `steadq fsck`)",
            s.foreign
        );
    }
    if s.unreadable_shards > 0 {
        let _ = writeln!(
            o,
            "unread   {:>8}  ready shards this user cannot read: their jobs are not counted \
             or claimed",
            s.unreadable_shards
        );
    }
    for d in &s.unreadable_dirs {
        let _ = writeln!(
            o,
            "unread   {d}  this user cannot read this directory, or it is not one (fsck says \
             which): its jobs are not counted"
        );
    }
    if !s.limits.is_unlimited() {
        let lim = |v: Option<u64>| v.map_or("no limit".into(), |v| format!("limit {v}"));
        let _ = write!(
            o,
            "capacity {:>8}  jobs ({})",
            s.capacity_jobs(),
            lim(s.limits.max_jobs)
        );
        if s.bytes_counted {
            let _ = write!(
                o,
                ", {} bytes ({})",
                s.capacity_bytes(),
                lim(s.limits.max_bytes)
            );
        }
        o.push('\n');
    }
    if s.live_keys > 0 {
        let _ = writeln!(o, "keys     {:>8}  live idempotency keys", s.live_keys);
    }
    if let Some(levels) = ready_by_priority(&s.ready_by_priority) {
        let _ = writeln!(o, "ready by priority  {levels}");
    }
    group_lines(&mut o, s);
    if let Some(void) = &s.barriers_voided_by {
        let _ = writeln!(
            o,
            "warning  the filesystem is {void}: {}",
            steadq::BARRIERS_VOIDED
        );
    }
    let _ = writeln!(
        o,
        "oldest ready job: {}",
        s.oldest_ready_age
            .map_or("-".into(), |d| fmt_age(d.as_nanos() as u64))
    );
    o
}

/// The clocks a description is relative to (from `Queue::clock()`).
pub struct Now {
    /// Wall clock, ns since the Unix epoch.
    pub wall_ns: u64,
    /// Boot clock (CLOCK_BOOTTIME), ns.
    pub boot_ns: u64,
    /// This boot's id (see `Clock::boot_id`).
    pub boot_id: u128,
}

/// What `list` and `show` say about a job's name beyond its state: deadlines, reasons.
pub fn describe(now: &Now, k: &Kind) -> String {
    match k {
        Kind::Ready => String::new(),
        Kind::Leased(l) if l.boot_id != now.boot_id => {
            "lease from an earlier boot (expired)".into()
        }
        Kind::Leased(l) if l.boot_deadline_ns <= now.boot_ns => format!(
            "lease expired {} ago",
            fmt_age(now.boot_ns - l.boot_deadline_ns)
        ),
        Kind::Leased(l) => format!(
            "lease expires in {}",
            fmt_age(l.boot_deadline_ns - now.boot_ns)
        ),
        k @ Kind::Delayed { .. } if steadq::delay_due(k, now.boot_id, now.boot_ns, now.wall_ns) => {
            "due now".into()
        }
        k @ Kind::Delayed { .. } => {
            let due = steadq::due_wall_ns(k, now.boot_id, now.boot_ns, now.wall_ns);
            format!("due in {}", fmt_age(due.saturating_sub(now.wall_ns)))
        }
        Kind::Dead { reason } => format!("reason {reason}"),
        Kind::Receipt { token, .. } => format!("token {token:032x}"),
    }
}

/// A job as one line of JSON (`list --json`, `claim --json`): its id, state, attempt,
/// max attempts, priority, generation, deadline (unix seconds: a lease's expiry, a delayed
/// job's due time, a receipt's ack; `null` otherwise or for a lease from an earlier boot,
/// which has expired), reason (dead jobs), path relative to the queue root and, when given,
/// the lease handle.
pub fn job_json(
    now: &Now,
    n: &steadq::JobName,
    state: State,
    path: &str,
    handle: Option<&str>,
) -> String {
    let deadline = match &n.kind {
        Kind::Leased(l) if l.boot_id == now.boot_id => {
            Some(i128::from(now.wall_ns) + i128::from(l.boot_deadline_ns) - i128::from(now.boot_ns))
        }
        k @ Kind::Delayed { .. } => {
            Some(steadq::due_wall_ns(k, now.boot_id, now.boot_ns, now.wall_ns).into())
        }
        Kind::Receipt { acked_ns, .. } => acked_ns.map(i128::from),
        _ => None,
    };
    let deadline = deadline.map_or("null".into(), |d| fixed::secs(d.max(0) as u128, 3));
    let reason = match &n.kind {
        Kind::Dead { reason } => json_string(&reason.to_string()),
        _ => "null".into(),
    };
    let mut o = format!(
        "{{\"id\":\"{}\",\"state\":\"{}\",\"attempt\":{},\"max\":{},\"priority\":{},\"gen\":{},\"deadline\":{deadline},\"reason\":{reason},\"path\":{}",
        n.id,
        state_name(state),
        n.attempt,
        n.max_attempts,
        n.priority,
        n.generation,
        json_string(path)
    );
    if let Some(g) = n.group {
        // Only for a job of a group: other jobs' lines are as they were.
        let _ = write!(o, ",\"group\":\"{g}\"");
    }
    if let Some(h) = handle {
        let _ = write!(o, ",\"handle\":{}", json_string(h));
    }
    o += "}\n";
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Status {
        Status {
            ready: 3,
            leased: 1,
            delayed: 2,
            dead: 0,
            acked: 7,
            waiting: 5,
            bytes: steadq::StateBytes {
                ready: 300,
                leased: 100,
                delayed: 200,
                dead: 0,
                acked: 700,
                waiting: 500,
            },
            expired_leases: 1,
            foreign: 2,
            oldest_ready_age: Some(std::time::Duration::from_millis(1500)),
            limits: steadq::Limits {
                max_jobs: Some(10),
                max_bytes: None,
            },
            live_keys: 4,
            unreadable_shards: 1,
            unreadable_dirs: vec!["ready/01".into(), "dead/00000000000004d2".into()],
            ready_by_priority: [0, 0, 0, 2, 0, 0, 0, 1],
            acked_total: Some(9),
            dead_total: None,
            bytes_counted: true,
            barriers_voided_by: Some("f2fs mounted nobarrier".into()),
            groups: vec![steadq::GroupUse {
                group: steadq::GroupName::new("ffmpeg").unwrap(),
                ready: 5,
                leased: 2,
                max_leased: Some(2),
                limit_unknown: false,
                slots: 2,
            }],
        }
    }

    const Q: QueueLabel = QueueLabel {
        dir: "/var/lib/\"jobs\"",
        id: 0xab,
    };

    #[test]
    fn json_strings_escape_controls() {
        assert_eq!(json_string("a\"b\\c\u{1}\n"), r#""a\"b\\c\u0001\u000a""#);
        assert_eq!(json_string("\u{7f}\u{9b}é"), r#""\u007f\u009bé""#);
    }

    #[test]
    fn status_as_json() {
        assert_eq!(
            status_json(&Q, &sample()),
            concat!(
                r#"{"queue":"/var/lib/\"jobs\"","queue_id":"000000000000000000000000000000ab","#,
                r#""ready":3,"leased":1,"delayed":2,"dead":0,"acked":7,"waiting":5,"expired_leases":1,"#,
                r#""foreign":2,"unreadable_shards":1,"unreadable_dirs":["ready/01","dead/00000000000004d2"],"#,
                r#""bytes":{"ready":300,"leased":100,"delayed":200,"dead":0,"acked":700,"waiting":500},"#,
                r#""oldest_ready_age_seconds":1.500,"#,
                r#""capacity":{"jobs":11,"bytes":1100,"max_jobs":10,"max_bytes":null},"live_keys":4,"#,
                r#""ready_by_priority":[0,0,0,2,0,0,0,1],"#,
                r#""groups":[{"group":"ffmpeg","ready":5,"leased":2,"max_leased":2,"limit_unknown":false,"slots":2}],"#,
                r#""acked_total":9,"dead_total":null,"barriers_voided_by":"f2fs mounted nobarrier"}"#
            )
        );
        let none = Status::default();
        assert!(status_json(&Q, &none).contains(r#""oldest_ready_age_seconds":null,"#));
        assert!(status_json(&Q, &none).ends_with(r#","barriers_voided_by":null}"#));
    }

    #[test]
    fn status_as_prometheus() {
        let p = status_prometheus(&Q, &sample());
        assert!(p.contains("# TYPE steadq_jobs gauge\n"), "{p}");
        assert!(p.contains("steadq_jobs{queue=\"/var/lib/\\\"jobs\\\"\",state=\"acked\"} 7\n"));
        assert!(
            p.contains("steadq_barriers_voided{queue=\"/var/lib/\\\"jobs\\\"\"} 1\n"),
            "{p}"
        );
        assert!(p.contains("steadq_jobs{queue=\"/var/lib/\\\"jobs\\\"\",state=\"waiting\"} 5\n"));
        assert!(p.contains("steadq_bytes{queue=\"/var/lib/\\\"jobs\\\"\",state=\"ready\"} 300\n"));
        assert!(p.contains("steadq_foreign_entries{queue=\"/var/lib/\\\"jobs\\\"\"} 2\n"));
        assert!(
            p.contains("steadq_oldest_ready_age_seconds{queue=\"/var/lib/\\\"jobs\\\"\"} 1.500\n")
        );
        assert!(p.contains("steadq_capacity_max_jobs{queue=\"/var/lib/\\\"jobs\\\"\"} 10\n"));
        assert!(p.contains("steadq_live_keys{queue=\"/var/lib/\\\"jobs\\\"\"} 4\n"));
        assert!(p.contains(
            "steadq_ready_by_priority{queue=\"/var/lib/\\\"jobs\\\"\",priority=\"7\"} 1\n"
        ));
        assert!(
            p.contains("steadq_group_leased{queue=\"/var/lib/\\\"jobs\\\"\",group=\"ffmpeg\"} 2\n")
        );
        assert!(p.contains(
            "steadq_group_max_leased{queue=\"/var/lib/\\\"jobs\\\"\",group=\"ffmpeg\"} 2\n"
        ));
        assert!(p.contains(",group=\"ffmpeg\"} 2\n# HELP steadq_acked_total"));
        assert!(!p.contains("max_bytes"));
        assert!(p.contains("steadq_unreadable_shards{queue=\"/var/lib/\\\"jobs\\\"\"} 1\n"));
        assert!(p.contains("steadq_unreadable_dirs{queue=\"/var/lib/\\\"jobs\\\"\"} 2\n"));
        assert!(p.contains(
            "# HELP steadq_acked_total Jobs ever acked, kept across compaction, requeue and purge.\n# TYPE steadq_acked_total counter\nsteadq_acked_total{queue=\"/var/lib/\\\"jobs\\\"\"} 9\n"
        ));
        assert!(!p.contains("dead_total"));
        assert_eq!(p.lines().filter(|l| l.starts_with("# HELP")).count(), 15);
    }

    #[test]
    fn status_as_text() {
        let t = status_text(&Q, &sample());
        assert!(
            t.contains("\nacked           7           700 bytes\n"),
            "{t}"
        );
        assert!(t.contains("foreign         2"));
        assert!(t.ends_with("oldest ready job: 1s\n"));
        assert!(
            t.contains("\nwarning  the filesystem is f2fs mounted nobarrier: its fsyncs are no"),
            "{t}"
        );
        assert!(
            t.contains("\ncapacity       11  jobs (limit 10), 1100 bytes (no limit)\n"),
            "{t}"
        );
        assert!(t.contains("\nkeys            4  live idempotency keys\n"));
        assert!(t.contains("\nready by priority  7:1 3:2\n"), "{t}");
        assert!(
            t.contains("\nunread   dead/00000000000004d2  this user cannot read"),
            "{t}"
        );
        let quiet = status_text(&Q, &Status::default());
        assert!(!quiet.contains("foreign") && !quiet.contains("capacity"));
        assert!(!quiet.contains("priority") && !quiet.contains("warning"));
        assert!(quiet.ends_with("oldest ready job: -\n"));
    }

    #[test]
    fn status_without_bytes_says_so_in_every_format() {
        let s = Status {
            bytes_counted: false,
            ..sample()
        };
        let t = status_text(&Q, &s);
        assert!(t.contains("\nacked           7\n"), "{t}");
        assert!(!t.contains("bytes"), "{t}");
        assert!(t.contains("\ncapacity       11  jobs (limit 10)\n"), "{t}");
        let j = status_json(&Q, &s);
        assert!(
            j.contains(r#""foreign":2,"unreadable_shards":1,"unreadable_dirs":["ready/01","dead/00000000000004d2"],"bytes":null,"oldest"#),
            "{j}"
        );
        assert!(j.contains(r#""capacity":{"jobs":11,"bytes":null,"#), "{j}");
        let p = status_prometheus(&Q, &s);
        assert!(
            !p.contains("steadq_bytes") && p.contains("steadq_jobs{"),
            "{p}"
        );
    }

    #[test]
    fn ages_and_descriptions() {
        assert_eq!(fmt_age(119_999_999_999), "119s");
        assert_eq!(fmt_age(120_000_000_000), "2m");
        assert_eq!(fmt_age(7_200_000_000_000), "2h");
        assert_eq!(fmt_age(172_800_000_000_000), "2d");
        let now = Now {
            wall_ns: 1_000_000_000_000,
            boot_ns: 50_000_000_000,
            boot_id: 9,
        };
        let due = Kind::Delayed {
            not_before_ns: 1_000_000_000_000 + 90_000_000_000,
            boot: None,
        };
        assert_eq!(describe(&now, &due), "due in 90s");
        // On this boot the boot clock says how long is left, whatever the wall clock says.
        let boot_due = Kind::Delayed {
            not_before_ns: 1,
            boot: Some(steadq::BootDue {
                boot_id: 9,
                not_before_boot_ns: 50_000_000_000 + 30_000_000_000,
            }),
        };
        assert_eq!(describe(&now, &boot_due), "due in 30s");
        assert_eq!(describe(&now, &Kind::Ready), "");
    }
}
