//! Decode: instruction classes, immediates, register numbers and the millicode context.
//!
//! Every class is one neuron: an AND over the opcode/funct bits and the pass's phase
//! (classes that act are gated by `first`, so re-fetches on `m`/`lk`/commit passes do
//! nothing twice). Immediates are ANDs of an opcode and one instruction bit, so the
//! format's bit routing needs no extra layer.
//!
//! Millicode (DIV, DIVU, REM, REMU run as a routine beside user code in the ROM) sees the
//! caller through a window: in millicode, register fields name shadow registers 32..63,
//! except that reading x29 (through either source field) reads the caller's rs1, reading
//! x30 its rs2, and writing x31 writes its rd. The `ctx` memories hold those register numbers and the return pc,
//! written when the division instruction enters millicode. Millicode alone also runs the
//! division digit's custom-0 instructions (`digit`).

use inband_circuits::primitives::{add_and, add_gated, all, not};
use inband_circuits::{Circuit, Delayed, Expr, Range, Write};

use super::front::Front;
use super::wires::{all_of, entry_outputs, oh, pattern, row_zero};

/// Instruction classes (each 0/1, at most one set, all 0 when nothing runs).
#[derive(Clone, Debug)]
pub struct Classes {
    pub lui: Expr,
    pub auipc: Expr,
    pub jal: Expr,
    pub jalr: Expr,
    /// beq bne blt bge bltu bgeu
    pub branch: [Expr; 6],
    /// lb lh lw lbu lhu
    pub load: [Expr; 5],
    /// sb sh sw
    pub store: [Expr; 3],
    pub addi: Expr,
    pub slti: Expr,
    pub sltiu: Expr,
    pub xori: Expr,
    pub ori: Expr,
    pub andi: Expr,
    pub slli: Expr,
    pub srli: Expr,
    pub srai: Expr,
    pub add: Expr,
    pub sub: Expr,
    pub sll: Expr,
    pub slt: Expr,
    pub sltu: Expr,
    pub xor: Expr,
    pub srl: Expr,
    pub sra: Expr,
    pub or: Expr,
    pub and: Expr,
    /// mul mulh mulhsu mulhu
    pub mul: [Expr; 4],
    /// div divu rem remu from user code (they enter millicode unless the quotient is 0 or 1)
    pub mdiv: Expr,
    /// The millicode's division digit instructions (custom-0, millicode only; `digit`):
    /// dquo (funct3 0), dstep (1), dacc (2).
    pub dquo: Expr,
    pub dstep: Expr,
    pub dacc: Expr,
    /// dquo's or dstep's funct7, one-hot (0..7): the divisor's shift in nibbles; all 0
    /// on every other pass.
    pub digit_shift: Vec<Expr>,
    pub fence: Expr,
    pub ecall_user: Expr,
    /// ecall in millicode: return to the caller
    pub ecall_mc: Expr,
    pub ebreak: Expr,
    pub illegal: Expr,
    /// A byte or halfword store being committed (a commit pass).
    pub sbsh_commit: Expr,
}

/// A register field as the register file's address: one 0/1 expression per row (user
/// registers 0..31, millicode shadows 32..63), each the sum of the few neurons that name
/// that row, so a row's key channel takes one input projection entry per neuron. (A
/// factored address, bank × high four bits × low bit, fed every digit into the channels
/// of all rows sharing it: ~80 entries per read or write a pass, ~1,800 in the layer.)
#[derive(Clone, Debug)]
pub struct RegRows {
    pub rows: Vec<Expr>,
}

pub struct Decoded {
    pub class: Classes,
    /// The immediate's bits (format chosen by the opcode), 0 when nothing is fetched.
    pub imm: Vec<Expr>,
    /// The same bits of loads and stores only, 0 on every other pass: the memory unit's
    /// address digits read them on every pass (their thresholds' gate rows), where a
    /// nonzero bit costs an entry in each of ~480 rows.
    pub mem_imm: Vec<Expr>,
    pub rs1: RegRows,
    pub rs2: RegRows,
    pub rd: RegRows,
    /// The destination is x0 (nothing to write).
    pub rd_zero: Expr,
    /// The millicode return pc (row digits and slot, one-hot).
    pub ret_head: Vec<Expr>,
    pub ret_rhi: Vec<Expr>,
    pub ret_rlo: Vec<Expr>,
    pub ret_slot: Vec<Expr>,
    /// funct3's low two bits (which division entry point).
    pub funct3_low: Expr,
}

