//! The gateway over real sockets: a thrift client against a served store.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::handler::Attributes;
use hbase_thrift::hbase::{
    BatchMutation, HbaseSyncClient, IOError, Mutation as TMutation, THbaseSyncClient, TScan,
};
use hbidx_schema::config::parse_config;
use hbidx_store::{EmbeddedStore, StoreError};
use thrift::protocol::{TCompactInputProtocol, TCompactOutputProtocol};
use thrift::transport::{
    ReadHalf, TFramedReadTransport, TFramedWriteTransport, TIoChannel, TTcpChannel, WriteHalf,
};

type FramedCompactClient = HbaseSyncClient<
    TCompactInputProtocol<TFramedReadTransport<ReadHalf<TTcpChannel>>>,
    TCompactOutputProtocol<TFramedWriteTransport<WriteHalf<TTcpChannel>>>,
>;

const CONFIG: &str = r#"
[[tables]]
name = "people"
namespace = "app"
[[tables.families]]
name = "info"
compression = "LZ4"
[tables.rowkey]
parts = [ { kind = "key" } ]
[[tables.fields]]
name = "phone"
kind = "phone"
column = "info:phone"
[tables.splits]
algo = "explicit"
keys = ["g", "p"]
"#;

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<EmbeddedStore>,
    client: FramedCompactClient,
}

fn start(kafka_topic: Option<&str>, lease: Duration, max_scanners: usize) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = parse_config(CONFIG).expect("config");
    let table = config.tables[0].clone();
    let spec = hbidx_store::TableSpec {
        name: table.name.clone(),
        families: Some(vec!["info".to_owned()]),
    };
    let store = Arc::new(
        EmbeddedStore::open_tables(dir.path(), &[spec], Default::default()).expect("store"),
    );
    let split_keys = table.split_keys(None, None).expect("splits");
    let configured = ConfiguredTable {
        config: Arc::new(table),
        split_keys,
        kafka_topic: kafka_topic.map(str::to_owned),
    };
    let options = GatewayOptions {
        transport: ThriftTransport::Framed,
        protocol: ThriftProtocol::Compact,
        workers: 4,
        scanner_lease: lease,
        max_scanners,
        ..GatewayOptions::new("127.0.0.1:0".parse().expect("addr"))
    };
    let server = serve(store.clone(), vec![configured], options).expect("serves");
    let mut channel = TTcpChannel::new();
    channel.open(server.local_addr()).expect("connects");
    let (read, write) = channel.split().expect("split");
    let client = HbaseSyncClient::new(
        TCompactInputProtocol::new(TFramedReadTransport::new(read)),
        TCompactOutputProtocol::new(TFramedWriteTransport::new(write)),
    );
    Fixture {
        _dir: dir,
        store,
        client,
    }
}

fn io_message(error: thrift::Error) -> String {
    match &error {
        thrift::Error::User(user) => match user.downcast_ref::<IOError>() {
            Some(io) => io.message.clone().unwrap_or_default(),
            None => panic!("not an IOError: {error:?}"),
        },
        _ => panic!("not an IOError: {error:?}"),
    }
}

fn put(column: &str, value: &str) -> TMutation {
    TMutation::new(
        false,
        column.as_bytes().to_vec(),
        value.as_bytes().to_vec(),
        true,
    )
}

fn no_attributes() -> Attributes {
    Attributes::new()
}

fn full_scan(batch_size: Option<i32>, sort_columns: bool) -> TScan {
    TScan {
        start_row: None,
        stop_row: None,
        timestamp: None,
        columns: None,
        caching: Some(2),
        filter_string: None,
        batch_size,
        sort_columns: Some(sort_columns),
        reversed: None,
        cache_blocks: None,
    }
}

#[test]
fn framed_compact_serves_configured_tables_under_their_hbase_name() {
    let mut fixture = start(None, DEFAULT_SCANNER_LEASE, 10);
    let client = &mut fixture.client;
    assert_eq!(
        client.get_table_names().expect("names"),
        vec![b"app:people".to_vec()]
    );
    let regions = client
        .get_table_regions(b"app:people".to_vec())
        .expect("regions");
    let bounds: Vec<(Vec<u8>, Vec<u8>)> = regions
        .iter()
        .map(|r| (r.start_key.clone().unwrap(), r.end_key.clone().unwrap()))
        .collect();
    assert_eq!(
        bounds,
        [
            (b"".to_vec(), b"g".to_vec()),
            (b"g".to_vec(), b"p".to_vec()),
            (b"p".to_vec(), b"".to_vec())
        ]
    );
    let descriptors = client
        .get_column_descriptors(b"app:people".to_vec())
        .expect("descriptors");
    let info = &descriptors[&b"info:".to_vec()];
    assert_eq!(info.compression.as_deref(), Some("LZ4"));
    assert_eq!(info.max_versions, Some(1));

    // Writes land in the store under the store's name, with a change-feed event.
    client
        .mutate_row_ts(
            b"app:people".to_vec(),
            b"k1".to_vec(),
            vec![put("info:phone", "13800138000")],
            10,
            no_attributes(),
        )
        .expect("mutate");
    assert_eq!(fixture.store.last_offset("people"), 1);
    let row = client
        .get_row(b"people".to_vec(), b"k1".to_vec(), no_attributes())
        .expect("bare name works too");
    assert_eq!(row.len(), 1);
    let error = client.disable_table(b"app:people".to_vec()).unwrap_err();
    assert!(io_message(error).contains("hbidx config"));
}

