//! `baton-host certs`: a small PKI for mutual TLS.
//!
//! `certs --out DIR [--san NAME]…` writes a CA (`ca.pem`, and its key `ca.key`, kept so more
//! client certificates can be issued), a server certificate (`server.pem`, `server.key`) for
//! the `--san` names (`localhost`, `127.0.0.1` and `::1` without any), and a first client
//! certificate (`client.pem`, `client.key`). `certs --out DIR --client NAME` signs one more client
//! certificate (`NAME.pem`, `NAME.key`, subject CN = NAME) with the CA in DIR and prints its
//! SHA-256 fingerprint, the form the server reports for a verified client certificate.
//!
//! Keys are written mode 0600, certificates 0644, a created DIR 0700; no file is ever
//! overwritten.

use std::fmt;
use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData, SanType,
};

use crate::Failure;

/// The CA's subject. Issuing (`--client`) rebuilds the issuer from this and `ca.key`, so
/// changing it would stop older PKIs from issuing.
const CA_COMMON_NAME: &str = "baton development CA";

/// Longest accepted `--client` name.
const MAX_CLIENT_NAME: usize = 64;

/// What `certs` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CertsArgs {
    /// A new PKI in `out`; the server certificate also names `sans`.
    Create { out: PathBuf, sans: Vec<San> },
    /// One more client certificate from the CA in `out`.
    Issue { out: PathBuf, client: ClientName },
}

/// A subject alternative name for the server certificate: an IP address when the text
/// parses as one, else a DNS name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum San {
    Dns(String),
    Ip(IpAddr),
}

impl San {
    /// Parses `--san` text.
    ///
    /// # Errors
    /// A one-line reason when the text is neither an IP address nor a DNS name.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Self::Ip(ip));
        }
        let bad = |why: &str| format!("--san {text:?} is not an IP address or a DNS name ({why})");
        let name = text.strip_suffix('.').unwrap_or(text);
        if name.is_empty() || name.len() > 253 {
            return Err(bad("1 to 253 characters"));
        }
        for (i, label) in name.split('.').enumerate() {
            // A wildcard is only a whole leftmost label (`*.example.org`), as TLS matches it.
            if i == 0 && label == "*" && name.contains('.') {
                continue;
            }
            if label.is_empty() || label.len() > 63 {
                return Err(bad("each dot-separated label is 1 to 63 characters"));
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(bad("letters, digits, '-' and '_' only"));
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err(bad("a label cannot start or end with '-'"));
            }
        }
        Ok(Self::Dns(name.to_ascii_lowercase()))
    }
}

impl fmt::Display for San {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dns(name) => f.write_str(name),
            Self::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A `--client` name: the certificate's common name and the stem of its file names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientName(String);

impl ClientName {
    /// Parses `--client` text: 1 to 64 of `A-Z a-z 0-9 . _ -`, starting with a letter or a
    /// digit, so `NAME.pem` and `NAME.key` are plain file names in DIR.
    ///
    /// # Errors
    /// A one-line reason otherwise.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let ok = !text.is_empty()
            && text.len() <= MAX_CLIENT_NAME
            && text.starts_with(|c: char| c.is_ascii_alphanumeric())
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            Ok(Self(text.to_owned()))
        } else {
            Err(format!(
                "--client {text:?}: use 1 to {MAX_CLIENT_NAME} letters, digits, '.', '_' or '-', \
                 starting with a letter or digit"
            ))
        }
    }
}

/// Runs `certs`.
pub(crate) fn run(args: &CertsArgs) -> Result<(), Failure> {
    match args {
        CertsArgs::Create { out, sans } => create(out, sans),
        CertsArgs::Issue { out, client } => issue(out, client),
    }
}

fn rc(context: &str) -> impl FnOnce(rcgen::Error) -> Failure + '_ {
    move |e| Failure::from_error(context, &e)
}

/// The CA's parameters; the same for creating and for issuing from a kept key.
fn ca_params() -> CertificateParams {
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca
}

