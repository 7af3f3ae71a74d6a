//! `epp` configuration: everything `serve` takes, plus the ext_proc gRPC
//! listener of the endpoint picker (its TLS, its cap on streams, the
//! deadline of a picked exchange) and the body mode Envoy is assumed to use
//! when it does not say.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use protocol::parse_duration;

use super::file::{FileConfig, file_duration, load_file};
use super::{ServeArgs, ServeConfig};

/// How Envoy sends bodies to the picker (its ext_proc `BodySendMode`).
/// Envoy names the mode in each stream's first message (Envoy 1.33 and
/// later); this is the mode assumed when it does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BodyMode {
    /// The whole body in one message, after the headers were answered; the
    /// destination goes in the answer to the body.
    Buffered,
    /// Headers and body chunks without waiting; the picker answers the
    /// headers once it has the whole body, and hands the body back (what
    /// GIE's InferencePool configures).
    #[default]
    FullDuplexStreamed,
}

/// Flags of `prefix-router epp` besides those of `serve`.
#[derive(Debug, clap::Args)]
pub struct EppArgs {
    /// Address of the ext_proc gRPC service and gRPC health [default:
    /// 127.0.0.1:9002].
    #[arg(long, env = "PREFIX_ROUTER_GRPC_LISTEN")]
    pub grpc_listen: Option<SocketAddr>,
    /// Body mode assumed when Envoy does not name one [default:
    /// full-duplex-streamed].
    #[arg(long, env = "PREFIX_ROUTER_EPP_BODY_MODE", value_enum)]
    pub epp_body_mode: Option<BodyMode>,
    /// Longest a stream may last after its pick (the response, as Envoy
    /// relays it); then its in-flight count is released and the stream
    /// ends with gRPC status DEADLINE_EXCEEDED [default: 10m].
    #[arg(long, env = "PREFIX_ROUTER_EPP_RESPONSE_TIMEOUT", value_parser = parse_duration)]
    pub epp_response_timeout: Option<Duration>,
    /// Most ext_proc streams open at once; more are refused with gRPC status
    /// RESOURCE_EXHAUSTED [default: --max-connections].
    #[arg(long, env = "PREFIX_ROUTER_EPP_MAX_STREAMS")]
    pub epp_max_streams: Option<usize>,
    /// The gRPC port's TLS certificate chain (PEM); with --grpc-tls-key and
    /// --grpc-tls-client-ca, the port speaks only TLS and requires a client
    /// certificate signed by that CA.
    #[arg(long, env = "PREFIX_ROUTER_GRPC_TLS_CERT")]
    pub grpc_tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --grpc-tls-cert.
    #[arg(long, env = "PREFIX_ROUTER_GRPC_TLS_KEY")]
    pub grpc_tls_key: Option<PathBuf>,
    /// The CA (PEM) that signs the gateways' client certificates.
    #[arg(long, env = "PREFIX_ROUTER_GRPC_TLS_CLIENT_CA")]
    pub grpc_tls_client_ca: Option<PathBuf>,
    /// Everything `serve` takes: Valkey, models, tokenizers, the push API.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// The endpoint picker's own settings.
#[derive(Debug, Clone)]
pub struct EppSettings {
    /// The ext_proc gRPC listener.
    pub grpc_listen: SocketAddr,
    /// The body mode assumed when Envoy names none.
    pub body_mode: BodyMode,
    /// Deadline of a stream from its pick.
    pub response_timeout: Duration,
    /// Streams open at once; `None`: `--max-connections`.
    pub max_streams: Option<usize>,
    /// TLS with client certificates on the gRPC port; `None`: plaintext.
    pub tls: Option<GrpcTls>,
}

impl EppSettings {
    /// The defaults on `grpc_listen` (plaintext, 10 minutes after a pick,
    /// as many streams as connections).
    pub fn new(grpc_listen: SocketAddr, body_mode: BodyMode) -> Self {
        EppSettings {
            grpc_listen,
            body_mode,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            max_streams: None,
            tls: None,
        }
    }
}

/// The PEM files of the gRPC port's TLS.
#[derive(Debug, Clone)]
pub struct GrpcTls {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA of the clients' certificates.
    pub client_ca: PathBuf,
}

/// Default of `--epp-response-timeout`: longer than any generation.
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(600);

impl ServeConfig {
    /// Resolves `epp`'s flags as [`resolve`](Self::resolve) does `serve`'s
    /// (defaults < file < environment < flags).
    pub fn resolve_epp(args: EppArgs) -> anyhow::Result<Self> {
        let file = match &args.serve.config {
            Some(path) => load_file(path)?,
            None => FileConfig::default(),
        };
        let mut cfg = ServeConfig::resolve(args.serve)?;
        let response_timeout = args
            .epp_response_timeout
            .or(file_duration(
                file.epp_response_timeout,
                "epp_response_timeout",
            )?)
            .unwrap_or(DEFAULT_RESPONSE_TIMEOUT);
        if response_timeout.is_zero() {
            bail!("--epp-response-timeout must be positive");
        }
        let max_streams = args.epp_max_streams.or(file.epp_max_streams);
        if max_streams == Some(0) {
            bail!("--epp-max-streams must be positive");
        }
        let tls = match (
            args.grpc_tls_cert.or(file.grpc_tls_cert),
            args.grpc_tls_key.or(file.grpc_tls_key),
            args.grpc_tls_client_ca.or(file.grpc_tls_client_ca),
        ) {
            (Some(cert), Some(key), Some(client_ca)) => Some(GrpcTls {
                cert,
                key,
                client_ca,
            }),
            (None, None, None) => None,
            _ => bail!(
                "--grpc-tls-cert, --grpc-tls-key and --grpc-tls-client-ca go together (TLS with client certificates)"
            ),
        };
        cfg.epp = Some(EppSettings {
            grpc_listen: args
                .grpc_listen
                .or(file.grpc_listen)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9002))),
            body_mode: args
                .epp_body_mode
                .or(file.epp_body_mode)
                .unwrap_or_default(),
            response_timeout,
            max_streams,
            tls,
        });
        Ok(cfg)
    }
}
