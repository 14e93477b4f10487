//! RV32IM instruction decoding, written from the RISC-V unprivileged ISA
//! specification (chapters "RV32I Base Integer Instruction Set" and "M Standard
//! Extension"). Immediates come out sign-extended, as the specification defines them.

/// Register index 0..31.
pub type Reg = u8;

/// ALU operations shared by register-register and register-immediate forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AluOp {
    Add,
    Sub,
    Sll,
    Slt,
    Sltu,
    Xor,
    Srl,
    Sra,
    Or,
    And,
    Mul,
    Mulh,
    Mulhsu,
    Mulhu,
    Div,
    Divu,
    Rem,
    Remu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BranchOp {
    Eq,
    Ne,
    Lt,
    Ge,
    Ltu,
    Geu,
}

/// Load widths and signedness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadOp {
    Byte,
    Half,
    Word,
    ByteUnsigned,
    HalfUnsigned,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    Byte,
    Half,
    Word,
}

/// One decoded RV32IM instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instruction {
    Lui {
        rd: Reg,
        imm: u32,
    },
    Auipc {
        rd: Reg,
        imm: u32,
    },
    Jal {
        rd: Reg,
        offset: i32,
    },
    Jalr {
        rd: Reg,
        rs1: Reg,
        offset: i32,
    },
    Branch {
        op: BranchOp,
        rs1: Reg,
        rs2: Reg,
        offset: i32,
    },
    Load {
        op: LoadOp,
        rd: Reg,
        rs1: Reg,
        offset: i32,
    },
    Store {
        op: StoreOp,
        rs1: Reg,
        rs2: Reg,
        offset: i32,
    },
    /// Register-immediate ALU operation (ADDI, SLTI, ..., SRAI).
    AluImm {
        op: AluOp,
        rd: Reg,
        rs1: Reg,
        imm: i32,
    },
    /// Register-register ALU operation, including the M extension.
    Alu {
        op: AluOp,
        rd: Reg,
        rs1: Reg,
        rs2: Reg,
    },
    /// FENCE: a no-op on a single hart with no caches.
    Fence,
    Ecall,
    Ebreak,
}

fn bits(word: u32, hi: u32, lo: u32) -> u32 {
    (word >> lo) & ((1u32 << (hi - lo + 1)) - 1)
}

/// Sign-extends the low `width` bits of `value`.
fn sign_extend(value: u32, width: u32) -> i32 {
    let shift = 32 - width;
    ((value << shift) as i32) >> shift
}

fn imm_i(w: u32) -> i32 {
    sign_extend(bits(w, 31, 20), 12)
}

fn imm_s(w: u32) -> i32 {
    sign_extend((bits(w, 31, 25) << 5) | bits(w, 11, 7), 12)
}

fn imm_b(w: u32) -> i32 {
    let v = (bits(w, 31, 31) << 12) | (bits(w, 7, 7) << 11) | (bits(w, 30, 25) << 5) | (bits(w, 11, 8) << 1);
    sign_extend(v, 13)
}

fn imm_j(w: u32) -> i32 {
    let v = (bits(w, 31, 31) << 20) | (bits(w, 19, 12) << 12) | (bits(w, 20, 20) << 11) | (bits(w, 30, 21) << 1);
    sign_extend(v, 21)
}

