//! Extractors whose rejections use the service's one error shape.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::ApiError;

/// `Json<T>` whose errors are `ApiError`s naming the body and what is wrong with it.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::PayloadTooLarge(rejection.body_text());
    }
    ApiError::bad_request("body", rejection.body_text())
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
    ApiError::bad_request("query", rejection.body_text())
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
