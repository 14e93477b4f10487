//! qemu-riscv32 (user mode) as an independent oracle: runs a Linux-ABI ELF one
//! instruction per translation block and streams pc and x0..x31 *before* every
//! instruction, parsed from its `-d cpu` log read through a FIFO (no disk).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use thiserror::Error;

use crate::machine::ArchState;

/// The qemu user-mode emulator's name.
pub const QEMU: &str = "qemu-riscv32";
/// Restricts qemu's CPU to RV32IM, as inband implements it.
pub const QEMU_CPU: &str = "rv32,c=false,a=false,f=false,d=false";

#[derive(Debug, Error)]
pub enum QemuError {
    #[error("{QEMU} could not be started ({0}); run scripts/setup.sh (Debian package qemu-user)")]
    Missing(std::io::Error),
    #[error("qemu trace: {0}")]
    Io(#[from] std::io::Error),
    #[error("qemu trace line {line}: cannot parse {text:?}")]
    Parse { line: u64, text: String },
}

/// What a traced qemu run produced.
#[derive(Debug)]
pub struct QemuRun {
    /// The program's console output (its stdout).
    pub stdout: Vec<u8>,
    /// qemu's exit status code (the program's exit code, or qemu's own on a crash).
    pub exit_status: Option<i32>,
    /// Records seen (one per executed instruction).
    pub records: u64,
    /// True when `visit` asked to stop early.
    pub stopped_early: bool,
}

/// Runs `elf` under qemu and calls `visit` with the state before each instruction.
/// `visit` returns false to stop (qemu is then killed).
pub fn trace(elf: &Path, mut visit: impl FnMut(&ArchState) -> bool) -> Result<QemuRun, QemuError> {
    let dir = tempfile::tempdir()?;
    let fifo: PathBuf = dir.path().join("trace.fifo");
    let status = Command::new("mkfifo").arg(&fifo).status()?;
    if !status.success() {
        return Err(QemuError::Io(std::io::Error::other("mkfifo failed")));
    }
    let mut child = Command::new(QEMU)
        .args(["-cpu", QEMU_CPU, "-singlestep", "-d", "nochain,cpu", "-D"])
        .arg(&fifo)
        .arg(elf)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(QemuError::Missing)?;
    let mut stdout_pipe = child.stdout.take().expect("stdout is piped");
    let stdout_reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout_pipe.read_to_end(&mut out);
        out
    });

    let mut reader = BufReader::with_capacity(1 << 20, std::fs::File::open(&fifo)?);
    let mut parser = RecordParser::default();
    let mut line = String::new();
    let mut records = 0;
    let mut stopped_early = false;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        if let Some(state) = parser.feed(&line)? {
            records += 1;
            if !visit(&state) {
                stopped_early = true;
                let _ = child.kill();
                break;
            }
        }
    }
    drop(reader);
    let status = child.wait()?;
    let stdout = stdout_reader.join().unwrap_or_default();
    Ok(QemuRun {
        stdout,
        exit_status: status.code(),
        records,
        stopped_early,
    })
}

/// Turns the lines of qemu's `-d cpu` dump into [`ArchState`] records.
#[derive(Default)]
struct RecordParser {
    line_number: u64,
    pc: u32,
    regs: [u32; 32],
    /// Registers filled in since the last `pc` line.
    filled: u32,
}

impl RecordParser {
    fn parse_hex(&self, text: &str) -> Result<u32, QemuError> {
        u32::from_str_radix(text, 16).map_err(|_| QemuError::Parse {
            line: self.line_number,
            text: text.into(),
        })
    }

    fn feed(&mut self, line: &str) -> Result<Option<ArchState>, QemuError> {
        self.line_number += 1;
        let mut tokens = line.split_whitespace();
        match tokens.next() {
            Some("pc") => {
                self.pc = self.parse_hex(tokens.next().unwrap_or(""))?;
                self.filled = 0;
                Ok(None)
            }
            Some(first) if first.starts_with('x') => {
                let mut name = Some(first);
                while let Some(n) = name {
                    let index: usize = n[1..]
                        .split('/')
                        .next()
                        .and_then(|i| i.parse().ok())
                        .filter(|&i: &usize| i < 32)
                        .ok_or_else(|| QemuError::Parse {
                            line: self.line_number,
                            text: line.into(),
                        })?;
                    self.regs[index] = self.parse_hex(tokens.next().unwrap_or(""))?;
                    self.filled += 1;
                    name = tokens.next();
                }
                if self.filled == 32 {
                    self.filled = 0;
                    return Ok(Some(ArchState {
                        pc: self.pc,
                        regs: self.regs,
                    }));
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_record() {
        let text = " pc       00010004
 x0/zero  00000000 x1/ra    00000000 x2/sp    40800990 x3/gp    00021000
 x4/tp    00000000 x5/t0    00000000 x6/t1    00000000 x7/t2    00000000
 x8/s0    00000000 x9/s1    00000000 x10/a0   00000000 x11/a1   00000000
 x12/a2   00000000 x13/a3   00000000 x14/a4   00000000 x15/a5   00000000
 x16/a6   00000000 x17/a7   00000000 x18/s2   00000000 x19/s3   00000000
 x20/s4   00000000 x21/s5   00000000 x22/s6   00000000 x23/s7   00000000
 x24/s8   00000000 x25/s9   00000000 x26/s10  00000000 x27/s11  00000000
 x28/t3   00000000 x29/t4   00000000 x30/t5   00000000 x31/t6   deadbeef
";
        let mut parser = RecordParser::default();
        let records: Vec<ArchState> = text
            .lines()
            .filter_map(|l| parser.feed(&format!("{l}\n")).unwrap())
            .collect();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].pc, 0x10004);
        assert_eq!(records[0].regs[2], 0x4080_0990);
        assert_eq!(records[0].regs[3], 0x21000);
        assert_eq!(records[0].regs[31], 0xdead_beef);
    }
}
