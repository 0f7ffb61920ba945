//! Absent "nullable" arguments of the HBase Thrift IDL, read as empty.
//!
//! The Java server HBase ships treats a `columns` list or `attributes` map that a client leaves
//! out (null) as empty: "all columns", "no attributes". Clients rely on it: happybase's
//! `table.row(key)` and `table.rows(keys)` send `getRowWithColumns` / `getRowsWithColumns`
//! without `columns`. The Rust code generated from the same IDL (hbase-thrift) instead treats
//! every argument as required and answers such a call with a "missing required field"
//! exception.
//!
//! Rather than fork the generated processor, this input protocol sits under it and, at the end
//! of the argument struct of the calls listed below, reports each such argument the client left
//! out as present and empty (a list or map of size 0). Nothing else changes: present arguments,
//! nested structs and other calls pass straight through.

use thrift::protocol::{
    TFieldIdentifier, TInputProtocol, TInputProtocolFactory, TListIdentifier, TMapIdentifier,
    TMessageIdentifier, TMessageType, TSetIdentifier, TStructIdentifier, TType,
};
use thrift::transport::TReadTransport;

/// What an absent argument reads as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Empty {
    /// `list<Text> columns`
    List,
    /// `map<Text, Text> attributes`
    Map,
}

/// Per call: the field ids of its arguments that may be absent (from the generated `*Args`
/// structs of hbase-thrift 1.2, i.e. HBase's `Hbase.thrift`).
fn nullable_arguments(method: &str) -> &'static [(i16, Empty)] {
    use Empty::{List, Map};
    match method {
        "getRowWithColumns" | "getRowsWithColumns" | "scannerOpen" | "scannerOpenWithPrefix" => {
            &[(3, List), (4, Map)]
        }
        "getRowWithColumnsTs" | "getRowsWithColumnsTs" | "scannerOpenTs" => &[(3, List), (5, Map)],
        "scannerOpenWithStop" => &[(4, List), (5, Map)],
        "scannerOpenWithStopTs" => &[(4, List), (6, Map)],
        "getRow" | "getRows" | "mutateRows" | "deleteAllRow" | "scannerOpenWithScan" => &[(3, Map)],
        "get" | "getRowTs" | "getRowsTs" | "mutateRow" | "mutateRowsTs" | "deleteAll"
        | "deleteAllRowTs" => &[(4, Map)],
        "getVer" | "mutateRowTs" | "deleteAllTs" => &[(5, Map)],
        "getVerTs" => &[(6, Map)],
        "checkAndPut" => &[(7, Map)],
        _ => &[],
    }
}

/// Wraps the input protocols of a factory; see the module docs.
pub(crate) struct NullableArgsFactory<F>(pub F);

impl<F: TInputProtocolFactory> TInputProtocolFactory for NullableArgsFactory<F> {
    fn create(&self, transport: Box<dyn TReadTransport + Send>) -> Box<dyn TInputProtocol + Send> {
        Box::new(NullableArgs::new(self.0.create(transport)))
    }
}

struct NullableArgs {
    inner: Box<dyn TInputProtocol + Send>,
    /// The nullable arguments of the call being read.
    nullable: &'static [(i16, Empty)],
    /// Struct nesting inside the current message; the argument struct is depth 1.
    depth: usize,
    /// Field ids of the argument struct read so far (including filled ones).
    seen: Vec<i16>,
    /// The argument struct's stop field was read from `inner` and is owed to the caller.
    stop_read: bool,
    /// The argument being filled in, between its field header and its field end.
    filling: Option<Empty>,
}

impl NullableArgs {
    fn new(inner: Box<dyn TInputProtocol + Send>) -> Self {
        Self {
            inner,
            nullable: &[],
            depth: 0,
            seen: Vec::new(),
            stop_read: false,
            filling: None,
        }
    }

