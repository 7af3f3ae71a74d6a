//! The fleet's routers: started, killed, stopped and restarted on their
//! ports, and HAProxy's view of them.

use super::*;

pub(super) async fn start_router(
    logs: &Path,
    i: usize,
    port: u16,
    valkey_url: &str,
    flags: &Flags,
) -> RouterProcess {
    let args = flags.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    RouterProcess::start_on(
        port,
        valkey_url,
        &args,
        &[("PREFIX_ROUTER_LOG", "warn")],
        Some(&logs.join(format!("router-{i}.log"))),
        PATIENCE,
    )
    .await
}

impl Fleet {
    /// SIGKILLs router `i`; returns the times just before the signal and
    /// once it was reaped.
    pub fn kill_router(&mut self, i: usize) -> (f64, f64) {
        let mut r = self.routers[i].take().expect("router is down");
        let before = self.now();
        r.kill();
        (before, self.mark(&format!("router r{i} SIGKILLed")))
    }

    /// SIGTERMs router `i` (graceful) and waits for its exit.
    pub fn terminate_router(&mut self, i: usize) -> f64 {
        let mut r = self.routers[i].take().expect("router is down");
        r.terminate();
        self.mark(&format!("router r{i} stopped (SIGTERM)"))
    }

    /// Starts router `i` again on its port; returns when it answers.
    pub async fn restart_router(&mut self, i: usize) -> f64 {
        assert!(self.routers[i].is_none(), "router r{i} is running");
        let r = start_router(
            &self.logs,
            i,
            self.router_ports[i],
            &self.router_valkey_url(),
            &self.spec.router_flags,
        )
        .await;
        self.routers[i] = Some(r);
        self.mark(&format!("router r{i} restarted"))
    }

    /// Waits until HAProxy sees router `i` up (or down); returns the time.
    pub async fn wait_balancer(&self, i: usize, up: bool) -> f64 {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let status = self.balancer.status(i);
            if status.starts_with(if up { "UP" } else { "DOWN" }) {
                return self.now();
            }
            assert!(
                Instant::now() < deadline,
                "HAProxy never saw r{i} {}: {status}",
                if up { "up" } else { "down" }
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
