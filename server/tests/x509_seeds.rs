//! Replays the committed `fuzz/seeds/x509_identity/` certificates through
//! `baton_server::fuzzing::x509_identity` on stable `cargo test` (the cargo-fuzz target runs
//! the same body). The seeds are real certificates rcgen made (keys are random, so they are
//! committed rather than regenerated on every run). Regenerate (overwrites those files):
//!
//! ```sh
//! cargo test -p baton-server --test x509_seeds -- --ignored regenerate_seeds
//! ```
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use baton_server::ClientCertificate;
use rcgen::{BasicConstraints, CertificateParams, DnType, DnValue, IsCa, Issuer, KeyPair, SanType};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/x509_identity")
}

fn every_san_kind() -> CertificateParams {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, "agent");
    p.distinguished_name
        .push(DnType::OrganizationName, "Baton Tests");
    p.subject_alt_names = vec![
        SanType::URI("spiffe://baton.test/agent".try_into().unwrap()),
        SanType::DnsName("agent.baton.test".try_into().unwrap()),
        SanType::Rfc822Name("ops@baton.test".try_into().unwrap()),
        SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7))),
        SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST)),
    ];
    p
}

/// Name → DER of every seed.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let key = KeyPair::generate().unwrap();
    let mut out = Vec::new();
    out.push((
        "every-san-kind.der",
        every_san_kind().self_signed(&key).unwrap().der().to_vec(),
    ));

    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, "bob");
    out.push(("cn-only.der", p.self_signed(&key).unwrap().der().to_vec()));

    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CountryName, "NL");
    p.distinguished_name
        .push(DnType::OrganizationName, "Example");
    p.distinguished_name
        .push(DnType::OrganizationalUnitName, "ops");
    p.distinguished_name
        .push(DnType::CommonName, " #Doe, Jane+ops\\ ");
    p.distinguished_name.push(
        DnType::CustomDnType(vec![1, 3, 6, 1, 4, 1, 99999, 1]),
        DnValue::BmpString("Zoë".try_into().unwrap()),
    );
    out.push((
        "rdn-specials-bmp.der",
        p.self_signed(&key).unwrap().der().to_vec(),
    ));

    // A leaf issued by a CA, as mutual TLS presents it.
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(DnType::CommonName, "Baton Test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let issuer = Issuer::new(ca, ca_key);
    let leaf = every_san_kind().signed_by(&key, &issuer).unwrap();
    out.push(("ca-issued-leaf.der", leaf.der().to_vec()));

    let mut p = CertificateParams::new(vec!["only.dns.example".to_owned()]).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    out.push((
        "empty-subject-dns-san.der",
        p.self_signed(&key).unwrap().der().to_vec(),
    ));
    out
}

#[test]
fn seeds_replay() {
    let mut n = 0;
    for entry in std::fs::read_dir(dir()).expect("fuzz/seeds/x509_identity exists") {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        baton_server::fuzzing::x509_identity(&bytes);
        n += 1;
    }
    assert!(n >= 5, "{n} seeds");
}

#[test]
fn the_committed_every_san_kind_seed_reads_back() {
    let der = std::fs::read(dir().join("every-san-kind.der")).unwrap();
    let cert = ClientCertificate::from_der(der.into());
    assert_eq!(cert.common_name(), Some("agent"));
    assert_eq!(cert.subject(), "O=Baton Tests,CN=agent");
    assert_eq!(
        cert.uris().collect::<Vec<_>>(),
        ["spiffe://baton.test/agent"]
    );
    assert_eq!(cert.dns_names().collect::<Vec<_>>(), ["agent.baton.test"]);
    assert_eq!(cert.emails().collect::<Vec<_>>(), ["ops@baton.test"]);
    assert_eq!(cert.ip_addresses().count(), 2);
}

#[test]
fn freshly_generated_certificates_pass_the_body() {
    for (_, der) in seeds() {
        baton_server::fuzzing::x509_identity(&der);
    }
}

/// Every cut of a real certificate, and garbage DER, give an empty identity and pass the
/// fuzz body's checks: never a panic.
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
        baton_server::fuzzing::x509_identity(&der[..cut]);
    }
    let cert = ClientCertificate::from_der(vec![0x30, 0x84, 0xff, 0xff, 0xff, 0xff].into());
    assert_eq!(cert.subject(), "");
    assert_eq!(cert.common_name(), None);
}

#[test]
#[ignore = "writes fuzz/seeds/x509_identity; run by hand"]
fn regenerate_seeds() {
    std::fs::create_dir_all(dir()).unwrap();
    for (name, der) in seeds() {
        std::fs::write(dir().join(name), der).unwrap();
    }
}
