//! Logging: tracing to stderr as text or JSON lines, through a writer that masks phone and
//! idcard numbers, on a thread of its own.
//!
//! The rule is that no code logs a looked-up or written value: errors never carry values
//! (schema/src/normalize.rs), rowkeys are logged as hashes, and the audit line names field kinds
//! and counts only. The masking writer is the last line of defence for what the rule can't
//! cover, such as a dependency logging a request URI at debug level: every formatted line
//! passes through `mask_pii_in_text` before it reaches stderr.
//!
//! Every lookup writes an audit line. Written where it is logged, each line cost the HTTP
//! thread a masking pass and a `write(2)` (about a third of a lookup's CPU), and a stderr that
//! stops draining (a stalled log collector, a full pipe) stopped the HTTP threads with it. The
//! lines go to a writer thread instead (`tracing-appender`), which masks them and writes each
//! batch in one call. The queue is bounded and not lossy: an audit log that silently drops
//! lines is no audit log, so once [`QUEUE_LINES`] wait, loggers wait too.

use std::io::{self, Write};

use hbidx_schema::mask::mask_pii_in_text;
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};

/// Lines queued for the writer thread before loggers wait for it: a second of lookups at tens
/// of thousands a second, a few MB at ~200 bytes a line.
const QUEUE_LINES: usize = 32 * 1024;

/// Bytes gathered before a write while a batch is still coming.
const BATCH_BYTES: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (for Loki, Elasticsearch, CloudWatch …).
    Json,
}

/// stderr, with personal data masked, written in batches. The fmt layer formats an event into
/// one buffer and writes it with one `write_all`, which the non-blocking writer passes on as
/// one message, so each `write` here sees a whole line and a number can't be split across two
/// calls. The writer thread flushes whenever its queue runs empty.
#[derive(Default)]
struct MaskingStderr {
    batch: Vec<u8>,
}

impl Write for MaskingStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.batch
            .extend_from_slice(mask_pii_in_text(&text).as_bytes());
        if self.batch.len() >= BATCH_BYTES {
            self.flush()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        // Taken before writing, so a stderr that fails (closed) drops the batch instead of
        // growing it without end.
        let batch = std::mem::take(&mut self.batch);
        let mut stderr = io::stderr().lock();
        stderr.write_all(&batch)?;
        stderr.flush()?;
        // The allocation is kept for the next batch.
        self.batch = batch;
        self.batch.clear();
        Ok(())
    }
}

/// Keeps the writer thread; dropping it writes out what is queued (waiting up to a second).
/// Held by `main` until the process exits.
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard(#[allow(dead_code)] WorkerGuard);

pub fn init(filter: &str, format: LogFormat) -> LogGuard {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .buffered_lines_limit(QUEUE_LINES)
        .thread_name("hbidx-log")
        .finish(MaskingStderr::default());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Json => builder.json().init(),
        // No colour codes: these lines end up in files and log collectors, and a pattern
        // matcher (the masking included) should see the text as written.
        LogFormat::Text => builder.with_ansi(false).init(),
    }
    LogGuard(guard)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_masked_line_by_line_and_emptied_by_flush() {
        let mut out = MaskingStderr::default();
        out.write_all(b"lookup phone=13800138000\n").unwrap();
        out.write_all(b"idcard=11010519491231002X\n").unwrap();
        let text = String::from_utf8(out.batch.clone()).unwrap();
        assert!(!text.contains("13800138000"), "{text}");
        assert!(!text.contains("11010519491231002X"), "{text}");
        assert_eq!(text.lines().count(), 2, "{text}");
        out.flush().unwrap();
        assert!(out.batch.is_empty());
    }
}
