//! Mooncake trace replay. Each line is `{"timestamp": ms, "input_length",
//! "output_length", "hash_ids": [...]}`, one hash id per 512-token block;
//! requests that share leading ids share a prefix. Each id becomes a fixed
//! pseudo-random run of 512 token ids (seeded by the id), so that equal ids
//! give byte-identical prompt prefixes; the prompt is the runs' concatenation
//! cut to `input_length`. With [`TraceOptions::text`], each id becomes a
//! fixed run of words instead (about 512 Qwen3 tokens), for routers that
//! take only text prompts: block boundaries fall on word boundaries, so
//! shared leading ids still give shared leading tokens.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use super::random::Rng64;
use super::text::Words;
use super::{Plan, Prompt, Session, Turn};

/// Tokens per trace block (Mooncake's).
pub const TRACE_BLOCK_TOKENS: usize = 512;
/// Token ids are drawn from `TOKEN_LO..TOKEN_HI`: ordinary Qwen3 tokens,
/// clear of the special and control tokens at either end of the vocabulary.
const TOKEN_LO: u32 = 1000;
const TOKEN_HI: u32 = 100_000;
/// Mixed into every block's seed, so that the runs are not SplitMix64's
/// plain sequence from small seeds.
const SALT: u64 = 0x6d6f_6f6e_6361_6b65;
/// Words per block of a text trace prompt: [`Words`] averages about 1.08
/// Qwen3 tokens a word, so 474 words are about one 512-token block.
pub const TRACE_BLOCK_WORDS: usize = 474;

/// One line of the trace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TraceEntry {
    /// Arrival time in milliseconds from the trace's start.
    pub timestamp: u64,
    /// Prompt length in tokens.
    pub input_length: usize,
    /// Answer length in tokens.
    pub output_length: usize,
    /// One id per 512-token block of the prompt.
    pub hash_ids: Vec<u64>,
}

/// A token-id prompt, expanded only when sent (a trace holds tens of
/// millions of tokens).
#[derive(Debug, Clone)]
pub struct TraceTokens {
    ids: Arc<[u64]>,
    len: usize,
}

impl TraceTokens {
    /// The prompt of `len` tokens made of the runs of `ids`; tokens past the
    /// ids' runs (a trace line with too few ids) come from a run seeded by
    /// the position after the last id, so they are fixed too.
    pub fn new(ids: &[u64], len: usize) -> Self {
        TraceTokens {
            ids: ids.into(),
            len,
        }
    }

    /// Its length in tokens.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no tokens.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The token ids.
    pub fn expand(&self) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len);
        let mut block = 0usize;
        while out.len() < self.len {
            let seed = block_seed(&self.ids, block);
            let take = (self.len - out.len()).min(TRACE_BLOCK_TOKENS);
            out.extend(block_tokens(seed).take(take));
            block += 1;
        }
        out
    }
}

/// The seed of a prompt's `block`-th block: its hash id, or past the ids
/// (a trace line with too few), padding unique to the prompt's last id and
/// the position.
fn block_seed(ids: &[u64], block: usize) -> u64 {
    match ids.get(block) {
        Some(id) => *id,
        None => {
            let last = ids.last().copied().unwrap_or(u64::MAX);
            last.rotate_left(32) ^ (block as u64) ^ 0xa5a5_0000_0000_0000
        }
    }
}

/// The 512 token ids of block `id`.
fn block_tokens(id: u64) -> impl Iterator<Item = u32> {
    let mut rng = Rng64::new(id ^ SALT);
    (0..TRACE_BLOCK_TOKENS)
        .map(move |_| TOKEN_LO + rng.below(u64::from(TOKEN_HI - TOKEN_LO)) as u32)
}

/// The text prompt of about `len` tokens made of the word runs of `ids`
/// ([`TRACE_BLOCK_WORDS`] each; padding as in [`TraceTokens::expand`]).
pub fn trace_text(ids: &[u64], len: usize) -> String {
    let words = (len * TRACE_BLOCK_WORDS).div_ceil(TRACE_BLOCK_TOKENS);
    let mut out = String::new();
    let mut block = 0usize;
    let mut left = words;
    while left > 0 {
        let run = Words::new(block_seed(ids, block) ^ SALT).text(TRACE_BLOCK_WORDS);
        let take = left.min(TRACE_BLOCK_WORDS);
        for w in run.split(' ').take(take) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(w);
        }
        left -= take;
        block += 1;
    }
    out
}

