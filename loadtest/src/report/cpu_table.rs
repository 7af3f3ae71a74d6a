//! The report's CPU table: each process group's CPU use during the
//! workload, and per request.

use super::table::markdown;
use crate::runner::ArmResult;

/// CPU use during the workload, % of one core, and per request: the CPU
/// time of Valkey, of all routers and of HAProxy divided by the requests
/// completed. HAProxy relays the same bytes as the routers without routing
/// them, so its time per request is what relaying alone costs.
pub fn cpu_table(arms: &[ArmResult]) -> String {
    let header = [
        "policy",
        "routers (all)",
        "busiest router",
        "valkey",
        "valkey ms/req",
        "of which primaries ms/req",
        "valkey primaries max/mean",
        "routers ms/req",
        "decision p50 ms",
        "sims (all)",
        "haproxy",
        "haproxy ms/req",
        "loadtest",
        "machine (all cores)",
    ];
    let rows: Vec<Vec<String>> = arms
        .iter()
        .filter_map(|a| {
            let c = a.cpu?;
            let per_request = |percent: f64| {
                let rate = a.summary.req_per_s;
                if rate > 0.0 {
                    format!("{:.2}", 10.0 * percent / rate)
                } else {
                    "-".to_owned()
                }
            };
            Some(vec![
                a.label.clone(),
                format!("{:.0}%", c.routers),
                format!("{:.0}%", c.router_max),
                format!("{:.0}%", c.valkey),
                per_request(c.valkey),
                c.valkey_primaries
                    .map_or_else(|| "-".to_owned(), per_request),
                c.valkey_spread
                    .map_or_else(|| "-".to_owned(), |s| format!("{s:.2}")),
                per_request(c.routers),
                a.decision_p50_ms
                    .map_or_else(|| "-".to_owned(), |d| format!("{d:.3}")),
                format!("{:.0}%", c.sims),
                format!("{:.0}%", c.balancer),
                // The builtin balancer runs inside the load test: not measured.
                if c.balancer > 0.0 {
                    per_request(c.balancer)
                } else {
                    "-".to_owned()
                },
                format!("{:.0}%", c.loadtest),
                format!("{:.0}%", c.machine),
            ])
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    markdown(&header, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::table::tests::arm;
    use crate::runner::CpuPercent;

    #[test]
    fn no_cpu_measured_no_table() {
        assert_eq!(cpu_table(&[arm("x")]), "");
    }

    #[test]
    fn cpu_per_request_is_cpu_time_over_requests() {
        let mut a = arm("cache_aware ×4");
        a.summary.req_per_s = 31.2;
        a.cpu = Some(CpuPercent {
            routers: 12.1,
            router_max: 3.3,
            valkey: 6.0,
            valkey_primaries: None,
            valkey_spread: None,
            sims: 12.7,
            balancer: 4.7,
            loadtest: 5.7,
            machine: 20.6,
        });
        let t = cpu_table(std::slice::from_ref(&a));
        let lines: Vec<&str> = t.lines().collect();
        let columns: Vec<&str> = lines[0].split(" | ").collect();
        let values: Vec<&str> = lines[2].split(" | ").collect();
        let value = |name: &str| values[columns.iter().position(|c| *c == name).unwrap()];
        // 10 ms of a second per % of a core, over 31.2 requests a second.
        assert_eq!(value("routers ms/req"), "3.88");
        assert_eq!(value("valkey ms/req"), "1.92");
        assert_eq!(value("haproxy ms/req"), "1.51");
        assert_eq!(value("haproxy"), "5%");
        assert_eq!(value("of which primaries ms/req"), "-");
        assert_eq!(value("decision p50 ms"), "-");
        a.decision_p50_ms = Some(0.4321);
        let t = cpu_table(std::slice::from_ref(&a));
        let values: Vec<&str> = t.lines().nth(2).unwrap().split(" | ").collect();
        let at = columns
            .iter()
            .position(|c| *c == "decision p50 ms")
            .unwrap();
        assert_eq!(values[at], "0.432");
        // The builtin balancer: no HAProxy to measure.
        let mut builtin = arm("x");
        builtin.summary.req_per_s = 31.2;
        builtin.cpu = a.cpu.map(|c| CpuPercent { balancer: 0.0, ..c });
        let t = cpu_table(&[builtin]);
        let values: Vec<&str> = t.lines().nth(2).unwrap().split(" | ").collect();
        let at = columns.iter().position(|c| *c == "haproxy ms/req").unwrap();
        assert_eq!(values[at], "-");
    }
}
