//! The CPU time a process has spent (user + system), read from
//! `/proc/<pid>/stat`: what load tests report per process.

/// User + system CPU seconds of `pid` from `/proc/<pid>/stat`.
pub fn proc_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu(&stat).map(|ticks| ticks as f64 / clock_ticks())
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line, in ticks.
fn parse_stat_cpu(stat: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces; fields resume after ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14 → index 11.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_fields() {
        let line = "1234 (my proc) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        assert_eq!(parse_stat_cpu(line), Some(300));
        assert_eq!(parse_stat_cpu("garbage"), None);
    }

    #[test]
    fn own_cpu_is_readable() {
        assert!(proc_cpu_seconds(std::process::id()).is_some());
    }
}
