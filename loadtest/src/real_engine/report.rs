//! The real-engine check's result as markdown, and whether it passed.

use super::RealEngineArgs;
use super::exactness::{Row, Verdict, table};
use super::follow::Followed;
use super::migration::{self, Migrated};
use crate::metrics::Summary;

/// One RAG arm.
#[derive(Debug, Clone)]
pub struct Rag {
    /// The routers' `--policy`.
    pub policy: String,
    /// Its measurements.
    pub summary: Summary,
}

/// Everything the check found.
#[derive(Debug)]
pub struct Report<'a> {
    /// The exactness rows.
    pub rows: Vec<Row>,
    /// The follow checks.
    pub followed: Vec<Followed>,
    /// The migration cases (empty when skipped).
    pub migrated: Vec<Migrated>,
    /// The RAG arms (empty when skipped).
    pub rag: Vec<Rag>,
    /// KV-event messages captured.
    pub frames: usize,
    /// How it ran.
    pub args: &'a RealEngineArgs,
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.0}"))
}

impl Report<'_> {
    /// Every request agreed and the index followed every event.
    pub fn passed(&self) -> bool {
        (!self.rows.is_empty() || self.args.migration_only)
            && (!self.migrated.is_empty() || self.args.skip_migration)
            && self.migrated.iter().all(Migrated::ok)
            && self.rows.iter().all(|r| r.verdict != Verdict::Mismatch)
            && self
                .rows
                .iter()
                .filter(|r| r.round == 2)
                .all(|r| r.verdict == Verdict::Exact)
            && self.followed.iter().all(Followed::ok)
    }

    /// The report.
    pub fn markdown(&self) -> String {
        let a = self.args;
        let count = |v| self.rows.iter().filter(|r| r.verdict == v).count();
        let (exact, granular) = (count(Verdict::Exact), count(Verdict::Granular));
        let mut s = format!(
            "# Real vLLM engines behind the fleet\n\n\
             Date: {}. Command: `{}`.\n\
             Two vLLM CPU engines (block size {}, {} KV blocks each, `sha256_cbor`, `PYTHONHASHSEED=0`), \
             a reporter beside each, Valkey, two routers behind HAProxy.\n",
            chrono::Local::now().format("%Y-%m-%d %H:%M"),
            std::env::args().collect::<Vec<_>>().join(" "),
            a.block_size,
            a.gpu_blocks,
        );
        if !self.rows.is_empty() {
            s.push_str(&format!(
                "\n## Router's match against the engine's cached tokens\n\n\
                 Each request is explained, then sent, through router 0 (send 1), then again through \
                 router 1 (send 2); 'matched by router' is what the index held on the serving worker, \
                 'expected cached' the same less the last token vLLM always computes, 'engine cached' \
                 is `usage.prompt_tokens_details.cached_tokens` (for a list of prompts, vLLM reports the \
                 last prompt's). **{exact} of {} requests exact; {granular} short within the index's \
                 granularity** (the engine's prefix ends between two indexed blocks: the index holds \
                 anchors and tips, see docs/state.md); the rest, if any, are mismatches. A repeated \
                 prompt (send 2) must be exact.\n\n",
                self.rows.len(),
            ));
            s.push_str(&table(&self.rows));
        }
        if !self.followed.is_empty() {
            s.push_str(
                "\n## The index follows the engine\n\n\
                 | event | engine | matched before | router matched nothing after | probe again: router matched / engine cached | |\n\
                 |---|---|---:|---:|---:|---|\n",
            );
        }
        for f in &self.followed {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} / {} | {} |\n",
                f.event,
                f.engine,
                f.matched_before,
                f.cleared_after_s
                    .map_or("never (60 s)".to_owned(), |t| format!("{t:.1} s")),
                f.after.expected_cached,
                f.after.engine_cached,
                if f.ok() { "ok" } else { "FAILED" }
            ));
        }
        if !self.migrated.is_empty() {
            s.push_str(&migration::table(
                &self.migrated,
                a.migration_tokens,
                a.kill_after,
            ));
        }
        if !self.rag.is_empty() {
            s.push_str(&format!(
                "\n## RAG through the fleet\n\n\
                 {} documents of {} words, {} req/s for {} s, completions, from cold caches; \
                 hit rate = Σ engine cached tokens / Σ prompt tokens (vLLM's own counts).\n\n\
                 | policy | requests | failed | hit rate | TTFT p50 ms | TTFT p99 ms | imbalance |\n\
                 |---|---:|---:|---:|---:|---:|---:|\n",
                a.rag_documents,
                a.rag_doc_words,
                a.rag_rate,
                a.rag_duration.as_secs()
            ));
            for r in &self.rag {
                let m = &r.summary;
                s.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {} | {} |\n",
                    r.policy,
                    m.requests,
                    m.failed,
                    m.hit_rate
                        .map_or("–".to_owned(), |h| format!("{:.1}%", h * 100.0)),
                    opt_ms(m.ttft_ms.as_ref().map(|p| p.p50)),
                    opt_ms(m.ttft_ms.as_ref().map(|p| p.p99)),
                    m.imbalance.map_or("–".to_owned(), |i| format!("{i:.2}")),
                ));
            }
        }
        s.push_str(&format!(
            "\n{} KV-event messages captured (frames.json).\n\n**{}**\n",
            self.frames,
            if self.passed() { "PASSED" } else { "FAILED" }
        ));
        s
    }
}
