//! Medians, the printed table with the ratios the issue asks for, the TSV and the SVG chart.

use crate::run::Run;
use crate::Case;
use std::fmt::Write as _;

/// The run with the median rate.
pub fn median(mut runs: Vec<Run>) -> Run {
    runs.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
    runs.swap_remove(runs.len() / 2)
}

/// The index of the case `k` (system, mode, workers).
fn find(cases: &[Case], k: &Key) -> Option<usize> {
    cases
        .iter()
        .position(|c| c.system == k.0 && c.mode == k.1 && c.workers == k.2)
}

/// A case by system, mode and workers.
type Key = (&'static str, &'static str, usize);

/// The figures of the target table: each a pair of cases of this run.
const PAIRS: [(&str, Key, Key); 21] = [
    (
        "strict 1w / bare strict 1w",
        ("steadq", "strict", 1),
        ("bare", "strict", 1),
    ),
    (
        "strict 1w / Redis always 1c",
        ("steadq", "strict", 1),
        ("redis", "always", 1),
    ),
    (
        "strict 1w / SQLite FULL 1c",
        ("steadq", "strict", 1),
        ("sqlite", "full", 1),
    ),
    (
        "strict 8w / bare strict 8w",
        ("steadq", "strict", 8),
        ("bare", "strict", 8),
    ),
    (
        "strict 8w / SQLite FULL 8c",
        ("steadq", "strict", 8),
        ("sqlite", "full", 8),
    ),
    (
        "strict 8w / Redis always 8c",
        ("steadq", "strict", 8),
        ("redis", "always", 8),
    ),
    (
        "batched 1w / bare syncfs per batch",
        ("steadq", "batched", 1),
        ("bare", "syncfs-batch", 1),
    ),
    (
        "batched 1w / bare syncfs per batch step",
        ("steadq", "batched", 1),
        ("bare", "syncfs-steps", 1),
    ),
    (
        "batched 1w / SQLite FULL 1c, per-job txns",
        ("steadq", "batched", 1),
        ("sqlite", "full", 1),
    ),
    (
        "none 1w / bare none 1w",
        ("steadq", "none", 1),
        ("bare", "none", 1),
    ),
    (
        "batched 1w / SQLite FULL 1c, one txn per batch",
        ("steadq", "batched", 1),
        ("sqlite", "full-txn-batch", 1),
    ),
    // The decomposition (opt-in cases): what names and the watch cost the bare loop,
    // and SteadQ beside the bare loop that pays both.
    (
        "bare none+names / bare none",
        ("bare", "none-names", 1),
        ("bare", "none", 1),
    ),
    (
        "bare none+watch / bare none",
        ("bare", "none-watch", 1),
        ("bare", "none", 1),
    ),
    (
        "none 1w / bare none+names+watch",
        ("steadq", "none", 1),
        ("bare", "none-names-watch", 1),
    ),
    // Opt-in: SteadQ strict beside the bare loop with the same three commits a job, and
    // that loop beside Redis (the ceiling of any strict queue with three commits).
    (
        "strict 1w / bare strict-min 1w",
        ("steadq", "strict", 1),
        ("bare", "strict-min", 1),
    ),
    // The same loop with SteadQ's name lengths and eight shards a state: what is left
    // of SteadQ's gap once its on-disk format is paid for.
    (
        "strict 1w / bare strict-min+names+shards",
        ("steadq", "strict", 1),
        ("bare", "strict-min-names-shards", 1),
    ),
    (
        "bare strict-min 1w / Redis always 1c",
        ("bare", "strict-min", 1),
        ("redis", "always", 1),
    ),
    // Opt-in: a worker's step whose ack and next claim share one barrier, beside the
    // same step in Redis (LREM and LMOVE pipelined), and beside the plain lifecycles.
    (
        "strict-next 1w / Redis always-next 1c",
        ("steadq", "strict-next", 1),
        ("redis", "always-next", 1),
    ),
    (
        "strict-next 1w / Redis always 1c",
        ("steadq", "strict-next", 1),
        ("redis", "always", 1),
    ),
    (
        "strict-next 1w / strict 1w",
        ("steadq", "strict-next", 1),
        ("steadq", "strict", 1),
    ),
    // Opt-in: publishing through a named file in tmp/ instead of an O_TMPFILE.
    (
        "strict-named 1w / strict 1w",
        ("steadq", "strict-named", 1),
        ("steadq", "strict", 1),
    ),
];

