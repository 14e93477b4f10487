//! Rung 1 of the verification ladder: every circuit primitive, compiled into stock
//! Qwen3.5 layers and evaluated with the project's layer math in fp32, is exact:
//! exhaustively over small domains and on 100,000 random 32-bit cases.

use inband_circuits::primitives::{self, onehot_bit, ShiftKind, Word};
use inband_circuits::{Circuit, Expr};
use inband_qwen35::sparse::SumOrder;
use inband_tests::function_chip::{join, nibbles, FunctionChip};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const RANDOM_CASES: usize = 100_000;

/// Field declarations for `words` 32-bit inputs (8 nibbles each) plus extra fields.
fn word_fields(prefix: &str, words: usize) -> Vec<(String, usize)> {
    (0..words)
        .flat_map(|w| (0..8).map(move |i| (format!("{prefix}{w}.{i}"), 16)))
        .collect()
}

fn as_refs(v: &[(String, usize)]) -> Vec<(&str, usize)> {
    v.iter().map(|(n, s)| (n.as_str(), *s)).collect()
}

/// The word held by input fields `first..first+8`.
fn word_in(onehots: &[Vec<Expr>], first: usize) -> Word {
    Word::from_onehot_nibbles(&onehots[first..first + 8])
}

/// The 32 bits held by input fields `first..first+8`.
fn bits_in(onehots: &[Vec<Expr>], first: usize) -> Vec<Expr> {
    (0..32).map(|i| onehot_bit(&onehots[first + i / 4], i % 4)).collect()
}

fn word_out(w: &Word) -> Vec<Expr> {
    w.nibbles.clone()
}

/// Every pair of words differing only in the top byte (signs) and every pair differing
/// only in the bottom byte (borrows).
fn byte_edges(check: &mut impl FnMut(u32, u32)) {
    for a in 0..256u32 {
        for b in 0..256u32 {
            check(a << 24, b << 24);
            check(a, b);
        }
    }
}

fn random_u32(rng: &mut StdRng) -> u32 {
    // Mix uniform words with edge-heavy ones (carry chains, sign boundaries).
    match rng.random_range(0..8) {
        0 => [
            0,
            1,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_ffff,
            0xffff_fffe,
            0x0000_ffff,
            0xffff_0000,
        ][rng.random_range(0..8)],
        1 => u32::MAX << rng.random_range(0..32),
        2 => (1u32 << rng.random_range(0..32)).wrapping_sub(rng.random_range(0..3)),
        _ => rng.random(),
    }
}

fn two_word_inputs(a: u32, b: u32) -> Vec<usize> {
    let mut v = nibbles(a);
    v.extend(nibbles(b));
    v
}

#[test]
fn add_with_carry_is_exact() {
    let mut inputs = word_fields("x", 2);
    inputs.push(("carry".into(), 2));
    let mut outputs = word_fields("sum", 1);
    outputs.push(("carry_out".into(), 2));
    let chip = FunctionChip::new("add32", &as_refs(&inputs), &as_refs(&outputs), |c: &mut Circuit, oh| {
        let cin = oh[16][1].clone();
        let s = primitives::add(c, "add", &word_in(oh, 0), &word_in(oh, 8), &cin);
        let mut out = word_out(&s.word);
        out.push(s.carries[8].clone());
        out
    });
    let mut runner = chip.runner(SumOrder::Forward);
    let mut check = |a: u32, b: u32, cin: u32| {
        let mut input = two_word_inputs(a, b);
        input.push(cin as usize);
        let out = chip.eval(&mut runner, &input);
        let wide = a as u64 + b as u64 + cin as u64;
        assert_eq!(
            (join(&out[..8]), out[8] as u64),
            (wide as u32, wide >> 32),
            "{a:#x} + {b:#x} + {cin}"
        );
    };
    // Exhaustive over the low byte with every carry chain into the rest.
    for a in 0..256u32 {
        for b in 0..256u32 {
            for (hi_a, hi_b) in [(0, 0), (0xffff_ff00, 0), (0xffff_ff00, 0xffff_ff00)] {
                check(a | hi_a, b | hi_b, (a ^ b) & 1);
            }
        }
    }
    let mut rng = StdRng::seed_from_u64(10);
    for _ in 0..RANDOM_CASES {
        let (a, b) = (random_u32(&mut rng), random_u32(&mut rng));
        check(a, b, rng.random_range(0..2));
    }
}

