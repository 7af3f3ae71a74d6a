//! [`StaticWorker`]: a worker given on the command line as `[ID=]URL`.

use std::str::FromStr;

/// A worker the router keeps registered itself (it sends no heartbeats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticWorker {
    /// Its id; defaults to the URL's `host:port`.
    pub id: String,
    /// Its base URL.
    pub url: String,
}

impl FromStr for StaticWorker {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let scheme_at = s
            .find("://")
            .ok_or_else(|| format!("worker {s:?}: expected [ID=]http://host:port"))?;
        let (id, url) = match s[..scheme_at].split_once('=') {
            Some((id, _)) => (id.to_owned(), s[id.len() + 1..].to_owned()),
            None => {
                let hostport = s[scheme_at + 3..].split('/').next().unwrap_or_default();
                (hostport.to_owned(), s.to_owned())
            }
        };
        protocol::check_worker_url(&url).map_err(|e| format!("worker {s:?}: {e}"))?;
        protocol::check_name("worker id", &id).map_err(|e| format!("worker {s:?}: {e}"))?;
        Ok(StaticWorker { id, url })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_optional() {
        let w: StaticWorker = "w1=http://127.0.0.1:8001".parse().unwrap();
        assert_eq!(
            (w.id.as_str(), w.url.as_str()),
            ("w1", "http://127.0.0.1:8001")
        );
        let w: StaticWorker = "http://10.0.0.2:8000/".parse().unwrap();
        assert_eq!(w.id, "10.0.0.2:8000");
        assert!("ftp://x".parse::<StaticWorker>().is_err());
        assert!("w1=".parse::<StaticWorker>().is_err());
        assert!("w1=http://h:1/?x=1".parse::<StaticWorker>().is_err());
    }
}
