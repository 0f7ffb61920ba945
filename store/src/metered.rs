//! [`MeteredStore`]: a [`RowStore`] decorator that times every call and counts failures.
//!
//! It wraps whatever store the process runs on (embedded today, HBase Thrift next), so the
//! query path records store health the same way for both, and the stores themselves stay free
//! of metrics code. Labels are the store's name and the operation, a fixed set; table names
//! are deliberately left out here (they are on the index metrics) to keep one series per call
//! kind.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use hbidx_schema::model::Mutation;

use crate::api::{Row, RowStore, ScanBatch, ScanRequest, WriteReceipt};
use crate::error::{Result, StoreError};

const OPS: [&str; 3] = ["get_rows", "scan", "mutate"];

/// Times and counts the calls of an inner store:
/// `hbidx_store_call_duration_seconds{store, op}` (a histogram, every call, failed or not) and
/// `hbidx_store_errors_total{store, op, kind}`.
pub struct MeteredStore {
    inner: Arc<dyn RowStore>,
    name: &'static str,
    /// `hbidx_store_call_duration_seconds` per op, in [`OPS`] order: registered once, because
    /// going through the recorder's registry on every call was a visible part of a lookup.
    durations: [metrics::Histogram; 3],
}

impl MeteredStore {
    /// `name` labels the series (`embedded`, `thrift`): a constant, never a host or a table.
    pub fn new(inner: Arc<dyn RowStore>, name: &'static str) -> Self {
        // Every error series exported at 0 from the start (3 ops x 9 kinds), so `rate()` works
        // and "no errors" is distinguishable from "no data".
        for op in OPS {
            for kind in StoreError::KINDS {
                metrics::counter!(
                    "hbidx_store_errors_total",
                    "store" => name,
                    "op" => op,
                    "kind" => kind,
                )
                .increment(0);
            }
        }
        let durations = OPS.map(|op| {
            metrics::histogram!(
                "hbidx_store_call_duration_seconds",
                "store" => name,
                "op" => op,
            )
        });
        Self {
            inner,
            name,
            durations,
        }
    }

    fn observe<T>(&self, op: &'static str, started: Instant, result: &Result<T>) {
        if let Some(at) = OPS.iter().position(|known| *known == op) {
            self.durations[at].record(started.elapsed().as_secs_f64());
        }
        if let Err(err) = result {
            metrics::counter!(
                "hbidx_store_errors_total",
                "store" => self.name,
                "op" => op,
                "kind" => err.kind(),
            )
            .increment(1);
        }
    }
}

#[async_trait]
impl RowStore for MeteredStore {
    async fn get_rows(
        &self,
        table: &str,
        rowkeys: &[Vec<u8>],
        columns: Option<&[String]>,
    ) -> Result<Vec<Option<Row>>> {
        let started = Instant::now();
        let result = self.inner.get_rows(table, rowkeys, columns).await;
        self.observe("get_rows", started, &result);
        result
    }

    async fn scan(&self, table: &str, request: &ScanRequest) -> Result<ScanBatch> {
        let started = Instant::now();
        let result = self.inner.scan(table, request).await;
        self.observe("scan", started, &result);
        result
    }

    async fn mutate(&self, mutations: Vec<Mutation>) -> Result<WriteReceipt> {
        let started = Instant::now();
        let result = self.inner.mutate(mutations).await;
        self.observe("mutate", started, &result);
        result
    }

    async fn health(&self) -> Result<()> {
        // Not timed: a periodic probe, not a call of the query path.
        self.inner.health().await
    }

    fn tables(&self) -> Vec<String> {
        self.inner.tables()
    }
}

impl StoreError {
    /// Every value [`StoreError::kind`] returns.
    pub const KINDS: [&'static str; 15] = [
        "unknown_table",
        "table_exists",
        "configured_table",
        "gateway_bind",
        "storage",
        "corrupt",
        "invalid_mutation",
        "invalid_request",
        "unavailable",
        "table_missing",
        "table_disabled",
        "rejected",
        "storage_full",
        "writes_halted",
        "config",
    ];

    /// A short, fixed name for the error's variant: the `kind` label of
    /// `hbidx_store_errors_total` (the message may carry keys, and is unbounded).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::UnknownTable(_) => "unknown_table",
            StoreError::TableExists(_) => "table_exists",
            StoreError::ConfiguredTable(_) => "configured_table",
            StoreError::GatewayBind { .. } => "gateway_bind",
            StoreError::Storage(_) => "storage",
            StoreError::Corrupt { .. } => "corrupt",
            StoreError::InvalidMutation { .. } => "invalid_mutation",
            StoreError::InvalidRequest { .. } => "invalid_request",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::TableMissing { .. } => "table_missing",
            StoreError::TableDisabled { .. } => "table_disabled",
            StoreError::Rejected(_) => "rejected",
            StoreError::StorageFull { .. } => "storage_full",
            StoreError::WritesHalted { .. } => "writes_halted",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EmbeddedStore;
    use hbidx_schema::model::CellOp;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    #[test]
    fn calls_and_errors_are_recorded_by_op() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(EmbeddedStore::open(dir.path(), &["user".to_string()]).unwrap());
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        metrics::with_local_recorder(&recorder, || {
            let store = MeteredStore::new(inner, "embedded");
            runtime.block_on(async {
                let put = Mutation {
                    table: "user".into(),
                    rowkey: b"r1".to_vec(),
                    ops: vec![CellOp::Put {
                        column: "info:name".into(),
                        value: b"x".to_vec(),
                        ts: 1,
                    }],
                };
                store.mutate(vec![put]).await.unwrap();
                store
                    .get_rows("user", &[b"r1".to_vec()], None)
                    .await
                    .unwrap();
                assert!(store.get_rows("nope", &[], None).await.is_err());
            })
        });
        let mut histograms = Vec::new();
        let mut errors = Vec::new();
        let mut zeros = 0;
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            match (key.key().name(), value) {
                ("hbidx_store_call_duration_seconds", DebugValue::Histogram(samples)) => {
                    histograms.push((labels.join(","), samples.len()))
                }
                ("hbidx_store_errors_total", DebugValue::Counter(n)) if n > 0 => {
                    errors.push((labels.join(","), n))
                }
                ("hbidx_store_errors_total", DebugValue::Counter(_)) => zeros += 1,
                _ => {}
            }
        }
        histograms.sort();
        assert_eq!(zeros, OPS.len() * StoreError::KINDS.len() - 1);
        assert_eq!(
            histograms,
            vec![
                ("store=embedded,op=get_rows".to_string(), 2),
                ("store=embedded,op=mutate".to_string(), 1),
                // Registered up front, so the series exists before the first scan.
                ("store=embedded,op=scan".to_string(), 0),
            ]
        );
        assert_eq!(
            errors,
            vec![(
                "store=embedded,op=get_rows,kind=unknown_table".to_string(),
                1
            )]
        );
    }
}
