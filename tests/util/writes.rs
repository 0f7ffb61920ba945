//! A client that keeps updating and deleting existing rows over REST while a job runs, and
//! remembers what each acknowledged write left: the oracle of the reindex-under-writes tests.
//!
//! Each thread owns the rows `i % threads == thread`, so a row's writes are sequential and its
//! last acknowledged write is its state. An update gives the row a phone no row ever had; a
//! deleted row is never written again (a put in the same millisecond as a delete would be
//! masked by it, as in HBase).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use super::{assert_no_drift, cli, client, eventually, keys, send};

/// What the acknowledged writes left of one row.
#[derive(Debug, Clone, Default)]
pub struct Fate {
    /// The phone of the last acknowledged update; `None` once deleted.
    pub phone: Option<String>,
    pub deleted: bool,
    /// Every phone the row had before: its first one and each update's but the last.
    pub older: Vec<String>,
    /// A write to it got no answer (the server was killed): whether it was applied is
    /// unknown, so the row is not checked.
    pub uncertain: bool,
}

pub struct Writer {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<BTreeMap<String, Fate>>>,
    /// Acknowledged writes so far, all threads together.
    pub acknowledged: Arc<AtomicU64>,
}

/// Starts `threads` writers over the rows `uid(0) .. uid(rows - 1)` of table `user` on `base`
/// (`http://host:port`). A write that fails panics.
pub fn start(base: &str, rows: u64, uid: fn(u64) -> String, threads: u64, seed: u64) -> Writer {
    start_with(base, rows, uid, threads, seed, false)
}

/// [`start`] for a server that is going to be killed: a write that fails (no answer, or not
/// 200) ends its thread, and its row leaves the oracle, since it may or may not have been
/// applied.
pub fn start_until_failure(
    base: &str,
    rows: u64,
    uid: fn(u64) -> String,
    threads: u64,
    seed: u64,
) -> Writer {
    start_with(base, rows, uid, threads, seed, true)
}

fn start_with(
    base: &str,
    rows: u64,
    uid: fn(u64) -> String,
    threads: u64,
    seed: u64,
    until_failure: bool,
) -> Writer {
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let threads = (0..threads)
        .map(|thread| {
            let (stop, acknowledged, base) = (stop.clone(), acknowledged.clone(), base.to_owned());
            let total = threads;
            std::thread::spawn(move || {
                let client = client();
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ thread);
                let mut fates: BTreeMap<String, Fate> = BTreeMap::new();
                let mut next_phone = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let i = rng.random_range(0..rows / total) * total + thread;
                    let key = uid(i);
                    if fates
                        .get(&key)
                        .is_some_and(|fate| fate.deleted || fate.uncertain)
                    {
                        continue;
                    }
                    let url = format!("{base}/v1/tables/user/rows/{key}");
                    if !fates.contains_key(&key) {
                        // Its phone before any write of ours: a lookup by it must not find
                        // the row once it was changed.
                        let Some((status, row)) = try_send(client.get(&url)) else {
                            assert!(until_failure, "reading {key} failed");
                            break;
                        };
                        if status == 404 {
                            // Deleted before (by an earlier writer on the same rows).
                            let deleted = Fate {
                                deleted: true,
                                ..Fate::default()
                            };
                            fates.insert(key, deleted);
                            continue;
                        }
                        if until_failure && status != 200 {
                            break;
                        }
                        assert_eq!(status, 200, "row {key} exists: {row}");
                        let phone = row["rows"][0]["cells"]["info:phone"]
                            .as_str()
                            .map(str::to_owned);
                        fates.insert(
                            key.clone(),
                            Fate {
                                phone: phone.clone(),
                                ..Fate::default()
                            },
                        );
                    }
                    let delete = rng.random_range(0..10) == 0;
                    // Unique among the writers of one seed; seeds apart by 10 or more differ.
                    let phone = format!("16{}{thread:01}{next_phone:07}", seed % 10);
                    let request = if delete {
                        client.delete(&url)
                    } else {
                        next_phone += 1;
                        client
                            .put(&url)
                            .json(&json!({"cells": {"info:phone": &phone}}))
                    };
                    let answer = try_send(request);
                    if until_failure && answer.as_ref().is_none_or(|(status, _)| *status != 200) {
                        // Applied or not: nobody knows.
                        fates.get_mut(&key).expect("inserted above").uncertain = true;
                        break;
                    }
                    let (status, body) = answer.expect("the write answered");
                    assert_eq!(status, 200, "write to {key}: {body}");
                    if !delete {
                        let fate = fates.get_mut(&key).expect("inserted above");
                        fate.older.extend(fate.phone.replace(phone));
                    }
                    if delete {
                        let fate = fates.get_mut(&key).expect("inserted above");
                        fate.older.extend(fate.phone.take());
                        fate.deleted = true;
                    }
                    acknowledged.fetch_add(1, Ordering::Relaxed);
                }
                fates
            })
        })
        .collect();
    Writer {
        stop,
        threads,
        acknowledged,
    }
}

