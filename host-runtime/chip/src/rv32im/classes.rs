//! Passes by instruction class: how many forward passes each retired instruction took, from
//! the pass that started it to the pass that started the next. An instruction's own
//! continuation passes count as its own: its long write's `m`/`h`, a store's data and
//! line fill, the rebase after it, a jump's link, a division's whole millicode routine.
//! Read from the token stream as [`super::machine::ChipMachine`] follows it, so it costs
//! nothing when nobody asks.

use inband_golden::decode::{decode, AluOp, Instruction};

/// What a retired instruction was, grouped by the chip path it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstructionClass {
    /// Register and immediate arithmetic, logic, shifts and comparisons; LUI and AUIPC.
    Alu,
    /// MUL, MULH, MULHSU, MULHU.
    Multiply,
    Div,
    Divu,
    Rem,
    Remu,
    Load,
    Store,
    /// Conditional branches, taken or not.
    Branch,
    /// JAL and JALR.
    Jump,
    /// FENCE, ECALL, EBREAK.
    System,
}

impl InstructionClass {
    /// Every class, in the order [`super::machine::RunCounts::by_class`] counts them.
    pub const ALL: [InstructionClass; 11] = [
        InstructionClass::Alu,
        InstructionClass::Multiply,
        InstructionClass::Div,
        InstructionClass::Divu,
        InstructionClass::Rem,
        InstructionClass::Remu,
        InstructionClass::Load,
        InstructionClass::Store,
        InstructionClass::Branch,
        InstructionClass::Jump,
        InstructionClass::System,
    ];

    /// The class's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            InstructionClass::Alu => "alu",
            InstructionClass::Multiply => "mul",
            InstructionClass::Div => "div",
            InstructionClass::Divu => "divu",
            InstructionClass::Rem => "rem",
            InstructionClass::Remu => "remu",
            InstructionClass::Load => "load",
            InstructionClass::Store => "store",
            InstructionClass::Branch => "branch",
            InstructionClass::Jump => "jump",
            InstructionClass::System => "system",
        }
    }

    /// The class of instruction word `word` (a word that is not RV32IM never retires;
    /// it counts as `System`).
    pub fn of(word: u32) -> Self {
        match decode(word) {
            Some(Instruction::Lui { .. } | Instruction::Auipc { .. } | Instruction::AluImm { .. }) => {
                InstructionClass::Alu
            }
            Some(Instruction::Alu { op, .. }) => match op {
                AluOp::Mul | AluOp::Mulh | AluOp::Mulhsu | AluOp::Mulhu => InstructionClass::Multiply,
                AluOp::Div => InstructionClass::Div,
                AluOp::Divu => InstructionClass::Divu,
                AluOp::Rem => InstructionClass::Rem,
                AluOp::Remu => InstructionClass::Remu,
                _ => InstructionClass::Alu,
            },
            Some(Instruction::Load { .. }) => InstructionClass::Load,
            Some(Instruction::Store { .. }) => InstructionClass::Store,
            Some(Instruction::Branch { .. }) => InstructionClass::Branch,
            Some(Instruction::Jal { .. } | Instruction::Jalr { .. }) => InstructionClass::Jump,
            Some(Instruction::Fence | Instruction::Ecall | Instruction::Ebreak) | None => InstructionClass::System,
        }
    }
}

/// The passes the retired instructions of one class took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClassPasses {
    /// Instructions retired.
    pub count: u64,
    /// Their passes in all.
    pub passes: u64,
    /// The fewest and the most one of them took (0 while `count` is 0).
    pub min: u64,
    pub max: u64,
}

impl ClassPasses {
    /// Counts one instruction that took `passes`.
    pub fn add(&mut self, passes: u64) {
        self.min = if self.count == 0 { passes } else { self.min.min(passes) };
        self.max = self.max.max(passes);
        self.count += 1;
        self.passes += passes;
    }

    /// Passes per instruction (0 with none).
    pub fn mean(&self) -> f64 {
        self.passes as f64 / self.count.max(1) as f64
    }

    /// "1.234 (1–3, 4,321×)", or "–" with none.
    pub fn summary(&self) -> String {
        if self.count == 0 {
            return "–".to_string();
        }
        format!("{:.3} ({}–{}, {}×)", self.mean(), self.min, self.max, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_fall_in_their_classes() {
        // addi a0, a0, 1; lui a0, 1; mul; div; divu; rem; remu; lw; sw; beq; jal; jalr; ecall
        let cases = [
            (0x00150513, InstructionClass::Alu),
            (0x00001537, InstructionClass::Alu),
            (0x02b50533, InstructionClass::Multiply),
            (0x02b54533, InstructionClass::Div),
            (0x02b55533, InstructionClass::Divu),
            (0x02b56533, InstructionClass::Rem),
            (0x02b57533, InstructionClass::Remu),
            (0x00052503, InstructionClass::Load),
            (0x00a52023, InstructionClass::Store),
            (0x00b50463, InstructionClass::Branch),
            (0x008000ef, InstructionClass::Jump),
            (0x00008067, InstructionClass::Jump),
            (0x00000073, InstructionClass::System),
        ];
        for (word, class) in cases {
            assert_eq!(InstructionClass::of(word), class, "{word:#010x}");
        }
    }

    #[test]
    fn class_passes_keep_count_mean_and_range() {
        let mut c = ClassPasses::default();
        assert_eq!(c.summary(), "–");
        for p in [3, 1, 8] {
            c.add(p);
        }
        assert_eq!((c.count, c.passes, c.min, c.max), (3, 12, 1, 8));
        assert_eq!(c.summary(), "4.000 (1–8, 3×)");
    }
}
