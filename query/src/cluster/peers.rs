//! The other instances of the tier: which replicas are ready, and the calls made to them.
//!
//! A replica is ready while its `/readyz` answers 200 (probed every second) and its last call
//! didn't fail: a failed call marks it not ready at once, so the next lookup goes to another
//! replica of the shard without waiting for the probe.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hbidx_schema::config::{ClusterConfig, KeyRange};
use hbidx_schema::model::Mutation;
use hbidx_store::Row;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ApiError;

/// One shard's index hits for a lookup (`GET /v1/internal/tables/{table}/hits`).
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct ShardHits {
    /// Rowkeys in rowkey order (raw bytes).
    #[schema(value_type = Vec<Vec<u8>>)]
    pub rowkeys: Vec<Vec<u8>>,
    /// The shard has more hits after the last one.
    pub has_more: bool,
    /// The rows as this shard's index keeps them, aligned with `rowkeys`, when the lookup is
    /// answered from the index (every requested column kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub kept: Option<Vec<Option<Row>>>,
}

/// One shard's hits for a batch lookup, per value (`null` for a value that can't be looked
/// up; the fan-out node reports why itself).
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct BatchShardHits {
    pub values: Vec<Option<ShardHits>>,
}

/// A forwarded write's answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Applied {
    /// Whether the answer waited until the shard's index had the write.
    pub indexed: bool,
}

struct Replica {
    url: String,
    ready: AtomicBool,
}

/// This instance's view of the tier.
pub struct Peers {
    config: Arc<ClusterConfig>,
    own_shard: usize,
    own_replica: usize,
    replicas: Vec<Vec<Replica>>,
    client: reqwest::Client,
    key: Option<String>,
    /// Round-robin start among a shard's replicas.
    turn: AtomicUsize,
}

