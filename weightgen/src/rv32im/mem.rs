//! RAM and the load/store unit.
//!
//! RAM is 256 KiB in lines of eight words. Why lines: a GDN head with one-hot keys holds
//! 128 rows and a write replaces a whole row, so a layer has 16 × 128 independently
//! writable rows on every Qwen3.5 shape; one word per row caps RAM at 8 KiB per layer.
//! A row holds eight words as nibble levels (as a ROM row holds eight instructions), but
//! a store then has to write all eight, and a layer's write can only use what shallower
//! layers produced in the same pass.
//!
//! So stores go through a line cache one layer above the banks:
//! - `ram0..ram3` (anchored, a layer each): 2048 lines per bank, word k's nibble j as a
//!   level at entry 8k + j. Loads read them (the read's gate keeps word k's entries).
//! - `cache.w0..w7` (one head each, one-hot words) and `cache.tags` (one head): a
//!   direct-mapped cache of 128 lines (4 KiB): slot = address bits 5..11, tag = bits
//!   12..17 (the line's head and bank one-hot). A word store writes its word into the
//!   cache, reads the whole line back in the same layer, and, when the tag matched,
//!   writes the line through to its bank: one pass, and the banks always hold all of RAM.
//! - A store whose line is not in the cache (the tag read beside the cache says so)
//!   fills it first: `fz` claims the slot and clears it; every fill pass re-fetches the
//!   store (its slot rides in the token), reads one word of the line from the bank and
//!   sends it back up through `w1 w2 f3` (or skips it with `fs` when it is zero); `rr`
//!   then runs the store again, which now hits. A miss costs 2 passes, plus one per zero
//!   word but the last and three per other word (9 for a zero line, 26 for a full one).
//!
//! The address's digits come straight from the operands (below); the head elements of
//! an access are ANDs over digits, the bank and the access kind, folded into the key
//! and query projections, so no layer is spent on decoding.
//!
//! Byte and halfword stores read the old word, merge, and send the merged word through
//! `w1 w2 w3` tokens to a staging memory; the pass consuming `w3` re-runs the store and
//! writes the staged word into the cache like a word store (the `sb` pass checks the tag
//! first, so a miss fills before the merge). Boot lines are staged like ROM rows (`bp`)
//! and written straight into their bank by `bl`.

use inband_circuits::circuit::RowCode;
use inband_circuits::primitives::{add_gated, all, not, step};
use inband_circuits::{Address, Circuit, Delayed, Expr, Range, Write};

use super::decode::Classes;
use super::front::Front;
use super::regs::RegValue;
use super::tokens::{field, kind, LINE_WORDS, RAM_BANKS};
use super::wires::{all_of, ands, oh, pattern, row_onehot, Tok};

/// The region test: address bits 18..31 spell RAM_BASE >> 18.
const RAM_HIGH: u64 = (inband_firmware::memory_map::RAM_BASE >> 18) as u64;
/// Anchor of the RAM banks' rows: 64 levels up to 15 read back within 2·10⁻⁴, which the
/// loaded word's later decisions need (they weigh nibbles up to 16-fold, five at a time).
pub const RAM_ANCHOR: f64 = 16384.0;

