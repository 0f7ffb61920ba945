//! Wiring for `hbidx serve` and `hbidx demo`: open the store, one index and one indexer thread
//! per table, and the HTTP service on top. One process owns a data dir: the store and every
//! index writer take locks on their directories.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result};
use hbidx_gateway::{ConfiguredTable, GatewayOptions, GatewayServer};
use hbidx_indexer::KafkaPublisher;
use hbidx_indexer::{
    ApplyToStore, ChangeFeedSource, CommitPolicy, IdleSource, IndexerHandle, Prefetch, Source,
    WriterOptions,
};
use hbidx_indexer::{DeadLetterFile, KafkaSource, KafkaSourceConfig};
use hbidx_query::{AppState, SharedState, TableRuntime};
use hbidx_schema::config::{HbidxConfig, ServerConfig, TableConfig};
use hbidx_schema::{MemoryBudget, MemoryPart};
use hbidx_store::{EmbeddedStore, HbaseStore, MeteredStore, RowStore, StoreConfig, TableSpec};
use metrics_exporter_prometheus::PrometheusHandle;

/// The running indexers by table. Shared with the reindexer, which replaces a table's indexer
/// when it swaps in a rebuilt index.
pub type Indexers = Arc<Mutex<HashMap<String, IndexerHandle>>>;

/// One hbidx instance as [`open`] leaves it: the store, the indexers and the query service's
/// state. [`Instance::start_http`] and [`Instance::serve`] put it on the network;
/// [`Instance::shutdown_indexers`] commits and stops it.
pub struct Instance {
    /// The embedded store, when it holds the rows (`[store] kind = "embedded"`, the default).
    pub embedded: Option<Arc<EmbeddedStore>>,
    pub indexers: Indexers,
    pub state: SharedState,
}

/// What it takes to start a table's live indexer, at open and again after a reindex swap.
pub struct Wiring {
    /// The embedded store, when it holds the rows; `None` with the HBase store.
    pub embedded: Option<Arc<EmbeddedStore>>,
    /// Where rows are read: what a reindex `--from-store` scans.
    pub rows: Arc<dyn RowStore>,
    pub data_dir: PathBuf,
    pub instance_id: String,
    pub kafka: Vec<KafkaSourceConfig>,
    pub policy: CommitPolicy,
    /// Every index writer's options (live, reindex shadows): heap and caches from `[memory]`.
    pub writer_options: WriterOptions,
    /// `[cluster]` with this instance's identity: only its shard's rows are indexed.
    pub cluster: Option<hbidx_schema::config::ClusterConfig>,
    /// Rows per page of a store reindex's scan (`[store] scan_caching` for HBase).
    pub scan_rows: usize,
}

impl Wiring {
    pub fn index_dir(&self, table: &str) -> PathBuf {
        self.data_dir.join("index").join(table)
    }

    pub fn kafka_for(&self, table: &str) -> Option<&KafkaSourceConfig> {
        self.kafka.iter().find(|s| s.table == table)
    }

    /// The rowkeys of `table` this instance indexes (its shard, `[cluster]`); `None`: all.
    pub fn own_range(&self, table: &str) -> Option<hbidx_schema::config::KeyRange> {
        self.cluster.as_ref()?.own_range(table)
    }

