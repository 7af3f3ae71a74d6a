//! vLLM's load gauges from a Prometheus text exposition (`GET /metrics`).
//!
//! Pure and total: any input gives an answer and none panics, so the same
//! parser serves the routers' scraper and the workers' reporter sidecar.
//! Lines that are not samples (comments, `# HELP`, `# TYPE`, `# EOF`,
//! blanks) or that do not parse are skipped, one line at a time: one bad
//! line costs that line, not the whole exposition.

use std::borrow::Cow;

use crate::load::WorkerLoad;

/// Requests queued, not yet scheduled (one sample per engine).
pub const WAITING: &str = "vllm:num_requests_waiting";
/// Requests being processed (one sample per engine).
pub const RUNNING: &str = "vllm:num_requests_running";
/// Fraction of the KV cache in use, 0 to 1 (one sample per engine).
pub const KV_USAGE: &str = "vllm:kv_cache_usage_perc";
/// The name [`KV_USAGE`] had before vLLM 0.10.
pub const KV_USAGE_OLD: &str = "vllm:gpu_cache_usage_perc";
/// The label vLLM puts the served model's name in.
pub const MODEL_LABEL: &str = "model_name";

/// vLLM's load gauges as found, each `None` when no usable sample was.
///
/// With several engines (data parallel) the queues add up and the KV usage
/// is the **maximum** over engines, the fullest one, as the ORCA header's
/// parser does: a nearly full engine preempts even if its peers are idle.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct VllmGauges {
    /// Sum of `vllm:num_requests_waiting`.
    pub num_requests_waiting: Option<f64>,
    /// Sum of `vllm:num_requests_running`.
    pub num_requests_running: Option<f64>,
    /// Maximum of `vllm:kv_cache_usage_perc` (or `vllm:gpu_cache_usage_perc`).
    pub kv_cache_usage_perc: Option<f64>,
}

impl VllmGauges {
    /// True when none of the three gauges was found.
    pub fn is_empty(&self) -> bool {
        *self == VllmGauges::default()
    }

    /// The queue, rounded to whole requests.
    pub fn waiting(&self) -> Option<u64> {
        self.num_requests_waiting.map(to_count)
    }

    /// The running requests, rounded to whole requests.
    pub fn running(&self) -> Option<u64> {
        self.num_requests_running.map(to_count)
    }

    /// The KV usage, clamped to 0..=1.
    pub fn kv_usage(&self) -> Option<f64> {
        self.kv_cache_usage_perc.map(|k| k.clamp(0.0, 1.0))
    }

    /// A full load report, when all three gauges were found.
    pub fn to_worker_load(&self) -> Option<WorkerLoad> {
        Some(WorkerLoad {
            num_requests_waiting: self.waiting()?,
            num_requests_running: self.running()?,
            kv_cache_usage_perc: self.kv_usage()?,
        })
    }
}

/// Saturating: `as` maps out-of-range floats to the nearest bound.
fn to_count(v: f64) -> u64 {
    v.round() as u64
}

/// A worker's load from its `/metrics` text: `None` unless all three of
/// waiting, running and KV usage are there (after the model filter).
///
/// `model`, when given, skips samples whose `model_name` label names
/// another model (samples without the label are kept).
pub fn parse_vllm_load(text: &str, model: Option<&str>) -> Option<WorkerLoad> {
    parse_vllm_gauges(text, model).to_worker_load()
}

/// Whatever of vLLM's three load gauges `text` holds; see [`VllmGauges`]
/// for how engines are combined and [`parse_vllm_load`] for `model`.
/// Samples that are negative or not finite (`NaN`, `±Inf`) are skipped.
pub fn parse_vllm_gauges(text: &str, model: Option<&str>) -> VllmGauges {
    let mut g = VllmGauges::default();
    for line in text.lines() {
        let Some(s) = parse_sample(line) else {
            continue;
        };
        let slot = match s.name.as_ref() {
            WAITING => &mut g.num_requests_waiting,
            RUNNING => &mut g.num_requests_running,
            KV_USAGE | KV_USAGE_OLD => &mut g.kv_cache_usage_perc,
            _ => continue,
        };
        if !(s.value.is_finite() && s.value >= 0.0) {
            continue;
        }
        if let (Some(want), Some(got)) = (model, s.label(MODEL_LABEL))
            && want != got
        {
            continue;
        }
        let kv = matches!(s.name.as_ref(), KV_USAGE | KV_USAGE_OLD);
        *slot = Some(match *slot {
            None => s.value,
            Some(old) if kv => old.max(s.value),
            Some(old) => old + s.value,
        });
    }
    g
}

/// One sample line of the text format: `name{label="value",…} value [ts]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// The metric name (also the quoted form `{"name",…}` of format 1.0+).
    pub name: Cow<'a, str>,
    /// Labels in order, values unescaped (`\\`, `\"`, `\n`).
    pub labels: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// The value; `NaN` and `±Inf` included.
    pub value: f64,
    /// The timestamp in ms, when given.
    pub timestamp_ms: Option<i64>,
}

