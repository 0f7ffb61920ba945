//! `GET /v1/cluster`: the tier as this instance sees it.

use axum::Json;
use axum::extract::State;
use hbidx_schema::codec::printable;

use crate::{ApiError, SharedState};

/// Every shard of the tier: its rowkey range per table and its replicas, each with whether
/// this instance counts it ready and, from the replica itself, rows, documents and lag per
/// table.
#[utoipa::path(
    get,
    path = "/v1/cluster",
    tag = "ops",
    security(("api_key" = ["admin"])),
    responses(
        (status = 200, description = "Shards, ranges, replicas, readiness, rows and lag", body = Object),
        (status = 404, description = "This instance is not part of a sharded tier", body = crate::ErrorResponse),
    )
)]
pub(crate) async fn cluster_status(
    State(state): State<SharedState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let peers = state.peers.as_ref().ok_or_else(|| ApiError::NotFound {
        what: "[cluster] (this instance indexes every row)".into(),
    })?;
    let mut tables: Vec<&String> = state.tables.keys().collect();
    tables.sort();
    let own = super::local_status(&state);
    let mut shards = Vec::with_capacity(peers.shard_count());
    for shard in 0..peers.shard_count() {
        let ranges: serde_json::Map<String, serde_json::Value> = tables
            .iter()
            .map(|table| {
                let range = peers.range(table, shard);
                (
                    (*table).clone(),
                    serde_json::json!({
                        "start": printable(&range.start),
                        "stop": range.stop.as_deref().map(printable),
                    }),
                )
            })
            .collect();
        let replicas = peers.replicas(shard);
        let statuses =
            futures_util::future::join_all(replicas.iter().map(|(url, _, own_replica)| {
                let own = own.clone();
                async move {
                    if *own_replica {
                        Ok(own)
                    } else {
                        peers.status_of(url).await
                    }
                }
            }))
            .await;
        let replicas: Vec<serde_json::Value> = replicas
            .into_iter()
            .zip(statuses)
            .map(|((url, ready, own_replica), status)| {
                let mut entry = serde_json::json!({
                    "url": url,
                    "ready": ready,
                    "self": own_replica,
                });
                match status {
                    Ok(status) => entry["tables"] = status["tables"].clone(),
                    Err(error) => entry["error"] = error.into(),
                }
                entry
            })
            .collect();
        let ready = replicas.iter().filter(|r| r["ready"] == true).count();
        shards.push(serde_json::json!({
            "shard": shard,
            "ready_replicas": ready,
            "ranges": ranges,
            "replicas": replicas,
        }));
    }
    let (shard, replica) = peers.own();
    Ok(Json(serde_json::json!({
        "shard": shard,
        "replica": replica,
        "shards": shards,
    })))
}
