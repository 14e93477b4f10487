//! RAM and the load/store unit.
//!
//! RAM is four banks, one chip layer each, of 16 heads × 128 rows; a row is one word as
//! eight one-hot nibbles. The address's word index (bits 2..14) is bank (13..14), head
//! (9..12), rhi (6..8), rlo (2..5). The head elements of the address are ANDs over the
//! address bits, the RAM region and the access kind, folded into the key and query
//! projections, so no layer is spent on decoding.
//!
//! Word stores write rs2 in the pass that runs them. Byte and halfword stores read the
//! old word, merge, and send the merged word through `w1 w2 w3` tokens to a staging
//! memory; the pass consuming `w3` re-runs the store and writes the staged word (a GDN
//! write replaces a whole row, and only tokens carry values back to shallow layers).
//! Boot words take the same path, addressed by a `bw` token.
//!
//! Capacity, and why it is 32 KiB. A GDN head with one-hot keys holds 128 rows, and a
//! write replaces a whole row (beta is per head, the delta rule per row): a layer has 16
//! heads × 128 = 2,048 independently writable rows on every Qwen3.5 shape (Hk = 16; where
//! Hv = 32, two value heads share each key, so 4,096). A row can hold more than one word
//! only if a store rewrites all of it, and the value a layer writes comes from its input:
//! the token and shallower layers, never the layer's own state in the same pass. So a
//! row's other words must already sit in a shallower memory (which then needs the same
//! rows) or ride back through tokens (about three passes per word, as `w1 w2 w3` do for
//! byte stores). One word per row and one pass per `sw` give 8 KiB per layer; 256 KiB
//! would take 32 layers. The way past it that keeps word stores at one pass is a line
//! buffer: a few open lines of four words in a shallow memory, one word per row; a store
//! that hits an open line updates its word there and, in the same pass, writes the whole
//! line (read back from the buffer) into a four-words-per-row bank deeper down; a store
//! that misses first fills the line from the bank through tokens. Loads read the bank.

use inband_circuits::primitives::{add_gated, all, not};
use inband_circuits::{Address, Circuit, Delayed, Expr, Range, Write};

use super::decode::Classes;
use super::front::Front;
use super::regs::RegValue;
use super::tokens::{field, kind, RAM_BANKS};
use super::wires::{all_of, oh, pattern, Tok};

/// The region test: address bits 15..31 spell RAM_BASE >> 15.
const RAM_HIGH: u64 = (inband_firmware::memory_map::RAM_BASE >> 15) as u64;

pub struct MemoryUnit {
    /// The loaded word's nibble values (0 unless a load or a byte/halfword store reads).
    pub loaded: Vec<Expr>,
    /// A load's result (nibble values), 0 unless a valid load ran.
    pub load_result: Vec<Expr>,
    /// The merged word of a byte/halfword store (nibble values).
    pub merged: Vec<Expr>,
    pub load_ok: Expr,
    pub load_misaligned: Expr,
    pub load_fault: Expr,
    pub sw_ram: Expr,
    pub sbsh_ram: Expr,
    pub console: Expr,
    pub exit: Expr,
    pub store_misaligned: Expr,
    pub store_fault: Expr,
    /// The RAM bank memories (for the host's state readout).
    pub banks: Vec<usize>,
}

