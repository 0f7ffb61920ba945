//! Extractors whose rejections use the service's one error shape.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::{ApiError, SharedState};

/// `Json<T>` whose errors are `ApiError`s naming the body and what is wrong with it. The body
/// must arrive within `[server] body_timeout_ms` (408 otherwise), so a client trickling a body
/// can't hold the connection.
pub struct ApiJson<T>(pub T);

/// What a JSON body's top level must be. serde's derived structs also accept an array of their
/// fields in order (`[null]` reads as `{"sample": null}`), a form the API documents nowhere and
/// a client sends only by mistake: the request types refuse it.
pub trait BodyShape {
    /// Whether the body must be a JSON object.
    const OBJECT: bool = true;
}

impl<T> BodyShape for Vec<T> {
    const OBJECT: bool = false;
}

impl BodyShape for serde_json::Map<String, serde_json::Value> {}

impl<T> FromRequest<SharedState> for ApiJson<T>
where
    T: DeserializeOwned + BodyShape,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &SharedState) -> Result<Self, Self::Rejection> {
        let limit = state.limits.body_timeout;
        // Read as raw JSON first (content type, size limit and syntax checked as before), so
        // its top level can be checked before the type reads it.
        let raw = match tokio::time::timeout(
            limit,
            axum::Json::<Box<serde_json::value::RawValue>>::from_request(req, state),
        )
        .await
        {
            Ok(Ok(axum::Json(raw))) => raw,
            Ok(Err(rejection)) => return Err(json_rejection(rejection)),
            Err(_) => {
                return Err(ApiError::RequestTimeout(format!(
                    "the request body did not arrive within {} ms",
                    limit.as_millis()
                )));
            }
        };
        let text = raw.get().trim_start();
        if T::OBJECT && !text.starts_with('{') {
            return Err(ApiError::bad_request("body", "must be a JSON object"));
        }
        match axum::Json::<T>::from_bytes(text.as_bytes()) {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::PayloadTooLarge(rejection.body_text());
    }
    ApiError::bad_request("body", without_values(&rejection.body_text()))
}

/// serde's messages quote the value they stumbled on (``invalid type: integer `13912345678`,
/// expected a string``, `invalid type: string "110101…"`): in an answer that echoes a phone or
/// an idcard back, into client logs and proxies. Every quoted span is replaced by `…`; what is
/// left says where (the JSON path, line and column) and what was expected.
pub(crate) fn without_values(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find(['`', '"']) {
        let quote = rest[start..].chars().next().unwrap_or('"');
        let Some(len) = rest[start + 1..].find(quote) else {
            break;
        };
        out.push_str(&rest[..start]);
        out.push(quote);
        out.push('…');
        out.push(quote);
        rest = &rest[start + 1 + len + 1..];
    }
    out.push_str(rest);
    out
}

/// The query string as ordered pairs, so unknown and repeated parameters can be reported.
pub struct QueryPairs(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<Vec<(String, String)>>::from_request_parts(parts, state).await
        {
            Ok(axum::extract::Query(pairs)) => Ok(Self(pairs)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    ApiError::bad_request("query", without_values(&rejection.body_text()))
}

/// A JSON response body serialised into one `Vec` sized for a typical answer. axum's `Json`
/// writes through a `BytesMut` writer, one bounds-checked `put_slice` per token; on a small
/// lookup answer that was a tenth of the request's CPU.
pub struct JsonBody<T>(pub T);

impl<T: serde::Serialize> axum::response::IntoResponse for JsonBody<T> {
    fn into_response(self) -> axum::response::Response {
        let mut body = Vec::with_capacity(512);
        match serde_json::to_writer(&mut body, &self.0) {
            Ok(()) => (
                [(
                    axum::http::header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            // Only a failing `Serialize` impl gets here (our types serialise strings, numbers
            // and maps with string keys, which can't fail).
            Err(err) => {
                ApiError::Internal(format!("serialising the response: {err}")).into_response()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::without_values;

    #[test]
    fn quoted_values_are_left_out_of_messages() {
        assert_eq!(
            without_values(
                "cells.info:phone: invalid type: integer `13912345678`, expected a string at line 1 column 40"
            ),
            "cells.info:phone: invalid type: integer `…`, expected a string at line 1 column 40"
        );
        assert_eq!(
            without_values("invalid type: string \"110101199003077777\", expected a map"),
            "invalid type: string \"…\", expected a map"
        );
        assert_eq!(
            without_values("unterminated ` quote"),
            "unterminated ` quote"
        );
        assert_eq!(without_values("no quotes"), "no quotes");
        assert_eq!(without_values("`a` and `b`"), "`…` and `…`");
    }
}
