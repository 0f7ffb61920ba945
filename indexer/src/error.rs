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
    /// A lookup matches more rows than one lookup may walk (`[server] max_lookup_matches`).
    /// `field` names the query parameter of its narrowest condition.
    #[error(
        "{field}: the lookup matches more than {max} rows, the most one lookup walks ([server] max_lookup_matches); add characters, or another condition such as phone_suffix"
    )]
    TooBroad { field: String, max: usize },
}

impl IndexerError {
    /// Whether the index volume ran out of space (or over its quota). tantivy keeps its IO
    /// errors outside the `source()` chain, so its variants are looked into here.
    pub fn is_storage_full(&self) -> bool {
        use tantivy::TantivyError;
        use tantivy::directory::error::{OpenDirectoryError, OpenWriteError};
        let IndexerError::Tantivy(error) = self else {
            return hbidx_store::is_storage_full(self);
        };
        let io = match error {
            TantivyError::IoError(io)
            | TantivyError::OpenWriteError(OpenWriteError::IoError { io_error: io, .. })
            | TantivyError::OpenDirectoryError(OpenDirectoryError::IoError {
                io_error: io, ..
            }) => Some(io),
            _ => None,
        };
        io.is_some_and(|io| hbidx_store::is_storage_full_io(io))
            || hbidx_store::is_storage_full(error)
    }
}

pub type Result<T, E = IndexerError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tantivy::TantivyError;
    use tantivy::directory::error::OpenWriteError;

    use super::*;

    #[test]
    fn storage_full_is_found_in_tantivy_errors() {
        let enospc = || Arc::new(std::io::Error::from_raw_os_error(28));
        let io = IndexerError::Tantivy(TantivyError::IoError(enospc()));
        assert!(io.is_storage_full());
        let open = IndexerError::Tantivy(TantivyError::OpenWriteError(OpenWriteError::IoError {
            io_error: enospc(),
            filepath: "x.idx".into(),
        }));
        assert!(open.is_storage_full());

        let eio = IndexerError::Tantivy(TantivyError::IoError(Arc::new(
            std::io::Error::from_raw_os_error(5),
        )));
        assert!(!eio.is_storage_full());
        // A writer that lost its thread says only that; the loop keeps the episode instead.
        let killed = IndexerError::Tantivy(TantivyError::ErrorInThread("killed".into()));
        assert!(!killed.is_storage_full());
    }
}
