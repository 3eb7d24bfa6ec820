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

/// Longest message [`cut_message`] lets through.
pub const MAX_MESSAGE_CHARS: usize = 512;

/// A message from a library that may quote a user's input (a YAML parser's "invalid type: string \"…\""), with
/// every double-quoted stretch cut to its first [`ECHO_CHARS`] characters and the whole to
/// [`MAX_MESSAGE_CHARS`]: an error never grows with its input.
pub fn cut_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MAX_MESSAGE_CHARS + 16));
    let mut chars = message.chars();
    let mut quoted = 0usize;
    let mut in_quote = false;
    while let Some(c) = chars.next() {
        if in_quote {
            if c == '"' {
                if quoted > ECHO_CHARS {
                    out.push('…');
                }
                in_quote = false;
                out.push('"');
                continue;
            }
            quoted += 1;
            if quoted <= ECHO_CHARS {
                out.push(c);
            }
            if c == '\\' {
                // An escaped character belongs to the quote, whatever it is.
                if let Some(escaped) = chars.next() {
                    if quoted <= ECHO_CHARS {
                        out.push(escaped);
                    }
                }
            }
            continue;
        }
        if out.chars().count() >= MAX_MESSAGE_CHARS {
            out.push('…');
            break;
        }
        if c == '"' {
            in_quote = true;
            quoted = 0;
        }
        out.push(c);
    }
    if in_quote && quoted > ECHO_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_quote_at_most_the_start_of_a_value() {
        let value = "x".repeat(200_000);
        let cut = cut_message(&format!("operators: invalid type: string \"{value}\", expected a sequence at line 2"));
        assert!(cut.len() < 200, "{cut}");
        assert!(cut.starts_with(&format!("operators: invalid type: string \"{}…\"", "x".repeat(ECHO_CHARS))), "{cut}");
        assert!(cut.ends_with("expected a sequence at line 2"), "{cut}");
        assert_eq!(cut_message("short \"a\\\"b\" kept"), "short \"a\\\"b\" kept");
        let long = cut_message(&"word ".repeat(100_000));
        assert!(long.chars().count() <= MAX_MESSAGE_CHARS + 1, "{}", long.len());
        let open = cut_message(&format!("unterminated \"{value}"));
        assert!(open.len() < 100, "{open}");
    }
}
