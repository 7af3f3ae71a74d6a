//! A valkey-server that also listens with TLS, its certificate signed by a
//! throwaway CA, for tests of `valkeys://` URLs.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

use super::{Valkey, free_port};

/// The server, its TLS port and the CA file a client must trust; the
/// certificates live as long as it does.
pub struct TlsValkey {
    /// The server (also on its plain port).
    pub valkey: Valkey,
    /// Its TLS port on 127.0.0.1.
    pub tls_port: u16,
    /// The CA's PEM file (for `SSL_CERT_FILE`).
    pub ca_file: String,
    _dir: tempfile::TempDir,
}

impl TlsValkey {
    /// A server with a certificate for 127.0.0.1 and localhost; clients are
    /// not asked for certificates.
    pub fn start() -> TlsValkey {
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
        std::fs::write(path("ca.pem"), ca.pem()).unwrap();
        std::fs::write(path("server.pem"), cert.pem()).unwrap();
        std::fs::write(path("server.key"), key.serialize_pem()).unwrap();
        let (cert_file, key_file, ca_file) =
            (path("server.pem"), path("server.key"), path("ca.pem"));
        // The TLS port is probed free, then bound by the server: another
        // test may take it in between, so a failed start tries another.
        let mut attempt = 0;
        let (valkey, tls_port) = loop {
            let tls_port = free_port().unwrap();
            let port = tls_port.to_string();
            let started = Valkey::try_start_with(&[
                "--save",
                "",
                "--appendonly",
                "no",
                "--tls-port",
                &port,
                "--tls-cert-file",
                &cert_file,
                "--tls-key-file",
                &key_file,
                "--tls-ca-cert-file",
                &ca_file,
                "--tls-auth-clients",
                "no",
            ]);
            match started {
                Ok(v) => break (v, tls_port),
                Err(e) if attempt < 4 => {
                    attempt += 1;
                    eprintln!("TLS valkey-server did not start ({e:#}); another port");
                }
                Err(e) => panic!("starting a TLS valkey-server: {e:#}"),
            }
        };
        TlsValkey {
            valkey,
            tls_port,
            ca_file,
            _dir: dir,
        }
    }

    /// `valkeys://127.0.0.1:<tls port>`.
    pub fn url(&self) -> String {
        format!("valkeys://127.0.0.1:{}", self.tls_port)
    }
}
