//! `deploy/haproxy.cfg` is valid for HAProxy itself.

use super::*;

#[test]
fn deploy_haproxy_cfg_is_valid_for_haproxy() {
    let out = fleet::ProcSpec::quiet("haproxy", haproxy())
        .args(["-c", "-f"])
        .arg(root().join("deploy/haproxy.cfg").display().to_string())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "haproxy -c refuses deploy/haproxy.cfg:\n{text}"
    );
    assert!(
        !text.contains("[WARNING]") && !text.contains("[ALERT]"),
        "haproxy -c warns about deploy/haproxy.cfg:\n{text}"
    );
}
