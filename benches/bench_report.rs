//! Turns the benchmarks' JSON results into the tables and SVG plots of
//! `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release -p gpu-event-pool-benches --bin bench_report -- \
//!     --doc docs/benchmarks.md --img docs/img \
//!     --img-url https://github.com/gpu-event-pool/gpu-event-pool/blob/main/docs/img \
//!     --machine "h200-16c|NVIDIA H200 host, 16 CPU cores|docs/bench-results/h200-16c" \
//!     --machine "dev-2c|development machine, 2 cores|target/bench-results"
//! ```
//!
//! Each `--machine` is `key|label|sources`, the sources a comma-separated list of result
//! files (`*.json`) and directories (every `*.json` in them). The generated Markdown replaces
//! what lies between `<!-- bench_report:begin -->` and `<!-- bench_report:end -->` in the
//! document (the hand-written reading around it is kept); plots go to
//! `<img>/<bench>-<key>.svg`, and the document links them as `<img-url>/<bench>-<key>.svg?raw=true`
//! (`cargo package` leaves `docs/img` out, so a document that ships links its plots by
//! absolute URL; without `--img-url` the link is relative to the document's folder).

use plotters::prelude::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const BEGIN: &str = "<!-- bench_report:begin -->";
const END: &str = "<!-- bench_report:end -->";
const COLORS: [RGBColor; 6] = [RED, BLUE, GREEN, MAGENTA, BLACK, CYAN];

/// One machine's results.
struct Machine {
    key: String,
    label: String,
    records: Vec<Value>,
    /// `cores_available` and CPU model, from the files.
    cores: u64,
    cpu: String,
}

impl Machine {
    fn load(spec: &str) -> Result<Self, Box<dyn Error>> {
        let mut parts = spec.splitn(3, '|');
        let (Some(key), Some(label), Some(sources)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("--machine wants key|label|sources, got {spec:?}").into());
        };
        let mut records = Vec::new();
        let (mut cores, mut cpu) = (0, String::new());
        let mut paths = Vec::new();
        for source in sources.split(',').map(Path::new) {
            if source.is_dir() {
                let mut in_dir: Vec<PathBuf> = std::fs::read_dir(source)?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "json"))
                    .collect();
                in_dir.sort();
                paths.extend(in_dir);
            } else {
                paths.push(source.to_path_buf());
            }
        }
        for path in paths {
            let file: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
            cores = file["machine"]["cores_available"].as_u64().unwrap_or(cores);
            cpu = file["machine"]["cpu_model"].as_str().unwrap_or(&cpu).to_owned();
            records.extend(file["records"].as_array().cloned().unwrap_or_default());
        }
        Ok(Self { key: key.to_owned(), label: label.to_owned(), records, cores, cpu })
    }

    fn select<'a>(&'a self, group: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.records.iter().filter(move |r| r["group"] == group)
    }

    fn find(&self, group: &str, implementation: &str, mode: &str, threads: u64) -> Option<&Value> {
        self.records.iter().filter(|r| r["group"] == group).find(|r| {
            r["implementation"] == implementation
                && (mode.is_empty() || r["mode"] == mode)
                && (threads == 0 || r["threads"].as_u64() == Some(threads))
        })
    }

    fn get(&self, group: &str, implementation: &str, mode: &str, threads: u64, field: &str) -> Option<f64> {
        self.find(group, implementation, mode, threads)?[field].as_f64()
    }
}

fn implementations(records: &[&Value]) -> Vec<String> {
    let mut seen = Vec::new();
    for r in records {
        let name = r["implementation"].as_str().unwrap_or("?").to_owned();
        if !seen.contains(&name) {
            seen.push(name);
        }
    }
    seen
}

fn threads_of(records: &[&Value]) -> Vec<u64> {
    records.iter().filter_map(|r| r["threads"].as_u64()).collect::<BTreeSet<_>>().into_iter().collect()
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e4 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns >= 100.0 {
        format!("{ns:.0} ns")
    } else {
        format!("{ns:.1} ns")
    }
}