/// Parses a JSONL trace (blank lines skipped); errors name the line.
pub fn parse_trace(text: &str) -> anyhow::Result<Vec<TraceEntry>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let e: TraceEntry = serde_json::from_str(line)
            .with_context(|| format!("trace line {}: not a Mooncake entry", i + 1))?;
        if e.input_length == 0 {
            bail!("trace line {}: input_length is 0", i + 1);
        }
        out.push(e);
    }
    if out.is_empty() {
        bail!("the trace has no entries");
    }
    Ok(out)
}

/// How a trace is replayed.
#[derive(Debug, Clone)]
pub struct TraceOptions {
    /// Entries skipped at the start.
    pub offset: usize,
    /// At most this many entries (after the offset).
    pub limit: Option<usize>,
    /// Timestamps are divided by this (2 = twice as fast).
    pub speedup: f64,
    /// `max_tokens` is the entry's output length capped at this.
    pub max_output_tokens: usize,
    /// Prompts are cut to this many tokens, if set.
    pub max_input_tokens: Option<usize>,
    /// Send prompts as text (see the module docs) instead of token ids.
    pub text: bool,
}

/// Reads `path` and builds the replay plan: times relative to the first
/// replayed entry, divided by the speed-up.
pub fn trace_plan(path: &Path, opts: &TraceOptions) -> anyhow::Result<Plan> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let entries = parse_trace(&text).with_context(|| format!("in {}", path.display()))?;
    plan_from_entries(&entries, opts, &path.display().to_string())
}

