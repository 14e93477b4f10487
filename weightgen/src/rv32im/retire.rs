//! Retire: choose the value, the next token and its fields.
//!
//! One layer muxes every result source into a value (nibbles) and classifies it (fits
//! 12 bits sign-extended → `s`; bits 12..31 as rd's were → `u`; bits 20..31 all 0 or all
//! 1 → `m` then `l`; else `h`, `m`, `l`). The final layer holds the `latch`, an anchored
//! memory written on every pass that runs an instruction or reads a word for a line fill,
//! and read by the continuation passes (`h`, `m`, `lk`, `w1`, `w2`, `t`), which emit the
//! rest of what that pass started.

use inband_circuits::circuit::RowCode;
use inband_circuits::contract::OUTPUT_UNIT;
use inband_circuits::primitives::{add_and, add_gated, all, not};
use inband_circuits::{Circuit, Delayed, Expr, Output, Range, Write};

use super::alu::Executed;
use super::decode::{Classes, Decoded};
use super::front::Front;
use super::mem::MemoryUnit;
use super::millicode;
use super::regs::RegFile;
use super::tokens::{field, kind, row_digits, up, CAUSE_EXIT, NEXT_ROW, REBASE};
use super::wires::{bits_value, entry_outputs, nibble_values, oh, one_row, value, Tok};

/// Anchor of the latch's rows.
pub const LATCH_ANCHOR: f64 = 4096.0;

/// Latch entries.
mod latch {
    /// Value nibbles 0..7.
    pub const VALUE: usize = 0;
    pub const UP: usize = 8;
    pub const OWN_SLOT: usize = 9;
    pub const NEXT_SLOT: usize = 10;
    pub const T_HEAD: usize = 11;
    pub const T_RHI: usize = 12;
    pub const T_RLO: usize = 13;
    pub const T_SLOT: usize = 14;
    pub const T_FAULT: usize = 15;
    pub const WSLOT: usize = 16;
    /// 1 when a line fill wrote the latch (its word goes back through `w1 w2 f3`).
    pub const FILL: usize = 17;
    /// The line word that fill read.
    pub const FILL_K: usize = 18;
    pub const COUNT: usize = 19;
}

