//! Event formats on Kafka topics, decoded into the one mutation model (`hbidx_schema::model`).
//!
//! - [`EventFormat::Json`]: hbidx's own JSON mutation events (docs/guide/kafka.md, "Event formats").
//! - [`EventFormat::HbaseKafkaProxy`]: the Apache hbase-connectors Kafka Proxy's `HBaseKafkaEvent`,
//!   bare Avro binary, one message per cell.
//!
//! Errors name what is wrong and never echo values: payloads carry phone and idcard numbers,
//! and decode reasons end up in logs and dead letters' `reason`. That is also why a JSON event's
//! fields are taken as raw JSON text and then read by hand: serde's typed errors quote the
//! offending value.

use std::borrow::Cow;
use std::sync::OnceLock;

use apache_avro::Schema;
use apache_avro::types::Value as AvroValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hbidx_schema::codec::parse_printable;
use hbidx_schema::config::TableConfig;
use hbidx_schema::model::{CellOp, Mutation, split_column};
use serde_json::value::RawValue;
use serde_json::{Map, Value as JsonValue, json};

pub use hbidx_schema::config::EventFormat;

/// Why a message could not be turned into a mutation. The text is safe to log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

fn bad(reason: impl Into<String>) -> DecodeError {
    DecodeError(reason.into())
}

/// What one message decodes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A mutation of this source's table.
    Mutation(Mutation),
    /// A valid event for a different table (topics may carry several tables, e.g. a proxy
    /// routing rule per namespace). Counted, not indexed, not a dead letter.
    OtherTable(String),
}

/// Whether `name` (as written in an event) is this table: its bare name or `ns:name`. Without
/// allocating: it runs for every event, foreign ones included.
fn is_table(table: &TableConfig, name: &str) -> bool {
    name == table.name
        || name
            .split_once(':')
            .is_some_and(|(namespace, bare)| namespace == table.namespace && bare == table.name)
}

/// The fields of an hbidx JSON event, borrowed from the payload as raw JSON text and read by
/// hand below, so an error never quotes a value. Parsing into a `serde_json::Value` instead
/// allocated every key and value of every event (~4% of a Kafka catch-up's CPU). Unknown
/// fields are skipped; `null` reads as absent.
#[derive(serde::Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    table: Option<&'a RawValue>,
    #[serde(borrow, default)]
    op: Option<&'a RawValue>,
    #[serde(borrow, default)]
    ts: Option<&'a RawValue>,
    #[serde(borrow, default)]
    key: Option<&'a RawValue>,
    #[serde(borrow, default)]
    rowkey: Option<&'a RawValue>,
    #[serde(borrow, default)]
    rowkey_b64: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cells: Option<&'a RawValue>,
    #[serde(borrow, default)]
    columns: Option<&'a RawValue>,
    #[serde(borrow, default)]
    family: Option<&'a RawValue>,
}

/// A JSON string's text, borrowed unless it has escapes. `None` if `raw` is not a string.
fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\\') {
        serde_json::from_str::<String>(text).ok().map(Cow::Owned)
    } else {
        Some(Cow::Borrowed(inner))
    }
}

/// The members of a JSON object in document order, keys borrowed where they have no escapes.
struct RawObject<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for RawObject<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = RawObject<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(Key(key)) = map.next_key()? {
                    members.push((key, map.next_value()?));
                }
                Ok(RawObject(members))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// An object key, borrowed from the payload when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> serde::de::Visitor<'de> for Text {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(text)))
            }
            fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(text.to_owned())))
            }
        }
        deserializer.deserialize_str(Text)
    }
}

