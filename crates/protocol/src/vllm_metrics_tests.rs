use std::fmt::Write;

use proptest::prelude::*;

use super::*;

/// The shape of a vLLM 0.2x `/metrics` page with two data-parallel engines.
const TWO_ENGINES: &str = r#"# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1252.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 3.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-8B"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 2.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen3-8B"} 4.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-8B"} 0.75
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen3-8B"} 12.0
vllm:num_requests_waiting_total{engine="0",model_name="Qwen/Qwen3-8B"} 99.0
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="8192"} 1.0
"#;

#[test]
fn engines_add_up_and_kv_takes_the_fullest() {
    let g = parse_vllm_gauges(TWO_ENGINES, None);
    assert_eq!(g.num_requests_waiting, Some(6.0));
    assert_eq!(g.num_requests_running, Some(8.0));
    assert_eq!(g.kv_cache_usage_perc, Some(0.75));
    assert_eq!(
        parse_vllm_load(TWO_ENGINES, Some("Qwen/Qwen3-8B")),
        Some(WorkerLoad {
            num_requests_waiting: 6,
            num_requests_running: 8,
            kv_cache_usage_perc: 0.75
        })
    );
}

#[test]
fn the_model_filter_skips_other_models_only() {
    let text = "vllm:num_requests_waiting{model_name=\"a\"} 1\n\
                vllm:num_requests_waiting{model_name=\"b\"} 10\n\
                vllm:num_requests_waiting 100\n";
    let waiting = |m| parse_vllm_gauges(text, m).num_requests_waiting;
    assert_eq!(waiting(None), Some(111.0));
    assert_eq!(waiting(Some("a")), Some(101.0));
    assert_eq!(waiting(Some("b")), Some(110.0));
    assert_eq!(parse_vllm_load(TWO_ENGINES, Some("other")), None);
}

#[test]
fn the_old_kv_name_counts() {
    let text = "vllm:num_requests_waiting 0\nvllm:num_requests_running 1\n\
                vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.5\n";
    let load = parse_vllm_load(text, Some("m")).unwrap();
    assert_eq!(load.kv_cache_usage_perc, 0.5);
}

#[test]
fn a_missing_gauge_means_no_full_load() {
    let text = "vllm:num_requests_waiting 3\nvllm:kv_cache_usage_perc 0.1\n";
    let g = parse_vllm_gauges(text, None);
    assert_eq!(
        (g.waiting(), g.running(), g.kv_usage()),
        (Some(3), None, Some(0.1))
    );
    assert_eq!(parse_vllm_load(text, None), None);
    assert!(parse_vllm_gauges("", None).is_empty());
    assert!(parse_vllm_gauges("<html>502 Bad Gateway</html>", None).is_empty());
}

#[test]
fn unusable_values_are_skipped() {
    let text = "vllm:num_requests_waiting{engine=\"0\"} NaN\n\
                vllm:num_requests_waiting{engine=\"1\"} +Inf\n\
                vllm:num_requests_waiting{engine=\"2\"} -1\n\
                vllm:num_requests_waiting{engine=\"3\"} 2.5e1\n\
                vllm:num_requests_running{engine=\"0\"} -Inf\n\
                vllm:kv_cache_usage_perc 7\n";
    let g = parse_vllm_gauges(text, None);
    assert_eq!(g.num_requests_waiting, Some(25.0));
    assert_eq!(g.num_requests_running, None);
    assert_eq!(g.kv_usage(), Some(1.0), "clamped to 0..=1");
}

