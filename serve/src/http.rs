//! The REST API's HTTP serving: one single-threaded tokio runtime per HTTP thread, each serving
//! the connections handed to it, instead of one work-stealing runtime for everything.
//!
//! Why: a lookup is ~15 µs of server CPU, and on tokio's multi-thread scheduler some of that
//! goes to moving work between threads: the thread that polled epoll wakes another to run the
//! ready connection, tasks are stolen across cores, and each connection's buffers change
//! caches. A connection that stays on one thread, on a runtime that polls its own epoll, pays
//! none of that: a few percent less server CPU per lookup (docs/design/threads-and-http.md,
//! docs/benchmarks.md). Connections are dealt round-robin by one acceptor,
//! so every thread holds the same number of them (SO_REUSEPORT would hash them, and with a
//! client pool of a few dozen connections the hash leaves threads unevenly loaded).
//!
//! The control plane (indexer waits, jobs, the dashboard sampler) stays on the process's main
//! runtime; only request handling runs here. Handlers that spawn (read repair) spawn onto the
//! HTTP thread's runtime, which is fine: the tasks are short and async.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use axum::Router;
use hbidx_query::auth::{ClientAddr, client_bucket};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tower::ServiceExt;

/// The number of HTTP threads when `[server] workers` doesn't say: one per CPU.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The REST API's HTTP threads: how many, and the CPUs they are pinned to (`[server]
/// http_cpus`; empty: not pinned, the scheduler places them).
///
/// Why pin: on a small box, an HTTP thread that shares its core with anything runnable (a
/// co-located client, HBase's own threads, the indexer) waits a whole scheduler slice (~3 ms)
/// now and then, and that wait is the lookup p99: pinned to a core of its own, a thread's p99
/// stays around a millisecond; sharing one, it moves between one and a few milliseconds
/// (docs/benchmarks.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpThreads {
    pub count: usize,
    /// Thread `i` runs on `cpus[i % cpus.len()]`.
    pub cpus: Vec<usize>,
    /// Connections served at once (`[server] max_connections`): the acceptor takes the next
    /// only when one closes, so extra clients wait in the listen backlog.
    pub max_connections: usize,
    /// Of those, connections one client address may hold (`[server]
    /// max_connections_per_client`); more from it are closed as they are accepted.
    pub max_connections_per_client: usize,
    /// A request head must arrive within this (`[server] header_timeout_ms`).
    pub header_timeout: std::time::Duration,
}

impl HttpThreads {
    /// The REST API's threads as `[server]` says: `workers`, else one per listed `http_cpus`,
    /// else one per CPU; pinned as `http_cpus` says.
    pub fn from_config(server: &hbidx_schema::config::ServerConfig) -> Self {
        let count = server.workers.unwrap_or_else(|| {
            if server.http_cpus.is_empty() {
                default_threads()
            } else {
                server.http_cpus.len()
            }
        });
        Self {
            count,
            cpus: server.http_cpus.clone(),
            max_connections: server.max_connections,
            max_connections_per_client: server.max_connections_per_client,
            header_timeout: server.header_timeout,
        }
    }

    /// `count` threads, placed by the scheduler, with the default connection limits.
    pub fn unpinned(count: usize) -> Self {
        Self {
            count,
            cpus: Vec::new(),
            max_connections: hbidx_schema::config::DEFAULT_MAX_CONNECTIONS,
            max_connections_per_client: hbidx_schema::config::DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            header_timeout: hbidx_schema::config::DEFAULT_HEADER_TIMEOUT,
        }
    }

    /// `count` threads pinned to `cpus`, with the default connection limits.
    pub fn pinned(count: usize, cpus: Vec<usize>) -> Self {
        Self {
            cpus,
            ..Self::unpinned(count)
        }
    }

    fn cpu_of(&self, index: usize) -> Option<usize> {
        (!self.cpus.is_empty()).then(|| self.cpus[index % self.cpus.len()])
    }
}

/// The CPUs the calling thread may run on (its affinity mask), in order; empty where that
/// can't be read.
pub fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        use rustix::thread::{CpuSet, sched_getaffinity};
        sched_getaffinity(None).map_or_else(
            |_| Vec::new(),
            |set| {
                (0..CpuSet::MAX_CPU)
                    .filter(|&cpu| set.is_set(cpu))
                    .collect()
            },
        )
    }
    #[cfg(not(target_os = "linux"))]
    Vec::new()
}

/// Pins the calling thread to `cpu`.
#[cfg(target_os = "linux")]
fn pin_current_thread(cpu: usize) -> Result<()> {
    use rustix::thread::{CpuSet, sched_setaffinity};
    anyhow::ensure!(
        cpu < CpuSet::MAX_CPU,
        "CPU {cpu} is beyond the {} CPUs an affinity mask can name",
        CpuSet::MAX_CPU
    );
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).with_context(|| {
        format!("pinning an HTTP thread to CPU {cpu} (is it online and allowed to this process?)")
    })
}

