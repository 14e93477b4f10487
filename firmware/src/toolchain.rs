//! Building C (and assembly) into RV32IM ELFs with the RISC-V GCC toolchain,
//! linked against inband's crt0, small libc and libgcc.
//!
//! The runtime sources are embedded in this crate, so a build needs nothing but
//! the compiler: `scripts/setup.sh` installs it (Debian `gcc-riscv64-unknown-elf`).
//! A toolchain compiles the runtime once per flavor and optimisation level and keeps the
//! objects: a build then compiles only its own sources (an in-band region, ~25 ms).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use thiserror::Error;

use crate::memory_map;
use crate::sandbox::{self, Limits, SandboxError};

/// The compiler driver's name.
pub const GCC: &str = "riscv64-unknown-elf-gcc";
/// Environment variable naming a toolchain folder (with `bin/riscv64-unknown-elf-gcc`).
pub const TOOLCHAIN_ENV: &str = "INBAND_TOOLCHAIN";

/// Architecture flags: RV32IM, no compressed code, soft-float ABI.
const ARCH_FLAGS: &[&str] = &["-march=rv32im", "-mabi=ilp32"];
/// Freestanding: our own startup code and libc; no builtins that would call
/// memcpy/memset from inside memcpy/memset.
const FREESTANDING_FLAGS: &[&str] = &[
    "-ffreestanding",
    "-fno-builtin",
    "-fno-tree-loop-distribute-patterns",
    "-nostdlib",
    "-nostartfiles",
];
/// Page-aligned segments, so qemu-riscv32 maps the Linux-ABI build at the same addresses.
/// Unused functions and data are dropped (`--gc-sections`): the chip boots every ROM row,
/// so code size is boot time.
const LINK_FLAGS: &[&str] = &[
    "-ffunction-sections",
    "-fdata-sections",
    "-Wl,--gc-sections",
    "-Wl,-z,max-page-size=4096",
    "-Wl,--no-warn-rwx-segments",
];

/// Which C library a program is linked with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Libc {
    /// inband's libc when the program builds with it, else picolibc (with libm): a
    /// program that includes a header or calls a function inband's libc lacks gets the
    /// whole library, and the others keep the small one, whose number printing needs no
    /// division (picolibc's divides by 10 per digit: measured on the examples, up to
    /// twice the instructions, each division a millicode routine in the chip).
    #[default]
    Auto,
    /// inband's own small libc (`firmware/runtime/libc.c`): printf of integers and
    /// strings, malloc, the string functions; division-free number printing.
    Inband,
    /// picolibc (Debian `picolibc-riscv64-unknown-elf`, its rv32im/ilp32 build): the
    /// whole C library with libm, full stdio (floating-point printf), stdlib, setjmp;
    /// its stdio writes through inband's console and its `_exit` is inband's exit
    /// (`firmware/runtime/picolibc_glue.c`).
    Picolibc,
}

/// How a program is built beyond its sources: the C library, and the options a
/// multi-file or existing program needs without editing (`-I`, `-D`, `-l`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildOptions {
    pub libc: Libc,
    /// `-I` folders.
    pub include_dirs: Vec<PathBuf>,
    /// `-D` definitions (`NAME` or `NAME=VALUE`).
    pub defines: Vec<String>,
    /// `-l` libraries (picolibc needs no `-l m`: its libm is part of its libc; `-l m`
    /// links its empty stub).
    pub libraries: Vec<String>,
}

/// Which platform layer a program is linked with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// Console and exit through the memory-mapped registers: what inband runs.
    BareMetal,
    /// Console and exit through Linux system calls: the same program for qemu-riscv32.
    LinuxUser,
}

/// Why a build failed.
#[derive(Debug, Error)]
pub enum BuildError {
    #[error("the RISC-V compiler `{GCC}` was not found ({0}); run scripts/setup.sh, or point {TOOLCHAIN_ENV} at a toolchain folder")]
    ToolchainMissing(String),
    #[error("{path}: not a C or assembly source (expected .c, .S or .s)")]
    UnsupportedSource { path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0} is one of the sources: choose another output file")]
    OutputIsSource(PathBuf),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("compilation failed:\n{0}")]
    CompileFailed(String),
}

