//! Parsing the names clients send: columns (`family`, `family:`, `family:qualifier`), HBase table
//! names, and the rows of `BatchMutation`s.
//!
//! A column is parsed as HBase's Thrift server parses it (`KeyValue.parseColumn`): a bare
//! `family` is the whole family, `family:` is the column with the empty qualifier (a column
//! like any other: HBase 1.2's `getRowWithColumns`, `deleteAll` and `mutateRow` all take it
//! so), and `family:qualifier` one column. Column descriptors of `createTable` are the
//! exception: there `family:` names the family.

use hbase_thrift::hbase::{BatchMutation, Mutation as TMutation};

use crate::error::{Answer, Failure};

/// A column of a request: a whole family or one column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ColumnSpec {
    Family(String),
    Column(String),
}

impl ColumnSpec {
    /// `family` (the whole family), `family:` (the empty qualifier) or `family:qualifier`.
    pub(crate) fn parse(column: &[u8]) -> Answer<ColumnSpec> {
        let text = std::str::from_utf8(column).map_err(|_| {
            Failure::IllegalArgument(format!(
                "column `{}` is not UTF-8; the embedded store keeps qualifiers as text",
                column.escape_ascii()
            ))
        })?;
        match text.split_once(':') {
            None => Self::family(text),
            Some(("", _)) => Err(Failure::IllegalArgument(format!(
                "column `{text}` has an empty family"
            ))),
            Some(_) => Ok(ColumnSpec::Column(text.to_owned())),
        }
    }

    /// The family a `createTable` column descriptor names: `family:` or `family`.
    pub(crate) fn parse_family(name: &[u8]) -> Answer<String> {
        let trimmed = name.strip_suffix(b":").unwrap_or(name);
        match Self::parse(trimmed)? {
            ColumnSpec::Family(family) => Ok(family),
            ColumnSpec::Column(column) => Err(Failure::IllegalArgument(format!(
                "column family name `{column}:` must end with `:` and have no qualifier"
            ))),
        }
    }

    fn family(family: &str) -> Answer<ColumnSpec> {
        if family.is_empty() {
            return Err(Failure::IllegalArgument("empty column name".to_owned()));
        }
        Ok(ColumnSpec::Family(family.to_owned()))
    }

    pub(crate) fn family_name(&self) -> &str {
        match self {
            ColumnSpec::Family(family) => family,
            ColumnSpec::Column(column) => {
                column.split_once(':').map_or(column.as_str(), |(f, _)| f)
            }
        }
    }

    /// The store's projection entry: a bare family or `family:qualifier`.
    pub(crate) fn projection(&self) -> String {
        match self {
            ColumnSpec::Family(family) | ColumnSpec::Column(family) => family.clone(),
        }
    }
}

/// HBase's table name rules (`TableName.isLegalFullyQualifiedTableName`): an optional
/// `namespace:` of letters, digits and `_`, then a qualifier of letters, digits, `_`, `-` and
/// `.` that doesn't start with `.` or `-`.
pub(crate) fn validate_hbase_table_name(name: &str) -> Answer<()> {
    let invalid = |reason: &str| {
        Err(Failure::IllegalArgument(format!(
            "table name `{}` is not a valid HBase table name: {reason}",
            name.escape_debug()
        )))
    };
    let (namespace, qualifier) = match name.split_once(':') {
        Some((namespace, qualifier)) => (Some(namespace), qualifier),
        None => (None, name),
    };
    if let Some(namespace) = namespace {
        if namespace.is_empty()
            || !namespace
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
        {
            return invalid("the namespace may hold only letters, digits and `_`");
        }
        if namespace == "hbase" {
            return invalid("the `hbase` namespace is reserved");
        }
    }
    if qualifier.is_empty() {
        return invalid("it is empty");
    }
    if qualifier.starts_with(['.', '-']) {
        return invalid("it must not start with `.` or `-`");
    }
    if !qualifier
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.'))
    {
        return invalid("it may hold only letters, digits, `_`, `-` and `.`");
    }
    Ok(())
}

pub(crate) fn batches(row_batches: Vec<BatchMutation>) -> Answer<Vec<(Vec<u8>, Vec<TMutation>)>> {
    row_batches
        .into_iter()
        .map(|batch| {
            let row = batch
                .row
                .ok_or_else(|| Failure::IllegalArgument("a BatchMutation has no row".to_owned()))?;
            Ok((row, batch.mutations.unwrap_or_default()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_parse_like_happybase_and_hbase() {
        assert_eq!(
            ColumnSpec::parse(b"cf").unwrap(),
            ColumnSpec::Family("cf".to_owned())
        );
        assert_eq!(
            ColumnSpec::parse(b"cf:").unwrap(),
            ColumnSpec::Column("cf:".to_owned()),
            "the empty qualifier, as HBase's KeyValue.parseColumn"
        );
        assert_eq!(ColumnSpec::parse_family(b"cf:").unwrap(), "cf");
        assert_eq!(ColumnSpec::parse_family(b"cf").unwrap(), "cf");
        assert!(ColumnSpec::parse_family(b"cf:q").is_err());
        assert!(ColumnSpec::parse_family(b":").is_err());
        assert_eq!(
            ColumnSpec::parse(b"cf:a:b").unwrap(),
            ColumnSpec::Column("cf:a:b".to_owned())
        );
        assert!(ColumnSpec::parse(b":q").is_err());
        assert!(ColumnSpec::parse(b"").is_err());
        assert!(ColumnSpec::parse(b"cf:\xff").is_err());
        for bad in ["", "a b", ".x", "-x", ":x", "hbase:meta", "n-s:x", "x/y"] {
            assert!(validate_hbase_table_name(bad).is_err(), "{bad}");
        }
        for good in ["t", "ns:t_1", "a.b-c", "default_ns:T9"] {
            assert!(validate_hbase_table_name(good).is_ok(), "{good}");
        }
    }
}
