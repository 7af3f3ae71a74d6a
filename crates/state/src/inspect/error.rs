//! [`InspectError`]: why `prefix-router inspect` could not finish (as
//! opposed to finding violations, which is a result).

/// Why an inspection failed. Messages never carry the Valkey password.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// A flag's value is unusable (bad URL, key prefix or model name).
    #[error("invalid {what}: {detail}")]
    Invalid {
        /// The flag at fault.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// Valkey could not be reached or a read failed.
    #[error("valkey at {url}: {context}: {detail}")]
    Valkey {
        /// The URL, password redacted.
        url: String,
        /// What was being read.
        context: String,
        /// The client's message, password redacted.
        detail: String,
    },
    /// Valkey replied in a shape the schema does not allow.
    #[error("unexpected reply to {context}: {detail}")]
    Reply {
        /// What was being read.
        context: String,
        /// What was wrong with the reply.
        detail: String,
    },
    /// The report could not be written.
    #[error("writing the report: {0}")]
    Output(#[from] std::io::Error),
}

impl From<protocol::InvalidName> for InspectError {
    fn from(e: protocol::InvalidName) -> Self {
        InspectError::Invalid {
            what: e.what,
            detail: e.detail.into(),
        }
    }
}

impl From<crate::StateError> for InspectError {
    fn from(e: crate::StateError) -> Self {
        match e {
            crate::StateError::Invalid { what, detail } => InspectError::Invalid { what, detail },
            other => InspectError::Invalid {
                what: "state settings",
                detail: other.to_string(),
            },
        }
    }
}
