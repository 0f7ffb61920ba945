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
