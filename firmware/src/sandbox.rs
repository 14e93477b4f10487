//! Running the compiler on untrusted code (what a model writes) with nothing of the host
//! reachable: Landlock lets the process tree read and execute only the toolchain and the
//! system's shared libraries, and read and write only the build's own folder, so
//! `#include "/etc/passwd"`, `.incbin` of a secret, `#embed`, a symlink to a file outside,
//! `/dev/zero` or a FIFO all fail with an ordinary compile error. `setrlimit` bounds
//! memory, CPU time and file size, and a wall-clock limit ends a compile that waits.
//! Without Landlock in the kernel the compile is refused: it never runs unconfined.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use landlock::{
    path_beneath_rules, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr, ABI,
};
use thiserror::Error;

/// What a confined compile may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Address space of each process (RLIMIT_AS).
    pub memory_bytes: u64,
    /// CPU seconds of each process (RLIMIT_CPU).
    pub cpu_seconds: u64,
    /// Largest file a process may write (RLIMIT_FSIZE).
    pub file_bytes: u64,
    /// Wall-clock time of the whole compile.
    pub wall: Duration,
}

/// Limits for code a model writes: far above what a region's compile needs (tens of
/// milliseconds, tens of MB), far below what would hurt the host.
pub const REGION_LIMITS: Limits = Limits {
    memory_bytes: 2 << 30,
    cpu_seconds: 10,
    file_bytes: 64 << 20,
    wall: Duration::from_secs(10),
};

/// The Landlock ABI whose file-system rights a compile is confined by (best effort
/// above it: a newer kernel confines at least as much).
const LANDLOCK_ABI: ABI = ABI::V5;

/// How often a running compile is checked against its wall-clock limit.
const POLL: Duration = Duration::from_millis(5);

#[derive(Debug, Error)]
pub enum SandboxError {
    #[error("cannot confine the compile: {0} (in-band code is never compiled unconfined; Linux 5.13+ with Landlock enabled is needed)")]
    Unavailable(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("the compile took longer than {0:?} and was stopped")]
    TimedOut(Duration),
}

/// A finished confined command: its status and what it printed.
pub struct Confined {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs `command` confined: it may read and execute `readable` (files or folders), read
/// and write `work` (its only writable place, also its TMPDIR and where its output is
/// collected), within `limits`.
pub fn run_confined(
    mut command: Command,
    readable: &[PathBuf],
    work: &Path,
    limits: Limits,
) -> Result<Confined, SandboxError> {
    let ruleset = ruleset(readable, work)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SandboxError::Io { path, source }
    };
    let (out_path, err_path) = (work.join(".stdout"), work.join(".stderr"));
    command
        .env("TMPDIR", work)
        .stdin(std::process::Stdio::null())
        .stdout(File::create(&out_path).map_err(io(&out_path))?)
        .stderr(File::create(&err_path).map_err(io(&err_path))?);
    let fd = ruleset.as_raw_fd();
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
    // system calls (setrlimit, prctl, landlock_restrict_self); it allocates nothing.
    unsafe {
        command.pre_exec(move || confine_self(fd, limits));
    }
    let mut child = command.spawn().map_err(io(work))?;
    drop(ruleset);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(io(work))? {
            break status;
        }
        if start.elapsed() > limits.wall {
            let _ = child.kill();
            let _ = child.wait();
            return Err(SandboxError::TimedOut(limits.wall));
        }
        std::thread::sleep(POLL);
    };
    let read = |p: &Path| std::fs::read(p).map_err(io(p));
    Ok(Confined {
        status,
        stdout: read(&out_path)?,
        stderr: read(&err_path)?,
    })
}

/// A Landlock ruleset (as its file descriptor) allowing `readable` read and execute and
/// `work` everything; refused when the kernel cannot enforce it.
fn ruleset(readable: &[PathBuf], work: &Path) -> Result<std::os::fd::OwnedFd, SandboxError> {
    let unavailable = |e: &dyn std::fmt::Display| SandboxError::Unavailable(e.to_string());
    let all = AccessFs::from_all(LANDLOCK_ABI);
    let read = AccessFs::from_read(LANDLOCK_ABI);
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(|e| unavailable(&e))?
        .create()
        .map_err(|e| unavailable(&e))?
        .set_compatibility(CompatLevel::BestEffort)
        .add_rules(path_beneath_rules(readable.iter().filter(|p| p.exists()), read))
        .map_err(|e| unavailable(&e))?
        .add_rules(path_beneath_rules([work], all))
        .map_err(|e| unavailable(&e))?;
    let fd: Option<std::os::fd::OwnedFd> = created.into();
    fd.ok_or_else(|| SandboxError::Unavailable("this kernel has no Landlock".into()))
}

/// In the child: resource limits, no new privileges, then the Landlock domain.
fn confine_self(ruleset: i32, limits: Limits) -> std::io::Result<()> {
    let set = |resource, value: u64| {
        let limit = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: setrlimit with a valid struct.
        if unsafe { libc::setrlimit(resource, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    set(libc::RLIMIT_AS, limits.memory_bytes)?;
    set(libc::RLIMIT_CPU, limits.cpu_seconds)?;
    set(libc::RLIMIT_FSIZE, limits.file_bytes)?;
    set(libc::RLIMIT_CORE, 0)?;
    // SAFETY: plain system calls on integers; the ruleset descriptor is open.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
