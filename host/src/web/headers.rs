//! The headers every response carries, errors and upgrades too.

use hyper::header::{self, HeaderMap, HeaderValue};

use super::hosts::Scheme;

/// No inline script or style, nothing from elsewhere, no framing, no form posts; the socket
/// only to the page's own origin.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// On https: a year, this host only.
pub const STRICT_TRANSPORT_SECURITY: &str = "max-age=31536000";

/// Sets the security headers on `headers`; `no_store` for answers that name an identity.
pub(crate) fn secure(headers: &mut HeaderMap, scheme: Scheme, no_store: bool) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if no_store {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if scheme == Scheme::Https {
        headers.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(STRICT_TRANSPORT_SECURITY),
        );
    }
}
