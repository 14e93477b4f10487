//! Process exit statuses of `inband run`, besides the program's own exit code.

/// The program could not be built or loaded (compile error, malformed ELF, ...).
pub const BUILD_OR_LOAD_FAILED: u8 = 65;
/// The program trapped (illegal instruction, bad access, ecall, ebreak).
pub const TRAPPED: u8 = 66;
/// The instruction budget ran out before the program exited.
pub const BUDGET_EXHAUSTED: u8 = 67;
/// The chip and the golden reference disagreed (`--verify`).
pub const VERIFY_MISMATCH: u8 = 68;
/// Interrupted (Ctrl-C, SIGTERM, SIGHUP) with `--save-state`: the machine was saved
/// first. 128 + SIGINT, as a shell reports an interrupted command.
pub const INTERRUPTED: u8 = 130;

/// The process exit status for a program's 32-bit exit code (as a shell sees it).
pub fn from_program_exit(code: i32) -> u8 {
    code as u8
}
