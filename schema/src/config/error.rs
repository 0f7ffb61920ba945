//! The one error of the config builder, naming where in the file the problem is
//! (`store.pool_size`, `tables[2].fields[0]`, `security.keys[1].sha256`).

use crate::codec::CodecError;
use crate::split::SplitError;

/// Everything that can be wrong with a config file. The path says where (`section.key`,
/// `tables[2].fields[0]`), the reason says what and, where it helps, what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not TOML at all (no path: the parser stopped before any key).
    #[error("invalid config toml{location}: {message}")]
    Toml {
        /// ` at line L, column C`, or empty when the parser gave no position.
        location: String,
        message: String,
    },
    /// A key or value is wrong: unknown, missing, of the wrong type or out of range.
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
}

impl ConfigError {
    pub fn invalid(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// Where the problem is: `store.thrift`, `tables[0].fields[1]`; empty for unparsable text.
    pub fn path(&self) -> &str {
        match self {
            Self::Toml { .. } => "",
            Self::Invalid { path, .. } => path,
        }
    }
}

/// A problem inside one `[[tables]]` entry, before [`TableError::at`] adds the entry's path.
/// The messages name the table, family or field, which a path of indices alone would not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TableError {
    /// An entry without `name`.
    #[error("missing; every [[tables]] entry needs a name")]
    MissingName,
    /// A table-level problem.
    #[error("table {table:?}: {reason}")]
    Table { table: String, reason: String },
    /// A column family problem; `index` is its place in `families`.
    #[error("table {table:?}: family {family:?}: {reason}")]
    Family {
        table: String,
        index: usize,
        family: String,
        reason: String,
    },
    /// An indexed field problem; `index` is its place in `fields`.
    #[error("table {table:?}: field {field:?}: {reason}")]
    Field {
        table: String,
        index: usize,
        field: String,
        reason: String,
    },
    /// A problem with one key of an indexed field (`tables[0].fields[1].blind`).
    #[error("table {table:?}: field {field:?}: {key}: {reason}")]
    FieldKey {
        table: String,
        index: usize,
        field: String,
        key: &'static str,
        reason: String,
    },
    /// A `covered` column problem.
    #[error("table {table:?}: covered {column:?}: {reason}")]
    Covered {
        table: String,
        index: usize,
        column: String,
        reason: String,
    },
    /// A `[tables.splits]` problem.
    #[error("table {table:?}: splits: {reason}")]
    Splits { table: String, reason: String },
    /// An invalid rowkey design.
    #[error(transparent)]
    Rowkey(#[from] CodecError),
    /// Invalid split keys.
    #[error(transparent)]
    Split(#[from] SplitError),
}

impl TableError {
    /// The error of the `index`th `[[tables]]` entry, with the path of the part at fault.
    pub(crate) fn at(self, index: usize) -> ConfigError {
        let table = format!("tables[{index}]");
        let path = match &self {
            TableError::MissingName => format!("{table}.name"),
            TableError::Table { .. } => table,
            TableError::Family { index, .. } => format!("{table}.families[{index}]"),
            TableError::Field { index, .. } => format!("{table}.fields[{index}]"),
            TableError::FieldKey { index, key, .. } => format!("{table}.fields[{index}].{key}"),
            TableError::Covered { index, .. } => format!("{table}.covered[{index}]"),
            TableError::Splits { .. } | TableError::Split(_) => format!("{table}.splits"),
            TableError::Rowkey(CodecError::InvalidDesign { part, .. }) => {
                format!("{table}.rowkey.parts[{part}]")
            }
            TableError::Rowkey(_) => format!("{table}.rowkey"),
        };
        ConfigError::invalid(path, self.to_string())
    }
}