#[test]
fn syntax_variants_parse() {
    let cases = [
        ("m 1", "m", 1.0, None),
        ("m{} 1", "m", 1.0, None),
        ("m{a=\"x\",} 1.5e-3", "m", 0.0015, None),
        (
            "  m{a=\"x\"}\t2 1712345678901",
            "m",
            2.0,
            Some(1712345678901),
        ),
        ("m{a = \"x\" , b=\"y\"} 3", "m", 3.0, None),
        ("m{a=\"x\"} 4 # {trace_id=\"t\"} 1.0", "m", 4.0, None),
        ("m 5 1.5 # exemplar", "m", 5.0, None),
        (
            "{\"vllm:num_requests_waiting\",a=\"x\"} 6",
            WAITING,
            6.0,
            None,
        ),
        ("m 1E3\r", "m", 1000.0, None),
    ];
    for (line, name, value, ts) in cases {
        let s = parse_sample(line).unwrap_or_else(|| panic!("{line:?}"));
        assert_eq!(
            (s.name.as_ref(), s.value, s.timestamp_ms),
            (name, value, ts),
            "{line:?}"
        );
    }
    assert!(parse_sample("m NaN").unwrap().value.is_nan());
    assert_eq!(parse_sample("m -Inf").unwrap().value, f64::NEG_INFINITY);
}

#[test]
fn label_values_are_unescaped() {
    let line = r#"vllm:num_requests_waiting{model_name="a \"b\", c}\\d\ne",x="é"} 7"#;
    let s = parse_sample(line).unwrap();
    assert_eq!(s.label("model_name"), Some("a \"b\", c}\\d\ne"));
    assert_eq!(s.label("x"), Some("é"));
    let text = format!("{line}\n");
    let g = parse_vllm_gauges(&text, Some("a \"b\", c}\\d\ne"));
    assert_eq!(g.num_requests_waiting, Some(7.0));
}

#[test]
fn malformed_lines_are_skipped_alone() {
    for bad in [
        "",
        "   ",
        "# HELP m x",
        "#m 1",
        "m",
        "m{a=\"x\"}",
        "m{a=\"x\" 1",
        "m{a=x} 1",
        "m{a=\"x} 1",
        "m{=\"x\"} 1",
        "m{\"x\"} 1",
        "m{a=\"x\"}{b=\"y\"} 1",
        "m 1 2 3",
        "m 1 ts",
        "m 1_000",
        "m 0x10",
        "{} 1",
        "m{a=\"x\"\\",
        "m{a=\"\\",
    ] {
        assert_eq!(parse_sample(bad), None, "{bad:?}");
    }
    let text = format!("vllm:num_requests_waiting{{a=\"x}} 5\n{TWO_ENGINES}");
    assert_eq!(
        parse_vllm_gauges(&text, None).num_requests_waiting,
        Some(6.0)
    );
}

/// One engine's gauges, as a generator and renderer see them.
#[derive(Debug, Clone)]
struct Engine {
    model: String,
    waiting: u32,
    running: u32,
    kv: f64,
    old_kv_name: bool,
    exponent: bool,
    timestamp: Option<i64>,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn render(engines: &[Engine], noise: &[String]) -> String {
    let mut out = String::from("# HELP vllm:num_requests_waiting Requests waiting.\n");
    for (i, e) in engines.iter().enumerate() {
        let labels = format!("engine=\"{i}\",model_name=\"{}\"", escape(&e.model));
        let ts = e.timestamp.map(|t| format!(" {t}")).unwrap_or_default();
        let num = |v: f64| {
            if e.exponent {
                format!("{v:e}")
            } else {
                format!("{v:?}")
            }
        };
        let kv_name = if e.old_kv_name {
            KV_USAGE_OLD
        } else {
            KV_USAGE
        };
        let _ = writeln!(out, "{WAITING}{{{labels}}} {}{ts}", num(e.waiting.into()));
        let _ = writeln!(out, "# TYPE {RUNNING} gauge");
        let _ = writeln!(out, "{RUNNING}{{{labels}}} {}{ts}", num(e.running.into()));
        let _ = writeln!(out, "{kv_name}{{{labels}}} {}{ts}", num(e.kv));
        if let Some(n) = noise.get(i) {
            let _ = writeln!(out, "{n}");
        }
    }
    out
}

fn engine() -> impl Strategy<Value = Engine> {
    (
        prop_oneof![Just("m".to_owned()), "[ -~é\"\\\\\n]{0,12}"],
        0u32..10_000,
        0u32..10_000,
        0.0f64..=1.0,
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(0i64..i64::MAX),
    )
        .prop_map(
            |(model, waiting, running, kv, old_kv_name, exponent, timestamp)| Engine {
                model,
                waiting,
                running,
                kv,
                old_kv_name,
                exponent,
                timestamp,
            },
        )
}

/// Lines that are not vLLM's gauges: other metrics, comments, junk.
fn noise() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("vllm:prompt_tokens_total{engine=\"0\"} 1e9".to_owned()),
        Just("vllm:num_requests_waiting_by_reason{reason=\"x\"} 3".to_owned()),
        Just("# EOF".to_owned()),
        Just(String::new()),
        "[a-z_:]{1,20}\\{le=\"[+-]Inf\"\\} [0-9]{1,5}",
        "#[ -~]{0,40}",
    ]
}

