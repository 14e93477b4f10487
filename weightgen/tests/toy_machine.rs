//! The toy machine, compiled into stock Qwen3.5 layers, agrees with its plain Rust model
//! after every step: on the sparse path in two summation orders and on the dense path.

use inband_chip::{ChipRunner, MathPath};
use inband_qwen35::presets::Shape;
use inband_qwen35::sparse::SumOrder;
use inband_weightgen::toy::{circuit, Acc8};
use inband_weightgen::{compile, target_of, Chip};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn random_program(rng: &mut StdRng) -> [(u8, u8); 16] {
    let mut rom = [(0u8, 0u8); 16];
    for slot in rom.iter_mut() {
        *slot = (rng.random_range(0..16), rng.random_range(0..16));
    }
    rom
}

/// Runs `programs` random programs of `steps` steps each, as one batch of machines
/// fed their own output tokens; returns the steps checked.
fn run(chip: &Chip, path: MathPath, seed: u64, programs: usize, steps: usize) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut models: Vec<Acc8> = (0..programs).map(|_| Acc8::new(random_program(&mut rng))).collect();
    let model = chip.model(None, path).unwrap();
    let mut runner = ChipRunner::batch(&model, programs).unwrap();
    let boots: Vec<Vec<_>> = models.iter().map(|m| m.boot_tokens()).collect();
    for i in 0..boots[0].len() {
        let column: Vec<_> = boots.iter().map(|b| b[i].clone()).collect();
        runner.step_batch(&column).unwrap();
    }
    let mut tokens: Vec<_> = models.iter().map(|m| m.state_token()).collect();
    let mut checked = 0;
    for s in 0..steps {
        let next = runner.step_batch(&tokens).unwrap();
        for (p, (model, token)) in models.iter_mut().zip(&next).enumerate() {
            model.step();
            assert_eq!(
                *token,
                model.state_token(),
                "{path:?}: program {p} step {s}: rom {:?}",
                model.rom
            );
            checked += 1;
        }
        tokens = next;
    }
    checked
}

fn toy_chip() -> Chip {
    let base = Shape::Tiny.config();
    compile(&circuit(target_of(&base)), &base).unwrap()
}

#[test]
fn sparse_path_forward_order_100k_steps() {
    let chip = toy_chip();
    assert_eq!(run(&chip, MathPath::Sparse(SumOrder::Forward), 1, 100, 1000), 100_000);
}

#[test]
fn sparse_path_reverse_order_100k_steps() {
    let chip = toy_chip();
    assert_eq!(run(&chip, MathPath::Sparse(SumOrder::Reverse), 2, 100, 1000), 100_000);
}

#[test]
fn dense_path_100k_steps() {
    let chip = toy_chip();
    assert_eq!(run(&chip, MathPath::Dense, 3, 100, 1000), 100_000);
}