impl Sample<'_> {
    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_ref())
    }
}

/// Parses one line; `None` for comments, blanks and anything malformed.
pub fn parse_sample(line: &str) -> Option<Sample<'_>> {
    let mut c = Cursor { s: line, at: 0 };
    c.skip_blanks();
    if c.rest().is_empty() || c.rest().starts_with('#') {
        return None;
    }
    let mut name = Cow::Borrowed(c.take_while(|b| b != b'{' && !blank(b)));
    let mut labels = Vec::new();
    c.skip_blanks();
    if c.eat(b'{') {
        loop {
            c.skip_blanks();
            if c.eat(b'}') {
                break;
            }
            let quoted = c.peek() == Some(b'"');
            let key = if quoted {
                c.quoted()?
            } else {
                Cow::Borrowed(c.take_while(|b| !matches!(b, b'=' | b',' | b'}') && !blank(b)))
            };
            c.skip_blanks();
            if c.eat(b'=') {
                c.skip_blanks();
                labels.push((key, c.quoted()?));
            } else if quoted && name.is_empty() && labels.is_empty() {
                // Format 1.0+: a quoted metric name first inside the braces.
                name = key;
            } else {
                return None;
            }
            c.skip_blanks();
            if !c.eat(b',') && c.peek() != Some(b'}') {
                return None;
            }
        }
    }
    finish(name, labels, &mut c)
}

/// Value and optional timestamp after the name and labels.
fn finish<'a>(
    name: Cow<'a, str>,
    labels: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    c: &mut Cursor<'a>,
) -> Option<Sample<'a>> {
    if name.is_empty() || labels.iter().any(|(k, _)| k.is_empty()) {
        return None;
    }
    c.skip_blanks();
    let value = parse_value(c.take_while(|b| !blank(b)))?;
    c.skip_blanks();
    let ts = c.take_while(|b| !blank(b));
    c.skip_blanks();
    // After the value: a timestamp (integer ms; OpenMetrics' float seconds
    // are accepted, not kept), then perhaps an exemplar (`# {…} v`).
    let timestamp_ms = if ts.is_empty() || ts.starts_with('#') {
        None
    } else if c.rest().is_empty() || c.rest().starts_with('#') {
        match ts.parse::<i64>() {
            Ok(t) => Some(t),
            Err(_) => {
                parse_value(ts)?;
                None
            }
        }
    } else {
        return None;
    };
    Some(Sample {
        name,
        labels,
        value,
        timestamp_ms,
    })
}

/// A float as Prometheus writes it: decimals, exponents, `NaN`, `+Inf`,
/// `-Inf` (Rust's parser takes all of these, case-insensitively).
fn parse_value(s: &str) -> Option<f64> {
    s.parse().ok()
}

/// Spaces and tabs separate tokens; a `\r` left by CRLF line ends too.
fn blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r')
}

/// A position in one line; every slice is taken at an ASCII delimiter, so
/// it falls on a character boundary, and through `get`, so it cannot panic.
struct Cursor<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a str {
        self.s.get(self.at..).unwrap_or_default()
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.at).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        if hit {
            self.at += 1;
        }
        hit
    }

    fn skip_blanks(&mut self) {
        self.take_while(blank);
    }

    /// The longest run of ASCII-delimited bytes satisfying `keep`.
    fn take_while(&mut self, keep: impl Fn(u8) -> bool) -> &'a str {
        let start = self.at;
        while self.peek().is_some_and(&keep) {
            self.at += 1;
        }
        // `keep` may accept non-ASCII bytes; stop on a boundary regardless.
        while !self.s.is_char_boundary(self.at) {
            self.at += 1;
        }
        self.s.get(start..self.at).unwrap_or_default()
    }

    /// A `"…"` string with the text format's escapes undone.
    fn quoted(&mut self) -> Option<Cow<'a, str>> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.at;
        let bytes = self.s.as_bytes();
        let mut escaped = false;
        let mut i = start;
        loop {
            match bytes.get(i)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    i += 2;
                }
                _ => i += 1,
            }
        }
        let raw = self.s.get(start..i)?;
        self.at = i + 1;
        if !escaped {
            return Some(Cow::Borrowed(raw));
        }
        let mut out = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(ch) = chars.next() {
            match (ch, ch == '\\') {
                (_, true) => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some(e @ ('\\' | '"')) => out.push(e),
                    Some(other) => {
                        out.push('\\');
                        out.push(other);
                    }
                    None => out.push('\\'),
                },
                (ch, false) => out.push(ch),
            }
        }
        Some(Cow::Owned(out))
    }
}

#[cfg(test)]
#[path = "vllm_metrics_tests.rs"]
mod tests;
