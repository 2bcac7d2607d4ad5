//! Who is on the other end of a connection, as established by the listener before any
//! protocol byte was read.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls_pki_types::CertificateDer;

/// The transport a connection arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// A Unix domain socket.
    Unix,
    /// Plain TCP.
    Tcp,
    /// TLS over TCP.
    Tls,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unix => "unix",
            Self::Tcp => "tcp",
            Self::Tls => "tls",
        })
    }
}

/// The authenticated identity of a peer, as far as its transport establishes one.
///
/// This is what reaches the host in every [`Context`](crate::Context): upstream passes a
/// placeholder instead. A host decides what each identity may do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerIdentity {
    /// A Unix-socket peer, identified by the kernel (`SO_PEERCRED`).
    Unix {
        /// Effective user id of the connecting process.
        uid: u32,
        /// Effective group id of the connecting process.
        gid: u32,
        /// Process id, where the platform reports it.
        pid: Option<i32>,
    },
    /// Plain TCP. Only the address is known; nothing is authenticated. `loopback` is true
    /// for 127.0.0.0/8 and ::1 (the only addresses plain TCP binds to without an opt-in).
    Tcp {
        /// The peer's address.
        addr: SocketAddr,
        /// True when the peer address is a loopback address.
        loopback: bool,
    },
    /// TLS. `client_certificate` is present when the client presented a certificate that
    /// verified against the configured client CA.
    Tls {
        /// The peer's address.
        addr: SocketAddr,
        /// The verified client certificate (mutual TLS).
        client_certificate: Option<Arc<ClientCertificate>>,
    },
}

impl fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix { uid, gid, pid } => {
                write!(f, "unix uid={uid} gid={gid}")?;
                if let Some(pid) = pid {
                    write!(f, " pid={pid}")?;
                }
                Ok(())
            }
            Self::Tcp { addr, .. } => write!(f, "tcp {addr}"),
            Self::Tls {
                addr,
                client_certificate: Some(cert),
            } => write!(f, "tls {addr} client=\"{}\"", cert.subject()),
            Self::Tls { addr, .. } => write!(f, "tls {addr}"),
        }
    }
}

/// A verified TLS client certificate.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    subject: String,
    sha256: [u8; 32],
    der: CertificateDer<'static>,
}

impl ClientCertificate {
    /// Describes an end-entity certificate (DER).
    pub fn from_der(der: CertificateDer<'static>) -> Self {
        let digest = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
        let mut sha256 = [0; 32];
        sha256.copy_from_slice(digest.as_ref());
        let subject = der::subject_string(der.as_ref()).unwrap_or_default();
        Self {
            subject,
            sha256,
            der,
        }
    }

    /// The subject distinguished name in RFC 4514 form (`CN=alice,O=Example`), or empty if
    /// it could not be read.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The common name (`CN`), if the subject has one.
    pub fn common_name(&self) -> Option<&str> {
        self.subject
            .split(',')
            .find_map(|rdn| rdn.strip_prefix("CN="))
    }

    /// SHA-256 of the DER certificate.
    pub fn sha256_fingerprint(&self) -> &[u8; 32] {
        &self.sha256
    }

    /// The fingerprint as lowercase hex, colon-free.
    pub fn sha256_fingerprint_hex(&self) -> String {
        self.sha256
            .iter()
            .fold(String::with_capacity(64), |mut s, b| {
                s.push(char::from(HEX[usize::from(b >> 4)]));
                s.push(char::from(HEX[usize::from(b & 0x0f)]));
                s
            })
    }

    /// The certificate itself.
    pub fn der(&self) -> &CertificateDer<'static> {
        &self.der
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Debug for ClientCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCertificate")
            .field("subject", &self.subject)
            .field("sha256", &self.sha256_fingerprint_hex())
            .finish_non_exhaustive()
    }
}

/// Just enough DER to read a certificate's subject name (the certificate was already
/// verified by rustls/webpki, so this only has to be correct, not defensive about semantics).
mod der {
    use std::fmt::Write as _;