/// One-hot digits of the word index of rs1 + imm, straight from the operands: a digit
/// made of address bits lo..hi is a function of X = the sum of both operands' bits 0..hi
/// (an exact integer below 2^16), namely floor(X / 2^lo) mod 2^(hi-lo); thresholds at the
/// multiples of 2^lo give it without waiting for the adder's carries. `gate` (0/1) zeroes
/// every digit when no memory access runs.
fn address_digits(c: &mut Circuit, a: &[Expr], m: &[Expr], gate: &Expr) -> [Vec<Expr>; 4] {
    const K: f64 = inband_circuits::contract::GATE_SCALE;
    let mut blk = c.block("ram.address");
    let mut digits = Vec::new();
    for (name, lo, n) in [("rlo", 2usize, 4usize), ("rhi", 6, 3), ("head", 9, 4), ("bank", 13, 2)] {
        let top = lo + n;
        let x = (0..top).fold(Expr::zero(), |e, i| {
            e + (a[i].clone() + m[i].clone()) * (1u64 << i) as f64
        });
        let unit = 1u64 << lo;
        let count = 1usize << n;
        let outs: Vec<_> = (0..count)
            .map(|v| blk.output(format!("{name}{v}"), Range::BIT))
            .collect();
        // [X ≥ t·unit] for t = 0..2·count (X < 2^(top+1)); digit v holds for t ≡ v (mod count).
        let big = (1u64 << (top + 2)) as f64;
        for t in 0..2 * count {
            let v = t % count;
            let cond = x.clone() - (t as u64 * unit) as f64 + 1.0 + (gate.clone() - 1.0) * big;
            // +[X ≥ t·unit] into digit v, −[X ≥ (t+1)·unit] into digit v too (the interval's end).
            let mut add = |cond: Expr, sign: f64| {
                blk.neuron(
                    (cond.clone() * 2.0 - 0.5) * K,
                    Expr::constant(1.0),
                    &[(outs[v], sign / K)],
                );
                blk.neuron((cond * 2.0 - 1.5) * K, Expr::constant(1.0), &[(outs[v], -sign / K)]);
            };
            add(cond.clone(), 1.0);
            add(cond - unit as f64, -1.0);
        }
        digits.push(oh(&outs));
    }
    c.add_block(blk);
    let mut it = digits.into_iter();
    [
        it.next().unwrap(),
        it.next().unwrap(),
        it.next().unwrap(),
        it.next().unwrap(),
    ]
}

