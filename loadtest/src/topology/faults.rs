//! The faults a scenario applies to a running [`Fleet`]: routers,
//! sims and Valkey killed or restarted, a cluster primary failed over;
//! and the record of which workers stopped when.

use anyhow::{Context, bail};

use super::{Fleet, companion_spec, router_spec};

impl Fleet {
    /// Stops every sim-worker with SIGTERM (up to `patience` each, then
    /// SIGKILL) and starts it again, one after another, each live again
    /// before the next stops (a rolling restart). Only for fleets whose
    /// workers report (a restarted sim has a new port).
    pub async fn restart_sims(&mut self, patience: std::time::Duration) -> anyhow::Result<()> {
        for i in 0..self.sims.len() {
            self.stops
                .push((self.sims[i].id.clone(), std::time::Instant::now()));
            let proc = &mut self.sims[i].proc;
            tokio::task::block_in_place(|| proc.terminate(patience));
            let sim = self.start_one_sim(i, true).await?;
            self.sims[i] = sim;
            self.wait_workers_live().await?;
        }
        Ok(())
    }

    /// SIGKILLs every router replica (and its companion).
    pub async fn kill_routers(&mut self) {
        for r in &mut self.routers {
            r.kill().await;
        }
        for c in self.companions.iter_mut().flatten() {
            c.kill().await;
        }
    }

    /// Starts every router replica again on its port (after
    /// [`kill_routers`](Self::kill_routers)) and waits for their health.
    /// Isolated routers come back with an empty view of their own, like an
    /// in-memory router after a restart (see [`LaunchContext::generation`]).
    pub async fn restart_routers(&mut self) -> anyhow::Result<()> {
        self.generation += 1;
        for i in 0..self.routers.len() {
            let ctx = self.launch_context(i);
            if let (Some(spec), Some(Some(c))) = (
                companion_spec(&self.spec.arm.kind, &ctx, &self.spec.dir),
                self.companions.get_mut(i),
            ) {
                c.respawn_as(spec).await?;
            }
            let spec = router_spec(
                &self.spec.arm.kind,
                &self.router_common(),
                &ctx,
                &self.spec.dir,
            );
            self.routers[i].respawn_as(spec).await?;
        }
        self.wait_routers().await
    }

    /// SIGKILLs Valkey (on a cluster: its first primary, whose replica
    /// takes over).
    pub async fn kill_valkey(&mut self) {
        self.valkey.kill();
    }

    /// Starts Valkey again on its port: from its append-only file when
    /// `keep_data`, otherwise empty.
    pub async fn restart_valkey(&mut self, keep_data: bool) -> anyhow::Result<()> {
        if keep_data && !self.spec.valkey_aof {
            bail!("restarting Valkey with its data needs the append-only file (--valkey-aof)");
        }
        self.valkey.restart(keep_data)
    }

    /// SIGKILLs the cluster's first primary and waits until its replica
    /// serves its slots; says what happened.
    pub async fn fail_over_primary(&mut self) -> anyhow::Result<String> {
        let valkey = &self.valkey;
        tokio::task::block_in_place(|| valkey.fail_over())
    }

    /// SIGKILLs sim-worker `index`; returns its id.
    pub async fn kill_sim(&mut self, index: usize) -> anyhow::Result<String> {
        let sim = self
            .sims
            .get_mut(index)
            .with_context(|| format!("no sim-worker {index}"))?;
        self.stops.push((sim.id.clone(), std::time::Instant::now()));
        sim.proc.kill().await;
        Ok(sim.id.clone())
    }

    /// The workers stopped so far by [`kill_sim`](Self::kill_sim) and
    /// [`restart_sims`](Self::restart_sims), and when each was.
    pub fn stops(&self) -> &[(String, std::time::Instant)] {
        &self.stops
    }
}