/// Decodes one hbidx JSON event. `message_ts` (the Kafka record timestamp) is the cell timestamp
/// when the event has no `ts`.
pub fn decode_json(
    table: &TableConfig,
    payload: &[u8],
    message_ts: Option<i64>,
) -> Result<Decoded, DecodeError> {
    let not_an_object = || bad("event must be a JSON object (each field at most once)");
    let event: RawEvent = serde_json::from_slice(payload).map_err(|err| match err.classify() {
        // Valid JSON of another shape (an array, a string …) or a repeated field. serde's own
        // message would quote the value.
        serde_json::error::Category::Data => not_an_object(),
        category => bad(format!(
            "not JSON ({category:?} error at line {} column {})",
            err.line(),
            err.column()
        )),
    })?;
    // serde also reads a struct from an array of its fields in order.
    if payload.trim_ascii_start().first() != Some(&b'{') {
        return Err(not_an_object());
    }
    fn string<'a>(
        name: &str,
        raw: Option<&'a RawValue>,
    ) -> Result<Option<Cow<'a, str>>, DecodeError> {
        match raw {
            None => Ok(None),
            Some(raw) => raw_str(raw)
                .map(Some)
                .ok_or_else(|| bad(format!("\"{name}\" must be a string"))),
        }
    }
    let table_name = string("table", event.table)?.ok_or_else(|| bad("\"table\" is missing"))?;
    if !is_table(table, &table_name) {
        return Ok(Decoded::OtherTable(table_name.into_owned()));
    }
    let op = string("op", event.op)?.ok_or_else(|| bad("\"op\" is missing"))?;
    let ts = match event.ts {
        None => {
            message_ts.ok_or_else(|| bad("\"ts\" is missing and the message has no timestamp"))?
        }
        Some(raw) => serde_json::from_str::<i64>(raw.get())
            .ok()
            .filter(|ts| *ts >= 0)
            .ok_or_else(|| bad("\"ts\" must be a non-negative integer (milliseconds)"))?,
    };
    let rowkey = match (
        string("key", event.key)?,
        string("rowkey", event.rowkey)?,
        string("rowkey_b64", event.rowkey_b64)?,
    ) {
        (_, Some(printable_key), None) => {
            parse_printable(&printable_key).map_err(|err| bad(format!("\"rowkey\": {err}")))?
        }
        (_, None, Some(b64)) => B64
            .decode(b64.as_bytes())
            .map_err(|_| bad("\"rowkey_b64\" is not valid base64"))?,
        (_, Some(_), Some(_)) => return Err(bad("give only one of \"rowkey\" and \"rowkey_b64\"")),
        (Some(key), None, None) => table
            .rowkey
            .encode(&key)
            .map_err(|err| bad(format!("\"key\": {err}")))?,
        (None, None, None) => {
            return Err(bad(
                "one of \"key\", \"rowkey\", \"rowkey_b64\" is required",
            ));
        }
    };
    if rowkey.is_empty() {
        return Err(bad("the rowkey is empty"));
    }
    let check_column = |column: &str| -> Result<(), DecodeError> {
        let (family, _) = split_column(column)
            .ok_or_else(|| bad(format!("column \"{column}\" is not family:qualifier")))?;
        if !table.families.iter().any(|f| f.name == family) {
            return Err(bad(format!(
                "column \"{column}\": family \"{family}\" is not declared for table {}",
                table.name
            )));
        }
        Ok(())
    };
    let ops = match &*op {
        "put" => {
            let cells = event
                .cells
                .and_then(|raw| serde_json::from_str::<RawObject>(raw.get()).ok())
                .ok_or_else(|| bad("a put needs \"cells\": an object of column -> string"))?
                .0;
            if cells.is_empty() {
                return Err(bad("a put needs at least one cell"));
            }
            let mut ops = Vec::with_capacity(cells.len());
            for (index, (column, value)) in cells.iter().enumerate() {
                check_column(column)?;
                // Two values for one cell at one timestamp: which one HBase would keep depends
                // on the writer, so the event is refused rather than guessed at.
                if cells[..index].iter().any(|(earlier, _)| earlier == column) {
                    return Err(bad(format!("cell \"{column}\" is given more than once")));
                }
                let Some(value) = raw_str(value) else {
                    return Err(bad(format!("cell \"{column}\" must be a string")));
                };
                ops.push(CellOp::Put {
                    column: column.clone().into_owned(),
                    ts,
                    value: value.as_bytes().to_vec(),
                });
            }
            ops
        }
        "delete_cells" => {
            let Some(columns) = event
                .columns
                .and_then(|raw| serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok())
            else {
                return Err(bad(
                    "delete_cells needs \"columns\": an array of family:qualifier",
                ));
            };
            if columns.is_empty() {
                return Err(bad("delete_cells needs at least one column"));
            }
            let mut ops = Vec::with_capacity(columns.len());
            for column in columns {
                let Some(column) = raw_str(column) else {
                    return Err(bad("\"columns\" entries must be strings"));
                };
                check_column(&column)?;
                ops.push(CellOp::DeleteCell {
                    column: column.into_owned(),
                    ts,
                });
            }
            ops
        }
        "delete_family" => {
            let family = string("family", event.family)?
                .ok_or_else(|| bad("delete_family needs \"family\""))?;
            if !table.families.iter().any(|f| f.name == family) {
                return Err(bad(format!(
                    "family \"{family}\" is not declared for table {}",
                    table.name
                )));
            }
            vec![CellOp::DeleteFamily {
                family: family.to_string(),
                ts,
            }]
        }
        "delete_row" => vec![CellOp::DeleteRow { ts }],
        _ => {
            return Err(bad(
                "\"op\" must be put, delete_cells, delete_family or delete_row",
            ));
        }
    };
    Ok(Decoded::Mutation(Mutation {
        table: table.name.clone(),
        rowkey,
        ops,
    }))
}

