//! Mid-stream migration on real engines (issue 29): a greedy answer whose
//! engine is killed (SIGKILL) mid-stream completes on the other engine and
//! equals, token for token, the same request answered without the kill.
//!
//! For each case: the request goes straight to both engines with
//! `return_token_ids` (the twins: equal ids on both engines show that the
//! seeded dummy weights and greedy decoding agree across engines); then
//! through router 0, and after `kill_after` content events the engine
//! serving it (the router's worker header) is killed with its whole
//! process group. The client's answer must end whole (one envelope, a
//! `finish_reason`, `[DONE]`), equal the twin (token ids when the client
//! asked for them, else text and usage, and no ids reach it), and router
//! 0 must count one migration. The killed engine is started again for the
//! next case.

use anyhow::Context;
use serde::Serialize;
use serde_json::{Value, json};

use super::answer::{Streamed, stream};
use super::topology::{MODEL, Topology};
use crate::workload::{Api, Words};

/// One migration case.
#[derive(Debug, Clone)]
pub struct Case {
    /// What it exercises.
    pub name: &'static str,
    /// Completions or chat.
    pub api: Api,
    /// The body, as a client sends it.
    pub body: Value,
}

/// The cases: completions and chat, each without and with the client's
/// own `return_token_ids`; greedy, `ignore_eos`, `max_tokens` long enough
/// to kill the engine mid-answer.
///
/// Greedy alone, the tiny dummy-weight model loops over two tokens, and
/// a lost or repeated pair would go unseen; `repetition_penalty` makes
/// every token of the answer differ. It keeps the continuation exact:
/// vLLM applies it to every token of the prompt and of the output alike,
/// and the continuation's prompt is the first prompt plus the output so
/// far (unlike `presence_penalty` and `frequency_penalty`, which count
/// the output only: the router does not migrate those).
pub fn cases(max_tokens: u32) -> Vec<Case> {
    let mut w = Words::new(29);
    let common = json!({
        "model": MODEL, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": true,
        "repetition_penalty": 1.5,
        "stream": true, "stream_options": { "include_usage": true },
    });
    let with = |extra: Value| {
        let mut b = common.clone();
        if let (Some(b), Some(extra)) = (b.as_object_mut(), extra.as_object()) {
            b.extend(extra.clone());
        }
        b
    };
    let prompt = format!("Continue the story. {}", w.text(300));
    let messages = json!([
        { "role": "system", "content": format!("You are a storyteller. {}", w.text(150)) },
        { "role": "user", "content": format!("Tell me a long story about {}", w.text(150)) }
    ]);
    vec![
        Case {
            name: "completions, greedy",
            api: Api::Completions,
            body: with(json!({ "prompt": prompt })),
        },
        Case {
            name: "chat, greedy",
            api: Api::Chat,
            body: with(json!({ "messages": messages })),
        },
        Case {
            name: "completions, greedy, client asks return_token_ids",
            api: Api::Completions,
            body: with(
                json!({ "prompt": format!("Another one. {}", w.text(250)), "return_token_ids": true }),
            ),
        },
        Case {
            name: "chat, greedy, client asks return_token_ids",
            api: Api::Chat,
            body: with(json!({
                "messages": [{ "role": "user", "content": format!("Once more: {}", w.text(250)) }],
                "return_token_ids": true,
            })),
        },
    ]
}

/// The outcome of one case.
#[derive(Debug, Clone, Serialize)]
pub struct Migrated {
    /// The case.
    pub name: &'static str,
    /// The engine killed mid-answer.
    pub killed: String,
    /// Content events the client had when the kill was sent.
    pub killed_after: usize,
    /// Content events of the whole answer.
    pub events: usize,
    /// `usage.completion_tokens` of the answer / of its twin.
    pub tokens: (u64, u64),
    /// The twins (straight to each engine) had equal token ids.
    pub twins_equal: bool,
    /// What was compared with the twin.
    pub compared: &'static str,
    /// It equalled the twin.
    pub equal: bool,
    /// Same usage as the twin (prompt and completion tokens).
    pub usage_equal: bool,
    /// One envelope, a finish reason, `[DONE]`, no error event.
    pub whole: bool,
    /// Ids reached the client exactly when it asked for them.
    pub ids_as_asked: bool,
    /// Migrations router 0 counted during the answer.
    pub moved: u64,
    /// The answer's error event, if any.
    pub error: Option<String>,
}

impl Migrated {
    /// The check passed for this case.
    pub fn ok(&self) -> bool {
        self.twins_equal
            && self.equal
            && self.usage_equal
            && self.whole
            && self.ids_as_asked
            && self.moved == 1
            && self.killed_after > 0
            && self.killed_after < self.events
    }
}

