//! The web console: one HTML page, a script and a style sheet, embedded in the binary (no CDN,
//! no build step), served with headers that keep them to this origin.

use axum::http::header;
use axum::response::IntoResponse;

/// Only this origin's scripts and styles (inline style attributes included, for bar widths),
/// no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        ],
        body,
    )
}

/// `GET /`: the console's page.
pub async fn index() -> impl IntoResponse {
    asset(
        "text/html; charset=utf-8",
        include_str!("../console/index.html"),
    )
}

/// `GET /console/app.js`.
pub async fn script() -> impl IntoResponse {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("../console/app.js"),
    )
}

/// `GET /console/style.css`.
pub async fn style() -> impl IntoResponse {
    asset(
        "text/css; charset=utf-8",
        include_str!("../console/style.css"),
    )
}