pub struct MemoryUnit {
    /// The loaded word's nibble values (0 unless a load, a byte/halfword store or a
    /// line fill reads).
    pub loaded: Vec<Expr>,
    /// A load's result (nibble values), 0 unless a valid load ran.
    pub load_result: Vec<Expr>,
    /// The merged word of a byte/halfword store (nibble values).
    pub merged: Vec<Expr>,
    pub load_ok: Expr,
    pub load_misaligned: Expr,
    pub load_fault: Expr,
    /// A word store in RAM whose line was in the cache (it is done).
    pub sw_hit: Expr,
    /// A byte/halfword store in RAM whose line is in the cache (its merge goes on).
    pub sbsh_hit: Expr,
    /// A byte/halfword commit that wrote through (it is done).
    pub commit_hit: Expr,
    /// A store in RAM (or a commit) whose line is not in the cache: a fill starts.
    pub miss: Expr,
    pub sbsh_ram: Expr,
    pub console: Expr,
    pub exit: Expr,
    pub store_misaligned: Expr,
    pub store_fault: Expr,
    /// A fill pass (`fz`, `fs` or `f3`; the token kinds, 0/1).
    pub fill_pass: Expr,
    /// One-hot of the line word this fill pass reads (none after `f3` of word 7).
    pub examine: Vec<Expr>,
    /// The word a fill pass read is not zero.
    pub loaded_nonzero: Expr,
    /// The RAM bank memories (for the host's state readout).
    pub banks: Vec<usize>,
}

/// 1 on a pass that reads or writes memory by address: a load or store, a byte/halfword
/// commit, a line fill (the passes whose address digits are used).
pub fn addressing(t: &Tok, k: &Classes) -> Expr {
    let fill_pass = t.kind(kind::FZ) + t.kind(kind::FS) + t.kind(kind::F3);
    let sum = |xs: &[Expr]| xs.iter().sum::<Expr>();
    sum(&k.load) + sum(&k.store) + k.sbsh_commit.clone() + fill_pass
}