/// (opcode, funct3, funct7) patterns; None = any.
type Pattern = (u64, Option<u64>, Option<u64>);

fn terms(bits: &[Expr], (opcode, f3, f7): Pattern) -> Vec<Expr> {
    let mut t = pattern(bits, 0, 7, opcode);
    if let Some(f3) = f3 {
        t.extend(pattern(bits, 12, 3, f3));
    }
    if let Some(f7) = f7 {
        t.extend(pattern(bits, 25, 7, f7));
    }
    t
}

pub fn build(c: &mut Circuit, f: &Front) -> Decoded {
    let user = not(&f.mode);
    let (ca, cb) = millicode_context(c, f, &user);
    let class = classes(c, f, &user);
    let (imm, mem_imm) = immediates(c, f);
    let (rs1, rs2, rd, rd_zero) = register_numbers(c, f, &user, &ca, &cb);
    let bits = &f.bits;
    Decoded {
        class,
        imm,
        mem_imm,
        rs1,
        rs2,
        rd,
        rd_zero,
        ret_head: cb[32..48].to_vec(),
        ret_rhi: cb[48..56].to_vec(),
        ret_rlo: cb[56..72].to_vec(),
        ret_slot: cb[72..80].to_vec(),
        funct3_low: bits[12].clone() + bits[13].clone() * 2.0,
    }
}

/// The millicode context, written when user code runs a division: the caller's rs1 and
/// rs2 (`ctx_a`), its rd and return pc (`ctx_b`); returns both as read, one-hot.
fn millicode_context(c: &mut Circuit, f: &Front, user: &Expr) -> (Vec<Expr>, Vec<Expr>) {
    let bits = &f.bits;
    let rows = c.target.rows_per_head;
    let div_entry = all_of(
        terms(bits, (0b0110011, None, Some(1))),
        &[bits[14].clone(), f.first.clone(), user.clone()],
    );
    let ctx_a = c.memory(
        "ctx_a",
        1,
        8,
        "millicode caller: rs1 one-hot (0-31), rs2 one-hot (32-63), 6 pads",
    );
    let rs1_field = |r: usize| {
        let mut t = pattern(bits, 15, 1, (r & 1) as u64);
        t.push(f.nib[4][r >> 1].clone());
        all(&t)
    };
    let rs2_field = |r: usize| {
        let mut t = pattern(bits, 24, 1, (r >> 4) as u64);
        t.push(f.nib[5][r & 15].clone());
        all(&t)
    };
    let mut entries = Vec::new();
    for r in 0..32 {
        entries.push((r, Delayed::now(rs1_field(r))));
        entries.push((32 + r, Delayed::now(rs2_field(r))));
    }
    for p in 64..70 {
        entries.push((p, Delayed::now(Expr::constant(1.0))));
    }
    c.write(Write {
        memory: ctx_a,
        address: row_zero(rows),
        entries,
        enable: div_entry.clone(),
    });
    // Read only in millicode (what reads it is gated by the mode): a closed read lets the
    // GPU kernel skip the head's read on every other pass.
    let in_millicode = |n: usize| Some((0..n).map(|e| (e, f.mode.clone())).collect());
    let ca = oh(&c.read(
        "ctx_a",
        ctx_a,
        row_zero(rows),
        in_millicode(64),
        entry_outputs("e", 0..64),
    ));
    let ctx_b = c.memory(
        "ctx_b",
        1,
        8,
        "millicode caller: rd one-hot (0-31), return head (32-47), rhi (48-55), rlo (56-71), slot (72-79), 3 pads",
    );
    let mut entries = Vec::new();
    let mut put = |e: usize, x: Expr| entries.push((e, Delayed::now(x)));
    for r in 0..32 {
        let mut term = pattern(bits, 7, 1, (r & 1) as u64);
        term.push(f.nib[2][r >> 1].clone());
        put(r, all(&term));
    }
    for v in 0..16 {
        put(32 + v, f.next_head[v].clone());
        put(56 + v, f.next_rlo[v].clone());
    }
    for v in 0..8 {
        put(48 + v, f.next_rhi[v].clone());
        put(72 + v, f.next_slot[v].clone());
    }
    for p in 80..83 {
        put(p, Expr::constant(1.0));
    }
    c.write(Write {
        memory: ctx_b,
        address: row_zero(rows),
        entries,
        enable: div_entry,
    });
    let cb = oh(&c.read(
        "ctx_b",
        ctx_b,
        row_zero(rows),
        in_millicode(80),
        entry_outputs("e", 0..80),
    ));

    (ca, cb)
}