impl Peers {
    /// `config` must have this instance's identity set; `key` is sent to the other instances
    /// (a key with the `cluster` scope).
    pub fn new(config: Arc<ClusterConfig>, key: Option<String>) -> Result<Self, ApiError> {
        let (Some(own_shard), Some(own_replica)) = (config.shard, config.replica) else {
            return Err(ApiError::Internal(
                "the cluster identity (shard, replica) is not set".into(),
            ));
        };
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(1)))
            // Peers are few and called all the time: keep their connections, but give an idle
            // one up before the peer does (`[server] header_timeout_ms`, 5 s by default), so a
            // call never goes out on a connection the peer is closing.
            .pool_idle_timeout(Duration::from_secs(4))
            .build()
            .map_err(|err| ApiError::Internal(format!("building the peer client: {err}")))?;
        let replicas = config
            .shards
            .iter()
            .map(|urls| {
                urls.iter()
                    .map(|url| Replica {
                        url: url.clone(),
                        // Optimistic until a call or the probe says otherwise: instances of a
                        // tier start in any order.
                        ready: AtomicBool::new(true),
                    })
                    .collect()
            })
            .collect();
        Ok(Self {
            config,
            own_shard,
            own_replica,
            replicas,
            client,
            key,
            turn: AtomicUsize::new(0),
        })
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    pub fn shard_count(&self) -> usize {
        self.replicas.len()
    }

    pub fn is_own(&self, shard: usize) -> bool {
        shard == self.own_shard
    }

    pub fn own(&self) -> (usize, usize) {
        (self.own_shard, self.own_replica)
    }

    pub fn range(&self, table: &str, shard: usize) -> KeyRange {
        self.config.range(table, shard)
    }

    pub fn shard_of(&self, table: &str, rowkey: &[u8]) -> usize {
        self.config.shard_of(table, rowkey)
    }

    /// Replica URLs of `shard` with whether each is ready now (this instance counts as ready).
    pub fn replicas(&self, shard: usize) -> Vec<(String, bool, bool)> {
        self.replicas.get(shard).map_or_else(Vec::new, |replicas| {
            replicas
                .iter()
                .enumerate()
                .map(|(index, replica)| {
                    let own = shard == self.own_shard && index == self.own_replica;
                    (
                        replica.url.clone(),
                        own || replica.ready.load(Ordering::Relaxed),
                        own,
                    )
                })
                .collect()
        })
    }

    fn request(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    /// Calls one ready replica of `shard` after another (starting at a rotating one) until
    /// one answers 200. A replica that can't be reached, times out or answers 5xx is marked not
    /// ready; one that answers 4xx is not (a 429 or a refused key is about this call, not the
    /// replica's health: marking it down would let a busy tier take its own shards out). What
    /// each replica answered is logged here; the caller's 503 names the shard and what kind of
    /// failure, never a peer's URL or reply.
    async fn call<T: DeserializeOwned>(
        &self,
        shard: usize,
        build: impl Fn(&reqwest::Client, &str) -> reqwest::RequestBuilder,
    ) -> Result<T, ApiError> {
        let replicas = self.replicas.get(shard).ok_or_else(|| {
            ApiError::Internal(format!("shard {shard} is not in the cluster layout"))
        })?;
        let start = self.turn.fetch_add(1, Ordering::Relaxed);
        let mut failures = Failures::default();
        for offset in 0..replicas.len() {
            let index = (start + offset) % replicas.len();
            let replica = &replicas[index];
            if shard == self.own_shard && index == self.own_replica {
                continue;
            }
            if !replica.ready.load(Ordering::Relaxed) {
                failures.not_ready += 1;
                continue;
            }
            let started = Instant::now();
            let request = self.request(build(&self.client, &replica.url));
            let outcome = match request.send().await {
                Ok(response) if response.status().is_success() => response
                    .json::<T>()
                    .await
                    .map_err(|err| (Failure::Down, err.to_string())),
                Ok(response) => {
                    let status = response.status();
                    let body = response.text().await.unwrap_or_default();
                    // The front checked the request before fanning it out, so a shard's 400
                    // is about the shard's data (a lookup that matches more than one lookup
                    // walks there): every replica would say the same, and the caller must hear
                    // it as it is.
                    if status == reqwest::StatusCode::BAD_REQUEST
                        && let Some(refusal) = bad_request(&body)
                    {
                        return Err(refusal);
                    }
                    let kind = if status.is_client_error() {
                        Failure::Refused(status.as_u16())
                    } else {
                        Failure::Down
                    };
                    Err((
                        kind,
                        format!(
                            "HTTP {status}: {}",
                            body.chars().take(200).collect::<String>()
                        ),
                    ))
                }
                Err(err) if err.is_timeout() => Err((Failure::Down, "timed out".to_string())),
                Err(err) => Err((Failure::Down, err.to_string())),
            };
            let shard_label = shard.to_string();
            metrics::histogram!("hbidx_shard_call_seconds", "shard" => shard_label.clone())
                .record(started.elapsed().as_secs_f64());
            match outcome {
                Ok(answer) => {
                    metrics::counter!("hbidx_shard_calls_total", "shard" => shard_label, "outcome" => "ok").increment(1);
                    return Ok(answer);
                }
                Err((kind, reason)) => {
                    metrics::counter!("hbidx_shard_calls_total", "shard" => shard_label, "outcome" => "error").increment(1);
                    match kind {
                        Failure::Down => {
                            tracing::warn!(shard, replica = %replica.url, reason = %reason, "shard call failed; marking the replica not ready and trying the next");
                            replica.ready.store(false, Ordering::Relaxed);
                            failures.failed += 1;
                        }
                        Failure::Refused(status) => {
                            tracing::warn!(shard, replica = %replica.url, reason = %reason, "shard call refused; trying the next replica (this one stays ready)");
                            failures.refused.push(status);
                        }
                    }
                }
            }
        }
        Err(ApiError::ShardUnavailable {
            shard,
            reason: failures.describe(),
        })
    }

    /// A lookup's hits in `shard`: the caller's parameters, forwarded in the body.
    pub(crate) async fn hits(
        &self,
        shard: usize,
        table: &str,
        pairs: &[(String, String)],
    ) -> Result<ShardHits, ApiError> {
        let path = format!("/v1/internal/tables/{}/hits", encode(table));
        self.call(shard, |client, url| {
            client.post(format!("{url}{path}")).json(pairs)
        })
        .await
    }

    /// A batch lookup's hits in `shard`.
    pub(crate) async fn batch_hits(
        &self,
        shard: usize,
        table: &str,
        request: &crate::lookup::BatchLookupRequest,
    ) -> Result<BatchShardHits, ApiError> {
        let path = format!("/v1/internal/tables/{}/batch-hits", encode(table));
        self.call(shard, |client, url| {
            client.post(format!("{url}{path}")).json(request)
        })
        .await
    }

    /// Hands written mutations to every ready replica of `shard`; with `wait`, each answers
    /// once its index has them. Ok when at least one replica took them; the error names the
    /// replicas that didn't.
    pub(crate) async fn apply(
        &self,
        shard: usize,
        table: &str,
        mutations: &[Mutation],
        wait: Option<Duration>,
    ) -> Result<usize, String> {
        let Some(replicas) = self.replicas.get(shard) else {
            return Err(format!("shard {shard} is not in the cluster layout"));
        };
        let path = format!("/v1/internal/tables/{}/apply", encode(table));
        let timeout = wait.map(|wait| wait + self.config.timeout);
        let calls = replicas.iter().map(|replica| {
            let url = format!("{}{path}", replica.url);
            async move {
                let mut request = self.request(self.client.post(url).json(mutations));
                if let Some(timeout) = timeout {
                    request = request.query(&[("wait", "indexed")]).timeout(timeout);
                }
                let outcome = match request.send().await {
                    Ok(response) if response.status().is_success() => Ok(()),
                    Ok(response) => Err(format!("HTTP {}", response.status())),
                    Err(err) => Err(err.to_string()),
                };
                if outcome.is_err() {
                    replica.ready.store(false, Ordering::Relaxed);
                }
                (replica.url.as_str(), outcome)
            }
        });
        let outcomes = futures_util::future::join_all(calls).await;
        let took = outcomes
            .iter()
            .filter(|(_, outcome)| outcome.is_ok())
            .count();
        let failed: Vec<String> = outcomes
            .into_iter()
            .filter_map(|(url, outcome)| outcome.err().map(|reason| format!("{url}: {reason}")))
            .collect();
        if !failed.is_empty() {
            tracing::warn!(shard, failed = %failed.join("; "), "a forwarded write did not reach every replica; it reaches them through the topic");
        }
        if took == 0 {
            return Err(failed.join("; "));
        }
        Ok(took)
    }

    /// Asks one replica of `shard` to re-read `rowkeys` from the store and repair its index.
    pub(crate) async fn repair(
        &self,
        shard: usize,
        table: &str,
        rowkeys: &[Vec<u8>],
    ) -> Result<(), ApiError> {
        let path = format!("/v1/internal/tables/{}/repair", encode(table));
        let body = RepairRequest {
            rowkeys: rowkeys.to_vec(),
        };
        let _: serde_json::Value = self
            .call(shard, |client, url| {
                client.post(format!("{url}{path}")).json(&body)
            })
            .await?;
        Ok(())
    }

    /// One replica's shard status (`GET /v1/internal/status`), or why it has none.
    pub(crate) async fn status_of(&self, url: &str) -> Result<serde_json::Value, String> {
        let response = self
            .request(self.client.get(format!("{url}/v1/internal/status")))
            .send()
            .await
            .map_err(|err| err.to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        response.json().await.map_err(|err| err.to_string())
    }

    /// One round of readiness probes of every other replica.
    async fn probe(&self) {
        let calls = self
            .replicas
            .iter()
            .enumerate()
            .flat_map(|(shard, replicas)| {
                replicas
                    .iter()
                    .enumerate()
                    .filter_map(move |(index, replica)| {
                        (shard != self.own_shard || index != self.own_replica).then_some(replica)
                    })
            });
        let probes = calls.map(|replica| async move {
            let ready = matches!(
                self.client.get(format!("{}/readyz", replica.url)).send().await,
                Ok(response) if response.status().is_success()
            );
            let was = replica.ready.swap(ready, Ordering::Relaxed);
            if was != ready {
                tracing::info!(replica = %replica.url, ready, "replica readiness changed");
            }
        });
        futures_util::future::join_all(probes).await;
        for shard in 0..self.replicas.len() {
            let ready = self
                .replicas(shard)
                .iter()
                .filter(|(_, ready, _)| *ready)
                .count();
            metrics::gauge!("hbidx_cluster_replicas_ready", "shard" => shard.to_string())
                .set(ready as f64);
        }
    }
}

/// The body of `POST /v1/internal/tables/{table}/repair`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RepairRequest {
    /// Raw rowkeys to re-read from the store.
    #[schema(value_type = Vec<Vec<u8>>)]
    pub rowkeys: Vec<Vec<u8>>,
}