/// Encodes a mutation as an hbidx JSON event (what the write-through API publishes). The rowkey
/// goes as `rowkey_b64` so that random-salt designs replay to the same row; `key` is added for
/// people reading the topic.
pub fn encode_json(table: &TableConfig, mutation: &Mutation) -> Vec<u8> {
    let mut event = Map::new();
    event.insert("table".into(), json!(table.full_name()));
    event.insert("rowkey_b64".into(), json!(B64.encode(&mutation.rowkey)));
    if let Ok(key) = table.rowkey.decode(&mutation.rowkey) {
        event.insert("key".into(), json!(key));
    }
    let ts = mutation.ops.first().map(CellOp::ts).unwrap_or_default();
    event.insert("ts".into(), json!(ts));
    let puts: Map<String, JsonValue> = mutation
        .ops
        .iter()
        .filter_map(|op| match op {
            CellOp::Put { column, value, .. } => {
                Some((column.clone(), json!(String::from_utf8_lossy(value))))
            }
            _ => None,
        })
        .collect();
    let deleted: Vec<&str> = mutation
        .ops
        .iter()
        .filter_map(|op| match op {
            CellOp::DeleteCell { column, .. } => Some(column.as_str()),
            _ => None,
        })
        .collect();
    if mutation
        .ops
        .iter()
        .any(|op| matches!(op, CellOp::DeleteRow { .. }))
    {
        event.insert("op".into(), json!("delete_row"));
    } else if !deleted.is_empty() {
        event.insert("op".into(), json!("delete_cells"));
        event.insert("columns".into(), json!(deleted));
    } else {
        event.insert("op".into(), json!("put"));
        event.insert("cells".into(), JsonValue::Object(puts));
    }
    serde_json::to_vec(&JsonValue::Object(event)).unwrap_or_default()
}

/// The `HBaseKafkaEvent` Avro schema of apache/hbase-connectors' Kafka Proxy.
pub const HBASE_KAFKA_EVENT_SCHEMA: &str = r#"{
  "type": "record",
  "name": "HBaseKafkaEvent",
  "namespace": "org.apache.hadoop.hbase.kafka",
  "fields": [
    {"name": "key", "type": "bytes"},
    {"name": "timestamp", "type": "long"},
    {"name": "delete", "type": "boolean"},
    {"name": "value", "type": "bytes"},
    {"name": "qualifier", "type": "bytes"},
    {"name": "family", "type": "bytes"},
    {"name": "table", "type": "bytes"}
  ]
}"#;

/// Largest allocation a single Avro message may ask for. A corrupt length prefix must not make
/// the indexer try to allocate gigabytes.
const AVRO_MAX_ALLOCATION: usize = 16 << 20;

