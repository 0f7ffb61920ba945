//! Wiring for `hbidx serve` and `hbidx demo`: open the store, one index and one indexer thread
//! per table, and the HTTP service on top. One process owns a data dir: the store and every
//! index writer take locks on their directories.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use hbidx_indexer::{ChangeFeedSource, CommitPolicy, IndexerHandle, WriterOptions};
use hbidx_query::{AppState, SharedState, TableRuntime};
use hbidx_schema::config::Config;
use hbidx_store::{EmbeddedStore, RowStore};

pub struct Runtime {
    pub store: Arc<EmbeddedStore>,
    pub indexers: Vec<IndexerHandle>,
    pub state: SharedState,
}

/// Opens everything under `data_dir`: `store/` (fjall) and `index/<table>/` (tantivy).
pub fn open(config: &Config, data_dir: &Path, policy: &CommitPolicy) -> Result<Runtime> {
    let table_names: Vec<String> = config.tables.iter().map(|t| t.name.clone()).collect();
    let store_dir = data_dir.join("store");
    let store = Arc::new(
        EmbeddedStore::open(&store_dir, &table_names)
            .with_context(|| format!("opening the row store in {}", store_dir.display()))?,
    );
    let mut indexers = Vec::new();
    let mut tables = Vec::new();
    for table in &config.tables {
        let table = Arc::new(table.clone());
        let index_dir = data_dir.join("index").join(&table.name);
        let (writer, searcher) =
            hbidx_indexer::open_table_index(&index_dir, table.clone(), &WriterOptions::default())
                .with_context(|| format!("opening the index of table \"{}\"", table.name))?;
        let source = ChangeFeedSource::new(store.clone(), table.name.clone());
        let handle = hbidx_indexer::spawn(writer, Box::new(source), policy.clone())
            .with_context(|| format!("starting the indexer of table \"{}\"", table.name))?;
        tables.push(TableRuntime {
            config: table,
            searcher,
            indexed: handle.indexed.clone(),
            stats: handle.stats.clone(),
        });
        indexers.push(handle);
    }
    let row_store: Arc<dyn RowStore> = store.clone();
    let state = Arc::new(AppState::new(row_store, tables));
    Ok(Runtime {
        store,
        indexers,
        state,
    })
}

impl Runtime {
    /// Waits until every table's index covers its change feed up to now.
    pub async fn wait_caught_up(&self, timeout: Duration) -> Result<()> {
        for table in self.state.tables.values() {
            let target = self.store.last_offset(&table.config.name);
            let mut indexed = table.indexed.clone();
            tokio::time::timeout(
                timeout,
                indexed.wait_for(|cp| {
                    cp.position(hbidx_indexer::CHANGE_FEED, 0).unwrap_or(0) >= target
                }),
            )
            .await
            .with_context(|| {
                format!(
                    "the index of \"{}\" did not catch up in time",
                    table.config.name
                )
            })?
            .context("indexer stopped")?;
        }
        Ok(())
    }

    /// Serves HTTP until Ctrl-C / SIGTERM, then commits and stops the indexers.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> Result<()> {
        let app = hbidx_query::app(self.state.clone());
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown_signal())
            .await
            .context("http server failed")?;
        tracing::info!("shutting down: committing indexes");
        let indexers = self.indexers;
        tokio::task::spawn_blocking(move || {
            for handle in indexers {
                handle.shutdown();
            }
        })
        .await
        .context("indexer shutdown")?;
        Ok(())
    }
}

pub async fn bind(listen: SocketAddr) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