#[cfg(not(target_os = "linux"))]
fn pin_current_thread(cpu: usize) -> Result<()> {
    anyhow::bail!("pinning HTTP threads to CPUs (CPU {cpu}) is supported on Linux only")
}

/// The REST API's HTTP threads, started and ready for connections.
pub struct HttpServer {
    listener: tokio::net::TcpListener,
    /// One sender per HTTP thread: the connections dealt to it.
    lanes: Vec<mpsc::UnboundedSender<Accepted>>,
    joins: Vec<JoinHandle<Result<()>>>,
    stop: watch::Sender<bool>,
    /// One permit per open connection, `[server] max_connections` in all.
    permits: Arc<Semaphore>,
    /// Open connections per client address.
    clients: ClientSlots,
}

/// A connection dealt to an HTTP thread, with what it holds until it closes: its permit and
/// its client address's slot.
struct Accepted {
    stream: std::net::TcpStream,
    client: IpAddr,
    _permit: OwnedSemaphorePermit,
    _slot: ClientSlot,
}

/// Open connections per client address (IPv6 by /64), capped at `cap` each. The map holds
/// only addresses with a connection open, so it is bounded by `max_connections`.
#[derive(Clone)]
struct ClientSlots {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    cap: usize,
}

impl ClientSlots {
    fn new(cap: usize) -> Self {
        Self {
            open: Arc::default(),
            cap: cap.max(1),
        }
    }

    /// A slot for one more connection from `addr`; `None` when it holds `cap` already.
    fn take(&self, addr: IpAddr) -> Option<ClientSlot> {
        let key = client_bucket(addr);
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(key).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            open: self.open.clone(),
            key,
        })
    }
}

/// One open connection's place in [`ClientSlots`], given back when it closes.
struct ClientSlot {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    key: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

impl HttpServer {
    /// Starts `threads` HTTP threads serving `app`. Returns once every thread is up (named,
    /// with its runtime), so what comes next (a "listening" line) is true; a thread that can't
    /// start fails here.
    pub async fn start(
        listener: tokio::net::TcpListener,
        app: Router,
        threads: &HttpThreads,
    ) -> Result<Self> {
        let (stop, stopped) = watch::channel(false);
        let header_timeout = threads.header_timeout;
        let count = threads.count.max(1);
        let mut lanes = Vec::with_capacity(count);
        let mut joins = Vec::with_capacity(count);
        for index in 0..count {
            let (sender, receiver) = mpsc::unbounded_channel();
            let app = app.clone();
            let mut stopped = stopped.clone();
            let cpu = threads.cpu_of(index);
            let (started, start) = tokio::sync::oneshot::channel::<Result<()>>();
            let join = std::thread::Builder::new()
                .name(format!("hbidx-http-{index}"))
                .spawn(move || -> Result<()> {
                    if let Some(cpu) = cpu
                        && let Err(err) = pin_current_thread(cpu)
                    {
                        let _ = started.send(Err(err));
                        return Ok(());
                    }
                    let runtime = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(runtime) => runtime,
                        Err(err) => {
                            let _ =
                                started.send(Err(err).context("building an HTTP thread's runtime"));
                            return Ok(());
                        }
                    };
                    let _ = started.send(Ok(()));
                    runtime.block_on(serve_lane(receiver, app, header_timeout, async move {
                        let _ = stopped.wait_for(|stop| *stop).await;
                    }));
                    Ok(())
                })
                .context("starting an HTTP thread")?;
            lanes.push(sender);
            joins.push(join);
            start
                .await
                .context("an HTTP thread stopped while starting")??;
        }
        Ok(Self {
            listener,
            lanes,
            joins,
            stop,
            permits: Arc::new(Semaphore::new(threads.max_connections.max(1))),
            clients: ClientSlots::new(threads.max_connections_per_client),
        })
    }

