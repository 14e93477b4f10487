//! Compiling a pure function (token fields in, token fields out) into chip layers and
//! evaluating it, to test circuit primitives through the real layer math.

use inband_chip::{ChipModel, ChipRunner, MathPath};
use inband_circuits::{ChipToken, Circuit, Expr, FieldDef, KindDef, TokenSpec};
use inband_qwen35::presets::Shape;
use inband_qwen35::sparse::SumOrder;
use inband_weightgen::{compile, target_of, Chip};

/// A compiled function of small integer inputs.
pub struct FunctionChip {
    pub chip: Chip,
    /// The chip on the sparse path, summing forward and in reverse.
    forward: ChipModel,
    reverse: ChipModel,
    inputs: usize,
}

impl FunctionChip {
    /// `inputs` and `outputs` are (name, size) of each field; `build` receives each
    /// input field's one-hot expressions and returns each output's value expression.
    pub fn new(
        name: &str,
        inputs: &[(&str, usize)],
        outputs: &[(&str, usize)],
        build: impl FnOnce(&mut Circuit, &[Vec<Expr>]) -> Vec<Expr>,
    ) -> Self {
        let base = Shape::Tiny.config();
        let mut fields: Vec<FieldDef> = inputs
            .iter()
            .map(|(n, s)| FieldDef {
                name: format!("in.{n}"),
                size: *s,
            })
            .collect();
        fields.extend(outputs.iter().map(|(n, s)| FieldDef {
            name: format!("out.{n}"),
            size: *s,
        }));
        let tokens = TokenSpec {
            fields,
            kinds: vec![
                KindDef {
                    name: "in".into(),
                    fields: (0..inputs.len()).collect(),
                },
                KindDef {
                    name: "out".into(),
                    fields: (inputs.len()..inputs.len() + outputs.len()).collect(),
                },
            ],
        };
        let mut c = Circuit::new(name, target_of(&base), tokens);
        let onehots: Vec<Vec<Expr>> = (0..inputs.len())
            .map(|f| c.field(f).iter().map(|s| Expr::signal(*s)).collect())
            .collect();
        let values = build(&mut c, &onehots);
        assert_eq!(values.len(), outputs.len());
        let outs: Vec<(usize, Expr)> = values
            .into_iter()
            .enumerate()
            .map(|(i, v)| (inputs.len() + i, v))
            .collect();
        inband_weightgen::emit::standard_outputs(&mut c, 1, &outs);
        let chip = compile(&c, &base).unwrap_or_else(|e| panic!("{name}: {e}"));
        let model = |order| chip.model(None, MathPath::Sparse(order)).unwrap();
        Self {
            forward: model(SumOrder::Forward),
            reverse: model(SumOrder::Reverse),
            chip,
            inputs: inputs.len(),
        }
    }

    /// A runner on the sparse path (pure functions keep no state worth resetting).
    pub fn runner(&self, order: SumOrder) -> ChipRunner<'_> {
        let model = match order {
            SumOrder::Forward => &self.forward,
            SumOrder::Reverse => &self.reverse,
        };
        ChipRunner::new(model).unwrap()
    }

    /// Evaluates one input tuple.
    pub fn eval(&self, runner: &mut ChipRunner<'_>, inputs: &[usize]) -> Vec<usize> {
        assert_eq!(inputs.len(), self.inputs);
        let out = runner
            .step(&ChipToken {
                kind: 0,
                values: inputs.to_vec(),
            })
            .unwrap();
        assert_eq!(out.kind, 1, "the output kind must win");
        out.values
    }
}

/// Splits a 32-bit value into eight nibbles (least significant first).
pub fn nibbles(x: u32) -> Vec<usize> {
    (0..8).map(|i| (x >> (4 * i) & 15) as usize).collect()
}

/// Joins eight nibbles (least significant first).
pub fn join(n: &[usize]) -> u32 {
    n.iter().enumerate().fold(0, |acc, (i, v)| acc | (*v as u32) << (4 * i))
}
