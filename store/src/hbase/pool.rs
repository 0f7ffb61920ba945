//! The connection pool: a stack of idle Thrift connections, and how a new one is opened with
//! the configured transport and protocol. Checkouts never wait: with none idle, one connects.

use std::net::{TcpStream, ToSocketAddrs};

use hbase_thrift::hbase::HbaseSyncClient;
use thrift::protocol::{
    TBinaryInputProtocolFactory, TBinaryOutputProtocol, TCompactInputProtocolFactory,
    TCompactOutputProtocol, TInputProtocol, TInputProtocolFactory, TOutputProtocol,
};
use thrift::transport::{
    TBufferedReadTransport, TBufferedWriteTransport, TFramedReadTransport, TFramedWriteTransport,
    TIoChannel, TTcpChannel,
};

use crate::thrift_limits::{LimitedFactory, Limits, Wire};
use crate::thrift1::Thrift1Client as Client;
use hbidx_schema::config::{HbaseConfig, ThriftProtocol, ThriftTransport};

/// What one reply of the HBase Thrift server may claim, checked before anything is allocated
/// for it (thrift_limits.rs): the generated client would otherwise allocate whatever length a
/// broken or hostile server sends, and a claimed list of 2^31 rows aborts the process.
///
/// Elements of one list or map: a multi-get asks for at most a few thousand rows, a row has at
/// most a few thousand columns here; ten million is far above both.
pub const REPLY_MAX_CONTAINER_LEN: usize = 10_000_000;
/// Bytes of one string or binary: HBase refuses cells over 10 MB
/// (`hbase.client.keyvalue.maxsize`), so 64 MiB never refuses a real reply.
pub const REPLY_MAX_STRING_LEN: usize = 64 << 20;

const REPLY_LIMITS: Limits = Limits {
    max_container_len: REPLY_MAX_CONTAINER_LEN,
    max_string_len: REPLY_MAX_STRING_LEN,
};

/// The input protocol of `protocol` over `transport`, with [`REPLY_LIMITS`] checked.
fn limited_input(
    protocol: ThriftProtocol,
    transport: Box<dyn thrift::transport::TReadTransport + Send>,
) -> Box<dyn TInputProtocol + Send> {
    match protocol {
        ThriftProtocol::Binary => LimitedFactory {
            inner: TBinaryInputProtocolFactory::new(),
            wire: Wire::Binary,
            limits: REPLY_LIMITS,
        }
        .create(transport),
        ThriftProtocol::Compact => LimitedFactory {
            inner: TCompactInputProtocolFactory::new(),
            wire: Wire::Compact,
            limits: REPLY_LIMITS,
        }
        .create(transport),
    }
}

/// A pooled Thrift connection. `broken` is set after a transport or protocol error: the stream
/// may hold half a response, so it is dropped instead of being handed out again.
pub struct Connection {
    pub(super) client: Client,
    pub(super) broken: bool,
}

pub(super) struct Manager {
    config: HbaseConfig,
    idle: std::sync::Mutex<Vec<Connection>>,
}

impl Manager {
    /// A pool with no connections yet: the first checkout connects.
    pub(super) fn new(config: HbaseConfig) -> Self {
        Self {
            config,
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn open_stream(&self) -> std::io::Result<TcpStream> {
        let mut last = None;
        for addr in self.config.thrift.to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, self.config.connect_timeout) {
                Ok(stream) => return Ok(stream),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "address resolved to nothing")
        }))
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        // Pushing and popping leave the stack consistent, so a poisoned lock is still usable.
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An idle connection, or a new one. Called only while holding a permit, so there are never
    /// more than `pool_size` connections.
    pub(super) fn checkout(&self) -> thrift::Result<Connection> {
        if let Some(conn) = self.idle().pop() {
            return Ok(conn);
        }
        self.connect()
    }

    /// Returns a healthy connection to the stack. A broken one is dropped (closing it), and so
    /// is every idle one: a transport failure usually means the server restarted or went away,
    /// and each stale connection would otherwise cost a failed call (and a breaker strike).
    pub(super) fn checkin(&self, conn: Connection) {
        if conn.broken {
            self.idle().clear();
        } else {
            self.idle().push(conn);
        }
    }

    fn connect(&self) -> thrift::Result<Connection> {
        let stream = self.open_stream()?;
        stream.set_nodelay(true)?;
        // A per-operation socket deadline: a hung server turns into a timeout error on this
        // blocking thread instead of holding it forever.
        stream.set_read_timeout(Some(self.config.timeout))?;
        stream.set_write_timeout(Some(self.config.timeout))?;
        let (read, write) = TTcpChannel::with_stream(stream).split()?;
        let transport: Box<dyn thrift::transport::TReadTransport + Send> =
            match self.config.transport {
                ThriftTransport::Buffered => Box::new(TBufferedReadTransport::new(read)),
                ThriftTransport::Framed => Box::new(TFramedReadTransport::new(read)),
            };
        let input = limited_input(self.config.protocol, transport);
        let output: Box<dyn TOutputProtocol + Send> =
            match (self.config.transport, self.config.protocol) {
                (ThriftTransport::Buffered, ThriftProtocol::Binary) => Box::new(
                    TBinaryOutputProtocol::new(TBufferedWriteTransport::new(write), true),
                ),
                (ThriftTransport::Framed, ThriftProtocol::Binary) => Box::new(
                    TBinaryOutputProtocol::new(TFramedWriteTransport::new(write), true),
                ),
                (ThriftTransport::Buffered, ThriftProtocol::Compact) => Box::new(
                    TCompactOutputProtocol::new(TBufferedWriteTransport::new(write)),
                ),
                (ThriftTransport::Framed, ThriftProtocol::Compact) => Box::new(
                    TCompactOutputProtocol::new(TFramedWriteTransport::new(write)),
                ),
            };
        Ok(Connection {
            client: Client::new(HbaseSyncClient::new(input, output)),
            broken: false,
        })
    }
}
