//! The one place where errors become HTTP responses, with one JSON shape:
//! `{"error": {"code": "bad_request", "message": "...", "field": "phone"}}`.
//! 4xx answers carry the details the caller needs; 5xx answers are generic and the real error is
//! logged, so internals (paths, rowkeys) don't leak to clients.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hbidx_indexer::IndexerError;
use hbidx_store::StoreError;
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Stable machine-readable code: `bad_request`, `not_found`, `unauthorized`, `forbidden`,
    /// `rate_limited`, `conflict`, `payload_too_large`, `request_timeout`, `index_wait_timeout`,
    /// `store_unavailable`, `log_unavailable`, `store_table_missing`, `store_rejected`,
    /// `not_ready`, `shard_unavailable`, `insufficient_storage`, `internal`.
    #[schema(example = "bad_request")]
    pub code: &'static str,
    /// What is wrong, for people. Server errors say only to see the server log.
    pub message: String,
    /// The query parameter or body field at fault (4xx answers that have one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is wrong; `field` names the parameter or body field.
    #[error("{field}: {reason}")]
    BadRequest { field: String, reason: String },
    #[error("{what} not found")]
    NotFound { what: String },
    /// The request conflicts with work in progress (a reindex already running).
    #[error("{0}")]
    Conflict(String),
    #[error("request body too large: {0}")]
    PayloadTooLarge(String),
    /// The request body did not arrive in time (`[server] body_timeout_ms`).
    #[error("{0}")]
    RequestTimeout(String),
    /// Waiting for the index (`?wait=indexed`) took too long, or the index can't take the
    /// write now. The write itself succeeded; `detail` says where it is and why it isn't
    /// searchable yet.
    #[error("the write was stored {detail}")]
    IndexWaitTimeout { detail: String },
    /// `?wait=indexed`: the write was stored, but this instance's index volume is full, so the
    /// indexer is paused; it catches up by itself once space is freed.
    #[error(
        "the write was stored {detail}, but this instance's index volume is full: indexing is paused, and the write is indexed by itself once space is freed on the data volume"
    )]
    IndexFull { detail: String },
    /// The row store can't be reached right now.
    #[error("row store unavailable: {0}")]
    StoreUnavailable(String),
    /// `/readyz`: the row store can't serve a table right now; the reason names the store and
    /// the table.
    #[error("not ready: {reason}")]
    NotReady { reason: String },
    /// On a sharded tier: no replica of a shard the lookup needs answered.
    #[error(
        "shard {shard} is unavailable: no replica answered ({reason}); retry, or pass partial=true for the other shards' rows"
    )]
    ShardUnavailable { shard: usize, reason: String },
    /// The table's Kafka topic did not acknowledge a write-through event; nothing was written.
    #[error("event log unavailable: {0}")]
    LogUnavailable(String),
    /// No API key, a malformed `Authorization` header, or a key that isn't configured.
    #[error("{0}")]
    Unauthorized(String),
    /// The key is valid but lacks the scope the route needs.
    #[error("API key \"{key_id}\" does not have the \"{scope}\" scope, which {route} needs")]
    Forbidden {
        key_id: String,
        scope: &'static str,
        route: String,
    },
    /// The key is over its rate limit; the answer carries `Retry-After`.
    #[error(
        "API key \"{key_id}\" is over its rate limit ({per_second}/s, burst {burst}); retry in {retry_after_secs} s"
    )]
    RateLimited {
        key_id: String,
        per_second: u32,
        burst: u32,
        retry_after_secs: u64,
    },
    /// Too many requests without a valid key from the caller's address; the answer carries
    /// `Retry-After`.
    #[error(
        "too many requests without a valid API key from this address (over {per_second}/s, burst {burst}); retry in {retry_after_secs} s"
    )]
    TooManyRefusals {
        per_second: u32,
        burst: u32,
        retry_after_secs: u64,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Index(IndexerError),
    /// Something in the server itself failed (a background task died); logged, not shown.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub(crate) fn is_shard_unavailable(&self) -> bool {
        matches!(self, ApiError::ShardUnavailable { .. })
    }

    pub fn bad_request(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::BadRequest {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl From<IndexerError> for ApiError {
    fn from(err: IndexerError) -> Self {
        match err {
            IndexerError::InvalidCondition { field, reason } => Self::BadRequest { field, reason },
            IndexerError::TooBroad { field, max } => Self::BadRequest {
                field,
                reason: format!(
                    "the lookup matches more than {max} rows, the most one lookup walks ([server] max_lookup_matches); add characters, or another condition such as phone_suffix"
                ),
            },
            other => Self::Index(other),
        }
    }
}

impl ApiError {
    /// The HTTP status, the stable `code` of the JSON shape and the field at fault.
    fn classify(&self) -> (StatusCode, &'static str, Option<String>) {
        match self {
            ApiError::BadRequest { field, .. } => {
                (StatusCode::BAD_REQUEST, "bad_request", Some(field.clone()))
            }
            ApiError::NotFound { .. } => (StatusCode::NOT_FOUND, "not_found", None),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized", None),
            ApiError::Forbidden { .. } => (StatusCode::FORBIDDEN, "forbidden", None),
            ApiError::RateLimited { .. } | ApiError::TooManyRefusals { .. } => {
                (StatusCode::TOO_MANY_REQUESTS, "rate_limited", None)
            }
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict", None),
            ApiError::PayloadTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", None)
            }
            ApiError::RequestTimeout(_) => (
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                Some("body".to_string()),
            ),
            ApiError::IndexWaitTimeout { .. } => {
                (StatusCode::GATEWAY_TIMEOUT, "index_wait_timeout", None)
            }
            // The volume is full: the message says what was written and what to do.
            ApiError::IndexFull { .. } | ApiError::Store(StoreError::StorageFull { .. }) => (
                StatusCode::INSUFFICIENT_STORAGE,
                "insufficient_storage",
                None,
            ),
            // Writes stay refused until a restart; the message says so.
            ApiError::Store(StoreError::WritesHalted { .. }) => {
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", None)
            }
            ApiError::StoreUnavailable(_) | ApiError::Store(StoreError::Unavailable(_)) => {
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", None)
            }
            ApiError::NotReady { .. } => (StatusCode::SERVICE_UNAVAILABLE, "not_ready", None),
            ApiError::ShardUnavailable { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "shard_unavailable", None)
            }
            ApiError::LogUnavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "log_unavailable", None)
            }
            ApiError::Store(StoreError::UnknownTable(_)) => {
                (StatusCode::NOT_FOUND, "not_found", None)
            }
            // A deployment problem the caller must see in full: the message says which table
            // and how to create it.
            ApiError::Store(StoreError::TableMissing { .. }) => {
                (StatusCode::NOT_FOUND, "store_table_missing", None)
            }
            ApiError::Store(StoreError::Rejected(_)) => {
                (StatusCode::BAD_GATEWAY, "store_rejected", None)
            }
            ApiError::Store(StoreError::InvalidMutation { .. }) => {
                (StatusCode::BAD_REQUEST, "bad_request", None)
            }
            ApiError::Store(_) | ApiError::Index(_) | ApiError::Internal(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "internal", None)
            }
        }
    }

    pub fn status(&self) -> StatusCode {
        self.classify().0
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, field) = self.classify();
        let message = if status.is_server_error()
            && status != StatusCode::SERVICE_UNAVAILABLE
            && status != StatusCode::GATEWAY_TIMEOUT
            && status != StatusCode::INSUFFICIENT_STORAGE
        {
            tracing::error!(error = %self, "request failed");
            "internal error; see the server log".to_string()
        } else {
            self.to_string()
        };
        let body = ErrorResponse {
            error: ErrorBody {
                code,
                message,
                field,
            },
        };
        let mut response = (status, Json(body)).into_response();
        match &self {
            // RFC 6750: a 401 names the scheme the client should use.
            ApiError::Unauthorized(_) => {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"hbidx\""),
                );
            }
            ApiError::RateLimited {
                retry_after_secs, ..
            }
            | ApiError::TooManyRefusals {
                retry_after_secs, ..
            } => {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
            }
            _ => {}
        }
        response
    }
}
