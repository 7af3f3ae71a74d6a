//! `prefix-router epp`'s own settings (the response deadline, the cap on
//! streams, the gRPC port's TLS): defaults < TOML file < PREFIX_ROUTER_* <
//! flags. One test function, because the environment is process-wide.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use clap::Parser;
use prefix_router::{EppArgs, ServeConfig};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    epp: EppArgs,
}

fn resolve(argv: &[&str]) -> anyhow::Result<ServeConfig> {
    let base = ["epp", "--allow-unauthenticated-internal"];
    let cli = Cli::try_parse_from(base.iter().chain(argv).copied())?;
    ServeConfig::resolve_epp(cli.epp)
}

#[test]
fn picker_settings_file_then_environment_then_flags() {
    let defaults = resolve(&[]).unwrap().epp.unwrap();
    assert_eq!(defaults.response_timeout, Duration::from_secs(600));
    assert_eq!(defaults.max_streams, None);
    assert!(defaults.tls.is_none());

    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        file,
        r#"
epp_response_timeout = "20s"
epp_max_streams = 7
grpc_tls_cert = "/etc/picker/tls.crt"
grpc_tls_key = "/etc/picker/tls.key"
grpc_tls_client_ca = "/etc/picker/ca.crt"
"#
    )
    .unwrap();
    let path = file.path().to_str().unwrap().to_owned();
    let cfg = resolve(&["--config", &path]).unwrap().epp.unwrap();
    assert_eq!(cfg.response_timeout, Duration::from_secs(20));
    assert_eq!(cfg.max_streams, Some(7));
    let tls = cfg.tls.unwrap();
    assert_eq!(tls.cert, Path::new("/etc/picker/tls.crt"));
    assert_eq!(tls.key, Path::new("/etc/picker/tls.key"));
    assert_eq!(tls.client_ca, Path::new("/etc/picker/ca.crt"));

    // SAFETY: this test binary has a single test, so no thread reads the
    // environment concurrently.
    unsafe {
        std::env::set_var("PREFIX_ROUTER_EPP_RESPONSE_TIMEOUT", "30s");
        std::env::set_var("PREFIX_ROUTER_EPP_MAX_STREAMS", "8");
        std::env::set_var("PREFIX_ROUTER_GRPC_TLS_CLIENT_CA", "/env/ca.crt");
    }
    let cfg = resolve(&["--config", &path, "--epp-max-streams", "9"])
        .unwrap()
        .epp
        .unwrap();
    assert_eq!(
        cfg.response_timeout,
        Duration::from_secs(30),
        "env over file"
    );
    assert_eq!(cfg.max_streams, Some(9), "flag over env");
    assert_eq!(cfg.tls.unwrap().client_ca, Path::new("/env/ca.crt"));
    unsafe {
        std::env::remove_var("PREFIX_ROUTER_EPP_RESPONSE_TIMEOUT");
        std::env::remove_var("PREFIX_ROUTER_EPP_MAX_STREAMS");
        std::env::remove_var("PREFIX_ROUTER_GRPC_TLS_CLIENT_CA");
    }

    // TLS goes with a client CA; zero deadlines and caps are refused.
    let partial = resolve(&["--grpc-tls-cert", "/a.crt", "--grpc-tls-key", "/a.key"]);
    let err = format!("{:#}", partial.unwrap_err());
    assert!(err.contains("--grpc-tls-client-ca"), "{err}");
    assert!(resolve(&["--epp-response-timeout", "0s"]).is_err());
    assert!(resolve(&["--epp-max-streams", "0"]).is_err());
}