/// The figures of the wear targets: pairs of cases whose KiB written and flushes per
/// job are compared (the first case's over the second's; below 1 the first writes less).
const WEAR_PAIRS: [(&str, Key, Key); 10] = [
    (
        "strict 1w / SQLite FULL 1c",
        ("steadq", "strict", 1),
        ("sqlite", "full", 1),
    ),
    (
        "strict 1w / Redis always 1c",
        ("steadq", "strict", 1),
        ("redis", "always", 1),
    ),
    (
        "strict 1w / bare strict 1w",
        ("steadq", "strict", 1),
        ("bare", "strict", 1),
    ),
    (
        "strict 8w / SQLite FULL 8c",
        ("steadq", "strict", 8),
        ("sqlite", "full", 8),
    ),
    (
        "strict 8w / Redis always 8c",
        ("steadq", "strict", 8),
        ("redis", "always", 8),
    ),
    (
        "batched 1w / bare syncfs per batch",
        ("steadq", "batched", 1),
        ("bare", "syncfs-batch", 1),
    ),
    (
        "batched 1w / bare syncfs per batch step",
        ("steadq", "batched", 1),
        ("bare", "syncfs-steps", 1),
    ),
    (
        "batched 1w / SQLite FULL 1c, one txn per batch",
        ("steadq", "batched", 1),
        ("sqlite", "full-txn-batch", 1),
    ),
    (
        "none 1w / bare none 1w",
        ("steadq", "none", 1),
        ("bare", "none", 1),
    ),
    (
        "strict-named 1w / strict 1w",
        ("steadq", "strict-named", 1),
        ("steadq", "strict", 1),
    ),
];

/// One wear figure: the ratios of two cases' KiB written and flushes per job (of their
/// median runs), where the device was counted and the second case's figure is not zero.
#[derive(Clone, Debug, PartialEq)]
pub struct Wear {
    pub name: &'static str,
    pub kib: Option<f64>,
    pub flushes: Option<f64>,
}

/// The figures of [`WEAR_PAIRS`] whose two cases ran (`medians[i]`: the median run of
/// `cases[i]`).
pub fn wear(cases: &[Case], medians: &[Run]) -> Vec<Wear> {
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b.filter(|b| *b > 0.0)).map(|(a, b)| a / b);
    WEAR_PAIRS
        .iter()
        .filter_map(|(name, a, b)| {
            let (x, y) = (&medians[find(cases, a)?], &medians[find(cases, b)?]);
            Some(Wear {
                name,
                kib: ratio(x.kib_per_job(), y.kib_per_job()),
                flushes: ratio(x.flushes_per_job(), y.flushes_per_job()),
            })
        })
        .collect()
}

/// The wear figures as TSV: `figure`, `kib_ratio`, `flushes_ratio` (empty where not counted).
pub fn wear_tsv(w: &[Wear]) -> String {
    let mut s = String::from("figure\tkib_ratio\tflushes_ratio\n");
    for x in w {
        let _ = writeln!(s, "{}\t{}\t{}", x.name, cell3(x.kib), cell3(x.flushes));
    }
    s
}

/// A ratio with three decimals, empty where there is none.
fn cell3(x: Option<f64>) -> String {
    x.map_or_else(String::new, |c| format!("{c:.3}"))
}

/// One figure: the ratio of the two cases' medians, and the lowest and highest ratio of
/// the two within one round (the cases of a round run one after the other, so a round's
/// ratio is paired; their spread is the noise a reader should allow the median).
#[derive(Clone, Debug, PartialEq)]
pub struct Ratio {
    pub name: &'static str,
    pub of_medians: f64,
    pub round_min: f64,
    pub round_max: f64,
}

