//! For one request: what the router's explain says the serving worker holds
//! against what the engine says it reused (`usage.prompt_tokens_details.
//! cached_tokens`), and the router's prompt length against the engine's.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use serde::Serialize;
use serde_json::Value;

use super::cases::Case;
use crate::client::Client;

/// The router's view of one prompt, from `POST /admin/explain`.
#[derive(Debug, Clone)]
pub struct Explained {
    /// Its length in tokens, as the router tokenized it.
    pub prompt_tokens: u64,
    /// Matched tokens per worker id (full blocks the index holds).
    pub matched: BTreeMap<String, u64>,
}

/// Asks `router` how it would route `body` (read-only).
pub async fn explain(
    http: &reqwest::Client,
    router: &str,
    token: &str,
    body: &Value,
) -> anyhow::Result<Explained> {
    let resp = http
        .post(format!("{router}/admin/explain"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .with_context(|| format!("explain at {router}"))?;
    let status = resp.status();
    let v: Value = resp.json().await.context("reading the explain")?;
    if !status.is_success() {
        bail!("explain at {router}: HTTP {status}: {v}");
    }
    let matched = v["candidates"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|r| {
                    Some((
                        r["worker_id"].as_str()?.to_owned(),
                        r["matched_tokens"].as_u64()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Explained {
        prompt_tokens: v["prompt_tokens"].as_u64().unwrap_or(0),
        matched,
    })
}

/// The tokens an engine reuses for a prompt of `prompt_tokens` of which the
/// index says `matched` are cached: vLLM always computes a prompt's last
/// token, so a fully cached prompt reuses one block less.
pub fn expected_cached(matched: u64, prompt_tokens: u64, block_size: u64) -> u64 {
    let reusable = prompt_tokens.saturating_sub(1) / block_size * block_size;
    matched.min(reusable)
}

/// How the router's match compares with the engine's count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// Equal, and the prompt lengths too.
    Exact,
    /// Short of the engine's count but no shorter than the index's rule
    /// allows: the engine's prefix ends between two indexed blocks
    /// (`protocol::index`), and the router credits the last one held.
    Granular,
    /// Anything else: more than the engine has, less than the rule
    /// guarantees, a different prompt length, or a failed request.
    Mismatch,
}

/// The blocks an index following `protocol::index` must see of a prefix of
/// `blocks` held blocks: up to the last anchor within it.
fn anchor_floor(blocks: u64) -> u64 {
    (1..=blocks)
        .rev()
        .find(|&n| protocol::index::is_anchor(n as usize - 1))
        .unwrap_or(0)
}

/// Judges a request: `expected` and `engine` cached tokens, prompt lengths
/// `router_len` and `engine_len`.
pub fn verdict(expected: u64, engine: u64, router_len: u64, engine_len: u64, bs: u64) -> Verdict {
    if router_len != engine_len {
        Verdict::Mismatch
    } else if expected == engine {
        Verdict::Exact
    } else if expected < engine && expected >= anchor_floor(engine / bs) * bs {
        Verdict::Granular
    } else {
        Verdict::Mismatch
    }
}

/// One request of the check.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The case's name.
    pub case: String,
    /// 1 or 2 (the second send of the same body).
    pub round: u32,
    /// Which router it went through (0 or 1).
    pub router: usize,
    /// The worker that served it.
    pub worker: String,
    /// Prompt tokens: the router's count.
    pub router_prompt_tokens: u64,
    /// Prompt tokens: the engine's `usage.prompt_tokens`.
    pub engine_prompt_tokens: u64,
    /// Tokens the router's index held on the serving worker.
    pub matched_tokens: u64,
    /// `matched_tokens` as the engine can reuse them ([`expected_cached`]).
    pub expected_cached: u64,
    /// The engine's `usage.prompt_tokens_details.cached_tokens`.
    pub engine_cached: u64,
    /// How they compare.
    pub verdict: Verdict,
    /// What went wrong, if the request failed.
    pub error: Option<String>,
}

/// Explains `case` at `router`, then sends it there, and compares.
pub async fn check(
    http: &reqwest::Client,
    routers: &[String],
    router: usize,
    token: &str,
    block_size: u64,
    case: &Case,
    round: u32,
) -> anyhow::Result<Row> {
    let url = &routers[router];
    let mut parts = Vec::new();
    for body in case.parts() {
        parts.push(explain(http, url, token, &body).await?);
    }
    let client = Client::new(url, std::time::Duration::from_secs(120))?;
    let out = client.send(case.api, &case.body).await;
    let worker = out.worker.clone().unwrap_or_default();
    // vLLM reports a list's cached tokens as those of its last prompt.
    let last = parts.last().context("a case has a prompt")?;
    let matched = last.matched.get(&worker).copied().unwrap_or(0);
    let expected = expected_cached(matched, last.prompt_tokens, block_size);
    let router_prompt_tokens = parts.iter().map(|p| p.prompt_tokens).sum();
    let engine_prompt_tokens = out.prompt_tokens.unwrap_or(0);
    // The engine leaves out prompt_tokens_details when nothing was cached.
    let engine_cached = out.cached_tokens.unwrap_or(0);
    let error = if out.ok() { None } else { out.error.clone() };
    Ok(Row {
        case: case.name.to_owned(),
        round,
        router,
        worker,
        router_prompt_tokens,
        engine_prompt_tokens,
        matched_tokens: matched,
        expected_cached: expected,
        engine_cached,
        verdict: if error.is_none() {
            verdict(
                expected,
                engine_cached,
                router_prompt_tokens,
                engine_prompt_tokens,
                block_size,
            )
        } else {
            Verdict::Mismatch
        },
        error,
    })
}

/// The rows as a markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| case | send | router | worker | prompt tokens (router / engine) | matched by router | expected cached | engine cached | |\n|---|---:|---:|---|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} / {} | {} | {} | {} | {} |\n",
            r.case,
            r.round,
            r.router,
            r.worker,
            r.router_prompt_tokens,
            r.engine_prompt_tokens,
            r.matched_tokens,
            r.expected_cached,
            r.engine_cached,
            match (&r.error, r.verdict) {
                (Some(e), _) => format!("FAILED: {e}"),
                (None, Verdict::Exact) => "exact".to_owned(),
                (None, Verdict::Granular) => "short: between indexed blocks".to_owned(),
                (None, Verdict::Mismatch) => "MISMATCH".to_owned(),
            }
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fully_cached_prompt_reuses_one_block_less() {
        // 301 tokens, 9 full blocks of 32 held: the engine reuses 288.
        assert_eq!(expected_cached(288, 301, 32), 288);
        // 320 tokens, all 10 blocks held: the last token is computed, so 9.
        assert_eq!(expected_cached(320, 320, 32), 288);
        assert_eq!(expected_cached(0, 320, 32), 0);
        assert_eq!(expected_cached(64, 1000, 32), 64);
    }

    #[test]
    fn the_router_may_be_short_only_down_to_the_last_anchor() {
        let v = |expected, engine| verdict(expected, engine, 900, 900, 32);
        assert_eq!(v(416, 416), Verdict::Exact);
        // 13 blocks held: anchors end 1, 2, 4, 8 blocks, so 8 are guaranteed.
        assert_eq!(v(256, 416), Verdict::Granular);
        assert_eq!(v(128, 416), Verdict::Mismatch);
        // 24 held: 16 guaranteed.
        assert_eq!(v(512, 768), Verdict::Granular);
        assert_eq!(v(256, 768), Verdict::Mismatch);
        // More than the engine has is always wrong.
        assert_eq!(v(448, 416), Verdict::Mismatch);
        assert_eq!(verdict(0, 0, 900, 901, 32), Verdict::Mismatch);
    }
}