#[test]
fn compare_and_subtract_are_exact() {
    let inputs = word_fields("x", 2);
    let mut outputs = word_fields("diff", 1);
    outputs.extend([("eq".to_string(), 2), ("ltu".to_string(), 2), ("lt".to_string(), 2)]);
    let chip = FunctionChip::new("compare32", &as_refs(&inputs), &as_refs(&outputs), |c, oh| {
        let r = primitives::compare(c, "cmp", &word_in(oh, 0), &word_in(oh, 8), &oh[7], &oh[15]);
        let mut out = word_out(&r.difference);
        out.extend([r.equal, r.less_unsigned, r.less_signed]);
        out
    });
    let mut runner = chip.runner(SumOrder::Reverse);
    let mut check = |a: u32, b: u32| {
        let out = chip.eval(&mut runner, &two_word_inputs(a, b));
        let expected = (
            a.wrapping_sub(b),
            (a == b) as usize,
            (a < b) as usize,
            ((a as i32) < (b as i32)) as usize,
        );
        assert_eq!((join(&out[..8]), out[8], out[9], out[10]), expected, "{a:#x} vs {b:#x}");
    };
    byte_edges(&mut check);
    let mut rng = StdRng::seed_from_u64(11);
    for _ in 0..RANDOM_CASES {
        let a = random_u32(&mut rng);
        let b = if rng.random_bool(0.2) {
            a ^ (1 << rng.random_range(0..32))
        } else {
            random_u32(&mut rng)
        };
        check(a, b);
        if rng.random_bool(0.05) {
            check(a, a);
        }
    }
}

/// The carry-out comparator alone (a division's `rs1 >> 1 < rs2` in the chip), on the
/// same cases as the full comparison, with the first operand halved as the chip feeds it.
#[test]
fn less_unsigned_is_exact() {
    let inputs = word_fields("x", 2);
    let outputs = [("ltu".to_string(), 2), ("half_ltu".to_string(), 2)];
    let chip = FunctionChip::new("less32", &as_refs(&inputs), &as_refs(&outputs), |c, oh| {
        let (a, b) = (bits_in(oh, 0), bits_in(oh, 8));
        let b_inverted: Vec<Expr> = b.iter().map(primitives::not).collect();
        let mut halved = a[1..].to_vec();
        halved.push(Expr::zero());
        vec![
            primitives::less_unsigned(c, "lt", &a, &b_inverted),
            primitives::less_unsigned(c, "half", &halved, &b_inverted),
        ]
    });
    let mut runner = chip.runner(SumOrder::Reverse);
    let mut check = |a: u32, b: u32| {
        let out = chip.eval(&mut runner, &two_word_inputs(a, b));
        let expected = ((a < b) as usize, ((a >> 1) < b) as usize);
        assert_eq!((out[0], out[1]), expected, "{a:#x} vs {b:#x}");
    };
    byte_edges(&mut check);
    let mut rng = StdRng::seed_from_u64(12);
    for _ in 0..RANDOM_CASES {
        let a = random_u32(&mut rng);
        let b = match rng.random_range(0..4) {
            0 => a ^ (1 << rng.random_range(0..32)),
            // About a division's quotient-1 boundary: b near a / 2.
            1 => (a >> 1).wrapping_add(rng.random_range(0..3)).wrapping_sub(1),
            _ => random_u32(&mut rng),
        };
        check(a, b);
    }
}

