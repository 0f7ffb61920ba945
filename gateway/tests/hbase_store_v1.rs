//! hbidx's HBase store against the gateway answering like HBase 1.2, over a real socket: the
//! store must only make calls a 1.x Thrift server serves, and read health from it.

use std::sync::Arc;

use hbase_thrift::hbase::{ColumnDescriptor, HbaseSyncClient, THbaseSyncClient};
use hbidx_gateway::{ConfiguredTable, GatewayOptions, HbaseApi};
use hbidx_schema::model::{CellOp, Mutation};
use hbidx_store::{HbaseConfig, HbaseStore, RowStore, ScanRequest, StoreError};
use thrift::protocol::{TBinaryInputProtocol, TBinaryOutputProtocol};
use thrift::transport::{TBufferedReadTransport, TBufferedWriteTransport, TIoChannel};

/// Every `RowStore` method against a gateway answering like HBase 1.2: a call 1.x doesn't
/// serve would fail here with "Invalid method name".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_works_against_hbase_1_and_checks_health() {
    let dir = tempfile::tempdir().unwrap();
    let config = hbidx_schema::config::parse_config(
        r#"
[[tables]]
name = "user"
[[tables.families]]
name = "info"
[tables.rowkey]
parts = [ { kind = "key" } ]
[[tables.fields]]
name = "phone"
kind = "phone"
column = "info:phone"
"#,
    )
    .unwrap();
    let table = config.tables[0].clone();
    let spec = hbidx_store::TableSpec {
        name: "user".into(),
        families: Some(vec!["info".into()]),
        versions: Default::default(),
    };
    let embedded = Arc::new(
        hbidx_store::EmbeddedStore::open_tables(dir.path(), &[spec], Default::default()).unwrap(),
    );
    let options = GatewayOptions {
        api: HbaseApi::V1,
        ..GatewayOptions::new("127.0.0.1:0".parse().unwrap())
    };
    let configured = ConfiguredTable {
        config: Arc::new(table),
        split_keys: Vec::new(),
        kafka_topic: None,
    };
    let gateway = hbidx_gateway::serve(embedded, vec![configured], options).unwrap();
    let address = gateway.local_addr().to_string();
    let store = HbaseStore::new(
        HbaseConfig::new(address.clone()),
        &[("user".into(), "user".into())],
    );

    store.health().await.unwrap();
    let put = |rowkey: &str, phone: &str, ts| Mutation {
        table: "user".into(),
        rowkey: rowkey.as_bytes().to_vec(),
        ops: vec![CellOp::Put {
            column: "info:phone".into(),
            ts,
            value: phone.as_bytes().to_vec(),
        }],
    };
    store
        .mutate(vec![put("a", "13800138000", 5), put("b", "13900139000", 6)])
        .await
        .unwrap();
    store
        .mutate(vec![Mutation {
            table: "user".into(),
            rowkey: b"b".to_vec(),
            ops: vec![CellOp::DeleteRow { ts: 7 }],
        }])
        .await
        .unwrap();
    let rows = store
        .get_rows("user", &[b"a".to_vec(), b"b".to_vec()], None)
        .await
        .unwrap();
    assert_eq!(rows[0].as_ref().unwrap().cells["info:phone"].ts, 5);
    assert!(rows[1].is_none());
    let batch = store
        .scan(
            "user",
            &ScanRequest {
                columns: Some(vec!["info:phone".into()]),
                batch: 10,
                ..ScanRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(batch.rows.len(), 1);

    // The stand-in really answers like 1.x.
    let raw = std::net::TcpStream::connect(&address).unwrap();
    let (read, write) = thrift::transport::TTcpChannel::with_stream(raw)
        .split()
        .unwrap();
    let mut client = HbaseSyncClient::new(
        TBinaryInputProtocol::new(TBufferedReadTransport::new(read), true),
        TBinaryOutputProtocol::new(TBufferedWriteTransport::new(write), true),
    );
    let entity = || {
        hbase_thrift::hbase::TAccessControlEntity::new(
            "u".to_owned(),
            hbase_thrift::hbase::TPermissionScope::TABLE,
            "R".to_owned(),
            b"user".to_vec(),
            None,
        )
    };
    let answers = [
        (
            "getThriftServerType",
            client.get_thrift_server_type().map(drop),
        ),
        ("getClusterId", client.get_cluster_id().map(drop)),
        (
            "getTableNamesWithIsTableEnabled",
            client.get_table_names_with_is_table_enabled().map(drop),
        ),
        ("grant", client.grant(entity()).map(drop)),
        ("revoke", client.revoke(entity()).map(drop)),
    ];
    let checked: Vec<&str> = answers.iter().map(|(method, _)| *method).collect();
    assert_eq!(
        checked,
        hbidx_store::HBASE_2_ONLY,
        "every method HBase 1.x lacks"
    );
    for (method, answer) in answers {
        match answer {
            Err(thrift::Error::Application(err)) => {
                assert_eq!(err.kind, thrift::ApplicationErrorKind::UnknownMethod);
                assert_eq!(err.message, format!("Invalid method name: '{method}'"));
            }
            other => panic!("{method}: {other:?}"),
        }
    }

    // A table that is missing, and one that is disabled.
    let missing = HbaseStore::new(
        HbaseConfig::new(address.clone()),
        &[
            ("user".into(), "user".into()),
            ("gone".into(), "gone".into()),
        ],
    );
    let err = missing.health().await.unwrap_err();
    assert!(
        matches!(&err, StoreError::TableMissing { table, .. } if table == "gone"),
        "{err}"
    );
    client
        .create_table(
            b"side".to_vec(),
            vec![ColumnDescriptor {
                name: Some(b"f:".to_vec()),
                max_versions: Some(1),
                ..ColumnDescriptor::default()
            }],
        )
        .unwrap();
    client.disable_table(b"side".to_vec()).unwrap();
    let disabled = HbaseStore::new(HbaseConfig::new(address), &[("side".into(), "side".into())]);
    let err = disabled.health().await.unwrap_err();
    assert!(
        matches!(&err, StoreError::TableDisabled { table, .. } if table == "side"),
        "{err}"
    );
}
