//! Fault 6, the soak: 10 minutes at a steady rate with periodic router and
//! worker restarts. Not in the default suite (`#[ignore]`); run it with
//!
//! ```sh
//! cargo test --release -p system-tests --test it -- --ignored soak --nocapture
//! ```
//!
//! (`FAULTS_SOAK_MINUTES=2` shortens it.) Three routers behind HAProxy,
//! three sims with bounded KV pools (512 blocks, full within the first
//! minute, so that the state's size is bounded by the caches), 20 req/s.
//! Every 60 s (from 0:30) a router is restarted, alternately r1 by
//! SIGKILL and r2 by SIGTERM; r0 is never restarted, to watch its memory.
//! Every 90 s (from 0:45) a worker is restarted, alternately by a crash
//! (exit 137; restarted once its lease has expired) and by SIGTERM
//! (deregistered; restarted at once). Every 10 s: the routers' RSS
//! (`/proc/<pid>/status`), Valkey's `INFO memory` and key count.
//!
//! Asserts: no client request failed, and every failed attempt (resent by
//! the client) was in flight when a router or a worker went down; r0's
//! RSS flat (the last minute's at most 20% + 16 MiB above minute 2's);
//! Valkey's memory bounded (the second half's peak at most 1.5× the
//! first half's after minute 2); the state converged at the end and
//! `inspect --check` is clean. Writes the samples (`soak.csv`), the
//! per-minute table (`soak.md`) and a plot (`memory.svg`) into
//! `target/tmp/faults/soak/` (the path is printed).

use std::fmt::Write as _;
use std::time::Duration;

use crate::fleet::{Fleet, FleetSpec, rss_kib, sim_flags};
use crate::load::{Load, LoadConfig, counts, failures};

/// One sample.
#[derive(Debug, Clone)]
struct Sample {
    t: f64,
    /// RSS (KiB) of r0, r1, r2 (0 while down).
    rss: [u64; 3],
    valkey_used: u64,
    valkey_rss: u64,
    keys: u64,
    sent: u64,
}