#[test]
fn bitwise_and_select_are_exact() {
    let mut inputs = word_fields("x", 2);
    inputs.push(("sel".into(), 2));
    let outputs = word_fields("y", 4);
    let chip = FunctionChip::new("bitwise32", &as_refs(&inputs), &as_refs(&outputs), |c, oh| {
        let r = primitives::bitwise(c, "bits", &bits_in(oh, 0), &bits_in(oh, 8));
        let (a, b) = (word_in(oh, 0), word_in(oh, 8));
        let chosen = primitives::select(
            c,
            "sel",
            &oh[16][1],
            &a.nibbles,
            &b.nibbles,
            inband_circuits::Range::NIBBLE,
        );
        [
            Word::from_bits(&r.and),
            Word::from_bits(&r.or),
            Word::from_bits(&r.xor),
            Word { nibbles: chosen },
        ]
        .iter()
        .flat_map(word_out)
        .collect()
    });
    let mut runner = chip.runner(SumOrder::Forward);
    let mut check = |a: u32, b: u32, sel: usize| {
        let mut input = two_word_inputs(a, b);
        input.push(sel);
        let out = chip.eval(&mut runner, &input);
        let words: Vec<u32> = out.chunks(8).map(join).collect();
        assert_eq!(
            words,
            vec![a & b, a | b, a ^ b, if sel == 1 { a } else { b }],
            "{a:#x} {b:#x} {sel}"
        );
    };
    for a in 0..256u32 {
        for b in 0..256u32 {
            check(a * 0x0101_0101, b * 0x0101_0101, ((a + b) & 1) as usize);
        }
    }
    let mut rng = StdRng::seed_from_u64(12);
    for _ in 0..RANDOM_CASES {
        check(random_u32(&mut rng), random_u32(&mut rng), rng.random_range(0..2));
    }
}

#[test]
fn shifts_are_exact() {
    let mut inputs = word_fields("x", 1);
    inputs.extend([("low".to_string(), 4), ("high".to_string(), 8)]);
    let outputs = word_fields("y", 3);
    let chip = FunctionChip::new("shift32", &as_refs(&inputs), &as_refs(&outputs), |c, oh| {
        let bits = bits_in(oh, 0);
        [
            ShiftKind::LeftLogical,
            ShiftKind::RightLogical,
            ShiftKind::RightArithmetic,
        ]
        .iter()
        .flat_map(|k| {
            word_out(&Word::from_bits(&primitives::shift(
                c,
                &format!("{k:?}"),
                &bits,
                &oh[8],
                &oh[9],
                *k,
            )))
        })
        .collect()
    });
    let mut runner = chip.runner(SumOrder::Forward);
    let mut check = |x: u32, s: u32| {
        let mut input = nibbles(x);
        input.extend([(s % 4) as usize, (s / 4) as usize]);
        let out = chip.eval(&mut runner, &input);
        let words: Vec<u32> = out.chunks(8).map(join).collect();
        assert_eq!(words, vec![x << s, x >> s, ((x as i32) >> s) as u32], "{x:#x} by {s}");
    };
    for s in 0..32 {
        for x in [0, 1, 0x8000_0000, 0xffff_ffff, 0x7fff_ffff, 0x8765_4321, 0x1234_5678] {
            check(x, s);
        }
        for x in 0..256u32 {
            check(x << 24 | x, s);
        }
    }
    let mut rng = StdRng::seed_from_u64(13);
    for _ in 0..RANDOM_CASES {
        check(random_u32(&mut rng), rng.random_range(0..32));
    }
}

#[test]
fn decode_and_encode_are_exact() {
    let inputs = [("v".to_string(), 128)];
    let outputs = [
        ("onehot_sum".to_string(), 128),
        ("bits".to_string(), 128),
        ("parity".to_string(), 2),
    ];
    let chip = FunctionChip::new("decode7", &as_refs(&inputs), &as_refs(&outputs), |c, oh| {
        let bits: Vec<Expr> = (0..7).map(|i| onehot_bit(&oh[0], i)).collect();
        let decoded: Vec<Expr> = primitives::decode(c, "dec", &bits)
            .into_iter()
            .map(Expr::signal)
            .collect();
        // Re-encode the decoded one-hot; also check it is one-hot by summing the odd entries.
        let value = primitives::encode(&decoded);
        let reassembled = bits
            .iter()
            .enumerate()
            .map(|(i, b)| b.clone() * (1 << i) as f64)
            .sum::<Expr>();
        let odd = decoded.iter().skip(1).step_by(2).sum::<Expr>();
        vec![value, reassembled, odd]
    });
    let mut runner = chip.runner(SumOrder::Forward);
    for v in 0..128 {
        assert_eq!(chip.eval(&mut runner, &[v]), vec![v, v, v % 2], "{v}");
    }
}