impl crate::extract::BodyShape for RepairRequest {}

/// A table name in a URL path (names are HBase identifiers, but a `:` of a namespace isn't
/// path-safe everywhere).
fn encode(table: &str) -> String {
    table.replace(':', "%3A")
}

/// Probes the other replicas' readiness every second while the service runs.
pub fn spawn_prober(peers: Arc<Peers>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            peers.probe().await;
        }
    })
}

/// Why a call to one replica failed.
/// A shard's 400 answer as the caller's 400, when it names the field at fault.
fn bad_request(body: &str) -> Option<ApiError> {
    let answer: serde_json::Value = serde_json::from_str(body).ok()?;
    let error = answer.get("error")?;
    if error.get("code")?.as_str()? != "bad_request" {
        return None;
    }
    let field = error.get("field")?.as_str()?.to_string();
    let message = error.get("message")?.as_str()?;
    let reason = message
        .strip_prefix(&format!("{field}: "))
        .unwrap_or(message)
        .to_string();
    Some(ApiError::BadRequest { field, reason })
}

enum Failure {
    /// Unreachable, timed out, 5xx, or an answer that doesn't parse: the replica is marked not
    /// ready.
    Down,
    /// A 4xx: about the call (a refused key, a rate limit, a request it can't take), so the
    /// replica stays ready.
    Refused(u16),
}

