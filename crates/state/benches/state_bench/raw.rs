//! Raw access to the server, beside the store: INFO, CONFIG, SLOWLOG,
//! MEMORY, and measurement windows over command stats and the slowlog.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use redis::Value;
use redis::aio::MultiplexedConnection;
use state::ScriptName;

use crate::fixtures::function_of;

/// A plain connection to the bench's valkey-server.
pub struct Raw {
    pub conn: MultiplexedConnection,
}

/// One command's line of `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CmdStat {
    pub calls: u64,
    pub usec: u64,
    pub usec_per_call: f64,
    pub failed_calls: u64,
}

fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

pub fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

pub fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

impl Raw {
    pub async fn connect(url: &str) -> Result<Self> {
        let client = redis::Client::open(url)?;
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(Duration::from_secs(120)));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Raw { conn })
    }

    pub async fn cmd<T: redis::FromRedisValue>(&mut self, args: &[&str]) -> Result<T> {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query_async(&mut self.conn)
            .await
            .with_context(|| args.join(" "))
    }

    pub async fn info(&mut self, section: &str) -> Result<BTreeMap<String, String>> {
        let text: String = self.cmd(&["INFO", section]).await?;
        Ok(parse_info(&text))
    }

    pub async fn info_u64(&mut self, section: &str, field: &str) -> Result<u64> {
        self.info(section)
            .await?
            .get(field)
            .with_context(|| format!("INFO {section} has no {field}"))?
            .parse()
            .with_context(|| format!("INFO {section} {field}"))
    }

    pub async fn config_get(&mut self, name: &str) -> Result<String> {
        let v: Vec<String> = self.cmd(&["CONFIG", "GET", name]).await?;
        Ok(v.get(1).cloned().unwrap_or_default())
    }

    /// `used_memory` after MEMORY PURGE (jemalloc) and a short settle.
    pub async fn used_memory(&mut self) -> Result<u64> {
        let _: Value = self.cmd(&["MEMORY", "PURGE"]).await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.info_u64("memory", "used_memory").await
    }

    pub async fn command_stats(&mut self) -> Result<BTreeMap<String, CmdStat>> {
        let info = self.info("commandstats").await?;
        let mut out = BTreeMap::new();
        for (k, v) in info {
            let Some(name) = k.strip_prefix("cmdstat_") else {
                continue;
            };
            let mut s = CmdStat::default();
            for kv in v.split(',') {
                match kv.split_once('=') {
                    Some(("calls", x)) => s.calls = x.parse()?,
                    Some(("usec", x)) => s.usec = x.parse()?,
                    Some(("usec_per_call", x)) => s.usec_per_call = x.parse()?,
                    Some(("failed_calls", x)) => s.failed_calls = x.parse()?,
                    _ => {}
                }
            }
            out.insert(name.to_owned(), s);
        }
        Ok(out)
    }

    /// Every SLOWLOG entry: (duration in usec, arguments as logged).
    async fn slowlog(&mut self) -> Result<Vec<(u64, Vec<String>)>> {
        let v: Value = self.cmd(&["SLOWLOG", "GET", "-1"]).await?;
        let Value::Array(entries) = v else {
            bail!("SLOWLOG GET: unexpected reply {v:?}")
        };
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let Value::Array(f) = e else { continue };
            let (Some(dur), Some(Value::Array(args))) = (f.get(2).and_then(as_i64), f.get(3))
            else {
                continue;
            };
            let args = args.iter().filter_map(as_string).collect();
            out.push((u64::try_from(dur).unwrap_or(0), args));
        }
        Ok(out)
    }

    /// p50, p99 and p100 of `cmd` from INFO latencystats (usec; HDR
    /// histogram, ~1% resolution); needs latency-tracking-info-percentiles
    /// "50 99 100".
    async fn latency(&mut self, cmd: &str) -> Result<Option<[f64; 3]>> {
        let info = self.info("latencystats").await?;
        let Some(v) = info.get(&format!("latency_percentiles_usec_{cmd}")) else {
            return Ok(None);
        };
        let mut out = [f64::NAN; 3];
        for kv in v.split(',') {
            match kv.split_once('=') {
                Some(("p50", x)) => out[0] = x.parse()?,
                Some(("p99", x)) => out[1] = x.parse()?,
                Some(("p100", x)) => out[2] = x.parse()?,
                _ => {}
            }
        }
        Ok(Some(out))
    }

    /// Starts a measurement window: fresh command and latency stats, and an
    /// empty slowlog.
    pub async fn begin(&mut self) -> Result<()> {
        let _: Value = self.cmd(&["SLOWLOG", "RESET"]).await?;
        let _: Value = self.cmd(&["CONFIG", "RESETSTAT"]).await?;
        Ok(())
    }

    /// Ends a window: stats of `cmd` (fcall or fcall_ro) and the slowlog
    /// entries (calls over 1 ms) as (usec, function).
    pub async fn window(&mut self, cmd: &str) -> Result<Window> {
        let stat = self
            .command_stats()
            .await?
            .get(cmd)
            .copied()
            .unwrap_or_default();
        let lat = self.latency(cmd).await?;
        let slow = self
            .slowlog()
            .await?
            .into_iter()
            .filter(|(_, a)| a.first().is_some_and(|c| c.eq_ignore_ascii_case(cmd)))
            .map(|(d, a)| (d, a.get(1).cloned().unwrap_or_default().to_lowercase()))
            .collect();
        Ok(Window { stat, lat, slow })
    }
}

/// What one measurement window saw of one command.
pub struct Window {
    pub stat: CmdStat,
    pub lat: Option<[f64; 3]>,
    slow: Vec<(u64, String)>,
}

impl Window {
    /// Sorted durations of the logged (over 1 ms) calls of `script`.
    pub fn slow_of(&self, script: ScriptName) -> Vec<u64> {
        let function = function_of(script);
        let mut d: Vec<u64> = self
            .slow
            .iter()
            .filter(|(_, s)| *s == function)
            .map(|(d, _)| *d)
            .collect();
        d.sort_unstable();
        d
    }
}
