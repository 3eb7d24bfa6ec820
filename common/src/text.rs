//! Quoting a user's values in error messages without letting an error grow with its input (a spec's uid or
//! config value may be megabytes; an error that echoes it whole can outgrow what a client reads).

/// How much of a user's value an error message repeats.
pub const ECHO_CHARS: usize = 64;

/// A value from a user, quoted for an error message and cut to its first characters, so that an error never
/// grows with its input.
pub fn echo(value: &str) -> String {
    match value.char_indices().nth(ECHO_CHARS) {
        None => format!("{value:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes)", &value[..cut], value.len()),
    }
}

/// A value from a user cut to its first characters for an error message that quotes it itself (an operator's
/// uid in `spec::SpecError::Operator`).
pub fn shortened(value: &str) -> String {
    match value.char_indices().nth(ECHO_CHARS) {
        None => value.to_string(),
        Some((cut, _)) => format!("{}… ({} bytes)", &value[..cut], value.len()),
    }
}
