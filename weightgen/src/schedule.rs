//! Scheduling: which layer each block (MLP) and memory (GDN mixer) of a circuit goes
//! to. A layer runs its mixer (write, then read) and then its MLP; a signal made by an
//! MLP in layer L is usable from layer L+1's mixer, one read by a mixer in layer L from
//! layer L's MLP. Placement is list scheduling in dependency order, each op at the
//! earliest layer its inputs allow with room left (key heads, MLP neurons).

use inband_circuits::{Address, Circuit, Expr, Signal, Source};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ScheduleError {
    #[error("memory {0} reads its own output in the same pass (a layer writes before it reads)")]
    SelfDependent(String),
    #[error("memory {name} needs {needed} key heads but a layer has {available}")]
    TooManyHeads {
        name: String,
        needed: usize,
        available: usize,
    },
    #[error("block {name} has {needed} neurons but a layer's MLP has {available}")]
    BlockTooLarge {
        name: String,
        needed: usize,
        available: usize,
    },
    #[error("memory {name} has {reads} reads and {writes} writes; a GDN layer does at most one of each per head")]
    TooManyPorts { name: String, reads: usize, writes: usize },
    #[error("the circuit has a dependency cycle through {0}")]
    Cycle(String),
}

/// Where everything went.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Layer of each block.
    pub block_layer: Vec<usize>,
    /// Layer and first key head of each memory.
    pub memory_place: Vec<(usize, usize)>,
    pub layers: usize,
}

/// A unit of placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Block(usize),
    Memory(usize),
}

fn address_signals(a: &Address) -> Vec<Signal> {
    let elems: Vec<&Expr> = match a {
        Address::Rows(r) => r.iter().map(|d| &d.expr).collect(),
        Address::Factored { heads, rows } => heads.iter().chain(rows.iter().flatten()).map(|d| &d.expr).collect(),
    };
    elems.into_iter().flat_map(|e| e.signals()).collect()
}

/// Signals each op reads.
fn op_inputs(c: &Circuit, op: Op) -> Vec<Signal> {
    match op {
        Op::Block(b) => c.blocks[b]
            .neurons
            .iter()
            .flat_map(|n| n.gate.signals().chain(n.up.signals()))
            .collect(),
        Op::Memory(m) => {
            let mut s = Vec::new();
            for w in c.writes.iter().filter(|w| w.memory == m) {
                s.extend(address_signals(&w.address));
                s.extend(w.entries.iter().flat_map(|(_, d)| d.expr.signals()));
                s.extend(w.enable.signals());
            }
            for r in c.reads.iter().filter(|r| r.memory == m) {
                s.extend(address_signals(&r.address));
                if let Some(sel) = &r.select {
                    s.extend(sel.iter().flat_map(|(_, e)| e.signals()));
                }
            }
            s
        }
    }
}

/// The op that produces a signal (None for token signals).
fn producer(c: &Circuit, s: Signal) -> Option<Op> {
    match c.info(s).source {
        Source::Token => None,
        Source::Block(b) => Some(Op::Block(b)),
        Source::Read(r) => Some(Op::Memory(c.reads[r].memory)),
    }
}

