//! The pieces of `hbidx bench` that are not measurements: report rows (printed as a markdown
//! table and, with `--json`, written machine-readably), the uniform sample of lookup keys, the
//! RSS sampler, wrk's output, disk usage and CPU time.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hbidx_query::MemoryProbe;
use serde::Serialize;

/// One row of the report: a label, the human cell, and the numbers in it.
pub(crate) struct Row {
    pub label: String,
    pub text: String,
    pub metrics: Vec<Metric>,
}

/// One number of a row: what it measures (unique in the report, stable across runs, so that
/// runs of different sizes can be lined up by it), its value and unit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Metric {
    pub measure: String,
    pub value: f64,
    pub unit: &'static str,
}

impl Row {
    pub fn new(label: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            text: text.into(),
            metrics: Vec::new(),
        }
    }

    /// Adds a number, unless it is not one (a figure that could not be measured).
    pub fn metric(mut self, measure: impl Into<String>, value: f64, unit: &'static str) -> Self {
        if value.is_finite() {
            self.metrics.push(Metric {
                measure: measure.into(),
                value,
                unit,
            });
        }
        self
    }

    /// Adds a number measured under the row's own label.
    pub fn value(self, value: f64, unit: &'static str) -> Self {
        let measure = self.label.clone();
        self.metric(measure, value, unit)
    }

    /// A latency row: the p50 and p99 of `millis` (sorted here) in the text and as numbers,
    /// with `detail` after them.
    pub fn latencies(label: impl Into<String>, millis: &mut [f64], detail: &str) -> Self {
        millis.sort_by(f64::total_cmp);
        let (p50, p99) = (
            crate::bench::percentile(millis, 50.0),
            crate::bench::percentile(millis, 99.0),
        );
        Row::new(
            label,
            format!("p50 {p50:.1} ms, p99 {p99:.1} ms ({detail})"),
        )
        .also("p50", p50, "ms")
        .also("p99", p99, "ms")
    }

    /// The row's first number (a wrk row's req/s), if it has one.
    pub fn first_value(&self) -> Option<f64> {
        self.metrics.first().map(|metric| metric.value)
    }

    /// The row with `note` appended to its human cell.
    pub fn with_note(mut self, note: impl AsRef<str>) -> Self {
        self.text.push_str(note.as_ref());
        self
    }

    /// Adds a number measured under the row's label with `what` appended (`label, what`).
    pub fn also(self, what: &str, value: f64, unit: &'static str) -> Self {
        let measure = format!("{}, {what}", self.label);
        self.metric(measure, value, unit)
    }
}

/// One element of `--json`'s array.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct JsonRow<'a> {
    pub measure: &'a str,
    pub value: Option<f64>,
    pub unit: Option<&'a str>,
    pub text: &'a str,
}

/// The report as `--json` writes it: one element per number, and one (without a value) for a
/// row that has none.
pub(crate) fn json_rows(report: &[Row]) -> Vec<JsonRow<'_>> {
    let mut out = Vec::new();
    for row in report {
        if row.metrics.is_empty() {
            out.push(JsonRow {
                measure: &row.label,
                value: None,
                unit: None,
                text: &row.text,
            });
        }
        for metric in &row.metrics {
            out.push(JsonRow {
                measure: &metric.measure,
                value: Some(metric.value),
                unit: Some(metric.unit),
                text: &row.text,
            });
        }
    }
    out
}

/// Markdown table of the report, as `hbidx bench` prints it (scripts/bench.sh reads it).
pub(crate) fn markdown(report: &[Row]) -> String {
    let mut out = String::from("| measure | result |\n|---|---|\n");
    for row in report {
        out.push_str(&format!("| {} | {} |\n", row.label, row.text));
    }
    out
}

/// The lookup keys of a table of `rows` generated people: every `stride`-th person's, so at
/// most [`UniformSample::MAX`] keys, spread evenly over the whole table (not a hot set).
pub(crate) struct UniformSample {
    stride: u64,
    pub phones: Vec<String>,
}

impl UniformSample {
    pub const MAX: u64 = 100_000;

    pub fn new(rows: u64) -> Self {
        let stride = rows.div_ceil(Self::MAX).max(1);
        Self {
            stride,
            phones: Vec::with_capacity(rows.div_ceil(stride) as usize),
        }
    }

    /// The sample's slot of person `i`, if the sample has one.
    pub fn slot(&self, i: u64) -> Option<usize> {
        i.is_multiple_of(self.stride)
            .then_some((i / self.stride) as usize)
    }

    /// Offers person `i`'s phone (people come in order, each once).
    pub fn offer(&mut self, i: u64, phone: &str) {
        if self.slot(i) == Some(self.phones.len()) {
            self.phones.push(phone.to_string());
        }
    }

