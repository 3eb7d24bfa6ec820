//! Topic names and broker lists, as both Kafka kinds' configs check them.

use weir_common::job::kind::{field_err, ConfigFieldError, ConfigReader};

/// Checks a topic name by Kafka's own rule; `field` names the config field in the error.
pub(super) fn check_topic(field: &str, t: &str) -> Result<(), ConfigFieldError> {
    let legal = !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if legal {
        Ok(())
    } else {
        Err(field_err(field, format!("{t:?} is not a legal topic name (1–249 of a-z, A-Z, 0-9, '.', '_', '-')")))
    }
}

/// `bootstrap_servers`: required, not empty.
pub(super) fn bootstrap_servers(r: &ConfigReader) -> Result<String, ConfigFieldError> {
    match r.string("bootstrap_servers")?.as_deref().map(str::trim) {
        Some(s) if !s.is_empty() => Ok(s.to_string()),
        _ => Err(field_err("bootstrap_servers", "required: host:port of at least one broker")),
    }
}
