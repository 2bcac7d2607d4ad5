//! Who is on the other end of a connection, as established by the listener before any
//! protocol byte was read.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
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
    common_name: Option<String>,
    alt_names: Vec<SubjectAltName>,
    sha256: [u8; 32],
    der: CertificateDer<'static>,
}

/// One subject alternative name of a client certificate: how service meshes (SPIFFE URIs),
/// device fleets (DNS names) and people (e-mail) are usually named in mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SubjectAltName {
    /// `dNSName`.
    Dns(String),
    /// `uniformResourceIdentifier`, e.g. `spiffe://example.org/agent`.
    Uri(String),
    /// `rfc822Name`.
    Email(String),
    /// `iPAddress`.
    Ip(IpAddr),
}

impl fmt::Display for SubjectAltName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dns(name) => write!(f, "DNS:{name}"),
            Self::Uri(uri) => write!(f, "URI:{uri}"),
            Self::Email(email) => write!(f, "email:{email}"),
            Self::Ip(ip) => write!(f, "IP:{ip}"),
        }
    }
}

impl ClientCertificate {
    /// Describes an end-entity certificate (DER).
    pub fn from_der(der: CertificateDer<'static>) -> Self {
        let digest = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
        let mut sha256 = [0; 32];
        sha256.copy_from_slice(digest.as_ref());
        let parsed = der::parse(der.as_ref()).unwrap_or_default();
        Self {
            subject: parsed.subject,
            common_name: parsed.common_name,
            alt_names: parsed.alt_names,
            sha256,
            der,
        }
    }

    /// The subject distinguished name in RFC 4514 form (`CN=alice,O=Example`), or empty if
    /// it could not be read.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The common name (`CN`), unescaped, if the subject has one (the most specific one if
    /// it has several).
    pub fn common_name(&self) -> Option<&str> {
        self.common_name.as_deref()
    }

    /// The subject alternative names (DNS, URI, e-mail, IP; other kinds are skipped), in
    /// certificate order.
    pub fn subject_alt_names(&self) -> &[SubjectAltName] {
        &self.alt_names
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
            .field("alt_names", &self.alt_names)
            .field("sha256", &self.sha256_fingerprint_hex())
            .finish_non_exhaustive()
    }
}

/// Just enough DER to read a certificate's subject name and alternative names. The
/// certificate was already verified by rustls/webpki; every read is still bounds-checked, and
/// anything unexpected yields `None` (an empty subject), never a panic.
mod der {
    use std::fmt::Write as _;
    use std::net::IpAddr;

    use super::SubjectAltName;