/// A client certificate with subject CN = `name`, signed by `issuer`: (certificate, key).
fn client_certificate(
    name: &str,
    issuer: &Issuer<'_, KeyPair>,
) -> Result<(rcgen::Certificate, KeyPair), Failure> {
    let mut client = CertificateParams::default();
    client.distinguished_name.push(DnType::CommonName, name);
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().map_err(rc("client key"))?;
    let cert = client
        .signed_by(&key, issuer)
        .map_err(rc("client certificate"))?;
    Ok((cert, key))
}

/// SHA-256 of the DER certificate in lowercase hex, as the server's
/// `ClientCertificate::sha256_fingerprint_hex` reports it.
fn fingerprint(cert: &rcgen::Certificate) -> String {
    ring::digest::digest(&ring::digest::SHA256, cert.der())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Refuses before anything is written if any of `names` exists in `out`.
fn refuse_existing(out: &Path, names: &[&str], hint: &str) -> Result<(), Failure> {
    for name in names {
        let path = out.join(name);
        if path.exists() {
            return Err(Failure::new(format!(
                "{} already exists; {hint}",
                path.display()
            )));
        }
    }
    Ok(())
}

/// Writes `text` to a new file (never an existing one): 0600 if `secret`, else 0644.
fn write_new(path: &Path, text: &str, secret: bool) -> Result<(), Failure> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| Failure::from_error(&format!("cannot write {}", path.display()), &e))
}

