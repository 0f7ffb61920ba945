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

pub(crate) type FramedCompactClient = HbaseSyncClient<
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

pub(crate) struct Fixture {
    _dir: tempfile::TempDir,
    pub(crate) store: Arc<EmbeddedStore>,
    pub(crate) client: FramedCompactClient,
    pub(crate) addr: std::net::SocketAddr,
}

pub(crate) fn start(kafka_topic: Option<&str>, lease: Duration, max_scanners: usize) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = parse_config(CONFIG).expect("config");
    let table = config.tables[0].clone();
    let spec = hbidx_store::TableSpec {
        name: table.name.clone(),
        families: Some(vec!["info".to_owned()]),
        versions: Default::default(),
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
        addr: server.local_addr(),
    }
}

pub(crate) fn io_message(error: thrift::Error) -> String {
    match &error {
        thrift::Error::User(user) => match user.downcast_ref::<IOError>() {
            Some(io) => io.message.clone().unwrap_or_default(),
            None => panic!("not an IOError: {error:?}"),
        },
        _ => panic!("not an IOError: {error:?}"),
    }
}

pub(crate) fn put(column: &str, value: &str) -> TMutation {
    TMutation::new(
        false,
        column.as_bytes().to_vec(),
        value.as_bytes().to_vec(),
        true,
    )
}

pub(crate) fn no_attributes() -> Attributes {
    Attributes::new()
}

pub(crate) fn full_scan(batch_size: Option<i32>, sort_columns: bool) -> TScan {
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

/// Writes the claimed container header of a hostile request.
type Claim = fn(&mut dyn thrift::protocol::TOutputProtocol) -> thrift::Result<()>;

/// A request claiming a container of two billion elements, or of a negative count, is refused
/// before anything is allocated for it: the connection is closed and the gateway serves on.
/// (Without the check the generated code asks the allocator for over 100 GB, which aborts the
/// whole process, this test's included.)
#[test]
fn claimed_container_sizes_over_the_limit_are_refused() {
    use thrift::protocol::{
        TFieldIdentifier, TInputProtocol, TListIdentifier, TMapIdentifier, TMessageIdentifier,
        TMessageType, TOutputProtocol, TStructIdentifier, TType,
    };
    let mut fixture = start(None, Duration::from_secs(60), 10);
    let claims: [(&str, i16, TType, Claim); 3] = [
        ("mutateRows", 2, TType::List, |o| {
            o.write_list_begin(&TListIdentifier::new(TType::Struct, i32::MAX))
        }),
        // Compact's writer can't write a negative count: the header byte (0xF0 | binary) and
        // the count -1 as its unsigned varint, as a hostile client would send them.
        ("getRows", 2, TType::List, |o| {
            [0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]
                .into_iter()
                .try_for_each(|byte| o.write_byte(byte))
        }),
        ("getRow", 3, TType::Map, |o| {
            o.write_map_begin(&TMapIdentifier::new(TType::String, TType::String, i32::MAX))
        }),
    ];
    for (method, field, field_type, claim) in claims {
        let stream = std::net::TcpStream::connect(fixture.addr).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let (read, write) = TTcpChannel::with_stream(stream).split().expect("split");
        let mut output = TCompactOutputProtocol::new(TFramedWriteTransport::new(write));
        output
            .write_message_begin(&TMessageIdentifier::new(method, TMessageType::Call, 1))
            .unwrap();
        output
            .write_struct_begin(&TStructIdentifier::new("args"))
            .unwrap();
        output
            .write_field_begin(&TFieldIdentifier::new("tableName", TType::String, 1))
            .unwrap();
        output.write_bytes(b"app:people").unwrap();
        output.write_field_end().unwrap();
        output
            .write_field_begin(&TFieldIdentifier::new("claim", field_type, field))
            .unwrap();
        claim(&mut output).unwrap();
        output.flush().unwrap();
        // The server answers an exception (or closes the connection), never a result.
        let mut input = TCompactInputProtocol::new(TFramedReadTransport::new(read));
        match input.read_message_begin() {
            Ok(message) => {
                assert_eq!(message.message_type, TMessageType::Exception, "{method}");
                let error = thrift::Error::read_application_error_from_in_protocol(&mut input)
                    .expect("an application exception");
                assert!(
                    error.message.contains("over the gateway's limit"),
                    "{method}: {error:?}"
                );
            }
            Err(error) => eprintln!("{method}: connection closed ({error})"),
        }
    }
    // And goes on serving.
    let names = fixture.client.get_table_names().expect("still serving");
    assert!(names.contains(&b"app:people".to_vec()), "{names:?}");
}

/// Issue 38: `TScan.filterString` runs on whole rows before `batchSize` cuts them, its state
/// (PageFilter) lasts across the scanner's store batches, and a bad filter is an IOError naming
/// the byte.
#[test]
fn filtered_scans_filter_whole_rows_then_cut_them() {
    let mut fixture = start(None, DEFAULT_SCANNER_LEASE, 10);
    let client = &mut fixture.client;
    for (key, phone) in [("a1", "1"), ("a2", "2"), ("a3", "1"), ("a4", "1")] {
        client
            .mutate_row(
                b"app:people".to_vec(),
                key.as_bytes().to_vec(),
                vec![put("info:phone", phone), put("info:name", key)],
                no_attributes(),
            )
            .expect("mutate");
    }
    let mut scan_keys = |filter: &str, batch_size: Option<i32>| -> Vec<String> {
        let scan = TScan {
            filter_string: Some(filter.as_bytes().to_vec()),
            ..full_scan(batch_size, false)
        };
        let id = client
            .scanner_open_with_scan(b"app:people".to_vec(), scan, no_attributes())
            .expect("open");
        let results = client.scanner_get_list(id, 100).expect("list");
        client.scanner_close(id).expect("close");
        results
            .iter()
            .map(|result| String::from_utf8_lossy(result.row.as_deref().unwrap_or_default()).into())
            .collect()
    };
    // Each matching row whole (both cells), then cut into one-cell results.
    assert_eq!(
        scan_keys(
            "SingleColumnValueFilter('info', 'phone', =, 'binary:1')",
            Some(1)
        ),
        ["a1", "a1", "a3", "a3", "a4", "a4"]
    );
    // Caching is 2: the page's second row is in the store's second batch.
    assert_eq!(
        scan_keys("RowFilter(!=, 'binary:a1') AND PageFilter(2)", None),
        ["a2", "a3"]
    );
    let scan = TScan {
        filter_string: Some(b"PageFilter(2) XOR KeyOnlyFilter()".to_vec()),
        ..full_scan(None, false)
    };
    let error = client
        .scanner_open_with_scan(b"app:people".to_vec(), scan, no_attributes())
        .unwrap_err();
    assert_eq!(
        io_message(error),
        "IllegalArgumentException: filter string, byte 14: expected AND, OR or the end of the \
         filter string, found `XOR KeyOnlyFilte…`"
    );
}
