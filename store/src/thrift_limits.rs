//! Size limits on what a Thrift message may claim, checked before anything is allocated for it:
//! the requests hbidx's gateway reads, and the replies hbidx's HBase client reads (a broken or
//! hostile Thrift server claiming a list of two billion rows must not abort the sidecar).
//!
//! The code hbase-thrift generates reads a list as `Vec::with_capacity(size as usize)` with the
//! size the client sent: a 20-byte request claiming two billion `Mutation`s asks the allocator
//! for over 100 GB, which aborts the process, and a negative size wraps to a huge one. thrift's
//! own protocols do the same with string and binary lengths (`vec![0; len as usize]`, which
//! panics on a negative binary-protocol length). This input protocol sits under the generated
//! processor, refuses a list, set or map whose claimed size is negative or over the limit, and
//! reads strings and binaries (and the binary protocol's message header, which holds one)
//! itself, checking their length first. The refusal is a protocol error, which the processor
//! answers with an application exception; the server goes on. Everything else passes through.
//!
//! To read lengths itself it shares the connection's read transport with the wrapped protocol
//! (`Shared`): neither protocol buffers ahead of the transport, so they never see each other's
//! bytes.

/// Implements `TInputProtocol` methods that a wrapping layer passes straight to `self.inner`,
/// so each layer spells out only the methods it changes (here, and the gateway's own layers).
#[doc(hidden)]
#[macro_export]
macro_rules! forward_reads {
    ($($method:ident -> $value:ty),* $(,)?) => {
        $(
            fn $method(&mut self) -> thrift::Result<$value> {
                self.inner.$method()
            }
        )*
    };
}

use std::io::Read;
use std::sync::{Arc, Mutex};

use crate::lock;
use thrift::protocol::{
    TFieldIdentifier, TInputProtocol, TInputProtocolFactory, TListIdentifier, TMapIdentifier,
    TMessageIdentifier, TMessageType, TSetIdentifier, TStructIdentifier,
};
use thrift::transport::TReadTransport;
use thrift::{ProtocolError, ProtocolErrorKind};

/// The wire encoding of the wrapped protocol: how it prefixes a string with its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// A big-endian `i32`.
    Binary,
    /// An unsigned LEB128 varint.
    Compact,
}

/// What one request may claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Elements of one list, set or map.
    pub max_container_len: usize,
    /// Bytes of one string or binary (a row key, a value, a column name).
    pub max_string_len: usize,
}

/// Wraps the input protocols of a factory with [`Limited`].
pub struct LimitedFactory<F> {
    pub inner: F,
    pub wire: Wire,
    pub limits: Limits,
}

impl<F: TInputProtocolFactory> TInputProtocolFactory for LimitedFactory<F> {
    fn create(&self, transport: Box<dyn TReadTransport + Send>) -> Box<dyn TInputProtocol + Send> {
        let transport = Arc::new(Mutex::new(transport));
        Box::new(Limited {
            inner: self.inner.create(Box::new(Shared(transport.clone()))),
            transport: Shared(transport),
            wire: self.wire,
            limits: self.limits,
        })
    }
}

/// The connection's read transport, read by both the wrapped protocol and [`Limited`].
struct Shared(Arc<Mutex<Box<dyn TReadTransport + Send>>>);

impl Read for Shared {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        lock(&self.0).read(buf)
    }
}

/// An input protocol that checks every claimed size; see the module docs.
pub struct Limited {
    inner: Box<dyn TInputProtocol + Send>,
    transport: Shared,
    wire: Wire,
    limits: Limits,
}

fn over_limit(message: String) -> thrift::Error {
    thrift::Error::Protocol(ProtocolError::new(ProtocolErrorKind::SizeLimit, message))
}

impl Limited {
    fn check(&self, what: &str, size: i32) -> thrift::Result<()> {
        match usize::try_from(size) {
            Ok(len) if len <= self.limits.max_container_len => Ok(()),
            _ => Err(over_limit(format!(
                "a {what} of {size} elements is over the gateway's limit of {}",
                self.limits.max_container_len
            ))),
        }
    }