    /// What [`parse`] reads.
    #[derive(Debug, Default)]
    pub(super) struct Parsed {
        pub(super) subject: String,
        pub(super) common_name: Option<String>,
        pub(super) alt_names: Vec<SubjectAltName>,
    }

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
    const CONTEXT_3: u8 = 0xa3;
    const BOOLEAN: u8 = 0x01;
    const OCTET_STRING: u8 = 0x04;
    const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11]; // 2.5.29.17
    const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03]; // 2.5.4.3

    /// The subject (RFC 4514), its common name and the subject alternative names.
    pub(super) fn parse(cert: &[u8]) -> Option<Parsed> {
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
        let (subject, common_name) = name_string(subject.body)?;
        let _public_key = next()?;
        // Optional issuer/subject unique ids ([1], [2]), then extensions ([3]).
        let mut alt_names = Vec::new();
        while let Some(field) = next() {
            if field.tag == CONTEXT_3 {
                // A malformed extension costs the alternative names, not the subject.
                alt_names = subject_alt_names(field.body).unwrap_or_default();
            }
        }
        Some(Parsed {
            subject,
            common_name,
            alt_names,
        })
    }

    /// The names in the subjectAltName extension of `[3] { SEQUENCE OF Extension }`.
    fn subject_alt_names(explicit: &[u8]) -> Option<Vec<SubjectAltName>> {
        let extensions = tlv(explicit)?;
        (extensions.tag == SEQUENCE).then_some(())?;
        let mut rest = extensions.body;
        while !rest.is_empty() {
            let extension = tlv(rest)?;
            rest = extension.rest;
            (extension.tag == SEQUENCE).then_some(())?;
            let oid = tlv(extension.body)?;
            (oid.tag == OID).then_some(())?;
            if oid.body != SUBJECT_ALT_NAME {
                continue;
            }
            let mut value = tlv(oid.rest)?;
            if value.tag == BOOLEAN {
                value = tlv(value.rest)?; // `critical`
            }
            (value.tag == OCTET_STRING).then_some(())?;
            let names = tlv(value.body)?;
            (names.tag == SEQUENCE).then_some(())?;
            return Some(general_names(names.body));
        }
        Some(Vec::new())
    }

    fn general_names(mut names: &[u8]) -> Vec<SubjectAltName> {
        let mut out = Vec::new();
        while let Some(name) = tlv(names) {
            names = name.rest;
            let text = || std::str::from_utf8(name.body).ok().map(str::to_owned);
            let parsed = match name.tag {
                0x81 => text().map(SubjectAltName::Email),
                0x82 => text().map(SubjectAltName::Dns),
                0x86 => text().map(SubjectAltName::Uri),
                0x87 => match name.body.len() {
                    4 => <[u8; 4]>::try_from(name.body)
                        .ok()
                        .map(|b| SubjectAltName::Ip(IpAddr::from(b))),
                    16 => <[u8; 16]>::try_from(name.body)
                        .ok()
                        .map(|b| SubjectAltName::Ip(IpAddr::from(b))),
                    _ => None,
                },
                _ => None, // otherName, directoryName, …: not names a host matches on
            };
            out.extend(parsed);
        }
        out
    }

    fn name_string(mut rdns: &[u8]) -> Option<(String, Option<String>)> {
        let mut common_name = None;
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
                if oid.body == COMMON_NAME {
                    // Later RDNs are more specific (RFC 4514 lists them first).
                    common_name = Some(String::from_utf8_lossy(value.body).into_owned());
                }
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
        Some((parts.join(","), common_name))
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

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    use super::{ClientCertificate, SubjectAltName};

    fn certificate(params: CertificateParams) -> ClientCertificate {
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        ClientCertificate::from_der(cert.der().clone())
    }

    #[test]
    fn alternative_names_of_every_supported_kind_are_read_in_order() {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "agent");
        params.subject_alt_names = vec![
            SanType::URI("spiffe://example.org/agent".try_into().unwrap()),
            SanType::DnsName("agent.example.org".try_into().unwrap()),
            SanType::Rfc822Name("ops@example.org".try_into().unwrap()),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7))),
            SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        ];
        let cert = certificate(params);
        assert_eq!(
            cert.subject_alt_names(),
            [
                SubjectAltName::Uri("spiffe://example.org/agent".into()),
                SubjectAltName::Dns("agent.example.org".into()),
                SubjectAltName::Email("ops@example.org".into()),
                SubjectAltName::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7))),
                SubjectAltName::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            ]
        );
        assert_eq!(cert.common_name(), Some("agent"));
        assert_eq!(
            cert.subject_alt_names()[0].to_string(),
            "URI:spiffe://example.org/agent"
        );
    }

    #[test]
    fn a_certificate_without_alternative_names_has_none() {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "bob");
        let cert = certificate(params);
        assert!(cert.subject_alt_names().is_empty());
        assert_eq!(cert.subject(), "CN=bob");
    }

    #[test]
    fn a_common_name_with_rfc4514_specials_comes_back_unescaped() {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Example");
        params
            .distinguished_name
            .push(DnType::CommonName, "Doe, Jane+ops");
        let cert = certificate(params);
        // rcgen writes CN before O, so O is the most specific RDN here.
        assert_eq!(cert.subject(), "O=Example,CN=Doe\\, Jane\\+ops");
        assert_eq!(cert.common_name(), Some("Doe, Jane+ops"));
    }

    #[test]
    fn truncated_or_garbage_der_yields_an_empty_identity_not_a_panic() {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "carol");
        params.subject_alt_names = vec![SanType::DnsName("carol.example".try_into().unwrap())];
        let key = KeyPair::generate().unwrap();
        let der = params.self_signed(&key).unwrap().der().to_vec();
        for cut in 0..der.len() {
            let cert = ClientCertificate::from_der(der[..cut].to_vec().into());
            assert!(cert.subject_alt_names().len() <= 1);
        }
        let cert = ClientCertificate::from_der(vec![0x30, 0x84, 0xff, 0xff, 0xff, 0xff].into());
        assert_eq!(cert.subject(), "");
        assert_eq!(cert.common_name(), None);
    }
}
