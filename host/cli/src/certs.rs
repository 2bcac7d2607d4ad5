//! `baton-host certs --out DIR`: a development PKI for a mutual-TLS quick start.

use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::Failure;

/// What gets written, and whether it is secret (mode 0600).
const FILES: [(&str, bool); 5] = [
    ("ca.pem", false),
    ("server.pem", false),
    ("server.key", true),
    ("client.pem", false),
    ("client.key", true),
];

fn rc(context: &str) -> impl FnOnce(rcgen::Error) -> Failure + '_ {
    move |e| Failure::from_error(context, &e)
}

pub(crate) fn run(out: &Path) -> Result<(), Failure> {
    for (name, _) in FILES {
        if out.join(name).exists() {
            return Err(Failure::new(format!(
                "{} already exists; choose another --out directory",
                out.join(name).display()
            )));
        }
    }
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(out)
        .map_err(|e| Failure::from_error(&format!("cannot create {}", out.display()), &e))?;

    let ca_key = KeyPair::generate().map_err(rc("CA key"))?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(rc("CA"))?;
    ca.distinguished_name
        .push(DnType::CommonName, "baton development CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).map_err(rc("CA certificate"))?;
    let issuer = Issuer::new(ca, ca_key);

    let mut server = CertificateParams::new(vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ])
    .map_err(rc("server"))?;
    server
        .distinguished_name
        .push(DnType::CommonName, "baton host");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().map_err(rc("server key"))?;
    let server_cert = server
        .signed_by(&server_key, &issuer)
        .map_err(rc("server certificate"))?;

    let mut client = CertificateParams::new(Vec::<String>::new()).map_err(rc("client"))?;
    client
        .distinguished_name
        .push(DnType::CommonName, "baton client");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate().map_err(rc("client key"))?;
    let client_cert = client
        .signed_by(&client_key, &issuer)
        .map_err(rc("client certificate"))?;

    let contents = [
        ca_cert.pem(),
        server_cert.pem(),
        server_key.serialize_pem(),
        client_cert.pem(),
        client_key.serialize_pem(),
    ];
    for ((name, secret), text) in FILES.iter().zip(contents) {
        let path = out.join(name);
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if *secret { 0o600 } else { 0o644 })
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| Failure::from_error(&format!("cannot write {}", path.display()), &e))?;
    }
    let d = out.display();
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(
        stdout,
        "wrote {d}/ca.pem, server.pem, server.key (localhost, 127.0.0.1, ::1), client.pem, client.key

  baton-host serve --listen tls://127.0.0.1:7879 \\
      --tls-cert {d}/server.pem --tls-key {d}/server.key --client-ca {d}/ca.pem
  baton --connect tls://localhost:7879 --ca {d}/ca.pem \\
      --cert {d}/client.pem --key {d}/client.key sessions

These are for development: the CA key is not kept, so nothing else can be signed by it."
    );
    Ok(())
}