/// The instruction's class: one exact 0/1 neuron per instruction (or family), on the
/// pass that fetches it; anything else fetched is illegal.
fn classes(c: &mut Circuit, f: &Front, user: &Expr) -> Classes {
    let bits = &f.bits;
    let first = f.first.clone();
    let mut b = c.block("decode");
    let mut class = |name: &str, mut terms: Vec<Expr>, gate: &[Expr]| -> Expr {
        terms.extend(gate.iter().cloned());
        let s = b.output(name, Range::BIT);
        add_and(&mut b, &terms, &[(s, 1.0)]);
        Expr::signal(s)
    };
    let at_first = [first.clone()];
    let op = |o: u64| (o, None, None);
    let op3 = |o: u64, f3: u64| (o, Some(f3), None);
    let op37 = |o: u64, f3: u64, f7: u64| (o, Some(f3), Some(f7));
    let lui = class("lui", terms(bits, op(0b0110111)), &at_first);
    let auipc = class("auipc", terms(bits, op(0b0010111)), &at_first);
    let jal = class("jal", terms(bits, op(0b1101111)), &at_first);
    let jalr = class("jalr", terms(bits, op3(0b1100111, 0)), &at_first);
    let branch = [0b000, 0b001, 0b100, 0b101, 0b110, 0b111]
        .map(|f3| class(&format!("branch{f3}"), terms(bits, op3(0b1100011, f3)), &at_first));
    let load = [0b000, 0b001, 0b010, 0b100, 0b101]
        .map(|f3| class(&format!("load{f3}"), terms(bits, op3(LOAD, f3)), &at_first));
    let store = [0b000, 0b001, 0b010].map(|f3| class(&format!("store{f3}"), terms(bits, op3(STORE, f3)), &at_first));
    let sbsh_commit = class("sb.commit", terms(bits, op3(STORE, 0)), std::slice::from_ref(&f.commit))
        + class("sh.commit", terms(bits, op3(STORE, 1)), std::slice::from_ref(&f.commit));
    let imm_op = |f3| terms(bits, op3(0b0010011, f3));
    let addi = class("addi", imm_op(0b000), &at_first);
    let slti = class("slti", imm_op(0b010), &at_first);
    let sltiu = class("sltiu", imm_op(0b011), &at_first);
    let xori = class("xori", imm_op(0b100), &at_first);
    let ori = class("ori", imm_op(0b110), &at_first);
    let andi = class("andi", imm_op(0b111), &at_first);
    let slli = class("slli", terms(bits, op37(0b0010011, 0b001, 0)), &at_first);
    let srli = class("srli", terms(bits, op37(0b0010011, 0b101, 0)), &at_first);
    let srai = class("srai", terms(bits, op37(0b0010011, 0b101, 0b0100000)), &at_first);
    let r = |f3, f7| terms(bits, op37(0b0110011, f3, f7));
    let add = class("add", r(0b000, 0), &at_first);
    let sub = class("sub", r(0b000, 0b0100000), &at_first);
    let sll = class("sll", r(0b001, 0), &at_first);
    let slt = class("slt", r(0b010, 0), &at_first);
    let sltu = class("sltu", r(0b011, 0), &at_first);
    let xor = class("xor", r(0b100, 0), &at_first);
    let srl = class("srl", r(0b101, 0), &at_first);
    let sra = class("sra", r(0b101, 0b0100000), &at_first);
    let or = class("or", r(0b110, 0), &at_first);
    let and = class("and", r(0b111, 0), &at_first);
    let mul = [0b000, 0b001, 0b010, 0b011].map(|f3| class(&format!("mul{f3}"), r(f3, 1), &at_first));
    let mdiv = class(
        "mdiv",
        terms(bits, (0b0110011, None, Some(1))),
        &[bits[14].clone(), first.clone(), user.clone()],
    );
    // The division digit (`digit`): custom-0, decoded in millicode only (user code that
    // runs one traps as illegal, as on any RV32IM machine).
    let in_millicode = [first.clone(), f.mode.clone()];
    let dquo = class("dquo", terms(bits, op3(CUSTOM_0, 0)), &in_millicode);
    let dstep = class("dstep", terms(bits, op3(CUSTOM_0, 1)), &in_millicode);
    let dacc = class("dacc", terms(bits, op3(CUSTOM_0, 2)), &in_millicode);
    let digit_shift = (0..8u64)
        .map(|shift| {
            let mut t = pattern(bits, 0, 7, CUSTOM_0);
            t.extend(pattern(bits, 13, 2, 0));
            t.extend(pattern(bits, 25, 3, shift));
            class(&format!("digit.shift{shift}"), t, &in_millicode)
        })
        .collect();
    let fence = class("fence", terms(bits, op3(0b0001111, 0)), &at_first);
    let ecall_word = pattern(bits, 0, 32, 0x0000_0073);
    let ecall_user = class("ecall", ecall_word.clone(), &[first.clone(), user.clone()]);
    let ecall_mc = class("ecall.mc", ecall_word, &[first.clone(), f.mode.clone()]);
    let ebreak = class("ebreak", pattern(bits, 0, 32, 0x0010_0073), &at_first);
    c.add_block(b);
    let legal = [
        &lui,
        &auipc,
        &jal,
        &jalr,
        &addi,
        &slti,
        &sltiu,
        &xori,
        &ori,
        &andi,
        &slli,
        &srli,
        &srai,
        &add,
        &sub,
        &sll,
        &slt,
        &sltu,
        &xor,
        &srl,
        &sra,
        &or,
        &and,
        &mdiv,
        &dquo,
        &dstep,
        &dacc,
        &fence,
        &ecall_user,
        &ecall_mc,
        &ebreak,
    ]
    .into_iter()
    .chain(branch.iter())
    .chain(load.iter())
    .chain(store.iter())
    .chain(mul.iter())
    .sum::<Expr>();
    let illegal = first.clone() - legal;

    Classes {
        lui,
        auipc,
        jal,
        jalr,
        branch,
        load,
        store,
        addi,
        slti,
        sltiu,
        xori,
        ori,
        andi,
        slli,
        srli,
        srai,
        add,
        sub,
        sll,
        slt,
        sltu,
        xor,
        srl,
        sra,
        or,
        and,
        mul,
        mdiv,
        dquo,
        dstep,
        dacc,
        digit_shift,
        fence,
        ecall_user,
        ecall_mc,
        ebreak,
        illegal,
        sbsh_commit,
    }
}

