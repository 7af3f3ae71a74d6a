//! [`Reader`]: the one plain connection inspect reads through, and lenient
//! decoders of raw replies (a corrupt state must be reported, not crash the
//! reader). Only read commands go through here (plus MULTI/EXEC around
//! reads), so a user with `+@read +time +multi +exec` suffices.

use std::time::Duration;

use redis::Value;
use redis::aio::MultiplexedConnection;

use super::InspectError;
use super::redact::{Redactor, redact_url};
use crate::{ConnectionSettings, normalize_url};

/// Entries asked for per SCAN/HSCAN/SSCAN/ZSCAN call.
pub(crate) const SCAN_COUNT: usize = 512;

/// A connection for reading, with the URL's secrets kept out of errors.
pub(crate) struct Reader {
    conn: MultiplexedConnection,
    redactor: Redactor,
    url: String,
}

impl Reader {
    /// Connects to `settings.url` (TLS, user and password from the URL, as
    /// for `serve`); every call is bounded by `settings.bulk_timeout`.
    pub(crate) async fn connect(settings: &ConnectionSettings) -> Result<Self, InspectError> {
        let redactor = Redactor::new(&settings.url);
        let url = redact_url(&settings.url);
        let normalized = normalize_url(&settings.url)?;
        let client =
            redis::Client::open(normalized.as_str()).map_err(|e| InspectError::Invalid {
                what: "valkey url",
                detail: redactor.clean(&e.to_string()),
            })?;
        let t = settings.bulk_timeout;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(t))
            .set_response_timeout(Some(t));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| InspectError::Valkey {
                url: url.clone(),
                context: "connecting".into(),
                detail: redactor.clean(&e.to_string()),
            })?;
        Ok(Reader {
            conn,
            redactor,
            url,
        })
    }

    /// The URL, password redacted.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    fn error(&self, context: &str, e: redis::RedisError) -> InspectError {
        InspectError::Valkey {
            url: self.url.clone(),
            context: context.to_owned(),
            detail: self.redactor.clean(&e.to_string()),
        }
    }

    /// One command's raw reply.
    pub(crate) async fn cmd(
        &mut self,
        context: &str,
        cmd: &redis::Cmd,
    ) -> Result<Value, InspectError> {
        let r = cmd.query_async::<Value>(&mut self.conn).await;
        r.map_err(|e| self.error(context, e))
    }

    /// A pipeline's replies, one per command; a command that failed (say
    /// WRONGTYPE on a corrupt key) gives a `Value::ServerError` in its place.
    /// `atomic` wraps the reads in MULTI/EXEC: one consistent snapshot.
    pub(crate) async fn pipe(
        &mut self,
        context: &str,
        mut pipe: redis::Pipeline,
        atomic: bool,
    ) -> Result<Vec<Value>, InspectError> {
        if atomic {
            pipe.atomic();
        }
        pipe.ignore_errors();
        let r = pipe.query_async::<Vec<Value>>(&mut self.conn).await;
        r.map_err(|e| self.error(context, e))
    }

    /// The server's clock in unix ms (the scripts' `now_ms`).
    pub(crate) async fn now_ms(&mut self) -> Result<i64, InspectError> {
        let v = self.cmd("TIME", &redis::cmd("TIME")).await?;
        time_ms(&v).ok_or_else(|| InspectError::Reply {
            context: "TIME".into(),
            detail: format!("{v:?}"),
        })
    }

    /// One page of `SCAN` (no key) or `HSCAN`/`SSCAN`/`ZSCAN` of `key`:
    /// the next cursor (0 when done) and the page's items.
    pub(crate) async fn scan_page(
        &mut self,
        command: &'static str,
        key: Option<&str>,
        cursor: u64,
        pattern: Option<&str>,
    ) -> Result<(u64, Vec<Value>), InspectError> {
        let mut cmd = redis::cmd(command);
        if let Some(k) = key {
            cmd.arg(k);
        }
        cmd.arg(cursor);
        if let Some(p) = pattern {
            cmd.arg("MATCH").arg(p);
        }
        cmd.arg("COUNT").arg(SCAN_COUNT);
        let v = self.cmd(command, &cmd).await?;
        scan_reply(&v).ok_or_else(|| InspectError::Reply {
            context: format!("{command} {}", key.unwrap_or("")),
            detail: "not a [cursor, items] pair".into(),
        })
    }

    /// Every item of `HSCAN`/`SSCAN`/`ZSCAN key` (for small keys: leases,
    /// ids, purge, routers, the view).
    pub(crate) async fn scan_all(
        &mut self,
        command: &'static str,
        key: &str,
    ) -> Result<Vec<Value>, InspectError> {
        let mut out = Vec::new();
        let mut cursor = 0;
        loop {
            let (next, items) = self.scan_page(command, Some(key), cursor, None).await?;
            out.extend(items);
            if next == 0 {
                return Ok(out);
            }
            cursor = next;
        }
    }
}