fn proxy_schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        apache_avro::util::max_allocation_bytes(AVRO_MAX_ALLOCATION);
        #[allow(clippy::expect_used)]
        Schema::parse_str(HBASE_KAFKA_EVENT_SCHEMA).expect("the built-in schema is valid")
    })
}

/// One cell event of the Kafka Proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyCell {
    pub rowkey: Vec<u8>,
    pub op: CellOp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyDecoded {
    Cell(ProxyCell),
    /// A cell of another table (see [`Decoded::OtherTable`]).
    OtherTable(String),
}

/// Decodes one Kafka Proxy message into the cell operation it carries.
///
/// `delete = true` means the HBase mutation was a Delete (the proxy does not pass the cell
/// type): with a qualifier it deletes that column, without one the whole family (a row delete
/// reaches the WAL as one family delete per family).
pub fn decode_proxy(table: &TableConfig, payload: &[u8]) -> Result<ProxyDecoded, DecodeError> {
    let schema = proxy_schema();
    let reader = apache_avro::reader::datum::GenericDatumReader::builder(schema)
        .build()
        .map_err(|err| bad(format!("avro reader: {err}")))?;
    let mut rest = payload;
    let value = reader
        .read_value(&mut rest)
        .map_err(|_| bad("not an HBaseKafkaEvent Avro datum"))?;
    if !rest.is_empty() {
        return Err(bad(format!(
            "{} trailing bytes after the HBaseKafkaEvent datum",
            rest.len()
        )));
    }
    let AvroValue::Record(fields) = value else {
        return Err(bad("not an HBaseKafkaEvent record"));
    };
    let mut key = None;
    let mut ts = None;
    let mut delete = None;
    let mut value = None;
    let mut qualifier = None;
    let mut family = None;
    let mut table_name = None;
    for (name, field) in fields {
        match (name.as_str(), field) {
            ("key", AvroValue::Bytes(b)) => key = Some(b),
            ("timestamp", AvroValue::Long(t)) => ts = Some(t),
            ("delete", AvroValue::Boolean(d)) => delete = Some(d),
            ("value", AvroValue::Bytes(b)) => value = Some(b),
            ("qualifier", AvroValue::Bytes(b)) => qualifier = Some(b),
            ("family", AvroValue::Bytes(b)) => family = Some(b),
            ("table", AvroValue::Bytes(b)) => table_name = Some(b),
            _ => return Err(bad(format!("unexpected field \"{name}\""))),
        }
    }
    let (
        Some(rowkey),
        Some(ts),
        Some(delete),
        Some(value),
        Some(qualifier),
        Some(family),
        Some(name),
    ) = (key, ts, delete, value, qualifier, family, table_name)
    else {
        return Err(bad("an HBaseKafkaEvent field is missing"));
    };
    let name = String::from_utf8(name).map_err(|_| bad("\"table\" is not UTF-8"))?;
    if !is_table(table, &name) {
        return Ok(ProxyDecoded::OtherTable(name));
    }
    if rowkey.is_empty() {
        return Err(bad("\"key\" (the rowkey) is empty"));
    }
    if ts < 0 {
        return Err(bad("\"timestamp\" is negative"));
    }
    let family = String::from_utf8(family).map_err(|_| bad("\"family\" is not UTF-8"))?;
    if family.is_empty() {
        return Err(bad("\"family\" is empty"));
    }
    let qualifier = String::from_utf8(qualifier).map_err(|_| bad("\"qualifier\" is not UTF-8"))?;
    let op = match (delete, qualifier.is_empty()) {
        (false, _) => CellOp::Put {
            column: format!("{family}:{qualifier}"),
            ts,
            value,
        },
        (true, false) => CellOp::DeleteCell {
            column: format!("{family}:{qualifier}"),
            ts,
        },
        (true, true) => CellOp::DeleteFamily { family, ts },
    };
    Ok(ProxyDecoded::Cell(ProxyCell { rowkey, op }))
}