#[allow(clippy::too_many_arguments)]
pub fn build(
    c: &mut Circuit,
    t: &Tok,
    f: &Front,
    k: &Classes,
    rs1: &RegValue,
    rs2: &RegValue,
    imm: &[Expr],
    address: &[Expr],
) -> MemoryUnit {
    let rows = c.target.rows_per_head;
    let heads = c.target.key_heads;
    assert_eq!((heads, rows), (16, 128), "RAM banks are 16 heads of 128 words");
    let sum = |xs: &[Expr]| xs.iter().fold(Expr::zero(), |e, x| e + x.clone());
    let [lb, lh, lw, lbu, lhu] = k.load.clone();
    let [sb, sh, sw] = k.store.clone();
    let load_any = sum(&[lb.clone(), lh.clone(), lw.clone(), lbu.clone(), lhu.clone()]);
    let store_any = sum(&[sb.clone(), sh.clone(), sw.clone()]);

    // Word index digits: from rs1 + imm on passes that access memory, from a `bw` token
    // when booting. Stores outside RAM may write an aliased row: they trap or exit, so
    // nothing reads it afterwards.
    let bw = t.kind(kind::BW);
    let access = load_any.clone() + store_any.clone() + k.sbsh_commit.clone();
    let [rlo, rhi, head, bank] = address_digits(c, &rs1.bits, imm, &access);
    let join = |exec: &[Expr], boot: usize| -> Vec<Expr> {
        exec.iter()
            .zip(t.field(boot))
            .map(|(e, b)| e.clone() + b.clone())
            .collect()
    };
    let (w_rlo, w_rhi, w_head, w_bank) = (
        join(&rlo, field::BRLO),
        join(&rhi, field::BRHI),
        join(&head, field::BHEAD),
        join(&bank, field::BBANK),
    );

    // Store data: rs2 one-hot on word-store passes.
    let mut blk = c.block("store.data");
    let mut data = Vec::new();
    for j in 0..8 {
        let mut nib = Vec::new();
        for v in 0..16 {
            let s = blk.output(format!("n{j}.{v}"), Range::BIT);
            add_gated(
                &mut blk,
                &all(&[sw.clone(), rs2.onehot[j][v].clone()]),
                (-2.0, 1.0),
                &Expr::constant(1.0),
                &[(s, 1.0)],
            );
            nib.push(Expr::signal(s));
        }
        data.push(nib);
    }
    c.add_block(blk);

    let writes = sw.clone() + k.sbsh_commit.clone() + bw.clone();
    let reads = load_any.clone() + sb.clone() + sh.clone();
    let now = |e: Expr| Delayed::now(e);
    let mut banks = Vec::new();
    let mut loaded_onehot: Vec<Vec<Expr>> = vec![vec![Expr::zero(); 16]; 8];
    for b in 0..RAM_BANKS {
        let mem = c.memory(
            format!("ram{b}"),
            heads,
            8,
            format!("RAM bank {b}: one word per row, eight one-hot nibbles"),
        );
        let address = |head: &[Expr], bank: &[Expr], rhi: &[Expr], rlo: &[Expr], kind: &Expr| Address::Factored {
            heads: head
                .iter()
                .map(|h| now(all(&[h.clone(), bank[b].clone(), kind.clone()])))
                .collect(),
            rows: vec![
                rhi.iter().map(|x| now(x.clone())).collect(),
                rlo.iter().map(|x| now(x.clone())).collect(),
            ],
        };
        let mut entries = Vec::new();
        for j in 0..8 {
            for v in 0..16 {
                entries.push((16 * j + v, now(data[j][v].clone() + f.staged[j][v].clone())));
            }
        }
        c.write(Write {
            memory: mem,
            address: address(&w_head, &w_bank, &w_rhi, &w_rlo, &writes),
            entries,
            enable: writes.clone(),
        });
        let outs = (0..8)
            .flat_map(|j| (1..16).map(move |v| (format!("n{j}.{v}"), Range::BIT, vec![(16 * j + v, 1.0)])))
            .collect();
        let read = c.read(
            &format!("ram{b}"),
            mem,
            address(&head, &bank, &rhi, &rlo, &reads),
            None,
            outs,
        );
        for j in 0..8 {
            for v in 1..16 {
                loaded_onehot[j][v] = loaded_onehot[j][v].clone() + Expr::signal(read[15 * j + v - 1]);
            }
        }
        banks.push(mem);
    }
    let loaded: Vec<Expr> = loaded_onehot.iter().map(|n| super::wires::value(n)).collect();
    let top_bit = |j: usize| (8..16).fold(Expr::zero(), |e, v| e + loaded_onehot[j][v].clone());

    // Region and alignment checks.
    let (a0, a1) = (address[0].clone(), address[1].clone());
    let mut blk = c.block("access");
    let mut flag = |name: &str, cond: Expr, lo: f64| -> Expr {
        let s = blk.output(name, Range::BIT);
        add_gated(&mut blk, &cond, (lo, 2.0), &Expr::constant(1.0), &[(s, 1.0)]);
        Expr::signal(s)
    };
    let region = pattern(address, 15, 17, RAM_HIGH);
    let load_misaligned = flag("load.mis.w", lw.clone() * 2.0 + a0.clone() + a1.clone() - 2.0, -2.0)
        + flag("load.mis.h", lh.clone() + lhu.clone() + a0.clone() - 1.0, -1.0);
    let load_ok = flag(
        "load.ok.w",
        all_of(region.clone(), &[lw.clone(), not(&a0), not(&a1)]),
        -20.0,
    ) + flag(
        "load.ok.h",
        all_of(region.clone(), &[lh.clone() + lhu.clone(), not(&a0)]),
        -20.0,
    ) + flag("load.ok.b", all_of(region.clone(), &[lb.clone() + lbu.clone()]), -20.0);
    let store_misaligned = flag("store.mis.w", sw.clone() * 2.0 + a0.clone() + a1.clone() - 2.0, -2.0)
        + flag("store.mis.h", sh.clone() + a0.clone() - 1.0, -1.0);
    let sw_ram = flag(
        "store.ram.w",
        all_of(region.clone(), &[sw.clone(), not(&a0), not(&a1)]),
        -20.0,
    );
    let sbsh_ram = flag("store.ram.h", all_of(region.clone(), &[sh.clone(), not(&a0)]), -20.0)
        + flag("store.ram.b", all_of(region, std::slice::from_ref(&sb)), -20.0);
    let console_addr = pattern(address, 0, 32, inband_firmware::memory_map::MMIO_CONSOLE_TX as u64);
    let exit_addr = pattern(address, 0, 32, inband_firmware::memory_map::MMIO_EXIT as u64);
    let console = flag("store.console", all_of(console_addr, std::slice::from_ref(&sb)), -33.0);
    let exit = flag("store.exit", all_of(exit_addr, std::slice::from_ref(&sw)), -33.0);
    c.add_block(blk);
    let load_fault = load_any - load_ok.clone() - load_misaligned.clone();
    let store_fault =
        store_any - sw_ram.clone() - sbsh_ram.clone() - console.clone() - exit.clone() - store_misaligned.clone();

    // Load results: lanes chosen by the low address bits, sign or zero filled.
    let lane = |l: u64| pattern(address, 0, 2, l);
    let mut blk = c.block("load.extract");
    let res: Vec<_> = (0..8).map(|j| blk.output(format!("n{j}"), Range::NIBBLE)).collect();
    let bytes = lb.clone() + lbu.clone();
    for l in 0..4u64 {
        let sel = all_of(lane(l), std::slice::from_ref(&bytes));
        for j in 0..2 {
            add_gated(
                &mut blk,
                &sel,
                (-2.0, 1.0),
                &loaded[2 * l as usize + j],
                &[(res[j], 1.0)],
            );
        }
        let fill = all_of(lane(l), std::slice::from_ref(&lb));
        let sign = top_bit(2 * l as usize + 1) * 15.0;
        let outs: Vec<_> = (2..8).map(|j| (res[j], 1.0)).collect();
        add_gated(&mut blk, &fill, (-2.0, 1.0), &sign, &outs);
    }
    let halves = lh.clone() + lhu.clone();
    for hh in 0..2usize {
        let half_sel = |cls: Expr| all(&[cls, if hh == 1 { a1.clone() } else { not(&a1) }]);
        let sel = half_sel(halves.clone());
        for j in 0..4 {
            add_gated(&mut blk, &sel, (-1.0, 1.0), &loaded[4 * hh + j], &[(res[j], 1.0)]);
        }
        let sign = top_bit(4 * hh + 3) * 15.0;
        let outs: Vec<_> = (4..8).map(|j| (res[j], 1.0)).collect();
        add_gated(&mut blk, &half_sel(lh.clone()), (-1.0, 1.0), &sign, &outs);
    }
    for j in 0..8 {
        add_gated(&mut blk, &lw, (0.0, 1.0), &loaded[j], &[(res[j], 1.0)]);
    }
    // Byte/halfword stores: the merged word's change against the old word.
    let merged_d: Vec<_> = (0..8)
        .map(|j| blk.output(format!("merge{j}"), Range::new(-15, 15)))
        .collect();
    for (j, d) in merged_d.iter().enumerate() {
        let byte_lane = all_of(lane((j / 2) as u64), std::slice::from_ref(&sb));
        add_gated(
            &mut blk,
            &byte_lane,
            (-2.0, 1.0),
            &(rs2.nibbles[j % 2].clone() - loaded[j].clone()),
            &[(*d, 1.0)],
        );
        let half = all(&[sh.clone(), if j >= 4 { a1.clone() } else { not(&a1) }]);
        add_gated(
            &mut blk,
            &half,
            (-1.0, 1.0),
            &(rs2.nibbles[j % 4].clone() - loaded[j].clone()),
            &[(*d, 1.0)],
        );
    }
    c.add_block(blk);
    let merged = (0..8).map(|j| loaded[j].clone() + Expr::signal(merged_d[j])).collect();
    MemoryUnit {
        loaded,
        load_result: oh(&res),
        merged,
        load_ok,
        load_misaligned,
        load_fault,
        sw_ram,
        sbsh_ram,
        console,
        exit,
        store_misaligned,
        store_fault,
        banks,
    }
}
