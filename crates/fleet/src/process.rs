//! Child processes a fleet is made of: a recipe ([`ProcSpec`]) that can be
//! spawned again after a kill, and a guard ([`ChildProc`]) that SIGKILLs the
//! child when dropped, so that nothing outlives its test or load test
//! (errors, Ctrl-C and panics included).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
/// The signals a test sends a process by hand ([`signal_pid`]).
pub use libc::{SIGKILL, SIGTERM};

pub use crate::proc_stat::proc_cpu_seconds;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// How to start one child process; kept so that it can be restarted with
/// exactly the same command.
#[derive(Debug, Clone)]
pub struct ProcSpec {
    /// A short name for messages and log files (`router-0`, `sim-3`).
    pub name: String,
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Environment variables it must not inherit.
    pub unset: Vec<String>,
    /// Where its stderr (and stdout, unless piped) goes.
    pub log: PathBuf,
    /// Pipe stdout so that [`ChildProc::wait_line`] can read it.
    pub pipe_stdout: bool,
    /// Run it in a process group of its own and signal the whole group:
    /// for programs that start children of their own (a vLLM engine).
    pub own_group: bool,
}

impl ProcSpec {
    /// A spec with no environment, logging to `log`, stdout not piped.
    pub fn new(name: impl Into<String>, program: impl Into<PathBuf>, log: PathBuf) -> Self {
        ProcSpec {
            name: name.into(),
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            unset: Vec::new(),
            log,
            pipe_stdout: false,
            own_group: false,
        }
    }

    /// A spec whose output is discarded (a run to completion captures it:
    /// [`output`](Self::output)).
    pub fn quiet(name: impl Into<String>, program: impl Into<PathBuf>) -> Self {
        Self::new(name, program, PathBuf::from("/dev/null"))
    }

