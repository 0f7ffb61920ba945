//! The HBase Thrift1 calls [`HbaseStore`](crate::HbaseStore) makes, and only those.
//!
//! hbase-thrift is generated from HBase 2.x's `Hbase.thrift`, but clusters still run HBase 1.x,
//! whose Thrift server answers "Invalid method name" for what 2.0 added
//! ([`HBASE_2_ONLY`]) and skips the `TScan` fields it doesn't know (`cacheBlocks`). So the
//! store never holds the generated client itself: it gets a [`Thrift1Client`], which exposes
//! the calls in [`CALLS`] and nothing else. A new call has to be added here, where a unit test
//! checks the list against the methods HBase 1.2 serves, and the end-to-end tests run the store
//! against a stand-in that answers like HBase 1.2 (`[server] thrift_hbase_version = 1`).

use std::collections::BTreeMap;

use hbase_thrift::hbase::{
    BatchMutation, HbaseSyncClient, ScannerID, THbaseSyncClient, TRowResult, TScan,
};
use thrift::protocol::{TInputProtocol, TOutputProtocol};

pub(crate) type GeneratedClient =
    HbaseSyncClient<Box<dyn TInputProtocol + Send>, Box<dyn TOutputProtocol + Send>>;

/// The Thrift method names behind [`Thrift1Client`]'s methods, one per method (checked by the
/// tests below).
#[cfg(test)]
pub(crate) const CALLS: &[&str] = &[
    "isTableEnabled",
    "getRowsWithColumns",
    "scannerOpenWithScan",
    "scannerGetList",
    "scannerClose",
    "mutateRowsTs",
    "deleteAllRowTs",
];

/// Methods of hbase-thrift's IDL (HBase 2.x) that HBase 1.x's Thrift server doesn't have.
pub const HBASE_2_ONLY: &[&str] = &[
    "getThriftServerType",
    "getClusterId",
    "getTableNamesWithIsTableEnabled",
    "grant",
    "revoke",
];

/// The generated client, narrowed to [`CALLS`]. Attributes are always empty.
pub(crate) struct Thrift1Client(GeneratedClient);

impl Thrift1Client {
    pub(crate) fn new(client: GeneratedClient) -> Self {
        Self(client)
    }

    /// `isTableEnabled`: an `IOError` naming `TableNotFoundException` when the table is missing.
    pub(crate) fn is_table_enabled(&mut self, table: Vec<u8>) -> thrift::Result<bool> {
        self.0.is_table_enabled(table)
    }

    pub(crate) fn get_rows_with_columns(
        &mut self,
        table: Vec<u8>,
        rows: Vec<Vec<u8>>,
        columns: Vec<Vec<u8>>,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.0
            .get_rows_with_columns(table, rows, columns, BTreeMap::new())
    }

    pub(crate) fn scanner_open_with_scan(
        &mut self,
        table: Vec<u8>,
        scan: TScan,
    ) -> thrift::Result<ScannerID> {
        self.0.scanner_open_with_scan(table, scan, BTreeMap::new())
    }

    pub(crate) fn scanner_get_list(
        &mut self,
        id: ScannerID,
        rows: i32,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.0.scanner_get_list(id, rows)
    }

    pub(crate) fn scanner_close(&mut self, id: ScannerID) -> thrift::Result<()> {
        self.0.scanner_close(id)
    }

    pub(crate) fn mutate_rows_ts(
        &mut self,
        table: Vec<u8>,
        rows: Vec<BatchMutation>,
        ts: i64,
    ) -> thrift::Result<()> {
        self.0.mutate_rows_ts(table, rows, ts, BTreeMap::new())
    }

    pub(crate) fn delete_all_row_ts(
        &mut self,
        table: Vec<u8>,
        row: Vec<u8>,
        ts: i64,
    ) -> thrift::Result<()> {
        self.0.delete_all_row_ts(table, row, ts, BTreeMap::new())
    }
}

/// `service Hbase` of HBase 1.2's `Hbase.thrift` (hbase-thrift module, branch-1.2).
pub const HBASE_1_2_METHODS: &[&str] = &[
    "enableTable",
    "disableTable",
    "isTableEnabled",
    "compact",
    "majorCompact",
    "getTableNames",
    "getColumnDescriptors",
    "getTableRegions",
    "createTable",
    "deleteTable",
    "get",
    "getVer",
    "getVerTs",
    "getRow",
    "getRowWithColumns",
    "getRowTs",
    "getRowWithColumnsTs",
    "getRows",
    "getRowsWithColumns",
    "getRowsTs",
    "getRowsWithColumnsTs",
    "mutateRow",
    "mutateRowTs",
    "mutateRows",
    "mutateRowsTs",
    "atomicIncrement",
    "deleteAll",
    "deleteAllTs",
    "deleteAllRow",
    "increment",
    "incrementRows",
    "deleteAllRowTs",
    "scannerOpenWithScan",
    "scannerOpen",
    "scannerOpenWithStop",
    "scannerOpenWithPrefix",
    "scannerOpenTs",
    "scannerOpenWithStopTs",
    "scannerGet",
    "scannerGetList",
    "scannerClose",
    "getRowOrBefore",
    "getRegionInfo",
    "append",
    "checkAndPut",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_is_served_by_hbase_1_2() {
        for call in CALLS {
            assert!(
                HBASE_1_2_METHODS.contains(call),
                "{call} is not served by HBase 1.2's Thrift server"
            );
        }
        for call in HBASE_2_ONLY {
            assert!(!HBASE_1_2_METHODS.contains(call), "{call}");
        }
    }

    /// The wrapper's methods, read from this file: each must be one of [`CALLS`], so a method
    /// added without updating the list (and so without the check above) fails here.
    #[test]
    fn the_call_list_matches_the_wrapper() {
        let source = include_str!("thrift1.rs");
        let wrapper = source
            .split("impl Thrift1Client {")
            .nth(1)
            .and_then(|rest| rest.split("\n}\n").next())
            .expect("the wrapper's impl block");
        let mut methods: Vec<String> = wrapper
            .split("pub(crate) fn ")
            .skip(1)
            .filter_map(|rest| rest.split('(').next())
            .filter(|name| *name != "new")
            .map(|name| {
                // snake_case -> the IDL's lowerCamelCase.
                let mut camel = String::new();
                let mut upper = false;
                for ch in name.chars() {
                    if ch == '_' {
                        upper = true;
                    } else if upper {
                        camel.extend(ch.to_uppercase());
                        upper = false;
                    } else {
                        camel.push(ch);
                    }
                }
                camel
            })
            .collect();
        methods.sort();
        let mut calls: Vec<String> = CALLS.iter().map(|c| (*c).to_owned()).collect();
        calls.sort();
        assert_eq!(methods, calls);
    }
}
