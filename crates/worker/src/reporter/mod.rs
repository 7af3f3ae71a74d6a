//! `prefix-router reporter`: the sidecar that connects a stock vLLM engine
//! to the fleet. It subscribes to the engine's ZMQ KV events, keeps the
//! engine's live block set in the router's own block hashes (see
//! [`EngineBlocks`]), fills sequence gaps from the engine's replay socket,
//! and reports through the worker push protocol. Stopped, it drains the
//! worker from the fleet before it deregisters it (`drain`).

mod args;
mod drain;
mod engine_blocks;
mod held;
mod run;
mod sequence;
mod session;

pub use args::ReporterArgs;
pub use run::{ReporterConfig, ReporterError, run};

pub use engine_blocks::{Applied, BlockDelta, EngineBlocks, Unmappable};
pub use sequence::{SeqStep, SeqTracker};
pub use session::{FleetSink, Session, SessionStats};
