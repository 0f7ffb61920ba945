//! Power cuts, not only kill -9: the real `hbidx` binary with its store and index on crashfs
//! (`crashfs/`), a filesystem that loses every write not yet fsynced when told to crash, as a
//! power cut does. Each cut is a SIGKILL of the server, then [`CrashFs::crash`], then a
//! restart on what is left.
//!
//! The row store is on a lenient mount (file data waits for fsync, names are durable at once:
//! fjall 3.1 doesn't fsync the directory of a keyspace it creates), the index on a strict one
//! (a created, renamed or removed name is durable only once its directory is fsynced), which is
//! where hbidx's own directory work is: the index directory and the reindex swap.
//!
//! After every cut: every write acknowledged before it (with `durability = "fsync_wal"`), or
//! covered by an index commit (the default `sync_wal`), is stored and found; nothing is indexed
//! that isn't stored; `verify --full` finds no drift; new writes are indexed.
//!
//! Mounting needs root and /dev/fuse: without them the tests fail saying so, never skip.

mod util;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crashfs::{CrashFs, Mode};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use util::{Server, cli, client, eventually, get, keys};

/// A data dir whose store and index (and dead letters, with a Kafka source) are on crashfs
/// mounts.
struct Volumes {
    _dir: tempfile::TempDir,
    data: PathBuf,
    config: String,
    store: CrashFs,
    index: CrashFs,
    dead_letters: Option<CrashFs>,
}

impl Volumes {
    fn new(durability: &str) -> Volumes {
        Self::with_sources(durability, "")
    }

    /// With `sources` (`[[sources]]` text) and the dead letters on a strict mount of their own.
    fn with_sources(durability: &str, sources: &str) -> Volumes {
        if let Err(reason) = CrashFs::available() {
            panic!("crashfs can't mount here: {reason}");
        }
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        for sub in ["store", "index"] {
            std::fs::create_dir_all(data.join(sub)).unwrap();
        }
        let store = CrashFs::mount(&data.join("store"), Mode::Lenient).unwrap();
        let index = CrashFs::mount(&data.join("index"), Mode::Strict).unwrap();
        let dead_letters = (!sources.is_empty()).then(|| {
            std::fs::create_dir_all(data.join("deadletters")).unwrap();
            CrashFs::mount(&data.join("deadletters"), Mode::Strict).unwrap()
        });
        let example = include_str!("../deploy/config/hbidx.toml");
        let config = dir.path().join("hbidx.toml");
        // The default durability as a config without `[store]`, as most people run it.
        let store_section = match durability {
            "sync_wal" => String::new(),
            other => format!("[store]\ndurability = \"{other}\"\n"),
        };
        std::fs::write(&config, format!("{example}\n{store_section}{sources}")).unwrap();
        Volumes {
            data,
            config: config.to_string_lossy().into_owned(),
            store,
            index,
            dead_letters,
            _dir: dir,
        }
    }

    fn serve(&self) -> Server {
        Server::start(&["--config", &self.config, "serve"], &self.data, &[])
    }

    /// SIGKILL, then everything not fsynced is gone.
    fn power_cut(&mut self, server: Server) {
        server.kill9();
        self.store.crash().expect("the store volume crashes");
        self.index.crash().expect("the index volume crashes");
        if let Some(dead_letters) = &mut self.dead_letters {
            dead_letters
                .crash()
                .expect("the dead-letter volume crashes");
        }
    }
}

fn phone(round: usize, thread: usize, i: usize) -> String {
    format!("135{round:02}{thread:01}{i:05}")
}

/// Acknowledged writes of one round: natural key → phone, and which were `?wait=indexed`.
#[derive(Default)]
struct Acked {
    rows: BTreeMap<String, String>,
    indexed: Vec<String>,
}

/// Two threads putting new rows until the server stops answering; what was acknowledged.
fn write_until_cut(
    server: &Server,
    round: usize,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Acked>> {
    (0..2)
        .map(|thread| {
            let (base, stop) = (server.base.clone(), stop.clone());
            std::thread::spawn(move || {
                let client = client();
                let mut acked = Acked::default();
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let key = format!("p{round}-{thread}-{i}");
                    let wait = i % 5 == 0;
                    let url = format!(
                        "{base}/v1/tables/user/rows/{key}{}",
                        if wait { "?wait=indexed" } else { "" }
                    );
                    let phone = phone(round, thread, i);
                    let body =
                        json!({"cells": {"info:phone": phone, "info:name": format!("断电{i}")}});
                    match client.put(&url).json(&body).send() {
                        Ok(response) if response.status() == 200 => {
                            acked.rows.insert(key.clone(), phone);
                            if wait {
                                acked.indexed.push(key);
                            }
                        }
                        // The cut: this write may or may not have been stored.
                        _ => break,
                    }
                }
                acked
            })
        })
        .collect()
}

