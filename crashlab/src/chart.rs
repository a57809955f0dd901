//! The power-cut rig's outputs: one row per cycle, as a CSV, a summary and an SVG chart
//! (confirmed operations per cycle as bars, time to recover at boot as a line).

use std::fmt::Write as _;

/// One cycle: a boot, its verification and the cut that ended it (none for the last boot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    /// 0 for the first boot on a fresh disk; boot N follows cut N.
    pub boot: u32,
    /// Filesystem mount at boot (the kernel's journal replay / roll-forward), ms.
    pub mount_ms: u64,
    /// `steadq` recovery at boot, ms.
    pub recover_ms: u64,
    /// Jobs recovery moved.
    pub moved: u64,
    /// Job files the device reported.
    pub jobs: u64,
    /// Violations found in this boot's report.
    pub violations: u64,
    /// Operations confirmed during this boot.
    pub confirmed: u64,
    /// When the power was cut, ms after the workload started (0: no cut).
    pub cut_ms: u64,
    /// "time", "ack" (right after a confirmed ack) or "" (no cut).
    pub cut_kind: String,
    /// Writes after the last flush, and how many of them the disk kept.
    pub unflushed: u64,
    pub kept: u64,
    /// Entries in the boot's write log (writes and flushes).
    pub log_entries: u64,
}

impl Row {
    /// Time to recover at boot: mount plus steadq recovery.
    pub fn recovery_ms(&self) -> u64 {
        self.mount_ms + self.recover_ms
    }
}

pub const CSV_HEADER: &str =
    "boot,mount_ms,recover_ms,recovery_ms,moved,jobs,violations,confirmed,cut_ms,cut_kind,unflushed_writes,kept_writes";

pub fn csv(rows: &[Row]) -> String {
    let mut s = format!("{CSV_HEADER}\n");
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{}",
            r.boot,
            r.mount_ms,
            r.recover_ms,
            r.recovery_ms(),
            r.moved,
            r.jobs,
            r.violations,
            r.confirmed,
            r.cut_ms,
            r.cut_kind,
            r.unflushed,
            r.kept
        );
    }
    s
}

/// Median and maximum of the recovery times of boots after a cut (boot 0 recovers nothing).
pub fn recovery(rows: &[Row]) -> (u64, u64) {
    let mut v: Vec<u64> = rows
        .iter()
        .filter(|r| r.boot > 0)
        .map(Row::recovery_ms)
        .collect();
    if v.is_empty() {
        return (0, 0);
    }
    v.sort_unstable();
    (v[v.len() / 2], v[v.len() - 1])
}

pub fn svg(title: &str, rows: &[Row]) -> String {
    let (w, h, l, r, t, b) = (760.0, 300.0, 56.0, 56.0, 36.0, 40.0);
    let (pw, ph) = (w - l - r, h - t - b);
    let n = rows.len().max(1) as f64;
    let max_ops = rows.iter().map(|r| r.confirmed).max().unwrap_or(0).max(1) as f64;
    let max_ms = rows.iter().map(Row::recovery_ms).max().unwrap_or(0).max(1) as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">
<rect width="{w}" height="{h}" fill="white"/>
<text x="{cx}" y="16" font-size="13" text-anchor="middle">{title}</text>
<line x1="{l}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="black"/>
<line x1="{l}" y1="{t}" x2="{l}" y2="{y0}" stroke="black"/>
<line x1="{x1}" y1="{t}" x2="{x1}" y2="{y0}" stroke="black"/>
<text x="{l}" y="{ty}" text-anchor="middle" fill="#4a78b0">{max_ops}</text>
<text x="{l}" y="{ly}" text-anchor="middle" fill="#4a78b0">confirmed ops</text>
<text x="{x1}" y="{ty}" text-anchor="middle" fill="#c0392b">{max_ms} ms</text>
<text x="{x1}" y="{ly}" text-anchor="middle" fill="#c0392b">recovery at boot</text>
<text x="{cx}" y="{by}" text-anchor="middle">boot (each after one power cut)</text>
"##,
        y0 = t + ph,
        x1 = l + pw,
        ty = t - 6.0,
        ly = t - 18.0,
        cx = l + pw / 2.0,
        by = h - 8.0,
    );
    let bw = pw / n;
    let mut pts = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let x = l + bw * i as f64;
        let bh = ph * row.confirmed as f64 / max_ops;
        let fill = if row.violations > 0 {
            "#e67e22"
        } else {
            "#9dbde0"
        };
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{fill}"><title>boot {}: {} confirmed, {} ms recovery, {} violations</title></rect>"#,
            x + bw * 0.1,
            t + ph - bh,
            bw * 0.8,
            row.boot,
            row.confirmed,
            row.recovery_ms(),
            row.violations
        );
        pts.push(format!(
            "{:.1},{:.1}",
            x + bw / 2.0,
            t + ph - ph * row.recovery_ms() as f64 / max_ms
        ));
        if rows.len() <= 40 || i % (rows.len() / 20).max(1) == 0 {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x + bw / 2.0,
                t + ph + 14.0,
                row.boot
            );
        }
    }
    let _ = writeln!(
        s,
        r##"<polyline points="{}" fill="none" stroke="#c0392b" stroke-width="2"/>"##,
        pts.join(" ")
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Row> {
        (0..5)
            .map(|i| Row {
                boot: i,
                mount_ms: 100 + u64::from(i) * 10,
                recover_ms: 20,
                confirmed: 50 + u64::from(i),
                ..Row::default()
            })
            .collect()
    }

    #[test]
    fn csv_has_a_header_and_a_row_per_boot() {
        let c = csv(&rows());
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(lines.len(), 6);
        assert_eq!(lines[0], CSV_HEADER);
        assert_eq!(lines[2], "1,110,20,130,0,0,0,51,0,,0,0");
    }

    #[test]
    fn recovery_median_and_max_skip_the_first_boot() {
        assert_eq!(recovery(&rows()), (150, 160));
        assert_eq!(recovery(&rows()[..1]), (0, 0));
    }

    #[test]
    fn the_chart_has_a_bar_per_boot_and_one_line() {
        let s = svg("ext4", &rows());
        assert_eq!(s.matches("<rect x=").count(), 5);
        assert_eq!(s.matches("<polyline").count(), 1);
        assert!(s.ends_with("</svg>\n"));
    }
}