    /// Takes connections until `shutdown` completes, then stops accepting, lets the requests
    /// in flight finish, and joins the threads.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        let Self {
            listener,
            lanes,
            joins,
            stop,
            permits,
            clients,
        } = self;
        let accept = async {
            let mut next = 0usize;
            loop {
                // At the cap, stop accepting until a connection closes: the kernel's backlog
                // holds the rest, and nothing is spent on them meanwhile.
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of file descriptors and the like: wait a little instead of
                        // spinning, as axum::serve does.
                        tracing::warn!(error = %err, "accepting a connection failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // One address holding its share already: closed at once (dropping the stream),
                // its permit back before the next accept.
                let Some(slot) = clients.take(peer.ip()) else {
                    metrics::counter!("hbidx_connections_refused_total", "reason" => "per_client")
                        .increment(1);
                    continue;
                };
                // Responses are written whole, but a client's pipelined request and our
                // response must never wait on Nagle's algorithm.
                let _ = stream.set_nodelay(true);
                // The stream is registered with this runtime's reactor; the HTTP thread
                // registers it again with its own.
                let Ok(stream) = stream.into_std() else {
                    continue;
                };
                let accepted = Accepted {
                    stream,
                    client: peer.ip(),
                    _permit: permit,
                    _slot: slot,
                };
                if lanes[next % lanes.len()].send(accepted).is_err() {
                    // That thread has stopped: its error is reported when it is joined.
                    break;
                }
                next = next.wrapping_add(1);
            }
        };
        tokio::select! {
            _ = accept => {}
            _ = shutdown => {}
        }
        drop(listener);
        let _ = stop.send(true);
        drop(lanes);
        tokio::task::spawn_blocking(move || {
            for join in joins {
                match join.join() {
                    Ok(result) => result?,
                    Err(_) => anyhow::bail!("an HTTP thread panicked"),
                }
            }
            Ok(())
        })
        .await
        .context("joining the HTTP threads")?
    }
}

/// [`HttpServer::start`], then [`HttpServer::run`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    threads: HttpThreads,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    HttpServer::start(listener, app, &threads)
        .await?
        .run(shutdown)
        .await
}