/// Decodes a 32-bit instruction word; `None` for anything that is not RV32IM.
pub fn decode(w: u32) -> Option<Instruction> {
    let rd = bits(w, 11, 7) as Reg;
    let rs1 = bits(w, 19, 15) as Reg;
    let rs2 = bits(w, 24, 20) as Reg;
    let funct3 = bits(w, 14, 12);
    let funct7 = bits(w, 31, 25);
    use Instruction::*;
    Some(match bits(w, 6, 0) {
        0b0110111 => Lui {
            rd,
            imm: w & 0xffff_f000,
        },
        0b0010111 => Auipc {
            rd,
            imm: w & 0xffff_f000,
        },
        0b1101111 => Jal { rd, offset: imm_j(w) },
        0b1100111 if funct3 == 0 => Jalr {
            rd,
            rs1,
            offset: imm_i(w),
        },
        0b1100011 => {
            let op = match funct3 {
                0b000 => BranchOp::Eq,
                0b001 => BranchOp::Ne,
                0b100 => BranchOp::Lt,
                0b101 => BranchOp::Ge,
                0b110 => BranchOp::Ltu,
                0b111 => BranchOp::Geu,
                _ => return None,
            };
            Branch {
                op,
                rs1,
                rs2,
                offset: imm_b(w),
            }
        }
        0b0000011 => {
            let op = match funct3 {
                0b000 => LoadOp::Byte,
                0b001 => LoadOp::Half,
                0b010 => LoadOp::Word,
                0b100 => LoadOp::ByteUnsigned,
                0b101 => LoadOp::HalfUnsigned,
                _ => return None,
            };
            Load {
                op,
                rd,
                rs1,
                offset: imm_i(w),
            }
        }
        0b0100011 => {
            let op = match funct3 {
                0b000 => StoreOp::Byte,
                0b001 => StoreOp::Half,
                0b010 => StoreOp::Word,
                _ => return None,
            };
            Store {
                op,
                rs1,
                rs2,
                offset: imm_s(w),
            }
        }
        0b0010011 => {
            let imm = imm_i(w);
            let op = match funct3 {
                0b000 => AluOp::Add,
                0b010 => AluOp::Slt,
                0b011 => AluOp::Sltu,
                0b100 => AluOp::Xor,
                0b110 => AluOp::Or,
                0b111 => AluOp::And,
                // Shifts by immediate: shamt in bits 24..20, funct7 selects the kind.
                0b001 if funct7 == 0 => AluOp::Sll,
                0b101 if funct7 == 0 => AluOp::Srl,
                0b101 if funct7 == 0b0100000 => AluOp::Sra,
                _ => return None,
            };
            let imm = if matches!(op, AluOp::Sll | AluOp::Srl | AluOp::Sra) {
                rs2 as i32
            } else {
                imm
            };
            AluImm { op, rd, rs1, imm }
        }
        0b0110011 => {
            let op = match (funct7, funct3) {
                (0, 0b000) => AluOp::Add,
                (0b0100000, 0b000) => AluOp::Sub,
                (0, 0b001) => AluOp::Sll,
                (0, 0b010) => AluOp::Slt,
                (0, 0b011) => AluOp::Sltu,
                (0, 0b100) => AluOp::Xor,
                (0, 0b101) => AluOp::Srl,
                (0b0100000, 0b101) => AluOp::Sra,
                (0, 0b110) => AluOp::Or,
                (0, 0b111) => AluOp::And,
                (1, 0b000) => AluOp::Mul,
                (1, 0b001) => AluOp::Mulh,
                (1, 0b010) => AluOp::Mulhsu,
                (1, 0b011) => AluOp::Mulhu,
                (1, 0b100) => AluOp::Div,
                (1, 0b101) => AluOp::Divu,
                (1, 0b110) => AluOp::Rem,
                (1, 0b111) => AluOp::Remu,
                _ => return None,
            };
            Alu { op, rd, rs1, rs2 }
        }
        // FENCE (funct3 000); FENCE.I belongs to Zifencei, which RV32IM does not include.
        0b0001111 if funct3 == 0 => Fence,
        0b1110011 if w == 0x0000_0073 => Ecall,
        0b1110011 if w == 0x0010_0073 => Ebreak,
        _ => return None,
    })
}

/// Computes an ALU operation exactly as the specification defines it, including
/// division by zero (quotient all ones, remainder the dividend) and the signed
/// overflow case INT_MIN / -1 (quotient INT_MIN, remainder 0).
pub fn alu(op: AluOp, a: u32, b: u32) -> u32 {
    let (sa, sb) = (a as i32, b as i32);
    match op {
        AluOp::Add => a.wrapping_add(b),
        AluOp::Sub => a.wrapping_sub(b),
        AluOp::Sll => a << (b & 31),
        AluOp::Slt => (sa < sb) as u32,
        AluOp::Sltu => (a < b) as u32,
        AluOp::Xor => a ^ b,
        AluOp::Srl => a >> (b & 31),
        AluOp::Sra => (sa >> (b & 31)) as u32,
        AluOp::Or => a | b,
        AluOp::And => a & b,
        AluOp::Mul => a.wrapping_mul(b),
        AluOp::Mulh => ((sa as i64 * sb as i64) >> 32) as u32,
        AluOp::Mulhsu => ((sa as i64 * b as i64) >> 32) as u32,
        AluOp::Mulhu => ((a as u64 * b as u64) >> 32) as u32,
        AluOp::Div => match (sa, sb) {
            (_, 0) => u32::MAX,
            (i32::MIN, -1) => i32::MIN as u32,
            _ => (sa / sb) as u32,
        },
        AluOp::Divu => a.checked_div(b).unwrap_or(u32::MAX),
        AluOp::Rem => match (sa, sb) {
            (_, 0) => a,
            (i32::MIN, -1) => 0,
            _ => (sa % sb) as u32,
        },
        AluOp::Remu => a.checked_rem(b).unwrap_or(a),
    }
}

