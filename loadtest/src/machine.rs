//! The machine a run was measured on, for the report: numbers only mean
//! something next to the cores and CPU model that produced them.

use serde::Serialize;

/// What the report says about the machine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    /// Cores available to this process.
    pub nproc: usize,
    /// `model name` from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// The kernel release.
    pub kernel: String,
    /// Total memory, from `/proc/meminfo`.
    pub memory: String,
}

impl Machine {
    /// Reads it from the system; unknown fields say `unknown`.
    pub fn detect() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        Machine {
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: field(&read("/proc/cpuinfo"), "model name")
                .unwrap_or_else(|| "unknown".into()),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            memory: field(&read("/proc/meminfo"), "MemTotal").unwrap_or_else(|| "unknown".into()),
        }
    }

    /// One line for a report.
    pub fn summary(&self) -> String {
        format!(
            "Machine: {} cores, {}, Linux {}, {} memory.",
            self.nproc, self.cpu_model, self.kernel, self.memory
        )
    }
}

/// Busy and total CPU ticks of the whole machine, all cores, from the first
/// line of `/proc/stat` (idle and iowait count as not busy).
pub fn cpu_ticks() -> Option<(u64, u64)> {
    parse_cpu_line(std::fs::read_to_string("/proc/stat").ok()?.lines().next()?)
}

fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.take(8).filter_map(|f| f.parse().ok()).collect();
    if v.len() < 5 {
        return None;
    }
    let total: u64 = v.iter().sum();
    Some((total - v[3] - v[4], total))
}

/// The value of the first `key: value` line with `key`.
fn field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_found() {
        let t = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags : x\n";
        assert_eq!(field(t, "model name").as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(field(t, "nope"), None);
        assert!(Machine::detect().nproc >= 1);
        assert_eq!(
            parse_cpu_line("cpu  10 0 5 80 5 0 0 0 0 0"),
            Some((15, 100))
        );
        assert_eq!(parse_cpu_line("cpu0 1 2 3 4 5"), None);
        assert!(cpu_ticks().is_some());
    }
}
