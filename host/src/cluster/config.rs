//! What joining a fleet takes: etcd's endpoints, TLS to etcd, the lease's TTL, the endpoints
//! this host advertises and its labels; each checked with a one-line error.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

/// The lease's TTL unless configured (`--cluster-lease-secs`).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
/// The shortest TTL accepted: etcd does not honour TTLs much below its election timeout, and
/// a renewal every TTL/3 has to fit a round trip.
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(2);
/// The longest TTL accepted: a dead host would stay listed live for this long.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(3600);
/// etcd endpoints at most.
pub const MAX_ENDPOINTS: usize = 16;
/// Advertised endpoints at most.
pub const MAX_ADVERTISE: usize = 16;
/// Labels at most.
pub const MAX_LABELS: usize = 64;
/// Bytes of a label key at most.
pub const MAX_LABEL_KEY_BYTES: usize = 63;
/// Bytes of a label value, or of an endpoint URL, at most.
pub const MAX_VALUE_BYTES: usize = 255;

/// TLS to etcd: the CA that signed etcd's certificate, and this host's client certificate
/// when etcd asks for one (`--client-cert-auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTls {
    /// The CA bundle (PEM) etcd's server certificate must chain to.
    pub ca: PathBuf,
    /// This host's client certificate chain (PEM), with [`key`](Self::key).
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    pub key: Option<PathBuf>,
}

/// How this host joins a fleet. Build with [`ClusterConfig::new`], then check with
/// [`ClusterConfig::validate`] (the glue validates again before connecting).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// etcd's client URLs, `http://HOST:PORT` or (with [`tls`](Self::tls)) `https://HOST:PORT`.
    pub endpoints: Vec<String>,
    /// TLS to etcd; `None` for `http://` endpoints.
    pub tls: Option<ClusterTls>,
    /// The lease's TTL; renewed every third of it.
    pub lease_ttl: Duration,
    /// What clients dial to reach this host (`tls://NAME:PORT`, `tcp://…`, `unix:///DIR`).
    pub advertise: Vec<String>,
    /// `KEY=VALUE` labels placement will match on.
    pub labels: BTreeMap<String, String>,
}

/// Why a [`ClusterConfig`] cannot be used: one line each, naming the value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// No etcd endpoint.
    #[error("--cluster needs at least one etcd endpoint (http://HOST:PORT)")]
    NoEndpoints,
    /// Too many of something.
    #[error("too many {what}: at most {max}")]
    TooMany {
        /// What there are too many of.
        what: &'static str,
        /// The limit.
        max: usize,
    },
    /// An etcd endpoint that is not `http(s)://HOST:PORT`.
    #[error("etcd endpoint {0:?}: expected http://HOST:PORT or https://HOST:PORT")]
    BadEndpoint(String),
    /// `http://` and `https://` endpoints mixed.
    #[error("etcd endpoints mix http:// and https://")]
    MixedSchemes,
    /// `https://` endpoints without a CA.
    #[error("https:// etcd endpoints need --cluster-ca")]
    TlsWithoutCa,
    /// TLS files given for `http://` endpoints.
    #[error("--cluster-ca/--cluster-cert/--cluster-key need https:// etcd endpoints")]
    TlsWithPlainEndpoints,
    /// A client certificate without its key, or the other way round.
    #[error("--cluster-cert and --cluster-key go together")]
    HalfIdentity,
    /// A TTL outside [`MIN_LEASE_TTL`]..=[`MAX_LEASE_TTL`].
    #[error("lease TTL {secs} s: must be between {min} and {max} s", min = MIN_LEASE_TTL.as_secs(), max = MAX_LEASE_TTL.as_secs())]
    BadTtl {
        /// The TTL asked for, in whole seconds.
        secs: u64,
    },
    /// An advertised endpoint that is not `tls://`, `tcp://` or `unix://`.
    #[error("--advertise {0:?}: expected tls://HOST:PORT, tcp://HOST:PORT or unix:///PATH")]
    BadAdvertise(String),
    /// A label that is not `KEY=VALUE` with a usable key and value.
    #[error(
        "--label {0:?}: expected KEY=VALUE (key: 1-63 of A-Z a-z 0-9 . _ - /; value: at most 255 printable bytes)"
    )]
    BadLabel(String),
    /// The same label key twice.
    #[error("--label {0:?} is given twice")]
    DuplicateLabel(String),
}

