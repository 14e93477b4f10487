use inband_chip::{ChipRunner, MathPath};
use inband_circuits::primitives::{add, Word};
use inband_circuits::{ChipToken, Circuit, Expr, FieldDef, KindDef, TokenSpec};
use inband_qwen35::presets::Shape;
use inband_qwen35::sparse::SumOrder;
use inband_weightgen::{compile, target_of};

#[test]
fn adds_two_bytes() {
    let base = Shape::Tiny.config();
    let nib = |n: &str| FieldDef {
        name: n.into(),
        size: 16,
    };
    let tokens = TokenSpec {
        fields: vec![nib("a0"), nib("a1"), nib("b0"), nib("b1")],
        kinds: vec![KindDef {
            name: "in".into(),
            fields: vec![0, 1, 2, 3],
        }],
    };
    let mut c = Circuit::new("add8", target_of(&base), tokens);
    let word = |c: &Circuit, f0: usize, f1: usize| Word {
        nibbles: vec![
            c.field_value(f0),
            c.field_value(f1),
            Expr::zero(),
            Expr::zero(),
            Expr::zero(),
            Expr::zero(),
            Expr::zero(),
            Expr::zero(),
        ],
    };
    let (a, b) = (word(&c, 0, 1), word(&c, 2, 3));
    let sum = add(&mut c, "add", &a, &b, &Expr::zero());
    inband_weightgen::emit::standard_outputs(
        &mut c,
        0,
        &[(0, sum.word.nibbles[0].clone()), (1, sum.word.nibbles[1].clone())],
    );
    let chip = compile(&c, &base).unwrap();
    let model = chip.model(None, MathPath::Sparse(SumOrder::Forward)).unwrap();
    let mut runner = ChipRunner::new(&model).unwrap();
    for x in 0..256usize {
        for y in (0..256usize).step_by(7) {
            let t = ChipToken {
                kind: 0,
                values: vec![x & 15, x >> 4, y & 15, y >> 4],
            };
            let out = runner.step(&t).unwrap();
            let s = (x + y) & 255;
            assert_eq!(out.values[0..2], [s & 15, s >> 4], "{x} + {y}");
        }
    }
    eprintln!(
        "layers {} dims {} nonzero {}",
        chip.layers.len(),
        chip.layout.chip_dims,
        chip.nonzero_weights()
    );
}

#[test]
fn toy_chip_figures() {
    let base = Shape::Tiny.config();
    let chip = compile(&inband_weightgen::toy::circuit(target_of(&base)), &base).unwrap();
    eprintln!(
        "toy: layers {} chip dims {} neurons {} nonzero {} non-bf16 {}",
        chip.layers.len(),
        chip.layout.chip_dims,
        chip.circuit.neuron_count(),
        chip.nonzero_weights(),
        chip.non_bf16_weights()
    );
    assert_eq!(chip.non_bf16_weights(), 0);
}