#[test]
fn kafka_fed_tables_refuse_writes_and_still_serve_reads() {
    let mut fixture = start(Some("people-events"), DEFAULT_SCANNER_LEASE, 10);
    let error = fixture
        .client
        .mutate_row(
            b"app:people".to_vec(),
            b"k".to_vec(),
            vec![put("info:phone", "1")],
            no_attributes(),
        )
        .unwrap_err();
    let message = io_message(error);
    assert!(message.contains("people-events"), "{message}");
    assert!(message.contains("write to the topic"), "{message}");
    let error = fixture
        .client
        .delete_all_row(b"app:people".to_vec(), b"k".to_vec(), no_attributes())
        .unwrap_err();
    assert!(io_message(error).contains("Kafka"));
    assert_eq!(fixture.store.last_offset("people"), 0);
    assert!(
        fixture
            .client
            .get_row(b"app:people".to_vec(), b"k".to_vec(), no_attributes())
            .expect("reads work")
            .is_empty()
    );
}

#[test]
fn scanners_cut_sort_expire_and_are_capped() {
    let mut fixture = start(None, Duration::from_millis(300), 2);
    let client = &mut fixture.client;
    let batches = (0..3)
        .map(|i| {
            BatchMutation::new(
                format!("r{i}").into_bytes(),
                vec![put("info:a", "1"), put("info:b", "2"), put("info:c", "3")],
            )
        })
        .collect();
    client
        .mutate_rows(b"app:people".to_vec(), batches, no_attributes())
        .expect("mutate");

    // batchSize 2 cuts each 3-cell row into results of 2 and 1 cells (partial rows).
    let id = client
        .scanner_open_with_scan(
            b"app:people".to_vec(),
            full_scan(Some(2), true),
            no_attributes(),
        )
        .expect("open");
    let results = client.scanner_get_list(id, 100).expect("list");
    let shape: Vec<(Vec<u8>, usize)> = results
        .iter()
        .map(|r| {
            (
                r.row.clone().unwrap(),
                r.sorted_columns.as_ref().map_or(0, Vec::len),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (b"r0".to_vec(), 2),
            (b"r0".to_vec(), 1),
            (b"r1".to_vec(), 2),
            (b"r1".to_vec(), 1),
            (b"r2".to_vec(), 2),
            (b"r2".to_vec(), 1)
        ]
    );
    assert!(results.iter().all(|r| r.columns.is_none()));

    // The cap: a second open scanner is allowed, a third is not.
    let second = client
        .scanner_open(
            b"app:people".to_vec(),
            Vec::new(),
            Vec::new(),
            no_attributes(),
        )
        .expect("second");
    let error = client
        .scanner_open(
            b"app:people".to_vec(),
            Vec::new(),
            Vec::new(),
            no_attributes(),
        )
        .unwrap_err();
    assert!(io_message(error).contains("too many open scanners"));
    // Idle past the lease: both are gone, and the slots are free again.
    std::thread::sleep(Duration::from_millis(600));
    let error = client.scanner_get(second).unwrap_err();
    assert!(format!("{error:?}").contains("does not exist"), "{error:?}");
    let third = client
        .scanner_open(
            b"app:people".to_vec(),
            Vec::new(),
            Vec::new(),
            no_attributes(),
        )
        .expect("a slot is free after the lease");
    assert_eq!(client.scanner_get(third).expect("get").len(), 1);
    client.scanner_close(third).expect("close");
    assert!(client.scanner_close(third).is_err(), "closing twice");
    assert!(client.scanner_close(id).is_err(), "expired");
}

#[test]
fn a_taken_port_is_an_error_naming_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(EmbeddedStore::open(dir.path(), &[]).expect("store"));
    let error = serve(store, Vec::new(), GatewayOptions::new(addr)).unwrap_err();
    assert!(matches!(error, StoreError::GatewayBind { .. }));
    assert!(error.to_string().contains(&addr.to_string()), "{error}");
}