/// The figures of [`pairs`] whose two cases ran, from every round's runs (`rounds[i]`:
/// the runs of `cases[i]`, in round order).
pub fn ratios(cases: &[Case], rounds: &[Vec<Run>]) -> Vec<Ratio> {
    let medians: Vec<Run> = rounds.iter().cloned().map(median).collect();
    PAIRS
        .iter()
        .filter_map(|(name, a, b)| {
            let i = find(cases, a)?;
            let j = find(cases, b)?;
            let paired = rounds[i]
                .iter()
                .zip(&rounds[j])
                .map(|(x, y)| x.rate() / y.rate());
            let (lo, hi) = paired.fold((f64::INFINITY, 0f64), |(l, h), r| (l.min(r), h.max(r)));
            Some(Ratio {
                name,
                of_medians: medians[i].rate() / medians[j].rate(),
                round_min: lo,
                round_max: hi,
            })
        })
        .collect()
}

/// The ratios as TSV: `figure`, `ratio` (of the medians), `round_min`, `round_max`.
pub fn ratios_tsv(r: &[Ratio]) -> String {
    let mut s = String::from("figure\tratio\tround_min\tround_max\n");
    for x in r {
        let _ = writeln!(
            s,
            "{}\t{:.3}\t{:.3}\t{:.3}",
            x.name, x.of_medians, x.round_min, x.round_max
        );
    }
    s
}

/// The table of the median runs, the rate ratios and the wear ratios, to stdout.
pub fn print(
    cases: &[Case],
    runs: &[Run],
    ratios: &[Ratio],
    wear: &[Wear],
    dir: &std::path::Path,
    rounds: usize,
) {
    println!(
        "steadq-bench in {} (median of {rounds} interleaved rounds)",
        dir.display()
    );
    println!(
        "{:<8} {:<23} {:>7} {:>10} {:>10} {:>10} {:>12} {:>12} {:>10}",
        "system",
        "mode",
        "workers",
        "jobs/s",
        "p50 us",
        "p99 us",
        "commits/job",
        "flushes/job",
        "KiB w/job"
    );
    for (c, r) in cases.iter().zip(runs) {
        println!(
            "{:<8} {:<23} {:>7} {:>10.0} {:>10.1} {:>10.1} {:>12} {:>12} {:>10}",
            c.system,
            c.mode,
            c.workers,
            r.rate(),
            r.quantile_us(0.5),
            r.quantile_us(0.99),
            commits_cell(r),
            cell(r.flushes_per_job()),
            cell(r.kib_per_job())
        );
    }
    println!("\nratios (same run: of the medians; lowest-highest of one round's pair):");
    for r in ratios {
        println!(
            "  {:<48} {:>6.2}   ({:.2}-{:.2})",
            r.name, r.of_medians, r.round_min, r.round_max
        );
    }
    if wear.iter().any(|w| w.kib.is_some()) {
        println!("\nper job, of the median runs: KiB written ratio, flushes ratio:");
        for w in wear {
            println!(
                "  {:<48} {:>6}   {:>6}",
                w.name,
                cell(w.kib),
                cell(w.flushes)
            );
        }
    }
}

pub fn tsv(cases: &[Case], runs: &[Run], ratios: &[Ratio]) -> String {
    let mut s = String::from(
        "system\tmode\tworkers\tjobs\tsecs\tjobs_per_s\tp50_us\tp99_us\tcommits_per_job\t\
         flushes_per_job\tkib_written_per_job\n",
    );
    for (c, r) in cases.iter().zip(runs) {
        let _ = writeln!(
            s,
            "{}\t{}\t{}\t{}\t{:.3}\t{:.1}\t{:.1}\t{:.1}\t{}\t{}\t{}",
            c.system,
            c.mode,
            c.workers,
            r.jobs,
            r.secs,
            r.rate(),
            r.quantile_us(0.5),
            r.quantile_us(0.99),
            commits_cell(r).trim_start_matches('-'),
            cell(r.flushes_per_job()).trim_start_matches('-'),
            cell(r.kib_per_job()).trim_start_matches('-')
        );
    }
    for r in ratios {
        let _ = writeln!(s, "ratio\t{}\t\t\t\t{:.3}\t\t\t\t\t", r.name, r.of_medians);
    }
    s
}