/// Serves the connections dealt to one HTTP thread until `stopped`, then lets the requests in
/// flight finish. Each connection is hyper's HTTP/1 with a header read timeout (which
/// `axum::serve` doesn't expose): a client trickling a request head, or idle between
/// requests, is disconnected after `header_timeout`.
async fn serve_lane(
    mut receiver: mpsc::UnboundedReceiver<Accepted>,
    app: Router,
    header_timeout: std::time::Duration,
    stopped: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let graceful = GracefulShutdown::new();
    let mut stopped = std::pin::pin!(stopped);
    loop {
        let accepted = tokio::select! {
            next = receiver.recv() => match next {
                Some(next) => next,
                None => break,
            },
            () = &mut stopped => break,
        };
        let Accepted {
            stream,
            client,
            _permit: permit,
            _slot: slot,
        } = accepted;
        let stream = match tokio::net::TcpStream::from_std(stream) {
            Ok(stream) => stream,
            Err(err) => {
                tracing::warn!(error = %err, "registering a connection failed");
                continue;
            }
        };
        // Every request of the connection carries its client's address (the limit of
        // refused requests per address, hbidx_query::auth).
        let service =
            app.clone()
                .map_request(move |mut request: hyper::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(ClientAddr(client));
                    request
                });
        let connection =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // Errors here are the client's (reset, timed out, malformed): nothing to report.
            let _ = connection.await;
            drop((permit, slot));
        });
    }
    graceful.shutdown().await;
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// One keep-alive request on `stream`; returns the body (the answering thread's name).
    fn ask(stream: &mut std::net::TcpStream) -> String {
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
            .unwrap();
        let mut response = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            let read = stream.read(&mut chunk).unwrap();
            assert!(read > 0, "the server closed the connection");
            response.extend_from_slice(&chunk[..read]);
            let text = String::from_utf8_lossy(&response);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                if body.len() == length {
                    return body.to_string();
                }
            }
        }
    }

    /// Connections are dealt to the HTTP threads in turn and each stays on its thread; a
    /// shutdown lets the threads finish and joins them.
    #[test]
    fn connections_are_dealt_round_robin_and_stay_on_their_thread() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let app = Router::new().route(
            "/",
            axum::routing::get(|| async {
                std::thread::current().name().unwrap_or("?").to_string()
            }),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (addr, server) = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(serve(listener, app, HttpThreads::unpinned(3), async {
                let _ = stopped.await;
            }));
            (addr, server)
        });
        let mut streams: Vec<_> = (0..6)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let answered_by: Vec<String> = streams.iter_mut().map(ask).collect();
        // The kernel queues connections in the order they were made and the acceptor deals
        // them in turn.
        let expected: Vec<String> = (0..6).map(|i| format!("hbidx-http-{}", i % 3)).collect();
        assert_eq!(answered_by, expected);
        for (stream, first) in streams.iter_mut().zip(&answered_by) {
            assert_eq!(&ask(stream), first, "a connection moved to another thread");
        }
        drop(streams);
        stop.send(()).unwrap();
        runtime.block_on(server).unwrap().unwrap();
    }

    /// `[server] http_cpus`: each HTTP thread runs only on its CPU, and a CPU the process may
    /// not use fails the start with a message that names it.
    #[cfg(target_os = "linux")]
    #[test]
    fn pinned_threads_run_on_their_cpus_and_a_bad_cpu_fails_the_start() {
        // Multi-thread: the acceptor must run while this thread blocks on its requests.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        // The first CPU this process may use (a container's cpuset need not include CPU 0).
        let cpu = allowed_cpus()[0];
        let app = Router::new().route(
            "/",
            axum::routing::get(|| async { format!("{:?}", allowed_cpus()) }),
        );
        let threads = HttpThreads::pinned(2, vec![cpu]);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (addr, server) = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(serve(listener, app.clone(), threads, async {
                let _ = stopped.await;
            }));
            (addr, server)
        });
        for _ in 0..2 {
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            assert_eq!(ask(&mut stream), format!("[{cpu}]"));
        }
        stop.send(()).unwrap();
        runtime.block_on(server).unwrap().unwrap();

        let error = runtime
            .block_on(async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let bad = HttpThreads::pinned(1, vec![1023]);
                HttpServer::start(listener, app, &bad).await.map(|_| ())
            })
            .unwrap_err();
        assert!(format!("{error:#}").contains("CPU 1023"), "{error:#}");
    }

    /// A server on a multi-thread runtime (the acceptor runs while the test blocks), with one
    /// route answering "ok"; returns its address, the stop and the server task.
    fn start_limited(
        threads: HttpThreads,
    ) -> (
        tokio::runtime::Runtime,
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<Result<()>>,
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (addr, server) = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn(serve(listener, app, threads, async {
                let _ = stopped.await;
            }));
            (addr, server)
        });
        (runtime, addr, stop, server)
    }

    /// Reads until the server closes the connection; returns what it sent and how long that
    /// took.
    fn read_to_close(stream: &mut std::net::TcpStream) -> (Vec<u8>, std::time::Duration) {
        let started = std::time::Instant::now();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut received = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return (received, started.elapsed()),
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// `[server] header_timeout_ms`: a client that trickles a request head, or connects and
    /// sends nothing, is disconnected once the timeout passes, without an answer being
    /// waited for; a prompt client on the same server is answered.
    #[test]
    fn a_slow_or_idle_request_head_is_cut_off() {
        let threads = HttpThreads {
            header_timeout: std::time::Duration::from_millis(300),
            ..HttpThreads::unpinned(1)
        };
        let (runtime, addr, stop, server) = start_limited(threads);
        let mut trickling = std::net::TcpStream::connect(addr).unwrap();
        trickling.write_all(b"GET / HTTP/1.1\r\nhost: te").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        trickling.write_all(b"st\r\nx-slow: 1").unwrap();
        let mut idle = std::net::TcpStream::connect(addr).unwrap();
        let mut prompt = std::net::TcpStream::connect(addr).unwrap();
        assert_eq!(ask(&mut prompt), "ok");
        for stream in [&mut trickling, &mut idle] {
            let (received, took) = read_to_close(stream);
            // hyper answers a timed-out head with nothing or a bare 408, then closes.
            let text = String::from_utf8_lossy(&received);
            assert!(
                received.is_empty() || text.starts_with("HTTP/1.1 408"),
                "{text}"
            );
            assert!(
                took < std::time::Duration::from_secs(5),
                "closed after {took:?}"
            );
        }
        stop.send(()).unwrap();
        runtime.block_on(server).unwrap().unwrap();
    }

    /// `[server] max_connections`: at the cap a new connection is not served until an open
    /// one closes; then it is.
    #[test]
    fn connections_over_the_cap_wait_for_one_to_close() {
        let threads = HttpThreads {
            max_connections: 2,
            ..HttpThreads::unpinned(1)
        };
        let (runtime, addr, stop, server) = start_limited(threads);
        let mut first = std::net::TcpStream::connect(addr).unwrap();
        let mut second = std::net::TcpStream::connect(addr).unwrap();
        assert_eq!(ask(&mut first), "ok");
        assert_eq!(ask(&mut second), "ok");
        // The kernel completes the handshake (backlog), but nobody reads the request.
        let mut third = std::net::TcpStream::connect(addr).unwrap();
        third
            .write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
            .unwrap();
        third
            .set_read_timeout(Some(std::time::Duration::from_millis(500)))
            .unwrap();
        let mut chunk = [0u8; 64];
        let waited = third.read(&mut chunk);
        assert!(
            matches!(&waited, Err(err) if matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
            "answered over the cap: {waited:?}"
        );
        drop(first);
        third
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let read = third.read(&mut chunk).unwrap();
        assert!(
            String::from_utf8_lossy(&chunk[..read]).starts_with("HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&chunk[..read])
        );
        assert_eq!(ask(&mut second), "ok");
        drop((second, third));
        stop.send(()).unwrap();
        runtime.block_on(server).unwrap().unwrap();
    }
}
