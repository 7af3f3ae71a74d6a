//! The classes and tenants of `loadtest overload`: `NAME=NUMBER:SHARE`
//! specs, picking one by share, Jain's index, and the routers' config file
//! that declares them.

use std::fmt::Write as _;

use anyhow::{Context, bail};

use super::TENANT_HEADER;

/// A name, a number and a share, from `NAME=NUMBER:SHARE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub name: String,
    pub number: f64,
    pub share: f64,
}

pub fn parse_parts(specs: &[String], what: &str) -> anyhow::Result<Vec<Part>> {
    let parts = specs
        .iter()
        .map(|s| {
            let (name, rest) = s
                .split_once('=')
                .with_context(|| format!("--{what} {s:?}: expected NAME=NUMBER:SHARE"))?;
            let (n, share) = rest
                .split_once(':')
                .with_context(|| format!("--{what} {s:?}: expected NAME=NUMBER:SHARE"))?;
            let part = Part {
                name: name.trim().to_owned(),
                number: n
                    .trim()
                    .parse()
                    .with_context(|| format!("--{what} {s:?}"))?,
                share: share
                    .trim()
                    .parse()
                    .with_context(|| format!("--{what} {s:?}"))?,
            };
            if part.name.is_empty() || part.share.is_nan() || part.share <= 0.0 {
                bail!("--{what} {s:?}: needs a name and a positive share");
            }
            Ok(part)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if parts.is_empty() {
        bail!("at least one --{what}");
    }
    Ok(parts)
}

/// Picks by share with `u` in [0, 1).
pub fn pick(parts: &[Part], u: f64) -> usize {
    let total: f64 = parts.iter().map(|p| p.share).sum();
    let mut acc = 0.0;
    for (i, p) in parts.iter().enumerate() {
        acc += p.share / total;
        if u < acc {
            return i;
        }
    }
    parts.len() - 1
}

/// Jain's fairness index of `x` (1: all equal).
pub fn jain(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    (squares > 0.0).then(|| sum * sum / (x.len() as f64 * squares))
}

/// The class a latency target is about: the highest priority among those
/// that may wait (priority >= 0).
pub fn top_class(classes: &[Part]) -> Option<usize> {
    classes
        .iter()
        .enumerate()
        .filter(|(_, c)| c.number >= 0.0)
        .max_by(|a, b| a.1.number.total_cmp(&b.1.number))
        .map(|(i, _)| i)
}

/// The routers' config file: the tenant header, the classes' objectives,
/// the tenants' weights.
pub fn router_config(classes: &[Part], tenants: &[Part]) -> String {
    let mut s = format!("tenant_header = \"{TENANT_HEADER}\"\n\n[objectives]\n");
    for c in classes {
        let _ = writeln!(s, "\"{}\" = {}", c.name, c.number as i64);
    }
    for t in tenants {
        let _ = write!(
            s,
            "\n[[tenants]]\nname = \"{}\"\nweight = {}\n",
            t.name,
            t.number.max(1.0) as i64
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_when_equal_and_one_over_n_when_one_takes_all() {
        assert_eq!(jain(&[3.0, 3.0, 3.0]), Some(1.0));
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]).unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[0.0, 0.0]), None);
    }

    #[test]
    fn parts_parse_and_pick_by_share() {
        let p = parse_parts(&["a=3:0.75".into(), "b=1:0.25".into()], "tenant").unwrap();
        assert_eq!(p[0].number, 3.0);
        assert_eq!(pick(&p, 0.7), 0);
        assert_eq!(pick(&p, 0.8), 1);
        assert!(parse_parts(&["a=1".into()], "tenant").is_err());
        assert!(parse_parts(&["a=1:0".into()], "tenant").is_err());
        let toml = router_config(&p, &p);
        assert!(toml.contains("\"a\" = 3"));
        assert!(toml.contains("[[tenants]]\nname = \"b\"\nweight = 1"));
    }
}