/// Journal commits per job with two decimals, `-` where they were not counted.
fn commits_cell(r: &Run) -> String {
    cell(r.commits_per_job())
}

/// A per-job figure with two decimals, `-` where it was not counted.
fn cell(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |c| format!("{c:.2}"))
}

/// A grouped bar chart: one group per (mode, workers), SteadQ beside each peer; log scale.
pub fn svg(cases: &[Case], runs: &[Run]) -> String {
    let colors = [
        ("steadq", "#1f77b4"),
        ("bare", "#7f7f7f"),
        ("sqlite", "#2ca02c"),
        ("redis", "#d62728"),
    ];
    let mut groups: Vec<String> = Vec::new();
    for c in cases {
        let g = group_of(c);
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    let max = runs
        .iter()
        .map(Run::rate)
        .fold(1.0, f64::max)
        .log10()
        .ceil()
        .max(1.0);
    let (gw, h, top, left) = (110.0, 320.0, 30.0, 60.0);
    let width = left + gw * groups.len() as f64 + 20.0;
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{}' font-family='sans-serif' font-size='11'>\n",
        h + top + 60.0
    );
    let _ = writeln!(s, "<text x='{left}' y='18' font-size='13'>jobs/s (log scale) per case; SteadQ beside each peer</text>");
    let y = |v: f64| top + h - (v.max(1.0).log10() / max) * h;
    for e in 0..=max as i32 {
        let yy = y(10f64.powi(e));
        let _ = writeln!(s, "<line x1='{left}' x2='{}' y1='{yy}' y2='{yy}' stroke='#ddd'/><text x='4' y='{}'>1e{e}</text>", width - 20.0, yy + 4.0);
    }
    for (gi, g) in groups.iter().enumerate() {
        let x0 = left + gw * gi as f64;
        let members: Vec<(&Case, &Run)> = cases
            .iter()
            .zip(runs)
            .filter(|(c, _)| &group_of(c) == g)
            .collect();
        let bw = (gw - 20.0) / members.len().max(1) as f64;
        for (k, (c, r)) in members.iter().enumerate() {
            let col = colors
                .iter()
                .find(|(n, _)| *n == c.system)
                .map_or("#000", |x| x.1);
            let (bx, by) = (x0 + 10.0 + bw * k as f64, y(r.rate()));
            let _ = writeln!(s, "<rect x='{bx:.1}' y='{by:.1}' width='{:.1}' height='{:.1}' fill='{col}'><title>{} {} {}w: {:.0} jobs/s</title></rect>", bw - 2.0, top + h - by, c.system, c.mode, c.workers, r.rate());
        }
        let _ = writeln!(
            s,
            "<text x='{}' y='{}' text-anchor='middle'>{g}</text>",
            x0 + gw / 2.0,
            top + h + 16.0
        );
    }
    for (k, (n, col)) in colors.iter().enumerate() {
        let lx = left + 90.0 * k as f64;
        let _ = writeln!(s, "<rect x='{lx}' y='{}' width='10' height='10' fill='{col}'/><text x='{}' y='{}'>{n}</text>", top + h + 32.0, lx + 14.0, top + h + 41.0);
    }
    s.push_str("</svg>\n");
    s
}

