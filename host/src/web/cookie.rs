//! The `baton_web` cookie: reading it from `Cookie`, writing `Set-Cookie`.

use hyper::header::{self, HeaderMap};

use super::hosts::Scheme;

/// The cookie's name.
pub const COOKIE_NAME: &str = "baton_web";

/// The `baton_web` value of the request's `Cookie` headers, if any (the first, if several).
pub(crate) fn read(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value.trim_matches('"'))
        .filter(|value| !value.is_empty())
}

/// `Set-Cookie` for `value`: script cannot read it, no other site's request carries it, the
/// whole page gets it; `Secure` on https.
pub(crate) fn set(value: &str, scheme: Scheme) -> String {
    let secure = if scheme == Scheme::Https {
        "; Secure"
    } else {
        ""
    };
    format!("{COOKIE_NAME}={value}; HttpOnly; SameSite=Strict; Path=/{secure}")
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
        assert_eq!(read(&h), None);
        h.append(
            header::COOKIE,
            HeaderValue::from_static("b=3;  baton_web=s3cret ; c=4"),
        );
        assert_eq!(read(&h), Some("s3cret"));
    }

    #[test]
    fn an_empty_cookie_is_none() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("baton_web="));
        assert_eq!(read(&h), None);
    }

    #[test]
    fn set_cookie_is_secure_on_https_only() {
        assert_eq!(
            set("v", Scheme::Http),
            "baton_web=v; HttpOnly; SameSite=Strict; Path=/"
        );
        assert_eq!(
            set("v", Scheme::Https),
            "baton_web=v; HttpOnly; SameSite=Strict; Path=/; Secure"
        );
    }
}
