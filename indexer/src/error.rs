use thiserror::Error;

/// Everything that can go wrong in the indexer.
#[derive(Debug, Error)]
pub enum IndexerError {
    /// tantivy failed (IO on the index directory, a corrupt segment, a writer that died).
    #[error("index error: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    /// The commit payload of an existing index could not be read back as a checkpoint.
    #[error("index checkpoint is unreadable: {0}")]
    BadCheckpoint(String),
    /// A stored per-row state could not be decoded; the index was written by something else.
    #[error("row state for rowkey {rowkey} is corrupt: {reason}")]
    CorruptState { rowkey: String, reason: String },
    /// The index directory could not be created or opened.
    #[error("index directory {path}: {reason}")]
    Directory { path: String, reason: String },
    /// The index in `path` was built with another schema: the table's field config changed, or
    /// an older hbidx wrote it with another document layout. It has to be rebuilt; the server
    /// does that from the embedded store at start.
    #[error(
        "index directory {path}: the index was built for another schema (the table's fields changed, or an older hbidx wrote it)"
    )]
    SchemaMismatch { path: String },
    /// The source (change feed, Kafka) failed.
    #[error("source {source_name}: {reason}")]
    Source { source_name: String, reason: String },
    /// A lookup condition is not valid for the table's schema. `field` names the query
    /// parameter, so the HTTP layer can answer 400 with it.
    #[error("{field}: {reason}")]
    InvalidCondition { field: String, reason: String },
}

pub type Result<T, E = IndexerError> = std::result::Result<T, E>;