    /// The next absent nullable argument, as a field header, or the owed stop field.
    fn next_absent(&mut self) -> TFieldIdentifier {
        let absent = self
            .nullable
            .iter()
            .find(|(id, _)| !self.seen.contains(id))
            .copied();
        match absent {
            Some((id, empty)) => {
                self.seen.push(id);
                self.filling = Some(empty);
                TFieldIdentifier {
                    name: None,
                    field_type: match empty {
                        Empty::List => TType::List,
                        Empty::Map => TType::Map,
                    },
                    id: Some(id),
                }
            }
            None => TFieldIdentifier {
                name: None,
                field_type: TType::Stop,
                id: None,
            },
        }
    }
}

impl TInputProtocol for NullableArgs {
    fn read_message_begin(&mut self) -> thrift::Result<TMessageIdentifier> {
        let message = self.inner.read_message_begin()?;
        self.nullable = match message.message_type {
            TMessageType::Call | TMessageType::OneWay => nullable_arguments(&message.name),
            _ => &[],
        };
        self.depth = 0;
        self.seen.clear();
        self.stop_read = false;
        self.filling = None;
        Ok(message)
    }

    fn read_message_end(&mut self) -> thrift::Result<()> {
        self.inner.read_message_end()
    }

    fn read_struct_begin(&mut self) -> thrift::Result<Option<TStructIdentifier>> {
        self.depth += 1;
        self.inner.read_struct_begin()
    }

    fn read_struct_end(&mut self) -> thrift::Result<()> {
        self.depth = self.depth.saturating_sub(1);
        self.inner.read_struct_end()
    }

    fn read_field_begin(&mut self) -> thrift::Result<TFieldIdentifier> {
        if self.depth != 1 || self.nullable.is_empty() {
            return self.inner.read_field_begin();
        }
        if self.stop_read {
            return Ok(self.next_absent());
        }
        let field = self.inner.read_field_begin()?;
        if field.field_type == TType::Stop {
            self.stop_read = true;
            return Ok(self.next_absent());
        }
        if let Some(id) = field.id {
            self.seen.push(id);
        }
        Ok(field)
    }

    fn read_field_end(&mut self) -> thrift::Result<()> {
        if self.depth == 1 && self.filling.take().is_some() {
            // The filled field was never on the wire.
            return Ok(());
        }
        self.inner.read_field_end()
    }

    fn read_list_begin(&mut self) -> thrift::Result<TListIdentifier> {
        if self.depth == 1 && self.filling == Some(Empty::List) {
            return Ok(TListIdentifier {
                element_type: TType::String,
                size: 0,
            });
        }
        self.inner.read_list_begin()
    }

    fn read_list_end(&mut self) -> thrift::Result<()> {
        if self.depth == 1 && self.filling == Some(Empty::List) {
            return Ok(());
        }
        self.inner.read_list_end()
    }

    fn read_map_begin(&mut self) -> thrift::Result<TMapIdentifier> {
        if self.depth == 1 && self.filling == Some(Empty::Map) {
            return Ok(TMapIdentifier {
                key_type: Some(TType::String),
                value_type: Some(TType::String),
                size: 0,
            });
        }
        self.inner.read_map_begin()
    }

    fn read_map_end(&mut self) -> thrift::Result<()> {
        if self.depth == 1 && self.filling == Some(Empty::Map) {
            return Ok(());
        }
        self.inner.read_map_end()
    }

