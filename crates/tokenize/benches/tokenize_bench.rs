//! Tokenizing long prompts that share a prefix: the plain HF tokenizer
//! against the router's chunk-cached path, side by side, medians of many runs.
//!
//! `cargo bench --bench tokenize_bench`

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test panics on the unexpected

use std::path::Path;
use std::time::{Duration, Instant};

use tokenize::ModelTokenizer;

const RUNS: usize = 60;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A document of about `lines` lines of varied prose and code.
fn document(lines: usize) -> String {
    let words = [
        "cache", "prefix", "router", "token", "block", "worker", "valkey", "stream", "latency",
        "hash",
    ];
    (0..lines)
        .map(|i| match i % 7 {
            0 => format!(
                "## Section {i}: {} and {}\n",
                words[i % 10],
                words[(i * 3) % 10]
            ),
            3 => format!(
                "    let {}_{i} = compute({i}, \"{}\");\n",
                words[i % 10],
                words[(i + 4) % 10]
            ),
            _ => format!(
                "The {} keeps the {} of every {} close to the {}, line {i}.\n",
                words[i % 10],
                words[(i + 1) % 10],
                words[(i + 2) % 10],
                words[(i + 5) % 10]
            ),
        })
        .collect()
}

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tokenizers/qwen3");
    let tok = ModelTokenizer::from_dir(&dir, 4 << 20).expect("qwen3 tokenizer");
    let shared = document(560);
    let prompts: Vec<String> = (0..RUNS)
        .map(|i| format!("{shared}Question {i}: {}\n", document(40 + i % 5)))
        .collect();
    let tokens = tok.encode_plain(&prompts[0], true).expect("encode").len();
    let shared_tokens = tok.encode_plain(&shared, true).expect("encode").len();
    // Warm the cache with one prompt, as a previous request would have.
    tok.encode(&prompts[0], true).expect("encode");
    let (mut plain, mut cached) = (Vec::new(), Vec::new());
    for p in &prompts[1..] {
        let t = Instant::now();
        let a = tok.encode_plain(p, true).expect("encode");
        plain.push(t.elapsed());
        let t = Instant::now();
        let b = tok.encode(p, true).expect("encode");
        cached.push(t.elapsed());
        assert_eq!(a, b, "the cached path must give the plain ids");
    }
    let (p, c) = (median(plain), median(cached));
    println!(
        "prompt: {tokens} tokens, of which a shared prefix of {shared_tokens}; {} runs each, interleaved",
        RUNS - 1
    );
    println!("| path | median | tokens/s |");
    println!("|---|---:|---:|");
    for (name, d) in [
        ("plain HF tokenizer", p),
        ("chunk-cached (prefix seen before)", c),
    ] {
        println!(
            "| {name} | {:.2} ms | {:.2} M |",
            d.as_secs_f64() * 1e3,
            tokens as f64 / d.as_secs_f64() / 1e6
        );
    }
    println!("speed-up: {:.1}x", p.as_secs_f64() / c.as_secs_f64());
}