impl ClusterConfig {
    /// A configuration for `endpoints` with the default TTL, no TLS, nothing advertised (the
    /// caller fills in its listen addresses) and no labels.
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            tls: None,
            lease_ttl: DEFAULT_LEASE_TTL,
            advertise: Vec::new(),
            labels: BTreeMap::new(),
        }
    }

    /// Adds the label `KEY=VALUE` from `text`.
    ///
    /// # Errors
    /// [`ConfigError::BadLabel`], [`ConfigError::DuplicateLabel`], or too many labels.
    pub fn add_label(&mut self, text: &str) -> Result<(), ConfigError> {
        let (key, value) = parse_label(text)?;
        if self.labels.contains_key(&key) {
            return Err(ConfigError::DuplicateLabel(key));
        }
        if self.labels.len() >= MAX_LABELS {
            return Err(ConfigError::TooMany {
                what: "labels",
                max: MAX_LABELS,
            });
        }
        self.labels.insert(key, value);
        Ok(())
    }

    /// Checks every field; the first problem found.
    ///
    /// # Errors
    /// The first [`ConfigError`] that applies.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.endpoints.is_empty() {
            return Err(ConfigError::NoEndpoints);
        }
        if self.endpoints.len() > MAX_ENDPOINTS {
            return Err(ConfigError::TooMany {
                what: "etcd endpoints",
                max: MAX_ENDPOINTS,
            });
        }
        let mut secure = None;
        for url in &self.endpoints {
            let is_tls = check_endpoint(url)?;
            if *secure.get_or_insert(is_tls) != is_tls {
                return Err(ConfigError::MixedSchemes);
            }
        }
        match (&self.tls, secure) {
            (None, Some(true)) => return Err(ConfigError::TlsWithoutCa),
            (Some(_), Some(false)) => return Err(ConfigError::TlsWithPlainEndpoints),
            (Some(tls), _) if tls.cert.is_some() != tls.key.is_some() => {
                return Err(ConfigError::HalfIdentity);
            }
            _ => {}
        }
        if !(MIN_LEASE_TTL..=MAX_LEASE_TTL).contains(&self.lease_ttl)
            || self.lease_ttl.subsec_nanos() != 0
        {
            return Err(ConfigError::BadTtl {
                secs: self.lease_ttl.as_secs(),
            });
        }
        if self.advertise.len() > MAX_ADVERTISE {
            return Err(ConfigError::TooMany {
                what: "advertised endpoints",
                max: MAX_ADVERTISE,
            });
        }
        for url in &self.advertise {
            check_advertise(url)?;
        }
        if self.labels.len() > MAX_LABELS {
            return Err(ConfigError::TooMany {
                what: "labels",
                max: MAX_LABELS,
            });
        }
        for (key, value) in &self.labels {
            if !label_key_ok(key) || !label_value_ok(value) {
                return Err(ConfigError::BadLabel(format!("{key}={value}")));
            }
        }
        Ok(())
    }
}

/// Splits `KEY=VALUE` and checks both halves.
///
/// # Errors
/// [`ConfigError::BadLabel`].
pub fn parse_label(text: &str) -> Result<(String, String), ConfigError> {
    match text.split_once('=') {
        Some((key, value)) if label_key_ok(key) && label_value_ok(value) => {
            Ok((key.to_owned(), value.to_owned()))
        }
        _ => Err(ConfigError::BadLabel(text.to_owned())),
    }
}

/// Splits a comma-separated endpoint list (`--cluster URL[,URL…]`), dropping empty items.
pub fn split_endpoints(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn label_key_ok(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_LABEL_KEY_BYTES
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
}

fn label_value_ok(value: &str) -> bool {
    value.len() <= MAX_VALUE_BYTES && !value.chars().any(char::is_control)
}

/// Whether `url` is `https://` (else `http://`), once it is known to be `SCHEME://HOST:PORT`.
fn check_endpoint(url: &str) -> Result<bool, ConfigError> {
    let bad = || ConfigError::BadEndpoint(url.to_owned());
    let (is_tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err(bad());
    };
    if url.len() > MAX_VALUE_BYTES {
        return Err(bad());
    }
    host_port(rest.strip_suffix('/').unwrap_or(rest)).ok_or_else(bad)?;
    Ok(is_tls)
}

fn check_advertise(url: &str) -> Result<(), ConfigError> {
    let bad = || ConfigError::BadAdvertise(url.to_owned());
    if url.len() > MAX_VALUE_BYTES || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad());
    }
    if let Some(path) = url.strip_prefix("unix://") {
        return if path.starts_with('/') {
            Ok(())
        } else {
            Err(bad())
        };
    }
    let rest = url
        .strip_prefix("tls://")
        .or_else(|| url.strip_prefix("tcp://"))
        .ok_or_else(bad)?;
    host_port(rest).map(|_| ()).ok_or_else(bad)
}

