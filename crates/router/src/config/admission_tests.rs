//! Admission settings: flags over the file, and the errors at start.

use super::*;

fn file(toml_text: &str) -> FileKeys {
    let f: super::super::file::FileConfig = toml::from_str(toml_text).expect("toml");
    FileKeys {
        tenant_header: f.tenant_header,
        tenant_from_user: f.tenant_from_user,
        tenant_requests_per_minute: f.tenant_requests_per_minute,
        tenant_tokens_per_minute: f.tenant_tokens_per_minute,
        tenant_max_concurrent: f.tenant_max_concurrent,
        objectives: f.objectives,
        pass_priority: f.pass_priority,
        default_max_tokens: f.default_max_tokens,
        rate_limit_window: f.rate_limit_window,
        tenants: f.tenants,
    }
}

fn error(args: &AdmissionArgs, toml_text: &str) -> String {
    format!("{:#}", resolve(args, file(toml_text)).unwrap_err())
}

#[test]
fn the_file_and_flags() {
    let text = r#"
        tenant_header = "X-Gateway-Inference-Fairness-Id"
        tenant_requests_per_minute = 60
        rate_limit_window = "10s"
        [objectives]
        interactive = 10
        batch = -5
        [[tenants]]
        name = "team-a"
        weight = 3
        tokens_per_minute = 100000
        [[tenants]]
        name = "team-b"
    "#;
    let cfg = resolve(&AdmissionArgs::default(), file(text)).unwrap();
    assert_eq!(
        cfg.tenant_source,
        TenantSource::Header(HeaderName::from_static("x-gateway-inference-fairness-id"))
    );
    assert_eq!(cfg.objectives["batch"], -5);
    assert_eq!(cfg.window, Duration::from_secs(10));
    assert_eq!(cfg.default_max_tokens, DEFAULT_MAX_TOKENS);
    // A named tenant's unset limits fall back to the defaults.
    let a = cfg.limits_of("team-a", true);
    assert_eq!(a.requests_per_minute, Some(60));
    assert_eq!(a.tokens_per_minute, Some(100_000));
    assert_eq!(cfg.tenant("team-a").unwrap().weight, 3);
    assert_eq!(cfg.tenant("team-b").unwrap().weight, 1);
    assert_eq!(cfg.limits_of("header:x", false).tokens_per_minute, None);
    assert!(cfg.limits_anything());
    // Flags win; objectives from flags replace the file's.
    let args = AdmissionArgs {
        tenant_requests_per_minute: Some(5),
        objectives: vec!["chat=3".into()],
        ..AdmissionArgs::default()
    };
    let cfg = resolve(&args, file(text)).unwrap();
    assert_eq!(cfg.default_limits.requests_per_minute, Some(5));
    assert_eq!(cfg.objectives.len(), 1);
    assert_eq!(cfg.objectives["chat"], 3);
    // Nothing set: no limits, tenants by API key.
    let none = resolve(&AdmissionArgs::default(), file("")).unwrap();
    assert_eq!(none.tenant_source, TenantSource::ApiKey);
    assert!(!none.limits_anything());
}

#[test]
fn bad_settings_are_refused_at_start() {
    let none = AdmissionArgs::default();
    let e = error(&none, "[[tenants]]\nname = \"a\"\nweight = -1");
    assert!(e.contains("weight must be a positive"), "{e}");
    let e = error(
        &none,
        "[[tenants]]\nname = \"a\"\n[[tenants]]\nname = \"a\"",
    );
    assert!(e.contains("names \"a\" twice"), "{e}");
    let e = error(&none, "[[tenants]]\nname = \"a\"\nmax_concurrent = 0");
    assert!(e.contains("max_concurrent must be positive"), "{e}");
    let e = error(&none, "[[tenants]]\nname = \"a b\"");
    assert!(e.contains("tenant name"), "{e}");
    let e = error(
        &none,
        "[[tenants]]\nname = \"a\"\napi_key_sha256 = [\"xyz\"]",
    );
    assert!(e.contains("hex digits"), "{e}");
    let e = error(&none, "tenant_header = \"x\"\ntenant_from_user = true");
    assert!(e.contains("both name the tenant source"), "{e}");
    let e = error(&none, "tenant_header = \"bad header\"");
    assert!(e.contains("not a header name"), "{e}");
    let e = error(&none, "rate_limit_window = \"10ms\"");
    assert!(e.contains("at least 100ms"), "{e}");
    let flags = |objective: &str| AdmissionArgs {
        objectives: vec![objective.into()],
        ..AdmissionArgs::default()
    };
    assert!(error(&flags("chat"), "").contains("NAME=PRIORITY"));
    assert!(error(&flags("chat=high"), "").contains("whole number"));
    let zero = AdmissionArgs {
        tenant_tokens_per_minute: Some(0),
        ..AdmissionArgs::default()
    };
    assert!(error(&zero, "").contains("must be positive"));
    // An unknown key of a tenant is a parse error, not ignored.
    let unknown: Result<super::super::file::FileConfig, _> =
        toml::from_str("[[tenants]]\nname = \"a\"\nrpm = 3");
    assert!(unknown.is_err());
}
