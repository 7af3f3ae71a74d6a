//! `epp` configuration: everything `serve` takes, plus the ext_proc gRPC
//! listener of the endpoint picker and the body mode Envoy is assumed to
//! use when it does not say.

use std::net::SocketAddr;

use super::file::{FileConfig, load_file};
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
    /// Everything `serve` takes: Valkey, models, tokenizers, the push API.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// The endpoint picker's own settings.
#[derive(Debug, Clone, Copy)]
pub struct EppSettings {
    /// The ext_proc gRPC listener.
    pub grpc_listen: SocketAddr,
    /// The body mode assumed when Envoy names none.
    pub body_mode: BodyMode,
}

impl ServeConfig {
    /// Resolves `epp`'s flags as [`resolve`](Self::resolve) does `serve`'s
    /// (defaults < file < environment < flags).
    pub fn resolve_epp(args: EppArgs) -> anyhow::Result<Self> {
        let file = match &args.serve.config {
            Some(path) => load_file(path)?,
            None => FileConfig::default(),
        };
        let mut cfg = ServeConfig::resolve(args.serve)?;
        cfg.epp = Some(EppSettings {
            grpc_listen: args
                .grpc_listen
                .or(file.grpc_listen)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9002))),
            body_mode: args
                .epp_body_mode
                .or(file.epp_body_mode)
                .unwrap_or_default(),
        });
        Ok(cfg)
    }
}
