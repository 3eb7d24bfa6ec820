//! What can go wrong in a command, and the exit code each case gets. `main` prints `error: <message>`.

use std::fmt;
use std::process::ExitCode;

/// A command's failure.
#[derive(Debug)]
pub enum CliError {
    /// The job spec is invalid: it did not parse, or the job manager rejected it (exit 2).
    Spec(String),
    /// Bad options or config file (exit 2, like a usage error).
    Usage(String),
    /// The job manager cannot be reached (exit 1).
    Unreachable {
        /// The address tried.
        addr: String,
        /// Why, with the underlying causes.
        cause: String,
    },
    /// The job manager did not answer in time (exit 1).
    Timeout(String),
    /// Anything else (exit 1).
    Failed(String),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code())
    }

    /// The exit code as a number.
    pub fn code(&self) -> u8 {
        match self {
            CliError::Spec(_) | CliError::Usage(_) => 2,
            CliError::Unreachable { .. } | CliError::Timeout(_) | CliError::Failed(_) => 1,
        }
    }

    /// Whether retrying later may help (the job manager is down or slow, e.g. while it restarts).
    pub fn is_transient(&self) -> bool {
        matches!(self, CliError::Unreachable { .. } | CliError::Timeout(_))
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Spec(m) | CliError::Usage(m) | CliError::Timeout(m) | CliError::Failed(m) => f.write_str(m),
            CliError::Unreachable { addr, cause } => write!(f, "cannot reach the job manager at {addr}: {cause}"),
        }
    }
}

impl std::error::Error for CliError {}

impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> Self {
        CliError::Failed(format!("{e:#}"))
    }
}

/// An error and its causes, joined by `": "`, skipping a cause whose text its parent already contains.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let text = c.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);
    impl fmt::Display for E {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn chain_and_codes() {
        let e = E("transport error", Some(Box::new(E("tcp connect error", Some(Box::new(E("refused", None)))))));
        assert_eq!(error_chain(&e), "transport error: tcp connect error: refused");
        let e = E("a: b", Some(Box::new(E("b", None))));
        assert_eq!(error_chain(&e), "a: b");

        let u = CliError::Unreachable { addr: "http://h:1".into(), cause: "refused".into() };
        assert_eq!(u.to_string(), "cannot reach the job manager at http://h:1: refused");
        assert_eq!(u.code(), 1);
        assert!(u.is_transient());
        assert_eq!(CliError::Spec("x".into()).code(), 2);
        assert_eq!(CliError::Failed("x".into()).code(), 1);
    }
}