/// Writes a new PKI. The server certificate names exactly `sans`, or `localhost`,
/// `127.0.0.1` and `::1` when there are none (a loopback setup): a certificate for a real
/// host does not also claim the loopback names, so a client reaching it through a tunnel
/// says which host it means (`--server-name`), and a test on 127.0.0.1 proves it does.
fn create(out: &Path, sans: &[San]) -> Result<(), Failure> {
    const FILES: [&str; 6] = [
        "ca.pem",
        "ca.key",
        "server.pem",
        "server.key",
        "client.pem",
        "client.key",
    ];
    refuse_existing(out, &FILES, "choose another --out directory")?;
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(out)
        .map_err(|e| Failure::from_error(&format!("cannot create {}", out.display()), &e))?;

    let ca_key = KeyPair::generate().map_err(rc("CA key"))?;
    let ca = ca_params();
    let ca_cert = ca.self_signed(&ca_key).map_err(rc("CA certificate"))?;
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca, ca_key);

    let loopback = [
        San::Dns("localhost".to_owned()),
        San::Ip(Ipv4Addr::LOCALHOST.into()),
        San::Ip(Ipv6Addr::LOCALHOST.into()),
    ];
    let given = if sans.is_empty() { &loopback[..] } else { sans };
    let mut names: Vec<San> = Vec::new();
    for san in given.iter().cloned() {
        if !names.contains(&san) {
            names.push(san);
        }
    }
    let mut server = CertificateParams::default();
    for san in &names {
        server.subject_alt_names.push(match san {
            San::Ip(ip) => SanType::IpAddress(*ip),
            San::Dns(name) => SanType::DnsName(name.clone().try_into().map_err(rc("--san"))?),
        });
    }
    server
        .distinguished_name
        .push(DnType::CommonName, "baton host");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().map_err(rc("server key"))?;
    let server_cert = server
        .signed_by(&server_key, &issuer)
        .map_err(rc("server certificate"))?;

    let (client_cert, client_key) = client_certificate("client", &issuer)?;

    let contents = [
        (ca_cert.pem(), false),
        (ca_key_pem, true),
        (server_cert.pem(), false),
        (server_key.serialize_pem(), true),
        (client_cert.pem(), false),
        (client_key.serialize_pem(), true),
    ];
    for (name, (text, secret)) in FILES.iter().zip(contents) {
        write_new(&out.join(name), &text, secret)?;
    }

    let d = out.display();
    let listed = names
        .iter()
        .map(San::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    // Without --san this is a loopback setup; with one, the first name is how clients
    // reach the host.
    let (listen, host) = match sans.first() {
        None => ("127.0.0.1", "localhost".to_owned()),
        Some(San::Ip(ip)) if ip.is_ipv6() => ("[::]", format!("[{ip}]")),
        Some(san) => ("0.0.0.0", san.to_string()),
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(
        stdout,
        "wrote {d}/ca.pem, ca.key, server.pem, server.key, client.pem, client.key
server certificate names: {listed}
client.pem (CN=client) sha256 {}

  baton-host serve --listen tls://{listen}:7879 \\
      --tls-cert {d}/server.pem --tls-key {d}/server.key --client-ca {d}/ca.pem
  # on the client machine, with copies of ca.pem, client.pem and client.key:
  baton --connect tls://{host}:7879 --ca ca.pem --cert client.pem --key client.key sessions

Keep ca.key on this machine and never copy it to a client: it signs more client
certificates (baton-host certs --out {d} --client NAME).",
        fingerprint(&client_cert)
    );
    Ok(())
}

fn issue(out: &Path, client: &ClientName) -> Result<(), Failure> {
    let ClientName(name) = client;
    let ca_pem_path = out.join("ca.pem");
    let ca_key_path = out.join("ca.key");
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Failure::new(format!(
                    "{} not found: --client needs the CA that `baton-host certs --out {}` \
                     writes (a PKI made before ca.key was kept cannot issue; make a new one)",
                    path.display(),
                    out.display()
                ))
            } else {
                Failure::from_error(&format!("cannot read {}", path.display()), &e)
            }
        })
    };
    let ca_pem = read(&ca_pem_path)?;
    let ca_key_pem = read(&ca_key_path)?;
    let mode = std::fs::metadata(&ca_key_path)
        .map_err(|e| Failure::from_error(&format!("cannot read {}", ca_key_path.display()), &e))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(Failure::new(format!(
            "{} is accessible to other users (mode {:o}); chmod 600 it first",
            ca_key_path.display(),
            mode & 0o777
        )));
    }
    let cert_file = format!("{name}.pem");
    let key_file = format!("{name}.key");
    refuse_existing(
        out,
        &[&cert_file, &key_file],
        "choose another --client name",
    )?;

    let ca_key = KeyPair::from_pem(&ca_key_pem)
        .map_err(|e| Failure::from_error(&format!("{} is not a key", ca_key_path.display()), &e))?;
    let ca_spki = certified_key(&ca_pem).ok_or_else(|| {
        Failure::new(format!(
            "{} is not a PEM certificate",
            ca_pem_path.display()
        ))
    })?;
    // The issuer is rebuilt from the CA's parameters, so check that the key really is the
    // one ca.pem certifies: otherwise the host would refuse the new certificate later.
    if ca_spki != ca_key.subject_public_key_info() {
        return Err(Failure::new(format!(
            "{} is not the key of {}; they must come from the same `baton-host certs` run",
            ca_key_path.display(),
            ca_pem_path.display()
        )));
    }
    let issuer = Issuer::new(ca_params(), ca_key);
    let (cert, key) = client_certificate(name, &issuer)?;
    write_new(&out.join(&key_file), &key.serialize_pem(), true)?;
    write_new(&out.join(&cert_file), &cert.pem(), false)?;

    let d = out.display();
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(
        stdout,
        "wrote {d}/{cert_file} and {d}/{key_file} (CN={name}); give them, with ca.pem, to {name}
sha256 {}",
        fingerprint(&cert)
    );
    Ok(())
}