    /// The live source of `table`: its Kafka topic (applied to the embedded store too, when
    /// that holds the rows), or the embedded store's change feed. With the HBase store and no
    /// topic there is no event stream: the index changes only by reindex, repairs and this
    /// instance's own writes.
    pub fn live_source(&self, table: &Arc<TableConfig>) -> Result<Box<dyn Source>> {
        let Some(store) = &self.embedded else {
            return Ok(match self.kafka_for(&table.name) {
                Some(kafka) => {
                    let group = kafka.group_id(&self.instance_id);
                    let dead_letters = DeadLetterFile::new(
                        &self.data_dir.join("deadletters"),
                        &table.name,
                        kafka.dead_letter_max_bytes,
                    );
                    let own_range = self.own_range(&table.name);
                    let sharded = own_range.is_some();
                    let consumer =
                        KafkaSource::new(kafka.clone(), table.clone(), &group, dead_letters)
                            .with_context(|| {
                                format!("connecting table \"{}\" to Kafka", table.name)
                            })?
                            .with_own_range(own_range);
                    tracing::info!(table = %table.name, topic = %kafka.topic, group = %group, format = kafka.format.as_str(), sharded, "indexing from Kafka (rows are in HBase)");
                    // Decoding runs on the polling thread, one batch ahead of the index.
                    Box::new(Prefetch::new(consumer)?)
                }
                None => {
                    tracing::warn!(table = %table.name, "no [[sources]] for this HBase table: its index changes only by `reindex --from-store`, repairs and writes through this instance");
                    Box::new(IdleSource::default())
                }
            });
        };
        Ok(match self.kafka_for(&table.name) {
            Some(kafka) => {
                let group = kafka.group_id(&self.instance_id);
                let dead_letters = DeadLetterFile::new(
                    &self.data_dir.join("deadletters"),
                    &table.name,
                    kafka.dead_letter_max_bytes,
                );
                let consumer = KafkaSource::new(kafka.clone(), table.clone(), &group, dead_letters)
                    .with_context(|| format!("connecting table \"{}\" to Kafka", table.name))?;
                tracing::info!(table = %table.name, topic = %kafka.topic, group = %group, format = kafka.format.as_str(), "indexing from Kafka");
                // The embedded store holds the rows, so consumed events are applied to it too:
                // decode and store write on the polling thread, one batch ahead of the index.
                Box::new(Prefetch::new(ApplyToStore::new(consumer, store.clone()))?)
            }
            None => Box::new(ChangeFeedSource::new(store.clone(), table.name.clone())),
        })
    }
}

/// Where the index of a change-feed table stands against the store's feed, checked at open,
/// before the indexer resumes: `Some(reason)` when the index can't resume from its checkpoint.
///
/// - **Ahead of the store**: the checkpoint covers offsets the store doesn't have. The index
///   commits only after the store's journal is synced (the change feed's commit barrier), so
///   this takes a lost or restored-from-older-backup store, or a filesystem that lied about a
///   sync. New writes would get offsets the index believes it has applied, and never be
///   indexed; and the index may hold rows the store lost.
/// - **Behind the feed's floor**: events after the checkpoint were trimmed, so they can't be
///   replayed; the rows they changed would stay stale in the index.
///
/// Either way the index is rebuilt from the store's rows (the store is the truth), logged as
/// an error and counted (`hbidx_index_rebuilt_total{reason}`).
fn feed_mismatch(index_dir: &Path, table: &str, store: &EmbeddedStore) -> Result<Option<String>> {
    // No index at all counts as offset 0: a new one replays the feed from its start, which is
    // only whole while nothing was trimmed.
    let at = if index_dir.join("meta.json").exists() {
        let Ok(checkpoint) = hbidx_indexer::committed_checkpoint(index_dir) else {
            // Not readable with this schema: `open_or_rebuild_index` rebuilds it anyway.
            return Ok(None);
        };
        checkpoint
            .position(hbidx_indexer::CHANGE_FEED, 0)
            .unwrap_or(0)
    } else {
        0
    };
    let last = store.last_offset(table);
    let floor = store.feed_floor(table)?;
    Ok(if at > last {
        Some(format!(
            "the index's checkpoint (change feed offset {at}) is ahead of the store's last offset {last}"
        ))
    } else if at < floor {
        Some(format!(
            "the change feed was trimmed to offset {floor}, past the index's checkpoint {at}: the events between are gone"
        ))
    } else {
        None
    })
}

