//! A run's progress line on stderr: retired instructions, forward passes and their rate,
//! redrawn as the run goes. Long programs (millions of instructions, minutes on the chip)
//! otherwise print nothing between their output lines. Drawn only where stderr is a
//! terminal and only once the run has gone on for [`SHOW_AFTER`] (short runs never show
//! it); it is cleared before anything else is reported.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a run goes before its progress line appears.
pub const SHOW_AFTER: Duration = Duration::from_secs(2);

/// How often the spinner turns (the counts change once a chunk of instructions).
const SPIN: Duration = Duration::from_millis(200);

/// The progress line of one run (or none: [`RunProgress::none`]).
pub struct RunProgress {
    bar: Option<ProgressBar>,
    start: Instant,
    shown: bool,
}

impl RunProgress {
    /// A line for a run starting now (drawn later, on a terminal only).
    pub fn on_stderr() -> Self {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}").expect("a fixed template"));
        Self {
            bar: Some(bar),
            start: Instant::now(),
            shown: false,
        }
    }

    /// No line at all.
    pub fn none() -> Self {
        Self {
            bar: None,
            start: Instant::now(),
            shown: false,
        }
    }

    /// Redraws the line with the counts so far (`passes` 0: a machine without passes).
    pub fn update(&mut self, retired: u64, passes: u64) {
        let Some(bar) = &self.bar else { return };
        let elapsed = self.start.elapsed();
        if !self.shown && elapsed >= SHOW_AFTER {
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.enable_steady_tick(SPIN);
            self.shown = true;
        }
        bar.set_message(progress_text(retired, passes, elapsed.as_secs_f64()));
    }

    /// Runs `write` (the program's output) with the line lifted out of the way.
    pub fn suspend<R>(&self, write: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) if self.shown => bar.suspend(write),
            _ => write(),
        }
    }

    /// Removes the line.
    pub fn clear(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for RunProgress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// "N instructions retired · M passes (R passes/s)", the passes left out where there are none.
fn progress_text(retired: u64, passes: u64, seconds: f64) -> String {
    let mut text = format!("{} instructions retired", grouped(retired));
    if passes > 0 {
        let rate = passes as f64 / seconds.max(1e-9);
        text += &format!(
            " · {} forward passes ({} passes/s)",
            grouped(passes),
            grouped(rate as u64)
        );
    }
    text
}

/// `n` with its thousands separated by commas.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_groups_thousands_and_leaves_out_absent_passes() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(11_018_285), "11,018,285");
        assert_eq!(progress_text(1_234, 0, 1.0), "1,234 instructions retired");
        assert_eq!(
            progress_text(10_000, 14_000, 1.0),
            "10,000 instructions retired · 14,000 forward passes (14,000 passes/s)"
        );
    }

    #[test]
    fn no_line_draws_nothing_and_suspends_nothing() {
        let mut none = RunProgress::none();
        none.update(5, 6);
        assert_eq!(none.suspend(|| 7), 7);
        none.clear();
    }
}
