//! A private Kafka-protocol broker for tests that stop, restart or age their broker: tansu
//! with SQLite storage in a directory of the test's own (the shared test broker keeps its topics
//! in memory). A restarted broker keeps its log and runs its maintenance at once, which deletes
//! records older than a topic's `retention.ms` (with `cleanup.policy = delete`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::free_port;

/// tansu with SQLite storage in `dir`, so that a restarted broker has its log.
pub struct Broker {
    dir: PathBuf,
    pub addr: String,
    child: Option<Child>,
}

impl Broker {
    pub fn binary() -> String {
        std::env::var("HBIDX_TANSU").unwrap_or_else(|_| "/opt/tansu/bin/tansu".to_string())
    }

    pub fn start(dir: &Path) -> Broker {
        std::fs::create_dir_all(dir).unwrap();
        let mut broker = Broker {
            dir: dir.to_path_buf(),
            addr: format!("127.0.0.1:{}", free_port()),
            child: None,
        };
        broker.launch();
        broker
    }

    pub fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("tansu.log"))
            .unwrap();
        let child = Command::new(Self::binary())
            .current_dir(&self.dir)
            .args(["broker", "--listener-url"])
            .arg(format!("tcp://{}", self.addr))
            .arg("--advertised-listener-url")
            .arg(format!("tcp://{}", self.addr))
            .args(["--storage-engine", "sqlite://tansu.db"])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "{} does not start ({err}); `bash scripts/test.sh --setup` installs it",
                    Self::binary()
                )
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&self.addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu did not listen on {}; log:\n{}",
                self.addr,
                std::fs::read_to_string(self.dir.join("tansu.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the broker, with SIGTERM (a clean stop) or SIGKILL.
    pub fn stop(&mut self, kill: bool) {
        if let Some(mut child) = self.child.take() {
            if kill {
                let _ = child.kill();
            } else {
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop(true);
    }
}
