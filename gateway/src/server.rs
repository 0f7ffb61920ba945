//! Starting the thrift server: binding, the transport and protocol factories, and waiting until
//! it accepts connections.

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hbase_thrift::hbase::HbaseSyncProcessor;
use hbidx_store::{EmbeddedStore, Result, StoreError, ThriftProtocol, ThriftTransport};
use thrift::protocol::{
    TBinaryInputProtocolFactory, TBinaryOutputProtocolFactory, TCompactInputProtocolFactory,
    TCompactOutputProtocolFactory, TInputProtocolFactory, TOutputProtocolFactory,
};
use thrift::transport::{
    TBufferedReadTransportFactory, TBufferedWriteTransportFactory, TFramedReadTransportFactory,
    TFramedWriteTransportFactory, TIoChannel, TReadTransportFactory, TTcpChannel,
    TWriteTransportFactory,
};

use crate::args::NullableArgsFactory;
use crate::handler::Gateway;
use crate::options::{ConfiguredTable, GatewayOptions};
use hbidx_store::thrift_limits::{LimitedFactory, Limits, Wire};

/// How long `serve` waits for the server thread to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running gateway. The server thread runs until the process exits: thrift 0.17's `TServer`
/// has no shutdown.
#[derive(Debug)]
pub struct GatewayServer {
    local_addr: SocketAddr,
}

