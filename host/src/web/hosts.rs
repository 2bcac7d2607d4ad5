//! Which `Host` headers the listener answers to, and the page's own origin for each: the
//! checks that stop DNS rebinding (a name the host never answered to) and cross-site WebSocket
//! hijacking (a page of another origin opening the socket). Pure: no I/O.

use std::fmt;
use std::net::SocketAddr;

use super::error::WebError;

/// The listener's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP (loopback unless explicitly allowed elsewhere).
    Http,
    /// HTTPS.
    Https,
}

impl Scheme {
    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }

    /// The port a browser leaves out of `Host` and `Origin` for this scheme.
    fn default_port(self) -> u16 {
        match self {
            Self::Http => 80,
            Self::Https => 443,
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `Host` values the listener answers to (lowercase, as browsers send them: without the
/// scheme's default port) and the base URLs links may name, preferred first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hosts {
    scheme: Scheme,
    allowed: Vec<String>,
    base_urls: Vec<String>,
}

impl Hosts {
    /// The hosts of a listener bound to `local`: each `--web-host NAME[:PORT]` (the bound port
    /// when none is given), the certificate's DNS names with the bound port, the bound address
    /// as `IP:PORT` unless it is unspecified (`0.0.0.0`, `::`), and `localhost:PORT` on
    /// loopback. Base URLs come in that order too.
    ///
    /// # Errors
    /// [`WebError::WebHost`] for a `--web-host` that is not a host name or address with an
    /// optional port.
    pub(crate) fn new(
        scheme: Scheme,
        local: SocketAddr,
        cert_names: &[String],
        web_hosts: &[String],
    ) -> Result<Self, WebError> {
        let mut hosts = Self {
            scheme,
            allowed: Vec::new(),
            base_urls: Vec::new(),
        };
        let port = local.port();
        for text in web_hosts {
            let (name, given) = parse_web_host(text)?;
            hosts.add(&name, given.unwrap_or(port), true);
        }
        for name in cert_names.iter().filter(|n| !n.starts_with('*')) {
            hosts.add(&name.to_ascii_lowercase(), port, true);
        }
        if !local.ip().is_unspecified() {
            let ip = match local {
                SocketAddr::V4(a) => a.ip().to_string(),
                SocketAddr::V6(a) => format!("[{}]", a.ip()),
            };
            hosts.add(&ip, port, true);
        }
        if local.ip().is_loopback() {
            hosts.add("localhost", port, false);
        }
        Ok(hosts)
    }

    fn add(&mut self, name: &str, port: u16, linkable: bool) {
        let authority = if port == self.scheme.default_port() {
            name.to_owned()
        } else {
            format!("{name}:{port}")
        };
        if self.allowed.contains(&authority) {
            return;
        }
        if linkable {
            self.base_urls
                .push(format!("{}://{authority}", self.scheme));
        }
        self.allowed.push(authority);
    }

    /// Whether a request's `Host` header names this listener (ASCII case ignored).
    pub(crate) fn allows(&self, host: &str) -> bool {
        self.allowed.iter().any(|a| a.eq_ignore_ascii_case(host))
    }

    /// Whether `origin` is exactly the page's own origin for the (allowed) `host`.
    pub(crate) fn is_own_origin(&self, host: &str, origin: &str) -> bool {
        origin
            .strip_prefix(self.scheme.as_str())
            .and_then(|rest| rest.strip_prefix("://"))
            .is_some_and(|authority| authority.eq_ignore_ascii_case(host))
    }

    /// Base URLs for links, preferred first.
    pub(crate) fn base_urls(&self) -> &[String] {
        &self.base_urls
    }

    /// The scheme.
    pub(crate) fn scheme(&self) -> Scheme {
        self.scheme
    }
}

/// Checks a `--web-host` the way [`WebListener::start`](super::WebListener::start) will, so a
/// command can refuse it before starting anything.
///
/// # Errors
/// [`WebError::WebHost`] for a value that is not `NAME[:PORT]`.
pub fn check_web_host(text: &str) -> Result<(), WebError> {
    parse_web_host(text).map(|_| ())
}

/// `NAME`, `NAME:PORT`, `IP:PORT` or `[IPV6]:PORT`, lowercased.
fn parse_web_host(text: &str) -> Result<(String, Option<u16>), WebError> {
    let bad = || WebError::WebHost(text.to_owned());
    let (name, port) = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or_else(bad)?;
        v6.parse::<std::net::Ipv6Addr>().map_err(|_| bad())?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse::<u16>().map_err(|_| bad())?),
            None if after.is_empty() => None,
            None => return Err(bad()),
        };
        (format!("[{v6}]"), port)
    } else {
        match text.rsplit_once(':') {
            Some((name, p)) => (name.to_owned(), Some(p.parse::<u16>().map_err(|_| bad())?)),
            None => (text.to_owned(), None),
        }
    };
    let plain = name.trim_start_matches('[').trim_end_matches(']');
    let valid = !plain.is_empty()
        && plain.len() <= 253
        && plain
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | ':'))
        && (name.starts_with('[') || !plain.contains(':'));
    if !valid || port == Some(0) {
        return Err(bad());
    }
    Ok((name.to_ascii_lowercase(), port))
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_answers_to_its_address_and_localhost_with_the_port() {
        let h = Hosts::new(Scheme::Http, addr("127.0.0.1:7880"), &[], &[]).unwrap();
        assert!(h.allows("127.0.0.1:7880"));
        assert!(h.allows("LOCALHOST:7880"));
        assert!(!h.allows("127.0.0.1"));
        assert!(!h.allows("localhost:7881"));
        assert!(!h.allows("evil.example:7880"));
        assert_eq!(h.base_urls(), ["http://127.0.0.1:7880"]);
    }

    #[test]
    fn web_hosts_come_first_and_default_ports_are_left_out() {
        let h = Hosts::new(
            Scheme::Https,
            addr("0.0.0.0:7880"),
            &["build-box.example".into(), "*.example".into()],
            &[
                "Proxy.Example:443".into(),
                "[::1]:9000".into(),
                "box".into(),
            ],
        )
        .unwrap();
        assert_eq!(
            h.base_urls(),
            [
                "https://proxy.example",
                "https://[::1]:9000",
                "https://box:7880",
                "https://build-box.example:7880"
            ]
        );
        assert!(h.allows("proxy.example"));
        assert!(!h.allows("proxy.example:443"));
        assert!(
            !h.allows("0.0.0.0:7880"),
            "an unspecified address is no host"
        );
        assert!(
            !h.allows("x.example:7880"),
            "wildcard names are not answered to"
        );
    }

    #[test]
    fn the_origin_must_be_the_scheme_and_the_same_host() {
        let h = Hosts::new(Scheme::Http, addr("127.0.0.1:7880"), &[], &[]).unwrap();
        assert!(h.is_own_origin("127.0.0.1:7880", "http://127.0.0.1:7880"));
        assert!(!h.is_own_origin("127.0.0.1:7880", "https://127.0.0.1:7880"));
        assert!(!h.is_own_origin("127.0.0.1:7880", "http://localhost:7880"));
        assert!(!h.is_own_origin("127.0.0.1:7880", "http://127.0.0.1:7880/"));
        assert!(!h.is_own_origin("127.0.0.1:7880", "null"));
    }

    #[test]
    fn malformed_web_hosts_are_refused() {
        for bad in [
            "", "a b", "a/b", "a:0", "a:x", "user@a", "[::1", "[zz]:1", "a:b:c",
        ] {
            assert!(parse_web_host(bad).is_err(), "{bad:?} should be refused");
        }
    }
}