/// The primitive Avro binary encodings the `HBaseKafkaEvent` schema uses, read straight off
/// the payload for [`proxy_rowkey`]. Each read fails (`None`) exactly where apache-avro's reader
/// fails, so a message passes here only if it is a well-formed datum.
struct AvroCursor<'a>(&'a [u8]);

impl<'a> AvroCursor<'a> {
    /// A zigzag varint of at most 10 bytes.
    fn long(&mut self) -> Option<i64> {
        let mut zigzag = 0u64;
        for (at, byte) in self.0.iter().take(10).enumerate() {
            zigzag |= u64::from(byte & 0x7f) << (7 * at);
            if byte & 0x80 == 0 {
                self.0 = self.0.get(at + 1..)?;
                return Some((zigzag >> 1) as i64 ^ -((zigzag & 1) as i64));
            }
        }
        None
    }

    /// A length (non-negative, within the reader's allocation cap) and that many bytes.
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.long()?).ok()?;
        if len > AVRO_MAX_ALLOCATION {
            return None;
        }
        let (bytes, rest) = self.0.split_at_checked(len)?;
        self.0 = rest;
        Some(bytes)
    }

    fn boolean(&mut self) -> Option<bool> {
        let (&byte, rest) = self.0.split_first()?;
        self.0 = rest;
        match byte {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
}

/// The rowkey of a Kafka Proxy message, read without decoding it: `Some` only for a well-formed
/// `HBaseKafkaEvent` datum of `table`, borrowed from the payload. `None` means "decode it to
/// find out": another table's event, or a malformed one, which [`decode_proxy`] then reports.
///
/// What a sharded instance checks against its rowkey range before paying for a decode. The
/// rowkey is the datum's first field, but the table is its last, and a topic may carry several
/// tables, so the fields in between are stepped over (a few varints, no copies) rather than
/// trusted: a foreign-looking rowkey of another table must still count as `other_table`, and a
/// truncated message must still be a dead letter, not a skip.
pub fn proxy_rowkey<'a>(table: &TableConfig, payload: &'a [u8]) -> Option<&'a [u8]> {
    let mut datum = AvroCursor(payload);
    let rowkey = datum.bytes()?;
    datum.long()?; // timestamp
    datum.boolean()?; // delete
    for _ in 0..3 {
        datum.bytes()?; // value, qualifier, family
    }
    let name = datum.bytes()?;
    if !datum.0.is_empty() {
        return None;
    }
    let name = std::str::from_utf8(name).ok()?;
    is_table(table, name).then_some(rowkey)
}

