//! The golden RV32IM machine: architectural state, memory map and one-instruction
//! steps. Every engine (the chip, qemu) is judged against this.

use std::fmt;

use inband_firmware::memory_map::{self, Region};
use inband_firmware::ProgramImage;

use crate::decode::{self, Instruction, LoadOp, StoreOp};

/// What `ecall` means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Environment {
    /// inband's machine: `ecall` and `ebreak` trap (console and exit are memory mapped).
    BareMetal,
    /// The Linux ABI that qemu-riscv32 emulates: `write` (64) to fd 1 or 2 goes to the
    /// console, `exit` (93) and `exit_group` (94) halt. Used to replay qemu runs.
    LinuxUser,
}

/// A synchronous exception, numbered as the privileged specification's `mcause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrapCause {
    /// A taken jump or branch to an address that is not 4-byte aligned (reported on the jump).
    InstructionAddressMisaligned {
        target: u32,
    },
    InstructionAccessFault,
    IllegalInstruction {
        word: u32,
    },
    Breakpoint,
    LoadAddressMisaligned {
        addr: u32,
    },
    LoadAccessFault {
        addr: u32,
    },
    StoreAddressMisaligned {
        addr: u32,
    },
    StoreAccessFault {
        addr: u32,
    },
    EnvironmentCall,
    /// LinuxUser only: a system call qemu would run that inband does not model.
    UnsupportedSystemCall {
        number: u32,
    },
}

impl TrapCause {
    /// The `mcause` exception code (the system-call case reuses ECALL's).
    pub fn code(&self) -> u32 {
        match self {
            TrapCause::InstructionAddressMisaligned { .. } => 0,
            TrapCause::InstructionAccessFault => 1,
            TrapCause::IllegalInstruction { .. } => 2,
            TrapCause::Breakpoint => 3,
            TrapCause::LoadAddressMisaligned { .. } => 4,
            TrapCause::LoadAccessFault { .. } => 5,
            TrapCause::StoreAddressMisaligned { .. } => 6,
            TrapCause::StoreAccessFault { .. } => 7,
            TrapCause::EnvironmentCall | TrapCause::UnsupportedSystemCall { .. } => 8,
        }
    }

    /// The cause with `mcause` exception code `code` (the inverse of [`Self::code`] on
    /// bare-metal causes): `value` is the trap value (target or address), `word` the
    /// instruction. None for a code no bare-metal trap has.
    pub fn from_code(code: u32, value: u32, word: u32) -> Option<Self> {
        Some(match code {
            0 => TrapCause::InstructionAddressMisaligned { target: value },
            1 => TrapCause::InstructionAccessFault,
            2 => TrapCause::IllegalInstruction { word },
            3 => TrapCause::Breakpoint,
            4 => TrapCause::LoadAddressMisaligned { addr: value },
            5 => TrapCause::LoadAccessFault { addr: value },
            6 => TrapCause::StoreAddressMisaligned { addr: value },
            7 => TrapCause::StoreAccessFault { addr: value },
            8 => TrapCause::EnvironmentCall,
            _ => return None,
        })
    }
}

impl fmt::Display for TrapCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrapCause::InstructionAddressMisaligned { target } => {
                write!(f, "jump to misaligned address {target:#010x}")
            }
            TrapCause::InstructionAccessFault => write!(f, "instruction fetch outside ROM"),
            TrapCause::IllegalInstruction { word } => write!(f, "illegal instruction {word:#010x}"),
            TrapCause::Breakpoint => write!(f, "breakpoint (ebreak)"),
            TrapCause::LoadAddressMisaligned { addr } => write!(f, "misaligned load from {addr:#010x}"),
            TrapCause::LoadAccessFault { addr } => write!(f, "load from unmapped or execute-only address {addr:#010x}"),
            TrapCause::StoreAddressMisaligned { addr } => write!(f, "misaligned store to {addr:#010x}"),
            TrapCause::StoreAccessFault { addr } => write!(f, "store to unmapped or read-only address {addr:#010x}"),
            TrapCause::EnvironmentCall => write!(f, "environment call (ecall)"),
            TrapCause::UnsupportedSystemCall { number } => write!(f, "unsupported system call {number}"),
        }
    }
}

/// A trap with the pc of the instruction that raised it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trap {
    pub pc: u32,
    pub cause: TrapCause,
}

impl fmt::Display for Trap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "trap: {} at pc {:#010x} (cause {})",
            self.cause,
            self.pc,
            self.cause.code()
        )
    }
}

