//! The store's error type.

/// Everything that can go wrong reading or writing rows.
///
/// Messages are lowercase and carry no trailing punctuation so they compose into larger messages.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The table was not declared when the store was opened, nor created since.
    #[error("unknown table `{0}`")]
    UnknownTable(String),

    /// `create_table` of a name the store already serves.
    #[error("table `{0}` already exists")]
    TableExists(String),

    /// Deleting or disabling a table that comes from the hbidx config, which only the config can
    /// change.
    #[error(
        "table `{0}` comes from the hbidx config and can't be deleted or disabled here; change the config instead"
    )]
    ConfiguredTable(String),

    /// The storage engine (or, for remote stores, the server) failed an operation. Usually an IO
    /// error; not caused by the request.
    #[error("storage error: {0}")]
    Storage(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),

    /// Stored bytes could not be decoded: a row state or feed event written by an incompatible
    /// version, or damaged on disk.
    #[error("corrupt data in table `{table}` at key {key}: {reason}")]
    Corrupt {
        /// The table whose data is damaged (or `<meta>` for the store's own metadata).
        table: String,
        /// The damaged key: escaped for feed and metadata keys, a hash for rowkeys.
        key: String,
        /// What failed to decode.
        reason: String,
    },

    /// A mutation is malformed: empty rowkey, no operations, or a column without a family. Nothing
    /// of the batch it came in was written.
    #[error("invalid mutation: {reason}")]
    InvalidMutation {
        /// Which rule the mutation broke.
        reason: String,
    },

    /// A read request or an open argument is malformed (a scan batch of 0, an unusable table
    /// name).
    #[error("invalid request: {reason}")]
    InvalidRequest {
        /// Which rule the request broke.
        reason: String,
    },

    /// The HBase Thrift gateway could not listen on its address.
    #[error("thrift gateway can't listen on {addr}: {source}")]
    GatewayBind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },

    /// The store can't be reached right now; retrying later may succeed. Not produced by the
    /// embedded store; reserved for remote stores.
    #[error("store unavailable: {0}")]
    Unavailable(String),

    /// A configured table doesn't exist in the remote store. hbidx never creates tables
    /// implicitly; the message says how to create it.
    #[error(
        "table `{table}` does not exist in HBase (as `{store_table}`); create it first with the statement that `hbidx --config FILE ddl {table}` prints"
    )]
    TableMissing {
        /// The hbidx table name.
        table: String,
        /// The name HBase knows it by (`ns:name`, or `name` in the default namespace).
        store_table: String,
    },

    /// A configured table exists in the remote store but is disabled, so it can't be read or
    /// written until it is enabled again.
    #[error(
        "table `{table}` is disabled in HBase (as `{store_table}`); enable it with `enable '{store_table}'` in the HBase shell"
    )]
    TableDisabled {
        /// The hbidx table name.
        table: String,
        /// The name HBase knows it by.
        store_table: String,
    },

    /// The remote store rejected a call for a reason retrying won't fix (HBase `IOError` or
    /// `IllegalArgument`). The message is the server's.
    #[error("store rejected the call: {0}")]
    Rejected(String),

    /// The data volume is out of space (or over its quota), so the write was not stored. The
    /// embedded store takes no more writes until it is restarted: fjall refuses every write
    /// after a failed journal write, since it can't know what of that write reached the disk.
    #[error(
        "the data volume is full ({cause}); nothing was written, and the row store takes no writes until hbidx is restarted with space freed on the data volume"
    )]
    StorageFull {
        /// The IO error that ran out of space, as the OS said it.
        cause: String,
    },

    /// The embedded store stopped taking writes after a write failed for another reason than a
    /// full volume (fjall refuses every write after a failed journal write); reads still work.
    #[error(
        "the row store takes no writes after a failed write ({cause}); restart hbidx once the data volume is healthy"
    )]
    WritesHalted {
        /// The error of the write that failed.
        cause: String,
    },
}

/// Whether `error`, or any error in its `source()` chain, is an IO error saying the volume is
/// full: `ENOSPC` or an exceeded quota (`EDQUOT`).
pub fn is_storage_full(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && is_storage_full_io(io)
        {
            return true;
        }
        // Libraries that clone their errors (tantivy) keep the IO error behind an `Arc`.
        if let Some(io) = error.downcast_ref::<std::sync::Arc<std::io::Error>>()
            && is_storage_full_io(io)
        {
            return true;
        }
        next = error.source();
    }
    false
}

/// [`is_storage_full`] for one IO error.
pub fn is_storage_full_io(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

impl From<fjall::Error> for StoreError {
    fn from(error: fjall::Error) -> Self {
        StoreError::Storage(Box::new(error))
    }
}

/// The crate's result alias.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Renders a binary key for error messages: printable ASCII as is, everything else `\xNN`.
pub(crate) fn escape_key(key: &[u8]) -> String {
    key.escape_ascii().to_string()
}

#[cfg(test)]
mod tests {
    use std::io::{Error, ErrorKind};

    use super::*;

    #[test]
    fn storage_full_is_found_through_wrappers() {
        let enospc = || Error::from_raw_os_error(28);
        assert!(is_storage_full(&enospc()));
        // fjall's journal write, as the store sees it.
        assert!(is_storage_full(&fjall::Error::Io(enospc())));
        // An error that keeps the IO error as its source.
        let wrapped = StoreError::Storage(Box::new(fjall::Error::Io(enospc())));
        assert!(is_storage_full(&wrapped));
        // Behind an `Arc`, with a path around it (tantivy, tempfile).
        let arc = std::sync::Arc::new(Error::new(ErrorKind::StorageFull, "at path x"));
        assert!(is_storage_full(&arc));
        assert!(is_storage_full(&Error::from_raw_os_error(122))); // EDQUOT

        assert!(!is_storage_full(&Error::from_raw_os_error(5))); // EIO
        assert!(!is_storage_full(&fjall::Error::Poisoned));
    }
}