    /// A string's length prefix, checked against the limit.
    fn read_length(&mut self) -> thrift::Result<usize> {
        let claimed: i64 = match self.wire {
            Wire::Binary => {
                let mut bytes = [0u8; 4];
                self.transport.read_exact(&mut bytes)?;
                i64::from(i32::from_be_bytes(bytes))
            }
            Wire::Compact => {
                // A u32 varint: at most five bytes of seven bits.
                let mut value: u64 = 0;
                for shift in (0..35).step_by(7) {
                    let mut byte = [0u8; 1];
                    self.transport.read_exact(&mut byte)?;
                    value |= u64::from(byte[0] & 0x7f) << shift;
                    if byte[0] & 0x80 == 0 {
                        break;
                    }
                }
                i64::try_from(value).unwrap_or(i64::MAX)
            }
        };
        match usize::try_from(claimed) {
            Ok(len) if len <= self.limits.max_string_len => Ok(len),
            _ => Err(over_limit(format!(
                "a string of {claimed} bytes is over the gateway's limit of {}",
                self.limits.max_string_len
            ))),
        }
    }

    /// The binary protocol's strict message header (the factory's protocol is strict), whose
    /// name is a length-prefixed string.
    fn read_binary_message_begin(&mut self) -> thrift::Result<TMessageIdentifier> {
        let mut header = [0u8; 4];
        self.transport.read_exact(&mut header)?;
        if header[0..2] != [0x80, 0x01] {
            return Err(thrift::Error::Protocol(ProtocolError::new(
                ProtocolErrorKind::BadVersion,
                format!("received bad version: {:?}", &header[0..2]),
            )));
        }
        let message_type = TMessageType::try_from(header[3])?;
        let name = self.read_string()?;
        let mut sequence = [0u8; 4];
        self.transport.read_exact(&mut sequence)?;
        Ok(TMessageIdentifier::new(
            name,
            message_type,
            i32::from_be_bytes(sequence),
        ))
    }
}

impl TInputProtocol for Limited {
    fn read_list_begin(&mut self) -> thrift::Result<TListIdentifier> {
        let list = self.inner.read_list_begin()?;
        self.check("list", list.size)?;
        Ok(list)
    }

    fn read_set_begin(&mut self) -> thrift::Result<TSetIdentifier> {
        let set = self.inner.read_set_begin()?;
        self.check("set", set.size)?;
        Ok(set)
    }

    fn read_map_begin(&mut self) -> thrift::Result<TMapIdentifier> {
        let map = self.inner.read_map_begin()?;
        self.check("map", map.size)?;
        Ok(map)
    }

    fn read_message_begin(&mut self) -> thrift::Result<TMessageIdentifier> {
        match self.wire {
            Wire::Binary => self.read_binary_message_begin(),
            Wire::Compact => self.inner.read_message_begin(),
        }
    }

    fn read_bytes(&mut self) -> thrift::Result<Vec<u8>> {
        let len = self.read_length()?;
        let mut bytes = vec![0u8; len];
        self.transport.read_exact(&mut bytes)?;
        Ok(bytes)
    }

    fn read_string(&mut self) -> thrift::Result<String> {
        let bytes = self.read_bytes()?;
        Ok(String::from_utf8(bytes)?)
    }

    crate::forward_reads! {
        read_message_end -> (),
        read_struct_begin -> Option<TStructIdentifier>,
        read_struct_end -> (),
        read_field_begin -> TFieldIdentifier,
        read_field_end -> (),
        read_list_end -> (),
        read_set_end -> (),
        read_map_end -> (),
        read_bool -> bool,
        read_i8 -> i8,
        read_i16 -> i16,
        read_i32 -> i32,
        read_i64 -> i64,
        read_double -> f64,
        read_byte -> u8,
    }
}

#[cfg(test)]
mod tests {
    use thrift::protocol::{TBinaryInputProtocolFactory, TCompactInputProtocolFactory};
    use thrift::transport::TBufferChannel;

    use super::*;

    const LIMITS: Limits = Limits {
        max_container_len: 10,
        max_string_len: 16,
    };

