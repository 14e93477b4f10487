//! Chip packs: written atomically, verified by hash, refused for another base.

use inband_qwen35::presets::Shape;
use inband_weightgen::{compile, pack, target_of, toy};

fn tiny_pack(dir: &std::path::Path) -> pack::Manifest {
    let base = Shape::Tiny.config();
    let chip = compile(&toy::circuit(target_of(&base)), &base).unwrap();
    pack::write_pack(&chip, dir, &|_| {}).unwrap()
}

#[test]
fn pack_round_trips_and_detects_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("acc8");
    let written = tiny_pack(&dir);
    assert_eq!(written.figures.non_bf16_weights, 0);
    assert_eq!(written.dtype, "BF16");
    let read = pack::open_pack(&dir).unwrap();
    assert_eq!(read, written);
    read.check_base(&Shape::Tiny.config()).unwrap();
    let err = read.check_base(&Shape::Qwen0_8b.config()).unwrap_err();
    assert!(err.to_string().contains("rebuild it with `weightgen --base"), "{err}");

    // Rewriting replaces the pack; nothing is left half-written beside it.
    tiny_pack(&dir);
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
fn refuses_to_replace_a_folder_that_is_not_a_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("precious");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("notes.txt"), "keep me").unwrap();
    let base = Shape::Tiny.config();
    let chip = compile(&toy::circuit(target_of(&base)), &base).unwrap();
    let err = pack::write_pack(&chip, &dir, &|_| {}).unwrap_err();
    assert!(err.to_string().contains("is not a chip pack"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("notes.txt")).unwrap(), "keep me");
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
        report.contains("nonzero weights:") && report.contains("== layer 0"),
        "{report}"
    );
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_weightgen"))
        .args(["--shape", "7b", "--out", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown shape"));
}
