//! Writing an output folder atomically: everything goes into a hidden staging folder
//! beside it (`.NAME.partial-PID`), renamed into place only when complete, so an
//! interrupted run never leaves something that looks complete. Nothing is left behind
//! either: the folder is removed on any error, on Ctrl-C or a termination signal (once
//! [`remove_on_interrupt`] is installed), and a staging folder left by a killed run
//! (its process gone) is removed by the next run that writes beside it.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Staging folders of this process, removed if it is interrupted.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The exit status after an interrupt (128 + SIGINT, as shells report it).
const INTERRUPTED: i32 = 130;

/// Installs the handler that removes this process's staging folders on Ctrl-C, SIGTERM
/// or SIGHUP, then exits. Call once, early in `main`.
pub fn remove_on_interrupt(program: &'static str) {
    let _ = ctrlc::set_handler(move || {
        let live = LIVE.lock().map(|l| l.clone()).unwrap_or_default();
        for dir in live {
            let _ = std::fs::remove_dir_all(dir);
        }
        eprintln!("{program}: interrupted; nothing was written");
        std::process::exit(INTERRUPTED);
    });
}

/// Why an output folder could not be written.
#[derive(Debug, thiserror::Error)]
pub enum StagingError<E> {
    #[error("{0} already exists; choose a new folder (nothing is ever replaced)")]
    Exists(PathBuf),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Fill(E),
}

/// Runs `fill` on a fresh staging folder beside `out`, then renames it to `out`.
/// `out` must not exist, before or after; on any error the staging folder is removed.
pub fn write_dir<E>(out: &Path, fill: impl FnOnce(&Path) -> Result<(), E>) -> Result<(), StagingError<E>> {
    if out.exists() || out.is_symlink() {
        return Err(StagingError::Exists(out.to_path_buf()));
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StagingError::Io { path, source }
    };
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("output");
    remove_stale(parent, name);
    let staging = parent.join(format!(".{name}.partial-{}", std::process::id()));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    std::fs::create_dir(&staging).map_err(io(&staging))?;
    register(&staging, true);
    let result = fill(&staging).map_err(StagingError::Fill).and_then(|()| {
        // The output may have appeared meanwhile: a rename would fail (or replace an
        // empty folder), so check first and say so plainly.
        if out.exists() || out.is_symlink() {
            return Err(StagingError::Exists(out.to_path_buf()));
        }
        std::fs::rename(&staging, out).map_err(io(out))
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    register(&staging, false);
    result
}

fn register(dir: &Path, live: bool) {
    if let Ok(mut l) = LIVE.lock() {
        if live {
            l.push(dir.to_path_buf());
        } else {
            l.retain(|d| d != dir);
        }
    }
}

/// Removes `.NAME.partial-PID` folders in `parent` whose process no longer runs (left by
/// a run that was killed outright).
fn remove_stale(parent: &Path, name: &str) {
    let prefix = format!(".{name}.partial-");
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_folders_or_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        write_dir::<std::io::Error>(&out, |d| std::fs::write(d.join("a"), "a")).unwrap();
        assert_eq!(std::fs::read_to_string(out.join("a")).unwrap(), "a");
        // Exists: refused, untouched.
        let err = write_dir::<std::io::Error>(&out, |d| std::fs::write(d.join("b"), "b")).unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
        assert!(!out.join("b").exists());
        // Fails: nothing left.
        let other = tmp.path().join("other");
        assert!(write_dir(&other, |_| Err(std::io::Error::other("no"))).is_err());
        // Appears while being written: refused, and the staging folder is gone.
        let late = tmp.path().join("late");
        let err = write_dir::<std::io::Error>(&late, |_| std::fs::create_dir(&late)).unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn stale_staging_of_a_dead_process_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        // No process has pid 4294967 (above the kernel's maximum); pid 1 always runs.
        let dead = tmp.path().join(".out.partial-4294967");
        let alive = tmp.path().join(".out.partial-1");
        for d in [&dead, &alive] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("big"), "x").unwrap();
        }
        remove_stale(tmp.path(), "out");
        assert!(!dead.exists());
        assert!(alive.exists());
    }
}