/// Embedded runtime sources: (relative path, contents).
const RUNTIME_FILES: &[(&str, &str)] = &[
    ("crt0.S", include_str!("../runtime/crt0.S")),
    ("libc.c", include_str!("../runtime/libc.c")),
    ("platform_bare.c", include_str!("../runtime/platform_bare.c")),
    ("platform_linux.c", include_str!("../runtime/platform_linux.c")),
    ("picolibc_glue.c", include_str!("../runtime/picolibc_glue.c")),
    (
        "include/inband_platform.h",
        include_str!("../runtime/include/inband_platform.h"),
    ),
    ("include/stdio.h", include_str!("../runtime/include/stdio.h")),
    ("include/stdlib.h", include_str!("../runtime/include/stdlib.h")),
    ("include/string.h", include_str!("../runtime/include/string.h")),
    ("include/ctype.h", include_str!("../runtime/include/ctype.h")),
];

/// Where the system's shared libraries (which the toolchain's programs load) and the
/// loader's cache live, and the one device a compile may open.
const SYSTEM_LIBRARIES: &[&str] = &[
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/etc/ld.so.cache",
    "/dev/null",
];

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError {
    let path = path.to_path_buf();
    move |source| BuildError::Io { path, source }
}

/// Every source must be C or assembly and exist; the output must not be one of them.
fn check_sources(sources: &[PathBuf], output: &Path) -> Result<(), BuildError> {
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    for s in sources {
        let ext = s.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !matches!(ext, "c" | "S" | "s") {
            return Err(BuildError::UnsupportedSource { path: s.clone() });
        }
        if !s.is_file() {
            return Err(BuildError::Io {
                path: s.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        if same(s, output) {
            return Err(BuildError::OutputIsSource(output.to_path_buf()));
        }
    }
    Ok(())
}

/// The runtime (crt0, libc, platform layer) compiled for one flavor and optimisation
/// level, with its headers and linker script: what every program links. Compiled once
/// per [`Toolchain`], so a build compiles only its own sources.
#[derive(Debug)]
struct CompiledRuntime {
    dir: tempfile::TempDir,
}

impl CompiledRuntime {
    /// Writes the runtime into a new folder and compiles it there (trusted sources: not
    /// confined).
    fn compile(
        gcc: &Path,
        flavor: Flavor,
        libc: Libc,
        picolibc: &[OsString],
        opt_level: &str,
    ) -> Result<Self, BuildError> {
        let dir = tempfile::tempdir().map_err(io(&std::env::temp_dir()))?;
        let runtime = dir.path();
        std::fs::create_dir_all(runtime.join("include")).map_err(io(runtime))?;
        for (name, text) in RUNTIME_FILES {
            let p = runtime.join(name);
            std::fs::write(&p, text).map_err(io(&p))?;
        }
        let script = runtime.join("link.ld");
        std::fs::write(&script, memory_map::linker_script()).map_err(io(&script))?;
        let mut command = Command::new(gcc);
        command.current_dir(runtime).args(ARCH_FLAGS).arg(opt_level);
        match libc {
            Libc::Inband | Libc::Auto => command.args(FREESTANDING_FLAGS).arg("-Iinclude"),
            // picolibc's own headers; ours only for the platform layer's quoted include.
            Libc::Picolibc => command.args(picolibc).args(["-DINBAND_PICOLIBC", "-iquote", "include"]),
        };
        let out = command
            .args(["-Wall", "-ffunction-sections", "-fdata-sections", "-c"])
            .args(Self::objects(flavor, libc).map(|o| o.replace(".o", Self::source_ending(o))))
            .output()
            .map_err(io(gcc))?;
        if !out.status.success() {
            return Err(BuildError::CompileFailed(
                String::from_utf8_lossy(&out.stderr).trim_end().to_string(),
            ));
        }
        Ok(Self { dir })
    }

    /// The runtime's objects: startup code, the C library (ours) or its glue (picolibc's),
    /// the platform layer.
    fn objects(flavor: Flavor, libc: Libc) -> [&'static str; 3] {
        let platform = match flavor {
            Flavor::BareMetal => "platform_bare.o",
            Flavor::LinuxUser => "platform_linux.o",
        };
        let library = match libc {
            Libc::Inband | Libc::Auto => "libc.o",
            Libc::Picolibc => "picolibc_glue.o",
        };
        ["crt0.o", library, platform]
    }

    /// The ending of an object's source (`crt0.S`, the rest C).
    fn source_ending(object: &str) -> &'static str {
        if object == "crt0.o" {
            ".S"
        } else {
            ".c"
        }
    }

    /// The compiler's arguments that build `sources` against this runtime into `staged`.
    fn arguments(
        &self,
        sources: &[PathBuf],
        flavor: Flavor,
        options: &BuildOptions,
        picolibc: &[OsString],
        opt_level: &str,
        staged: &Path,
    ) -> Vec<OsString> {
        let runtime = self.dir.path();
        let mut args: Vec<OsString> = Vec::new();
        args.extend(ARCH_FLAGS.iter().map(OsString::from));
        args.push(opt_level.into());
        match options.libc {
            Libc::Inband | Libc::Auto => {
                args.extend(FREESTANDING_FLAGS.iter().map(OsString::from));
                args.push(format!("-I{}", runtime.join("include").display()).into());
            }
            Libc::Picolibc => {
                args.extend(picolibc.iter().cloned());
                args.push("-nostartfiles".into());
            }
        }
        args.push("-Wall".into());
        for dir in &options.include_dirs {
            args.push(format!("-I{}", dir.display()).into());
        }
        args.extend(options.defines.iter().map(|d| OsString::from(format!("-D{d}"))));
        args.push("-T".into());
        args.push(runtime.join("link.ld").into_os_string());
        args.extend(LINK_FLAGS.iter().map(OsString::from));
        args.push("-o".into());
        args.push(staged.as_os_str().to_owned());
        for object in Self::objects(flavor, options.libc) {
            args.push(runtime.join(object).into_os_string());
        }
        args.extend(sources.iter().map(|s| s.clone().into_os_string()));
        args.extend(options.libraries.iter().map(|l| OsString::from(format!("-l{l}"))));
        args.push("-lgcc".into());
        args
    }
}

/// Compiled runtimes by (flavor, C library, optimisation level), shared by a toolchain's
/// clones.
type Runtimes = std::sync::Arc<std::sync::Mutex<HashMap<(Flavor, Libc, String), std::sync::Arc<CompiledRuntime>>>>;

/// Whether a build that failed with `message` may build with picolibc: a header inband's
/// libc lacks, or a function it lacks.
fn needs_full_library(message: &str) -> bool {
    message.contains("undefined reference to") || message.contains(": No such file or directory")
}

/// The GCC option that compiles and links against picolibc (its headers, its libc with
/// libm, libgcc; the linker script stays ours).
const PICOLIBC_SPECS: &str = "--specs=picolibc.specs";

/// A located RISC-V GCC.
#[derive(Debug, Clone)]
pub struct Toolchain {
    gcc: PathBuf,
    /// What a confined compile may read, found once (three queries of the driver).
    /// Shared by clones (a clone with other options builds each in-band region).
    readable: std::sync::Arc<std::sync::OnceLock<Vec<PathBuf>>>,
    runtimes: Runtimes,
    options: BuildOptions,
    /// A relocated toolchain's own picolibc (`DIR/lib/picolibc`, as `scripts/build-gpu.sh`
    /// lays it out), else None: the system's (`/usr/lib/picolibc`).
    picolibc_prefix: Option<PathBuf>,
}

impl Toolchain {
    fn at(gcc: PathBuf) -> Self {
        let picolibc_prefix = gcc
            .parent()
            .and_then(Path::parent)
            .filter(|dir| dir.join("lib/picolibc").is_dir())
            .map(Path::to_path_buf);
        Self {
            gcc,
            readable: Default::default(),
            runtimes: Default::default(),
            options: BuildOptions::default(),
            picolibc_prefix,
        }
    }

    /// The options that compile and link against picolibc.
    fn picolibc_flags(&self) -> Vec<OsString> {
        let mut flags = vec![OsString::from(PICOLIBC_SPECS)];
        if let Some(prefix) = &self.picolibc_prefix {
            flags.push(format!("--picolibc-prefix={}", prefix.display()).into());
        }
        flags
    }

    /// This toolchain building with `options` (the C library, `-I`, `-D`, `-l`).
    pub fn with_options(mut self, options: BuildOptions) -> Self {
        self.options = options;
        self
    }

    /// The runtime compiled for `flavor` at `opt_level` (compiled the first time).
    fn runtime(&self, flavor: Flavor, opt_level: &str) -> Result<std::sync::Arc<CompiledRuntime>, BuildError> {
        let mut runtimes = self.runtimes.lock().unwrap_or_else(|e| e.into_inner());
        let libc = self.options.libc;
        let key = (flavor, libc, opt_level.to_string());
        if let Some(r) = runtimes.get(&key) {
            return Ok(r.clone());
        }
        let compiled = std::sync::Arc::new(CompiledRuntime::compile(
            &self.gcc,
            flavor,
            libc,
            &self.picolibc_flags(),
            opt_level,
        )?);
        runtimes.insert(key, compiled.clone());
        Ok(compiled)
    }

    /// Finds the compiler: in `dir/bin` if given, else in `$INBAND_TOOLCHAIN/bin`, else on PATH.
    pub fn locate(dir: Option<&Path>) -> Result<Self, BuildError> {
        let from_dir = |d: PathBuf| -> Result<Self, BuildError> {
            let gcc = d.join("bin").join(GCC);
            if gcc.is_file() {
                Ok(Self::at(gcc))
            } else {
                Err(BuildError::ToolchainMissing(format!("looked for {}", gcc.display())))
            }
        };
        if let Some(d) = dir {
            return from_dir(d.to_path_buf());
        }
        if let Some(d) = std::env::var_os(TOOLCHAIN_ENV) {
            return from_dir(PathBuf::from(d));
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|p| p.join(GCC))
            .find(|p| p.is_file())
            .map(Self::at)
            .ok_or_else(|| BuildError::ToolchainMissing("not on PATH".into()))
    }

    /// Compiles and links `sources` into the ELF `output`, written atomically.
    /// `opt_level` is a GCC optimisation flag such as `-O2`.
    pub fn build(&self, sources: &[PathBuf], flavor: Flavor, opt_level: &str, output: &Path) -> Result<(), BuildError> {
        self.build_with(sources, flavor, opt_level, output, None)
    }

    /// As [`Self::build`], for untrusted sources: the compiler can read only itself, the
    /// system's shared libraries, the runtime and `sources`, within `limits` (see
    /// [`crate::sandbox`]).
    pub fn build_confined(
        &self,
        sources: &[PathBuf],
        flavor: Flavor,
        opt_level: &str,
        output: &Path,
        limits: Limits,
    ) -> Result<(), BuildError> {
        self.build_with(sources, flavor, opt_level, output, Some(limits))
    }

    fn build_with(
        &self,
        sources: &[PathBuf],
        flavor: Flavor,
        opt_level: &str,
        output: &Path,
        confined: Option<Limits>,
    ) -> Result<(), BuildError> {
        if self.options.libc != Libc::Auto {
            return self.build_once(sources, flavor, opt_level, output, confined);
        }
        let with = |libc: Libc| {
            let mut options = self.options.clone();
            options.libc = libc;
            self.clone().with_options(options)
        };
        match with(Libc::Inband).build_once(sources, flavor, opt_level, output, confined) {
            Err(BuildError::CompileFailed(text)) if needs_full_library(&text) => {
                with(Libc::Picolibc).build_once(sources, flavor, opt_level, output, confined)
            }
            other => other,
        }
    }

    fn build_once(
        &self,
        sources: &[PathBuf],
        flavor: Flavor,
        opt_level: &str,
        output: &Path,
        confined: Option<Limits>,
    ) -> Result<(), BuildError> {
        check_sources(sources, output)?;
        let compiled = self.runtime(flavor, opt_level)?;
        let work = tempfile::tempdir().map_err(|source| BuildError::Io {
            path: std::env::temp_dir(),
            source,
        })?;
        let runtime = work.path();
        let staged = runtime.join("program.elf");
        let args = compiled.arguments(
            sources,
            flavor,
            &self.options,
            &self.picolibc_flags(),
            opt_level,
            &staged,
        );
        let mut command = Command::new(&self.gcc);
        command.args(&args);
        let (status, stdout, stderr) = match confined {
            None => {
                let r = command.output().map_err(io(&self.gcc))?;
                (r.status, r.stdout, r.stderr)
            }
            Some(limits) => {
                let mut readable = self.readable.get_or_init(|| self.readable_paths()).clone();
                readable.extend(sources.iter().cloned());
                readable.push(compiled.dir.path().to_path_buf());
                let r = sandbox::run_confined(command, &readable, runtime, limits)?;
                (r.status, r.stdout, r.stderr)
            }
        };
        if !status.success() {
            let mut text = String::from_utf8_lossy(&stderr).into_owned();
            text.push_str(&String::from_utf8_lossy(&stdout));
            return Err(BuildError::CompileFailed(text.trim_end().to_string()));
        }
        if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        // Copy next to the destination, then rename: a reader never sees half an ELF,
        // and a failed copy leaves nothing behind.
        let partial = output.with_extension("elf.partial");
        let copied = std::fs::copy(&staged, &partial)
            .map_err(io(&partial))
            .and_then(|_| std::fs::rename(&partial, output).map_err(io(output)));
        if copied.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        copied
    }

    /// What a confined compile may read and execute: the driver, its programs (cc1, as,
    /// ld, collect2) and libgcc, the system's shared libraries and the loader's cache.
    fn readable_paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.gcc.clone()];
        for query in ["-print-prog-name=cc1", "-print-prog-name=as", "-print-libgcc-file-name"] {
            if let Ok(out) = Command::new(&self.gcc).arg(query).output() {
                let found = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
                if let Some(dir) = found.canonicalize().ok().as_deref().and_then(Path::parent) {
                    paths.push(dir.to_path_buf());
                }
            }
        }
        // A relocated toolchain's picolibc (the system's is under /usr/lib).
        if let Some(prefix) = &self.picolibc_prefix {
            paths.push(prefix.join("lib/picolibc"));
        }
        // A relocated toolchain's libraries (LD_LIBRARY_PATH) and the system's.
        if let Some(dirs) = std::env::var_os("LD_LIBRARY_PATH") {
            paths.extend(std::env::split_paths(&dirs));
        }
        paths.extend(SYSTEM_LIBRARIES.iter().map(PathBuf::from));
        paths
    }
    /// Assembles a standalone assembly file linked at `base` (no runtime, no libraries)
    /// and returns its code as little-endian words: how the chip's millicode is built.
    pub fn assemble_flat(&self, source: &Path, base: u32) -> Result<Vec<u32>, BuildError> {
        let work = tempfile::tempdir().map_err(|source| BuildError::Io {
            path: std::env::temp_dir(),
            source,
        })?;
        let out = work.path().join("flat.elf");
        let mut args: Vec<OsString> = ARCH_FLAGS.iter().map(OsString::from).collect();
        args.extend(
            [
                "-nostdlib".to_string(),
                "-Wl,--no-relax".to_string(),
                "-Wl,-e,0".to_string(),
                format!("-Wl,-Ttext={base:#x}"),
                "-o".to_string(),
            ]
            .map(OsString::from),
        );
        args.push(out.clone().into_os_string());
        args.push(source.to_path_buf().into_os_string());
        let result = Command::new(&self.gcc)
            .args(&args)
            .output()
            .map_err(|e| BuildError::Io {
                path: self.gcc.clone(),
                source: e,
            })?;
        if !result.status.success() {
            return Err(BuildError::CompileFailed(
                String::from_utf8_lossy(&result.stderr).trim_end().to_string(),
            ));
        }
        let bytes = std::fs::read(&out).map_err(|source| BuildError::Io { path: out, source })?;
        let elf =
            goblin::elf::Elf::parse(&bytes).map_err(|e| BuildError::CompileFailed(format!("unreadable ELF: {e}")))?;
        // The `.text` section itself (the loadable segment would start with the ELF headers).
        let text = elf
            .section_headers
            .iter()
            .find(|h| elf.shdr_strtab.get_at(h.sh_name) == Some(".text") && h.sh_size > 0)
            .ok_or_else(|| BuildError::CompileFailed("no code".into()))?;
        if text.sh_addr != u64::from(base) {
            return Err(BuildError::CompileFailed(format!(
                "code linked at {:#x}, not {base:#x}",
                text.sh_addr
            )));
        }
        let code = bytes
            .get(text.sh_offset as usize..(text.sh_offset + text.sh_size) as usize)
            .ok_or_else(|| BuildError::CompileFailed("truncated ELF".into()))?;
        Ok(code
            .chunks(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], *w.get(2).unwrap_or(&0), *w.get(3).unwrap_or(&0)]))
            .collect())
    }

    /// Builds one program and returns its bytes (a temporary file holds the ELF meanwhile).
    pub fn build_to_bytes(&self, sources: &[PathBuf], flavor: Flavor, opt_level: &str) -> Result<Vec<u8>, BuildError> {
        let dir = tempfile::tempdir().map_err(|source| BuildError::Io {
            path: std::env::temp_dir(),
            source,
        })?;
        let out = dir.path().join("program.elf");
        self.build(sources, flavor, opt_level, &out)?;
        std::fs::read(&out).map_err(|source| BuildError::Io { path: out, source })
    }
}