/// The replay plan of `entries` (see [`trace_plan`]).
pub fn plan_from_entries(
    entries: &[TraceEntry],
    opts: &TraceOptions,
    source: &str,
) -> anyhow::Result<Plan> {
    if !(opts.speedup.is_finite() && opts.speedup > 0.0) {
        bail!("--speedup must be a positive number");
    }
    if opts.max_output_tokens == 0 {
        bail!("--max-output-tokens must be positive");
    }
    let chosen: Vec<&TraceEntry> = entries
        .iter()
        .skip(opts.offset)
        .take(opts.limit.unwrap_or(usize::MAX))
        .collect();
    let Some(first) = chosen.first() else {
        bail!(
            "the trace has {} entries; --trace-offset {} leaves none",
            entries.len(),
            opts.offset
        );
    };
    let t0 = first.timestamp;
    let sessions = chosen
        .iter()
        .map(|e| {
            let len = opts
                .max_input_tokens
                .map_or(e.input_length, |m| e.input_length.min(m));
            let ms = e.timestamp.saturating_sub(t0) as f64 / opts.speedup;
            Session {
                turns: vec![Turn {
                    at: Duration::from_secs_f64(ms / 1000.0),
                    prompt: if opts.text {
                        Prompt::Text(trace_text(&e.hash_ids, len))
                    } else {
                        Prompt::Tokens(TraceTokens::new(&e.hash_ids, len))
                    },
                    max_tokens: e.output_length.clamp(1, opts.max_output_tokens) as u32,
                }],
            }
        })
        .collect();
    Ok(Plan::new(
        format!(
            "Mooncake trace {source}{}: {} requests from entry {}, speed-up {}×, max_tokens ≤ {}{}",
            if opts.text { " as text" } else { "" },
            chosen.len(),
            opts.offset,
            opts.speedup,
            opts.max_output_tokens,
            opts.max_input_tokens
                .map(|m| format!(", prompts cut to {m} tokens"))
                .unwrap_or_default()
        ),
        sessions,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"{"timestamp": 0, "input_length": 1000, "output_length": 6, "hash_ids": [0, 1]}

{"timestamp": 2000, "input_length": 1100, "output_length": 900, "hash_ids": [0, 1, 2]}
{"timestamp": 5000, "input_length": 300, "output_length": 0, "hash_ids": [7]}
"#;

    fn opts() -> TraceOptions {
        TraceOptions {
            offset: 0,
            limit: None,
            speedup: 2.0,
            max_output_tokens: 64,
            max_input_tokens: None,
            text: false,
        }
    }

    #[test]
    fn parses_lines_and_reports_bad_ones() {
        let e = parse_trace(SAMPLE).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[1].hash_ids, [0, 1, 2]);
        let err = parse_trace("{\"timestamp\": 1}\n").unwrap_err();
        assert!(format!("{err:#}").contains("line 1"));
        assert!(parse_trace("\n").is_err());
    }

    #[test]
    fn text_prompts_share_prefixes_block_by_block() {
        let a = trace_text(&[7, 8, 9], 1200);
        let b = trace_text(&[7, 8, 10], 1536);
        let c = trace_text(&[6, 8, 9], 1200);
        let words = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        let (wa, wb, wc) = (words(&a), words(&b), words(&c));
        assert_eq!(wa.len(), (1200 * TRACE_BLOCK_WORDS).div_ceil(512));
        assert_eq!(wb.len(), 3 * TRACE_BLOCK_WORDS);
        assert_eq!(wa[..2 * TRACE_BLOCK_WORDS], wb[..2 * TRACE_BLOCK_WORDS]);
        assert_ne!(
            wa[2 * TRACE_BLOCK_WORDS..],
            wb[2 * TRACE_BLOCK_WORDS..wa.len()]
        );
        assert_ne!(wa[..10], wc[..10]);
        assert_eq!(a, trace_text(&[7, 8, 9], 1200));
    }

    #[test]
    fn text_prompts_tokenize_to_about_their_length_and_share_token_prefixes() {
        let dir = fleet::binaries::shared_tokenizer_dir();
        let seed = protocol::hashing::HashSeed::from_env_value(None);
        let p = tokenize::ModelPipeline::load(&dir, 16, &seed).unwrap();
        let a = p
            .tokenizer
            .encode(&trace_text(&[7, 8, 9], 1536), true)
            .unwrap();
        let b = p
            .tokenizer
            .encode(&trace_text(&[7, 8, 10], 1536), true)
            .unwrap();
        assert!((1383..=1690).contains(&a.len()), "{} tokens", a.len());
        let shared = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        // The first two blocks' words tokenize alike in both prompts.
        let two = p
            .tokenizer
            .encode(&trace_text(&[7, 8], 1024), true)
            .unwrap()
            .len();
        assert!(shared >= two - 1, "shared {shared} of {two}");
    }

    #[test]
    fn shared_ids_share_exact_prefixes() {
        let a = TraceTokens::new(&[0, 1], 1000).expand();
        let b = TraceTokens::new(&[0, 1, 2], 1100).expand();
        assert_eq!(a.len(), 1000);
        assert_eq!(b.len(), 1100);
        assert_eq!(a[..], b[..1000]);
        let c = TraceTokens::new(&[5, 1], 1000).expand();
        assert_ne!(a[..512], c[..512]);
        assert!(a.iter().all(|t| (TOKEN_LO..TOKEN_HI).contains(t)));
        // Too few ids: padded deterministically.
        let p = TraceTokens::new(&[3], 700).expand();
        assert_eq!(p, TraceTokens::new(&[3], 700).expand());
        assert_eq!(p.len(), 700);
    }

    #[test]
    fn plan_applies_speedup_offset_and_caps() {
        let e = parse_trace(SAMPLE).unwrap();
        let p = plan_from_entries(&e, &opts(), "t").unwrap();
        assert_eq!(p.requests(), 3);
        assert_eq!(p.sessions[1].turns[0].at, Duration::from_secs(1));
        assert_eq!(p.sessions[1].turns[0].max_tokens, 64);
        assert_eq!(p.sessions[2].turns[0].max_tokens, 1);
        let o = TraceOptions {
            offset: 1,
            limit: Some(1),
            max_input_tokens: Some(500),
            ..opts()
        };
        let p = plan_from_entries(&e, &o, "t").unwrap();
        assert_eq!(p.requests(), 1);
        assert_eq!(p.sessions[0].turns[0].at, Duration::ZERO);
        assert_eq!(p.sessions[0].turns[0].prompt.known_tokens(), Some(500));
        assert!(
            plan_from_entries(
                &e,
                &TraceOptions {
                    offset: 9,
                    ..opts()
                },
                "t"
            )
            .is_err()
        );
        assert!(
            plan_from_entries(
                &e,
                &TraceOptions {
                    speedup: 0.0,
                    ..opts()
                },
                "t"
            )
            .is_err()
        );
    }
}
