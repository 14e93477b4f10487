//! Chip packs: written atomically, verified by hash, refused for another base.

use inband_chip::pack;
use inband_qwen35::presets::Shape;
use inband_weightgen::{compile, target_of, toy};

fn tiny_pack(dir: &std::path::Path) -> Result<pack::Manifest, pack::PackError> {
    let base = Shape::Tiny.config();
    let chip = compile(&toy::circuit(target_of(&base)), &base).unwrap();
    inband_weightgen::pack::write_pack(&chip, None, dir, &|_| {})
}

/// Every file under `dir` with its bytes, for comparing a folder before and after.
fn snapshot(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(snapshot(&p));
        } else {
            out.push((p.clone(), std::fs::read(&p).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn pack_round_trips_and_detects_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("acc8");
    let written = tiny_pack(&dir).unwrap();
    assert_eq!(written.figures.non_bf16_weights, 0);
    assert_eq!(written.dtype, "BF16");
    let read = pack::open_pack(&dir).unwrap();
    assert_eq!(read, written);
    read.check_base(&Shape::Tiny.config()).unwrap();
    let err = read.check_base(&Shape::Qwen0_8b.config()).unwrap_err();
    assert!(err.to_string().contains("rebuild it with `weightgen --base"), "{err}");
    // Readable: the differing fields by name, no debug dump of a struct.
    assert!(err.to_string().contains("hidden_size 256 vs 1024"), "{err}");
    assert!(!err.to_string().contains("BaseFit"), "{err}");

    // Writing again refuses: the pack is left as it was, nothing half-written beside it.
    let before = snapshot(&dir);
    let err = tiny_pack(&dir).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(snapshot(&dir), before);
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");

    // Flip one byte of the tensors: the hash check refuses the pack.
    let tensors = dir.join(pack::TENSORS_FILE);
    let mut bytes = std::fs::read(&tensors).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&tensors, bytes).unwrap();
    let err = pack::open_pack(&dir).unwrap_err();
    assert!(matches!(err, pack::PackError::Hash { .. }), "{err}");
}

#[test]
fn never_replaces_an_existing_folder() {
    // A folder that merely holds a file named manifest.json, beside the user's work.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("precious");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("precious.txt"), "keep me").unwrap();
    std::fs::write(dir.join("src/main.c"), "int main(void) { return 0; }").unwrap();
    std::fs::write(dir.join("manifest.json"), "{}").unwrap();
    let before = snapshot(&dir);
    let err = tiny_pack(&dir).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(snapshot(&dir), before);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weightgen"))
        .args(["--shape", "tiny", "--chip", "acc8", "--out", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    assert_eq!(snapshot(&dir), before);
    // An empty folder is refused too, and nothing is left beside it.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(tiny_pack(&empty).is_err());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 2);
}

#[test]
fn cli_writes_a_pack_with_a_report() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weightgen"))
        .args(["--shape", "tiny", "--out", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("chip layers"), "{text}");
    let report = std::fs::read_to_string(dir.join(pack::REPORT_FILE)).unwrap();
    assert!(
        report.contains("nonzero weights:")
            && report.contains("== layer 0")
            && report.contains("sparsity: weights on signal columns")
            && report.contains("steps: heads step 1 (after nothing), MLP step 2 (after layer 0's heads)")
            && report.contains("each unit a step after every unit whose writes it reads"),
        "{report}"
    );
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_weightgen"))
        .args(["--shape", "7b", "--out", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown shape"));
}
