//! Size limits on what a Thrift request may claim, checked before anything is allocated for it.
//!
//! The code hbase-thrift generates reads a list as `Vec::with_capacity(size as usize)` with the
//! size the client sent: a 20-byte request claiming two billion `Mutation`s asks the allocator
//! for over 100 GB, which aborts the process, and a negative size wraps to a huge one. This
//! input protocol sits under the generated processor and refuses a list, set or map whose
//! claimed size is negative or over the limit, with a protocol error (the connection is
//! closed, the server goes on). It passes everything else through.

use thrift::protocol::{
    TFieldIdentifier, TInputProtocol, TInputProtocolFactory, TListIdentifier, TMapIdentifier,
    TMessageIdentifier, TSetIdentifier, TStructIdentifier,
};
use thrift::transport::TReadTransport;
use thrift::{ProtocolError, ProtocolErrorKind};

/// Wraps the input protocols of a factory with [`Limited`].
pub(crate) struct LimitedFactory<F> {
    pub inner: F,
    pub max_container_len: usize,
}

impl<F: TInputProtocolFactory> TInputProtocolFactory for LimitedFactory<F> {
    fn create(&self, transport: Box<dyn TReadTransport + Send>) -> Box<dyn TInputProtocol + Send> {
        Box::new(Limited {
            inner: self.inner.create(transport),
            max_container_len: self.max_container_len,
        })
    }
}

/// An input protocol that checks every claimed container size; see the module docs.
pub(crate) struct Limited {
    inner: Box<dyn TInputProtocol + Send>,
    max_container_len: usize,
}

impl Limited {
    fn check(&self, what: &str, size: i32) -> thrift::Result<()> {
        match usize::try_from(size) {
            Ok(len) if len <= self.max_container_len => Ok(()),
            _ => Err(thrift::Error::Protocol(ProtocolError::new(
                ProtocolErrorKind::SizeLimit,
                format!(
                    "a {what} of {size} elements is over the gateway's limit of {}",
                    self.max_container_len
                ),
            ))),
        }
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
        self.inner.read_message_begin()
    }

    fn read_message_end(&mut self) -> thrift::Result<()> {
        self.inner.read_message_end()
    }

    fn read_struct_begin(&mut self) -> thrift::Result<Option<TStructIdentifier>> {
        self.inner.read_struct_begin()
    }

    fn read_struct_end(&mut self) -> thrift::Result<()> {
        self.inner.read_struct_end()
    }

    fn read_field_begin(&mut self) -> thrift::Result<TFieldIdentifier> {
        self.inner.read_field_begin()
    }

    fn read_field_end(&mut self) -> thrift::Result<()> {
        self.inner.read_field_end()
    }

    fn read_list_end(&mut self) -> thrift::Result<()> {
        self.inner.read_list_end()
    }

    fn read_set_end(&mut self) -> thrift::Result<()> {
        self.inner.read_set_end()
    }

    fn read_map_end(&mut self) -> thrift::Result<()> {
        self.inner.read_map_end()
    }

    fn read_bool(&mut self) -> thrift::Result<bool> {
        self.inner.read_bool()
    }

    fn read_bytes(&mut self) -> thrift::Result<Vec<u8>> {
        self.inner.read_bytes()
    }

    fn read_i8(&mut self) -> thrift::Result<i8> {
        self.inner.read_i8()
    }

    fn read_i16(&mut self) -> thrift::Result<i16> {
        self.inner.read_i16()
    }

    fn read_i32(&mut self) -> thrift::Result<i32> {
        self.inner.read_i32()
    }

    fn read_i64(&mut self) -> thrift::Result<i64> {
        self.inner.read_i64()
    }

    fn read_double(&mut self) -> thrift::Result<f64> {
        self.inner.read_double()
    }

    fn read_string(&mut self) -> thrift::Result<String> {
        self.inner.read_string()
    }

    fn read_byte(&mut self) -> thrift::Result<u8> {
        self.inner.read_byte()
    }
}
