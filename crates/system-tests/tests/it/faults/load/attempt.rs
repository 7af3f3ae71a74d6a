//! One request's attempts: sent again on a failure that produced nothing
//! (see the module's rules), its answer checked, and its routing explained.

use super::*;

/// Request ids, unique in the test process (every prompt differs).
pub(super) static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A completion body for document `doc` and a new question.
pub fn body(doc: &str, id: u64, max_tokens: u32, stream: bool) -> Value {
    let prompt = format!("{doc}Question {id}: what does the document say?");
    let mut b =
        json!({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": stream});
    if stream {
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

pub(super) fn secs(epoch: Instant) -> f64 {
    epoch.elapsed().as_secs_f64()
}

pub(super) async fn one(
    client: &reqwest::Client,
    target: &str,
    doc_text: &str,
    doc: usize,
    streamed: bool,
    cfg: &LoadConfig,
    epoch: Instant,
) -> Record {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let body = body(doc_text, id, cfg.max_tokens, streamed);
    let mut rec = Record {
        id,
        doc,
        streamed,
        sent: secs(epoch),
        attempts: Vec::new(),
        ok: false,
        worker: None,
        routed: None,
        cached_tokens: None,
        believed: None,
        prompt_tokens: None,
    };
    if cfg.explain {
        explain(client, target, &body, &mut rec).await;
    }
    for n in 0..cfg.max_attempts {
        if n > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let start = secs(epoch);
        let result = match tokio::time::timeout(
            cfg.attempt_timeout,
            attempt(client, target, &body, &mut rec),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => AttemptEnd::Timeout,
        };
        let retry = result.retryable();
        rec.ok = result == AttemptEnd::Ok;
        rec.attempts.push(Attempt {
            start,
            end: secs(epoch),
            result,
        });
        if !retry {
            break;
        }
    }
    rec
}

pub(super) async fn explain(
    client: &reqwest::Client,
    target: &str,
    body: &Value,
    rec: &mut Record,
) {
    let Ok(resp) = client
        .post(format!("{target}/admin/explain"))
        .bearer_auth(TOKEN)
        .json(body)
        .send()
        .await
    else {
        return;
    };
    let Ok(v) = resp.json::<Value>().await else {
        return;
    };
    rec.prompt_tokens = v["prompt_tokens"].as_u64();
    if let Some(rows) = v["candidates"].as_array() {
        rec.believed = Some(
            rows.iter()
                .filter_map(|c| {
                    Some((
                        c["worker_id"].as_str()?.to_owned(),
                        c["matched_blocks"].as_u64()?,
                    ))
                })
                .collect(),
        );
    }
}

pub(super) async fn attempt(
    client: &reqwest::Client,
    target: &str,
    body: &Value,
    rec: &mut Record,
) -> AttemptEnd {
    let resp = match client
        .post(format!("{target}/v1/completions"))
        .json(body)
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => return AttemptEnd::NoResponse(error_chain(&e)),
    };
    let status = resp.status().as_u16();
    if status != 200 {
        let text = resp.text().await.unwrap_or_default();
        return AttemptEnd::Status(status, text.chars().take(200).collect());
    }
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (worker, routed, cached) = (
        header("x-sim-worker"),
        header("x-prefix-router-worker"),
        header("x-sim-cached-tokens").and_then(|c| c.parse().ok()),
    );
    let streamed = body["stream"] == true;
    let mut usage_prompt = None;
    if !streamed {
        let bytes = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => return AttemptEnd::CutBody(error_chain(&e)),
        };
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => usage_prompt = v["usage"]["prompt_tokens"].as_u64(),
            Err(e) => return AttemptEnd::CutBody(format!("incomplete JSON: {e}")),
        }
    } else {
        let mut stream = resp.bytes_stream();
        let mut text = String::new();
        let mut tokens = false;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => {
                    text.push_str(&String::from_utf8_lossy(&b));
                    tokens |= text.contains("\"text\"");
                }
                Err(e) if tokens => return AttemptEnd::CutStream(error_chain(&e)),
                Err(e) => return AttemptEnd::CutBody(error_chain(&e)),
            }
        }
        if !text.contains("data: [DONE]") {
            let why = "stream ended without [DONE]".to_owned();
            return if tokens {
                AttemptEnd::CutStream(why)
            } else {
                AttemptEnd::CutBody(why)
            };
        }
        for line in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
            if let Ok(v) = serde_json::from_str::<Value>(line)
                && let Some(p) = v["usage"]["prompt_tokens"].as_u64()
            {
                usage_prompt = Some(p);
            }
        }
    }
    rec.worker = worker;
    rec.routed = routed;
    rec.cached_tokens = cached;
    if rec.prompt_tokens.is_none() {
        rec.prompt_tokens = usage_prompt;
    }
    AttemptEnd::Ok
}

/// An error and its sources, on one line.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