/// Lines built from the format's delimiters, to reach deep parser states.
fn tricky_line() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("vllm:num_requests_waiting"),
            Just("{"),
            Just("}"),
            Just("\""),
            Just("\\"),
            Just("="),
            Just(","),
            Just(" "),
            Just("\t"),
            Just("#"),
            Just("model_name"),
            Just("1"),
            Just("NaN"),
            Just("e"),
            Just("é"),
            Just("\u{10348}"),
        ],
        0..24,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC*", model in proptest::option::of("\\PC{0,8}")) {
        let _ = parse_vllm_load(&text, model.as_deref());
        for line in text.lines() {
            let _ = parse_sample(line);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_vllm_gauges(&text, Some("m"));
    }

    #[test]
    fn delimiter_soup_never_panics(lines in proptest::collection::vec(tricky_line(), 0..16)) {
        let text = lines.join("\n");
        let g = parse_vllm_gauges(&text, None);
        for v in [g.num_requests_waiting, g.num_requests_running, g.kv_cache_usage_perc].into_iter().flatten() {
            prop_assert!(v.is_finite() && v >= 0.0);
        }
    }

    #[test]
    fn valid_expositions_round_trip(
        engines in proptest::collection::vec(engine(), 1..6),
        noise in proptest::collection::vec(noise(), 0..6),
    ) {
        let text = render(&engines, &noise);
        let g = parse_vllm_gauges(&text, None);
        let waiting: u64 = engines.iter().map(|e| u64::from(e.waiting)).sum();
        let running: u64 = engines.iter().map(|e| u64::from(e.running)).sum();
        let kv = engines.iter().map(|e| e.kv).fold(0.0, f64::max);
        prop_assert_eq!(g.waiting(), Some(waiting));
        prop_assert_eq!(g.running(), Some(running));
        prop_assert_eq!(g.kv_cache_usage_perc, Some(kv));
        // Filtered by each engine's model: exactly that model's engines.
        for e in &engines {
            let mine: Vec<&Engine> = engines.iter().filter(|o| o.model == e.model).collect();
            let load = parse_vllm_load(&text, Some(&e.model));
            prop_assert_eq!(load, Some(WorkerLoad {
                num_requests_waiting: mine.iter().map(|o| u64::from(o.waiting)).sum(),
                num_requests_running: mine.iter().map(|o| u64::from(o.running)).sum(),
                kv_cache_usage_perc: mine.iter().map(|o| o.kv).fold(0.0, f64::max),
            }));
        }
    }

    #[test]
    fn label_values_round_trip(value in "\\PC{0,16}", name in "[a-zA-Z_][a-zA-Z0-9_]{0,8}") {
        let line = format!("{WAITING}{{{name}=\"{}\",z=\"1\"}} 2", escape(&value));
        let s = parse_sample(&line).unwrap();
        prop_assert_eq!(s.label(&name), Some(value.as_str()));
        prop_assert_eq!(s.value, 2.0);
    }
}