    /// Person `i`'s phone changed (an update): the sample follows.
    pub fn update(&mut self, i: u64, phone: &str) {
        if let Some(slot) = self.slot(i).and_then(|slot| self.phones.get_mut(slot)) {
            *slot = phone.to_string();
        }
    }

    /// The phones of batch-lookup call `call` of `per_call` phones: spread over the whole
    /// sample (every `len / per_call`-th phone from offset `call`), not a run of neighbours.
    pub fn batch(&self, call: usize, per_call: usize) -> Vec<&str> {
        let step = (self.phones.len() / per_call.max(1)).max(1);
        self.phones
            .iter()
            .skip(call % step)
            .step_by(step)
            .take(per_call)
            .map(String::as_str)
            .collect()
    }
}

/// Resident memory of this process in KiB: anonymous and file-backed (`RssAnon`, `RssFile`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Rss {
    pub anon_kib: u64,
    pub file_kib: u64,
}

impl Rss {
    pub fn now() -> Self {
        std::fs::read_to_string("/proc/self/status")
            .map(|status| Self::parse(&status))
            .unwrap_or_default()
    }

    fn parse(status: &str) -> Self {
        let field = |key: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(key))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kib| kib.parse().ok())
                .unwrap_or(0)
        };
        Self {
            anon_kib: field("RssAnon:"),
            file_kib: field("RssFile:"),
        }
    }

    fn max(self, other: Self) -> Self {
        Self {
            anon_kib: self.anon_kib.max(other.anon_kib),
            file_kib: self.file_kib.max(other.file_kib),
        }
    }
}