pub fn build(c: &mut Circuit, t: &Tok, f: &Front, d: &Decoded, r: &RegFile, x: &Executed, m: &MemoryUnit) {
    let rs2 = &r.rs2;
    let k = &d.class;
    let sum = |xs: &[&Expr]| xs.iter().copied().sum::<Expr>();
    let one = Expr::constant(1.0);

    // Target checks: a jump must stay inside the ROM's 64 KiB (millicode jumps stay in
    // its own rows, which share the pcs of the ROM's last head).
    let tb = &x.target;
    let mut blk = c.block("target.check");
    let in_rom = blk.output("in_rom", Range::BIT);
    let rom_high = super::wires::pattern(tb, 16, 16, (inband_firmware::memory_map::ROM_BASE >> 16) as u64);
    add_and(&mut blk, &rom_high, &[(in_rom, 1.0)]);
    c.add_block(blk);
    let misaligned = tb[1].clone();
    let mut blk = c.block("target.ok");
    let ok = blk.output("ok", Range::BIT);
    let cond = not(&misaligned) + Expr::signal(in_rom) - 1.0;
    add_gated(&mut blk, &cond, (-1.0, 1.0), &one, &[(ok, 1.0)]);
    c.add_block(blk);
    let target_ok = Expr::signal(ok);
    let target_nofetch = not(&misaligned) - target_ok.clone();

    let jump = k.jal.clone() + k.jalr.clone();
    let branch_any = k.branch.iter().sum::<Expr>();

    let taken = x.branch_taken.clone();
    let not_taken = outcome(c, "branch.not_taken", vec![all(&[branch_any.clone(), not(&taken)])]);
    let jump_rd0 = |cond: &Expr| all(&[jump.clone(), d.rd_zero.clone(), cond.clone()]);
    let jump_go = outcome(
        c,
        "jump.go",
        vec![all(&[taken.clone(), target_ok.clone()]), jump_rd0(&target_ok)],
    );
    let jump_link = outcome(
        c,
        "jump.link",
        vec![all(&[jump.clone(), not(&d.rd_zero), not(&misaligned)])],
    );
    let jump_misaligned = outcome(
        c,
        "jump.misaligned",
        vec![all(&[taken.clone() + jump.clone(), misaligned.clone()])],
    );
    let jump_nofetch = outcome(
        c,
        "jump.nofetch",
        vec![all(&[taken.clone(), target_nofetch.clone()]), jump_rd0(&target_nofetch)],
    );

    // A division whose quotient is 0 or 1 retires here; any other enters the millicode.
    let ShortDivision {
        quotient_zero: div_zero,
        remainder_dividend: rem_dividend,
        quotient_one: div_one,
        remainder_difference: rem_difference,
    } = short_division(c, k, f, r, x);
    let millicode_entry =
        k.mdiv.clone() - div_zero.clone() - rem_dividend.clone() - div_one.clone() - rem_difference.clone();

    // Register-result sources: (condition, nibble values).
    let zero_hi = |lo: Vec<Expr>| -> Vec<Expr> {
        let mut v = lo;
        v.resize(8, Expr::zero());
        v
    };
    let results: Vec<(&str, Expr, Vec<Expr>)> = vec![
        // A division's remainder rs1 − rs2 is the main adder's difference and its
        // remainder rs1 is the logic unit's OR (with no immediate and rs2 not selected, OR
        // is rs1): sharing those sources' classification, the remainders add no neuron
        // that reads a value on every pass.
        (
            "add",
            sum(&[&k.add, &k.sub, &k.addi, &rem_difference]),
            nibble_values(&x.sum),
        ),
        (
            "slt",
            k.slt.clone() + k.slti.clone(),
            zero_hi(vec![x.less_signed.clone()]),
        ),
        (
            "sltu",
            k.sltu.clone() + k.sltiu.clone(),
            zero_hi(vec![x.less_unsigned.clone()]),
        ),
        ("and", k.and.clone() + k.andi.clone(), nibble_values(&x.and)),
        ("or", sum(&[&k.or, &k.ori, &rem_dividend]), nibble_values(&x.or)),
        ("xor", k.xor.clone() + k.xori.clone(), nibble_values(&x.xor)),
        // dacc is rs1 << 4 plus rs2's low nibble, which the classification never reads
        // (the value's nibble 0 takes it below).
        ("sll", sum(&[&k.sll, &k.slli, &k.dacc]), nibble_values(&x.shift_left)),
        (
            "sr",
            sum(&[&k.srl, &k.sra, &k.srli, &k.srai]),
            nibble_values(&x.shift_right),
        ),
        ("lui", k.lui.clone(), nibble_values(&d.imm)),
        ("auipc", k.auipc.clone(), nibble_values(&x.pc_imm)),
        ("load", m.load_ok.clone(), m.load_result.clone()),
        ("mul", k.mul[0].clone(), x.product[..8].to_vec()),
        ("mulh", sum(&[&k.mul[1], &k.mul[2], &k.mul[3]]), x.product[8..].to_vec()),
        ("div.zero", div_zero, zero_hi(Vec::new())),
        ("div.one", div_one, zero_hi(vec![Expr::constant(1.0)])),
        ("dquo", k.dquo.clone(), zero_hi(vec![x.digit.digit.clone()])),
        ("dstep", k.dstep.clone(), x.digit.remainder.clone()),
    ];
    // Other values the tokens carry: a merged word, the exit code, trap values, a console byte.
    let trap_address =
        m.load_misaligned.clone() + m.load_fault.clone() + m.store_misaligned.clone() + m.store_fault.clone();
    let others: Vec<(&str, Expr, Vec<Expr>)> = vec![
        ("merged", m.sbsh_ram.clone(), m.merged.clone()),
        // A line fill sends the word it read back up.
        ("fill", m.fill_pass.clone(), m.loaded.clone()),
        ("exit", m.exit.clone(), rs2.nibbles.clone()),
        ("console", m.console.clone(), zero_hi(rs2.nibbles[..2].to_vec())),
        ("addr", trap_address.clone(), nibble_values(&x.address)),
        // Jumps carry their target (for lk passes and fetch traps).
        ("target", jump.clone() + taken.clone(), nibble_values(&x.target)),
    ];
    let mut blk = c.block("value");
    let val: Vec<_> = (0..8).map(|j| blk.output(format!("n{j}"), Range::NIBBLE)).collect();
    for (_, cond, nibbles) in results.iter().chain(&others) {
        for (j, n) in nibbles.iter().enumerate() {
            if n.is_constant() && n.constant == 0.0 {
                continue;
            }
            add_gated(&mut blk, cond, (-1.0, 1.0), n, &[(val[j], 1.0)]);
        }
    }
    add_gated(&mut blk, &k.dacc, (0.0, 1.0), &rs2.nibbles[0], &[(val[0], 1.0)]);
    c.add_block(blk);
    let value_n = oh(&val);

    // Classification, per result source (so it runs beside the mux).
    let mut blk = c.block("value.class");
    let fits12 = blk.output("fits12", Range::BIT);
    let up_zero = blk.output("up.zero", Range::BIT);
    let up_ones = blk.output("up.ones", Range::BIT);
    // How many of nibbles 3..7 differ from rd's before the write: none, and one `u`
    // token writes the value (its low bits; the register keeps the rest).
    let differs = blk.output("differs", Range::new(0, 5));
    for (_, cond, nib) in &results {
        let high = |from: usize| (from..8).map(|j| nib[j].clone()).sum::<Expr>();
        let ones = |from: usize| (from..8).map(|j| Expr::constant(15.0) - nib[j].clone()).sum::<Expr>();
        let big = 16.0 * 15.0 * 8.0 + 16.0;
        let gate = |e: Expr| e + (cond.clone() - 1.0) * big;
        // value < 2048: 16·Σ n3..n7 + n2 ≤ 7
        add_gated(
            &mut blk,
            &gate(Expr::constant(8.0) - high(3) * 16.0 - nib[2].clone()),
            (-2.0 * big, 8.0),
            &one,
            &[(fits12, 1.0)],
        );
        // value ≥ −2048: 16·Σ (15 − n3..n7) + (15 − n2) ≤ 7
        let neg = Expr::constant(8.0) - ones(3) * 16.0 - (Expr::constant(15.0) - nib[2].clone());
        add_gated(&mut blk, &gate(neg), (-2.0 * big, 8.0), &one, &[(fits12, 1.0)]);
        add_gated(
            &mut blk,
            &gate(Expr::constant(1.0) - high(5)),
            (-2.0 * big, 1.0),
            &one,
            &[(up_zero, 1.0)],
        );
        add_gated(
            &mut blk,
            &gate(Expr::constant(1.0) - ones(5)),
            (-2.0 * big, 1.0),
            &one,
            &[(up_ones, 1.0)],
        );
        for j in 3..8 {
            let diff = nib[j].clone() - r.rd_upper[j - 3].clone();
            for signed in [diff.clone(), Expr::zero() - diff] {
                add_gated(&mut blk, &gate(signed), (-15.0 - big, 15.0), &one, &[(differs, 1.0)]);
            }
        }
    }
    c.add_block(blk);
    let (fits12, up_zero, up_ones) = (Expr::signal(fits12), Expr::signal(up_zero), Expr::signal(up_ones));
    let differs = Expr::signal(differs);
    let result_any = results.iter().map(|(_, c, _)| c.clone()).sum::<Expr>();

    // Sequential outcomes: no register to write, the next instruction follows.
    let mut blk = c.block("sequential");
    let seq_s = blk.output("seq", Range::BIT);
    add_gated(
        &mut blk,
        &all(&[result_any.clone(), d.rd_zero.clone()]),
        (-1.0, 1.0),
        &one,
        &[(seq_s, 1.0)],
    );
    c.add_block(blk);
    let seq = Expr::signal(seq_s) + m.sw_hit.clone() + not_taken.clone() + k.fence.clone() + m.commit_hit.clone();
    let own_slot = value(&f.slot);
    let next_slot = (0..8).fold(f.wrap_moved.clone() * (REBASE - NEXT_ROW) as f64, |e, v| {
        e + f.slot[v].clone() * (if v == 7 { NEXT_ROW } else { v + 1 }) as f64
    });
    let t_head = bits_value(&x.target[12..16]);
    let t_rhi = bits_value(&x.target[9..12]);
    let t_rlo = bits_value(&x.target[5..9]);
    let t_slot = bits_value(&x.target[2..5]);
    // A store's w3 re-runs it at its own slot; a trap value's w3 runs nothing (slot 8).
    let mut blk = c.block("wslot");
    let wslot = blk.output("wslot", Range::new(0, 8));
    add_gated(
        &mut blk,
        &m.sbsh_ram,
        (0.0, 1.0),
        &(own_slot.clone() - NEXT_ROW as f64),
        &[(wslot, 1.0)],
    );
    c.add_block(blk);
    let wslot = Expr::signal(wslot) + NEXT_ROW as f64;

    // The latch.
    let rows = c.target.rows_per_head;
    let latch_mem = c.add_memory(
        "latch",
        1,
        RowCode::Anchored {
            anchor: LATCH_ANCHOR,
            rows_per_read: 1,
        },
        "what a multi-token instruction still has to emit: value nibbles, up, slots, jump target, wslot (levels)",
    );
    let mut entries: Vec<(usize, Delayed)> = Vec::new();
    for j in 0..8 {
        entries.push((latch::VALUE + j, Delayed::now(value_n[j].clone())));
    }
    for (e, x) in [
        (latch::UP, up_ones.clone()),
        (latch::OWN_SLOT, own_slot.clone()),
        (latch::NEXT_SLOT, next_slot.clone()),
        (latch::T_HEAD, t_head),
        (latch::T_RHI, t_rhi),
        (latch::T_RLO, t_rlo),
        (latch::T_SLOT, t_slot),
        (latch::T_FAULT, target_nofetch.clone()),
        (latch::WSLOT, wslot),
        (latch::FILL, m.fill_pass.clone()),
        (latch::FILL_K, value(&m.examine)),
    ] {
        entries.push((e, Delayed::now(x)));
    }
    c.write(Write {
        memory: latch_mem,
        address: one_row(rows, 0, Delayed::now(one.clone())),
        entries,
        enable: f.first.clone() + m.fill_pass.clone(),
    });
    // Read only by the continuation passes (everything that reads it is gated by their
    // kinds): a closed read lets the GPU kernel skip the head's read on every other pass.
    let continuing = [kind::H, kind::M, kind::LK, kind::W1, kind::W2, kind::T]
        .iter()
        .map(|k| t.kind(*k))
        .sum::<Expr>();
    let latched = oh(&c.read(
        "latch",
        latch_mem,
        one_row(rows, 0, Delayed::now(one.clone())),
        Some((0..latch::COUNT).map(|e| (e, continuing.clone())).collect()),
        entry_outputs("e", 0..latch::COUNT)
            .into_iter()
            .map(|(n, _, e)| (n, Range::new(0, 15), e))
            .collect(),
    ));

    // Kinds.
    let (tk_h, tk_m, tk_lk, tk_w1, tk_w2, tk_t) = (
        t.kind(kind::H),
        t.kind(kind::M),
        t.kind(kind::LK),
        t.kind(kind::W1),
        t.kind(kind::W2),
        t.kind(kind::T),
    );
    let fault = latched[latch::T_FAULT].clone();
    // Fill passes that read a word of the line (all but `f3` of the last word).
    let fill_done = t.field(field::FW)[7].clone();
    let examining = m.fill_pass.clone() - fill_done.clone();
    let traps = k.illegal.clone()
        + k.ecall_user.clone()
        + k.ebreak.clone()
        + trap_address.clone()
        + m.exit.clone()
        + jump_misaligned.clone()
        + jump_nofetch.clone();
    // A row change in user code is an `x` token, one in millicode an `xm`; entering
    // millicode (a division) is an `xm`, leaving it (its ecall) an `x`.
    let mode = f.mode.clone();
    let user = |cond: Expr| cond - mode.clone();
    let millicode = |cond: Expr| cond + mode.clone() - 1.0;
    let choices = vec![
        (fits12.clone() - d.rd_zero.clone(), kind::S),
        (
            result_any.clone() - fits12.clone() - d.rd_zero.clone() - differs.clone(),
            kind::U,
        ),
        // m and h only when some upper nibble differs (the weights keep every other case
        // at or below 0: differs is at most 5).
        (
            (up_zero.clone() + up_ones.clone()) * 6.0 - fits12.clone() * 5.0 - d.rd_zero.clone() * 5.0 - 6.0
                + differs.clone(),
            kind::M,
        ),
        (
            (result_any.clone() - up_zero.clone() - up_ones.clone() - d.rd_zero.clone()) * 6.0 - 6.0 + differs.clone(),
            kind::H,
        ),
        (seq.clone() - f.wrap.clone(), kind::N),
        (user(seq.clone() + f.wrap.clone() - f.runoff.clone() - 1.0), kind::X),
        (millicode(seq.clone() + f.wrap.clone() - 1.0), kind::XM),
        (user(jump_go.clone()), kind::X),
        (millicode(jump_go.clone()), kind::XM),
        (k.ecall_mc.clone(), kind::X),
        (millicode_entry.clone(), kind::XM),
        (jump_link.clone(), kind::LK),
        (m.console.clone(), kind::O),
        (m.sbsh_hit.clone(), kind::W1),
        (m.miss.clone(), kind::FZ),
        // A fill pass sends a word it read (w1 w2 f3), skips a zero one, or ends.
        (examining.clone() + m.loaded_nonzero.clone() - 1.0, kind::W1),
        (
            examining.clone() - m.loaded_nonzero.clone() - m.examine[7].clone(),
            kind::FS,
        ),
        (
            examining.clone() - m.loaded_nonzero.clone() + m.examine[7].clone() - 1.0,
            kind::RR,
        ),
        (fill_done.clone(), kind::RR),
        (traps.clone(), kind::T),
        (all(&[seq.clone(), f.runoff.clone()]), kind::T),
        (all(&[f.rebase.clone(), f.runoff.clone()]), kind::T),
        (user(f.rebase.clone() - f.runoff.clone()), kind::X),
        (millicode(f.rebase.clone()), kind::XM),
        (tk_h.clone(), kind::M),
        (tk_m.clone(), kind::L),
        (user(tk_lk.clone() - fault.clone()), kind::X),
        (millicode(tk_lk.clone() - fault.clone()), kind::XM),
        (all(&[tk_lk.clone(), fault.clone()]), kind::T),
        (tk_w1.clone(), kind::W2),
        (tk_w2.clone() - latched[latch::FILL].clone(), kind::W3),
        (tk_w2.clone() + latched[latch::FILL].clone() - 1.0, kind::F3),
        (tk_t.clone(), kind::W1),
    ];
    let weight = crate::emit::output_kind_weight(&c.tokens);
    c.output(Output::KindChoice { choices, weight });

    // Fields.
    let w = OUTPUT_UNIT;
    let choose = |c: &mut Circuit, fl: usize, choices: Vec<(Expr, Expr)>| {
        c.output(Output::FieldChoice {
            field: fl,
            choices,
            weight: w,
        })
    };
    let lat = |e: usize| latched[e].clone();
    let first = f.first.clone();
    for j in 0..3 {
        choose(
            c,
            field::N[j],
            vec![
                (first.clone() + m.fill_pass.clone(), value_n[j].clone()),
                (tk_m.clone() + tk_t.clone(), lat(latch::VALUE + j)),
            ],
        );
    }
    for j in 3..6 {
        choose(c, field::N[j], vec![(tk_w1.clone(), lat(latch::VALUE + j))]);
    }
    for j in 6..8 {
        choose(c, field::N[j], vec![(tk_w2.clone(), lat(latch::VALUE + j))]);
    }
    choose(
        c,
        field::SLOT,
        vec![
            (first.clone() + f.commit.clone(), next_slot.clone()),
            (tk_m.clone(), lat(latch::NEXT_SLOT)),
        ],
    );
    choose(
        c,
        field::M3,
        vec![
            (first.clone(), value_n[3].clone()),
            (tk_h.clone(), lat(latch::VALUE + 3)),
        ],
    );
    choose(
        c,
        field::M4,
        vec![
            (first.clone(), value_n[4].clone()),
            (tk_h.clone(), lat(latch::VALUE + 4)),
        ],
    );
    choose(
        c,
        field::MUP,
        vec![
            (first.clone(), up_ones.clone()),
            (tk_h.clone(), Expr::constant(up::FROM_H as f64)),
        ],
    );
    choose(
        c,
        field::MSLOT,
        vec![(first.clone(), own_slot.clone()), (tk_h.clone(), lat(latch::OWN_SLOT))],
    );
    for (j, fl) in field::H.into_iter().enumerate() {
        choose(c, fl, vec![(first.clone(), value_n[5 + j].clone())]);
    }
    choose(c, field::LKSLOT, vec![(first.clone(), own_slot.clone())]);
    // x and xm: sequential/rebase (next row, slot 0), jumps, millicode return and entry,
    // lk passes (xm has no head field, and its row is millicode row rlo).
    let sequential = all(&[seq.clone(), f.wrap.clone()]) + f.rebase.clone();
    let ret = |v: &[Expr]| value(v);
    // A division enters the millicode at its entry's row, slot 0 (an `xm` carries only
    // the rlo: the millicode's rows all share the first row's head and rhi).
    let [mc_head, mc_rhi, mc_rlo] = row_digits(millicode::FIRST_ROW).map(|d| Expr::constant(d as f64));
    let entry_rlo = mc_rlo + d.funct3_low.clone() * millicode::ENTRY_ROWS as f64;
    let x_fields: [(usize, Expr, Expr, Expr, Expr, Expr); 4] = [
        (
            field::HEAD,
            value(&f.next_head),
            bits_value(&x.target[12..16]),
            ret(&d.ret_head),
            mc_head,
            lat(latch::T_HEAD),
        ),
        (
            field::RHI,
            value(&f.next_rhi),
            bits_value(&x.target[9..12]),
            ret(&d.ret_rhi),
            mc_rhi,
            lat(latch::T_RHI),
        ),
        (
            field::RLO,
            value(&f.next_rlo),
            bits_value(&x.target[5..9]),
            ret(&d.ret_rlo),
            entry_rlo,
            lat(latch::T_RLO),
        ),
        (
            field::XSLOT,
            Expr::zero(),
            bits_value(&x.target[2..5]),
            ret(&d.ret_slot),
            Expr::zero(),
            lat(latch::T_SLOT),
        ),
    ];
    for (fl, seq_v, jump_v, ret_v, entry_v, lk_v) in x_fields {
        choose(
            c,
            fl,
            vec![
                (sequential.clone(), seq_v),
                (jump_go.clone(), jump_v),
                (k.ecall_mc.clone(), ret_v),
                (millicode_entry.clone(), entry_v),
                (tk_lk.clone(), lk_v),
            ],
        );
    }
    let cause = |code: usize| Expr::constant(code as f64);
    choose(
        c,
        field::CAUSE,
        vec![
            (jump_misaligned.clone(), cause(0)),
            (jump_nofetch.clone() + tk_lk.clone(), cause(1)),
            (all(&[seq.clone(), f.runoff.clone()]), cause(1)),
            (all(&[f.rebase.clone(), f.runoff.clone()]), cause(1)),
            (k.illegal.clone(), cause(2)),
            (k.ebreak.clone(), cause(3)),
            (m.load_misaligned.clone(), cause(4)),
            (m.load_fault.clone(), cause(5)),
            (m.store_misaligned.clone(), cause(6)),
            (m.store_fault.clone(), cause(7)),
            (k.ecall_user.clone(), cause(8)),
            (m.exit.clone(), cause(CAUSE_EXIT)),
        ],
    );
    choose(c, field::WSLOT, vec![(tk_w2.clone(), lat(latch::WSLOT))]);
    // Line fills: the word an `f3` writes, the word an `fs` reads next, the store's slot.
    choose(c, field::FW, vec![(tk_w2.clone(), lat(latch::FILL_K))]);
    choose(
        c,
        field::FK,
        vec![(m.fill_pass.clone(), value(&m.examine) + 1.0 - m.examine[7].clone())],
    );
    choose(
        c,
        field::FSLOT,
        vec![
            (m.miss.clone() + m.fill_pass.clone(), own_slot.clone()),
            (tk_w2.clone(), lat(latch::OWN_SLOT)),
        ],
    );
}

