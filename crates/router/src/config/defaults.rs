//! Defaults that depend on the machine: thread counts, the connection cap
//! and the router id.

/// The cores this process may use (2 when that is unknown).
pub(super) fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from)
}

/// Half the process's open-file limit (the other half is for the workers'
/// side of proxied requests, Valkey and logs), at most 10,000, at least 64.
pub(super) fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given, which lives
    // for the whole call.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    let files = if ok {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    (files / 2).clamp(64, 10_000)
}

pub(super) fn default_router_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty() && protocol::check_name("router id", h).is_ok())
        .unwrap_or_else(|| "router".into());
    // A restarted router must not inherit a crashed one's in-flight counts.
    format!(
        "{host}-{}-{:06x}",
        std::process::id(),
        rand::random::<u32>() & 0xff_ffff
    )
}