/// Samples [`Rss`] every 100 ms on a thread of its own and keeps the peaks since the last
/// [`RssMonitor::phase`]; stops when dropped.
pub(crate) struct RssMonitor {
    peak_anon: Arc<AtomicU64>,
    peak_file: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl RssMonitor {
    pub fn start() -> Self {
        let peak_anon = Arc::new(AtomicU64::new(0));
        let peak_file = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (anon, file, stopped) = (peak_anon.clone(), peak_file.clone(), stop.clone());
        std::thread::Builder::new()
            .name("bench-rss".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    let rss = Rss::now();
                    anon.fetch_max(rss.anon_kib, Ordering::Relaxed);
                    file.fetch_max(rss.file_kib, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
            .ok();
        Self {
            peak_anon,
            peak_file,
            stop,
        }
    }

    /// The end of a phase: the RSS now and the peak since the previous phase ended, as a row
    /// with four numbers.
    pub fn phase(&self, phase: &str) -> Row {
        let now = Rss::now();
        let peak = Rss {
            anon_kib: self.peak_anon.swap(0, Ordering::Relaxed),
            file_kib: self.peak_file.swap(0, Ordering::Relaxed),
        }
        .max(now);
        let mb = |kib: u64| kib as f64 / 1024.0;
        Row::new(
            format!("RSS, {phase}"),
            format!(
                "anon {:.0} MB (peak {:.0} MB), file {:.0} MB (peak {:.0} MB)",
                mb(now.anon_kib),
                mb(peak.anon_kib),
                mb(now.file_kib),
                mb(peak.file_kib)
            ),
        )
        .also("anon at the end", mb(now.anon_kib), "MB")
        .also("anon peak", mb(peak.anon_kib), "MB")
        .also("file at the end", mb(now.file_kib), "MB")
        .also("file peak", mb(peak.file_kib), "MB")
    }

    /// [`phase`](Self::phase) and, beside it, the [`budget_row`] of the same phase.
    pub fn phase_with_budget(&self, phase: &str, probe: Option<&MemoryProbe>) -> Vec<Row> {
        std::iter::once(self.phase(phase))
            .chain(budget_row(phase, probe))
            .collect()
    }
}

impl Drop for RssMonitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What `wrk --latency` printed: requests/s and latency percentiles in ms.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct WrkSummary {
    pub rps: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub p50: String,
    pub p99: String,
    pub rps_text: String,
    /// Non-2xx responses and socket errors, as wrk words them.
    pub errors: Vec<String>,
}

impl WrkSummary {
    pub fn parse(text: &str) -> Self {
        let mut summary = Self {
            p50: "?".into(),
            p99: "?".into(),
            rps_text: "?".into(),
            ..Self::default()
        };
        for line in text.lines() {
            let trimmed = line.trim();
            let mut parts = trimmed.split_whitespace();
            match (parts.next(), parts.next()) {
                (Some("Requests/sec:"), Some(value)) => {
                    summary.rps = value.parse().ok();
                    summary.rps_text = value.to_string();
                }
                (Some("50%"), Some(value)) => {
                    summary.p50_ms = wrk_duration_ms(value);
                    summary.p50 = value.to_string();
                }
                (Some("99%"), Some(value)) => {
                    summary.p99_ms = wrk_duration_ms(value);
                    summary.p99 = value.to_string();
                }
                (Some("Non-2xx"), _) | (Some("Socket"), _) => {
                    summary.errors.push(trimmed.to_string());
                }
                _ => {}
            }
        }
        summary
    }
}

/// A wrk duration (`850.00us`, `1.23ms`, `1.05s`, `2.00m`) in milliseconds.
pub(crate) fn wrk_duration_ms(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match unit {
        "us" => 1e-3,
        "ms" => 1.0,
        "s" => 1e3,
        "m" => 60e3,
        "h" => 3600e3,
        _ => return None,
    };
    Some(number * factor)
}

/// Bytes the files under `dir` take on disk (allocated blocks, as `du` counts them).
pub(crate) fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => disk_bytes(&entry.path()),
            Ok(meta) => meta.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// User + system CPU seconds from a `/proc/…/stat` file (a process's or a thread's).
pub(crate) fn stat_cpu_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on Linux.
    Some((utime + stime) / 100.0)
}

/// CPU seconds of the calling thread.
pub(crate) fn thread_cpu_seconds() -> Option<f64> {
    stat_cpu_seconds("/proc/thread-self/stat")
}

/// The end of a phase as the `[memory]` budget sees it: what its parts hold now (the probe
/// behind `/metrics`' `hbidx_memory_used_bytes`), beside the [`RssMonitor::phase`] row of the
/// same phase, so that anonymous RSS splits into the budgeted parts and the rest. `None` when
/// no probe is wired in.
pub(crate) fn budget_row(phase: &str, probe: Option<&MemoryProbe>) -> Option<Row> {
    let parts = probe?();
    let mb = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let used: u64 = parts.iter().filter_map(|part| part.used_bytes).sum();
    let budget: u64 = parts.iter().map(|part| part.budget_bytes).sum();
    let each = parts
        .iter()
        .filter_map(|part| Some(format!("{} {:.0}", part.part, mb(part.used_bytes?))))
        .collect::<Vec<_>>()
        .join(", ");
    Some(
        Row::new(
            format!("memory budget in use, {phase}"),
            format!("{:.0} MB of {:.0} MB ({each}; MB)", mb(used), mb(budget)),
        )
        .value(mb(used), "MB"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_latency_row_carries_its_p50_and_p99() {
        let mut millis = vec![5.0, 1.0, 3.0];
        let row = Row::latencies("x", &mut millis, "3 writes");
        assert_eq!(row.text, "p50 3.0 ms, p99 5.0 ms (3 writes)");
        let numbers: Vec<(&str, f64)> = row
            .metrics
            .iter()
            .map(|m| (m.measure.as_str(), m.value))
            .collect();
        assert_eq!(numbers, [("x, p50", 3.0), ("x, p99", 5.0)]);
    }

    #[test]
    fn json_has_one_element_per_number_and_one_for_a_row_without() {
        let report = vec![
            Row::new("indexing", "100 events/s (CPU 10 µs/event)")
                .value(100.0, "events/s")
                .also("CPU", 10.0, "µs/event"),
            Row::new("wrk", "failed"),
            Row::new("latency", "p50 ?").also("p50", f64::NAN, "ms"),
        ];
        let json = serde_json::to_value(json_rows(&report)).unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"measure": "indexing", "value": 100.0, "unit": "events/s",
                 "text": "100 events/s (CPU 10 µs/event)"},
                {"measure": "indexing, CPU", "value": 10.0, "unit": "µs/event",
                 "text": "100 events/s (CPU 10 µs/event)"},
                {"measure": "wrk", "value": null, "unit": null, "text": "failed"},
                {"measure": "latency", "value": null, "unit": null, "text": "p50 ?"},
            ])
        );
        assert_eq!(
            markdown(&report[..1]),
            "| measure | result |\n|---|---|\n| indexing | 100 events/s (CPU 10 µs/event) |\n"
        );
    }

