//! The gRPC port's TLS: the picker's certificate, and client certificates
//! required, signed by the gateways' CA (as Envoy's ext_proc cluster
//! presents one with an `UpstreamTlsContext`).

use std::time::Duration;

use anyhow::Context;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use crate::config::GrpcTls;

/// Longest a TLS handshake may take (a client that stalls it holds a
/// connection, not a stream).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's TLS configuration from `tls`'s PEM files: a connection
/// without a client certificate signed by the CA is refused in the
/// handshake.
pub fn server_config(tls: &GrpcTls) -> anyhow::Result<ServerTlsConfig> {
    let read = |path: &std::path::Path, what: &str| {
        std::fs::read(path).with_context(|| format!("reading {what} {}", path.display()))
    };
    let cert = read(&tls.cert, "--grpc-tls-cert")?;
    let key = read(&tls.key, "--grpc-tls-key")?;
    let ca = read(&tls.client_ca, "--grpc-tls-client-ca")?;
    Ok(ServerTlsConfig::new()
        .identity(Identity::from_pem(cert, key))
        .client_ca_root(Certificate::from_pem(ca))
        .client_auth_optional(false)
        .timeout(HANDSHAKE_TIMEOUT))
}