#[test]
fn memory_ports_write_and_read_whole_rows_exactly() {
    use inband_circuits::{Address, Delayed, Range, Write};
    // 256 words over two key heads: head = address bit 7, row = address bits 0..7.
    let mut inputs = vec![
        ("write".to_string(), 2),
        ("addr_lo".to_string(), 16),
        ("addr_hi".to_string(), 16),
    ];
    inputs.extend(word_fields("data", 1));
    let outputs = word_fields("read", 1);
    let chip = FunctionChip::new("ram256", &as_refs(&inputs), &as_refs(&outputs), |c, oh| {
        let addr_bits: Vec<Expr> = (0..4)
            .map(|i| onehot_bit(&oh[1], i))
            .chain((0..4).map(|i| onehot_bit(&oh[2], i)))
            .collect();
        let rows: Vec<Delayed> = primitives::decode(c, "row", &addr_bits[..7])
            .into_iter()
            .map(Delayed::now)
            .collect();
        let heads = vec![
            Delayed::now(Expr::constant(1.0) - addr_bits[7].clone()),
            Delayed::now(addr_bits[7].clone()),
        ];
        let address = Address::Factored {
            heads,
            rows: vec![rows],
        };
        let ram = c.memory("ram", 2, 8, "a word: eight one-hot nibbles");
        let entries = (0..8).flat_map(|n| (0..16).map(move |v| (16 * n + v, n, v)));
        let entries: Vec<(usize, Delayed)> = entries
            .map(|(e, n, v)| (e, Delayed::now(oh[3 + n][v].clone())))
            .collect();
        c.write(Write {
            memory: ram,
            address: address.clone(),
            entries,
            enable: oh[0][1].clone(),
        });
        let outs = (0..8)
            .map(|n| {
                (
                    format!("n{n}"),
                    Range::NIBBLE,
                    (0..16).map(|v| (16 * n + v, v as f64)).collect(),
                )
            })
            .collect();
        c.read("load", ram, address, None, outs)
            .into_iter()
            .map(Expr::signal)
            .collect()
    });
    let mut runner = chip.runner(SumOrder::Forward);
    let mut memory = std::collections::HashMap::new();
    let mut rng = StdRng::seed_from_u64(14);
    for i in 0..RANDOM_CASES {
        let addr = rng.random_range(0..256usize);
        let write = rng.random_bool(0.4);
        let data = random_u32(&mut rng);
        let mut input = vec![write as usize, addr & 15, addr >> 4];
        input.extend(nibbles(data));
        if write {
            memory.insert(addr, data);
        }
        // The layer writes before it reads: a write is visible to its own read.
        let expected = memory.get(&addr).copied().unwrap_or(0);
        assert_eq!(
            join(&chip.eval(&mut runner, &input)),
            expected,
            "op {i}: write={write} addr={addr}"
        );
    }
}

#[test]
fn bit_adder_is_exact() {
    let mut inputs = word_fields("x", 2);
    inputs.push(("carry".into(), 2));
    let mut outputs = word_fields("sum", 1);
    outputs.push(("carry_out".into(), 2));
    outputs.push(("carry_into_bit_13".into(), 2));
    let chip = FunctionChip::new(
        "add_bits32",
        &as_refs(&inputs),
        &as_refs(&outputs),
        |c: &mut Circuit, oh| {
            let s = primitives::add_bits(c, "add", &bits_in(oh, 0), &bits_in(oh, 8), &oh[16][1]);
            let mut out = word_out(&Word::from_bits(&s.bits));
            out.push(s.carries[32].clone());
            out.push(s.carries[13].clone());
            out
        },
    );
    let mut runner = chip.runner(SumOrder::Reverse);
    let mut check = |a: u32, b: u32, cin: u32| {
        let mut input = two_word_inputs(a, b);
        input.push(cin as usize);
        let out = chip.eval(&mut runner, &input);
        let wide = a as u64 + b as u64 + cin as u64;
        let low13 = (a & 0x1fff) as u64 + (b & 0x1fff) as u64 + cin as u64;
        let expected = (wide as u32, (wide >> 32) as usize, (low13 >> 13) as usize);
        assert_eq!((join(&out[..8]), out[8], out[9]), expected, "{a:#x} + {b:#x} + {cin}");
    };
    for a in 0..256u32 {
        for b in 0..256u32 {
            check(a | (0xffff_ff00 * (a & 1)), b, (a + b) & 1);
        }
    }
    let mut rng = StdRng::seed_from_u64(15);
    for _ in 0..RANDOM_CASES {
        check(random_u32(&mut rng), random_u32(&mut rng), rng.random_range(0..2));
    }
}
