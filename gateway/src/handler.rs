//! [`Gateway`], the `HbaseSyncHandler`: one thin method per call of the IDL, delegating to the
//! reads, writes, scanners and admin modules.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hbase_thrift::hbase::{
    BatchMutation, ColumnDescriptor, HbaseSyncHandler, Mutation as TMutation, ScannerID,
    TAccessControlEntity, TAppend, TCell, TIncrement, TRegionInfo, TRowResult, TScan,
    TThriftServerType,
};
use hbidx_store::EmbeddedStore;

use crate::HbaseApi;
use crate::admin::compact;
use crate::error::{Failure, invalid_method, unsupported};
use crate::options::{ConfiguredTable, GatewayOptions};
use crate::parse::batches;
use crate::scanners::{ScannerMap, open_with_scan, scan_request};

/// The `HbaseSyncHandler` over the embedded store. See the [crate docs](crate).
pub struct Gateway {
    pub(crate) store: Arc<EmbeddedStore>,
    /// Configured tables by every name a client may use for them (`ns:name` and bare `name`).
    pub(crate) by_thrift_name: HashMap<String, Arc<ConfiguredTable>>,
    /// Configured tables by store name.
    pub(crate) by_store_name: HashMap<String, Arc<ConfiguredTable>>,
    pub(crate) scanners: Mutex<ScannerMap>,
    pub(crate) scanner_lease: Duration,
    pub(crate) max_scanners: usize,
    /// Where clients reach this server, for `getTableRegions`.
    pub(crate) address: SocketAddr,
    api: HbaseApi,
}

impl Gateway {
    /// A handler for `HbaseSyncProcessor`; [`serve`](crate::serve) builds and runs one.
    pub fn new(
        store: Arc<EmbeddedStore>,
        configured: Vec<ConfiguredTable>,
        options: &GatewayOptions,
        address: SocketAddr,
    ) -> Self {
        let mut by_thrift_name = HashMap::new();
        let mut by_store_name = HashMap::new();
        for table in configured {
            let table = Arc::new(table);
            by_thrift_name.insert(table.config.full_name(), table.clone());
            by_thrift_name.insert(table.config.name.clone(), table.clone());
            by_store_name.insert(table.config.name.clone(), table);
        }
        Self {
            store,
            by_thrift_name,
            by_store_name,
            scanners: Mutex::new(ScannerMap::new()),
            scanner_lease: options.scanner_lease,
            max_scanners: options.max_scanners,
            address,
            api: options.api,
        }
    }

    /// Refuses a method HBase 2.0 added when answering like 1.x.
    fn since_hbase_2(&self, method: &str) -> thrift::Result<()> {
        match self.api {
            HbaseApi::V1 => Err(invalid_method(method)),
            HbaseApi::V2 => Ok(()),
        }
    }
}

/// The `attributes` argument of the data calls, which the gateway doesn't use.
pub(crate) type Attributes = BTreeMap<Vec<u8>, Vec<u8>>;

impl HbaseSyncHandler for Gateway {
    // Tables and admin (admin.rs); under `HbaseApi::V1`, what 2.0 added is an unknown method.

    fn handle_enable_table(&self, table_name: Vec<u8>) -> thrift::Result<()> {
        self.set_enabled(&table_name, true)
            .map_err(Failure::io_only)
    }

    fn handle_disable_table(&self, table_name: Vec<u8>) -> thrift::Result<()> {
        self.set_enabled(&table_name, false)
            .map_err(Failure::io_only)
    }

    fn handle_is_table_enabled(&self, table_name: Vec<u8>) -> thrift::Result<bool> {
        self.target(&table_name)
            .map(|target| target.info.enabled)
            .map_err(Failure::io_only)
    }

    fn handle_compact(&self, table_name_or_region_name: Vec<u8>) -> thrift::Result<()> {
        compact(self, &table_name_or_region_name)
    }

    fn handle_major_compact(&self, table_name_or_region_name: Vec<u8>) -> thrift::Result<()> {
        compact(self, &table_name_or_region_name)
    }

    fn handle_get_table_names(&self) -> thrift::Result<Vec<Vec<u8>>> {
        Ok(self
            .table_names()
            .into_iter()
            .map(|(name, _)| name.into_bytes())
            .collect())
    }

    fn handle_get_table_names_with_is_table_enabled(
        &self,
    ) -> thrift::Result<BTreeMap<Vec<u8>, bool>> {
        self.since_hbase_2("getTableNamesWithIsTableEnabled")?;
        Ok(self
            .table_names()
            .into_iter()
            .map(|(name, enabled)| (name.into_bytes(), enabled))
            .collect())
    }

