//! The `prefix-router` binary.

use clap::{Parser, Subcommand};
use prefix_router::config::{ServeArgs, ServeConfig};
use tracing_subscriber::EnvFilter;

/// Stateless, cache-aware routers for LLM inference sharing one prefix index in Valkey.
#[derive(Parser)]
#[command(name = "prefix-router", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a router: the worker push API and the fleet's shared state.
    Serve(ServeArgs),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("PREFIX_ROUTER_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new()?;
    match cli.command {
        Command::Serve(args) => {
            let cfg = ServeConfig::resolve(args)?;
            runtime.block_on(prefix_router::serve::run(cfg))
        }
    }
}
