//! The numeric contract between circuits and the layer math. Circuits speak in
//! nominal units; these constants say how nominal quantities become pre-activations,
//! and why each value keeps every nonlinearity out of its curved region.
//!
//! fp32 facts used (checked in inband-qwen35's scalar tests): silu(x) = x exactly for
//! x >= 17 and -0 for x <= -89; sigmoid(x) is exactly 1 for x >= 17 and 0 for x <= -89;
//! exp(-128) underflows so A_log = -128 gives decay exactly 1.

/// Pre-activation per nominal unit of a decision. Decisions are arranged so that their
/// nominal value is never within 1/2 of zero; 256 · 1/2 = 128 is far past both
/// saturation points (17 and -89) in every direction.
pub const GATE_SCALE: f64 = 256.0;

/// Pre-activation of an "on" memory entry: silu(128) = 128 is stored, an "off" entry
/// gets silu(-128) = -0.
pub const VALUE_ON: f64 = 128.0;

/// Pre-activation per level of an anchored memory entry: levels 1 and up are stored at
/// 32 per level (in silu's identity region), level 0 as 0.
pub const LEVEL_UNIT: f64 = 32.0;

/// Anchored rows keep their anchor in the last this-many entries of each value head:
/// two equal anchors make the normalised anchor sqrt(128/2) = 8, a power of two.
pub const ANCHOR_ENTRIES: usize = 2;

/// The z (gate) an anchored read needs so that a level-ℓ entry comes out as ℓ: the
/// gated norm maps it to 8·ℓ/(rows·anchor), times NORM_WEIGHT, times z.
pub fn anchored_read_gate(anchor: f64, rows_per_read: usize) -> f64 {
    rows_per_read as f64 * anchor / (8.0 * NORM_WEIGHT as f64)
}

/// A_log of every chip head: exp(A_log) underflows to 0, so g = 0 and decay = 1.
pub const A_LOG_NEVER_FORGET: f32 = -128.0;

/// Pre-activation of a one-hot key or query slot that is selected (128: a power of
/// two, so the L2 norm maps it to exactly 1); unselected slots get -128 (silu -> -0).
pub const ADDRESS_ON: f64 = 128.0;

/// The z pre-activation that closes a read's output gate: silu(−128) = −128 / (1 + e¹²⁸)
/// is exactly −0 in fp32 (e¹²⁸ overflows), so the head's output is exactly zero.
pub const Z_CLOSED: f64 = -128.0;

/// The gated RMSNorm weight of every chip layer (shared by all its heads).
pub const NORM_WEIGHT: f32 = 1.0 / 256.0;

/// Weight of the kind score in the logits relative to one unit of field score.
pub const OUTPUT_UNIT: f64 = 16.0;

/// The z (gate) a read of rows with `nonzeros` entries on per value head needs so that
/// an on entry comes out as exactly 1: the gated norm maps on entries to
/// sqrt(128 / nonzeros), times NORM_WEIGHT, times silu(z) = z. Only powers of four of
/// the ratio keep that exact.
pub fn read_gate(nonzeros: usize) -> Option<f64> {
    let scale = match nonzeros {
        2 => 8.0,
        8 => 4.0,
        32 => 2.0,
        128 => 1.0,
        _ => return None,
    };
    Some(1.0 / (NORM_WEIGHT as f64 * scale))
}

#[cfg(test)]
mod tests {
    #[test]
    fn gates_are_exact_powers_of_two_in_the_identity_region() {
        for n in [2, 8, 32, 128] {
            let z = super::read_gate(n).unwrap();
            assert!(z >= 17.0 && z.log2().fract() == 0.0, "{n}: {z}");
        }
        assert_eq!(super::read_gate(3), None);
    }
}