/// Opens a table's index. One built for another schema (the table's fields changed, or an
/// older hbidx wrote another layout) is rebuilt from the embedded store first, since the store
/// holds every row; with the rows in HBase, a start-up scan of the whole table is not something
/// to do implicitly, so the error says what to run.
fn open_or_rebuild_index(
    index_dir: &Path,
    table: &Arc<TableConfig>,
    embedded: Option<&EmbeddedStore>,
    options: &WriterOptions,
) -> Result<(
    hbidx_indexer::TableIndexWriter,
    hbidx_indexer::TableSearcher,
)> {
    match hbidx_indexer::open_table_index(index_dir, table.clone(), options) {
        Err(hbidx_indexer::IndexerError::SchemaMismatch { .. }) => {}
        opened => return Ok(opened?),
    }
    let Some(store) = embedded else {
        anyhow::bail!(
            "{} was built for another schema (the table's fields or blind key changed, or an older hbidx wrote it) and the rows are in HBase, so it is not rebuilt at start: move it aside (mv {dir} {dir}.outdated), start hbidx, then run `hbidx --config FILE reindex {table} --from-store` (or --from-kafka)",
            index_dir.display(),
            dir = index_dir.display(),
            table = table.name,
        );
    };
    tracing::warn!(table = %table.name, dir = %index_dir.display(), "the index was built for another schema; rebuilding it from the store");
    let checkpoint = hbidx_indexer::committed_checkpoint(index_dir)
        .with_context(|| format!("reading the checkpoint of {}", index_dir.display()))?;
    crate::reindex::rebuild_from_store(index_dir, table, store, options, checkpoint)
        .with_context(|| format!("rebuilding {} from the store", index_dir.display()))?;
    Ok(hbidx_indexer::open_table_index(
        index_dir,
        table.clone(),
        options,
    )?)
}

/// The process's Prometheus recorder, installed on first use: the `metrics` facade has one
/// global recorder, so it is set once here rather than by each command. `None` (and a warning)
/// if it could not be installed; the service then runs without `/metrics`.
fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| match hbidx_query::install_recorder() {
            Ok(handle) => Some(handle),
            Err(err) => {
                tracing::warn!(error = %err, "metrics recorder not installed; /metrics is off");
                None
            }
        })
        .clone()
}

/// Opens everything under `data_dir`: `store/` (fjall, unless the rows are in HBase) and
/// `index/<table>/` (tantivy). `auth` holds the API keys the service will accept.
pub fn open(
    config: &HbidxConfig,
    data_dir: &Path,
    policy: &CommitPolicy,
    auth: hbidx_query::auth::Auth,
) -> Result<Instance> {
    let rows = open_rows(config, data_dir)?;
    open_with_rows(config, data_dir, policy, auth, rows)
}

/// Where the rows are, opened: the embedded store (if it holds them) and the store lookups read.
pub struct OpenedRows {
    embedded: Option<Arc<EmbeddedStore>>,
    rows: Arc<dyn RowStore>,
}

impl OpenedRows {
    /// The embedded store, when the rows are in it (`[store] kind = "embedded"`).
    pub fn embedded(&self) -> Option<&Arc<EmbeddedStore>> {
        self.embedded.as_ref()
    }
}