/// `prefix_router_migrations_total{outcome="migrated"}` of `router`.
async fn migrations(http: &reqwest::Client, router: &str) -> anyhow::Result<u64> {
    let text = http
        .get(format!("{router}/metrics"))
        .send()
        .await
        .context("router metrics")?
        .text()
        .await?;
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("prefix_router_migrations_total{") && l.contains("outcome=\"migrated\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

fn path(api: Api) -> &'static str {
    match api {
        Api::Completions => "/v1/completions",
        Api::Chat => "/v1/chat/completions",
    }
}

/// Runs `case`: the twins, then the answer through router 0 with its
/// engine killed after `kill_after` content events; restarts that engine.
pub async fn run(t: &mut Topology, case: &Case, kill_after: usize) -> anyhow::Result<Migrated> {
    let http = reqwest::Client::new();
    let mut asking = case.body.clone();
    asking["return_token_ids"] = json!(true);
    let urls: Vec<String> = t
        .engines
        .iter()
        .map(|e| format!("{}{}", e.url(), path(case.api)))
        .collect();
    let (a, b) = tokio::join!(
        stream(&http, &urls[0], &asking, |_, _| {}),
        stream(&http, &urls[1], &asking, |_, _| {})
    );
    let (twin, other) = (a?, b?);
    let twins_equal = twin.complete() && !twin.ids().is_empty() && twin.ids() == other.ids();
    eprintln!(
        "real-engine: migration {}: twins {} tokens, equal {twins_equal}",
        case.name,
        twin.ids().len()
    );

    let router = t.router_urls()[0].clone();
    let before = migrations(&http, &router).await?;
    let mut killed: Option<(usize, usize)> = None;
    let engines = &mut t.engines;
    let got = stream(
        &http,
        &format!("{router}{}", path(case.api)),
        &case.body,
        |n, worker| {
            if killed.is_some() || n < kill_after {
                return;
            }
            if let Some(i) = engines.iter().position(|e| Some(e.name.as_str()) == worker) {
                engines[i].proc.kill_now();
                killed = Some((i, n));
            }
        },
    )
    .await?;
    let moved = migrations(&http, &router).await?.saturating_sub(before);
    let (i, killed_after) = killed.context("the answer ended before the kill")?;
    let outcome = compare(case, &twin, &got, moved, killed_after, twins_equal);
    outcome_log(&outcome, &t.engines[i].name);
    t.restart_engine(i).await?;
    t.wait_registered().await?;
    Ok(Migrated {
        killed: t.engines[i].name.clone(),
        ..outcome
    })
}

fn compare(
    case: &Case,
    twin: &Streamed,
    got: &Streamed,
    moved: u64,
    killed_after: usize,
    twins_equal: bool,
) -> Migrated {
    let client_ids = case.body["return_token_ids"] == json!(true);
    let (compared, equal) = if client_ids {
        (
            "token ids and text",
            got.ids() == twin.ids() && got.text() == twin.text(),
        )
    } else {
        ("text and usage", got.text() == twin.text())
    };
    let ids_as_asked = if client_ids {
        got.ids().len() as u64 == got.usage().map_or(0, |u| u.1)
    } else {
        got.events_with_ids() == 0
    };
    Migrated {
        name: case.name,
        killed: String::new(),
        killed_after,
        events: got.content_events(),
        tokens: (
            got.usage().map_or(0, |u| u.1),
            twin.usage().map_or(0, |u| u.1),
        ),
        twins_equal,
        compared,
        equal,
        usage_equal: got.usage().is_some() && got.usage() == twin.usage(),
        whole: got.complete(),
        ids_as_asked,
        moved,
        error: got.error(),
    }
}

fn outcome_log(m: &Migrated, engine: &str) {
    eprintln!(
        "real-engine: migration {}: killed {engine} after {} of {} events; tokens {} / twin {}; \
         equal {} ({}), usage equal {}, whole {}, ids as asked {}, moved {}{}",
        m.name,
        m.killed_after,
        m.events,
        m.tokens.0,
        m.tokens.1,
        m.equal,
        m.compared,
        m.usage_equal,
        m.whole,
        m.ids_as_asked,
        m.moved,
        m.error
            .as_ref()
            .map_or(String::new(), |e| format!(", error: {e}"))
    );
}

/// The migration section of the report.
pub fn table(rows: &[Migrated], max_tokens: u32, kill_after: usize) -> String {
    let mut s = format!(
        "\n## Mid-stream migration\n\n\
         Each request (greedy, `ignore_eos`, `repetition_penalty` 1.5, `max_tokens` {max_tokens}, \
         streamed with usage) is \
         first sent straight to both engines with `return_token_ids` (the twins), then through \
         router 0 (`--migration-limit 3`); after {kill_after} content events the engine serving \
         it (the router's `x-prefix-router-worker` header) is killed with SIGKILL (its process \
         group), and the answer must end whole on the other engine, equal to the twin; router 0 \
         must count one migration. The killed engine is started again after each case.\n\n\
         | case | killed | killed after / events | tokens (answer / twin) | twins equal | compared | equal | usage equal | whole | ids as asked | migrations | |\n\
         |---|---|---:|---:|---|---|---|---|---|---|---:|---|\n"
    );
    let yes = |b: bool| if b { "yes" } else { "NO" };
    for m in rows {
        s.push_str(&format!(
            "| {} | {} | {} / {} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            m.name,
            m.killed,
            m.killed_after,
            m.events,
            m.tokens.0,
            m.tokens.1,
            yes(m.twins_equal),
            m.compared,
            yes(m.equal),
            yes(m.usage_equal),
            yes(m.whole),
            yes(m.ids_as_asked),
            m.moved,
            if m.ok() { "ok" } else { "FAILED" }
        ));
    }
    for m in rows.iter().filter(|m| m.error.is_some()) {
        s.push_str(&format!(
            "\n{}: error event: {}\n",
            m.name,
            m.error.as_deref().unwrap_or_default()
        ));
    }
    s
}