impl GatewayServer {
    /// The address the gateway accepts connections on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

/// Starts the gateway on a background thread and returns once it accepts connections.
///
/// `TServer::listen` binds by itself, blocks forever and doesn't report its address, so the
/// address is bound here first (to report a taken port as an error, and to resolve port 0),
/// released, and handed to `listen`; then this waits until a connection succeeds.
pub fn serve(
    store: Arc<EmbeddedStore>,
    configured: Vec<ConfiguredTable>,
    options: GatewayOptions,
) -> Result<GatewayServer> {
    if options.workers == 0 {
        return Err(StoreError::InvalidRequest {
            reason: "the thrift gateway needs at least one worker".to_owned(),
        });
    }
    // Checked here too, not only in the config: `--thrift-listen` bypasses `[server]`.
    if !options.listen.ip().is_loopback() && !options.allow_remote {
        return Err(StoreError::InvalidRequest {
            reason: format!(
                "{} {}",
                options.listen,
                hbidx_schema::config::THRIFT_REMOTE_REFUSED
            ),
        });
    }
    let bind_error = |source: std::io::Error| StoreError::GatewayBind {
        addr: options.listen,
        source,
    };
    let probe = std::net::TcpListener::bind(options.listen).map_err(bind_error)?;
    let local_addr = probe.local_addr().map_err(bind_error)?;
    drop(probe);

    let gateway = Gateway::new(store, configured, &options, local_addr);
    let (failed_tx, failed_rx) = std::sync::mpsc::channel();
    let workers = options.workers;
    let spawn = |run: ServerThread| {
        std::thread::Builder::new()
            .name("thrift-gateway".to_owned())
            .spawn(move || {
                // `listen` only returns with an error.
                if let Err(error) = run() {
                    tracing::error!(%error, "thrift gateway stopped");
                    let _ = failed_tx.send(error.to_string());
                }
            })
            .map_err(|error| StoreError::Storage(Box::new(error)))
    };
    let processor = HbaseSyncProcessor::new(gateway);
    spawn(server_thread(processor, &options, local_addr))?;

    // The probe connection is served like any other: its worker sees end-of-file and returns.
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(reason) = failed_rx.try_recv() {
            return Err(bind_error(std::io::Error::other(reason)));
        }
        if TcpStream::connect_timeout(&local_addr, Duration::from_millis(200)).is_ok() {
            break;
        }
        if Instant::now() > deadline {
            return Err(bind_error(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the thrift server did not start accepting connections",
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    tracing::info!(addr = %local_addr, transport = ?options.transport, protocol = ?options.protocol, workers, "thrift gateway listening");
    Ok(GatewayServer { local_addr })
}

/// The body of the server thread: `TServer::listen`, which returns only when it fails.
type ServerThread = Box<dyn FnOnce() -> thrift::Result<()> + Send>;

/// The server thread with the factories of `transport`, then of `protocol`: one function per
/// axis, since each factory is a type of its own.
fn server_thread(
    processor: HbaseSyncProcessor<Gateway>,
    options: &GatewayOptions,
    addr: SocketAddr,
) -> ServerThread {
    match options.transport {
        ThriftTransport::Buffered => with_protocol(
            processor,
            TBufferedReadTransportFactory::new(),
            TBufferedWriteTransportFactory::new(),
            options,
            addr,
        ),
        ThriftTransport::Framed => with_protocol(
            processor,
            TFramedReadTransportFactory::new(),
            TFramedWriteTransportFactory::new(),
            options,
            addr,
        ),
    }
}

/// The server thread over the given transport factories, with the factories of the options'
/// protocol. Requests are read through [`NullableArgsFactory`] and, under it, the size checks
/// of [`LimitedFactory`], whatever the protocol.
fn with_protocol<RTF, WTF>(
    processor: HbaseSyncProcessor<Gateway>,
    read_transport: RTF,
    write_transport: WTF,
    options: &GatewayOptions,
    addr: SocketAddr,
) -> ServerThread
where
    RTF: TReadTransportFactory + Send + 'static,
    WTF: TWriteTransportFactory + Send + 'static,
{
    let limits = Limits {
        max_container_len: options.max_container_len,
        max_string_len: options.max_string_len,
    };
    match options.protocol {
        ThriftProtocol::Binary => listener(
            processor,
            read_transport,
            NullableArgsFactory(LimitedFactory {
                inner: TBinaryInputProtocolFactory::new(),
                wire: Wire::Binary,
                limits,
            }),
            write_transport,
            TBinaryOutputProtocolFactory::new(),
            options.workers,
            addr,
            options.idle_timeout,
        ),
        ThriftProtocol::Compact => listener(
            processor,
            read_transport,
            NullableArgsFactory(LimitedFactory {
                inner: TCompactInputProtocolFactory::new(),
                wire: Wire::Compact,
                limits,
            }),
            write_transport,
            TCompactOutputProtocolFactory::new(),
            options.workers,
            addr,
            options.idle_timeout,
        ),
    }
}

/// The server thread for one transport/protocol combination: accepts connections, gives each
/// the idle timeout, and hands it to one of `workers` threads, which serves it until it closes.
///
/// thrift's own `TServer` does the same but can't set a socket option on what it accepts, and
/// queues accepted connections without bound while every worker is busy. Here the acceptor
/// waits for a free worker instead (new clients wait in the listen backlog, holding nothing),
/// and a connection silent for `idle_timeout` is closed, so idle clients can't hold every
/// worker.
#[allow(clippy::too_many_arguments)]
fn listener<RTF, IPF, WTF, OPF>(
    processor: HbaseSyncProcessor<Gateway>,
    read_transport: RTF,
    input_protocol: IPF,
    write_transport: WTF,
    output_protocol: OPF,
    workers: usize,
    addr: SocketAddr,
    idle_timeout: Duration,
) -> ServerThread
where
    RTF: TReadTransportFactory + Send + 'static,
    IPF: TInputProtocolFactory + Send + 'static,
    WTF: TWriteTransportFactory + Send + 'static,
    OPF: TOutputProtocolFactory + Send + 'static,
{
    Box::new(move || {
        let listener = std::net::TcpListener::bind(addr)?;
        let processor = Arc::new(processor);
        // A rendezvous: a connection is handed over only to a worker waiting for one.
        let (hand, take) = std::sync::mpsc::sync_channel::<Protocols>(0);
        let take = Arc::new(std::sync::Mutex::new(take));
        for index in 0..workers {
            let take = take.clone();
            let processor = processor.clone();
            std::thread::Builder::new()
                .name(format!("thrift-worker-{index}"))
                .spawn(move || {
                    loop {
                        let next = hbidx_store::lock(&take).recv();
                        let Ok((mut input, mut output)) = next else {
                            return;
                        };
                        // A handler that panics loses its connection, never its worker: a
                        // worker gone for good would shrink the pool until no one is served
                        // (thrift's TServer pool respawned them).
                        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            serve_connection(&processor, &mut *input, &mut *output);
                        }));
                        if served.is_err() {
                            tracing::error!("a gateway handler panicked; its connection is closed");
                        }
                    }
                })?;
        }
        for stream in listener.incoming() {
            let stream = match stream {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accepting a gateway connection failed");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            // A read or write blocked this long fails the connection: a client that sends
            // nothing (between calls or within one), or stops reading its replies.
            // No Nagle: a reply leaves in several writes (thrift's framed transport writes the
            // length and the body apart; a buffered reply bigger than its write buffer is cut),
            // and with Nagle the last one waits for the client's delayed ACK (40 ms on Linux):
            // every framed call, and every scan page of a few hundred rows. Replies are whole
            // messages, so nothing is gained from coalescing them.
            if stream.set_read_timeout(Some(idle_timeout)).is_err()
                || stream.set_write_timeout(Some(idle_timeout)).is_err()
                || stream.set_nodelay(true).is_err()
            {
                continue;
            }
            let (read, write) = match TTcpChannel::with_stream(stream).split() {
                Ok(halves) => halves,
                Err(error) => {
                    tracing::warn!(%error, "splitting a gateway connection failed");
                    continue;
                }
            };
            let input = input_protocol.create(read_transport.create(Box::new(read)));
            let output = output_protocol.create(write_transport.create(Box::new(write)));
            if hand.send((input, output)).is_err() {
                break;
            }
        }
        Err(thrift::Error::Application(thrift::ApplicationError {
            kind: thrift::ApplicationErrorKind::Unknown,
            message: "the gateway's accept loop ended".into(),
        }))
    })
}

/// One connection's protocols, handed from the acceptor to a worker.
type Protocols = (
    Box<dyn thrift::protocol::TInputProtocol + Send>,
    Box<dyn thrift::protocol::TOutputProtocol + Send>,
);

/// Serves calls on one connection until it closes, fails or stays silent past the idle timeout.
fn serve_connection(
    processor: &HbaseSyncProcessor<Gateway>,
    input: &mut dyn thrift::protocol::TInputProtocol,
    output: &mut dyn thrift::protocol::TOutputProtocol,
) {
    use thrift::server::TProcessor;
    loop {
        if let Err(error) = processor.process(input, output) {
            match error {
                thrift::Error::Transport(ref transport)
                    if transport.kind == thrift::TransportErrorKind::EndOfFile => {}
                other => tracing::debug!(error = %other, "gateway connection closed"),
            }
            return;
        }
    }
}
