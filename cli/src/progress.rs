//! A progress line on stderr: rewritten in place on a terminal, one line per change otherwise (logs, pipes).

use std::io::{IsTerminal, Write};

/// Shows the progress of something that is being waited for.
pub struct Progress<W: Write> {
    out: W,
    tty: bool,
    last_key: Option<String>,
    line_open: bool,
}

impl Progress<std::io::Stderr> {
    /// Progress on stderr, in place if stderr is a terminal.
    pub fn stderr() -> Self {
        let err = std::io::stderr();
        let tty = err.is_terminal();
        Progress::new(err, tty)
    }
}

impl<W: Write> Progress<W> {
    /// Progress on `out`; `tty` selects the in-place form.
    pub fn new(out: W, tty: bool) -> Self {
        Progress { out, tty, last_key: None, line_open: false }
    }

    /// Shows `line`. Without a terminal, a new line is written only when `key` (the part of the line that
    /// matters, e.g. without the elapsed time) differs from the previous one.
    pub fn update(&mut self, key: &str, line: &str) {
        if self.tty {
            let _ = write!(self.out, "\r\x1b[2K{line}");
            self.line_open = true;
        } else if self.last_key.as_deref() != Some(key) {
            let _ = writeln!(self.out, "{line}");
        }
        self.last_key = Some(key.to_string());
        let _ = self.out.flush();
    }

    /// Ends the in-place line so that what follows starts on a fresh line.
    pub fn finish(&mut self) {
        if self.line_open {
            let _ = writeln!(self.out);
            let _ = self.out.flush();
            self.line_open = false;
        }
    }

    /// The writer (for tests).
    pub fn into_inner(self) -> W {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_per_change_without_terminal() {
        let mut p = Progress::new(Vec::new(), false);
        p.update("RUNNING", "RUNNING (1 s)");
        p.update("RUNNING", "RUNNING (2 s)");
        p.update("FINISHED", "FINISHED (3 s)");
        p.finish();
        assert_eq!(String::from_utf8(p.into_inner()).unwrap(), "RUNNING (1 s)\nFINISHED (3 s)\n");
    }

    #[test]
    fn in_place_on_terminal() {
        let mut p = Progress::new(Vec::new(), true);
        p.update("a", "one");
        p.update("a", "two");
        p.finish();
        p.finish();
        assert_eq!(String::from_utf8(p.into_inner()).unwrap(), "\r\x1b[2Kone\r\x1b[2Ktwo\n");
    }
}