impl std::error::Error for Trap {}

/// The result of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The instruction retired; the machine goes on.
    Retired,
    /// The instruction retired and ended the program with this exit code.
    Exited(i32),
}

/// How a bounded run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    Exited(i32),
    Trapped(Trap),
    /// The instruction budget ran out; `pc` is the next instruction.
    BudgetExhausted {
        pc: u32,
    },
}

/// pc and registers: what lockstep comparisons compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchState {
    pub pc: u32,
    pub regs: [u32; 32],
}

/// The golden machine.
#[derive(Clone)]
pub struct Machine {
    pub pc: u32,
    pub regs: [u32; 32],
    rom: Vec<u8>,
    ram: Vec<u8>,
    /// Everything the program wrote to the console.
    pub console: Vec<u8>,
    /// Instructions retired so far.
    pub instret: u64,
    pub environment: Environment,
    exit_code: Option<i32>,
}

impl Machine {
    /// A machine booted from `image`: pc at the entry point, registers zero.
    pub fn new(image: &ProgramImage, environment: Environment) -> Self {
        Self {
            pc: image.entry,
            regs: [0; 32],
            rom: image.rom.clone(),
            ram: image.ram.clone(),
            console: Vec::new(),
            instret: 0,
            environment,
            exit_code: None,
        }
    }

    pub fn arch_state(&self) -> ArchState {
        ArchState {
            pc: self.pc,
            regs: self.regs,
        }
    }

    /// The exit code once the program has exited.
    pub fn exit_code(&self) -> Option<i32> {
        self.exit_code
    }

    /// RAM contents.
    pub fn ram(&self) -> &[u8] {
        &self.ram
    }

    fn set(&mut self, rd: u8, value: u32) {
        if rd != 0 {
            self.regs[rd as usize] = value;
        }
    }

    fn fetch(&self) -> Result<u32, TrapCause> {
        match memory_map::region(self.pc) {
            Region::Rom(o) if self.pc.is_multiple_of(4) => {
                let o = o as usize;
                Ok(u32::from_le_bytes(self.rom[o..o + 4].try_into().expect("4 bytes")))
            }
            _ => Err(TrapCause::InstructionAccessFault),
        }
    }

    fn load(&self, op: LoadOp, addr: u32) -> Result<u32, TrapCause> {
        let width = match op {
            LoadOp::Byte | LoadOp::ByteUnsigned => 1,
            LoadOp::Half | LoadOp::HalfUnsigned => 2,
            LoadOp::Word => 4,
        };
        if !addr.is_multiple_of(width) {
            return Err(TrapCause::LoadAddressMisaligned { addr });
        }
        // Code is execute-only and MMIO is write-only: loads reach RAM alone.
        let Region::Ram(o) = memory_map::region(addr) else {
            return Err(TrapCause::LoadAccessFault { addr });
        };
        let o = o as usize;
        let bytes = &self.ram[o..o + width as usize];
        Ok(match op {
            LoadOp::Byte => bytes[0] as i8 as i32 as u32,
            LoadOp::ByteUnsigned => bytes[0] as u32,
            LoadOp::Half => i16::from_le_bytes([bytes[0], bytes[1]]) as i32 as u32,
            LoadOp::HalfUnsigned => u16::from_le_bytes([bytes[0], bytes[1]]) as u32,
            LoadOp::Word => u32::from_le_bytes(bytes.try_into().expect("4 bytes")),
        })
    }

    /// Performs a store; `Ok(Some(code))` when it was the exit register.
    fn store(&mut self, op: StoreOp, addr: u32, value: u32) -> Result<Option<i32>, TrapCause> {
        let width = match op {
            StoreOp::Byte => 1,
            StoreOp::Half => 2,
            StoreOp::Word => 4,
        };
        if !addr.is_multiple_of(width) {
            return Err(TrapCause::StoreAddressMisaligned { addr });
        }
        match (memory_map::region(addr), op) {
            (Region::Ram(o), _) => {
                let o = o as usize;
                self.ram[o..o + width as usize].copy_from_slice(&value.to_le_bytes()[..width as usize]);
                Ok(None)
            }
            (Region::ConsoleTx, StoreOp::Byte) => {
                self.console.push(value as u8);
                Ok(None)
            }
            (Region::Exit, StoreOp::Word) => Ok(Some(value as i32)),
            _ => Err(TrapCause::StoreAccessFault { addr }),
        }
    }

