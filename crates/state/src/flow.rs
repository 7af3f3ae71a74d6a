//! Flow control's fleet-wide waiting room (`flow_dispatch.lua`,
//! `flow_leave.lua`): whether a model's workers are saturated, an arriving
//! request's place in the fleet's order, and which of this router's waiting
//! requests may be dispatched now. Kept on the model's first part, so a
//! sharded model has one waiting room.

use std::time::Duration;

use super::ttl::ms;
use super::views::bad_reply;
use super::{Lane, ScriptName, StateError, StateStore};

/// When a model's workers count as saturated: a worker is past its limits
/// when any configured threshold is reached; the model is saturated when
/// every live worker is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SaturationThresholds {
    /// Requests in flight to one worker, over every router (0: no limit).
    pub max_in_flight: u64,
    /// Requests the worker reports waiting in its queue.
    pub waiting: Option<u64>,
    /// The worker's reported KV cache usage, 0 to 1.
    pub kv_usage: Option<f64>,
    /// Prompt tokens routed to it and not yet past their first token.
    pub prefill_tokens: Option<u64>,
    /// Reported load older than this is ignored (as routing ignores it).
    pub stale_load: Duration,
}

/// A request arriving in the waiting room.
#[derive(Debug, Clone)]
pub struct FlowArrival<'a> {
    /// Its member: see [`flow_member`].
    pub member: &'a str,
    /// Its priority (higher first; negative: sheddable).
    pub priority: i32,
    /// Its tenant (who shares a priority's capacity by weight).
    pub tenant: &'a str,
    /// The tenant's weight, > 0.
    pub weight: f64,
    /// Whether it may wait (else it is dispatched at once or refused).
    pub may_wait: bool,
}

/// Where an arriving request went.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// No request arrived in this call.
    None,
    /// Dispatched at once: route it now.
    Dispatched,
    /// Waiting, at this virtual start tag in its priority.
    Queued(f64),
    /// Neither: saturated (or others wait ahead) and it may not wait.
    Refused,
}

/// What [`StateStore::flow_dispatch`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowDispatch {
    /// Every live worker is past the thresholds.
    pub saturated: bool,
    /// The arriving request's place.
    pub arrival: Arrival,
    /// Entries waiting fleet-wide, after this call.
    pub waiting: u64,
    /// Free capacity left after this call.
    pub free: u64,
    /// This router's waiting members dispatched by this call.
    pub dispatched: Vec<String>,
    /// This router's members dispatched by earlier calls and not yet
    /// routed: a call whose reply was lost (a timeout of the routing lane
    /// while Valkey still ran it) may have dispatched some that still
    /// wait in the router, which hands them on now.
    pub held: Vec<String>,
}

/// The member naming a waiting request in the shared state: this router's
/// id, its sequence number, its deadline (unix ms); an entry past its
/// deadline, or of a router whose lease ended, is dropped by the next call.
pub fn flow_member(router: &str, seq: u64, deadline_ms: u64) -> String {
    format!("{router}\t{seq}\t{deadline_ms}")
}