/// A line plot of `field` against threads, one line per implementation, log-log.
fn plot(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), Box<dyn Error>> {
    let all: Vec<(f64, f64)> = series.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    if all.is_empty() {
        return Ok(());
    }
    let (x_max, y_min, y_max) = all
        .iter()
        .fold((1.0f64, f64::MAX, f64::MIN), |(x, lo, hi), &(px, py)| (x.max(px), lo.min(py), hi.max(py)));
    let root = SVGBackend::new(path, (760, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d((1.0..x_max * 1.1).log_scale(), (y_min / 1.5..y_max * 1.5).log_scale())?;
    chart.configure_mesh().x_desc("threads").y_desc(y_desc).draw()?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.85)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

/// What a threads × implementation table shows.
struct TableSpec {
    group: &'static str,
    field: &'static str,
    heading: &'static str,
    y_desc: &'static str,
    cell: fn(f64) -> String,
}

/// A threads × implementation table of one field of one group, plus its plot.
fn thread_table(out: &mut String, m: &Machine, img: &Plots, spec: &TableSpec) -> Result<(), Box<dyn Error>> {
    let TableSpec { group, field, heading, y_desc, cell } = *spec;
    let records: Vec<&Value> = m.select(group).collect();
    if records.is_empty() {
        return Ok(());
    }
    let (impls, threads) = (implementations(&records), threads_of(&records));
    writeln!(out, "\n**{heading}**\n")?;
    write!(out, "| implementation |")?;
    for t in &threads {
        write!(out, " {t} thr{} |", if *t > m.cores { " (over)" } else { "" })?;
    }
    writeln!(out)?;
    writeln!(out, "|---|{}", "---:|".repeat(threads.len()))?;
    let mut series = Vec::new();
    for name in &impls {
        write!(out, "| {name} |")?;
        let mut points = Vec::new();
        for &t in &threads {
            match m.get(group, name, "", t, field) {
                Some(v) => {
                    write!(out, " {} |", cell(v))?;
                    points.push((t as f64, v));
                }
                None => write!(out, " – |")?,
            }
        }
        writeln!(out)?;
        series.push((name.clone(), points));
    }
    let file = format!("{group}-{}.svg", m.key);
    plot(&img.dir.join(&file), &format!("{group}: {y_desc} ({})", m.label), y_desc, &series)?;
    writeln!(out, "\n![{heading}, {}]({})", m.label, img.link(&file))?;
    Ok(())
}

/// Where the plots go, and how the document links them.
struct Plots {
    dir: PathBuf,
    /// URL prefix of `dir` (absolute links); `None`: links relative to the document's folder.
    url: Option<String>,
}

impl Plots {
    fn link(&self, file: &str) -> String {
        match &self.url {
            Some(url) => format!("{}/{file}?raw=true", url.trim_end_matches('/')),
            None => {
                let dir = self.dir.file_name().map_or_else(PathBuf::new, PathBuf::from);
                dir.join(file).display().to_string()
            }
        }
    }
}

/// One goal: the figure, the target, and whether it was met.
fn goal(
    out: &mut String,
    what: &str,
    target: &str,
    value: Option<f64>,
    unit: &str,
    met: impl Fn(f64) -> bool,
) {
    let (figure, verdict) = match value {
        Some(v) => (format!("{v:.2}{unit}"), if met(v) { "met" } else { "**not met**" }),
        None => ("–".to_owned(), "not measured"),
    };
    let _ = writeln!(out, "| {what} | {target} | {figure} | {verdict} |");
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? / b?)
}

fn machine_section(m: &Machine, img: &Plots) -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    writeln!(out, "\n### {}\n", m.label)?;
    writeln!(
        out,
        "{} cores available to the benchmarks ({}); threads unpinned, left to the OS scheduler. \
         Columns marked (over) run more threads than cores.",
        m.cores, m.cpu
    )?;

    let ns = |g: &str, i: &str, t: u64| m.get(g, i, "", t, "ns_per_op");
    writeln!(out, "\n**Goals: against the seed port and the usual pools**\n")?;
    writeln!(out, "| goal | target | measured | verdict |\n|---|---|---:|---|")?;
    goal(
        &mut out,
        "pool, 16 threads, batch: std mutex time / ours",
        "≥ 10x",
        ratio(ns("pool_batch16", "std_mutex", 16), ns("pool_batch16", "ours", 16)),
        "x",
        |v| v >= 10.0,
    );
    goal(
        &mut out,
        "pool, 16 threads, one at a time: std mutex time / ours",
        "≥ 3x",
        ratio(ns("pool_single", "std_mutex", 16), ns("pool_single", "ours", 16)),
        "x",
        |v| v >= 3.0,
    );
    goal(
        &mut out,
        "pool, 16 threads, batch: ArrayQueue time / ours",
        "≥ 2x",
        ratio(ns("pool_batch16", "array_queue", 16), ns("pool_batch16", "ours", 16)),
        "x",
        |v| v >= 2.0,
    );
    goal(
        &mut out,
        "pool, 16 threads, one at a time: ArrayQueue time / ours",
        "≥ 2x",
        ratio(ns("pool_single", "array_queue", 16), ns("pool_single", "ours", 16)),
        "x",
        |v| v >= 2.0,
    );
    goal(
        &mut out,
        "pool, 1 thread: one acquire+release pair, ours",
        "≤ 15 ns",
        ns("pool_single", "ours", 1),
        " ns",
        |v| v <= 15.0,
    );
    let zps = |i: &str, t: u64| m.get("record", i, "", t, "zones_per_sec");
    goal(
        &mut out,
        "record, 16 threads: ours / seed_port zones/s",
        "≥ 10x",
        ratio(zps("ours", 16), zps("seed_port", 16)),
        "x",
        |v| v >= 10.0,
    );
    let p99 = |i: &str, mode: &str| m.get("latency", i, mode, 0, "p99_ns");
    goal(
        &mut out,
        "latency: ours p99 collecting / ours p99 idle",
        "≤ 2x",
        ratio(p99("ours", "collecting"), p99("ours", "idle")),
        "x",
        |v| v <= 2.0,
    );
    let start = |i: &str, mode: &str| m.get("startup", i, mode, 0, "ns_per_op");
    goal(
        &mut out,
        "startup (sim): seed_port creation time / ours",
        "≥ 10x",
        ratio(start("seed_port", "sim"), start("ours", "sim")),
        "x",
        |v| v >= 10.0,
    );
    goal(
        &mut out,
        "startup (sim + 568 ns per cuEventCreate): seed_port / ours",
        "≥ 10x",
        ratio(start("seed_port", "sim+cuEventCreate"), start("ours", "sim+cuEventCreate")),
        "x",
        |v| v >= 10.0,
    );

    writeln!(out, "\n**Goals: per-thread magazines**\n")?;
    writeln!(out, "| goal | target | measured | verdict |\n|---|---|---:|---|")?;
    for (group, mode) in [("pool_single", "one at a time"), ("pool_batch16", "batch")] {
        goal(
            &mut out,
            &format!("pool, 16 threads, {mode}: std mutex time / ours"),
            "≥ 10x",
            ratio(ns(group, "std_mutex", 16), ns(group, "ours", 16)),
            "x",
            |v| v >= 10.0,
        );
        let better = match (ns(group, "sharded_slab", 16), ns(group, "lockfree_object_pool", 16)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        goal(
            &mut out,
            &format!("pool, 16 threads, {mode}: better of sharded_slab / lockfree_object_pool time / ours"),
            "≥ 2x",
            ratio(better, ns(group, "ours", 16)),
            "x",
            |v| v >= 2.0,
        );
    }
    goal(
        &mut out,
        "pool, 1 thread: one acquire+release pair, ours",
        "≤ 5 ns",
        ns("pool_single", "ours", 1),
        " ns",
        |v| v <= 5.0,
    );
    let alone = |t: u64| m.get("record_no_collector", "ours", "", t, "zones_per_sec");
    goal(
        &mut out,
        "record_no_collector: ours zones/s, 16 threads / 1 thread",
        "≥ 12x",
        ratio(alone(16), alone(1)),
        "x",
        |v| v >= 12.0,
    );

    let tables = [
        TableSpec {
            group: "pool_single",
            field: "ns_per_op",
            heading:
                "pool, one slot at a time: ns per acquire+release (all threads together; lower is better)",
            y_desc: "ns per slot",
            cell: fmt_ns,
        },
        TableSpec {
            group: "pool_batch16",
            field: "ns_per_op",
            heading:
                "pool, batches of 16: ns per slot acquired+released (all threads together; lower is better)",
            y_desc: "ns per slot",
            cell: fmt_ns,
        },
        TableSpec {
            group: "record",
            field: "zones_per_sec",
            heading: "record: zones per second, lists of 64 zones, one collector (higher is better)",
            y_desc: "zones per second",
            cell: |v| format!("{:.2} M", v / 1e6),
        },
        TableSpec {
            group: "record_no_collector",
            field: "zones_per_sec",
            heading: "recording alone: zones per second, lists of 64 zones discarded unsubmitted (higher is better)",
            y_desc: "zones per second",
            cell: |v| format!("{:.2} M", v / 1e6),
        },
    ];
    for spec in &tables {
        thread_table(&mut out, m, img, spec)?;
    }

    let latency: Vec<&Value> = m.select("latency").collect();
    if !latency.is_empty() {
        writeln!(out, "\n**latency: one `zone_begin` on 4 recording threads, slow simulated GPU**\n")?;
        writeln!(out, "| implementation | collector | p50 | p99 | p99.9 | max | mean | samples |")?;
        writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|")?;
        for r in latency {
            let f = |k: &str| r[k].as_f64().map_or("–".to_owned(), fmt_ns);
            writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r["implementation"].as_str().unwrap_or("?"),
                r["mode"].as_str().unwrap_or("?"),
                f("p50_ns"),
                f("p99_ns"),
                f("p999_ns"),
                f("max_ns"),
                f("ns_per_op"),
                r["samples"].as_u64().unwrap_or(0)
            )?;
        }
    }

    let startup: Vec<&Value> = m.select("startup").chain(m.select("startup_memory")).collect();
    if !startup.is_empty() {
        writeln!(out, "\n**startup: context creation and host memory per slot (sim backend)**\n")?;
        writeln!(out, "| implementation | backend / state | slots | creation time | heap bytes per slot |")?;
        writeln!(out, "|---|---|---:|---:|---:|")?;
        for r in startup {
            let time = if r["group"] == "startup" {
                r["ns_per_op"].as_f64().map_or("–".to_owned(), fmt_ns)
            } else {
                r["ns_per_op"].as_f64().map_or("–".to_owned(), |ns| format!("{} to grow", fmt_ns(ns)))
            };
            writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                r["implementation"].as_str().unwrap_or("?"),
                r["mode"].as_str().unwrap_or("?"),
                r["slots"].as_u64().map_or("–".to_owned(), |s| s.to_string()),
                time,
                r["bytes_per_slot"].as_f64().map_or("–".to_owned(), |b| format!("{b:.1}")),
            )?;
        }
    }
    Ok(out)
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let (mut doc, mut img, mut machines) = (
        PathBuf::from("docs/benchmarks.md"),
        Plots { dir: PathBuf::from("docs/img"), url: None },
        Vec::new(),
    );
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--doc" => doc = PathBuf::from(value()?),
            "--img" => img.dir = PathBuf::from(value()?),
            "--img-url" => img.url = Some(value()?),
            "--machine" => machines.push(Machine::load(&value()?)?),
            other => return Err(format!("unknown argument {other:?} (see the file's doc comment)").into()),
        }
    }
    if machines.is_empty() {
        return Err("give at least one --machine key|label|dir".into());
    }
    std::fs::create_dir_all(&img.dir)?;
    let mut generated = String::new();
    for m in &machines {
        generated.push_str(&machine_section(m, &img)?);
    }
    let text = std::fs::read_to_string(&doc).unwrap_or_else(|_| format!("# Benchmarks\n\n{BEGIN}\n{END}\n"));
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else {
        return Err(format!("{} lacks the {BEGIN} / {END} markers", doc.display()).into());
    };
    let updated = format!("{}{BEGIN}\n{generated}\n{}", &text[..b], &text[e..]);
    std::fs::write(&doc, updated)?;
    eprintln!("wrote {} and plots in {}", doc.display(), img.dir.display());
    Ok(())
}
