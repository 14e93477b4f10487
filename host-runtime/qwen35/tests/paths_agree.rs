//! The dense and sparse paths compute the same math, and state carried across calls
//! gives the same results as one long prefill.

use candle_core::{Device, Tensor};
use inband_qwen35::active::ActiveLayer;
use inband_qwen35::dense::{DenseLayer, DenseState};
use inband_qwen35::sparse::{GdnState, Reach, Scratch, SparseLayer, SumOrder};
use inband_qwen35::weights::Mixer;
use inband_qwen35::{Array, DecoderLayer, LayerType, TextConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn tiny_config() -> TextConfig {
    serde_json::from_str(
        r#"{"hidden_size": 48, "num_hidden_layers": 2, "intermediate_size": 80, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
        "layer_types": ["linear_attention", "full_attention"], "rms_norm_eps": 1e-6, "vocab_size": 50,
        "tie_word_embeddings": true, "rope_parameters": {"rope_theta": 10000000.0, "partial_rotary_factor": 0.25}}"#,
    )
    .unwrap()
}

/// Fills every weight with random values; `density` is the fraction kept nonzero.
fn randomize(layer: &mut DecoderLayer, rng: &mut StdRng, density: f64) {
    let mut fill = |a: &mut Array, scale: f32| {
        for v in a.data.iter_mut() {
            *v = if rng.random_bool(density) {
                rng.random_range(-scale..scale)
            } else {
                0.0
            };
        }
    };
    fill(&mut layer.input_layernorm, 0.3);
    fill(&mut layer.post_attention_layernorm, 0.3);
    match &mut layer.mixer {
        Mixer::Linear(l) => {
            fill(&mut l.in_proj_qkv, 0.5);
            fill(&mut l.in_proj_z, 0.5);
            fill(&mut l.in_proj_b, 1.0);
            fill(&mut l.in_proj_a, 1.0);
            fill(&mut l.conv1d, 0.8);
            fill(&mut l.a_log, 1.0);
            fill(&mut l.dt_bias, 1.0);
            fill(&mut l.norm, 1.0);
            fill(&mut l.out_proj, 0.3);
        }
        Mixer::Full(f) => {
            fill(&mut f.q_proj, 0.5);
            fill(&mut f.k_proj, 0.5);
            fill(&mut f.v_proj, 0.5);
            fill(&mut f.o_proj, 0.3);
            fill(&mut f.q_norm, 0.3);
            fill(&mut f.k_norm, 0.3);
        }
    }
    fill(&mut layer.mlp.gate_proj, 0.4);
    fill(&mut layer.mlp.up_proj, 0.4);
    fill(&mut layer.mlp.down_proj, 0.3);
}

fn random_inputs(rng: &mut StdRng, t: usize, h: usize) -> Vec<f32> {
    (0..t * h).map(|_| rng.random_range(-2.0..2.0)).collect()
}

fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let scale = x.abs().max(y.abs()).max(1.0);
        assert!((x - y).abs() <= tol * scale, "{what}[{i}]: {x} vs {y}");
    }
}

fn dense_decode(layer: &DenseLayer, inputs: &[f32], t: usize, h: usize) -> Vec<f32> {
    let dev = Device::Cpu;
    let mut state = layer.new_state(1, &dev).unwrap();
    let mut out = Vec::new();
    for step in 0..t {
        let x = Tensor::from_slice(&inputs[step * h..(step + 1) * h], (1, 1, h), &dev).unwrap();
        let y = layer.forward(&x, &mut state, step).unwrap();
        out.extend(y.flatten_all().unwrap().to_vec1::<f32>().unwrap());
    }
    out
}

fn dense_prefill(layer: &DenseLayer, inputs: &[f32], t: usize, h: usize, split: usize) -> Vec<f32> {
    let dev = Device::Cpu;
    let mut state: DenseState = layer.new_state(1, &dev).unwrap();
    let mut out = Vec::new();
    for (start, len) in [(0, split), (split, t - split)] {
        let x = Tensor::from_slice(&inputs[start * h..(start + len) * h], (1, len, h), &dev).unwrap();
        let y = layer.forward(&x, &mut state, start).unwrap();
        out.extend(y.flatten_all().unwrap().to_vec1::<f32>().unwrap());
    }
    out
}

fn sparse_decode(layer: &SparseLayer, c: &TextConfig, inputs: &[f32], t: usize) -> Vec<f32> {
    let h = c.hidden_size;
    let mut state = GdnState::new(c);
    let mut scratch = Scratch::default();
    let mut out = Vec::new();
    for step in 0..t {
        let mut x = inputs[step * h..(step + 1) * h].to_vec();
        layer.step(&mut x, &mut state, &mut scratch);
        out.extend(x);
    }
    out
}

