//! Helpers for the end-to-end tests: start the real `hbidx` binary on an ephemeral port with a
//! real data dir, and talk to it over HTTP.

#![allow(dead_code)]

pub mod broker;
pub mod browser;
pub mod kafka;
pub mod tmpfs;
pub mod writes;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The API key every test server is started with (`HBIDX_API_KEY`, so it has the lookup, write
/// and admin scopes) and every helper request sends.
pub const TEST_API_KEY: &str = "hbidx_aGJpZHggaW50ZWdyYXRpb24gdGVzdHMnIEFQSSBrZXk";

/// The key the instances of a test tier call each other with (`HBIDX_CLUSTER_KEY`, the
/// `cluster` scope alone); given to every server [`Server::start`] starts, read only by those
/// with `[cluster]`.
pub const TEST_CLUSTER_KEY: &str = "hbidx_aGJpZHggY2x1c3RlciB0ZXN0IHBlZXJzJyBrZXkuLi4";

/// The environment [`Server::start`] gives every server: both test keys.
const TEST_KEYS: &[(&str, &str)] = &[
    ("HBIDX_API_KEY", TEST_API_KEY),
    ("HBIDX_CLUSTER_KEY", TEST_CLUSTER_KEY),
];

pub struct Server {
    pub child: Child,
    pub base: String,
    pub data_dir: PathBuf,
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// `host:port` of the HBase Thrift gateway, when started with `--thrift-listen`.
    pub thrift: Option<String>,
}

/// The line prefix `hbidx` prints once its Thrift gateway accepts connections.
const THRIFT_LINE: &str = "thrift gateway listening on ";

impl Server {
    /// Runs `hbidx <args> --listen 127.0.0.1:0 --data-dir <dir>` with [`TEST_API_KEY`] and
    /// waits for its "listening on" line.
    pub fn start(subcommand: &[&str], data_dir: &Path, extra: &[&str]) -> Server {
        Self::start_with_env(subcommand, data_dir, extra, TEST_KEYS)
    }

    /// [`Server::start`] with these environment variables instead of the test key
    /// (`HBIDX_API_KEY` and `HBIDX_CLUSTER_KEY` are removed unless given here).
    pub fn start_with_env(
        subcommand: &[&str],
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        Self::launch("127.0.0.1:0", subcommand, data_dir, extra, env)
    }

    /// [`Server::start`] on a fixed address (a sharded tier's config names every replica's).
    pub fn start_on(listen: &str, subcommand: &[&str], data_dir: &Path, extra: &[&str]) -> Server {
        Self::launch(listen, subcommand, data_dir, extra, TEST_KEYS)
    }

    /// [`Server::start`] whose stderr nobody reads once the "listening on" line is in, until
    /// the returned sender sends (or is dropped): a log collector that stalls, with the pipe
    /// filling up behind it.
    pub fn start_with_stalled_log(
        subcommand: &[&str],
        data_dir: &Path,
        extra: &[&str],
    ) -> (Server, mpsc::Sender<()>) {
        let (release, hold) = mpsc::channel();
        let server = Self::launch_holding(
            "127.0.0.1:0",
            subcommand,
            data_dir,
            extra,
            TEST_KEYS,
            Some(hold),
        );
        (server, release)
    }

    fn launch(
        listen: &str,
        subcommand: &[&str],
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        Self::launch_holding(listen, subcommand, data_dir, extra, env, None)
    }

    fn launch_holding(
        listen: &str,
        subcommand: &[&str],
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        hold: Option<mpsc::Receiver<()>>,
    ) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hbidx"));
        command.env_remove("HBIDX_API_KEY");
        command.env_remove("HBIDX_CLUSTER_KEY");
        for (name, value) in env {
            command.env(name, value);
        }
        command
            .args(subcommand)
            .args(["--listen", listen, "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("hbidx starts");
        let stderr = child.stderr.take().expect("stderr piped");
        let stdout = child.stdout.take().expect("stdout piped");
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let thrift = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (tx, rx) = mpsc::channel();
        {
            let log = log.clone();
            let thrift = thrift.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    // The gateway starts before the HTTP listener, so its line comes first.
                    if let Some(addr) = line.strip_prefix(THRIFT_LINE) {
                        *thrift.lock().unwrap() = Some(addr.trim().to_string());
                    }
                    if let Some(addr) = line.split("listening on http://").nth(1) {
                        let addr = addr
                            .split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .to_string();
                        let _ = tx.send(addr);
                        log.lock().unwrap().push(line);
                        if let Some(hold) = &hold {
                            let _ = hold.recv();
                        }
                        continue;
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    log.lock().unwrap().push(line);
                }
            });
        }
        let addr = match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "hbidx did not start; log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        let thrift = thrift.lock().unwrap().clone();
        Server {
            child,
            base: format!("http://{addr}"),
            data_dir: data_dir.to_path_buf(),
            log,
            thrift,
        }
    }

    /// [`Server::start`] with the HBase Thrift gateway on an ephemeral port
    /// (`--thrift-listen 127.0.0.1:0`); its address is in `thrift`.
    pub fn start_with_thrift(subcommand: &[&str], data_dir: &Path, extra: &[&str]) -> Server {
        let mut args = vec!["--thrift-listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let server = Server::start(subcommand, data_dir, &args);
        assert!(
            server.thrift.is_some(),
            "hbidx printed no \"{THRIFT_LINE}\" line; log:\n{}",
            server.log_text()
        );
        server
    }

    /// The Thrift gateway's address; panics when it wasn't started.
    pub fn thrift_addr(&self) -> std::net::SocketAddr {
        self.thrift
            .as_deref()
            .expect("started with --thrift-listen")
            .parse()
            .expect("a socket address")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// The URL a browser opens for a page of this server, with [`TEST_API_KEY`]. A browser
    /// can't send headers, so the key goes in the fragment (`/dashboard#key=KEY`), which the
    /// page reads and never sends to the server.
    pub fn browser_url(&self, path: &str) -> String {
        format!("{}#key={TEST_API_KEY}", self.url(path))
    }

    /// SIGKILL: no shutdown hook runs, no final commit.
    pub fn kill9(mut self) {
        self.child.kill().expect("kill");
        self.child.wait().expect("wait");
    }

    /// SIGTERM and wait: the graceful path.
    pub fn stop(mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("hbidx did not stop on SIGTERM");
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client that sends `Authorization: Bearer TEST_API_KEY` on every request.
pub fn client() -> reqwest::blocking::Client {
    client_with_key(Some(TEST_API_KEY))
}

/// A client with [`TEST_API_KEY`] whose requests give up after `timeout`.
pub fn client_with_timeout(timeout: Duration) -> reqwest::blocking::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {TEST_API_KEY}")
            .parse()
            .expect("header value"),
    );
    reqwest::blocking::Client::builder()
        .timeout(timeout)
        .default_headers(headers)
        .build()
        .expect("client")
}

/// A client with another key, or none.
pub fn client_with_key(key: Option<&str>) -> reqwest::blocking::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = key {
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {key}").parse().expect("header value"),
        );
    }
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .default_headers(headers)
        .build()
        .expect("client")
}