pub async fn run() {
    let minutes: u64 = std::env::var("FAULTS_SOAK_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(10);
    let total = (minutes * 60) as f64;
    let flags = sim_flags().set("--num-blocks", "512");
    let spec = FleetSpec {
        routers: 3,
        sims: 3,
        sim_flags: flags.clone(),
        ..FleetSpec::default()
    };
    let mut f = Fleet::start("soak", spec).await;
    println!("soak: {minutes} min, logs in {}", f.logs.display());
    let cfg = LoadConfig {
        rate: 20.0,
        docs: 24,
        doc_lines: 20,
        max_tokens: 8,
        ..LoadConfig::default()
    };
    let traffic = Load::start(f.url(), cfg, f.epoch);
    let t0 = f.now();
    let at = |f: &Fleet| f.now() - t0;
    let mut samples: Vec<Sample> = Vec::new();
    // (start, end) of each restart: the only moments an attempt may fail.
    let mut kills: Vec<(f64, f64)> = Vec::new();
    let (mut next_sample, mut next_router, mut next_worker) = (0.0, 30.0, 45.0);
    let (mut router_turn, mut worker_turn) = (0usize, 0usize);
    while at(&f) < total {
        if at(&f) >= next_sample {
            let mut rss = [0u64; 3];
            for (i, r) in f.routers.iter().enumerate() {
                rss[i] = r.as_ref().and_then(|r| rss_kib(r.pid())).unwrap_or(0);
            }
            let s = Sample {
                t: at(&f),
                rss,
                valkey_used: f.valkey_memory("used_memory"),
                valkey_rss: f.valkey_memory("used_memory_rss"),
                keys: f.valkey_keys(),
                sent: traffic.sent(),
            };
            println!(
                "soak t={:5.0}s rss r0/r1/r2 = {}/{}/{} KiB, valkey used {} B rss {} B, {} keys, {} sent",
                s.t, s.rss[0], s.rss[1], s.rss[2], s.valkey_used, s.valkey_rss, s.keys, s.sent
            );
            samples.push(s);
            next_sample += 10.0;
        }
        if at(&f) >= next_router {
            let i = 1 + router_turn % 2;
            if router_turn % 2 == 0 {
                let (start, end) = f.kill_router(i);
                kills.push((start, end));
            } else {
                let start = f.now();
                let end = f.terminate_router(i);
                kills.push((start, end));
            }
            f.wait_balancer(i, false).await;
            f.restart_router(i).await;
            f.wait_balancer(i, true).await;
            router_turn += 1;
            next_router += 60.0;
        }
        if at(&f) >= next_worker {
            let i = worker_turn % 3;
            let mut sim = f.sims[i].take().expect("sim");
            let id = sim.id.clone();
            if worker_turn % 2 == 0 {
                let start = f.now();
                sim.crash().await;
                let end = f.mark(&format!("{id} crashed"));
                kills.push((start, end));
                drop(sim);
                // Back once its lease has run out (a new incarnation).
                tokio::time::sleep(Duration::from_secs(3)).await;
            } else {
                let start = f.now();
                sim.terminate().await;
                let end = f.mark(&format!("{id} stopped (SIGTERM, deregistered)"));
                kills.push((start, end));
            }
            let mut new = f.start_sims(std::slice::from_ref(&id), &flags).await;
            f.sims[i] = new.pop();
            f.mark(&format!("{id} restarted"));
            worker_turn += 1;
            next_worker += 90.0;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let records = traffic.stop().await;
    f.mark("load stopped");

    let c = counts(&records);
    let fails = failures(&records);
    println!("{fails}");
    let table = minute_table(&samples, minutes);
    println!("{table}");
    write_files(&f, &samples, &table);
    assert_eq!(c.failed, 0, "client requests failed:\n{fails}");
    for r in &records {
        for a in r.failed_attempts() {
            assert!(
                kills
                    .iter()
                    .any(|(s, e)| a.start <= *e && a.end >= s - 0.05),
                "an attempt failed that was in flight at no restart: request {} {a:?}",
                r.id
            );
        }
    }
    let converge = f.wait_converged("at the end of the soak").await;
    f.inspect_check("at the end of the soak").await;

    // Memory: r0 flat, Valkey bounded.
    let window = |from: f64, to: f64| samples.iter().filter(move |s| s.t >= from && s.t < to);
    let early_rss = window(120.0, 180.0).map(|s| s.rss[0]).max().unwrap_or(0);
    let late_rss = window(total - 60.0, total + 1.0)
        .map(|s| s.rss[0])
        .max()
        .unwrap_or(0);
    let first_half = window(120.0, total / 2.0)
        .map(|s| s.valkey_used)
        .max()
        .unwrap_or(0);
    let second_half = window(total / 2.0, total + 1.0)
        .map(|s| s.valkey_used)
        .max()
        .unwrap_or(0);
    println!(
        "FAULTS soak minutes={minutes} sent={} failed={} retried_by_client={} failed_attempts={} \
         router_restarts={router_turn} worker_restarts={worker_turn} \
         r0_rss_minute2={early_rss}KiB r0_rss_last_minute={late_rss}KiB \
         valkey_used_peak_first_half={first_half}B valkey_used_peak_second_half={second_half}B \
         converge_after_stop={converge:.2}s cached_share={:.3}",
        c.sent, c.failed, c.retried, c.failed_attempts, c.cached_share
    );
    if minutes >= 4 {
        assert!(
            late_rss <= early_rss + early_rss / 5 + 16 * 1024,
            "r0's RSS grew: {early_rss} KiB at minute 2, {late_rss} KiB in the last minute"
        );
        assert!(
            second_half <= first_half + first_half / 2,
            "Valkey's memory grew: peak {first_half} B in the first half, {second_half} B in the second"
        );
    }
}

/// The sample nearest each minute mark, as a Markdown table.
fn minute_table(samples: &[Sample], minutes: u64) -> String {
    let mut t = String::from(
        "| minute | r0 RSS (MiB) | r1 RSS (MiB) | r2 RSS (MiB) | Valkey used_memory (MiB) | Valkey RSS (MiB) | keys | requests sent |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mib = |k: u64| k as f64 / 1024.0;
    for m in 0..=minutes {
        let mark = (m * 60) as f64;
        let Some(s) = samples
            .iter()
            .min_by(|a, b| (a.t - mark).abs().total_cmp(&(b.t - mark).abs()))
        else {
            continue;
        };
        let _ = writeln!(
            t,
            "| {m} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} | {} | {} |",
            mib(s.rss[0]),
            mib(s.rss[1]),
            mib(s.rss[2]),
            s.valkey_used as f64 / 1048576.0,
            s.valkey_rss as f64 / 1048576.0,
            s.keys,
            s.sent
        );
    }
    t
}

/// `soak.csv`, `soak.md` and `memory.svg` in the fleet's log directory.
fn write_files(f: &Fleet, samples: &[Sample], table: &str) {
    let mut csv =
        String::from("t_s,r0_rss_kib,r1_rss_kib,r2_rss_kib,valkey_used_b,valkey_rss_b,keys,sent\n");
    for s in samples {
        let _ = writeln!(
            csv,
            "{:.1},{},{},{},{},{},{},{}",
            s.t, s.rss[0], s.rss[1], s.rss[2], s.valkey_used, s.valkey_rss, s.keys, s.sent
        );
    }
    let _ = std::fs::write(f.logs.join("soak.csv"), csv);
    let _ = std::fs::write(f.logs.join("soak.md"), table);
    let _ = std::fs::write(f.logs.join("memory.svg"), svg(samples));
    println!("soak samples written to {}", f.logs.display());
}

/// A plotted line: name, colour, (seconds, MiB).
type Series = (&'static str, &'static str, Vec<(f64, f64)>);

/// r0's RSS and Valkey's used_memory (MiB) against time, one line each.
fn svg(samples: &[Sample]) -> String {
    let (w, h, pad) = (640.0, 320.0, 40.0);
    let t_max = samples.last().map_or(1.0, |s| s.t.max(1.0));
    let series: [Series; 2] = [
        (
            "r0 RSS",
            "#1f77b4",
            samples
                .iter()
                .map(|s| (s.t, s.rss[0] as f64 / 1024.0))
                .collect(),
        ),
        (
            "Valkey used_memory",
            "#d62728",
            samples
                .iter()
                .map(|s| (s.t, s.valkey_used as f64 / 1048576.0))
                .collect(),
        ),
    ];
    let y_max = series
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|(_, y)| *y))
        .fold(1.0f64, f64::max)
        * 1.1;
    let x = |t: f64| pad + t / t_max * (w - 2.0 * pad);
    let y = |v: f64| h - pad - v / y_max * (h - 2.0 * pad);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <text x=\"{pad}\" y=\"{ty}\">MiB (max {y_max:.0})</text>\n\
         <text x=\"{r}\" y=\"{tb}\" text-anchor=\"end\">{t_max:.0} s</text>\n",
        b = h - pad,
        r = w - pad,
        ty = pad - 8.0,
        tb = h - pad + 16.0,
    );
    for (k, (name, color, points)) in series.iter().enumerate() {
        let pts: Vec<String> = points
            .iter()
            .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
            .collect();
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>\n\
             <text x=\"{}\" y=\"{}\" fill=\"{color}\">{name}</text>",
            pts.join(" "),
            w - pad - 150.0,
            pad + 14.0 * (k as f64 + 1.0)
        );
    }
    out.push_str("</svg>\n");
    out
}