#[test]
fn dense_and_sparse_agree_on_random_gdn_layers() {
    let c = tiny_config();
    for (seed, density) in [(1u64, 1.0), (2, 0.3), (3, 0.05)] {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut layer = DecoderLayer::zeros(LayerType::LinearAttention, &c);
        randomize(&mut layer, &mut rng, density);
        let inputs = random_inputs(&mut rng, 7, c.hidden_size);
        let dense = DenseLayer::new(&layer, &c, &Device::Cpu).unwrap();
        let mut sparse = SparseLayer::new(&layer, &c).unwrap();
        let d = dense_decode(&dense, &inputs, 7, c.hidden_size);
        let s = sparse_decode(&sparse, &c, &inputs, 7);
        assert_close(&d, &s, 2e-5, &format!("density {density}"));
        sparse.order = SumOrder::Reverse;
        let r = sparse_decode(&sparse, &c, &inputs, 7);
        assert_close(&s, &r, 2e-5, "reverse order");
    }
}

#[test]
fn prefill_with_carried_state_matches_decode() {
    let c = tiny_config();
    for kind in [LayerType::LinearAttention, LayerType::FullAttention] {
        let mut rng = StdRng::seed_from_u64(9);
        let mut layer = DecoderLayer::zeros(kind, &c);
        randomize(&mut layer, &mut rng, 1.0);
        let inputs = random_inputs(&mut rng, 9, c.hidden_size);
        let dense = DenseLayer::new(&layer, &c, &Device::Cpu).unwrap();
        let decoded = dense_decode(&dense, &inputs, 9, c.hidden_size);
        let prefilled = dense_prefill(&dense, &inputs, 9, c.hidden_size, 4);
        assert_close(&decoded, &prefilled, 2e-5, &format!("{kind:?}"));
    }
}

#[test]
fn silent_heads_leave_the_state_bit_for_bit() {
    // beta = 0 (b <= -100) and decay 1 (A_log = -128): the recurrent state is untouched.
    let c = tiny_config();
    let mut rng = StdRng::seed_from_u64(4);
    let mut layer = DecoderLayer::zeros(LayerType::LinearAttention, &c);
    randomize(&mut layer, &mut rng, 1.0);
    if let Mixer::Linear(l) = &mut layer.mixer {
        l.in_proj_b.data.fill(0.0);
        l.a_log.data.fill(-128.0);
        // Add a huge negative bias through the first input dim, which we pin below.
        for head in 0..c.linear_num_value_heads {
            l.in_proj_b.row_mut(head)[0] = -1000.0;
        }
    }
    let sparse = SparseLayer::new(&layer, &c).unwrap();
    let mut state = GdnState::new(&c);
    for (i, v) in state.recurrent.iter_mut().enumerate() {
        *v = (i % 17) as f32 - 8.0;
    }
    let before = state.recurrent.clone();
    let mut scratch = Scratch::default();
    for _ in 0..5 {
        let mut x = random_inputs(&mut rng, 1, c.hidden_size);
        x[0] = 4.0;
        sparse.step(&mut x, &mut state, &mut scratch);
    }
    assert_eq!(state.recurrent, before);
}

/// The activation-sparse step (only nonzero inputs' columns, the prefix columns' fold
/// kept while they repeat) leaves the hidden state, the GDN state and the conv state bit
/// for bit as the row-by-row step, on random layers and mostly-zero inputs whose prefix
/// repeats, changes now and then, and whose other dims come and go; a step that stops
/// once the state is written leaves the states as the whole step does.
#[test]
fn active_steps_are_the_row_steps_bit_for_bit() {
    let c = tiny_config();
    let prefix = 4;
    for (seed, density) in [(5u64, 1.0), (6, 0.3), (7, 0.05)] {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut layer = DecoderLayer::zeros(LayerType::LinearAttention, &c);
        randomize(&mut layer, &mut rng, density);
        let sparse = SparseLayer::new(&layer, &c).unwrap();
        let mut active = ActiveLayer::new(&sparse, prefix).unwrap();
        let mut state_only = active.clone();
        let (mut rows, mut fast, mut written) = (GdnState::new(&c), GdnState::new(&c), GdnState::new(&c));
        let (mut s1, mut s2, mut s3) = (Scratch::default(), Scratch::default(), Scratch::default());
        for step in 0..60 {
            let mut x = vec![0.0f32; c.hidden_size];
            for (i, v) in x.iter_mut().take(prefix).enumerate() {
                *v = if step % 11 == 4 { 2.5 } else { 1.0 + i as f32 };
            }
            for _ in 0..rng.random_range(0..6) {
                let d = rng.random_range(prefix..c.hidden_size);
                x[d] = rng.random_range(-3.0..3.0);
            }
            let (mut y, mut z) = (x.clone(), x.clone());
            sparse.step(&mut x, &mut rows, &mut s1);
            active.step(&sparse, &mut y, &mut fast, &mut s2, Reach::Residual);
            state_only.step(&sparse, &mut z, &mut written, &mut s3, Reach::State);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let at = format!("density {density}, step {step}");
            assert_eq!(bits(&x), bits(&y), "hidden, {at}");
            assert_eq!(bits(&rows.recurrent), bits(&fast.recurrent), "GDN state, {at}");
            assert_eq!(bits(&rows.conv), bits(&fast.conv), "conv state, {at}");
            // Stopping once the state is written leaves the states as the whole step does.
            assert_eq!(bits(&rows.recurrent), bits(&written.recurrent), "state only, {at}");
            assert_eq!(bits(&rows.conv), bits(&written.conv), "state only, {at}");
        }
    }
}
