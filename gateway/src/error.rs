//! Failed calls as the Thrift exceptions HBase's server throws: store errors mapped to `IOError`,
//! `IllegalArgument` and `AlreadyExists` messages, and the answers to methods not served.

use hbase_thrift::hbase::{AlreadyExists, IOError, IllegalArgument};
use hbidx_store::StoreError;

use crate::filter::FilterError;

/// A failed call, as the Thrift exception the client gets.
#[derive(Debug)]
pub(crate) enum Failure {
    Io(String),
    IllegalArgument(String),
    AlreadyExists(String),
}

pub(crate) type Answer<T> = std::result::Result<T, Failure>;

impl Failure {
    /// The error for methods whose IDL declares only `IOError`.
    pub(crate) fn io_only(self) -> thrift::Error {
        match self {
            Failure::Io(message)
            | Failure::IllegalArgument(message)
            | Failure::AlreadyExists(message) => io_error(message),
        }
    }

    /// The error for methods that declare `IllegalArgument` too (mutations, scanner calls).
    pub(crate) fn with_illegal_argument(self) -> thrift::Error {
        match self {
            Failure::IllegalArgument(message) => {
                thrift::Error::User(Box::new(IllegalArgument::new(message)))
            }
            other => other.io_only(),
        }
    }

    /// The error for `createTable`, which declares all three.
    pub(crate) fn with_already_exists(self) -> thrift::Error {
        match self {
            Failure::AlreadyExists(message) => {
                thrift::Error::User(Box::new(AlreadyExists::new(message)))
            }
            other => other.with_illegal_argument(),
        }
    }
}

fn io_error(message: String) -> thrift::Error {
    thrift::Error::User(Box::new(IOError::new(message, false)))
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::UnknownTable(table) => Failure::Io(format!(
                "TableNotFoundException: table `{table}` does not exist"
            )),
            StoreError::TableExists(table) => Failure::AlreadyExists(format!(
                "TableExistsException: table `{table}` already exists"
            )),
            error @ (StoreError::InvalidMutation { .. } | StoreError::InvalidRequest { .. }) => {
                Failure::IllegalArgument(error.to_string())
            }
            error @ StoreError::ConfiguredTable(_) => Failure::Io(error.to_string()),
            error => {
                // Storage trouble: the client gets the message (no row data in it: corrupt keys
                // are hashed), the log gets it too.
                tracing::warn!(%error, "thrift gateway: store error");
                Failure::Io(error.to_string())
            }
        }
    }
}

impl From<FilterError> for Failure {
    fn from(error: FilterError) -> Self {
        // HBase's ParseFilter throws IllegalArgumentException; its Thrift server answers that
        // without the message, which names the byte at fault here.
        Failure::Io(format!("IllegalArgumentException: {error}"))
    }
}

/// What HBase 1.x's Java server (`TBaseProcessor`) answers for a method it doesn't have.
pub(crate) fn invalid_method(method: &str) -> thrift::Error {
    thrift::Error::Application(thrift::ApplicationError::new(
        thrift::ApplicationErrorKind::UnknownMethod,
        format!("Invalid method name: '{method}'"),
    ))
}

pub(crate) fn unsupported(method: &str) -> thrift::Error {
    io_error(format!(
        "{method} is not supported by the hbidx Thrift gateway (embedded store)"
    ))
}
