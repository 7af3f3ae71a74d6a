//! Mid-stream migration's flags ([`MigrationArgs`], flattened into
//! `serve`'s) and their checks: bad values are refused at start.

use std::time::Duration;

use anyhow::bail;

use protocol::parse_duration;

use super::MigrationSettings;

/// The most moves one answer may make.
const MAX_LIMIT: u32 = 100;

/// Flags of `serve` about mid-stream migration (flattened into
/// [`super::ServeArgs`]).
#[derive(Debug, Default, Clone, clap::Args)]
pub struct MigrationArgs {
    /// Times one streamed answer may move to another worker when its
    /// worker fails mid-answer, 0 to 100; 0 turns migration off
    /// [default: 3].
    #[arg(long, env = "PREFIX_ROUTER_MIGRATION_LIMIT")]
    pub migration_limit: Option<u32>,
    /// A worker that sends no chunk of a streamed answer for this long has
    /// failed (the answer moves); more than 0 [default: 30s].
    #[arg(long, env = "PREFIX_ROUTER_STALL_TIMEOUT", value_parser = parse_duration)]
    pub stall_timeout: Option<Duration>,
    /// Whether a migratable non-streamed request is asked of its worker as
    /// a stream and answered whole, so that it can move too (`false`: it
    /// is forwarded as it came) [default: true].
    #[arg(long, env = "PREFIX_ROUTER_MIGRATE_UNSTREAMED", value_name = "BOOL")]
    pub migrate_unstreamed: Option<bool>,
}

/// The settings `args` give, or why they are refused.
pub(super) fn resolve(args: &MigrationArgs) -> anyhow::Result<MigrationSettings> {
    let defaults = MigrationSettings::default();
    let limit = args.migration_limit.unwrap_or(defaults.limit);
    if limit > MAX_LIMIT {
        bail!("--migration-limit must be within 0 and {MAX_LIMIT}, got {limit}");
    }
    let stall_timeout = args.stall_timeout.unwrap_or(defaults.stall_timeout);
    if stall_timeout.is_zero() {
        bail!("--stall-timeout must be more than 0");
    }
    Ok(MigrationSettings {
        limit,
        stall_timeout,
        unstreamed: args.migrate_unstreamed.unwrap_or(defaults.unstreamed),
    })
}
