//! The `loadtest` binary: see `docs/loadtest.md`.

use anyhow::Context;
use clap::Parser;
use loadtest::cli::{Cli, Command};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().context("starting the Tokio runtime")?;
    let result = runtime.block_on(async {
        match cli.command {
            // Dropping the run on Ctrl-C drops its fleet: every child is killed.
            Command::Run(args) => tokio::select! {
                r = loadtest::run::run(*args) => r.map(|_| ()),
                _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted; every process started was stopped")),
            },
            Command::Ramp(args) => tokio::select! {
                r = loadtest::ramp::ramp(*args) => r.map(|_| ()),
                _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted; every process started was stopped")),
            },
            Command::Capacity(args) => tokio::select! {
                r = loadtest::capacity::capacity(*args) => r.map(|_| ()),
                _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted; every process started was stopped")),
            },
            Command::Pd(args) => tokio::select! {
                r = loadtest::pd::pd(*args) => r.map(|_| ()),
                _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted; every process started was stopped")),
            },
            Command::RateLimit(args) => tokio::select! {
                r = loadtest::rate_limit::rate_limit(*args) => r.map(|_| ()),
                _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted; every process started was stopped")),
            },
            Command::Overload(args) => tokio::select! {
                r = loadtest::overload::overload(*args) => r.map(|_| ()),
                _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted; every process started was stopped")),
            },
            Command::RealEngine(args) => tokio::select! {
                r = loadtest::real_engine::real_engine(*args) => r.map(|_| ()),
                _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted; every process started was stopped")),
            },
            Command::DynamoFrontend(args) => loadtest::peers::dynamo::frontend(*args).await,
        }
    });
    drop(runtime);
    result
}