impl StateStore {
    /// The waiting room's step for `model`: with `arrival`, places it;
    /// then dispatches this router's waiting entries as far as the free
    /// capacity reaches in the fleet's order. A dispatched entry holds its
    /// place in the capacity for `route_within`, or until
    /// [`flow_leave`](Self::flow_leave) says it was routed.
    pub async fn flow_dispatch(
        &self,
        model: &str,
        limits: &SaturationThresholds,
        route_within: Duration,
        arrival: Option<&FlowArrival<'_>>,
    ) -> Result<FlowDispatch, StateError> {
        const S: ScriptName = ScriptName::FlowDispatch;
        let part = self.flow_part(model)?;
        // This router's in-flight counts weigh only under its lease: a new
        // router's first requests must count before the script judges the
        // capacity, or the next would see a free place they hold.
        self.lease_if_new(model).await;
        let opt = |x: Option<String>| x.unwrap_or_else(|| "-1".to_owned());
        let mut args = vec![
            self.router_id().to_owned(),
            limits.max_in_flight.to_string(),
            opt(limits.waiting.map(|w| w.to_string())),
            opt(limits.kv_usage.map(|k| k.to_string())),
            opt(limits.prefill_tokens.map(|p| p.to_string())),
            ms(limits.stale_load),
            ms(route_within),
        ];
        match arrival {
            None => args.push("0".to_owned()),
            Some(a) => {
                if !(a.weight.is_finite() && a.weight > 0.0) {
                    return Err(StateError::Invalid {
                        what: "tenant weight",
                        detail: format!("{} is not a positive number", a.weight),
                    });
                }
                args.extend([
                    "1".to_owned(),
                    a.member.to_owned(),
                    a.priority.to_string(),
                    a.tenant.to_owned(),
                    a.weight.to_string(),
                    if a.may_wait { "1" } else { "0" }.to_owned(),
                ]);
            }
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply: Vec<redis::Value> = self.run(Lane::Hot, S, &part, &argv).await?;
        parse_dispatch(&reply)
    }

    /// Takes `members` out of `model`'s waiting room: `Some(priority)` for
    /// a waiting one (timed out, shed, its client gone), `None` for a
    /// dispatched one now routed. Returns how many were still there.
    pub async fn flow_leave(
        &self,
        model: &str,
        members: &[(String, Option<i32>)],
    ) -> Result<u64, StateError> {
        if members.is_empty() {
            return Ok(0);
        }
        let part = self.flow_part(model)?;
        let mut args = vec![members.len().to_string()];
        for (m, p) in members {
            args.push(m.clone());
            args.push(p.map(|p| p.to_string()).unwrap_or_default());
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        self.run(Lane::Hot, ScriptName::FlowLeave, &part, &argv)
            .await
    }

    /// Whether `model`'s waiting room holds anything: entries waiting or
    /// dispatched and not yet routed (perhaps expired: the next
    /// [`flow_dispatch`](Self::flow_dispatch) drops those). One read of two
    /// keys of one slot on the routing lane: the one call a request makes
    /// when this router's view says the workers take more, so that it does
    /// not go past entries waiting on other routers.
    pub async fn flow_busy(&self, model: &str) -> Result<bool, StateError> {
        let part = self.flow_part(model)?;
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(&self.keys().flow_busy(&part));
        let n: u64 = self
            .inner
            .conns
            .with_hot(|mut c| async move {
                cmd.query_async(&mut c)
                    .await
                    .map_err(|e| StateError::from_redis("flow busy", e))
            })
            .await?;
        Ok(n > 0)
    }

    /// The part holding `model`'s waiting room: its first.
    fn flow_part(&self, model: &str) -> Result<String, StateError> {
        let parts = self.parts(model)?;
        parts.first().cloned().ok_or_else(|| StateError::Invalid {
            what: "model",
            detail: "has no parts".into(),
        })
    }
}

fn parse_dispatch(reply: &[redis::Value]) -> Result<FlowDispatch, StateError> {
    const S: ScriptName = ScriptName::FlowDispatch;
    let int = |v: &redis::Value| match v {
        redis::Value::Int(n) => Ok(*n),
        other => Err(bad_reply(S, format!("not an integer: {other:?}"))),
    };
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => {
            String::from_utf8(b.clone()).map_err(|_| bad_reply(S, "a member is not UTF-8"))
        }
        other => Err(bad_reply(S, format!("not a string: {other:?}"))),
    };
    if reply.len() < 6 {
        return Err(bad_reply(S, format!("{} values", reply.len())));
    }
    let k = usize::try_from(int(&reply[5])?).unwrap_or(usize::MAX);
    let Some(end) = 6usize.checked_add(k).filter(|end| *end <= reply.len()) else {
        return Err(bad_reply(
            S,
            format!("{k} dispatched of {} values", reply.len()),
        ));
    };
    let arrival = match int(&reply[1])? {
        0 => Arrival::None,
        1 => Arrival::Dispatched,
        2 => Arrival::Queued(
            text(&reply[2])?
                .parse()
                .map_err(|_| bad_reply(S, "a virtual tag is not a number"))?,
        ),
        3 => Arrival::Refused,
        n => return Err(bad_reply(S, format!("arrival {n}"))),
    };
    Ok(FlowDispatch {
        saturated: int(&reply[0])? == 1,
        arrival,
        waiting: u64::try_from(int(&reply[3])?).unwrap_or(0),
        free: u64::try_from(int(&reply[4])?).unwrap_or(0),
        dispatched: reply[6..end].iter().map(text).collect::<Result<_, _>>()?,
        held: reply[end..].iter().map(text).collect::<Result<_, _>>()?,
    })
}
