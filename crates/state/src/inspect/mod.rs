//! `prefix-router inspect`: an operator's read-only view of the fleet's
//! shared state in Valkey (workers, blocks, load, routers, backlogs), and
//! `--check`, a verifier of the invariants of docs/state.md.
//!
//! On a Valkey Cluster (several seed URLs) each primary is read through a
//! plain connection of its own (`cluster`): a model's parts each live on
//! one node. Everything here only reads, through one plain connection: SCAN, HSCAN,
//! SSCAN and ZSCAN for anything that can be large (never KEYS), pipelined
//! point reads, and MULTI/EXEC around reads for atomic re-checks. The
//! summary holds one model's small keys and counts; the check streams the
//! maps a page at a time. See docs/state.md, "Inspecting the state".

mod args;
mod check;
mod cluster;
mod codes;
mod conn;
mod error;
mod fleet_rules;
mod format;
mod inventory;
mod meta;
mod passes;
mod probe;
mod redact;
mod render;
mod rules;
mod schema;
mod summary;

use std::collections::BTreeSet;
use std::io::Write;

pub use args::InspectArgs;
pub use check::{CheckReport, CheckStats, MAX_CANDIDATES, Violation};
pub use codes::Code;
pub use error::InspectError;
pub use summary::{
    ForwardSummary, LoadSummary, ModelSummary, PurgeSummary, RouterSummary, Summary, SyncSummary,
    WorkerSummary,
};

use conn::{Reader, bytes};
pub(crate) use format::{Kind, parse_value};
use schema::ModelKeys;

use crate::{ConnectionSettings, KeySpace, check_name};

/// Exit code of a clean check (or a summary).
pub const EXIT_OK: i32 = 0;
/// Exit code of a check that found violations.
pub const EXIT_VIOLATIONS: i32 = 1;

async fn connect(args: &InspectArgs) -> Result<(Reader, KeySpace), InspectError> {
    let keys = KeySpace::new(&args.key_prefix)?;
    if let Some(m) = &args.model {
        check_name("model", m)?;
    }
    let mut settings = ConnectionSettings::new(&args.valkey);
    settings.bulk_timeout = args.timeout;
    Ok((Reader::connect(&settings).await?, keys))
}

/// Reads the summary of every model (or `args.model`). On a cluster
/// (several seed URLs), each primary is read on its own and the summaries
/// are merged: a model's parts appear as `<model>#<k>`.
pub async fn summarize(args: &InspectArgs) -> Result<Summary, InspectError> {
    let Some(cluster) = cluster::Nodes::discover(args).await? else {
        return summarize_node(args, None).await;
    };
    let mut merged: Option<Summary> = None;
    for node in cluster.primaries() {
        let s = summarize_node(&cluster.args_for(args, node), Some(cluster.listed())).await?;
        merged = Some(match merged {
            None => s,
            Some(mut m) => {
                m.keys += s.keys;
                m.unknown_keys += s.unknown_keys;
                m.models.extend(s.models);
                m
            }
        });
    }
    let mut summary = merged.ok_or(InspectError::Invalid {
        what: "valkey cluster",
        detail: "no primary answered".into(),
    })?;
    summary.models.sort_by(|a, b| a.model.cmp(&b.model));
    summary.valkey = cluster.url().to_owned();
    Ok(summary)
}

/// [`summarize`] of one server (`listed`: the models set, when read
/// elsewhere).
async fn summarize_node(
    args: &InspectArgs,
    listed_elsewhere: Option<&BTreeSet<String>>,
) -> Result<Summary, InspectError> {
    let (mut reader, keys) = connect(args).await?;
    let only = args.model.as_deref();
    let inv = inventory::scan(&mut reader, &args.key_prefix, only, None).await?;
    let listed: BTreeSet<String> = match (only, listed_elsewhere) {
        (Some(_), _) | (None, Some(_)) => BTreeSet::new(),
        (None, None) => reader
            .scan_all("SSCAN", &keys.models())
            .await?
            .iter()
            .filter_map(bytes)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .collect(),
    };
    let empty = inventory::ModelInventory::default();
    let mut models = Vec::new();
    for model in inventory::model_names(&inv, &listed, only) {
        if listed_elsewhere.is_some() && !inv.models.contains_key(&model) {
            continue;
        }
        let mk = ModelKeys::new(&keys, &model);
        let mi = inv.models.get(&model).unwrap_or(&empty);
        let meta = meta::read(&mut reader, &keys, &mk, &model, mi, listed_elsewhere).await?;
        models.push(summary::model_summary(&mut reader, &mk, &model, mi, &meta).await?);
    }
    Ok(Summary {
        valkey: reader.url().to_owned(),
        namespace: args.key_prefix.clone(),
        keys: inv.keys,
        unknown_keys: inv.unknown,
        models,
    })
}

/// Verifies the invariants (see `check.rs`); never writes. On a cluster,
/// each primary is checked on its own (every part of a model lives on one
/// node) and the reports are merged.
pub async fn check(args: &InspectArgs) -> Result<CheckReport, InspectError> {
    let Some(cluster) = cluster::Nodes::discover(args).await? else {
        return check_node(args, None).await;
    };
    let mut reports = Vec::new();
    for node in cluster.primaries() {
        reports.push(check_node(&cluster.args_for(args, node), Some(cluster.listed())).await?);
    }
    cluster::merge_checks(cluster.url(), reports, args.show)
}

async fn check_node(
    args: &InspectArgs,
    listed: Option<&BTreeSet<String>>,
) -> Result<CheckReport, InspectError> {
    let (mut reader, keys) = connect(args).await?;
    let settings = check::CheckSettings {
        keys: &keys,
        namespace: &args.key_prefix,
        model: args.model.as_deref(),
        horizon: args.ttl_horizon,
        recheck_delay: args.recheck_delay,
        show: args.show,
        listed,
    };
    check::check(&mut reader, &settings).await
}

fn json(out: &mut dyn Write, value: &impl serde::Serialize) -> Result<(), InspectError> {
    serde_json::to_writer_pretty(&mut *out, value).map_err(std::io::Error::other)?;
    writeln!(out)?;
    Ok(())
}

/// The `inspect` subcommand: prints the summary, or with `--check` the
/// violations, to `out`; returns the process exit code ([`EXIT_OK`] or
/// [`EXIT_VIOLATIONS`]).
pub async fn run(args: &InspectArgs, out: &mut dyn Write) -> Result<i32, InspectError> {
    if args.check {
        let report = check(args).await?;
        if args.json {
            json(out, &report)?;
        } else {
            render::check(out, &report)?;
        }
        return Ok(if report.clean {
            EXIT_OK
        } else {
            EXIT_VIOLATIONS
        });
    }
    let summary = summarize(args).await?;
    if args.json {
        json(out, &summary)?;
    } else {
        render::summary(out, &summary)?;
    }
    Ok(EXIT_OK)
}
