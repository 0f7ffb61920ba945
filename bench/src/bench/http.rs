//! The HTTP side of the bench: the benchmarked service on a loopback port, the bench's API key,
//! and a client that sends it.

use anyhow::Result;

/// A fresh API key and a security config holding only it.
///
/// wrk calls the API like any client, with a key, so the lookup figures include the
/// authentication cost. Only this key, without a rate limit: the bench measures the service.
pub(super) fn bench_key() -> Result<(String, hbidx_query::auth::SecurityConfig)> {
    let api_key = hbidx_query::auth::generate_key();
    let mut security = hbidx_query::auth::SecurityConfig::default();
    security
        .add_plaintext_key("bench", &api_key, "bench key")
        .map_err(|err| anyhow::anyhow!("{err}"))?;
    Ok((api_key, security))
}

/// A benchmarked HTTP service on a loopback port, until [`BenchServer::stop`].
pub(super) struct BenchServer {
    pub(super) addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl BenchServer {
    pub(super) async fn start(
        state: hbidx_query::SharedState,
        http_threads: hbidx_serve::HttpThreads,
    ) -> Result<Self> {
        Self::start_app(hbidx_query::app(state), http_threads).await
    }

    /// The HTTP floor: the service's HTTP stack (its threads, authentication and metrics) with
    /// one more route, `GET /bench/floor/{table}/rows`, answering a fixed one-row lookup answer
    /// from memory. What a lookup costs over it is the index and the row read.
    pub(super) async fn start_floor(
        state: hbidx_query::SharedState,
        http_threads: hbidx_serve::HttpThreads,
        row: serde_json::Value,
    ) -> Result<Self> {
        let row = std::sync::Arc::new(row);
        let floor = axum::Router::new().route(
            "/bench/floor/{table}/rows",
            axum::routing::get(move || {
                let row = row.clone();
                async move { axum::Json(row.as_ref().clone()) }
            }),
        );
        Self::start_app(hbidx_query::app_with(state, floor), http_threads).await
    }

    async fn start_app(app: axum::Router, http_threads: hbidx_serve::HttpThreads) -> Result<Self> {
        let listener = hbidx_serve::bind("127.0.0.1:0".parse()?).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(hbidx_serve::serve_http(
            listener,
            app,
            http_threads,
            async {
                let _ = stopped.await;
            },
        ));
        Ok(Self { addr, stop, task })
    }

    pub(super) async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        self.task.await?
    }
}

/// An HTTP client that sends the bench's API key on every request.
pub(super) fn api_client(api_key: &str) -> Result<reqwest::Client> {
    let mut authorization = reqwest::header::HeaderValue::from_str(&format!("Bearer {api_key}"))?;
    authorization.set_sensitive(true);
    Ok(reqwest::Client::builder()
        .default_headers(reqwest::header::HeaderMap::from_iter([(
            reqwest::header::AUTHORIZATION,
            authorization,
        )]))
        .build()?)
}