    fn handle_get_column_descriptors(
        &self,
        table_name: Vec<u8>,
    ) -> thrift::Result<BTreeMap<Vec<u8>, ColumnDescriptor>> {
        self.column_descriptors(&table_name)
            .map_err(Failure::io_only)
    }

    fn handle_get_table_regions(&self, table_name: Vec<u8>) -> thrift::Result<Vec<TRegionInfo>> {
        self.regions(&table_name).map_err(Failure::io_only)
    }

    fn handle_create_table(
        &self,
        table_name: Vec<u8>,
        column_families: Vec<ColumnDescriptor>,
    ) -> thrift::Result<()> {
        self.create_table(&table_name, column_families)
            .map_err(Failure::with_already_exists)
    }

    fn handle_delete_table(&self, table_name: Vec<u8>) -> thrift::Result<()> {
        self.delete_table(&table_name).map_err(Failure::io_only)
    }

    fn handle_get_region_info(&self, _row: Vec<u8>) -> thrift::Result<TRegionInfo> {
        Err(unsupported("getRegionInfo"))
    }

    fn handle_get_thrift_server_type(&self) -> thrift::Result<TThriftServerType> {
        self.since_hbase_2("getThriftServerType")?;
        Ok(TThriftServerType::ONE)
    }

    fn handle_get_cluster_id(&self) -> thrift::Result<String> {
        self.since_hbase_2("getClusterId")?;
        Ok("hbidx-embedded".to_owned())
    }

    fn handle_grant(&self, _info: TAccessControlEntity) -> thrift::Result<bool> {
        self.since_hbase_2("grant")?;
        Err(unsupported("grant"))
    }

    fn handle_revoke(&self, _info: TAccessControlEntity) -> thrift::Result<bool> {
        self.since_hbase_2("revoke")?;
        Err(unsupported("revoke"))
    }

    // Reads (reads.rs).

    fn handle_get(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        column: Vec<u8>,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TCell>> {
        self.read_cells(&table_name, row, &column, None, None)
            .map_err(Failure::io_only)
    }

    fn handle_get_ver(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        column: Vec<u8>,
        num_versions: i32,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TCell>> {
        self.read_cells(&table_name, row, &column, None, Some(num_versions))
            .map_err(Failure::io_only)
    }

    fn handle_get_ver_ts(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        column: Vec<u8>,
        timestamp: i64,
        num_versions: i32,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TCell>> {
        self.read_cells(
            &table_name,
            row,
            &column,
            Some(timestamp),
            Some(num_versions),
        )
        .map_err(Failure::io_only)
    }

    fn handle_get_row(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, vec![row], &[], None)
            .map_err(Failure::io_only)
    }

    fn handle_get_row_with_columns(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        columns: Vec<Vec<u8>>,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, vec![row], &columns, None)
            .map_err(Failure::io_only)
    }

    fn handle_get_row_ts(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, vec![row], &[], Some(timestamp))
            .map_err(Failure::io_only)
    }

