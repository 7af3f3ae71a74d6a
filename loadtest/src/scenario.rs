//! Fault scenarios, applied once in the middle of a run: every router
//! SIGKILLed and restarted, Valkey SIGKILLed and restarted (empty or from
//! its append-only file), a cluster primary SIGKILLed (its replica takes
//! over), one worker SIGKILLed, or every worker stopped with SIGTERM and
//! restarted in turn (a rolling restart).

use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

use crate::topology::Fleet;

/// What happens during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Nothing: steady state.
    Steady,
    /// All routers killed (SIGKILL) and restarted.
    RouterRestart,
    /// Valkey killed and restarted.
    ValkeyRestart,
    /// A Valkey Cluster primary killed; its replica is promoted.
    ValkeyFailover,
    /// One worker killed (it stays down).
    WorkerKill,
    /// Every worker stopped with SIGTERM and restarted, one after another.
    RollingRestart,
}

impl FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "steady" => Ok(Scenario::Steady),
            "router-restart" => Ok(Scenario::RouterRestart),
            "valkey-restart" => Ok(Scenario::ValkeyRestart),
            "valkey-failover" => Ok(Scenario::ValkeyFailover),
            "worker-kill" => Ok(Scenario::WorkerKill),
            "rolling-restart" => Ok(Scenario::RollingRestart),
            _ => Err(format!(
                "unknown scenario {s:?}: expected steady, router-restart, valkey-restart, valkey-failover, worker-kill or rolling-restart"
            )),
        }
    }
}

impl Scenario {
    /// Its name on the command line and in the report.
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Steady => "steady",
            Scenario::RouterRestart => "router-restart",
            Scenario::ValkeyRestart => "valkey-restart",
            Scenario::ValkeyFailover => "valkey-failover",
            Scenario::WorkerKill => "worker-kill",
            Scenario::RollingRestart => "rolling-restart",
        }
    }

    /// Whether it has an event (all but steady).
    pub fn has_event(&self) -> bool {
        *self != Scenario::Steady
    }
}

/// How the scenario's event is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSettings {
    /// Down time between the kill and the restart.
    pub down_for: Duration,
    /// Valkey comes back from its append-only file (else empty).
    pub valkey_keeps_data: bool,
}

/// Carries out `scenario`'s event on `fleet`; returns what was done.
pub async fn apply(
    scenario: Scenario,
    fleet: &mut Fleet,
    settings: EventSettings,
) -> anyhow::Result<String> {
    match scenario {
        Scenario::Steady => Ok("nothing".into()),
        Scenario::RouterRestart => {
            fleet.kill_routers().await;
            tokio::time::sleep(settings.down_for).await;
            fleet.restart_routers().await?;
            Ok(format!(
                "every router SIGKILLed, restarted after {:.1} s",
                settings.down_for.as_secs_f64()
            ))
        }
        Scenario::ValkeyRestart => {
            fleet.kill_valkey().await;
            tokio::time::sleep(settings.down_for).await;
            fleet.restart_valkey(settings.valkey_keeps_data).await?;
            Ok(format!(
                "Valkey SIGKILLed, restarted after {:.1} s {}",
                settings.down_for.as_secs_f64(),
                if settings.valkey_keeps_data {
                    "from its append-only file"
                } else {
                    "empty"
                }
            ))
        }
        Scenario::ValkeyFailover => fleet.fail_over_primary().await,
        Scenario::WorkerKill => {
            let id = fleet.kill_sim(0).await?;
            Ok(format!("worker {id} SIGKILLed (stays down)"))
        }
        Scenario::RollingRestart => {
            let n = fleet.sim_ids().len();
            fleet.restart_sims(Duration::from_secs(30)).await?;
            Ok(format!(
                "{n} workers SIGTERMed and restarted one after another"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in [
            Scenario::Steady,
            Scenario::RouterRestart,
            Scenario::ValkeyRestart,
            Scenario::ValkeyFailover,
            Scenario::WorkerKill,
            Scenario::RollingRestart,
        ] {
            assert_eq!(s.name().parse::<Scenario>(), Ok(s));
        }
        assert!("x".parse::<Scenario>().is_err());
        assert!(!Scenario::Steady.has_event());
    }
}
