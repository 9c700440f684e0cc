//! Request extractors whose rejections are the API's JSON errors: a JSON body, query
//! parameters and path segments, each refused with a message saying what was wrong.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use std::fmt;

use serde::de::{DeserializeOwned, Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::error::ApiError;

/// A JSON request body: unknown fields, wrong types and malformed JSON are 400s, a body over
/// the size limit 413. A struct is read as `JsonBody<Object<T>>`, so it must come as an object.
pub struct JsonBody<T>(pub T);

/// Bodies parsed at once. Parsing is CPU work of a few milliseconds at most, and a parsed
/// body takes several times its size in memory until its handler has turned it into what it
/// needs: this bounds that memory whatever the number of connections.
static PARSING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Fields one JSON object of a request may have at most (the API's objects have a handful).
const OBJECT_FIELDS_MAX: usize = 64;

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
        let _parsing = PARSING
            .acquire()
            .await
            .map_err(|_| ApiError::invalid("the server is stopping"))?;
        serde_json::from_slice::<T>(&bytes)
            .map(JsonBody)
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
        let fields = deserializer.deserialize_map(Fields(serde_json::Map::new()))?;
        T::deserialize(serde_json::Value::Object(fields))
            .map(Object)
            .map_err(D::Error::custom)
    }
}

/// Reads the rest of a JSON object's fields into `.0` (which may hold the first already),
/// refusing more than [`OBJECT_FIELDS_MAX`].
pub struct Fields(pub serde_json::Map<String, serde_json::Value>);

impl<'de> Visitor<'de> for Fields {
    type Value = serde_json::Map<String, serde_json::Value>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = self.0;
        while let Some(key) = map.next_key::<String>()? {
            if fields.len() == OBJECT_FIELDS_MAX {
                return Err(A::Error::custom(format!(
                    "an object has at most {OBJECT_FIELDS_MAX} fields"
                )));
            }
            let value = map.next_value()?;
            fields.insert(key, value);
        }
        Ok(fields)
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
