//! Where to connect: `unix:///path`, `tcp://host:port` or `tls://host:port`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A server address in URL form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix domain socket path.
    Unix(PathBuf),
    /// Plain TCP to `host:port`.
    Tcp {
        /// Host name or address.
        host: String,
        /// Port.
        port: u16,
    },
    /// TLS over TCP to `host:port`; the host name is also the name verified in the certificate.
    Tls {
        /// Host name or address.
        host: String,
        /// Port.
        port: u16,
    },
}

/// A string that is not an endpoint URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid endpoint {input:?}: {reason} (expected unix:///path, tcp://host:port or tls://host:port)"
)]
pub struct EndpointError {
    input: String,
    reason: &'static str,
}

fn host_port(input: &str, rest: &str) -> Result<(String, u16), EndpointError> {
    let err = |reason| EndpointError {
        input: input.to_owned(),
        reason,
    };
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| err("missing port"))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(err("missing host"));
    }
    let port = port.parse::<u16>().map_err(|_| err("invalid port"))?;
    Ok((host.to_owned(), port))
}

impl FromStr for Endpoint {
    type Err = EndpointError;

    fn from_str(input: &str) -> Result<Self, EndpointError> {
        if let Some(path) = input.strip_prefix("unix://") {
            if path.is_empty() {
                return Err(EndpointError {
                    input: input.to_owned(),
                    reason: "missing socket path",
                });
            }
            return Ok(Self::Unix(PathBuf::from(path)));
        }
        if let Some(rest) = input.strip_prefix("tcp://") {
            let (host, port) = host_port(input, rest.trim_end_matches('/'))?;
            return Ok(Self::Tcp { host, port });
        }
        if let Some(rest) = input.strip_prefix("tls://") {
            let (host, port) = host_port(input, rest.trim_end_matches('/'))?;
            return Ok(Self::Tls { host, port });
        }
        Err(EndpointError {
            input: input.to_owned(),
            reason: "unknown scheme",
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bracket = |h: &str| {
            if h.contains(':') {
                format!("[{h}]")
            } else {
                h.to_owned()
            }
        };
        match self {
            Self::Unix(p) => write!(f, "unix://{}", p.display()),
            Self::Tcp { host, port } => write!(f, "tcp://{}:{port}", bracket(host)),
            Self::Tls { host, port } => write!(f, "tls://{}:{port}", bracket(host)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_scheme_and_prints_it_back() {
        for s in [
            "unix:///run/baton/x.sock",
            "tcp://127.0.0.1:7878",
            "tls://example.org:7879",
            "tcp://[::1]:9",
        ] {
            let e: Endpoint = s.parse().unwrap();
            assert_eq!(e.to_string(), s);
        }
        assert_eq!(
            "tcp://[::1]:9".parse::<Endpoint>().unwrap(),
            Endpoint::Tcp {
                host: "::1".into(),
                port: 9
            }
        );
    }

    #[test]
    fn rejects_unknown_schemes_and_missing_parts() {
        for s in [
            "http://x:1",
            "tcp://x",
            "tcp://:1",
            "tls://x:port",
            "unix://",
            "x",
        ] {
            assert!(s.parse::<Endpoint>().is_err(), "{s}");
        }
    }
}