    fn handle_get_row_with_columns_ts(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        columns: Vec<Vec<u8>>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, vec![row], &columns, Some(timestamp))
            .map_err(Failure::io_only)
    }

    fn handle_get_rows(
        &self,
        table_name: Vec<u8>,
        rows: Vec<Vec<u8>>,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, rows, &[], None)
            .map_err(Failure::io_only)
    }

    fn handle_get_rows_with_columns(
        &self,
        table_name: Vec<u8>,
        rows: Vec<Vec<u8>>,
        columns: Vec<Vec<u8>>,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, rows, &columns, None)
            .map_err(Failure::io_only)
    }

    fn handle_get_rows_ts(
        &self,
        table_name: Vec<u8>,
        rows: Vec<Vec<u8>>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, rows, &[], Some(timestamp))
            .map_err(Failure::io_only)
    }

    fn handle_get_rows_with_columns_ts(
        &self,
        table_name: Vec<u8>,
        rows: Vec<Vec<u8>>,
        columns: Vec<Vec<u8>>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, rows, &columns, Some(timestamp))
            .map_err(Failure::io_only)
    }

    // Writes (writes.rs).

    fn handle_mutate_row(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        mutations: Vec<TMutation>,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        self.write(&table_name, vec![(row, mutations)], None)
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_mutate_row_ts(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        mutations: Vec<TMutation>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        self.write(&table_name, vec![(row, mutations)], Some(timestamp))
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_mutate_rows(
        &self,
        table_name: Vec<u8>,
        row_batches: Vec<BatchMutation>,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        batches(row_batches)
            .and_then(|rows| self.write(&table_name, rows, None))
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_mutate_rows_ts(
        &self,
        table_name: Vec<u8>,
        row_batches: Vec<BatchMutation>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        batches(row_batches)
            .and_then(|rows| self.write(&table_name, rows, Some(timestamp)))
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_delete_all(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        column: Vec<u8>,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        self.delete_all(&table_name, row, &column, None)
            .map_err(Failure::io_only)
    }

    fn handle_delete_all_ts(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        column: Vec<u8>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        self.delete_all(&table_name, row, &column, Some(timestamp))
            .map_err(Failure::io_only)
    }

    fn handle_delete_all_row(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        self.delete_row(&table_name, row, None)
            .map_err(Failure::io_only)
    }

    fn handle_delete_all_row_ts(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        self.delete_row(&table_name, row, Some(timestamp))
            .map_err(Failure::io_only)
    }

    // Read-modify-write calls, atomic per row (atomic.rs).

    fn handle_atomic_increment(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        column: Vec<u8>,
        value: i64,
    ) -> thrift::Result<i64> {
        self.increment(&table_name, &row, &column, value, true)
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_increment(&self, increment: TIncrement) -> thrift::Result<()> {
        self.increment_one(increment).map_err(Failure::io_only)
    }

    /// Each increment is atomic on its own, as in HBase (which applies them one by one too).
    fn handle_increment_rows(&self, increments: Vec<TIncrement>) -> thrift::Result<()> {
        for increment in increments {
            self.increment_one(increment).map_err(Failure::io_only)?;
        }
        Ok(())
    }

    fn handle_append(&self, append: TAppend) -> thrift::Result<Vec<TCell>> {
        self.append(append).map_err(Failure::io_only)
    }

    fn handle_check_and_put(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        column: Vec<u8>,
        value: Vec<u8>,
        mput: TMutation,
        _attributes: Attributes,
    ) -> thrift::Result<bool> {
        self.check_and_put(&table_name, &row, &column, value, mput)
            .map_err(Failure::with_illegal_argument)
    }

    // Scanners (scanners.rs).

    fn handle_scanner_open_with_scan(
        &self,
        table_name: Vec<u8>,
        scan: TScan,
        _attributes: Attributes,
    ) -> thrift::Result<ScannerID> {
        open_with_scan(self, &table_name, scan).map_err(Failure::io_only)
    }

    fn handle_scanner_open(
        &self,
        table_name: Vec<u8>,
        start_row: Vec<u8>,
        columns: Vec<Vec<u8>>,
        _attributes: Attributes,
    ) -> thrift::Result<ScannerID> {
        let request = scan_request(start_row, None, None);
        self.open_range(&table_name, request, &columns, None)
            .map_err(Failure::io_only)
    }

    fn handle_scanner_open_with_stop(
        &self,
        table_name: Vec<u8>,
        start_row: Vec<u8>,
        stop_row: Vec<u8>,
        columns: Vec<Vec<u8>>,
        _attributes: Attributes,
    ) -> thrift::Result<ScannerID> {
        let request = scan_request(start_row, Some(stop_row), None);
        self.open_range(&table_name, request, &columns, None)
            .map_err(Failure::io_only)
    }

    fn handle_scanner_open_with_prefix(
        &self,
        table_name: Vec<u8>,
        start_and_prefix: Vec<u8>,
        columns: Vec<Vec<u8>>,
        _attributes: Attributes,
    ) -> thrift::Result<ScannerID> {
        let request = scan_request(start_and_prefix.clone(), None, Some(start_and_prefix));
        self.open_range(&table_name, request, &columns, None)
            .map_err(Failure::io_only)
    }

    fn handle_scanner_open_ts(
        &self,
        table_name: Vec<u8>,
        start_row: Vec<u8>,
        columns: Vec<Vec<u8>>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<ScannerID> {
        let request = scan_request(start_row, None, None);
        self.open_range(&table_name, request, &columns, Some(timestamp))
            .map_err(Failure::io_only)
    }

    fn handle_scanner_open_with_stop_ts(
        &self,
        table_name: Vec<u8>,
        start_row: Vec<u8>,
        stop_row: Vec<u8>,
        columns: Vec<Vec<u8>>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<ScannerID> {
        let request = scan_request(start_row, Some(stop_row), None);
        self.open_range(&table_name, request, &columns, Some(timestamp))
            .map_err(Failure::io_only)
    }

    fn handle_scanner_get(&self, id: ScannerID) -> thrift::Result<Vec<TRowResult>> {
        self.scanner_next(id, 1)
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_scanner_get_list(
        &self,
        id: ScannerID,
        nb_rows: i32,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.scanner_next(id, nb_rows)
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_scanner_close(&self, id: ScannerID) -> thrift::Result<()> {
        self.close_scanner(id)
            .map_err(Failure::with_illegal_argument)
    }
}