/// Decodes `[cursor, [items...]]`.
pub(crate) fn scan_reply(v: &Value) -> Option<(u64, Vec<Value>)> {
    match v {
        Value::Array(parts) if parts.len() == 2 => {
            let cursor = text(&parts[0])?.parse().ok()?;
            match &parts[1] {
                Value::Array(items) | Value::Set(items) => Some((cursor, items.clone())),
                _ => None,
            }
        }
        _ => None,
    }
}

/// `TIME`'s `[seconds, microseconds]` as unix ms.
pub(crate) fn time_ms(v: &Value) -> Option<i64> {
    match v {
        Value::Array(p) if p.len() == 2 => {
            let s: i64 = text(&p[0])?.parse().ok()?;
            let us: i64 = text(&p[1])?.parse().ok()?;
            Some(s * 1000 + us / 1000)
        }
        _ => None,
    }
}

/// The bytes of a string reply; `None` for nil, errors and aggregates.
pub(crate) fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        Value::VerbatimString { text, .. } => Some(text.clone().into_bytes()),
        Value::Int(i) => Some(i.to_string().into_bytes()),
        Value::Double(d) => Some(d.to_string().into_bytes()),
        _ => None,
    }
}

/// A string reply as UTF-8 text (lossy).
pub(crate) fn text(v: &Value) -> Option<String> {
    bytes(v).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// An integer reply (or a string holding one).
pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::Boolean(b) => Some(i64::from(*b)),
        other => text(other)?.trim().parse().ok(),
    }
}

/// A score (ZSCORE, ZSCAN): float in ms, truncated.
pub(crate) fn score(v: &Value) -> Option<i64> {
    match v {
        Value::Double(d) => Some(*d as i64),
        other => text(other)?.trim().parse::<f64>().ok().map(|d| d as i64),
    }
}

/// True when the reply is a server error (the read could not be made).
pub(crate) fn is_error(v: &Value) -> bool {
    matches!(v, Value::ServerError(_))
}

/// SMISMEMBER's reply as booleans; `None` if it failed.
pub(crate) fn flags(v: &Value) -> Option<Vec<bool>> {
    match v {
        Value::Array(items) => items.iter().map(|i| int(i).map(|n| n == 1)).collect(),
        _ => None,
    }
}

/// A flat `[k, v, k, v...]` (or RESP3 map) as pairs of byte strings.
pub(crate) fn pairs(v: &Value) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    match v {
        Value::Array(items) => Some(pairs_of(items)),
        Value::Map(m) => m
            .iter()
            .map(|(k, v)| Some((bytes(k)?, bytes(v)?)))
            .collect(),
        _ => None,
    }
}

/// Pairs of a flat item list (scan pages).
pub(crate) fn pairs_of(items: &[Value]) -> Vec<(Vec<u8>, Vec<u8>)> {
    items
        .chunks_exact(2)
        .filter_map(|kv| Some((bytes(&kv[0])?, bytes(&kv[1])?)))
        .collect()
}

/// A duration as a flag value: `0` or e.g. `250ms`, `30s`, `1h`.
pub(crate) fn parse_delay(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    protocol::parse_duration(s)
}