/// `HOST:PORT` or `[V6]:PORT` with a non-empty host, no path, and a port from 1.
fn host_port(text: &str) -> Option<(&str, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    let ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => !v6.is_empty() && v6.chars().all(|c| c.is_ascii_hexdigit() || c == ':'),
        None => !host.is_empty() && host.chars().all(plain),
    };
    ok.then_some((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ClusterConfig {
        ClusterConfig::new(vec!["http://127.0.0.1:2379".into()])
    }

    #[test]
    fn the_defaults_are_valid_with_a_ten_second_lease() {
        let c = config();
        assert_eq!(c.lease_ttl, Duration::from_secs(10));
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn endpoints_must_be_http_urls_with_a_port() {
        for bad in [
            "127.0.0.1:2379",
            "http://",
            "http://host",
            "http://host:0",
            "http://a b:1",
            "grpc://h:1",
            "http://h:1/path",
        ] {
            let mut c = config();
            c.endpoints = vec![bad.into()];
            assert_eq!(
                c.validate(),
                Err(ConfigError::BadEndpoint(bad.into())),
                "{bad}"
            );
        }
        let mut c = config();
        c.endpoints = vec![
            "http://[::1]:2379/".into(),
            "http://etcd-1.example:2379".into(),
        ];
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn no_endpoint_is_refused() {
        let mut c = config();
        c.endpoints.clear();
        assert_eq!(c.validate(), Err(ConfigError::NoEndpoints));
        assert!(split_endpoints(" , ").is_empty());
        assert_eq!(
            split_endpoints("http://a:1, http://b:2"),
            ["http://a:1", "http://b:2"]
        );
    }

    #[test]
    fn https_needs_a_ca_and_plain_http_takes_no_tls_files() {
        let mut c = config();
        c.endpoints = vec!["https://127.0.0.1:2379".into()];
        assert_eq!(c.validate(), Err(ConfigError::TlsWithoutCa));
        c.endpoints.push("http://127.0.0.1:2380".into());
        assert_eq!(c.validate(), Err(ConfigError::MixedSchemes));
        let mut c = config();
        c.tls = Some(ClusterTls {
            ca: "ca.pem".into(),
            cert: None,
            key: None,
        });
        assert_eq!(c.validate(), Err(ConfigError::TlsWithPlainEndpoints));
        c.endpoints = vec!["https://127.0.0.1:2379".into()];
        assert_eq!(c.validate(), Ok(()));
        c.tls = Some(ClusterTls {
            ca: "ca.pem".into(),
            cert: Some("c.pem".into()),
            key: None,
        });
        assert_eq!(c.validate(), Err(ConfigError::HalfIdentity));
    }

    #[test]
    fn a_ttl_under_two_seconds_is_refused() {
        let mut c = config();
        c.lease_ttl = Duration::from_secs(1);
        assert_eq!(c.validate(), Err(ConfigError::BadTtl { secs: 1 }));
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "lease TTL 1 s: must be between 2 and 3600 s"
        );
        c.lease_ttl = Duration::from_secs(2);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn advertised_endpoints_are_dialable_urls() {
        let mut c = config();
        c.advertise = vec![
            "tls://build-box-2.example:7879".into(),
            "tcp://127.0.0.1:1".into(),
            "unix:///run/baton".into(),
        ];
        assert_eq!(c.validate(), Ok(()));
        for bad in [
            "build-box:7879",
            "tls://:7879",
            "unix://relative",
            "tls://h:7879 x",
            "http://h:1",
        ] {
            c.advertise = vec![bad.into()];
            assert_eq!(
                c.validate(),
                Err(ConfigError::BadAdvertise(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_duplicate_label_key_is_refused_with_its_name() {
        let mut c = config();
        c.add_label("gpu=a100").unwrap();
        c.add_label("zone=eu-1").unwrap();
        let err = c.add_label("gpu=h100").unwrap_err();
        assert_eq!(err, ConfigError::DuplicateLabel("gpu".into()));
        assert_eq!(err.to_string(), "--label \"gpu\" is given twice");
        assert_eq!(c.labels.get("gpu").map(String::as_str), Some("a100"));
    }

    #[test]
    fn labels_need_a_key_an_equals_sign_and_a_printable_value() {
        for bad in [
            "gpu",
            "=x",
            "a b=c",
            "k=\u{7}",
            &format!("{}=v", "k".repeat(64)),
        ] {
            assert!(
                matches!(parse_label(bad), Err(ConfigError::BadLabel(_))),
                "{bad}"
            );
        }
        assert_eq!(
            parse_label("team/os=linux=6").unwrap(),
            ("team/os".into(), "linux=6".into())
        );
        assert_eq!(
            parse_label("empty=").unwrap(),
            ("empty".into(), String::new())
        );
    }
}