/// Opens the row store alone: the first half of [`open`]. For the embedded store this is
/// fjall's recovery (journal replay), which `hbidx bench` times apart from indexing.
pub fn open_rows(config: &HbidxConfig, data_dir: &Path) -> Result<OpenedRows> {
    // The HBase store's breaker registers its gauge when it is built, and a handle taken
    // before the recorder exists stays a no-op for good (see `open_with_rows`).
    metrics_handle();
    // The config's families go with each table, for the Thrift gateway's family checks.
    let table_specs: Vec<TableSpec> = config
        .tables
        .iter()
        .map(|table| TableSpec {
            name: table.name.clone(),
            families: Some(table.families.iter().map(|f| f.name.clone()).collect()),
            // `[[tables.families]] versions`: the store keeps older versions for these only.
            versions: table
                .families
                .iter()
                .filter(|family| family.versions > 1)
                .map(|family| (family.name.clone(), family.versions))
                .collect(),
        })
        .collect();
    let (embedded, rows): (Option<Arc<EmbeddedStore>>, Arc<dyn RowStore>) = match config
        .store
        .clone()
    {
        StoreConfig::Embedded(_) => {
            let store_dir = data_dir.join("store");
            // fjall syncs what it writes inside its directory, not the directory's own name.
            hbidx_store::durable::create_dir_all(&store_dir, None)
                .with_context(|| format!("creating {}", store_dir.display()))?;
            let store = Arc::new(
                EmbeddedStore::open_tables(&store_dir, &table_specs, store_options(config))
                    .with_context(|| format!("opening the row store in {}", store_dir.display()))?,
            );
            (Some(store.clone()), store)
        }
        StoreConfig::Hbase(hbase) => {
            let tables: Vec<(String, String)> = config
                .tables
                .iter()
                .map(|t| (t.name.clone(), t.full_name()))
                .collect();
            tracing::info!(thrift = %hbase.thrift, "rows are in HBase (Thrift1)");
            (None, Arc::new(HbaseStore::new(hbase, &tables)))
        }
    };
    Ok(OpenedRows { embedded, rows })
}

