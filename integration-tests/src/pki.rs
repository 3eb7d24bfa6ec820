//! Test certificates: a CA and a member certificate for 127.0.0.1/localhost signed by it, written as PEM
//! files, for TLS tests and the TLS benchmark.

use anyhow::Result;
use std::path::{Path, PathBuf};

/// The PEM files of one member and its CA.
#[derive(Clone, Debug)]
pub struct MemberFiles {
    /// The member's certificate.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA that signed it.
    pub ca: PathBuf,
}

impl MemberFiles {
    /// `--tls-cert C --tls-key K --tls-ca A`, for a job or task manager.
    pub fn flags(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.cert.display().to_string(),
            "--tls-key".into(),
            self.key.display().to_string(),
            "--tls-ca".into(),
            self.ca.display().to_string(),
        ]
    }
}

/// Makes a CA named `name` and a member certificate signed by it, under `dir`.
pub fn member(dir: &Path, name: &str) -> Result<MemberFiles> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, format!("{name} CA"));
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    params.distinguished_name.push(DnType::CommonName, format!("{name} member"));
    let cert = params.signed_by(&key, &issuer)?;
    let files = MemberFiles {
        cert: dir.join(format!("{name}.crt")),
        key: dir.join(format!("{name}.key")),
        ca: dir.join(format!("{name}-ca.crt")),
    };
    std::fs::write(&files.cert, cert.pem())?;
    std::fs::write(&files.key, key.serialize_pem())?;
    std::fs::write(&files.ca, ca.pem())?;
    Ok(files)
}
