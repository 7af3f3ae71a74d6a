//! [`MigrationSettings`]: how answers move when their worker fails
//! mid-stream (`migration.rs` resolves them from the flags;
//! `crate::proxy`'s `migrate` runs them).

use std::time::Duration;

/// Migration's settings (`--migration-limit`, `--stall-timeout`,
/// `--migrate-unstreamed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationSettings {
    /// Times one answer may move to another worker; 0: never.
    pub limit: u32,
    /// A worker that sends nothing this long in a streamed answer failed.
    pub stall_timeout: Duration,
    /// A migratable non-streamed request is streamed from its workers and
    /// answered whole (`--migrate-unstreamed`).
    pub unstreamed: bool,
}

impl Default for MigrationSettings {
    /// 3 moves; 30 s without a chunk; non-streamed answers too.
    fn default() -> Self {
        MigrationSettings {
            limit: 3,
            stall_timeout: Duration::from_secs(30),
            unstreamed: true,
        }
    }
}
