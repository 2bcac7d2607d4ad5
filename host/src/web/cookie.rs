//! The browser's cookie: reading it from `Cookie`, writing `Set-Cookie`.
//!
//! Browsers do not isolate cookies by port: every web server on the same host name reads
//! them. On https the cookie is `__Host-baton_web`, whose prefix makes the browser refuse it
//! unless it is `Secure`, `Path=/` and has no `Domain` (so no other site, and no plain-http
//! page of the same name, can set or overwrite it). Plain http, loopback only, keeps
//! `baton_web`: the prefix needs `Secure`.

use hyper::header::{self, HeaderMap};

use super::hosts::Scheme;

/// The cookie's name on plain http (loopback).
pub const COOKIE_NAME: &str = "baton_web";
/// The cookie's name on https.
pub const SECURE_COOKIE_NAME: &str = "__Host-baton_web";

/// The cookie's name on `scheme`.
pub fn cookie_name(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Http => COOKIE_NAME,
        Scheme::Https => SECURE_COOKIE_NAME,
    }
}

/// The value of the request's cookie for `scheme`, if any (the first, if several). Only
/// that scheme's name counts: an https listener ignores a plain `baton_web`.
pub(crate) fn read(headers: &HeaderMap, scheme: Scheme) -> Option<&str> {
    let wanted = cookie_name(scheme);
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == wanted)
        .map(|(_, value)| value.trim_matches('"'))
        .filter(|value| !value.is_empty())
}

/// `Set-Cookie` for `value`: script cannot read it, no other site's request carries it, the
/// whole page gets it; on https `Secure` and the `__Host-` name.
pub(crate) fn set(value: &str, scheme: Scheme) -> String {
    let secure = if scheme == Scheme::Https {
        "; Secure"
    } else {
        ""
    };
    let name = cookie_name(scheme);
    format!("{name}={value}; HttpOnly; SameSite=Strict; Path=/{secure}")
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use hyper::header::HeaderValue;

    use super::*;

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; baton_webx=2"),
        );
        assert_eq!(read(&h, Scheme::Http), None);
        h.append(
            header::COOKIE,
            HeaderValue::from_static("b=3;  baton_web=s3cret ; c=4"),
        );
        assert_eq!(read(&h, Scheme::Http), Some("s3cret"));
    }

    #[test]
    fn https_reads_only_the_host_prefixed_cookie() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("baton_web=plain"));
        assert_eq!(read(&h, Scheme::Https), None);
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("baton_web=plain; __Host-baton_web=s3cret"),
        );
        assert_eq!(read(&h, Scheme::Https), Some("s3cret"));
        assert_eq!(read(&h, Scheme::Http), Some("plain"));
    }

    #[test]
    fn an_empty_cookie_is_none() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("baton_web="));
        assert_eq!(read(&h, Scheme::Http), None);
    }

    #[test]
    fn set_cookie_is_host_prefixed_and_secure_on_https_only() {
        assert_eq!(
            set("v", Scheme::Http),
            "baton_web=v; HttpOnly; SameSite=Strict; Path=/"
        );
        assert_eq!(
            set("v", Scheme::Https),
            "__Host-baton_web=v; HttpOnly; SameSite=Strict; Path=/; Secure"
        );
    }
}