fn found(server: &Server, phone: &str) -> Vec<String> {
    let (status, body) = get(&server.url(&format!(
        "/v1/tables/user/rows?phone={phone}&index_only=true"
    )));
    assert_eq!(status, 200, "{body}");
    keys(&body)
}

/// `verify --full` inside the server: no drift of any kind.
fn assert_no_drift(volumes: &Volumes, server: &Server) {
    util::assert_no_drift(&server.base, Some(&volumes.config));
}

/// Nothing writes any more: the index has committed every event of the change feed.
fn wait_caught_up(server: &Server) {
    eventually("the index caught up", Duration::from_secs(60), || {
        let (_, status) = get(&server.url("/v1/indexer/status"));
        let partition = &status["tables"]["user"]["partitions"][0];
        let high = partition["high_watermark"].as_i64()?;
        (partition["lag"] == 0 && partition["checkpoint"].as_i64()? == high - 1).then_some(())
    });
}

/// Rounds of bulk writes cut at a random moment. Returns, per round, the acknowledged rows and
/// the ones acknowledged after their index commit.
fn cut_during_bulk_writes(volumes: &mut Volumes, rounds: usize, seed: u64) -> Vec<Acked> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut all = Vec::new();
    for round in 0..rounds {
        let server = volumes.serve();
        let stop = Arc::new(AtomicBool::new(false));
        let writers = write_until_cut(&server, round, stop.clone());
        std::thread::sleep(Duration::from_millis(rng.random_range(300..2000)));
        volumes.power_cut(server);
        stop.store(true, Ordering::Relaxed);
        let mut round_acked = Acked::default();
        for writer in writers {
            let acked = writer.join().unwrap();
            round_acked.rows.extend(acked.rows);
            round_acked.indexed.extend(acked.indexed);
        }
        eprintln!(
            "round {round}: {} writes acknowledged before the cut, {} of them indexed",
            round_acked.rows.len(),
            round_acked.indexed.len()
        );
        all.push(round_acked);
    }
    all
}

