//! Test PKI generated at run time: a CA, a server certificate for `localhost`/127.0.0.1, and
//! client certificates signed by the CA (or by an unrelated CA).

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// A certificate with its key, in PEM.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// The certificate (DER).
    pub cert_der: Vec<u8>,
    /// The private key (PEM, PKCS#8).
    pub key_pem: String,
}

/// A CA that signs server and client certificates.
#[derive(Debug)]
pub struct TestCa {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    /// A fresh self-signed CA named `name`.
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("generate CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).expect("self-sign CA");
        Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate (PEM).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A server certificate for `localhost` and 127.0.0.1.
    pub fn server(&self) -> Identity {
        let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("server params");
        self.sign(params)
    }

    /// A client certificate with subject `CN=<common_name>,O=Baton Tests` and the alternative
    /// name `URI:spiffe://baton.test/<common_name>`.
    pub fn client(&self, common_name: &str) -> Identity {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        params.subject_alt_names = vec![rcgen::SanType::URI(
            format!("spiffe://baton.test/{common_name}")
                .try_into()
                .expect("a valid URI"),
        )];
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Baton Tests");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    /// Like [`Self::client`], but valid only during the year 2000: long expired.
    pub fn expired_client(&self, common_name: &str) -> Identity {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Baton Tests");
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2000, 12, 31);
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Identity {
        let key = KeyPair::generate().expect("generate key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        Identity {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            key_pem: key.serialize_pem(),
        }
    }
}