    struct Tlv<'a> {
        tag: u8,
        body: &'a [u8],
        rest: &'a [u8],
    }

    fn tlv(input: &[u8]) -> Option<Tlv<'_>> {
        let (&tag, input) = input.split_first()?;
        let (&first, mut input) = input.split_first()?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 || input.len() < n {
                return None;
            }
            let (bytes, rest) = input.split_at(n);
            input = rest;
            bytes
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
        };
        if input.len() < len {
            return None;
        }
        let (body, rest) = input.split_at(len);
        Some(Tlv { tag, body, rest })
    }

    const SEQUENCE: u8 = 0x30;
    const SET: u8 = 0x31;
    const OID: u8 = 0x06;
    const CONTEXT_0: u8 = 0xa0;

    /// RFC 4514 string of the subject of a DER certificate.
    pub(super) fn subject_string(cert: &[u8]) -> Option<String> {
        let cert = tlv(cert)?;
        (cert.tag == SEQUENCE).then_some(())?;
        let tbs = tlv(cert.body)?;
        (tbs.tag == SEQUENCE).then_some(())?;
        let mut fields = tbs.body;
        let mut next = || -> Option<Tlv<'_>> {
            let t = tlv(fields)?;
            fields = t.rest;
            Some(t)
        };
        let mut item = next()?;
        if item.tag == CONTEXT_0 {
            item = next()?; // version, then serial
        }
        let _signature = next()?;
        let _issuer = next()?;
        let _validity = next()?;
        let subject = next()?;
        let _ = item;
        (subject.tag == SEQUENCE).then_some(())?;
        name_string(subject.body)
    }

    fn name_string(mut rdns: &[u8]) -> Option<String> {
        let mut parts = Vec::new();
        while !rdns.is_empty() {
            let set = tlv(rdns)?;
            rdns = set.rest;
            (set.tag == SET).then_some(())?;
            let mut atvs = set.body;
            let mut rdn = Vec::new();
            while !atvs.is_empty() {
                let atv = tlv(atvs)?;
                atvs = atv.rest;
                (atv.tag == SEQUENCE).then_some(())?;
                let oid = tlv(atv.body)?;
                (oid.tag == OID).then_some(())?;
                let value = tlv(oid.rest)?;
                rdn.push(format!(
                    "{}={}",
                    attribute_name(oid.body),
                    escape(value.body)
                ));
            }
            parts.push(rdn.join("+"));
        }
        // RFC 4514 lists the most specific RDN first.
        parts.reverse();
        Some(parts.join(","))
    }

    fn attribute_name(oid: &[u8]) -> String {
        match oid {
            [0x55, 0x04, 0x03] => "CN".into(),
            [0x55, 0x04, 0x06] => "C".into(),
            [0x55, 0x04, 0x07] => "L".into(),
            [0x55, 0x04, 0x08] => "ST".into(),
            [0x55, 0x04, 0x0a] => "O".into(),
            [0x55, 0x04, 0x0b] => "OU".into(),
            [0x55, 0x04, 0x05] => "serialNumber".into(),
            [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => "DC".into(),
            [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => "UID".into(),
            [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01] => "emailAddress".into(),
            other => dotted(other),
        }
    }

    fn dotted(oid: &[u8]) -> String {
        let mut arcs = Vec::new();
        let mut acc: u64 = 0;
        for &b in oid {
            acc = (acc << 7) | u64::from(b & 0x7f);
            if b & 0x80 == 0 {
                arcs.push(acc);
                acc = 0;
            }
        }
        let mut s = String::new();
        if let Some((&first, rest)) = arcs.split_first() {
            let (a, b) = match first {
                0..=39 => (0, first),
                40..=79 => (1, first - 40),
                _ => (2, first - 80),
            };
            let _ = write!(s, "{a}.{b}");
            for arc in rest {
                let _ = write!(s, ".{arc}");
            }
        }
        s
    }

    /// Renders a string value with RFC 4514 escaping; non-UTF-8 values as `#hex`.
    fn escape(value: &[u8]) -> String {
        let Ok(text) = std::str::from_utf8(value) else {
            return value.iter().fold(String::from("#"), |mut s, b| {
                let _ = write!(s, "{b:02x}");
                s
            });
        };
        let mut out = String::with_capacity(text.len());
        let last = text.chars().count().saturating_sub(1);
        for (i, c) in text.chars().enumerate() {
            let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=')
                || (i == 0 && matches!(c, ' ' | '#'))
                || (i == last && c == ' ');
            if special {
                out.push('\\');
            }
            if c.is_control() {
                let _ = write!(out, "\\{:02x}", u32::from(c));
            } else {
                out.push(c);
            }
        }
        out
    }
}