/// Encodes one cell as the Kafka Proxy would (tests, the benchmark, and tools that feed hbidx
/// from something else).
pub fn encode_proxy(table: &str, rowkey: &[u8], op: &CellOp) -> Result<Vec<u8>, DecodeError> {
    let (delete, family, qualifier, value, ts) = match op {
        CellOp::Put { column, ts, value } => {
            let (f, q) = split_column(column).ok_or_else(|| bad("bad column"))?;
            (false, f.to_string(), q.to_string(), value.clone(), *ts)
        }
        CellOp::DeleteCell { column, ts } => {
            let (f, q) = split_column(column).ok_or_else(|| bad("bad column"))?;
            (true, f.to_string(), q.to_string(), Vec::new(), *ts)
        }
        CellOp::DeleteFamily { family, ts } => {
            (true, family.clone(), String::new(), Vec::new(), *ts)
        }
        CellOp::DeleteRow { .. } => {
            return Err(bad(
                "the proxy has no row-delete event; send one family delete per family",
            ));
        }
    };
    let record = AvroValue::Record(vec![
        ("key".into(), AvroValue::Bytes(rowkey.to_vec())),
        ("timestamp".into(), AvroValue::Long(ts)),
        ("delete".into(), AvroValue::Boolean(delete)),
        ("value".into(), AvroValue::Bytes(value)),
        ("qualifier".into(), AvroValue::Bytes(qualifier.into_bytes())),
        ("family".into(), AvroValue::Bytes(family.into_bytes())),
        ("table".into(), AvroValue::Bytes(table.as_bytes().to_vec())),
    ]);
    apache_avro::writer::datum::GenericDatumWriter::builder(proxy_schema())
        .build()
        .and_then(|writer| writer.write_value_to_vec(record))
        .map_err(|err| bad(format!("avro encode: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TableConfig {
        let config =
            hbidx_schema::parse_config(include_str!("../../deploy/config/hbidx.toml")).unwrap();
        config.table("user").unwrap().clone()
    }

    fn mutation(decoded: Decoded) -> Mutation {
        match decoded {
            Decoded::Mutation(m) => m,
            other => panic!("expected a mutation, got {other:?}"),
        }
    }

    #[test]
    fn json_shapes_from_the_readme() {
        let t = table();
        let put = r#"{"table":"user","key":"u1","op":"put","ts":1700000000000,"cells":{"info:phone":"13800138000","info:name":"张三"}}"#;
        let m = mutation(decode_json(&t, put.as_bytes(), None).unwrap());
        assert_eq!(m.rowkey, t.rowkey.encode("u1").unwrap());
        assert_eq!(m.ops.len(), 2);
        assert!(m.ops.iter().all(|op| op.ts() == 1_700_000_000_000));

        let del =
            br#"{"table":"user","key":"u1","op":"delete_cells","ts":5,"columns":["info:phone"]}"#;
        let m = mutation(decode_json(&t, del, None).unwrap());
        assert_eq!(
            m.ops,
            vec![CellOp::DeleteCell {
                column: "info:phone".into(),
                ts: 5
            }]
        );
        let row = br#"{"table":"user","key":"u1","op":"delete_row"}"#;
        let m = mutation(decode_json(&t, row, Some(42)).unwrap());
        assert_eq!(
            m.ops,
            vec![CellOp::DeleteRow { ts: 42 }],
            "message ts is the fallback"
        );
    }

    /// Found by fuzz/fuzz_targets/json_event.rs: a cell given twice in one put decoded into two
    /// puts of one cell at one timestamp (which wins was up to the order of application).
    #[test]
    fn a_cell_given_twice_is_refused() {
        let t = table();
        let twice = br#"{"table":"user","key":"u1","op":"put","ts":1,"cells":{"info:name":"a","info:phone":"13800138000","info:name":"b"}}"#;
        let err = decode_json(&t, twice, None).unwrap_err();
        assert!(
            err.to_string()
                .contains("cell \"info:name\" is given more than once"),
            "{err}"
        );
    }

    #[test]
    fn json_rowkey_forms_agree() {
        let t = table();
        let rowkey = t.rowkey.encode("u7").unwrap();
        let printable = hbidx_schema::codec::printable(&rowkey);
        let b64 = B64.encode(&rowkey);
        for event in [
            r#"{"table":"user","key":"u7","op":"delete_row","ts":1}"#.to_string(),
            format!(r#"{{"table":"user","rowkey":"{printable}","op":"delete_row","ts":1}}"#),
            format!(r#"{{"table":"user","rowkey_b64":"{b64}","op":"delete_row","ts":1}}"#),
        ] {
            assert_eq!(
                mutation(decode_json(&t, event.as_bytes(), None).unwrap()).rowkey,
                rowkey
            );
        }
    }

    #[test]
    fn json_errors_name_the_problem_and_never_the_value() {
        let t = table();
        let cases: &[(&[u8], &str)] = &[
            (b"{not json", "not JSON"),
            (b"[1]", "JSON object"),
            (br#"["user","put",1]"#, "JSON object"),
            (br#""13800138000""#, "JSON object"),
            (br#"{"table":"user","table":"user","key":"u1","op":"delete_row","ts":1}"#, "at most once"),
            (br#"{"table":"user","key":"u1","op":"put","ts":1,"cells":["13800138000"]}"#, "\"cells\""),
            (br#"{"table":"user","key":"u1","op":"delete_cells","ts":1,"columns":[13800138000]}"#, "entries must be strings"),
            (br#"{"key":"u1","op":"put","ts":1,"cells":{}}"#, "\"table\" is missing"),
            (br#"{"table":"user","key":"u1","ts":1}"#, "\"op\" is missing"),
            (br#"{"table":"user","key":"u1","op":"upsert","ts":1}"#, "\"op\" must be"),
            (br#"{"table":"user","op":"delete_row","ts":1}"#, "\"key\""),
            (br#"{"table":"user","key":"u1","op":"delete_row"}"#, "\"ts\" is missing"),
            (br#"{"table":"user","key":"u1","op":"delete_row","ts":"13800138000"}"#, "\"ts\" must be"),
            (br#"{"table":"user","key":"u1","op":"put","ts":1,"cells":{"info:phone":13800138000}}"#, "must be a string"),
            (br#"{"table":"user","key":"u1","op":"put","ts":1,"cells":{"nope:phone":"13800138000"}}"#, "family \"nope\""),
            (br#"{"table":"user","rowkey_b64":"%%%","op":"delete_row","ts":1}"#, "base64"),
        ];
        for (payload, expected) in cases {
            let err = decode_json(&t, payload, None).unwrap_err().to_string();
            assert!(
                err.contains(expected),
                "{err:?} should contain {expected:?}"
            );
            assert!(!err.contains("13800138000"), "value leaked: {err}");
        }
    }

    #[test]
    fn json_strings_with_escapes_nulls_and_unknown_fields() {
        let t = table();
        // Escapes in keys and values are decoded; `null` is absent; unknown fields are skipped.
        let event = br#"{"table":"user","key":"u\u0031","op":"put","ts":5,"rowkey":null,"source":{"app":"crm"},"cells":{"info:n\u0061me":"\u5f20\u4e09 \"Z\"","info:phone":"13800138000"}}"#;
        let m = mutation(decode_json(&t, event, None).unwrap());
        assert_eq!(m.rowkey, t.rowkey.encode("u1").unwrap());
        assert_eq!(
            m.ops,
            vec![
                CellOp::Put {
                    column: "info:name".into(),
                    ts: 5,
                    value: "张三 \"Z\"".as_bytes().to_vec(),
                },
                CellOp::Put {
                    column: "info:phone".into(),
                    ts: 5,
                    value: b"13800138000".to_vec(),
                },
            ]
        );
    }

    #[test]
    fn json_other_table_is_not_an_error() {
        let t = table();
        let event = br#"{"table":"orders","key":"o1","op":"delete_row","ts":1}"#;
        assert_eq!(
            decode_json(&t, event, None).unwrap(),
            Decoded::OtherTable("orders".into())
        );
    }

    #[test]
    fn json_encode_round_trips() {
        let t = table();
        let m = Mutation {
            table: "user".into(),
            rowkey: t.rowkey.encode("u9").unwrap(),
            ops: vec![CellOp::Put {
                column: "info:name".into(),
                ts: 9,
                value: "李四".as_bytes().to_vec(),
            }],
        };
        assert_eq!(
            mutation(decode_json(&t, &encode_json(&t, &m), None).unwrap()),
            m
        );
        let d = Mutation {
            ops: vec![CellOp::DeleteRow { ts: 10 }],
            ..m.clone()
        };
        assert_eq!(
            mutation(decode_json(&t, &encode_json(&t, &d), None).unwrap()),
            d
        );
    }

    #[test]
    fn proxy_events_round_trip_and_map_deletes() {
        let t = table();
        let rowkey = t.rowkey.encode("u1").unwrap();
        for op in [
            CellOp::Put {
                column: "info:phone".into(),
                ts: 7,
                value: b"13800138000".to_vec(),
            },
            CellOp::DeleteCell {
                column: "info:phone".into(),
                ts: 8,
            },
            CellOp::DeleteFamily {
                family: "info".into(),
                ts: 9,
            },
        ] {
            let bytes = encode_proxy("user", &rowkey, &op).unwrap();
            assert_eq!(
                decode_proxy(&t, &bytes).unwrap(),
                ProxyDecoded::Cell(ProxyCell {
                    rowkey: rowkey.clone(),
                    op
                })
            );
        }
        let other = encode_proxy("orders", b"o1", &CellOp::DeleteRow { ts: 1 });
        assert!(other.is_err(), "the proxy has no row deletes");
        let other = encode_proxy(
            "orders",
            b"o1",
            &CellOp::DeleteFamily {
                family: "d".into(),
                ts: 1,
            },
        )
        .unwrap();
        assert_eq!(
            decode_proxy(&t, &other).unwrap(),
            ProxyDecoded::OtherTable("orders".into())
        );
    }

    #[test]
    fn proxy_garbage_is_an_error_not_a_panic() {
        let t = table();
        let good = encode_proxy(
            "user",
            b"abc",
            &CellOp::Put {
                column: "info:name".into(),
                ts: 1,
                value: b"x".to_vec(),
            },
        )
        .unwrap();
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(
            decode_proxy(&t, &trailing)
                .unwrap_err()
                .0
                .contains("trailing")
        );
        for cut in 0..good.len() {
            assert!(decode_proxy(&t, &good[..cut]).is_err());
        }
        // A huge length prefix must fail, not allocate.
        assert!(decode_proxy(&t, &[0xfe, 0xff, 0xff, 0xff, 0x0f]).is_err());
        assert!(decode_proxy(&t, b"{\"table\":\"user\"}").is_err());
    }

    #[test]
    fn proxy_rowkey_peeks_without_decoding() {
        let t = table();
        let rowkey = t.rowkey.encode("u1").unwrap();
        let put = CellOp::Put {
            column: "info:phone".into(),
            ts: 1_700_000_000_000,
            value: b"13800138000".to_vec(),
        };
        for name in ["user", "default:user"] {
            let bytes = encode_proxy(name, &rowkey, &put).unwrap();
            assert_eq!(proxy_rowkey(&t, &bytes), Some(rowkey.as_slice()), "{name}");
        }
        // Another table's event is left to the decode, which counts it as such.
        for name in ["orders", "prod:user", "user:"] {
            let bytes = encode_proxy(name, &rowkey, &put).unwrap();
            assert_eq!(proxy_rowkey(&t, &bytes), None, "{name}");
        }
    }

    /// Whatever is wrong with the bytes, the peek says "decode it" (`None`), and the decode
    /// then dead-letters the message: it is never skipped as another shard's on a guess.
    #[test]
    fn proxy_rowkey_of_garbage_is_none_not_a_panic() {
        let t = table();
        let good = encode_proxy(
            "user",
            b"abc",
            &CellOp::DeleteCell {
                column: "info:name".into(),
                ts: 1,
            },
        )
        .unwrap();
        assert_eq!(proxy_rowkey(&t, &good), Some(&b"abc"[..]));
        for cut in 0..good.len() {
            assert_eq!(proxy_rowkey(&t, &good[..cut]), None, "cut at {cut}");
            assert!(decode_proxy(&t, &good[..cut]).is_err());
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(proxy_rowkey(&t, &trailing), None);
        // The `delete` boolean is the byte after the rowkey and the timestamp's varint.
        let mut boolean = good.clone();
        boolean[1 + 3 + 1] = 2;
        assert_eq!(proxy_rowkey(&t, &boolean), None);
        assert!(decode_proxy(&t, &boolean).is_err());
        let cases: &[&[u8]] = &[
            &[],
            // A negative length (zigzag 1 = -1).
            &[0x01],
            // A length over the allocation cap, and one past the end.
            &[0xfe, 0xff, 0xff, 0xff, 0x0f],
            &[0x7e, b'a'],
            // A varint of 11 bytes.
            &[
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
            b"{\"table\":\"user\"}",
        ];
        for bytes in cases {
            assert_eq!(proxy_rowkey(&t, bytes), None, "{bytes:?}");
            assert!(decode_proxy(&t, bytes).is_err(), "{bytes:?}");
        }
        // Non-UTF-8 table name.
        let mut datum = vec![0x06];
        datum.extend_from_slice(b"abc");
        datum.extend_from_slice(&[0x02, 0x00, 0x00, 0x00, 0x02, b'i', 0x02, 0xff]);
        assert_eq!(proxy_rowkey(&t, &datum), None);
        assert!(decode_proxy(&t, &datum).is_err());
    }
}