fn group_of(c: &Case) -> String {
    match c.mode {
        "strict" | "full" | "always" => format!("strict {}w", c.workers),
        "batched" | "syncfs-batch" | "syncfs-steps" | "full-txn-batch" => "batched 1w".into(),
        _ => "none 1w".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(jobs: usize) -> Run {
        Run {
            jobs,
            secs: 1.0,
            lat: Vec::new(),
            commits: None,
            device: None,
        }
    }

    fn case(system: &'static str, mode: &'static str, workers: usize) -> Case {
        Case {
            system,
            mode,
            workers,
        }
    }

    /// The TSV carries commits, flushes and KiB written per job where they were counted,
    /// and an empty cell where not; every row has the header's eleven fields.
    #[test]
    fn the_tsv_has_commits_per_job_where_counted() {
        let cases = [case("steadq", "strict", 1), case("bare", "strict", 1)];
        let mut counted = run(400);
        counted.commits = Some(1216);
        counted.device = Some(crate::journal::Device {
            flushes: 2500,
            sectors: 70_000,
        });
        let ratio = Ratio {
            name: "x",
            of_medians: 1.0,
            round_min: 1.0,
            round_max: 1.0,
        };
        let t = tsv(&cases, &[counted, run(500)], &[ratio]);
        let rows: Vec<Vec<&str>> = t.lines().map(|l| l.split('\t').collect()).collect();
        assert_eq!(
            rows[0][8..],
            ["commits_per_job", "flushes_per_job", "kib_written_per_job"]
        );
        assert_eq!(rows[1][8..], ["3.04", "6.25", "87.50"]);
        assert_eq!(rows[2][8..], ["", "", ""]);
        assert!(rows.iter().all(|r| r.len() == 11), "{t}");
    }

    /// The ratio of the medians, and the spread of the paired per-round ratios, which is not
    /// the ratio of the extremes: round 2 is slow for both systems, and its pair is still
    /// 1.0.
    #[test]
    fn a_ratio_is_of_the_medians_and_its_spread_is_of_paired_rounds() {
        let cases = [case("steadq", "strict", 1), case("redis", "always", 1)];
        let rounds = vec![
            vec![run(600), run(300), run(660)],
            vec![run(500), run(300), run(440)],
        ];
        let r = ratios(&cases, &rounds);
        assert_eq!(r.len(), 1, "only the pair whose cases ran: {r:?}");
        assert_eq!(r[0].name, "strict 1w / Redis always 1c");
        assert!((r[0].of_medians - 600.0 / 440.0).abs() < 1e-9, "{r:?}");
        assert!((r[0].round_min - 1.0).abs() < 1e-9, "{r:?}");
        assert!((r[0].round_max - 1.5).abs() < 1e-9, "{r:?}");
        let tsv = ratios_tsv(&r);
        assert_eq!(
            tsv,
            "figure\tratio\tround_min\tround_max\nstrict 1w / Redis always 1c\t1.364\t1.000\t1.500\n"
        );
    }

    /// Wear ratios are of the median runs' KiB and flushes per job; a pair whose second
    /// case wrote nothing, or whose device was not counted (tmpfs), has no figure, and a
    /// pair with a case that did not run is left out.
    #[test]
    fn wear_ratios_compare_bytes_and_flushes_per_job() {
        let cases = [
            case("steadq", "strict", 1),
            case("sqlite", "full", 1),
            case("redis", "always", 1),
        ];
        let dev = |jobs, flushes, sectors| {
            let mut r = run(jobs);
            r.device = Some(crate::journal::Device { flushes, sectors });
            r
        };
        // 90 KiB and 6 flushes a job; 45 KiB and 3; the Redis device wrote nothing.
        let medians = [dev(100, 600, 18_000), dev(200, 600, 18_000), dev(50, 0, 0)];
        let w = wear(&cases, &medians);
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(w[0].name, "strict 1w / SQLite FULL 1c");
        assert!((w[0].kib.unwrap() - 2.0).abs() < 1e-9, "{w:?}");
        assert!((w[0].flushes.unwrap() - 2.0).abs() < 1e-9, "{w:?}");
        assert_eq!(w[1].name, "strict 1w / Redis always 1c");
        assert_eq!((w[1].kib, w[1].flushes), (None, None));
        assert_eq!(
            wear_tsv(&w),
            "figure\tkib_ratio\tflushes_ratio\n\
             strict 1w / SQLite FULL 1c\t2.000\t2.000\n\
             strict 1w / Redis always 1c\t\t\n"
        );
        let uncounted = [run(100), run(200), run(50)];
        assert!(wear(&cases, &uncounted)
            .iter()
            .all(|w| w.kib.is_none() && w.flushes.is_none()));
    }
}