/// The load and store opcodes.
const LOAD: u64 = 0b0000011;
const STORE: u64 = 0b0100011;
/// The custom-0 opcode (the division digit's instructions).
const CUSTOM_0: u64 = 0b0001011;

/// The immediate's bits, per opcode family (which instruction bit lands in immediate bit
/// i), one-hot; zero when nothing is fetched. Then the same bits of loads and stores
/// only (see `Decoded::mem_imm`).
fn immediates(c: &mut Circuit, f: &Front) -> (Vec<Expr>, Vec<Expr>) {
    let bits = &f.bits;
    const SIGN: usize = 31;
    let src_i = |i: usize| Some(if i <= 10 { 20 + i } else { SIGN });
    let src_s = |i: usize| {
        Some(match i {
            0..=4 => 7 + i,
            5..=10 => 20 + i,
            _ => SIGN,
        })
    };
    let src_b = |i: usize| match i {
        0 => None,
        1..=4 => Some(7 + i),
        5..=10 => Some(20 + i),
        11 => Some(7),
        _ => Some(SIGN),
    };
    let src_u = |i: usize| (i >= 12).then_some(i);
    let src_j = |i: usize| match i {
        0 => None,
        1..=10 => Some(20 + i),
        11 => Some(20),
        12..=19 => Some(i),
        _ => Some(SIGN),
    };
    type Source = Box<dyn Fn(usize) -> Option<usize>>;
    let families: Vec<(u64, Source)> = vec![
        (0b1100111, Box::new(src_i)),
        (LOAD, Box::new(src_i)),
        (0b0010011, Box::new(src_i)),
        (STORE, Box::new(src_s)),
        (0b1100011, Box::new(src_b)),
        (0b0110111, Box::new(src_u)),
        (0b0010111, Box::new(src_u)),
        (0b1101111, Box::new(src_j)),
    ];
    let mut b = c.block("imm");
    let imm_s: Vec<_> = (0..32).map(|i| b.output(format!("b{i}"), Range::BIT)).collect();
    let mem_s: Vec<_> = (0..32).map(|i| b.output(format!("m{i}"), Range::BIT)).collect();
    for (opcode, src) in &families {
        let memory = matches!(*opcode, LOAD | STORE);
        for (i, out) in imm_s.iter().enumerate() {
            if let Some(bit) = src(i) {
                let cond = all_of(pattern(bits, 0, 7, *opcode), &[bits[bit].clone(), f.fetch.clone()]);
                let outs = if memory {
                    vec![(*out, 1.0), (mem_s[i], 1.0)]
                } else {
                    vec![(*out, 1.0)]
                };
                add_gated(&mut b, &cond, (-8.0, 1.0), &Expr::constant(1.0), &outs);
            }
        }
    }
    c.add_block(b);
    (oh(&imm_s), oh(&mem_s))
}

