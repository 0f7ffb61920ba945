//! Wiring for `hbidx serve` and `hbidx demo`: open the store, one index and one indexer thread
//! per table, and the HTTP service on top. One process owns a data dir: the store and every
//! index writer take locks on their directories.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use hbidx_indexer::kafka::{DeadLetterFile, KafkaPublisher, KafkaSource};
use hbidx_indexer::{
    ApplyToStore, ChangeFeedSource, CommitPolicy, IndexerHandle, Source, WriterOptions,
};
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
    let kafka_sources = hbidx_indexer::config::kafka_sources(config)?;
    let instance_id = if kafka_sources.is_empty() {
        String::new()
    } else {
        instance_id(data_dir)?
    };
    let mut indexers = Vec::new();
    let mut tables = Vec::new();
    for table in &config.tables {
        let table = Arc::new(table.clone());
        let index_dir = data_dir.join("index").join(&table.name);
        let (writer, searcher) =
            hbidx_indexer::open_table_index(&index_dir, table.clone(), &WriterOptions::default())
                .with_context(|| format!("opening the index of table \"{}\"", table.name))?;
        let kafka = kafka_sources.iter().find(|s| s.table == table.name);
        let (source, publisher): (Box<dyn Source>, _) = match kafka {
            Some(kafka) => {
                let group = kafka.group_id(&instance_id);
                let dead_letters = DeadLetterFile::new(&data_dir.join("deadletters"), &table.name);
                let consumer = KafkaSource::new(kafka.clone(), table.clone(), &group, dead_letters)
                    .with_context(|| format!("connecting table \"{}\" to Kafka", table.name))?;
                tracing::info!(table = %table.name, topic = %kafka.topic, group = %group, format = kafka.format.as_str(), "indexing from Kafka");
                let publisher = KafkaPublisher::new(kafka, table.clone())?;
                // The embedded store holds the rows, so consumed events are applied to it too.
                (
                    Box::new(ApplyToStore::new(consumer, store.clone())),
                    Some(publisher),
                )
            }
            None => (
                Box::new(ChangeFeedSource::new(store.clone(), table.name.clone())),
                None,
            ),
        };
        let handle = hbidx_indexer::spawn(writer, source, policy.clone())
            .with_context(|| format!("starting the indexer of table \"{}\"", table.name))?;
        tables.push(TableRuntime {
            config: table,
            searcher,
            indexed: handle.indexed.clone(),
            stats: handle.stats.clone(),
            publisher,
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

/// This instance's id, kept in `<data dir>/instance-id` so that a restart keeps its Kafka
/// consumer group and another data dir (another replica) gets its own.
fn instance_id(data_dir: &Path) -> Result<String> {
    let path = data_dir.join("instance-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim();
        if !id.is_empty() {
            return Ok(id.to_string());
        }
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let id = format!("{:016x}", rand::random::<u64>());
    std::fs::write(&path, &id).with_context(|| format!("writing {}", path.display()))?;
    Ok(id)
}

impl Runtime {
    /// Waits until every table's index covers its change feed up to now.
    pub async fn wait_caught_up(&self, timeout: Duration) -> Result<()> {
        for table in self.state.tables.values() {
            if table.publisher.is_some() {
                // Fed from Kafka: there is no local feed to catch up with.
                continue;
            }
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
