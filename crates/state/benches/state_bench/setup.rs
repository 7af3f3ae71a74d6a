//! The run's setup: server settings for the bench (slowlog off, latency
//! percentiles), a Lua calibration, and the facts reported under `## Setup`.

use anyhow::Result;
use redis::Value;

use crate::raw::Raw;

/// `/proc/loadavg` (Linux), to show whether other work shared the CPUs.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unavailable".into())
}

/// What the `## Setup` section reports about the server.
pub struct Setup {
    pub version: String,
    pub allocator: String,
    /// usec per `redis.call('PING')` iteration, one per calibration run.
    pub calib: Vec<String>,
    /// "`name` = value" for each server setting reported.
    pub cfg: Vec<String>,
}

impl Setup {
    /// Reads the server's version and allocator, sets the bench's server
    /// config, calibrates Lua call overhead and reads the reported settings.
    pub async fn probe(raw: &mut Raw) -> Result<Self> {
        let server = raw.info("server").await?;
        let version = server
            .get("valkey_version")
            .or_else(|| server.get("redis_version"))
            .cloned()
            .unwrap_or_default();
        let allocator = raw
            .info("memory")
            .await?
            .get("mem_allocator")
            .cloned()
            .unwrap_or_default();
        // The slowlog is off while memory is measured (its entries live in
        // used_memory); section B turns it on for calls over 1 ms.
        for (k, v) in [
            ("slowlog-log-slower-than", "-1"),
            ("slowlog-max-len", "100000"),
            ("latency-tracking-info-percentiles", "50 99 100"),
        ] {
            let _: Value = raw.cmd(&["CONFIG", "SET", k, v]).await?;
        }
        let mut calib = Vec::new();
        for _ in 0..3 {
            let _: Value = raw.cmd(&["CONFIG", "RESETSTAT"]).await?;
            let _: Value = raw
                .cmd(&[
                    "EVAL",
                    "for i = 1, 10000 do redis.call('PING') end return 1",
                    "0",
                ])
                .await?;
            let us = raw.command_stats().await?.get("eval").map_or(0, |s| s.usec);
            calib.push(format!("{:.2}", us as f64 / 10_000.0));
        }
        let mut cfg = Vec::new();
        for name in [
            "hash-max-listpack-entries",
            "hash-max-listpack-value",
            "set-max-listpack-entries",
            "set-max-listpack-value",
            "set-max-intset-entries",
            "maxmemory",
            "lazyfree-lazy-user-flush",
            "latency-tracking",
        ] {
            cfg.push(format!("`{name}` = {}", raw.config_get(name).await?));
        }
        Ok(Setup {
            version,
            allocator,
            calib,
            cfg,
        })
    }
}
