//! Which of a chip's units wait for which: a layer's heads (its Gated DeltaNet mixer) and
//! its MLP are two units; a unit reads the residual dims its input projections (or gate
//! and up) have a weight for and writes the dims its out_proj (or down) has a weight in.
//! The residual is a sum, and the chip's norms are pinned, so a unit needs exactly the
//! earlier units whose writes it reads: one that reads none of the unit just before it
//! could run beside it. The allocation report prints each unit's step and what it waits
//! for, for the GPU kernel's schedule (units of one step could share its phases).

use std::ops::Range;

use inband_qwen35::weights::{Array, DecoderLayer, Mixer};

/// The residual dims a unit reads and writes (anchors left out: no unit writes them).
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    pub reads: Vec<bool>,
    pub writes: Vec<bool>,
}

/// Columns of `matrices` (all of one width) with a nonzero weight, outside `anchors`.
fn columns_read(matrices: &[&Array], anchors: &Range<usize>) -> Vec<bool> {
    let width = matrices.first().map_or(0, |m| m.dims2().1);
    let mut read = vec![false; width];
    for m in matrices {
        for r in 0..m.dims2().0 {
            for (c, w) in m.row(r).iter().enumerate() {
                read[c] |= *w != 0.0 && !anchors.contains(&c);
            }
        }
    }
    read
}

/// Rows of `m` with a nonzero weight.
fn rows_written(m: &Array) -> Vec<bool> {
    (0..m.dims2().0).map(|r| m.row(r).iter().any(|w| *w != 0.0)).collect()
}

/// A chip layer's two units, heads then MLP (`None` for a layer that is not linear
/// attention: no chip layer is).
pub fn layer_units(layer: &DecoderLayer, anchors: &Range<usize>) -> Option<[Unit; 2]> {
    let Mixer::Linear(m) = &layer.mixer else { return None };
    let heads = Unit {
        reads: columns_read(&[&m.in_proj_qkv, &m.in_proj_z, &m.in_proj_b, &m.in_proj_a], anchors),
        writes: rows_written(&m.out_proj),
    };
    let mlp = Unit {
        reads: columns_read(&[&layer.mlp.gate_proj, &layer.mlp.up_proj], anchors),
        writes: rows_written(&layer.mlp.down_proj),
    };
    Some([heads, mlp])
}

/// Whether two dim sets share a dim.
fn meet(a: &[bool], b: &[bool]) -> bool {
    a.iter().zip(b).any(|(x, y)| *x && *y)
}

/// For each unit, in order, the latest earlier unit that writes a dim it reads.
pub fn waits_for(units: &[Unit]) -> Vec<Option<usize>> {
    (0..units.len())
        .map(|u| (0..u).rev().find(|&e| meet(&units[u].reads, &units[e].writes)))
        .collect()
}

/// The step each unit can run in: one after every earlier unit whose writes it reads,
/// and no earlier than one that reads what it writes (reads come first within a step).
/// The largest is the fewest steps the units can run in.
pub fn steps(units: &[Unit]) -> Vec<usize> {
    let mut step = vec![0usize; units.len()];
    for u in 0..units.len() {
        step[u] = (0..u)
            .map(|e| {
                if meet(&units[u].reads, &units[e].writes) {
                    step[e] + 1
                } else if meet(&units[e].reads, &units[u].writes) {
                    step[e]
                } else {
                    1
                }
            })
            .max()
            .unwrap_or(1);
    }
    step
}

/// A unit's name in the report: layer l's heads or MLP (units alternate).
pub fn unit_name(u: usize) -> String {
    let part = if u.is_multiple_of(2) { "heads" } else { "MLP" };
    format!("layer {}'s {part}", u / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(reads: &[usize], writes: &[usize]) -> Unit {
        let set = |dims: &[usize]| (0..6).map(|d| dims.contains(&d)).collect();
        Unit {
            reads: set(reads),
            writes: set(writes),
        }
    }

    #[test]
    fn a_unit_waits_for_the_latest_writer_it_reads() {
        // heads 0 write 1; MLP 0 reads 1, writes 2; heads 1 read 0 only (no writer); MLP 1
        // reads 1 and 2: waits for MLP 0, the later writer.
        let units = [
            unit(&[0], &[1]),
            unit(&[1], &[2]),
            unit(&[0], &[3]),
            unit(&[1, 2], &[4]),
        ];
        assert_eq!(waits_for(&units), [None, Some(0), None, Some(1)]);
        assert_eq!(steps(&units), [1, 2, 1, 3]);
        assert_eq!(unit_name(3), "layer 1's MLP");
    }

    #[test]
    fn a_step_follows_every_writer_read_not_only_the_latest() {
        // MLP 1 reads a write of MLP 0 (step 3) and of heads 1 (step 1): step 4; heads 2
        // write what MLP 1 reads, so they run no earlier than it (reads first).
        let units = [
            unit(&[0], &[1]),
            unit(&[1], &[2]),
            unit(&[2], &[3]),
            unit(&[0], &[4]),
            unit(&[3, 4], &[5]),
            unit(&[0], &[3]),
        ];
        assert_eq!(waits_for(&units)[4], Some(3));
        assert_eq!(steps(&units), [1, 2, 3, 1, 4, 4]);
    }

    #[test]
    fn anchors_and_zero_weights_are_not_read() {
        let m = Array {
            shape: vec![2, 4],
            data: vec![0.0, 1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0],
        };
        assert_eq!(columns_read(&[&m], &(3..4)), [false, true, false, false]);
        assert_eq!(rows_written(&m), [true, false]);
        assert!(steps(&[]).is_empty());
    }
}
