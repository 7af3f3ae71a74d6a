//! A tenant's fleet-wide limits (`limit_admit.lua`, `limit_settle.lua`,
//! `limit_lease.lua`): requests and tokens per window as GCRA arrival
//! times, and requests in flight per router under a lease. Every key of a
//! tenant shares its hash tag ([`KeySpace::tenant_base`]), so each call
//! touches one cluster slot. Admission is one call on the routing lane,
//! within the routing deadline; settling and leases go on the bulk lane.
//!
//! [`KeySpace::tenant_base`]: super::KeySpace::tenant_base

use std::time::Duration;

use redis::FromRedisValue;

use super::scripts::ScriptName;
use super::{Lane, StateError, StateStore, check_name};

/// One rate limit as the script takes it: each unit of cost pushes the
/// arrival time on by `interval_us`; a request conforms while the arrival
/// time stays within `tolerance_us` of now (or within its own cost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gcra {
    /// Microseconds per unit: the window over the limit.
    pub interval_us: u64,
    /// How far ahead of now the arrival time may run (the burst).
    pub tolerance_us: u64,
}

/// What to check one request against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitCheck {
    /// Requests per window, if limited.
    pub requests: Option<Gcra>,
    /// Tokens per window, if limited.
    pub tokens: Option<Gcra>,
    /// This request's tokens (its reservation).
    pub cost: u64,
    /// Requests in flight at once, if limited.
    pub max_concurrent: Option<u64>,
}

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitReason {
    /// Requests per window.
    Requests,
    /// Tokens per window.
    Tokens,
    /// Requests in flight.
    Concurrency,
}

impl LimitReason {
    /// Its name in metrics and explain.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitReason::Requests => "requests",
            LimitReason::Tokens => "tokens",
            LimitReason::Concurrency => "concurrency",
        }
    }
}

/// The script's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitVerdict {
    /// `None`: admitted (or, dry, it would be).
    pub refused: Option<LimitReason>,
    /// How far the requests arrival time is ahead of now, µs (after the
    /// admission, when admitted).
    pub requests_debt_us: u64,
    /// The same for tokens.
    pub tokens_debt_us: u64,
    /// How long until a retry could pass the rate limits, µs.
    pub wait_us: u64,
    /// The tenant's requests in flight over the fleet (after admission).
    pub in_flight: u64,
}

impl StateStore {
    /// Admits one request of `tenant` against `check`, all or nothing, in
    /// one call on the routing lane; `dry`: only says whether it would be.
    pub async fn limit_admit(
        &self,
        tenant: &str,
        check: &LimitCheck,
        dry: bool,
    ) -> Result<LimitVerdict, StateError> {
        let (rq, tk) = (
            check.requests.unwrap_or_default(),
            check.tokens.unwrap_or_default(),
        );
        let args = [
            self.router_id().to_owned(),
            super::ttl::ms(self.ttls().router_lease),
            rq.interval_us.to_string(),
            rq.tolerance_us.to_string(),
            tk.interval_us.to_string(),
            tk.tolerance_us.to_string(),
            check.cost.to_string(),
            check.max_concurrent.unwrap_or(0).to_string(),
            if dry { "1" } else { "0" }.to_owned(),
        ];
        let reply: Vec<i64> = self
            .run_tenant(Lane::Hot, ScriptName::LimitAdmit, tenant, &args)
            .await?;
        let bad = || StateError::Script {
            script: ScriptName::LimitAdmit.file(),
            detail: format!("unexpected reply {reply:?}"),
        };
        let [admitted, reason, rq_debt, tk_debt, wait, held] = reply[..] else {
            return Err(bad());
        };
        let refused = match (admitted, reason) {
            (1, _) => None,
            (_, 1) => Some(LimitReason::Requests),
            (_, 2) => Some(LimitReason::Tokens),
            (_, 3) => Some(LimitReason::Concurrency),
            _ => return Err(bad()),
        };
        let us = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(LimitVerdict {
            refused,
            requests_debt_us: us(rq_debt),
            tokens_debt_us: us(tk_debt),
            wait_us: us(wait),
            in_flight: us(held),
        })
    }

    /// The end of an admitted request of `tenant`: its tokens corrected by
    /// `token_delta` (what it used minus what was reserved) under
    /// `tokens`, and, when `release`, its place in flight given back.
    pub async fn limit_settle(
        &self,
        tenant: &str,
        tokens: Option<Gcra>,
        token_delta: i64,
        release: bool,
    ) -> Result<(), StateError> {
        let args = [
            self.router_id().to_owned(),
            tokens.unwrap_or_default().interval_us.to_string(),
            token_delta.to_string(),
            if release { "1" } else { "0" }.to_owned(),
        ];
        let _: i64 = self
            .run_tenant(Lane::Bulk, ScriptName::LimitSettle, tenant, &args)
            .await?;
        Ok(())
    }

    /// Renews this router's lease on `held` requests in flight for
    /// `tenant` (0 ends it); returns the tenant's requests in flight over
    /// every live router.
    pub async fn limit_lease(
        &self,
        tenant: &str,
        held: u64,
        lease: Duration,
    ) -> Result<u64, StateError> {
        let args = [
            self.router_id().to_owned(),
            super::ttl::ms(lease),
            held.to_string(),
        ];
        let total: i64 = self
            .run_tenant(Lane::Bulk, ScriptName::LimitLease, tenant, &args)
            .await?;
        Ok(u64::try_from(total).unwrap_or(0))
    }

    /// Runs a limit script on `tenant`'s keys (KEYS[1] and ARGV[1] after
    /// the library's contract, from the tenant's base).
    async fn run_tenant<T: FromRedisValue>(
        &self,
        lane: Lane,
        name: ScriptName,
        tenant: &str,
        args: &[String],
    ) -> Result<T, StateError> {
        check_name("tenant", tenant)?;
        let base = self.keys().tenant_base(tenant);
        let ids = format!("{base}:ids");
        let mut argv: Vec<&[u8]> = Vec::with_capacity(args.len() + 1);
        argv.push(base.as_bytes());
        argv.extend(args.iter().map(|a| a.as_bytes()));
        let scripts = &self.inner.scripts;
        let call = |mut c| {
            let (ids, argv) = (&ids, &argv);
            async move { scripts.call(&mut c, name, &[ids], argv).await }
        };
        match lane {
            Lane::Hot => self.inner.conns.with_hot(call).await,
            Lane::Bulk => self.inner.conns.with_bulk(call).await,
        }
    }
}
