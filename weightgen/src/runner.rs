//! Running a compiled chip with the project's layer math: feed chip tokens, run the
//! chip layers (sparse or dense path), read the chosen next tokens. A runner steps a
//! batch of independent machines together (the dense path does them in one forward).
//! This is what the compiler's checks and the exactness suites use; the runtime's VM
//! mode does the same inside a spliced checkpoint.

use candle_core::{Device, Tensor};
use inband_circuits::ChipToken;
use inband_qwen35::dense::{DenseLayer, DenseState};
use inband_qwen35::sparse::{GdnState, Scratch, SparseLayer, SumOrder};

use crate::emit::Chip;

/// Which implementation of the layer math runs the chip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathPath {
    /// CSR matrices, skipping zeros, accumulating in the given order.
    Sparse(SumOrder),
    /// candle tensors on the CPU, every weight multiplied.
    Dense,
}

enum Engine {
    /// states[machine][layer].
    Sparse {
        layers: Vec<SparseLayer>,
        states: Vec<Vec<GdnState>>,
        scratch: Scratch,
    },
    Dense {
        layers: Vec<DenseLayer>,
        states: Vec<DenseState>,
        position: usize,
    },
}

/// A batch of machines being stepped token by token.
pub struct ChipRunner<'a> {
    pub chip: &'a Chip,
    engine: Engine,
    batch: usize,
    /// The final residuals of the last step, one per machine.
    pub hidden: Vec<Vec<f32>>,
}

impl<'a> ChipRunner<'a> {
    /// One machine.
    pub fn new(chip: &'a Chip, path: MathPath) -> anyhow::Result<Self> {
        Self::batch(chip, path, 1)
    }

    /// `batch` independent machines, all fresh.
    pub fn batch(chip: &'a Chip, path: MathPath, batch: usize) -> anyhow::Result<Self> {
        let config = chip.layer_config();
        let engine = match path {
            MathPath::Sparse(order) => {
                let layers: Vec<SparseLayer> = chip
                    .layers
                    .iter()
                    .map(|l| {
                        let mut s = SparseLayer::new(l, &config).expect("chip layers are linear attention");
                        s.order = order;
                        s
                    })
                    .collect();
                let states = (0..batch)
                    .map(|_| layers.iter().map(|_| GdnState::new(&config)).collect())
                    .collect();
                Engine::Sparse {
                    layers,
                    states,
                    scratch: Scratch::default(),
                }
            }
            MathPath::Dense => {
                let device = Device::Cpu;
                let layers: Vec<DenseLayer> = chip
                    .layers
                    .iter()
                    .map(|l| DenseLayer::new(l, &config, &device))
                    .collect::<Result<_, _>>()?;
                let states = layers
                    .iter()
                    .map(|l| l.new_state(batch, &device))
                    .collect::<Result<_, _>>()?;
                Engine::Dense {
                    layers,
                    states,
                    position: 0,
                }
            }
        };
        Ok(Self {
            chip,
            engine,
            batch,
            hidden: Vec::new(),
        })
    }

    /// Runs one token through every chip layer and returns the token the chip chooses.
    pub fn step(&mut self, token: &ChipToken) -> anyhow::Result<ChipToken> {
        Ok(self.step_batch(std::slice::from_ref(token))?.remove(0))
    }

    /// Runs one token per machine; returns each machine's chosen next token.
    pub fn step_batch(&mut self, tokens: &[ChipToken]) -> anyhow::Result<Vec<ChipToken>> {
        anyhow::ensure!(
            tokens.len() == self.batch,
            "{} tokens for a batch of {}",
            tokens.len(),
            self.batch
        );
        let mut hidden: Vec<Vec<f32>> = tokens.iter().map(|t| self.chip.residual(t)).collect();
        match &mut self.engine {
            Engine::Sparse {
                layers,
                states,
                scratch,
            } => {
                for (h, machine) in hidden.iter_mut().zip(states.iter_mut()) {
                    for (layer, state) in layers.iter().zip(machine.iter_mut()) {
                        layer.step(h, state, scratch);
                    }
                }
            }
            Engine::Dense {
                layers,
                states,
                position,
            } => {
                let width = hidden[0].len();
                let flat: Vec<f32> = hidden.concat();
                let mut x = Tensor::from_vec(flat, (self.batch, 1, width), &Device::Cpu)?;
                for (layer, state) in layers.iter().zip(states.iter_mut()) {
                    x = layer.forward(&x, state, *position)?;
                }
                *position += 1;
                let out = x.flatten_all()?.to_vec1::<f32>()?;
                hidden = out.chunks(width).map(|c| c.to_vec()).collect();
            }
        }
        let next = hidden.iter().map(|h| self.chip.choose(h)).collect();
        self.hidden = hidden;
        Ok(next)
    }

    /// One GDN memory row of machine 0: the `dv` entries that key row `row` of value head
    /// `head` holds in chip layer `layer`.
    pub fn memory_row(&self, layer: usize, head: usize, row: usize) -> anyhow::Result<Vec<f32>> {
        let c = &self.chip.base;
        let (dk, dv) = (c.linear_key_head_dim, c.linear_value_head_dim);
        match &self.engine {
            Engine::Sparse { states, .. } => {
                let at = (head * dk + row) * dv;
                Ok(states[0][layer].recurrent[at..at + dv].to_vec())
            }
            Engine::Dense { states, .. } => match &states[layer] {
                DenseState::Gdn { recurrent, .. } => Ok(recurrent.get(0)?.get(head)?.get(row)?.to_vec1::<f32>()?),
                DenseState::Attention { .. } => anyhow::bail!("layer {layer} is not a GDN layer"),
            },
        }
    }

    /// The value of a chip signal in machine 0's last final residual.
    pub fn signal(&self, s: inband_circuits::Signal) -> f32 {
        self.hidden[0][self.chip.layout.dim(s)] / self.chip.layout.scale(s)
    }
}