/// The second half of [`open`]: the indexes, one indexer thread per table, and the service
/// state, over rows opened by [`open_rows`].
pub fn open_with_rows(
    config: &HbidxConfig,
    data_dir: &Path,
    policy: &CommitPolicy,
    auth: hbidx_query::auth::Auth,
    opened: OpenedRows,
) -> Result<Instance> {
    // Before anything records: the indexer threads (and the HBase store's breaker) register
    // their metric handles when they start, and a handle taken before the recorder exists
    // stays a no-op for good.
    let metrics = metrics_handle();
    // Before any thread starts: a cursor key that can't be used stops the start here.
    let cursors = crate::keys::serve_cursors(config)?;
    let OpenedRows { embedded, rows } = opened;
    let mut kafka = config.sources.clone();
    bound_prefetch(&config.memory, &mut kafka);
    let writer_options = writer_options(config);
    let instance_id = if kafka.is_empty() {
        String::new()
    } else {
        instance_id(data_dir)?
    };
    let wiring = Arc::new(Wiring {
        embedded: embedded.clone(),
        rows: rows.clone(),
        data_dir: data_dir.to_path_buf(),
        instance_id,
        kafka,
        policy: policy.clone(),
        writer_options: writer_options.clone(),
        cluster: config.cluster.clone(),
        scan_rows: match &config.store {
            hbidx_schema::config::StoreConfig::Hbase(hbase) => hbase.scan_caching as usize,
            hbidx_schema::config::StoreConfig::Embedded(_) => {
                hbidx_schema::config::DEFAULT_SCAN_CACHING as usize
            }
        },
    });
    let mut indexers = HashMap::new();
    let mut tables = Vec::new();
    for table in &config.tables {
        let table = Arc::new(table.clone());
        let index_dir = wiring.index_dir(&table.name);
        crate::index_dirs::recover(&index_dir)?;
        if let Some(store) = embedded.as_deref()
            && wiring.kafka_for(&table.name).is_none()
            && let Some(reason) = feed_mismatch(&index_dir, &table.name, store)?
        {
            tracing::error!(table = %table.name, %reason, "the index can't resume from its checkpoint: rebuilding it from the store");
            metrics::counter!("hbidx_index_rebuilt_total", "table" => table.name.clone(), "reason" => "feed_mismatch").increment(1);
            let mut checkpoint = hbidx_indexer::Checkpoint::default();
            checkpoint.advance(
                hbidx_indexer::CHANGE_FEED,
                0,
                store.last_offset(&table.name),
            );
            crate::reindex::rebuild_from_store(
                &index_dir,
                &table,
                store,
                &writer_options,
                checkpoint,
            )
            .with_context(|| format!("rebuilding {} from the store", index_dir.display()))?;
        }
        let (writer, searcher) =
            open_or_rebuild_index(&index_dir, &table, embedded.as_deref(), &writer_options)
                .with_context(|| format!("opening the index of table \"{}\"", table.name))?;
        let source = wiring.live_source(&table)?;
        // Write-through publishes to the topic only when Kafka is the log of an embedded
        // table. With HBase, HBase is the log: writes go to it, and replication brings them to
        // the topic.
        let publisher = match (wiring.kafka_for(&table.name), &embedded) {
            (Some(kafka), Some(_)) => Some(KafkaPublisher::new(kafka, table.clone())?),
            _ => None,
        };
        let handle = hbidx_indexer::spawn(writer, source, policy.clone())
            .with_context(|| format!("starting the indexer of table \"{}\"", table.name))?;
        tables.push(TableRuntime {
            config: table.clone(),
            searcher,
            indexed: handle.indexed.clone(),
            stats: handle.stats.clone(),
            publisher,
        });
        indexers.insert(table.name.clone(), handle);
    }
    let indexers: Indexers = Arc::new(Mutex::new(indexers));
    // Every store call of the query path is timed and its failures counted, labelled like the
    // HBase store's breaker gauge (`store="hbase"`).
    let store_name = if embedded.is_some() {
        "embedded"
    } else {
        "hbase"
    };
    let row_store: Arc<dyn RowStore> = Arc::new(MeteredStore::new(rows.clone(), store_name));
    let reindexer = Arc::new(crate::reindex::TableReindexer {
        wiring,
        indexers: indexers.clone(),
    });
    let mut state = AppState::new(row_store, tables)
        .with_reindexer(reindexer)
        .with_auth(auth)
        .with_cursors(cursors);
    // Opened inside the process's main runtime: jobs and repairs run there, off the HTTP
    // threads (each a runtime of its own).
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        state = state.with_background(runtime);
    }
    if let Some(cluster) = &config.cluster {
        // The key this instance shows the others, with the `cluster` scope alone; `serve`
        // refuses to start without it (keys.rs). Never the client key (`HBIDX_API_KEY`).
        let peer_key = std::env::var(crate::keys::CLUSTER_KEY_ENV).ok();
        state = state
            .with_cluster(cluster.clone(), peer_key)
            .map_err(|err| anyhow::anyhow!("{err}"))?;
        tracing::info!(
            shard = cluster.shard,
            replica = cluster.replica,
            shards = cluster.shard_count(),
            "one shard of a sharded index tier"
        );
    }
    state.limits.body_timeout = config.server.body_timeout;
    state.limits.max_lookup_matches = config.server.max_lookup_matches;
    state.limits.max_batch_matches = config.server.max_batch_matches;
    state.store_has_feed = embedded.is_some();
    state.store_name = store_name;
    if let Some(handle) = metrics {
        state = state.with_metrics(handle);
    }
    let probe = memory_probe(
        config.memory.clone(),
        embedded.clone(),
        writer_options.merge_budgets.clone(),
        &state,
    );
    state = state.with_memory(probe);
    let state = Arc::new(state);
    Ok(Instance {
        embedded,
        indexers,
        state,
    })
}

/// The embedded store's caches and memtables, from `[memory]`.
fn store_options(config: &HbidxConfig) -> hbidx_store::EmbeddedStoreOptions {
    let memory = &config.memory;
    let tables = config.tables.len();
    let sync = matches!(
        config.store,
        StoreConfig::Embedded(hbidx_schema::config::EmbeddedConfig {
            durability: hbidx_schema::config::Durability::FsyncWal
        })
    );
    hbidx_store::EmbeddedStoreOptions {
        sync,
        cache_bytes: memory.bytes(MemoryPart::StoreCache),
        row_cache_bytes: memory.per_table(MemoryPart::RowCache, tables),
        memtable_bytes: memory.bytes(MemoryPart::StoreMemtables),
    }
}

