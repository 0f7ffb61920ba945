//! Debian's headless Chromium, for tests of the pages hbidx serves (`scripts/test.sh --setup`
//! installs it). One run per call: `--dump-dom` for what the page's scripts made of the DOM,
//! `--screenshot` for a picture; console messages are captured from Chromium's log.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `HBIDX_CHROMIUM`, else `/usr/bin/chromium`.
pub fn chromium() -> String {
    std::env::var("HBIDX_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_string())
}

/// What one headless run printed.
pub struct Run {
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The page's console messages (Chromium logs each as `…:CONSOLE(line)] "message", source:
    /// …` with `--enable-logging=stderr`).
    pub fn console(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|line| line.contains(":CONSOLE"))
            .collect()
    }
}

/// Runs Chromium headless on `url` with `extra` flags (`--dump-dom`, `--screenshot=…`), giving
/// the page `budget_ms` of virtual time (timers run ahead; network answers are awaited). Kills
/// it after `timeout`.
pub fn run(url: &str, extra: &[String], budget_ms: u64, timeout: Duration) -> Run {
    let profile = tempfile::tempdir().expect("profile dir");
    let out = tempfile::tempdir().expect("output dir");
    let stdout_path = out.path().join("stdout");
    let stderr_path = out.path().join("stderr");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--virtual-time-budget={budget_ms}"))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|err| {
            panic!(
                "cannot run {} ({err}); `bash scripts/test.sh --setup` installs chromium",
                chromium()
            )
        });
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait().expect("wait for chromium") {
            Some(_) => break,
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "chromium did not finish within {timeout:?}; log:\n{}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    Run {
        stdout: std::fs::read_to_string(&stdout_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&stderr_path).unwrap_or_default(),
    }
}

/// The value of `attribute` on the first element whose opening tag contains `marker`, in a
/// serialised DOM (`--dump-dom` output).
pub fn attribute(dom: &str, marker: &str, attribute: &str) -> Option<String> {
    let at = dom.find(marker)?;
    let start = dom[..at].rfind('<')?;
    let end = at + dom[at..].find('>')?;
    let tag = &dom[start..end];
    let needle = format!(" {attribute}=\"");
    let value_at = tag.find(&needle)? + needle.len();
    let value_end = value_at + tag[value_at..].find('"')?;
    Some(tag[value_at..value_end].to_string())
}

/// Copies `from` to `to`, creating the parent directory.
pub fn keep(from: &Path, to: &Path) {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).expect("create screenshot dir");
    }
    std::fs::copy(from, to).expect("copy screenshot");
}
