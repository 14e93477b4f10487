//! The chip's residual-stream layout: anchors, then one dimension per signal, then
//! padding; all after the base model's own dimensions.
//!
//! Anchors pin the input RMSNorm. Every chip token carries anchor values whose squares
//! sum to exactly D·4^k (D the full residual width), so with nothing else in the
//! residual the norm scale is exactly 2^-k: a power of two, which keeps every weight a
//! small integer times a power of two (exact in bf16) and every nominal value exact.
//! Signals whose range exceeds ±1 (sums, column counts, levels) are stored pre-scaled by
//! a power of two into [-1, 1], and every weight that reads them compensates, so the
//! chip's own signals add at most a few thousand to the sum of squares and shift the
//! scale by under 10^-6: far inside every decision margin.

use inband_circuits::{Circuit, Signal};

/// k: the residual's mean square is 4^k, so the norm maps nominal x to x·2^-k.
pub const NORM_EXPONENT: i32 = 10;

/// Where every chip dimension is.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// Base model width (the chip's dimensions come after these).
    pub hidden: usize,
    /// Chip dimensions, padding included.
    pub chip_dims: usize,
    /// (chip dimension, value) of each anchor.
    pub anchors: Vec<(usize, f32)>,
    /// Chip dimension of each circuit signal.
    pub signal_dim: Vec<usize>,
    /// Power-of-two factor each signal is stored with (1 for signals within ±1).
    pub signal_scale: Vec<f32>,
    /// Name of every chip dimension.
    pub names: Vec<String>,
}

fn base4_digit_sum(mut n: usize) -> usize {
    let mut s = 0;
    while n > 0 {
        s += n % 4;
        n /= 4;
    }
    s
}

impl Layout {
    /// Lays out `circuit` after `hidden` base dimensions.
    pub fn new(circuit: &Circuit, hidden: usize) -> Self {
        let needed = circuit.signals.len();
        // The smallest width D whose base-4 digits (each digit one power-of-two anchor)
        // fit in the room left after the signals.
        let mut d = hidden + needed + 1;
        while d < hidden + needed + base4_digit_sum(d) {
            d += 1;
        }
        let chip_dims = d - hidden;
        let mut anchors = Vec::new();
        let (mut rest, mut position) = (d, 0i32);
        while rest > 0 {
            for _ in 0..rest % 4 {
                let value = 2f32.powi(position + NORM_EXPONENT);
                anchors.push((anchors.len(), value));
            }
            rest /= 4;
            position += 1;
        }
        // Largest anchor first: constants are carried by anchor 0.
        anchors.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
        let anchors: Vec<(usize, f32)> = anchors.iter().enumerate().map(|(i, (_, v))| (i, *v)).collect();
        let mut names: Vec<String> = anchors.iter().map(|(i, v)| format!("anchor{i} (= {v})")).collect();
        let signal_dim: Vec<usize> = (0..needed).map(|s| anchors.len() + s).collect();
        let signal_scale = circuit
            .signals
            .iter()
            .map(|s| {
                let magnitude = s.range.lo.unsigned_abs().max(s.range.hi.unsigned_abs());
                if magnitude <= 1 {
                    1.0
                } else {
                    2f32.powi(-(magnitude.next_power_of_two().trailing_zeros() as i32))
                }
            })
            .collect();
        names.extend(circuit.signals.iter().map(|s| s.name.clone()));
        while names.len() < chip_dims {
            names.push("(padding)".into());
        }
        Self {
            hidden,
            chip_dims,
            anchors,
            signal_dim,
            signal_scale,
            names,
        }
    }

    /// Full residual width.
    pub fn width(&self) -> usize {
        self.hidden + self.chip_dims
    }

    /// Residual index of a signal.
    pub fn dim(&self, s: Signal) -> usize {
        self.hidden + self.signal_dim[s.0 as usize]
    }

    /// Residual index and value of the anchor that carries constants.
    pub fn constant_anchor(&self) -> (usize, f32) {
        (self.hidden + self.anchors[0].0, self.anchors[0].1)
    }

    /// Weight that turns a nominal coefficient on signal `s` into a projection weight
    /// (the norm scales the stored value to value·2^-k; the stored value is the nominal
    /// one times the signal's scale).
    pub fn signal_weight(&self, s: Signal, coefficient: f64) -> f32 {
        (coefficient * 2f64.powi(NORM_EXPONENT) / self.scale(s) as f64) as f32
    }

    /// The factor signal `s` is stored with.
    pub fn scale(&self, s: Signal) -> f32 {
        self.signal_scale[s.0 as usize]
    }

    /// Weight on the constant anchor that adds `constant` to a pre-activation.
    pub fn constant_weight(&self, constant: f64) -> f32 {
        let (_, value) = self.constant_anchor();
        (constant * 2f64.powi(NORM_EXPONENT) / value as f64) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_make_the_mean_square_an_exact_power_of_four() {
        for d in [1, 5, 300, 1000, 1024, 1387, 4200] {
            let mut sum = 0.0f64;
            let (mut rest, mut p) = (d, 0);
            while rest > 0 {
                sum += (rest % 4) as f64 * 4f64.powi(p + NORM_EXPONENT);
                rest /= 4;
                p += 1;
            }
            assert_eq!(sum, d as f64 * 4f64.powi(NORM_EXPONENT));
        }
    }
}
