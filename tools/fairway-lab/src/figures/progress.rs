//! A progress line on stderr for long work: redrawn in place on a terminal,
//! a line every 10 s in a log.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// A progress line on stderr, redrawn at most every 200 ms.
pub(crate) struct Progress {
    what: String,
    total: u64,
    started: Instant,
    drawn: Option<Instant>,
    finished: bool,
}

impl Progress {
    pub(crate) fn new(what: impl Into<String>, total: u64) -> Progress {
        Progress { what: what.into(), total, started: Instant::now(), drawn: None, finished: false }
    }

    /// `done` of the total, with a rate; `note` is appended. On a terminal
    /// the line is redrawn in place; in a log, a line every 10 s.
    pub(crate) fn update(&mut self, done: u64, note: &str) {
        if self.finished {
            return;
        }
        self.finished = done >= self.total;
        let now = Instant::now();
        let terminal = std::io::stderr().is_terminal();
        let every = if terminal { Duration::from_millis(200) } else { Duration::from_secs(10) };
        if self.drawn.is_some_and(|at| now - at < every) && done < self.total {
            return;
        }
        self.drawn = Some(now);
        let elapsed = self.started.elapsed().as_secs_f64();
        let rate = done as f64 / elapsed.max(1e-9);
        let line =
            format!("{}: {}/{} ({rate:.0}/s, {elapsed:.0} s) {note}", self.what, done.min(self.total), self.total);
        if !terminal {
            eprintln!("{line}");
        } else if done >= self.total {
            eprintln!("\r\x1b[2K{line}");
        } else {
            eprint!("\r\x1b[2K{line}");
        }
    }
}
