//! What a client certificate names, read with `x509-parser`.
//!
//! The certificate was already verified by rustls/webpki before this runs; the parse is still
//! treated as hostile input: anything `x509-parser` refuses yields an empty subject, no common
//! name and no alternative names (the fingerprint is computed by the caller either way), never
//! a panic. A malformed or duplicated subjectAltName extension costs the alternative names,
//! not the subject.
//!
//! Only the rendering of the subject in RFC 4514 form is our own code: `x509-parser`'s
//! `Display` for names lists RDNs in certificate order without escaping.

use std::fmt::Write as _;
use std::net::IpAddr;

use x509_parser::asn1_rs::{Any, Tag, ToDer};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;
use x509_parser::x509::{AttributeTypeAndValue, X509Name};

use super::subject_alt_name::SubjectAltName;

/// The names a certificate carries.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    /// RFC 4514 subject, empty if the certificate did not parse.
    pub(crate) subject: String,
    /// The most specific `CN`, unescaped.
    pub(crate) common_name: Option<String>,
    /// DNS, IP, e-mail and URI alternative names, in certificate order.
    pub(crate) alt_names: Vec<SubjectAltName>,
}

/// Reads the subject and alternative names of a DER certificate.
pub(crate) fn names(der: &[u8]) -> Names {
    let Ok((_rest, cert)) = X509Certificate::from_der(der) else {
        return Names::default();
    };
    let subject = cert.subject();
    Names {
        subject: rfc4514(subject),
        common_name: subject
            .iter_common_name()
            .last()
            .map(|cn| text(cn.attr_value()).unwrap_or_else(|| hex_der(cn.attr_value()))),
        alt_names: alt_names(&cert),
    }
}

fn alt_names(cert: &X509Certificate<'_>) -> Vec<SubjectAltName> {
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some(SubjectAltName::Dns((*dns).to_owned())),
            GeneralName::RFC822Name(email) => Some(SubjectAltName::Email((*email).to_owned())),
            GeneralName::URI(uri) => Some(SubjectAltName::Uri((*uri).to_owned())),
            GeneralName::IPAddress(bytes) => ip(bytes).map(SubjectAltName::Ip),
            // otherName, directoryName, registeredID, …: not names a host matches on.
            _ => None,
        })
        .collect()
}

fn ip(bytes: &[u8]) -> Option<IpAddr> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Some(IpAddr::from(v4));
    }
    <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from)
}

/// RFC 4514: most specific RDN first, `,` between RDNs, `+` inside one, values escaped.
fn rfc4514(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter_rdn()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+"))
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

fn attribute(atv: &AttributeTypeAndValue<'_>) -> String {
    let oid = atv.attr_type().to_id_string();
    let value = atv.attr_value();
    let rendered = match text(value) {
        Some(t) => escape(&t),
        None => hex_der(value),
    };
    format!("{}={rendered}", attribute_name(&oid).unwrap_or(&oid))
}

/// The short names RFC 4514 §3 lists, plus the ones certificates commonly carry.
fn attribute_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.5" => "serialNumber",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        "1.2.840.113549.1.9.1" => "emailAddress",
        _ => return None,
    })
}

/// The value as text, for the string types a name uses; `None` for anything else (or text
/// that is not valid in its encoding).
fn text(value: &Any<'_>) -> Option<String> {
    let data = value.data;
    match value.tag() {
        Tag::Utf8String
        | Tag::PrintableString
        | Tag::Ia5String
        | Tag::NumericString
        | Tag::VisibleString
        | Tag::T61String => std::str::from_utf8(data).ok().map(str::to_owned),
        Tag::BmpString => {
            if !data.len().is_multiple_of(2) {
                return None;
            }
            let units = data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]));
            char::decode_utf16(units)
                .collect::<Result<String, _>>()
                .ok()
        }
        Tag::UniversalString => {
            if !data.len().is_multiple_of(4) {
                return None;
            }
            data.chunks_exact(4)
                .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
                .collect()
        }
        _ => None,
    }
}

/// RFC 4514 §2.4: a value that is not a string is `#` and the hex of its DER encoding.
fn hex_der(value: &Any<'_>) -> String {
    let der = value.to_der_vec().unwrap_or_else(|_| value.data.to_vec());
    der.iter().fold(String::from("#"), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// RFC 4514 §2.4 escaping of a string value.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let last = text.chars().count().saturating_sub(1);
    for (i, c) in text.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=')
            || (i == 0 && matches!(c, ' ' | '#'))
            || (i == last && c == ' ');
        if c == '\0' {
            out.push_str("\\00");
            continue;
        }
        if special {
            out.push('\\');
        }
        if c.is_control() {
            let mut utf8 = [0u8; 4];
            for b in c.encode_utf8(&mut utf8).bytes() {
                let _ = write!(out, "\\{b:02x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Inverse of [`escape`], for the fuzz oracle: `None` if `escaped` is not well-formed.
pub(crate) fn unescape(escaped: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(escaped.len());
    let mut rest = escaped.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        let (&first, tail) = rest.split_first()?;
        rest = tail;
        if first.is_ascii_hexdigit() {
            let (&second, tail) = rest.split_first()?;
            rest = tail;
            let pair = [first, second];
            let hex = std::str::from_utf8(&pair).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
        } else {
            bytes.push(first);
        }
    }
    String::from_utf8(bytes).ok()
}