/// The SubjectPublicKeyInfo (DER) of the key the first certificate in the PEM text `pem`
/// certifies; `None` if there is no PEM certificate or it does not parse as X.509.
fn certified_key(pem: &str) -> Option<Vec<u8>> {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).ok()?;
    let (rest, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    rest.is_empty()
        .then(|| cert.tbs_certificate.subject_pki.raw.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sans_are_ip_addresses_when_they_parse_as_one_else_dns_names() {
        assert_eq!(
            San::parse("build-box.example"),
            Ok(San::Dns("build-box.example".into()))
        );
        assert_eq!(
            San::parse("Box.Example."),
            Ok(San::Dns("box.example".into()))
        );
        assert_eq!(
            San::parse("*.example.org"),
            Ok(San::Dns("*.example.org".into()))
        );
        assert_eq!(
            San::parse("10.0.0.7"),
            Ok(San::Ip("10.0.0.7".parse().unwrap()))
        );
        assert_eq!(
            San::parse("fd00::7"),
            Ok(San::Ip("fd00::7".parse().unwrap()))
        );
        for bad in [
            "",
            ".",
            "a..b",
            "-a.example",
            "a b",
            "*",
            "a.*.b",
            "x/y",
            "é.example",
        ] {
            assert!(San::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn client_names_are_plain_file_names() {
        for good in ["bob", "alice.laptop", "ci_runner-2", "B0B"] {
            assert!(ClientName::parse(good).is_ok(), "{good:?} refused");
        }
        for bad in [
            "", ".", "..", ".hidden", "-rf", "a/b", "../ca", "a b", "bob\n", "é",
        ] {
            assert!(ClientName::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(ClientName::parse(&"a".repeat(MAX_CLIENT_NAME)).is_ok());
        assert!(ClientName::parse(&"a".repeat(MAX_CLIENT_NAME + 1)).is_err());
    }

    #[test]
    fn the_certified_key_is_the_one_the_certificate_was_made_for() {
        let key = KeyPair::generate().unwrap();
        let other = KeyPair::generate().unwrap();
        let cert = ca_params().self_signed(&key).unwrap();
        let certified = certified_key(&cert.pem()).unwrap();
        assert_eq!(certified, key.subject_public_key_info());
        assert_ne!(certified, other.subject_public_key_info());
    }

    #[test]
    fn a_key_whose_bytes_appear_elsewhere_in_the_certificate_is_not_its_key() {
        // The other key's SubjectPublicKeyInfo inside an extension of the CA certificate: its
        // bytes are in the DER, but it is not the key the certificate certifies.
        let key = KeyPair::generate().unwrap();
        let other = KeyPair::generate().unwrap();
        let mut params = ca_params();
        params
            .custom_extensions
            .push(rcgen::CustomExtension::from_oid_content(
                &[1, 3, 6, 1, 4, 1, 55_555, 1],
                other.subject_public_key_info(),
            ));
        let cert = params.self_signed(&key).unwrap();
        let spki = other.subject_public_key_info();
        assert!(cert.der().windows(spki.len()).any(|w| w == spki.as_slice()));
        assert_eq!(
            certified_key(&cert.pem()),
            Some(key.subject_public_key_info())
        );
    }

    #[test]
    fn text_without_a_pem_certificate_certifies_no_key() {
        let key = KeyPair::generate().unwrap();
        let cert = ca_params().self_signed(&key).unwrap();
        let not_x509 = "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n";
        let bad_base64 = "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        for text in ["no pem here", &key.serialize_pem(), not_x509, bad_base64] {
            assert_eq!(certified_key(text), None, "{text}");
        }
        // Text around the block is ignored, as in a file with comments.
        let commented = format!("# the CA\n{}", cert.pem());
        assert_eq!(
            certified_key(&commented),
            Some(key.subject_public_key_info())
        );
    }

    #[test]
    fn issuing_refuses_a_ca_key_or_certificate_from_another_pki() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("pki");
        create(&out, &[]).unwrap();
        let bob = ClientName::parse("bob").unwrap();
        let (ca_pem, ca_key) = (out.join("ca.pem"), out.join("ca.key"));
        let kept = std::fs::read_to_string(&ca_key).unwrap();

        std::fs::remove_file(&ca_key).unwrap();
        let stranger = KeyPair::generate().unwrap().serialize_pem();
        write_new(&ca_key, &stranger, true).unwrap();
        let refused = issue(&out, &bob).unwrap_err().message;
        assert!(refused.contains("is not the key of"), "{refused}");

        std::fs::remove_file(&ca_key).unwrap();
        write_new(&ca_key, &kept, true).unwrap();
        let certificate = std::fs::read_to_string(&ca_pem).unwrap();
        std::fs::write(&ca_pem, "not a certificate\n").unwrap();
        let refused = issue(&out, &bob).unwrap_err().message;
        assert!(refused.contains("is not a PEM certificate"), "{refused}");
        assert!(!out.join("bob.pem").exists() && !out.join("bob.key").exists());

        std::fs::write(&ca_pem, certificate).unwrap();
        issue(&out, &bob).unwrap();
        assert!(out.join("bob.pem").exists());
    }
}