/// What a shard's replicas did, for the 503: counts and statuses only, no URL or reply (those
/// are logged where they happen).
#[derive(Default)]
struct Failures {
    not_ready: usize,
    failed: usize,
    refused: Vec<u16>,
}

impl Failures {
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.not_ready > 0 {
            parts.push(format!("{} replica(s) not ready", self.not_ready));
        }
        if self.failed > 0 {
            parts.push(format!("{} replica(s) failed", self.failed));
        }
        if !self.refused.is_empty() {
            let statuses: Vec<String> = self.refused.iter().map(u16::to_string).collect();
            parts.push(format!("refused with HTTP {}", statuses.join(", ")));
        }
        if parts.is_empty() {
            "no other replica".to_string()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layout of two shards: shard 0 is this instance; shard 1's replicas are `shard1`.
    fn peers(shard1: &[String]) -> Peers {
        let urls: Vec<String> = shard1.iter().map(|u| format!("\"{u}\"")).collect();
        let text = format!(
            "{}\n[store]\nkind = \"hbase\"\nthrift = \"127.0.0.1:1\"\n\n[[sources]]\nkind = \
             \"kafka\"\nbrokers = \"127.0.0.1:1\"\ntopic = \"t\"\ntable = \"user\"\nformat = \
             \"json\"\n\n[cluster]\nshards = [[\"http://127.0.0.1:1\"], [{}]]\n",
            hbidx_schema::EXAMPLE_CONFIG,
            urls.join(", ")
        );
        let cluster = hbidx_schema::parse_config(&text)
            .unwrap()
            .cluster
            .unwrap()
            .with_identity(Some(0), Some(0))
            .unwrap();
        Peers::new(Arc::new(cluster), Some("k".into())).unwrap()
    }

    /// A replica that answers 429 stays ready and one that can't be reached is marked not
    /// ready; the 503 names the shard and the kinds of failure, not the peers' URLs or replies.
    #[tokio::test]
    async fn a_refusing_replica_stays_ready_and_the_503_quotes_no_peer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let busy = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(|| async {
            (
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "secret peer reply with 13912345678",
            )
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        // A port nothing listens on: bound, then closed.
        let closed = {
            let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", socket.local_addr().unwrap())
        };
        let peers = peers(&[busy.clone(), closed.clone()]);
        let err = peers.hits(1, "user", &[]).await.unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(err, ApiError::ShardUnavailable { shard: 1, .. }),
            "{message}"
        );
        assert!(
            message.contains("1 replica(s) failed") && message.contains("refused with HTTP 429"),
            "{message}"
        );
        assert!(
            !message.contains("127.0.0.1") && !message.contains("13912345678"),
            "{message}"
        );
        let ready: Vec<bool> = peers
            .replicas(1)
            .into_iter()
            .map(|(_, ready, _)| ready)
            .collect();
        assert_eq!(ready, vec![true, false]);
    }

    /// A shard's 400 naming a field (a lookup that matches more there than one lookup walks)
    /// reaches the caller as that 400, at the first replica: the next would say the same.
    #[tokio::test]
    async fn a_shard_refusing_the_lookup_is_the_callers_400() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let refusing = format!("http://{}", listener.local_addr().unwrap());
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = calls.clone();
        let app = axum::Router::new().fallback(move || {
            counted.fetch_add(1, Ordering::Relaxed);
            async {
                (
                    axum::http::StatusCode::BAD_REQUEST,
                    axum::Json(serde_json::json!({"error": {
                        "code": "bad_request",
                        "field": "name",
                        "message": "name: the lookup matches more than 10 rows",
                    }})),
                )
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        // The second replica can't be reached: asking it would mark it not ready.
        let closed = {
            let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", socket.local_addr().unwrap())
        };
        let peers = peers(&[refusing, closed]);
        let err = peers.hits(1, "user", &[]).await.unwrap_err();
        match err {
            ApiError::BadRequest { field, reason } => {
                assert_eq!(field, "name");
                assert_eq!(reason, "the lookup matches more than 10 rows");
            }
            other => panic!("{other}"),
        }
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        assert!(peers.replicas(1).into_iter().all(|(_, ready, _)| ready));
    }
}