/// One-hot digits of the byte address rs1 + imm, straight from the operands: a digit
/// made of address bits lo..hi is a function of X = the sum of both operands' bits 0..hi
/// (an exact integer below 2^19), namely floor(X / 2^lo) mod 2^(hi-lo); thresholds at the
/// multiples of 2^lo give it without waiting for the adder's carries. `gate` (0/1) zeroes
/// every digit when it is 0.
fn address_digits(
    c: &mut Circuit,
    name: &str,
    a: &[Expr],
    m: &[Expr],
    gate: &Expr,
    specs: &[(&str, usize, usize)],
) -> Vec<Vec<Expr>> {
    const K: f64 = inband_circuits::contract::GATE_SCALE;
    let mut blk = c.block(name);
    let mut digits = Vec::new();
    for &(name, lo, n) in specs {
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
    digits
}

/// A bank line's address as single 0/1 signals, one MLP layer after its digits: each
/// bank's head choices (the head and bank digits ANDed with the pass kinds that read, or
/// that write) and the row (`rhi × rlo`, the executed access's or a boot `bl`'s). Left as
/// sums in a factored address, every digit and pass kind fed its value into the key
/// channels of all the rows it takes part in, up to all 2,048 of a bank (~1,000 input
/// projection entries a pass in each bank's layer); a chosen head signal feeds its 128
/// rows, a row signal its 16 heads.
struct LineChoices {
    /// [bank][head].
    read_heads: Vec<Vec<Expr>>,
    write_heads: Vec<Vec<Expr>>,
    /// 128 rows (`rhi` × 16 + `rlo`).
    rows: Vec<Expr>,
}

/// `exec` is the executed access's (head, bank) digits, which reads choose by; `joined`
/// the (head, bank, rhi, rlo) digits of it or a boot line, which writes and rows take.
fn line_choices(c: &mut Circuit, exec: [&[Expr]; 2], joined: [&[Expr]; 4], reads: &Expr, writes: &Expr) -> LineChoices {
    let [head, bank, rhi, rlo] = joined;
    LineChoices {
        read_heads: head_choices(c, "ram.read", exec, reads),
        write_heads: head_choices(c, "ram.write", [head, bank], writes),
        rows: row_onehot(c, "ram.row", rhi, rlo),
    }
}

/// [bank][head]: the AND of the head digit, the bank digit and `terms`.
fn head_choices(c: &mut Circuit, name: &str, [head, bank]: [&[Expr]; 2], terms: &Expr) -> Vec<Vec<Expr>> {
    let terms: Vec<(String, Vec<Expr>)> = (0..RAM_BANKS * head.len())
        .map(|i| {
            let (b, h) = (i / head.len(), i % head.len());
            (
                format!("b{b}.h{h}"),
                vec![head[h].clone(), bank[b].clone(), terms.clone()],
            )
        })
        .collect();
    ands(c, name, &terms).chunks(head.len()).map(|c| c.to_vec()).collect()
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
    let heads = c.target.key_heads;
    assert_eq!(
        (heads, c.target.rows_per_head),
        (16, 128),
        "RAM banks are 16 heads of 128 lines"
    );
    let sum = |xs: &[Expr]| xs.iter().sum::<Expr>();
    let now = |e: Expr| Delayed::now(e);
    let [lb, lh, lw, lbu, lhu] = k.load.clone();
    let [sb, sh, sw] = k.store.clone();
    let load_any = sum(&[lb.clone(), lh.clone(), lw.clone(), lbu.clone(), lhu.clone()]);
    let store_any = sum(&[sb.clone(), sh.clone(), sw.clone()]);
    let (fz, fs, f3) = (t.kind(kind::FZ), t.kind(kind::FS), t.kind(kind::F3));
    let fill_pass = fz.clone() + fs.clone() + f3.clone();

    // The line's digits on every pass that touches memory (fill passes re-run the store);
    // the word's digits separately for cache writes (word stores and commits) and for
    // bank reads (loads and the merge reads of byte/halfword stores).
    let access = addressing(t, k);
    let line_specs = [("rlo", 5, 4), ("rhi", 9, 3), ("head", 12, 4), ("bank", 16, 2)];
    let mut line = address_digits(c, "ram.line", &rs1.bits, imm, &access, &line_specs).into_iter();
    let (rlo, rhi, head, bank) = (
        line.next().unwrap(),
        line.next().unwrap(),
        line.next().unwrap(),
        line.next().unwrap(),
    );
    let writes_word = sw.clone() + k.sbsh_commit.clone();
    let store_word = address_digits(c, "ram.word.store", &rs1.bits, imm, &writes_word, &[("w", 2, 3)]).remove(0);
    let reads_word = load_any.clone() + sb.clone() + sh.clone();
    let load_word = address_digits(c, "ram.word.load", &rs1.bits, imm, &reads_word, &[("w", 2, 3)]).remove(0);
    // The word a fill pass reads: 0 after `fz`, fk after `fs`, fw + 1 after `f3`.
    let examine: Vec<Expr> = (0..LINE_WORDS)
        .map(|e| {
            let after_f3 = if e > 0 {
                t.field(field::FW)[e - 1].clone()
            } else {
                Expr::zero()
            };
            let after_fz = if e == 0 { fz.clone() } else { Expr::zero() };
            after_fz + t.field(field::FK)[e].clone() + after_f3
        })
        .collect();
    let slot_rows = || {
        vec![
            rhi.iter().map(|x| now(x.clone())).collect::<Vec<_>>(),
            rlo.iter().map(|x| now(x.clone())).collect(),
        ]
    };
    let one_head = || vec![now(Expr::constant(1.0))];

    // Cache tags: `fz` claims the slot for the store's line; every access reads the tag
    // with the gate open only at the line's own head and bank, so a match reads 2.
    let tags = c.memory(
        "cache.tags",
        1,
        2,
        "line cache tag by slot: the line's head (entries 0-15) and bank (16-19) one-hot",
    );
    let mut entries: Vec<(usize, Delayed)> = head.iter().enumerate().map(|(h, x)| (h, now(x.clone()))).collect();
    entries.extend(bank.iter().enumerate().map(|(b, x)| (16 + b, now(x.clone()))));
    c.write(Write {
        memory: tags,
        address: Address::Factored {
            heads: one_head(),
            rows: slot_rows(),
        },
        entries,
        enable: fz.clone(),
    });
    let select: Vec<(usize, Expr)> = head
        .iter()
        .enumerate()
        .map(|(h, x)| (h, x.clone()))
        .chain(bank.iter().enumerate().map(|(b, x)| (16 + b, x.clone())))
        .collect();
    let matched = c.read(
        "cache.tags",
        tags,
        Address::Factored {
            heads: one_head(),
            rows: slot_rows(),
        },
        Some(select),
        vec![("match".into(), Range::new(0, 2), (0..20).map(|e| (e, 1.0)).collect())],
    );
    let hit = Expr::signal(step(c, "cache.hit", Expr::signal(matched[0]) - 1.0));

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

    // Cache words: word k of slot s is row s of memory k. A word store or commit writes
    // its word (whatever the tag: a miss refills the whole slot anyway), `fz` clears all
    // eight, `f3` writes word fw. Every access reads the whole line back.
    let mut cached: Vec<Vec<Expr>> = Vec::new();
    for w in 0..LINE_WORDS {
        let mem = c.memory(
            format!("cache.w{w}"),
            1,
            8,
            format!("line cache word {w} by slot: eight one-hot nibbles"),
        );
        let mut entries = Vec::new();
        for j in 0..8 {
            for v in 0..16 {
                let cleared = if v == 0 { fz.clone() } else { Expr::zero() };
                entries.push((16 * j + v, now(data[j][v].clone() + f.staged[j][v].clone() + cleared)));
            }
        }
        let chosen = store_word[w].clone() + fz.clone() + t.field(field::FW)[w].clone();
        c.write(Write {
            memory: mem,
            address: Address::Factored {
                heads: vec![now(chosen)],
                rows: slot_rows(),
            },
            entries,
            enable: writes_word.clone() + fz.clone() + f3.clone(),
        });
        let outs = (0..8)
            .map(|j| {
                (
                    format!("n{j}"),
                    Range::NIBBLE,
                    (1..16).map(|v| (16 * j + v, v as f64)).collect(),
                )
            })
            .collect();
        let read = c.read(
            &format!("cache.w{w}"),
            mem,
            Address::Factored {
                heads: one_head(),
                rows: slot_rows(),
            },
            None,
            outs,
        );
        cached.push(oh(&read));
    }
    // A word store or commit whose tag matched writes its line through (`writes_word` is a
    // term of the bank's head choice, `hit` of its write enable; a boot `bl` stands in for
    // both). A word store outside RAM writes wherever its address bits point: it traps or
    // exits, so nothing reads that afterwards.

    // The banks. Boot `bl` tokens name the line in their fields and bring the staged row.
    let bl = t.kind(kind::BL);
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
    let reads = reads_word.clone() + fill_pass.clone();
    let lines = line_choices(
        c,
        [&head, &bank],
        [&w_head, &w_bank, &w_rhi, &w_rlo],
        &reads,
        &(writes_word.clone() + bl.clone()),
    );
    let mut banks = Vec::new();
    let mut levels = vec![Expr::zero(); 8];
    for b in 0..RAM_BANKS {
        let mem = c.add_memory(
            format!("ram{b}"),
            heads,
            RowCode::Anchored {
                anchor: RAM_ANCHOR,
                rows_per_read: 1,
            },
            format!("RAM bank {b}: a line of eight words per row, word k's nibble j (level) at entry 8k+j"),
        );
        let address = |heads: &[Vec<Expr>]| Address::Factored {
            heads: heads[b].iter().map(|h| now(h.clone())).collect(),
            rows: vec![lines.rows.iter().map(|r| now(r.clone())).collect()],
        };
        let entries = (0..8 * LINE_WORDS)
            .map(|e| (e, now(cached[e / 8][e % 8].clone() + f.staged_row[e].clone())))
            .collect();
        c.write(Write {
            memory: mem,
            address: address(&lines.write_heads),
            entries,
            enable: all(&[writes_word.clone() + bl.clone(), hit.clone() + bl.clone()]),
        });
        let select = (0..8 * LINE_WORDS)
            .map(|e| (e, load_word[e / 8].clone() + examine[e / 8].clone()))
            .collect();
        let outs = (0..8)
            .map(|j| {
                (
                    format!("n{j}"),
                    Range::NIBBLE,
                    (0..LINE_WORDS).map(|w| (8 * w + j, 1.0)).collect(),
                )
            })
            .collect();
        let read = c.read(&format!("ram{b}"), mem, address(&lines.read_heads), Some(select), outs);
        for j in 0..8 {
            levels[j] = levels[j].clone() + Expr::signal(read[j]);
        }
        banks.push(mem);
    }
    // The levels go on as they are (within 0.001 of integers, far inside every later
    // decision's margin): thresholding them would cost a layer.
    let loaded = levels;

    // Region and alignment checks.
    let (a0, a1) = (address[0].clone(), address[1].clone());
    let mut blk = c.block("access");
    let mut flag = |name: &str, cond: Expr, lo: f64| -> Expr {
        let s = blk.output(name, Range::BIT);
        add_gated(&mut blk, &cond, (lo, 2.0), &Expr::constant(1.0), &[(s, 1.0)]);
        Expr::signal(s)
    };
    let region = pattern(address, 18, 14, RAM_HIGH);
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

    // Load results: lanes chosen by the low address bits, sign or zero filled. The sign
    // fill fires when the lane is chosen and its top nibble's level is 8 or more.
    let lane = |l: u64| pattern(address, 0, 2, l);
    let fifteen = Expr::constant(15.0);
    let negative = |chosen: Expr, top: &Expr| top.clone() - 7.0 + (chosen - 1.0) * 32.0;
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
        let outs: Vec<_> = (2..8).map(|j| (res[j], 1.0)).collect();
        add_gated(
            &mut blk,
            &negative(fill, &loaded[2 * l as usize + 1]),
            (-40.0, 8.0),
            &fifteen,
            &outs,
        );
    }
    let halves = lh.clone() + lhu.clone();
    for hh in 0..2usize {
        let half_sel = |cls: Expr| all(&[cls, if hh == 1 { a1.clone() } else { not(&a1) }]);
        let sel = half_sel(halves.clone());
        for j in 0..4 {
            add_gated(&mut blk, &sel, (-1.0, 1.0), &loaded[4 * hh + j], &[(res[j], 1.0)]);
        }
        let outs: Vec<_> = (4..8).map(|j| (res[j], 1.0)).collect();
        let fill = half_sel(lh.clone());
        add_gated(
            &mut blk,
            &negative(fill, &loaded[4 * hh + 3]),
            (-40.0, 8.0),
            &fifteen,
            &outs,
        );
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

    // What the cache's tag means for each kind of store.
    let mut outcome = |name: &str, cond: Expr| Expr::signal(step(c, name, cond));
    let sw_hit = outcome("cache.sw_hit", sw_ram.clone() + hit.clone() - 1.0);
    let sbsh_hit = outcome("cache.sbsh_hit", sbsh_ram.clone() + hit.clone() - 1.0);
    let commit_hit = outcome("cache.commit_hit", k.sbsh_commit.clone() + hit.clone() - 1.0);
    let miss = outcome(
        "cache.miss",
        sw_ram.clone() + sbsh_ram.clone() + k.sbsh_commit.clone() - hit,
    );
    let loaded_nonzero = outcome("fill.nonzero", sum(&loaded));
    MemoryUnit {
        loaded,
        load_result: oh(&res),
        merged,
        load_ok,
        load_misaligned,
        load_fault,
        sw_hit,
        sbsh_hit,
        commit_hit,
        miss,
        sbsh_ram,
        console,
        exit,
        store_misaligned,
        store_fault,
        fill_pass,
        examine,
        loaded_nonzero,
        banks,
    }
}