/// Schedules `c` onto layers with `key_heads` heads and `neurons` MLP neurons each.
pub fn schedule(c: &Circuit) -> Result<Schedule, ScheduleError> {
    let (max_heads, max_neurons) = (c.target.key_heads, c.target.mlp_neurons);
    for (m, mem) in c.memories.iter().enumerate() {
        if mem.key_heads > max_heads {
            return Err(ScheduleError::TooManyHeads {
                name: mem.name.clone(),
                needed: mem.key_heads,
                available: max_heads,
            });
        }
        let reads = c.reads.iter().filter(|r| r.memory == m).count();
        let writes = c.writes.iter().filter(|w| w.memory == m).count();
        if reads > 1 || writes > 1 {
            return Err(ScheduleError::TooManyPorts {
                name: mem.name.clone(),
                reads,
                writes,
            });
        }
    }
    for b in &c.blocks {
        if b.neurons.len() > max_neurons {
            return Err(ScheduleError::BlockTooLarge {
                name: b.name.clone(),
                needed: b.neurons.len(),
                available: max_neurons,
            });
        }
    }

    let ops: Vec<Op> = (0..c.blocks.len())
        .map(Op::Block)
        .chain((0..c.memories.len()).map(Op::Memory))
        .collect();
    let index = |op: Op| match op {
        Op::Block(b) => b,
        Op::Memory(m) => c.blocks.len() + m,
    };
    let deps: Vec<Vec<Op>> = ops
        .iter()
        .map(|&op| {
            let mut d: Vec<Op> = op_inputs(c, op).into_iter().filter_map(|s| producer(c, s)).collect();
            d.sort_by_key(|o| index(*o));
            d.dedup();
            d
        })
        .collect();
    for (i, d) in deps.iter().enumerate() {
        if let Op::Memory(m) = ops[i] {
            if d.contains(&Op::Memory(m)) {
                return Err(ScheduleError::SelfDependent(c.memories[m].name.clone()));
            }
        }
    }

    // Topological order (Kahn), final-layer blocks last.
    let n = ops.len();
    let mut indegree: Vec<usize> = deps.iter().map(|d| d.len()).collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for o in d {
            users[index(*o)].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        for &u in &users[i] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.push(u);
            }
        }
    }
    if order.len() != n {
        let stuck = (0..n).find(|&i| indegree[i] > 0).unwrap();
        let name = match ops[stuck] {
            Op::Block(b) => c.blocks[b].name.clone(),
            Op::Memory(m) => c.memories[m].name.clone(),
        };
        return Err(ScheduleError::Cycle(name));
    }
    let is_final = |i: usize| matches!(ops[i], Op::Block(b) if c.blocks[b].final_layer);
    order.sort_by_key(|&i| is_final(i)); // stable: keeps topological order within each group

    // Layer of each placed op; "ready layer" rules per phase.
    let mut layer_of: Vec<Option<usize>> = vec![None; n];
    let mut heads_used: Vec<usize> = Vec::new();
    let mut neurons_used: Vec<usize> = Vec::new();
    let mut memory_place = vec![(0, 0); c.memories.len()];
    let mut block_layer = vec![0; c.blocks.len()];
    let grow = |v: &mut Vec<usize>, l: usize| {
        if v.len() <= l {
            v.resize(l + 1, 0);
        }
    };
    let mut final_floor = 0;
    for &i in &order {
        if is_final(i) {
            continue;
        }
        let op = ops[i];
        // Earliest layer: blocks may use same-layer reads; memories need everything earlier.
        let earliest = deps[i]
            .iter()
            .map(|d| {
                let l = layer_of[index(*d)].expect("dependencies are placed first");
                match (op, d) {
                    (Op::Block(_), Op::Memory(_)) => l,
                    _ => l + 1,
                }
            })
            .max()
            .unwrap_or(0);
        let mut l = earliest;
        match op {
            Op::Block(b) => {
                let need = c.blocks[b].neurons.len();
                loop {
                    grow(&mut neurons_used, l);
                    if neurons_used[l] + need <= max_neurons {
                        break;
                    }
                    l += 1;
                }
                neurons_used[l] += need;
                block_layer[b] = l;
            }
            Op::Memory(m) => {
                let need = c.memories[m].key_heads;
                loop {
                    grow(&mut heads_used, l);
                    if heads_used[l] + need <= max_heads {
                        break;
                    }
                    l += 1;
                }
                memory_place[m] = (l, heads_used[l]);
                heads_used[l] += need;
            }
        }
        layer_of[i] = Some(l);
        final_floor = final_floor.max(l);
    }
    // Final blocks share the last layer, after everything they read.
    let final_ops: Vec<usize> = order.iter().copied().filter(|&i| is_final(i)).collect();
    let mut last = final_floor;
    for &i in &final_ops {
        for d in &deps[i] {
            let l = layer_of[index(*d)].expect("placed");
            last = last.max(match d {
                Op::Memory(_) => l,
                Op::Block(_) => l + 1,
            });
        }
    }
    grow(&mut neurons_used, last);
    let final_neurons: usize = final_ops
        .iter()
        .map(|&i| match ops[i] {
            Op::Block(b) => c.blocks[b].neurons.len(),
            Op::Memory(_) => 0,
        })
        .sum();
    while neurons_used[last] + final_neurons > max_neurons {
        last += 1;
        grow(&mut neurons_used, last);
    }
    for &i in &final_ops {
        if let Op::Block(b) = ops[i] {
            block_layer[b] = last;
            layer_of[i] = Some(last);
        }
    }
    let layers = layer_of.iter().flatten().max().map_or(1, |l| l + 1);
    Ok(Schedule {
        block_layer,
        memory_place,
        layers,
    })
}