    fn protocol(wire: Wire, bytes: &[u8]) -> Box<dyn TInputProtocol + Send> {
        let mut channel = TBufferChannel::with_capacity(bytes.len(), 0);
        channel.set_readable_bytes(bytes);
        let transport: Box<dyn TReadTransport + Send> = Box::new(channel);
        match wire {
            Wire::Binary => LimitedFactory {
                inner: TBinaryInputProtocolFactory::new(),
                wire,
                limits: LIMITS,
            }
            .create(transport),
            Wire::Compact => LimitedFactory {
                inner: TCompactInputProtocolFactory::new(),
                wire,
                limits: LIMITS,
            }
            .create(transport),
        }
    }

    fn is_size_limit(result: thrift::Result<impl std::fmt::Debug>) -> bool {
        matches!(
            result,
            Err(thrift::Error::Protocol(ProtocolError {
                kind: ProtocolErrorKind::SizeLimit,
                ..
            }))
        )
    }

    /// thrift's own binary protocol turns a negative name length into `vec![0; usize::MAX]`
    /// and panics; here it is an error.
    #[test]
    fn a_negative_message_name_length_is_an_error() {
        let mut header = vec![0x80, 0x01, 0x00, 0x01];
        header.extend_from_slice(&(-1i32).to_be_bytes());
        assert!(is_size_limit(
            protocol(Wire::Binary, &header).read_message_begin()
        ));
    }

    #[test]
    fn message_headers_and_strings_within_the_limit_read_as_before() {
        let mut bytes = vec![0x80, 0x01, 0x00, 0x01];
        bytes.extend_from_slice(&6i32.to_be_bytes());
        bytes.extend_from_slice(b"getRow");
        bytes.extend_from_slice(&7i32.to_be_bytes());
        bytes.extend_from_slice(&3i32.to_be_bytes());
        bytes.extend_from_slice(b"abc");
        let mut input = protocol(Wire::Binary, &bytes);
        let message = input.read_message_begin().unwrap();
        assert_eq!(
            (
                message.name.as_str(),
                message.message_type,
                message.sequence_number
            ),
            ("getRow", TMessageType::Call, 7)
        );
        assert_eq!(input.read_string().unwrap(), "abc");

        // Compact: length 3 as a varint, then the bytes; then an 8-element list header.
        let mut input = protocol(Wire::Compact, &[0x03, b'x', b'y', b'z', 0x88]);
        assert_eq!(input.read_bytes().unwrap(), b"xyz");
        assert_eq!(input.read_list_begin().unwrap().size, 8);
    }

    #[test]
    fn strings_over_the_limit_are_errors() {
        assert!(is_size_limit(
            protocol(Wire::Binary, &17i32.to_be_bytes()).read_bytes()
        ));
        assert!(is_size_limit(
            protocol(Wire::Binary, &(-5i32).to_be_bytes()).read_string()
        ));
        // 0xFFFFFFFF as a u32 varint.
        assert!(is_size_limit(
            protocol(Wire::Compact, &[0xFF, 0xFF, 0xFF, 0xFF, 0x0F]).read_bytes()
        ));
    }

    #[test]
    fn containers_over_the_limit_or_negative_are_errors() {
        // Binary list header: element type (string = 11), then the i32 size.
        for size in [11i32, -1, i32::MAX] {
            let mut bytes = vec![11u8];
            bytes.extend_from_slice(&size.to_be_bytes());
            assert!(
                is_size_limit(protocol(Wire::Binary, &bytes).read_list_begin()),
                "{size}"
            );
        }
        // Binary map header: key type, value type, i32 size.
        let mut bytes = vec![11u8, 11u8];
        bytes.extend_from_slice(&100i32.to_be_bytes());
        assert!(is_size_limit(
            protocol(Wire::Binary, &bytes).read_map_begin()
        ));
        let mut bytes = vec![11u8];
        bytes.extend_from_slice(&10i32.to_be_bytes());
        assert_eq!(
            protocol(Wire::Binary, &bytes)
                .read_list_begin()
                .unwrap()
                .size,
            10
        );
    }
}
