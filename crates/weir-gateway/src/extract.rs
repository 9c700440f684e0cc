//! Request extractors whose rejections are the API's JSON errors: a JSON body, query
//! parameters and path segments, each refused with a message saying what was wrong.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};

use crate::error::ApiError;

/// A JSON request body: unknown fields, wrong types and malformed JSON are 400s, a body over
/// the size limit 413.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        require_json(request.headers())?;
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "payload_too_large",
                        format!("request body over {} bytes", crate::REQUEST_BODY_BYTES_MAX),
                    )
                } else {
                    ApiError::invalid(format!("cannot read the request body: {rejection}"))
                }
            })?;
        if bytes.is_empty() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_json",
                "a JSON request body is required",
            ));
        }
        serde_json::from_slice::<Object<T>>(&bytes)
            .map(|Object(value)| JsonBody(value))
            .map_err(|error| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_json",
                    format!("request body: {error}"),
                )
            })
    }
}

/// Refuses a body not declared as JSON (415). Browsers send `application/json` across
/// origins only after a CORS preflight, which this API never grants, so a web page elsewhere
/// cannot make a visitor's browser create, publish or commit here.
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json")) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!(
            "send the body as JSON with Content-Type: application/json (got {:?})",
            content_type
        ),
    ))
}

/// A struct that must come as a JSON object. (Serde also reads a struct from an array of its
/// fields in order, which would let `[null, "x"]` pass for a record.)
#[derive(Debug)]
pub struct Object<T>(pub T);

impl<'de, T: DeserializeOwned> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = serde_json::Map::deserialize(deserializer)?;
        T::deserialize(serde_json::Value::Object(fields))
            .map(Object)
            .map_err(D::Error::custom)
    }
}

/// Query parameters; an unknown or malformed one is a 400.
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| QueryParams(value))
            .map_err(|rejection| ApiError::invalid(rejection.body_text()))
    }
}

/// Path segments; one that does not parse (a partition that is not a number) is a 400.
pub struct PathParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| PathParams(value))
            .map_err(|rejection| ApiError::invalid(rejection.body_text()))
    }
}