    /// LinuxUser `ecall`: returns `Some(code)` for exit.
    fn system_call(&mut self) -> Result<Option<i32>, TrapCause> {
        let number = self.regs[17];
        match number {
            64 => {
                let (fd, buf, len) = (self.regs[10], self.regs[11], self.regs[12]);
                if !(fd == 1 || fd == 2) || !memory_map::is_backed(buf, len) {
                    return Err(TrapCause::UnsupportedSystemCall { number });
                }
                for i in 0..len {
                    let byte = self.load(LoadOp::ByteUnsigned, buf.wrapping_add(i))?;
                    self.console.push(byte as u8);
                }
                self.set(10, len);
                Ok(None)
            }
            93 | 94 => Ok(Some(self.regs[10] as i32)),
            _ => Err(TrapCause::UnsupportedSystemCall { number }),
        }
    }

    /// Executes one instruction. A trap leaves the state as it was before the instruction.
    pub fn step(&mut self) -> Result<Step, Trap> {
        let pc = self.pc;
        let trap = |cause| Trap { pc, cause };
        let word = self.fetch().map_err(trap)?;
        let instruction = decode::decode(word).ok_or(trap(TrapCause::IllegalInstruction { word }))?;
        let regs = self.regs;
        let r = |i: u8| regs[i as usize];
        let mut next_pc = pc.wrapping_add(4);
        let mut exited = None;
        match instruction {
            Instruction::Lui { rd, imm } => self.set(rd, imm),
            Instruction::Auipc { rd, imm } => self.set(rd, pc.wrapping_add(imm)),
            Instruction::Jal { rd, offset } => {
                next_pc = aligned_target(pc.wrapping_add(offset as u32)).map_err(trap)?;
                self.set(rd, pc.wrapping_add(4));
            }
            Instruction::Jalr { rd, rs1, offset } => {
                next_pc = aligned_target(r(rs1).wrapping_add(offset as u32) & !1).map_err(trap)?;
                self.set(rd, pc.wrapping_add(4));
            }
            Instruction::Branch { op, rs1, rs2, offset } => {
                if decode::branch_taken(op, r(rs1), r(rs2)) {
                    next_pc = aligned_target(pc.wrapping_add(offset as u32)).map_err(trap)?;
                }
            }
            Instruction::Load { op, rd, rs1, offset } => {
                let value = self.load(op, r(rs1).wrapping_add(offset as u32)).map_err(trap)?;
                self.set(rd, value);
            }
            Instruction::Store { op, rs1, rs2, offset } => {
                exited = self
                    .store(op, r(rs1).wrapping_add(offset as u32), r(rs2))
                    .map_err(trap)?;
            }
            Instruction::AluImm { op, rd, rs1, imm } => self.set(rd, decode::alu(op, r(rs1), imm as u32)),
            Instruction::Alu { op, rd, rs1, rs2 } => self.set(rd, decode::alu(op, r(rs1), r(rs2))),
            Instruction::Fence => {}
            Instruction::Ecall => match self.environment {
                Environment::BareMetal => return Err(trap(TrapCause::EnvironmentCall)),
                Environment::LinuxUser => exited = self.system_call().map_err(trap)?,
            },
            Instruction::Ebreak => return Err(trap(TrapCause::Breakpoint)),
        }
        self.pc = next_pc;
        self.instret += 1;
        match exited {
            Some(code) => {
                self.exit_code = Some(code);
                Ok(Step::Exited(code))
            }
            None => Ok(Step::Retired),
        }
    }

    /// Runs until exit, trap, or `budget` more instructions have retired.
    pub fn run(&mut self, budget: u64) -> RunEnd {
        let limit = self.instret.saturating_add(budget);
        while self.instret < limit {
            match self.step() {
                Ok(Step::Retired) => {}
                Ok(Step::Exited(code)) => return RunEnd::Exited(code),
                Err(trap) => return RunEnd::Trapped(trap),
            }
        }
        RunEnd::BudgetExhausted { pc: self.pc }
    }
}

/// A jump or taken branch must land on a 4-byte boundary (there is no C extension);
/// the trap is reported on the jump itself.
fn aligned_target(target: u32) -> Result<u32, TrapCause> {
    if target.is_multiple_of(4) {
        Ok(target)
    } else {
        Err(TrapCause::InstructionAddressMisaligned { target })
    }
}