/// Whether a branch is taken.
pub fn branch_taken(op: BranchOp, a: u32, b: u32) -> bool {
    match op {
        BranchOp::Eq => a == b,
        BranchOp::Ne => a != b,
        BranchOp::Lt => (a as i32) < (b as i32),
        BranchOp::Ge => (a as i32) >= (b as i32),
        BranchOp::Ltu => a < b,
        BranchOp::Geu => a >= b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_hand_assembled_words() {
        // Words from the specification's encodings, assembled by hand.
        assert_eq!(decode(0x00011197), Some(Instruction::Auipc { rd: 3, imm: 0x11000 }));
        assert_eq!(
            decode(0xa6018193),
            Some(Instruction::AluImm {
                op: AluOp::Add,
                rd: 3,
                rs1: 3,
                imm: -1440
            })
        );
        assert_eq!(decode(0x354010ef), Some(Instruction::Jal { rd: 1, offset: 0x1354 }));
        assert_eq!(decode(0x0000006f), Some(Instruction::Jal { rd: 0, offset: 0 }));
        // beq x0, x0, -4
        assert_eq!(
            decode(0xfe000ee3),
            Some(Instruction::Branch {
                op: BranchOp::Eq,
                rs1: 0,
                rs2: 0,
                offset: -4
            })
        );
        // sw ra, 12(sp)
        assert_eq!(
            decode(0x00112623),
            Some(Instruction::Store {
                op: StoreOp::Word,
                rs1: 2,
                rs2: 1,
                offset: 12
            })
        );
        // srai a0, a0, 31
        assert_eq!(
            decode(0x41f55513),
            Some(Instruction::AluImm {
                op: AluOp::Sra,
                rd: 10,
                rs1: 10,
                imm: 31
            })
        );
        // mulhu a0, a1, a2
        assert_eq!(
            decode(0x02c5b533),
            Some(Instruction::Alu {
                op: AluOp::Mulhu,
                rd: 10,
                rs1: 11,
                rs2: 12
            })
        );
        assert_eq!(decode(0x00000073), Some(Instruction::Ecall));
        assert_eq!(decode(0x00100073), Some(Instruction::Ebreak));
        assert_eq!(decode(0x0ff0000f), Some(Instruction::Fence));
    }

    #[test]
    fn refuses_non_rv32im_words() {
        assert_eq!(decode(0x0000_0000), None); // all zeros is defined illegal
        assert_eq!(decode(0xffff_ffff), None);
        assert_eq!(decode(0x0000_4501), None); // compressed c.li
        assert_eq!(decode(0x3000_2573), None); // csrr a0, mstatus
        assert_eq!(decode(0x0000_100f), None); // fence.i (Zifencei)
        assert_eq!(decode(0x4000_1013), None); // slli with funct7 0100000
        assert_eq!(decode(0x0000_3003), None); // ld (RV64)
    }

    #[test]
    fn division_edge_cases_follow_the_specification() {
        assert_eq!(alu(AluOp::Div, 7, 0), u32::MAX);
        assert_eq!(alu(AluOp::Divu, 7, 0), u32::MAX);
        assert_eq!(alu(AluOp::Rem, 7, 0), 7);
        assert_eq!(alu(AluOp::Remu, 7, 0), 7);
        assert_eq!(alu(AluOp::Div, 0x8000_0000, u32::MAX), 0x8000_0000);
        assert_eq!(alu(AluOp::Rem, 0x8000_0000, u32::MAX), 0);
        assert_eq!(alu(AluOp::Div, (-7i32) as u32, 2), (-3i32) as u32);
        assert_eq!(alu(AluOp::Rem, (-7i32) as u32, 2), (-1i32) as u32);
        assert_eq!(alu(AluOp::Mulh, (-1i32) as u32, (-1i32) as u32), 0);
        assert_eq!(alu(AluOp::Mulhsu, (-1i32) as u32, u32::MAX), u32::MAX);
        assert_eq!(alu(AluOp::Mulhu, u32::MAX, u32::MAX), 0xffff_fffe);
    }
}
