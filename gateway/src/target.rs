//! The table a call names, resolved: its store name, the name clients see, and the checks
//! (enabled, writable, known families) and conversions every call makes against it.

use std::sync::Arc;

use hbase_thrift::hbase::Mutation as TMutation;
use hbidx_schema::model::CellOp;
use hbidx_store::{StoreError, TableInfo, TableOrigin};

use crate::error::{Answer, Failure};
use crate::handler::Gateway;
use crate::options::ConfiguredTable;
use crate::parse::ColumnSpec;

/// A table a call names, resolved.
pub(crate) struct Target {
    /// The name in the embedded store.
    pub(crate) store_name: String,
    /// The name HBase clients use.
    pub(crate) thrift_name: String,
    pub(crate) info: TableInfo,
    pub(crate) configured: Option<Arc<ConfiguredTable>>,
}

impl Target {
    fn check_enabled(&self) -> Answer<()> {
        if self.info.enabled {
            Ok(())
        } else {
            Err(Failure::Io(format!(
                "TableNotEnabledException: table `{}` is disabled; enable it first",
                self.thrift_name
            )))
        }
    }

    pub(crate) fn check_writable(&self) -> Answer<()> {
        self.check_enabled()?;
        if let Some(topic) = self
            .configured
            .as_ref()
            .and_then(|table| table.kafka_topic.as_deref())
        {
            return Err(Failure::Io(format!(
                "table `{}` is fed from Kafka topic `{topic}`: write to the topic instead (it is \
                 the table's log; a write here would reach neither the index nor the other replicas)",
                self.thrift_name
            )));
        }
        Ok(())
    }

    pub(crate) fn check_family(&self, family: &str) -> Answer<()> {
        match &self.info.families {
            Some(families) if !families.iter().any(|known| known == family) => {
                Err(Failure::Io(format!(
                    "NoSuchColumnFamilyException: column family `{family}` does not exist in table `{}` \
                     (families: {})",
                    self.thrift_name,
                    families.join(", ")
                )))
            }
            _ => Ok(()),
        }
    }

    /// The store projection of a read's column list (`None`: every column).
    pub(crate) fn projection(&self, columns: &[Vec<u8>]) -> Answer<Option<Vec<String>>> {
        if columns.is_empty() {
            return Ok(None);
        }
        let mut projection = Vec::with_capacity(columns.len());
        for column in columns {
            let spec = ColumnSpec::parse(column)?;
            self.check_family(spec.family_name())?;
            projection.push(spec.projection());
        }
        Ok(Some(projection))
    }

    /// Turns Thrift mutations of one row into cell operations at `ts`, deletes before puts. All
    /// share the call's timestamp, so a delete masks a put of the same cell in the same call
    /// whatever their order, which is what HBase's `mutateRows` answers too (it applies the
    /// puts, then the deletes, each stamped when applied).
    pub(crate) fn ops(&self, mutations: Vec<TMutation>, ts: i64) -> Answer<Vec<CellOp>> {
        let mut deletes = Vec::new();
        let mut puts = Vec::new();
        for mutation in mutations {
            let column = mutation
                .column
                .ok_or_else(|| Failure::IllegalArgument("a mutation has no column".to_owned()))?;
            let spec = ColumnSpec::parse(&column)?;
            self.check_family(spec.family_name())?;
            if mutation.is_delete.unwrap_or(false) {
                deletes.push(match spec {
                    ColumnSpec::Family(family) => CellOp::DeleteFamily { family, ts },
                    ColumnSpec::Column(column) => CellOp::DeleteCell { column, ts },
                });
                continue;
            }
            let ColumnSpec::Column(column) = spec else {
                return Err(Failure::IllegalArgument(format!(
                    "put to `{}` has no qualifier: write to `family:qualifier`",
                    column.escape_ascii()
                )));
            };
            let value = mutation.value.ok_or_else(|| {
                Failure::IllegalArgument(format!("put to `{column}` has no value"))
            })?;
            puts.push(CellOp::Put { column, ts, value });
        }
        deletes.append(&mut puts);
        Ok(deletes)
    }
}

impl Gateway {
    /// The name clients see for a table of the store.
    pub(crate) fn thrift_name(&self, info: &TableInfo) -> String {
        match (info.origin, self.by_store_name.get(&info.name)) {
            (TableOrigin::Configured, Some(table)) => table.config.full_name(),
            _ => info.name.clone(),
        }
    }

    pub(crate) fn target(&self, name: &[u8]) -> Answer<Target> {
        let name = std::str::from_utf8(name).map_err(|_| {
            Failure::Io(format!("table name `{}` is not UTF-8", name.escape_ascii()))
        })?;
        // HBase prints tables of the default namespace without it.
        let name = name.strip_prefix("default:").unwrap_or(name);
        let configured = self.by_thrift_name.get(name).cloned();
        let store_name = configured
            .as_ref()
            .map_or_else(|| name.to_owned(), |table| table.config.name.clone());
        let info = self
            .store
            .table_info(&store_name)
            .map_err(|error| match error {
                StoreError::UnknownTable(_) => Failure::Io(format!(
                    "TableNotFoundException: table `{name}` does not exist"
                )),
                other => Failure::from(other),
            })?;
        let thrift_name = self.thrift_name(&info);
        Ok(Target {
            store_name,
            thrift_name,
            info,
            configured,
        })
    }

    pub(crate) fn readable(&self, name: &[u8]) -> Answer<Target> {
        let target = self.target(name)?;
        target.check_enabled()?;
        Ok(target)
    }
}