/// Every index writer's heap and each searcher's rowkey cache, from `[memory]`.
pub fn writer_options(config: &HbidxConfig) -> WriterOptions {
    let memory = &config.memory;
    let tables = config.tables.len();
    WriterOptions {
        memory_budget_bytes: usize::try_from(memory.writer_heap_bytes(tables))
            .unwrap_or(usize::MAX),
        rowkey_cache_bytes: memory.per_table(MemoryPart::RowkeyCache, tables),
        merge_max_docs: memory.per_table(MemoryPart::IndexMerges, tables)
            / hbidx_indexer::MERGE_BYTES_PER_DOC,
        // Every writer (live, reindex shadows) indexes only this instance's shard.
        cluster: config.cluster.clone().map(Arc::new),
        ..WriterOptions::default()
    }
}

/// Caps each Kafka consumer's prefetch queue at its share of `[memory] source_buffers_mb`,
/// unless the source's own properties set `queued.max.messages.kbytes`. librdkafka's default
/// (64 MiB a consumer) would otherwise hold that much of the log in RAM while the index catches
/// up; a smaller queue only means fetches wait for the indexer.
fn bound_prefetch(memory: &MemoryBudget, sources: &mut [KafkaSourceConfig]) {
    let count = sources.len().max(1) as u64;
    // librdkafka's bounds for the setting, in KiB.
    let kbytes = (memory.bytes(MemoryPart::SourceBuffers) / count / 1024).clamp(1024, 2_097_151);
    for source in sources {
        source.prefetch_kbytes = Some(kbytes);
    }
}

