//! Spawning the `sim-worker` binary and reading the lines it prints
//! (`listening on …`, `kv-events on …`) as it starts.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use std::path::PathBuf;

use super::tokenizer_dir;

/// Starts `sim-worker --port 0 --model <model> --tokenizer-dir <Qwen3>
/// <args>` (log level warn, no inherited internal token); returns the child
/// and its stdout, line by line.
pub fn spawn_sim_worker(
    model: &str,
    args: &[String],
    stderr: Stdio,
) -> (Child, mpsc::Receiver<String>) {
    // Port 0 (any free port) unless the caller names one.
    let port: &[&str] = if args.iter().any(|a| a == "--port") {
        &[]
    } else {
        &["--port", "0"]
    };
    let mut child = Command::new(sim_worker_bin())
        .args(port)
        .args(["--model", model, "--tokenizer-dir"])
        .arg(tokenizer_dir())
        .args(args)
        .env("SIM_WORKER_LOG", "warn")
        .env_remove("PREFIX_ROUTER_INTERNAL_TOKEN")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn sim-worker");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, lines)
}

/// The `sim-worker` binary of this test's profile (`target/<profile>/`,
/// beside `deps/`): `cargo test --workspace` builds it with the tests.
pub fn sim_worker_bin() -> PathBuf {
    fleet::binaries::beside_current_exe("sim-worker").expect(
        "no sim-worker beside this test: run `cargo build --bin sim-worker` \
         (cargo test --workspace builds it)",
    )
}
