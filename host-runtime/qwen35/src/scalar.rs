//! The elementwise functions of the layer math, in f32, written as the reference
//! implementation writes them (the sparse path uses these directly; the dense path
//! composes candle ops with the same formulas).

/// Beyond these the formulas below are constant in their exp term: exp(-x) is under half
/// an ulp of 1 for x >= 17 (so 1 + exp(-x) == 1) and overflows to +inf for x <= -89.
/// Skipping the exp there returns exactly what the formula returns, and most of a chip's
/// pre-activations sit out there.
const SATURATED_HIGH: f32 = 17.0;
const SATURATED_LOW: f32 = -89.0;

/// `x / (1 + exp(-x))`: exactly x for x >= 17, exactly -0 once exp(-x) overflows (x <= -89).
#[inline]
pub fn silu(x: f32) -> f32 {
    if x >= SATURATED_HIGH {
        x
    } else if x <= SATURATED_LOW {
        x / f32::INFINITY
    } else {
        x / (1.0 + (-x).exp())
    }
}

/// `1 / (1 + exp(-x))`: exactly 1 for x >= 17, exactly 0 for x <= -89.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    if x >= SATURATED_HIGH {
        1.0
    } else if x <= SATURATED_LOW {
        0.0
    } else {
        1.0 / (1.0 + (-x).exp())
    }
}

/// torch's softplus (beta 1, threshold 20): x above 20, else log1p(exp(x)).
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// `1 / sqrt(x)`.
#[inline]
pub fn rsqrt(x: f32) -> f32 {
    1.0 / x.sqrt()
}

/// The per-step decay factor of a GDN head: `exp(-exp(A_log) * softplus(a + dt_bias))`.
#[inline]
pub fn gdn_decay(a_log: f32, a: f32, dt_bias: f32) -> f32 {
    let g = -a_log.exp() * softplus(a + dt_bias);
    g.exp()
}

/// Sum of squares over a slice, accumulated left to right.
#[inline]
pub fn sum_of_squares(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |acc, v| acc + v * v)
}

/// Zero-centred RMSNorm: `x * rsqrt(mean(x^2) + eps) * (1 + w)`.
pub fn rms_norm_zero_centred(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let inv = rsqrt(sum_of_squares(x) / x.len() as f32 + eps);
    for ((o, v), w) in out.iter_mut().zip(x).zip(weight) {
        *o = (v * inv) * (1.0 + w);
    }
}

/// L2 normalisation as the GDN kernels do it: `x * rsqrt(sum(x^2) + 1e-6)`.
pub fn l2norm_in_place(x: &mut [f32]) {
    let inv = rsqrt(sum_of_squares(x) + L2NORM_EPS);
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// The epsilon inside the q/k L2 normalisation (hard-coded in the reference).
pub const L2NORM_EPS: f32 = 1e-6;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturation_facts_hold() {
        assert_eq!(silu(32.0), 32.0);
        assert_eq!(silu(20.0), 20.0);
        assert_eq!(silu(17.0), 17.0);
        assert_eq!(silu(-100.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(sigmoid(20.0), 1.0);
        assert_eq!(sigmoid(-100.0), 0.0);
        assert_eq!(softplus(-110.0), 0.0);
        assert_eq!(gdn_decay(-128.0, 3.0, 1.0), 1.0);
        let mut k = [0.0, 64.0, 0.0, 0.0];
        l2norm_in_place(&mut k);
        assert_eq!(k, [0.0, 1.0, 0.0, 0.0]);
    }
}