/// Sends a request and parses the JSON answer, returning (status, body).
pub fn send(request: reqwest::blocking::RequestBuilder) -> (u16, Value) {
    let response = request.send().expect("request");
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

pub fn get(url: &str) -> (u16, Value) {
    send(client().get(url))
}

/// A GET whose answer is text (`/metrics`, `/dashboard`): (status, body).
pub fn get_text(url: &str) -> (u16, String) {
    let response = client().get(url).send().expect("request");
    let status = response.status().as_u16();
    (status, response.text().unwrap_or_default())
}

pub fn put(url: &str, body: &Value) -> (u16, Value) {
    send(client().put(url).json(body))
}

pub fn delete(url: &str) -> (u16, Value) {
    send(client().delete(url))
}

pub fn post(url: &str, body: &Value) -> (u16, Value) {
    send(client().post(url).json(body))
}

/// Retries `check` until it returns Some or the deadline passes.
pub fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The natural keys of the rows in a lookup response, sorted.
pub fn keys(body: &Value) -> Vec<String> {
    let mut keys: Vec<String> = body["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|row| row["key"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    keys.sort();
    keys
}

/// A free TCP port on loopback, for an address a config must name before its server starts (a
/// tier's replicas, a Thrift gateway that must come back on the same address).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the "HBase" stand-in: an hbidx serving HBase's Thrift1 API on `thrift`, answering
/// like HBase 1.x (`thrift_hbase_version = 1`), over its embedded store in `data_dir`, with the
/// tables of the config text `tables`. Its config file goes in `dir`.
pub fn start_hbase_standin(dir: &Path, tables: &str, data_dir: &Path, thrift: &str) -> Server {
    let config = dir.join("standin.toml");
    std::fs::write(
        &config,
        format!("{tables}\n[server]\nthrift_hbase_version = 1\n"),
    )
    .unwrap();
    Server::start(
        &["--config", &config.to_string_lossy(), "serve"],
        data_dir,
        &["--thrift-listen", thrift],
    )
}

/// Runs the `hbidx` CLI with [`TEST_API_KEY`] in its environment: exit code, stdout + stderr.
pub fn cli(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hbidx"))
        .args(args)
        .env("HBIDX_API_KEY", TEST_API_KEY)
        .output()
        .expect("hbidx runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

/// `hbidx [--config FILE] verify user --full` inside the server at `base`: exit 0 and no drift
/// of any kind. Returns the report.
pub fn assert_no_drift(base: &str, config: Option<&str>) -> String {
    let mut args = Vec::new();
    if let Some(config) = config {
        args.extend(["--config", config]);
    }
    args.extend(["verify", "user", "--full", "--server", base]);
    let (code, report) = cli(&args);
    assert_eq!(code, 0, "{report}");
    for label in [
        "missing from the index",
        "ghosts in the index",
        "value mismatches",
    ] {
        assert_eq!(report_count(&report, label), 0, "{label}: {report}");
    }
    report
}

/// The number at the end of the drift report line starting with `label` (`hbidx verify`).
pub fn report_count(text: &str, label: &str) -> u64 {
    text.lines()
        .find(|line| line.trim_start().starts_with(label))
        .and_then(|line| line.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `{label}` line in:\n{text}"))
}