    hbidx_store::forward_reads! {
        read_bool -> bool,
        read_bytes -> Vec<u8>,
        read_i8 -> i8,
        read_i16 -> i16,
        read_i32 -> i32,
        read_i64 -> i64,
        read_double -> f64,
        read_string -> String,
        read_set_begin -> TSetIdentifier,
        read_set_end -> (),
        read_byte -> u8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use thrift::protocol::{TBinaryInputProtocol, TBinaryOutputProtocol, TOutputProtocol};
    use thrift::transport::TBufferChannel;

    /// Reads the argument struct of one call the way the generated code does, returning each
    /// field as (id, type, list/map size).
    /// One argument as read: field id, type, and the size of a list or map.
    type Field = (Option<i16>, TType, Option<i32>);

    fn read_arguments(bytes: &[u8]) -> (String, Vec<Field>) {
        let mut channel = TBufferChannel::with_capacity(bytes.len(), 0);
        channel.set_readable_bytes(bytes);
        let mut protocol = NullableArgs::new(Box::new(TBinaryInputProtocol::new(channel, true)));
        let message = protocol.read_message_begin().unwrap();
        protocol.read_struct_begin().unwrap();
        let mut fields = Vec::new();
        loop {
            let field = protocol.read_field_begin().unwrap();
            if field.field_type == TType::Stop {
                // The binary protocol reads a stop as id 0, the filler leaves it out: no id.
                fields.push((None, TType::Stop, None));
                break;
            }
            let size = match field.field_type {
                TType::String => {
                    protocol.read_bytes().unwrap();
                    None
                }
                TType::List => {
                    let list = protocol.read_list_begin().unwrap();
                    for _ in 0..list.size {
                        protocol.read_bytes().unwrap();
                    }
                    protocol.read_list_end().unwrap();
                    Some(list.size)
                }
                TType::Map => {
                    let map = protocol.read_map_begin().unwrap();
                    for _ in 0..map.size {
                        protocol.read_bytes().unwrap();
                        protocol.read_bytes().unwrap();
                    }
                    protocol.read_map_end().unwrap();
                    Some(map.size)
                }
                other => panic!("unexpected {other:?}"),
            };
            protocol.read_field_end().unwrap();
            fields.push((field.id, field.field_type, size));
        }
        protocol.read_struct_end().unwrap();
        protocol.read_message_end().unwrap();
        (message.name, fields)
    }

    /// A call whose arguments are `tableName` and `row`, plus `columns` when given.
    fn call(method: &str, columns: Option<&[&str]>) -> Vec<u8> {
        let mut channel = TBufferChannel::with_capacity(0, 4096);
        {
            let mut out = TBinaryOutputProtocol::new(&mut channel, true);
            out.write_message_begin(&TMessageIdentifier::new(method, TMessageType::Call, 1))
                .unwrap();
            out.write_struct_begin(&TStructIdentifier::new("args"))
                .unwrap();
            for id in [1i16, 2] {
                out.write_field_begin(&TFieldIdentifier::new("f", TType::String, id))
                    .unwrap();
                out.write_bytes(b"x").unwrap();
                out.write_field_end().unwrap();
            }
            if let Some(columns) = columns {
                out.write_field_begin(&TFieldIdentifier::new("columns", TType::List, 3i16))
                    .unwrap();
                out.write_list_begin(&TListIdentifier::new(TType::String, columns.len() as i32))
                    .unwrap();
                for column in columns {
                    out.write_bytes(column.as_bytes()).unwrap();
                }
                out.write_list_end().unwrap();
                out.write_field_end().unwrap();
            }
            out.write_field_stop().unwrap();
            out.write_struct_end().unwrap();
            out.write_message_end().unwrap();
            out.flush().unwrap();
        }
        channel.write_bytes()
    }

    #[test]
    fn absent_columns_and_attributes_read_as_empty() {
        let (name, fields) = read_arguments(&call("getRowWithColumns", None));
        assert_eq!(name, "getRowWithColumns");
        assert_eq!(
            fields,
            [
                (Some(1), TType::String, None),
                (Some(2), TType::String, None),
                (Some(3), TType::List, Some(0)),
                (Some(4), TType::Map, Some(0)),
                (None, TType::Stop, None),
            ]
        );
    }

    #[test]
    fn present_arguments_and_other_calls_pass_through() {
        let (_, fields) = read_arguments(&call("getRowWithColumns", Some(&["cf:a", "cf:b"])));
        assert_eq!(fields[2], (Some(3), TType::List, Some(2)));
        assert_eq!(fields[3], (Some(4), TType::Map, Some(0)));
        let (_, fields) = read_arguments(&call("getTableRegions", None));
        assert_eq!(
            fields,
            [
                (Some(1), TType::String, None),
                (Some(2), TType::String, None),
                (None, TType::Stop, None),
            ]
        );
    }
}
