//! Test certificates made with rcgen: a cluster CA, and certificates for nodes and clients
//! on 127.0.0.1, written as PEM files the way an operator's would be. Nothing here is a
//! committed key: every run makes its own.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rowcall_node::config::PeerTlsConfig;

/// A certificate authority for one test cluster.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
    name: String,
}

impl TestCa {
    /// A new CA called `name`, its certificate written to `dir/<name>-ca.pem`.
    pub fn new(dir: &Path, name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(DnType::CommonName, format!("rowcall test CA {name}"));
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(format!("{name}-ca.pem")), issuer.pem()).unwrap();
        Self {
            issuer,
            dir: dir.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate and key for `who` on 127.0.0.1 and localhost (server and client use),
    /// PEM. A node's (`who` = `node-<id>`) also names `node-<id>.peer.rowcall`, as every
    /// peer certificate must.
    pub fn issue(&self, who: &str) -> (String, String) {
        let mut names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
        if who.starts_with("node-") {
            names.push(format!("{who}.peer.rowcall"));
        }
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, who);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Peer TLS files for node `who` (written once, kept across restarts).
    pub fn node(&self, who: &str) -> PeerTlsConfig {
        let cert_file = self.dir.join(format!("{}-{who}.crt", self.name));
        let key_file = self.dir.join(format!("{}-{who}.key", self.name));
        if !cert_file.exists() {
            let (cert, key) = self.issue(who);
            std::fs::write(&cert_file, cert).unwrap();
            std::fs::write(&key_file, key).unwrap();
        }
        PeerTlsConfig {
            ca_file: self.dir.join(format!("{}-ca.pem", self.name)),
            cert_file,
            key_file,
            reload_secs: 1,
        }
    }
}
