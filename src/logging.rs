//! Logging: tracing to stderr as text or JSON lines, through a writer that masks phone and
//! idcard numbers.
//!
//! The rule is that no code logs a looked-up or written value: errors never carry values
//! (schema/src/normalize.rs), rowkeys are logged as hashes, and the audit line names field kinds
//! and counts only. The masking writer is the last line of defence for what the rule can't
//! cover, such as a dependency logging a request URI at debug level: every formatted line
//! passes through `mask_pii_in_text` before it reaches stderr.

use std::io::{self, Write};

use hbidx_schema::mask::mask_pii_in_text;
use tracing_subscriber::fmt::MakeWriter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (for Loki, Elasticsearch, CloudWatch …).
    Json,
}

/// stderr, with personal data masked. The fmt layer formats an event into one buffer and
/// writes it with one `write_all`, so each `write` sees a whole line and a number can't be split
/// across two calls.
struct MaskingStderr;

impl Write for MaskingStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        io::stderr()
            .lock()
            .write_all(mask_pii_in_text(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

struct MakeMaskingStderr;

impl<'a> MakeWriter<'a> for MakeMaskingStderr {
    type Writer = MaskingStderr;

    fn make_writer(&'a self) -> Self::Writer {
        MaskingStderr
    }
}

pub fn init(filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(MakeMaskingStderr);
    match format {
        LogFormat::Json => builder.json().init(),
        // No colour codes: these lines end up in files and log collectors, and a pattern
        // matcher (the masking included) should see the text as written.
        LogFormat::Text => builder.with_ansi(false).init(),
    }
}
