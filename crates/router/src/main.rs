//! The `prefix-router` binary.

use clap::{Parser, Subcommand};
use prefix_router::{EppArgs, ServeArgs, ServeConfig};
use state::inspect::InspectArgs;
use worker::reporter::ReporterArgs;

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
    Serve(Box<ServeArgs>),
    /// Run a router as a Gateway API Inference Extension endpoint picker:
    /// everything `serve` does, plus Envoy's ext_proc gRPC service.
    Epp(Box<EppArgs>),
    /// Run beside a stock vLLM engine: report its KV cache to the fleet.
    Reporter(Box<ReporterArgs>),
    /// Read-only view of the fleet's shared state in Valkey; with --check,
    /// verify its invariants (exit 1 on a violation, 2 on an error).
    Inspect(InspectArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let otlp = match &cli.command {
        Command::Serve(args) => args.exposure.otlp()?,
        Command::Epp(args) => args.serve.exposure.otlp()?,
        _ => None,
    };
    let _telemetry = prefix_router::init_telemetry(otlp.as_ref())?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    match cli.command {
        Command::Serve(args) => prefix_router::run(ServeConfig::resolve(*args)?),
        Command::Epp(args) => prefix_router::run(ServeConfig::resolve_epp(*args)?),
        Command::Reporter(args) => {
            let runtime = tokio::runtime::Runtime::new()?;
            let cfg = args.into_config().map_err(anyhow::Error::msg)?;
            runtime.block_on(async {
                let metrics = prefix_router::metrics_handle()
                    .inspect_err(|e| tracing::warn!(error = %e, "metrics recorder unavailable"))
                    .ok();
                worker::reporter::run(cfg, metrics, prefix_router::wait_for_signal()).await
            })?;
            Ok(())
        }
        Command::Inspect(args) => {
            use std::io::Write;
            let runtime = tokio::runtime::Runtime::new()?;
            let mut out = std::io::stdout().lock();
            let result = runtime.block_on(state::inspect::run(&args, &mut out));
            let _ = out.flush();
            match result {
                Ok(code) => std::process::exit(code),
                Err(e) => {
                    eprintln!(
                        "error: {:#}",
                        anyhow::Error::new(e).context("inspecting the state")
                    );
                    std::process::exit(2)
                }
            }
        }
    }
}