/// `durability = "fsync_wal"`: every acknowledged write survives every cut.
#[test]
#[ignore = "needs root and /dev/fuse (crashfs): scripts/test.sh runs it"]
fn every_acknowledged_write_survives_power_cuts_during_bulk_writes() {
    let mut volumes = Volumes::new("fsync_wal");
    let rounds = cut_during_bulk_writes(&mut volumes, 3, 57);
    let server = volumes.serve();
    wait_caught_up(&server);
    let mut lost = Vec::new();
    for (key, phone) in rounds.iter().flat_map(|round| &round.rows) {
        if found(&server, phone) != vec![key.clone()] {
            lost.push(key.clone());
        }
    }
    assert!(
        lost.is_empty(),
        "{} acknowledged writes lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(rounds.iter().map(|round| round.rows.len()).sum::<usize>() > 100);
    assert_no_drift(&volumes, &server);
    assert_new_writes_are_indexed(&server);
}

/// The default `durability = "sync_wal"`: a cut may take acknowledged writes the index hadn't
/// committed, but never leaves the index ahead of the store (the change feed's commit barrier
/// syncs the store before each index commit). Without the barrier the index would keep rows the
/// store lost, and new writes would get feed offsets the index believes it has applied.
#[test]
#[ignore = "needs root and /dev/fuse (crashfs): scripts/test.sh runs it"]
fn power_cuts_never_leave_the_index_ahead_of_the_store() {
    let mut volumes = Volumes::new("sync_wal");
    let rounds = cut_during_bulk_writes(&mut volumes, 3, 58);
    let server = volumes.serve();
    wait_caught_up(&server);
    let mut lost = Vec::new();
    let mut kept = 0;
    for round in &rounds {
        for key in &round.indexed {
            if found(&server, &round.rows[key]) != vec![key.clone()] {
                lost.push(key.clone());
            }
        }
        kept += round
            .rows
            .iter()
            .filter(|(key, phone)| found(&server, phone) == vec![(*key).clone()])
            .count();
    }
    let acknowledged: usize = rounds.iter().map(|round| round.rows.len()).sum();
    eprintln!("{kept} of {acknowledged} acknowledged writes kept");
    assert!(
        lost.is_empty(),
        "{} writes acknowledged after their index commit lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert_no_drift(&volumes, &server);
    assert_new_writes_are_indexed(&server);
}

fn assert_new_writes_are_indexed(server: &Server) {
    for i in 0..20 {
        let key = format!("after-{i}");
        let phone = format!("13799{i:06}");
        let (status, body) = util::put(
            &server.url(&format!("/v1/tables/user/rows/{key}?wait=indexed")),
            &json!({"cells": {"info:phone": phone}}),
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(found(server, &phone), vec![key], "a write after the cuts");
    }
}

/// A reindex from the store under writes, cut in each of its phases (scanning, checking,
/// swapping: the swap's renames are on the strict mount), with `fsync_wal`: after each cut the
/// server comes back with one whole index, and once the last reindex completes, every
/// acknowledged write is found by its newest phone and by no older one.
#[test]
#[ignore = "needs root and /dev/fuse (crashfs): scripts/test.sh runs it"]
fn power_cuts_during_a_reindex_under_writes_lose_nothing() {
    const ROWS: u64 = 30_000;
    let mut volumes = Volumes::new("fsync_wal");
    let data = volumes.data.to_string_lossy().into_owned();
    let (code, out) = cli(&[
        "--config",
        &volumes.config,
        "demo",
        "--rows",
        &ROWS.to_string(),
        "--no-serve",
        "--data-dir",
        &data,
    ]);
    assert_eq!(code, 0, "{out}");
    let mut fates = BTreeMap::new();
    let mut seen = Vec::new();
    for (round, phase) in ["scanning", "checking", "swapping"].into_iter().enumerate() {
        let server = volumes.serve();
        let writer = util::writes::start_until_failure(
            &server.base,
            ROWS,
            hbidx_demo::people::uid_of,
            2,
            57 + round as u64,
        );
        let (status, job) = util::post(
            &server.url("/v1/tables/user/reindex"),
            &json!({"from": "store"}),
        );
        assert_eq!(status, 202, "{job}");
        let id = job["id"].as_u64().unwrap();
        // Cut as soon as the job reports the phase (or, if it went by between two polls, at
        // the next one).
        let at = eventually(
            &format!("the reindex {phase}"),
            Duration::from_secs(120),
            || {
                let (_, job) = get(&server.url(&format!("/v1/jobs/{id}")));
                let current = job["phase"].as_str().unwrap_or_default().to_owned();
                let state = job["state"].as_str().unwrap_or_default().to_owned();
                (current == phase || state != "running").then_some(format!("{state}/{current}"))
            },
        );
        volumes.power_cut(server);
        seen.push(at);
        merge_fates(&mut fates, writer.stop());
    }
    eprintln!("cut at {seen:?}");
    // The last reindex runs to its end under writes.
    let server = volumes.serve();
    let writer = util::writes::start(&server.base, ROWS, hbidx_demo::people::uid_of, 2, 60);
    let (code, out) = cli(&[
        "--config",
        &volumes.config,
        "reindex",
        "user",
        "--from-store",
        "--server",
        &server.base,
    ]);
    merge_fates(&mut fates, writer.stop());
    assert_eq!(code, 0, "{out}");
    util::writes::assert_all_found(&server.base, &fates, Duration::from_secs(60));
    assert_no_drift(&volumes, &server);
    assert_new_writes_are_indexed(&server);
}

/// Rows written in several rounds: a later round's fate of a row replaces the earlier one, and
/// keeps its older phones.
fn merge_fates(
    all: &mut BTreeMap<String, util::writes::Fate>,
    round: BTreeMap<String, util::writes::Fate>,
) {
    for (key, fate) in round {
        match all.get_mut(&key) {
            Some(known) if known.uncertain => {}
            Some(known) => {
                known.older.extend(fate.older);
                known.older.extend(known.phone.take());
                known
                    .older
                    .retain(|phone| Some(phone) != fate.phone.as_ref());
                known.phone = fate.phone;
                known.deleted = fate.deleted;
                known.uncertain = fate.uncertain;
            }
            None => {
                all.insert(key, fate);
            }
        }
    }
}

/// A Kafka source with undecodable messages among the good ones, cut while it consumes: a dead
/// letter is synced before the index commit that moves the checkpoint past its message, so
/// every undecodable message is in the dead-letter file at the end, however the cuts fell
/// (written twice at most, never lost).
#[test]
#[ignore = "needs root and /dev/fuse (crashfs) and a Kafka broker at HBIDX_TEST_KAFKA: scripts/test.sh runs it"]
fn power_cuts_while_consuming_lose_no_dead_letter() {
    use util::kafka::{Producer, create_topic, json_source, unique_topic};

    let topic = unique_topic("power-dead-letters");
    create_topic(&topic, 1);
    let producer = Producer::fast(&topic);
    let mut bad = std::collections::BTreeSet::new();
    for i in 0..20_000u32 {
        let payload = if i % 10 == 3 {
            let payload = format!("not an event {i}");
            bad.insert(payload.clone());
            payload.into_bytes()
        } else {
            let event = json!({"table": "user", "key": format!("d{i}"), "op": "put",
                "ts": 1_700_000_000_000i64 + i64::from(i),
                "cells": {"info:phone": format!("134{i:08}")}});
            serde_json::to_vec(&event).unwrap()
        };
        producer.send(format!("d{i}").as_bytes(), &payload);
    }
    producer.flush();
    let mut volumes = Volumes::with_sources("sync_wal", &json_source(&topic, "user", "json"));
    let mut rng = ChaCha8Rng::seed_from_u64(59);
    for _ in 0..3 {
        let server = volumes.serve();
        std::thread::sleep(Duration::from_millis(rng.random_range(200..1500)));
        volumes.power_cut(server);
    }
    let server = volumes.serve();
    eventually("the topic consumed", Duration::from_secs(120), || {
        let (_, status) = get(&server.url("/v1/indexer/status"));
        let parts = status["tables"]["user"]["partitions"].as_array()?.clone();
        parts
            .iter()
            .all(|p| p["lag"].as_i64() == Some(0))
            .then_some(())
    });
    let mut written = std::collections::BTreeSet::new();
    for file in ["user.jsonl", "user.1.jsonl"] {
        let Ok(text) = std::fs::read_to_string(volumes.data.join("deadletters").join(file)) else {
            continue;
        };
        for line in text.lines() {
            let record: Value = serde_json::from_str(line).expect("a whole JSON line");
            let payload = record["payload_b64"].as_str().expect("the payload");
            use base64::Engine;
            let payload = base64::engine::general_purpose::STANDARD
                .decode(payload)
                .unwrap();
            written.insert(String::from_utf8(payload).unwrap());
        }
    }
    let lost: Vec<_> = bad.difference(&written).collect();
    assert!(
        lost.is_empty(),
        "{} of {} undecodable messages have no dead letter, e.g. {:?}",
        lost.len(),
        bad.len(),
        &lost[..lost.len().min(5)]
    );
    // The good ones are all indexed, once.
    assert_eq!(found(&server, "13400000001"), vec!["d1"]);
    assert_no_drift(&volumes, &server);
    drop(server);
}

/// The index-directory swap cut after each of its steps, on a strict mount (a rename is durable
/// only once its directory is synced): after the cut, recovery leaves exactly one whole index,
/// the old one before the shadow is moved aside and the new one from then on, and never none.
#[test]
#[ignore = "needs root and /dev/fuse (crashfs): scripts/test.sh runs it"]
fn a_power_cut_at_each_step_of_the_swap_leaves_one_whole_index() {
    use hbidx_serve::index_dirs::{self, SwapStep};

    if let Err(reason) = CrashFs::available() {
        panic!("crashfs can't mount here: {reason}");
    }
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("index");
    std::fs::create_dir(&mount).unwrap();
    let mut volume = CrashFs::mount(&mount, Mode::Strict).unwrap();
    let live = mount.join("user");
    // An "index": a synced file in a synced directory, as tantivy leaves its meta.json.
    let make = |dir: &std::path::Path, id: &str| {
        std::fs::create_dir(dir).unwrap();
        let mut file = std::fs::File::create(dir.join("id")).unwrap();
        std::io::Write::write_all(&mut file, id.as_bytes()).unwrap();
        file.sync_all().unwrap();
        index_dirs::sync_dir(dir).unwrap();
        index_dirs::sync_dir(&mount).unwrap();
    };
    for step in SwapStep::ALL {
        for leftover in [
            live.clone(),
            index_dirs::shadow_dir(&live),
            index_dirs::old_dir(&live),
        ] {
            let _ = std::fs::remove_dir_all(&leftover);
        }
        index_dirs::sync_dir(&mount).unwrap();
        make(&live, "old");
        make(&index_dirs::shadow_dir(&live), "new");
        index_dirs::swap(&live, |done| done < step).unwrap();
        volume.crash().unwrap();
        index_dirs::recover(&live).unwrap();
        let id = std::fs::read_to_string(live.join("id"))
            .unwrap_or_else(|err| panic!("no index after a cut after {step:?}: {err}"));
        let expected = if step >= SwapStep::MovedIn {
            "new"
        } else {
            "old"
        };
        assert_eq!(id, expected, "cut after {step:?}");
        assert!(!index_dirs::shadow_dir(&live).exists(), "{step:?}");
        assert!(!index_dirs::old_dir(&live).exists(), "{step:?}");
    }
}