/// Register numbers: each field becomes a one-hot over the register file's 64 rows (user
/// bank 0..31, shadow bank 32..63), which is the register file's address. In
/// millicode x29, x30 and x31 stand for the caller's rs1, rs2 and rd (`ca`, `cb`).
/// Returns rs1, rs2, rd and whether nothing is to be written (rd is x0).
fn register_numbers(
    c: &mut Circuit,
    f: &Front,
    user: &Expr,
    ca: &[Expr],
    cb: &[Expr],
) -> (RegRows, RegRows, RegRows, Expr) {
    let bits = &f.bits;
    let mut b = c.block("regs");
    let mut neuron = |name: String, cond: Expr| -> Expr {
        let s = b.output(name, Range::BIT);
        let (lo, _) = c_range(&cond);
        add_gated(&mut b, &cond, (lo, 1.0), &Expr::constant(1.0), &[(s, 1.0)]);
        Expr::signal(s)
    };
    // `is(r)`: the terms saying the field names register r. `windows`: registers that, in
    // millicode, stand for the caller's register given by a ctx one-hot. x0's field is
    // all zero bits, which is also what a pass without a fetch decodes: its user row
    // takes the fetch too, or its neuron would fire on every pass (reading x0 or no row
    // reads the same zeros).
    let user_fetched = [user.clone(), f.fetch.clone()];
    let mut register = |name: &str, is: &dyn Fn(usize) -> Vec<Expr>, windows: &[(usize, &[Expr])]| -> RegRows {
        let mut rows: Vec<Expr> = vec![Expr::zero(); 64];
        for r in 0..32 {
            let context = if r == 0 {
                &user_fetched[..]
            } else {
                std::slice::from_ref(user)
            };
            rows[r] = rows[r].clone() + neuron(format!("{name}.u{r}"), all_of(is(r), context));
            if windows.iter().all(|(w, _)| *w != r) {
                rows[32 + r] = neuron(format!("{name}.s{r}"), all_of(is(r), std::slice::from_ref(&f.mode)));
            }
            for (w, ctx) in windows {
                let routed = all_of(is(*w), &[f.mode.clone(), ctx[r].clone()]);
                rows[r] = rows[r].clone() + neuron(format!("{name}.w{w}.{r}"), routed);
            }
        }
        RegRows { rows }
    };
    let rs1_is = |r: usize| {
        let mut t = pattern(bits, 15, 1, (r & 1) as u64);
        t.push(f.nib[4][r >> 1].clone());
        t
    };
    let rs2_is = |r: usize| {
        let mut t = pattern(bits, 24, 1, (r >> 4) as u64);
        t.push(f.nib[5][r & 15].clone());
        t
    };
    let rd_is = |r: usize| {
        let mut t = pattern(bits, 7, 1, (r & 1) as u64);
        t.push(f.nib[2][r >> 1].clone());
        t
    };
    let sources: [(usize, &[Expr]); 2] = [(29, &ca[0..32]), (30, &ca[32..64])];
    let rs1 = register("rs1", &rs1_is, &sources);
    let rs2 = register("rs2", &rs2_is, &sources);
    let rd = register("rd", &rd_is, &[(31, &cb[0..32])]);
    // Nothing is written for x0: the field is 0 (user or shadow x0) or names the caller's x0
    // (with the fetch, as x0's rows above).
    let field_zero = neuron("rd.zero".into(), all_of(rd_is(0), std::slice::from_ref(&f.fetch)));
    let ctx_zero = neuron(
        "rd.ctx.zero".into(),
        all_of(rd_is(31), &[f.mode.clone(), cb[0].clone()]),
    );
    c.add_block(b);
    (rs1, rs2, rd, field_zero + ctx_zero)
}

/// The lower bound of an expression whose signals are all 0/1.
fn c_range(e: &Expr) -> (f64, f64) {
    e.range(|_| Range::BIT)
}