    /// Runs it in its own process group, killed as a whole.
    pub fn own_group(mut self) -> Self {
        self.own_group = true;
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Removes an inherited environment variable.
    pub fn unset(mut self, key: &str) -> Self {
        self.unset.push(key.to_owned());
        self
    }

    /// The command line, shell-like, for messages.
    pub fn command_line(&self) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs it to completion (a command-line tool, a script, an
    /// installer), stdin closed, capturing stdout and stderr; blocks.
    pub fn output(&self) -> anyhow::Result<std::process::Output> {
        let mut cmd = std::process::Command::new(&self.program);
        for key in &self.unset {
            cmd.env_remove(key);
        }
        cmd.args(&self.args)
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", self.command_line()))
    }

    /// Starts the process (appending to its log file).
    pub fn spawn(&self) -> anyhow::Result<ChildProc> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let stdout = if self.pipe_stdout {
            Stdio::piped()
        } else {
            Stdio::from(log.try_clone()?)
        };
        let mut cmd = Command::new(&self.program);
        for key in &self.unset {
            cmd.env_remove(key);
        }
        cmd.args(&self.args)
            // Plain logs: no colour codes in the log files.
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        if self.own_group {
            cmd.process_group(0);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {} ({})", self.name, self.program.display()))?;
        let pid = child.id().unwrap_or(0);
        Ok(ChildProc {
            spec: self.clone(),
            child,
            pid,
            cpu_spent: 0.0,
        })
    }
}

/// A running child; SIGKILLed when dropped.
#[derive(Debug)]
pub struct ChildProc {
    spec: ProcSpec,
    child: Child,
    pid: u32,
    /// CPU seconds of earlier incarnations (before restarts).
    cpu_spent: f64,
}

impl ChildProc {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Its current process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its log file.
    pub fn log(&self) -> &std::path::Path {
        &self.spec.log
    }

    /// Reads stdout until a line starting with `prefix`; returns the rest of
    /// that line. Later stdout goes to the log file. Fails if the process
    /// exits or `timeout` passes first.
    pub async fn wait_line(&mut self, prefix: &str, timeout: Duration) -> anyhow::Result<String> {
        let mut found = self.wait_lines(&[prefix], timeout).await?;
        found
            .pop()
            .with_context(|| format!("{}: no line found", self.spec.name))
    }

    /// Like [`wait_line`](Self::wait_line) for several lines, in the order
    /// the child prints them: the rest of the first line starting with each
    /// prefix, in the order of `prefixes`.
    pub async fn wait_lines(
        &mut self,
        prefixes: &[&str],
        timeout: Duration,
    ) -> anyhow::Result<Vec<String>> {
        let Some(stdout) = self.child.stdout.take() else {
            bail!("{}: stdout is not piped", self.spec.name);
        };
        let mut lines = BufReader::new(stdout).lines();
        let mut got: Vec<Option<String>> = vec![None; prefixes.len()];
        let found = tokio::time::timeout(timeout, async {
            while let Some(line) = lines.next_line().await? {
                // Longest prefix first: `kv-events on ` is not `kv-events replay on `.
                let hit = prefixes
                    .iter()
                    .enumerate()
                    .filter(|(i, p)| got[*i].is_none() && line.starts_with(**p))
                    .max_by_key(|(_, p)| p.len())
                    .map(|(i, p)| (i, line[p.len()..].trim().to_owned()));
                if let Some((i, rest)) = hit {
                    got[i] = Some(rest);
                }
                if got.iter().all(Option::is_some) {
                    return Ok::<_, std::io::Error>(true);
                }
            }
            Ok(false)
        })
        .await;
        let log = self.spec.log.clone();
        let missing = || {
            prefixes
                .iter()
                .zip(&got)
                .filter(|(_, g)| g.is_none())
                .map(|(p, _)| format!("{p:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match found {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => bail!(
                "{} exited before printing {}; see {}",
                self.spec.name,
                missing(),
                log.display()
            ),
            Ok(Err(e)) => return Err(e).context(format!("reading {}'s stdout", self.spec.name)),
            Err(_) => bail!(
                "{} did not print {} within {timeout:?}; see {}",
                self.spec.name,
                missing(),
                log.display()
            ),
        }
        // Keep draining stdout so that the child never blocks on a full pipe.
        tokio::spawn(async move {
            let Ok(mut f) = tokio::fs::OpenOptions::new().append(true).open(&log).await else {
                return;
            };
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = f.write_all(line.as_bytes()).await;
                let _ = f.write_all(b"\n").await;
            }
        });
        Ok(got.into_iter().flatten().collect())
    }

    /// CPU time (user + system) used so far, over every incarnation.
    pub fn cpu_seconds(&self) -> f64 {
        self.cpu_spent + proc_cpu_seconds(self.pid).unwrap_or(0.0)
    }

    /// Whether the process has exited (and how), without waiting.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends `signal` (`libc::SIGTERM`, …) to it, without waiting.
    pub fn signal(&self, signal: libc::c_int) {
        signal_pid(self.pid, signal);
    }

    /// SIGTERM, as an orchestrator stops it, without waiting.
    pub fn signal_term(&self) {
        self.signal(libc::SIGTERM);
    }

    /// SIGTERM, as an orchestrator stops it, then waits up to `patience`
    /// for its exit (then SIGKILL); blocks.
    pub fn terminate(&mut self, patience: Duration) {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + patience;
        while self.exited().is_none() {
            if Instant::now() > deadline {
                self.kill_now();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, like a crash, without waiting for it to be reaped.
    pub fn kill_now(&mut self) {
        self.kill_group();
        let _ = self.child.start_kill();
    }

    /// SIGKILL, like a crash, and reap it.
    pub async fn kill(&mut self) {
        self.cpu_spent += proc_cpu_seconds(self.pid).unwrap_or(0.0);
        self.kill_group();
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }

    /// SIGKILL to the process group, when it has its own.
    fn kill_group(&self) {
        if self.spec.own_group && self.pid > 0 {
            // SAFETY: killpg has no memory effects; the group is the one
            // spawn created for this child (its pid is the group id).
            unsafe {
                libc::killpg(self.pid as libc::pid_t, libc::SIGKILL);
            }
        }
    }

    /// Starts it again with the same command (after [`kill`](Self::kill)).
    pub async fn respawn(&mut self) -> anyhow::Result<()> {
        let spec = self.spec.clone();
        self.respawn_as(spec).await
    }

    /// Starts it again with `spec` (after [`kill`](Self::kill)); CPU time
    /// keeps adding up over incarnations.
    pub async fn respawn_as(&mut self, spec: ProcSpec) -> anyhow::Result<()> {
        if self.exited().is_none() {
            self.kill().await;
        }
        let fresh = spec.spawn()?;
        let spent = self.cpu_spent;
        *self = fresh;
        self.cpu_spent = spent;
        Ok(())
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        // kill_on_drop reaches the child alone; its own children too.
        if self.child.try_wait().ok().flatten().is_none() {
            self.kill_group();
        }
    }
}

/// Polls `url` until it answers 2xx; fails after `timeout`, or early if
/// `child` exits.
pub async fn wait_http_ok(
    http: &reqwest::Client,
    url: &str,
    timeout: Duration,
    mut child: Option<&mut ChildProc>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let ok = http
            .get(url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .map(|r| r.status().is_success())
            .unwrap_or(false);
        if ok {
            return Ok(());
        }
        if let Some(c) = child.as_deref_mut()
            && let Some(status) = c.exited()
        {
            bail!(
                "{} exited ({status}) before {url} answered; see {}",
                c.name(),
                c.log().display()
            );
        }
        if Instant::now() > deadline {
            bail!("{url} did not answer 2xx within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends `signal` to process `pid` (one this fleet did not start itself,
/// e.g. one a script started and wrote down); false if it is gone.
pub fn signal_pid(pid: u32, signal: libc::c_int) -> bool {
    if pid == 0 {
        return false;
    }
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}