/// Reads each part of `[memory]` for `/metrics` and the dashboard.
fn memory_probe(
    budget: MemoryBudget,
    embedded: Option<Arc<EmbeddedStore>>,
    merges: hbidx_indexer::MergeBudgets,
    state: &AppState,
) -> hbidx_query::MemoryProbe {
    let searchers: Vec<hbidx_indexer::TableSearcher> =
        state.tables.values().map(|t| t.searcher.clone()).collect();
    Arc::new(move || {
        let store = embedded
            .as_ref()
            .map(|store| store.memory())
            .unwrap_or_default();
        let rowkeys: u64 = searchers.iter().map(|s| s.rowkey_cache_stats().bytes).sum();
        MemoryPart::ALL
            .into_iter()
            .map(|part| {
                let (used, budget_bytes) = match part {
                    MemoryPart::IndexWriters => (
                        Some(hbidx_indexer::writer_heap_reserved()),
                        budget.bytes(part),
                    ),
                    MemoryPart::StoreCache => (Some(store.block_cache_bytes), budget.bytes(part)),
                    MemoryPart::StoreMemtables => (Some(store.memtable_bytes), budget.bytes(part)),
                    MemoryPart::RowCache => (Some(store.row_cache_bytes), budget.bytes(part)),
                    MemoryPart::RowkeyCache => (Some(rowkeys), budget.bytes(part)),
                    MemoryPart::SourceBuffers => (None, budget.bytes(part)),
                    MemoryPart::IndexMerges => (
                        Some(merges.merging_docs() * hbidx_indexer::MERGE_BYTES_PER_DOC),
                        budget.bytes(part),
                    ),
                };
                hbidx_query::MemoryUse {
                    part: part.name().to_string(),
                    used_bytes: used,
                    budget_bytes,
                }
            })
            .collect()
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

impl Instance {
    /// The embedded store, for commands that only work on it (demo, bench).
    pub fn embedded(&self) -> Result<&Arc<EmbeddedStore>> {
        self.embedded
            .as_ref()
            .context("this command needs the embedded store ([store] kind = \"embedded\")")
    }

    /// Waits until every table's index covers its change feed up to now.
    pub async fn wait_caught_up(&self, timeout: Duration) -> Result<()> {
        let Some(store) = &self.embedded else {
            // With HBase there is no local feed to catch up with.
            return Ok(());
        };
        for table in self.state.tables.values() {
            if table.publisher.is_some() {
                // Fed from Kafka: there is no local feed to catch up with.
                continue;
            }
            let target = store.last_offset(&table.config.name);
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

    /// Starts the REST API's HTTP threads (`crate::http`) on `listener`; [`Instance::serve`]
    /// then takes connections.
    pub async fn start_http(
        &self,
        listener: tokio::net::TcpListener,
        http_threads: &crate::http::HttpThreads,
    ) -> Result<crate::http::HttpServer> {
        let app = hbidx_query::app(self.state.clone());
        crate::http::HttpServer::start(listener, app, http_threads).await
    }

    /// Serves HTTP until Ctrl-C / SIGTERM, then commits and stops the indexers.
    pub async fn serve(self, http: crate::http::HttpServer) -> Result<()> {
        // Feeds the dashboard; it stops by itself once the state is dropped.
        let _sampler = hbidx_query::spawn_sampler(&self.state);
        // What /readyz answers from; the same.
        let _readiness = hbidx_query::spawn_checker(&self.state);
        // Which replicas of the other shards lookups may go to.
        let _prober = self.state.peers.clone().map(hbidx_query::spawn_prober);
        http.run(shutdown_signal()).await?;
        tracing::info!("shutting down: committing indexes");
        self.shutdown_for_exit().await
    }

    /// Final commit of every table's index, the indexer threads stopped, and their merges
    /// finished: the data dir may be reopened in this process.
    pub async fn shutdown_indexers(self) -> Result<()> {
        self.stop_indexers(IndexerHandle::shutdown).await
    }

    /// As [`Instance::shutdown_indexers`] before the process exits: merges still running are
    /// not waited for ([`IndexerHandle::shutdown_for_exit`]).
    pub async fn shutdown_for_exit(self) -> Result<()> {
        self.stop_indexers(IndexerHandle::shutdown_for_exit).await
    }

    async fn stop_indexers(self, stop: fn(IndexerHandle)) -> Result<()> {
        let handles: Vec<IndexerHandle> = self
            .indexers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, handle)| handle)
            .collect();
        // Dropping the store fsyncs its journal, but the Thrift gateway's thread holds the store
        // until the process exits, so it may never be dropped: the memtables are written out
        // and the journal fsynced here, which also leaves the next start nothing to replay.
        let store = self.embedded.clone();
        tokio::task::spawn_blocking(move || {
            handles.into_iter().for_each(stop);
            store.map_or(Ok(()), |store| store.flush_memtables(SHUTDOWN_FLUSH_WAIT))
        })
        .await
        .context("indexer shutdown")?
        .context("writing the row store to disk")
    }
}

/// How long a graceful stop waits for the row store's memtables to be written out (a few
/// hundred MB at most, the memtable budget: seconds).
const SHUTDOWN_FLUSH_WAIT: Duration = Duration::from_secs(60);

/// Starts the HBase Thrift gateway over the instance's store (same process, same store: one
/// process owns the data dir) and prints its address on a line of its own, which tests and
/// scripts wait for.
pub fn start_gateway(
    instance: &Instance,
    config: &HbidxConfig,
    options: GatewayOptions,
) -> Result<GatewayServer> {
    let mut configured = Vec::with_capacity(config.tables.len());
    for table in &config.tables {
        configured.push(ConfiguredTable {
            config: Arc::new(table.clone()),
            split_keys: gateway_split_keys(table),
            kafka_topic: config
                .source_for(&table.name)
                .map(|source| source.topic.clone()),
        });
    }
    let store = instance
        .embedded
        .clone()
        .context("the HBase Thrift gateway serves the embedded store; with [store] kind = \"hbase\" the rows are in HBase, whose own Thrift server answers")?;
    let listen = options.listen;
    let gateway = hbidx_gateway::serve(store, configured, options)
        .with_context(|| format!("starting the HBase Thrift gateway on {listen}"))?;
    eprintln!("thrift gateway listening on {}", gateway.local_addr());
    Ok(gateway)
}

/// The gateway's options when it is switched on, by the flag or `[server] thrift_listen`
/// (the flag wins).
pub fn gateway_options(server: &ServerConfig, flag: Option<SocketAddr>) -> Option<GatewayOptions> {
    let listen = flag.or(server.thrift_listen)?;
    Some(GatewayOptions {
        transport: server.thrift_transport,
        protocol: server.thrift_protocol,
        workers: server.thrift_workers,
        api: server.thrift_api,
        max_container_len: server.thrift_max_container_len,
        allow_remote: server.thrift_allow_remote,
        idle_timeout: server.thrift_idle_timeout,
        ..GatewayOptions::new(listen)
    })
}

/// The split keys `getTableRegions` reports for a configured table. A sampled split depends on
/// the sample HBase was given at create time, which hbidx doesn't have: one region, and a
/// warning, rather than made-up boundaries.
fn gateway_split_keys(table: &TableConfig) -> Vec<Vec<u8>> {
    use hbidx_schema::config::SplitConfig;
    let keys = match &table.splits {
        Some(SplitConfig::File { path }) => std::fs::read_to_string(path)
            .map_err(anyhow::Error::from)
            .and_then(|text| Ok(table.split_keys(Some(&text), None)?)),
        _ => table.split_keys(None, None).map_err(anyhow::Error::from),
    };
    keys.unwrap_or_else(|error| {
        tracing::warn!(table = %table.name, error = %format!("{error:#}"), "the Thrift gateway reports one region for this table");
        Vec::new()
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// With the rows in HBase there is no store to rebuild from at start: an index built for
    /// another schema is refused with the command that rebuilds it, and is left as it was.
    #[test]
    fn an_outdated_index_over_hbase_is_refused_with_the_reindex_command() {
        let config = hbidx_schema::parse_config(hbidx_schema::EXAMPLE_CONFIG).unwrap();
        let table = Arc::new(config.table("user").unwrap().clone());
        let dir = tempfile::tempdir().unwrap();
        let index_dir = dir.path().join(&table.name);
        // The same table with one indexed field fewer: an index of another schema.
        let mut older = (*table).clone();
        older.fields.pop();
        let (mut writer, _) =
            hbidx_indexer::open_table_index(&index_dir, Arc::new(older), &WriterOptions::default())
                .unwrap();
        writer.commit().unwrap();
        writer.finish().unwrap();
        let listing = |dir: &Path| {
            let mut names: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|entry| entry.unwrap().file_name())
                .collect();
            names.sort();
            names
        };
        let before = listing(&index_dir);

        let err = match open_or_rebuild_index(&index_dir, &table, None, &WriterOptions::default()) {
            Ok(_) => panic!("an index of another schema was opened"),
            Err(err) => format!("{err:#}"),
        };
        assert!(err.contains("built for another schema"), "{err}");
        assert!(
            err.contains(&format!("reindex {} --from-store", table.name)),
            "{err}"
        );
        assert_eq!(listing(&index_dir), before, "the old index was touched");
        assert!(!crate::index_dirs::shadow_dir(&index_dir).exists());
    }

    /// `[memory] rowkey_cache_mb` is the total: each served table's searcher gets its share.
    #[test]
    fn the_memory_rowkey_cache_budget_is_split_between_the_searchers() {
        let example = hbidx_schema::EXAMPLE_CONFIG;
        let text = format!(
            "{example}\n{}\n[memory]\nrowkey_cache_mb = 6\n",
            example.replace("name = \"user\"", "name = \"user2\"")
        );
        let config = hbidx_schema::parse_config(&text).unwrap();
        assert_eq!(config.tables.len(), 2);
        let dir = tempfile::tempdir().unwrap();
        let instance = open(
            &config,
            dir.path(),
            &Default::default(),
            hbidx_query::auth::Auth::default(),
        )
        .unwrap();
        assert_eq!(instance.state.tables.len(), 2);
        for table in instance.state.tables.values() {
            assert_eq!(table.searcher.rowkey_cache_stats().budget, 3 << 20);
        }
    }
}