impl Writer {
    /// Stops the threads; every row they wrote and what it should look like now.
    pub fn stop(self) -> BTreeMap<String, Fate> {
        self.stop.store(true, Ordering::Relaxed);
        let mut fates = BTreeMap::new();
        for thread in self.threads {
            fates.extend(thread.join().expect("a writer thread panicked"));
        }
        fates
    }
}

/// Sends a request; `None` when no answer came (the server is gone).
fn try_send(request: reqwest::blocking::RequestBuilder) -> Option<(u16, Value)> {
    let response = request.send().ok()?;
    let status = response.status().as_u16();
    Some((status, response.json().unwrap_or(Value::Null)))
}

/// What lookups by phone on `base` get wrong about `fates`: a row not found by its newest
/// phone, or found by an older one or after its delete. Empty when the index agrees.
pub fn wrong(base: &str, fates: &BTreeMap<String, Fate>) -> Vec<String> {
    let client = client();
    // From the index alone (`index_only`): a normal lookup re-checks every fetched row and
    // drops the stale ones, which would hide an index still naming a row by an older phone.
    let lookup = |phone: &str| -> Vec<String> {
        let (status, body): (u16, Value) = send(
            client
                .get(format!("{base}/v1/tables/user/rows"))
                .query(&[("phone", phone), ("index_only", "true")]),
        );
        assert_eq!(status, 200, "lookup by {phone}: {body}");
        keys(&body)
    };
    let mut wrong = Vec::new();
    for (key, fate) in fates.iter().filter(|(_, fate)| !fate.uncertain) {
        if let Some(phone) = &fate.phone
            && !lookup(phone).contains(key)
        {
            wrong.push(format!("{key} not found by its phone {phone}"));
        }
        for phone in &fate.older {
            if lookup(phone).contains(key) {
                let what = if fate.deleted { "deleted" } else { "older" };
                wrong.push(format!(
                    "{key} still indexed under its {what} phone {phone}"
                ));
            }
        }
    }
    wrong
}

/// Waits until [`wrong`] is empty, or fails naming how many rows are wrong and a few of them.
pub fn assert_all_found(base: &str, fates: &BTreeMap<String, Fate>, timeout: Duration) {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let wrong = wrong(base, fates);
        if wrong.is_empty() {
            return;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "{} wrong answers about the {} rows written during the job, e.g. {:?}",
                wrong.len(),
                fates.len(),
                &wrong[..wrong.len().min(5)]
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The reindex-under-writes check of every shape: two writers over the rows `uid(0) ..
/// uid(rows - 1)` of table `user` on `base` while `hbidx [--config FILE] reindex user
/// --from-store --server base` runs; then every acknowledged write is found by its newest phone
/// and by no older one (waiting up to `settle` for the index to catch up), and `verify --full`
/// finds no drift. At least `min_during` writes must land during the job.
pub fn reindex_under_writes(
    base: &str,
    config: Option<&str>,
    rows: u64,
    uid: fn(u64) -> String,
    min_during: u64,
    settle: Duration,
) {
    let writer = start(base, rows, uid, 2, 57);
    let acknowledged = writer.acknowledged.clone();
    eventually("the writers under way", Duration::from_secs(30), || {
        (acknowledged.load(Ordering::Relaxed) >= 100).then_some(())
    });
    let before = acknowledged.load(Ordering::Relaxed);
    let mut args = Vec::new();
    if let Some(config) = config {
        args.extend(["--config", config]);
    }
    args.extend(["reindex", "user", "--from-store", "--server", base]);
    let (code, out) = cli(&args);
    let during = acknowledged.load(Ordering::Relaxed) - before;
    let fates = writer.stop();
    assert_eq!(code, 0, "{out}");
    assert!(
        during >= min_during,
        "only {during} writes during the reindex"
    );
    assert_all_found(base, &fates, settle);
    assert_no_drift(base, config);
    eprintln!(
        "{during} writes during the reindex, {} rows written in all",
        fates.len()
    );
}