/// The outcomes of a division that retires in its own pass (each 0/1, at most one set).
struct ShortDivision {
    quotient_zero: Expr,
    remainder_dividend: Expr,
    quotient_one: Expr,
    remainder_difference: Expr,
}

/// An outcome signal (0/1): a sum of AND neurons over exclusive cases in a block of its
/// own, so that it lands in the earliest layer its inputs allow.
fn outcome(c: &mut Circuit, name: &str, conds: Vec<Expr>) -> Expr {
    let mut blk = c.block(format!("outcome.{name}"));
    let s = blk.output(name, Range::BIT);
    for cond in conds {
        let (lo, _) = cond.range(|_| Range::BIT);
        add_gated(&mut blk, &cond, (lo, 1.0), &Expr::constant(1.0), &[(s, 1.0)]);
    }
    c.add_block(blk);
    Expr::signal(s)
}

/// A division whose quotient is 0 or 1 retires in its own pass like an ALU
/// instruction: the quotient, or the remainder (rs1, or the main adder's rs1 − rs2).
/// The main adder compares rs1 with rs2 and a second comparator rs1 >> 1 with rs2
/// (unsigned: the quotient is 0 below rs2, 1 from rs2 to below twice rs2); DIV and REM
/// take these cases only with both operands non-negative, where they are DIVU and
/// REMU. Any other division enters the millicode.
fn short_division(c: &mut Circuit, k: &Classes, f: &Front, r: &RegFile, x: &Executed) -> ShortDivision {
    let unsigned_division = f.bits[12].clone();
    let remainder = f.bits[13].clone();
    let below = x.less_unsigned.clone();
    let below_twice = all(&[not(&below), x.half_below.clone()]);
    // (For quotient 0 a non-negative divisor implies a non-negative dividend; for
    // quotient 1 the reverse.)
    let short_quotient = |op: &Expr, quotient: &Expr, nonnegative: &Expr| {
        vec![
            all(&[k.mdiv.clone(), op.clone(), unsigned_division.clone(), quotient.clone()]),
            all(&[
                k.mdiv.clone(),
                op.clone(),
                not(&unsigned_division),
                nonnegative.clone(),
                quotient.clone(),
            ]),
        ]
    };
    let divisor_nonnegative = not(&r.rs2.bits[31]);
    let dividend_nonnegative = not(&r.rs1.bits[31]);
    let not_remainder = not(&remainder);
    let quotient_zero = outcome(
        c,
        "division.quotient_zero",
        short_quotient(&not_remainder, &below, &divisor_nonnegative),
    );
    let remainder_dividend = outcome(
        c,
        "division.remainder_dividend",
        short_quotient(&remainder, &below, &divisor_nonnegative),
    );
    let quotient_one = outcome(
        c,
        "division.quotient_one",
        short_quotient(&not_remainder, &below_twice, &dividend_nonnegative),
    );
    let remainder_difference = outcome(
        c,
        "division.remainder_difference",
        short_quotient(&remainder, &below_twice, &dividend_nonnegative),
    );
    ShortDivision {
        quotient_zero,
        remainder_dividend,
        quotient_one,
        remainder_difference,
    }
}