    #[test]
    fn sample_is_uniform_and_bounded() {
        for rows in [1u64, 7, 100_000, 100_001, 1_000_000, 10_000_000, 99_999_999] {
            let mut sample = UniformSample::new(rows);
            // Offering only the sampled people is enough to fill it: the others are skipped.
            let mut i = 0;
            while i < rows {
                sample.offer(i, &i.to_string());
                i += sample.stride;
            }
            let n = sample.phones.len() as u64;
            assert!(n <= UniformSample::MAX, "{rows}: {n}");
            assert!(n >= rows.min(UniformSample::MAX) / 2, "{rows}: {n}");
            let last: u64 = sample.phones.last().unwrap().parse().unwrap();
            // The last key is within one stride of the end of the table.
            assert!(rows - last <= sample.stride, "{rows}: {last}");
        }
        let mut sample = UniformSample::new(1_000_000);
        for i in 0..1_000_000u64 {
            sample.offer(i, &i.to_string());
        }
        assert_eq!(sample.phones.len(), 100_000);
        assert_eq!(sample.phones[1], "10");
        sample.update(20, "new");
        sample.update(21, "not sampled");
        assert_eq!(sample.phones[2], "new");
        assert!(!sample.phones.iter().any(|p| p == "not sampled"));
        // A batch spreads over the whole sample.
        let batch = sample.batch(3, 1000);
        assert_eq!(batch.len(), 1000);
        assert_eq!(batch[0], "30");
        assert_eq!(batch[999], "999030");
        // A small sample still gives full batches.
        let mut small = UniformSample::new(500);
        (0..500).for_each(|i| small.offer(i, "p"));
        assert_eq!(small.batch(2, 1000).len(), 500);
    }

    #[test]
    fn rss_fields_parse() {
        let status = "Name:\thbidx\nVmRSS:\t  300 kB\nRssAnon:\t  200 kB\nRssFile:\t   90 kB\nRssShmem:\t10 kB\n";
        assert_eq!(
            Rss::parse(status),
            Rss {
                anon_kib: 200,
                file_kib: 90
            }
        );
        assert!(Rss::now().anon_kib > 0);
        let monitor = RssMonitor::start();
        let row = monitor.phase("load");
        assert_eq!(row.label, "RSS, load");
        assert_eq!(row.metrics.len(), 4);
        assert_eq!(row.metrics[1].measure, "RSS, load, anon peak");
        assert!(row.metrics[1].value >= row.metrics[0].value);
    }

    #[test]
    fn wrk_output_parses() {
        let text = "Running 10s test @ http://127.0.0.1:1\n  2 threads and 64 connections\n\
            \x20 Latency Distribution\n     50%  634.00us\n     75%    1.10ms\n     99%    2.59ms\n\
            \x20 885020 requests in 10.00s, 300.00MB read\n  Non-2xx or 3xx responses: 3\n\
            Requests/sec:  88502.11\nTransfer/sec:     30.00MB\n";
        let summary = WrkSummary::parse(text);
        assert_eq!(summary.rps, Some(88502.11));
        assert_eq!(summary.p50_ms, Some(0.634));
        assert_eq!(summary.p99_ms, Some(2.59));
        assert_eq!(summary.p99, "2.59ms");
        assert_eq!(summary.errors, vec!["Non-2xx or 3xx responses: 3"]);
        assert_eq!(wrk_duration_ms("1.50s"), Some(1500.0));
        assert_eq!(wrk_duration_ms("2.00m"), Some(120_000.0));
        assert_eq!(wrk_duration_ms("nan"), None);
        assert_eq!(wrk_duration_ms("12"), None);
    }

    #[test]
    fn disk_bytes_counts_nested_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/x"), vec![1u8; 10_000]).unwrap();
        std::fs::write(dir.path().join("y"), vec![1u8; 5_000]).unwrap();
        let bytes = disk_bytes(dir.path());
        assert!(bytes >= 15_000, "{bytes}");
        assert_eq!(disk_bytes(&dir.path().join("missing")), 0);
        assert!(thread_cpu_seconds().is_some());
    }

    #[test]
    fn budget_row_sums_the_counted_parts_against_the_whole_budget() {
        use hbidx_query::MemoryUse;
        const MIB: u64 = 1024 * 1024;
        let part = |name: &str, used: Option<u64>, budget: u64| MemoryUse {
            part: name.to_string(),
            used_bytes: used.map(|u| u * MIB),
            budget_bytes: budget * MIB,
        };
        let probe: MemoryProbe = Arc::new(move || {
            vec![
                part("index_writers", Some(77), 154),
                part("store_cache", Some(148), 148),
                part("source_buffers", None, 210),
            ]
        });
        let row = budget_row("updates", Some(&probe)).expect("a probe gives a row");
        assert_eq!(row.label, "memory budget in use, updates");
        assert_eq!(
            row.text,
            "225 MB of 512 MB (index_writers 77, store_cache 148; MB)"
        );
        assert_eq!(row.metrics.len(), 1);
        assert_eq!(row.metrics[0].value, 225.0);
        assert!(budget_row("updates", None).is_none());
    }
}
