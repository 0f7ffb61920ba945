//! How one call reaches HBase: a permit, a pooled connection on tokio's blocking pool, retries
//! of transport errors, the circuit breaker and the overall deadline, and the classification of
//! Thrift errors that decides what is retried.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use hbase_thrift::hbase::{IOError, IllegalArgument};

use crate::error::{Result, StoreError};
use crate::thrift1::Thrift1Client as Client;

use super::HbaseStore;

/// One failed attempt, classified.
#[derive(Debug)]
struct Failure {
    error: StoreError,
    /// A transport problem: retry, and count it against the breaker.
    transient: bool,
}

impl HbaseStore {
    /// Runs `f` on a pooled connection on the blocking pool, with retries, the breaker and the
    /// overall deadline.
    pub(super) async fn call<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        F: Fn(&mut Client) -> thrift::Result<T> + Send + Sync + 'static,
        T: Send + 'static,
    {
        self.call_within(op, self.config.timeout, self.config.retries, f)
            .await
    }

    /// [`HbaseStore::call`] with its own deadline and retry count.
    pub(super) async fn call_within<T, F>(
        &self,
        op: &'static str,
        timeout: Duration,
        retries: u32,
        f: F,
    ) -> Result<T>
    where
        F: Fn(&mut Client) -> thrift::Result<T> + Send + Sync + 'static,
        T: Send + 'static,
    {
        let started = Instant::now();
        let f = Arc::new(f);
        let attempt = || {
            let f = f.clone();
            async move { self.attempt(op, f).await }
        };
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(20))
            .with_max_delay(Duration::from_millis(500))
            .with_max_times(retries as usize)
            .with_jitter();
        let retried = attempt
            .retry(backoff)
            .when(|failure: &Failure| failure.transient)
            .notify(|failure: &Failure, wait: Duration| {
                tracing::debug!(op, error = %failure.error, wait_ms = wait.as_millis() as u64, "retrying HBase call");
            });
        let outcome = match tokio::time::timeout(timeout, retried).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(failure)) => Err(failure.error),
            Err(_) => Err(StoreError::Unavailable(format!(
                "HBase Thrift server {} did not answer {op} within {} ms",
                self.config.thrift,
                timeout.as_millis()
            ))),
        };
        let status = if outcome.is_ok() { "ok" } else { "error" };
        metrics::histogram!("hbidx_thrift_call_seconds", "op" => op, "status" => status)
            .record(started.elapsed().as_secs_f64());
        outcome
    }

    async fn attempt<T, F>(&self, op: &'static str, f: Arc<F>) -> std::result::Result<T, Failure>
    where
        F: Fn(&mut Client) -> thrift::Result<T> + Send + Sync + 'static,
        T: Send + 'static,
    {
        if let Err(refused) = self.breaker.admit() {
            return Err(Failure {
                error: StoreError::Unavailable(format!(
                    "HBase Thrift server {} is unreachable (circuit breaker open; next attempt in {} ms)",
                    self.config.thrift,
                    refused.retry_in.as_millis()
                )),
                transient: false,
            });
        }
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Failure {
                error: StoreError::Unavailable("store is shutting down".to_owned()),
                transient: false,
            })?;
        let pool = self.pool.clone();
        let breaker = self.breaker.clone();
        let address = self.config.thrift.clone();
        let joined = tokio::task::spawn_blocking(move || {
            // Held until the blocking work ends, even if the caller stopped waiting.
            let _permit = permit;
            let mut conn = match pool.checkout() {
                Ok(conn) => conn,
                Err(err) => {
                    breaker.failure();
                    return Err(Failure {
                        error: StoreError::Unavailable(format!(
                            "can't connect to HBase Thrift server {address}: {err}"
                        )),
                        transient: true,
                    });
                }
            };
            let outcome = match f(&mut conn.client) {
                Ok(value) => {
                    breaker.success();
                    Ok(value)
                }
                Err(err) => {
                    let failure = classify(&address, err);
                    if failure.transient {
                        conn.broken = true;
                        breaker.failure();
                    } else {
                        breaker.success();
                    }
                    Err(failure)
                }
            };
            pool.checkin(conn);
            outcome
        })
        .await;
        let result = joined.unwrap_or_else(|join| {
            Err(Failure {
                error: StoreError::Storage(Box::new(join)),
                transient: false,
            })
        });
        if let Err(failure) = &result {
            let kind = if failure.transient {
                "transport"
            } else {
                "rejected"
            };
            metrics::counter!("hbidx_thrift_errors_total", "op" => op, "kind" => kind).increment(1);
        }
        result
    }
}

/// Sorts a Thrift error into retryable transport trouble and answers from the server.
fn classify(address: &str, err: thrift::Error) -> Failure {
    match err {
        thrift::Error::Transport(transport) => Failure {
            error: StoreError::Unavailable(format!("HBase Thrift server {address}: {transport}")),
            transient: true,
        },
        // A protocol error means the stream is out of step (or speaks another protocol): the
        // connection is dropped and a fresh one may well work.
        thrift::Error::Protocol(protocol) => Failure {
            error: StoreError::Unavailable(format!(
                "HBase Thrift server {address}: protocol error: {protocol} (check store.transport and store.protocol)"
            )),
            transient: true,
        },
        thrift::Error::Application(app) => Failure {
            error: StoreError::Rejected(app.message),
            transient: false,
        },
        thrift::Error::User(user) => {
            let message = if let Some(io) = user.downcast_ref::<IOError>() {
                io.message.clone().unwrap_or_else(|| "IOError".to_owned())
            } else if let Some(arg) = user.downcast_ref::<IllegalArgument>() {
                format!(
                    "illegal argument: {}",
                    arg.message.clone().unwrap_or_default()
                )
            } else {
                user.to_string()
            };
            Failure {
                error: StoreError::Rejected(message),
                transient: false,
            }
        }
    }
}
