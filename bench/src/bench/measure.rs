//! Measuring helpers: CPU time, percentiles, RSS and the indexer's commit figures.

use crate::bench::Row;

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// User + system CPU seconds of this process, all threads (Linux `/proc/self/stat`).
pub(crate) fn process_cpu_seconds() -> Option<f64> {
    crate::report::stat_cpu_seconds("/proc/self/stat")
}

/// A counter of this process's storage I/O (Linux `/proc/self/io`): `read_bytes` or
/// `write_bytes`, the bytes it caused to be read from or written to storage.
pub(crate) fn io_bytes(key: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/self/io")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))?
        .trim()
        .parse()
        .ok()
}

fn rss_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|line| line.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// The process's resident set now and at its peak (`VmRSS`, `VmHWM`), in MB.
pub(super) fn rss_row() -> Row {
    let (now, peak) = (
        rss_kib("VmRSS:") as f64 / 1024.0,
        rss_kib("VmHWM:") as f64 / 1024.0,
    );
    Row::new("RSS", format!("{now:.0} MB now, {peak:.0} MB peak"))
        .also("now", now, "MB")
        .also("peak", peak, "MB")
}

/// "CPU 1.23s = 4.5 µs/event" and the µs per event, from a CPU time in seconds.
pub(super) fn cpu_per_event(cpu: Option<f64>, events: u64) -> (String, f64) {
    match cpu {
        Some(cpu) => {
            let micros = cpu * 1e6 / events.max(1) as f64;
            (format!(", CPU {cpu:.2}s = {micros:.1} µs/event"), micros)
        }
        None => (String::new(), f64::NAN),
    }
}

/// ", N commits, the last taking M ms": how much of an indexing run the final commit's
/// segment build (serial per indexing thread, and nothing else to overlap with) took.
pub(crate) fn commit_summary(stats: &hbidx_indexer::IndexerStats) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    format!(
        ", {} commits, the last taking {:.0} ms",
        stats.commits.load(Relaxed),
        stats.last_commit_micros.load(Relaxed) as f64 / 1e3
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_bytes_reads_the_named_counter_only() {
        // Linux has /proc/self/io; `cancelled_write_bytes` must not pass for `write_bytes`.
        assert!(io_bytes("read_bytes").is_some());
        assert!(io_bytes("write_bytes").is_some());
        assert_eq!(io_bytes("bytes"), None);
        assert_eq!(io_bytes("no_such_counter"), None);
    }
}
