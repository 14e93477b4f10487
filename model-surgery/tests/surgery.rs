//! weight-surgery end to end: synth, splice, verify, strip, byte-exact round trips, and
//! clear refusals that leave nothing behind.

use std::path::{Path, PathBuf};
use std::process::Command;

use inband_chip::tensor_files::TensorFiles;
use inband_model_surgery::{splice, strip, synth, verify};
use inband_qwen35::presets::Shape;
use inband_weightgen::{compile, pack, target_of, toy};
use sha2::{Digest, Sha256};

const SURGERY: &str = env!("CARGO_BIN_EXE_weight-surgery");

fn make_pack(shape: Shape, dir: &Path) {
    let base = shape.config();
    let chip = compile(&toy::circuit(target_of(&base)), &base).unwrap();
    pack::write_pack(&chip, None, dir, &|_| {}).unwrap();
}

fn make_base(shape: Shape, dir: &Path, text_only: bool) {
    synth::synth(
        &synth::SynthOptions {
            shape,
            seed: 7,
            text_only,
        },
        dir,
        &mut |_, _| {},
    )
    .unwrap();
}

/// Every tensor of `a` equals the tensor of the same name in `b`: dtype, shape, bytes.
fn assert_same_tensors(a: &Path, b: &Path) {
    let (ta, tb) = (TensorFiles::open(a).unwrap(), TensorFiles::open(b).unwrap());
    let names_a: Vec<&String> = ta.tensors.keys().collect();
    let names_b: Vec<&String> = tb.tensors.keys().collect();
    assert_eq!(names_a, names_b);
    for (name, ea) in &ta.tensors {
        let eb = &tb.tensors[name];
        assert_eq!((ea.dtype, &ea.shape), (eb.dtype, &eb.shape), "{name}");
        assert!(
            ta.bytes(name).unwrap() == tb.bytes(name).unwrap(),
            "{name}: bytes differ"
        );
    }
}

fn round_trip(shape: Shape, text_only: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let (base, pack_dir, spliced, stripped) = (
        tmp.path().join("base"),
        tmp.path().join("pack"),
        tmp.path().join("spliced"),
        tmp.path().join("stripped"),
    );
    make_base(shape, &base, text_only);
    make_pack(shape, &pack_dir);
    splice::splice(&base, &pack_dir, &spliced, &mut |_, _| {}).unwrap();
    let checks = verify::verify(&spliced, Some(&base), &mut |_, _| {}).unwrap();
    assert!(checks.iter().any(|l| l.contains("recovered bit for bit")), "{checks:?}");
    strip::strip(&spliced, &stripped, &mut |_, _| {}).unwrap();
    assert_same_tensors(&base, &stripped);
    for file in [
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        assert_eq!(
            std::fs::read(base.join(file)).unwrap(),
            std::fs::read(stripped.join(file)).unwrap(),
            "{file}"
        );
    }
    // The spliced tokenizer loads and knows every chip token.
    let t = tokenizers::Tokenizer::from_file(spliced.join("tokenizer.json")).unwrap();
    let id = t.token_to_id("<|inband:step:0.0.0|>").unwrap() as usize;
    assert_eq!(id, shape.config().vocab_size);
}

/// A chip whose tensors match the hashes recorded at splice time but not what this
/// weightgen compiles (as a checkpoint spliced by another version would be): verify
/// refuses it with one line naming the tensor.
#[test]
fn verify_refuses_a_chip_this_weightgen_does_not_compile() {
    let tmp = tempfile::tempdir().unwrap();
    let (base, pack_dir, spliced) = (
        tmp.path().join("base"),
        tmp.path().join("pack"),
        tmp.path().join("spliced"),
    );
    make_base(Shape::Tiny, &base, true);
    make_pack(Shape::Tiny, &pack_dir);
    splice::splice(&base, &pack_dir, &spliced, &mut |_, _| {}).unwrap();
    let checks = verify::verify(&spliced, None, &mut |_, _| {}).unwrap();
    assert!(
        checks.iter().any(|l| l.contains("this weightgen compiles")),
        "{checks:?}"
    );

    let files = TensorFiles::open(&spliced).unwrap();
    let name = files
        .tensors
        .keys()
        .find(|n| n.ends_with("layers.1.linear_attn.A_log"))
        .unwrap()
        .clone();
    let entry = files.tensors[&name].clone();
    let path = files.files[entry.file].0.clone();
    drop(files);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[entry.start as usize] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let digest = format!("{:x}", Sha256::digest(&bytes[entry.start as usize..entry.end as usize]));
    let config_path = spliced.join("config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    config["inband"]["chip_tensors"][&name] = serde_json::Value::String(digest);
    std::fs::write(&config_path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();

    let err = verify::verify(&spliced, None, &mut |_, _| {}).unwrap_err().to_string();
    assert!(
        err.contains("chip layer 1's linear_attn.A_log differs from the acc8 chip this weightgen compiles"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// An existing --out is refused before anything is read: a missing pack is not even
/// looked at (a 9b pack would otherwise be read whole first).
#[test]
fn splice_refuses_an_existing_output_before_reading() {
    let tmp = tempfile::tempdir().unwrap();
    let (base, out) = (tmp.path().join("base"), tmp.path().join("out"));
    make_base(Shape::Tiny, &base, true);
    std::fs::create_dir(&out).unwrap();
    let err = splice::splice(&base, &tmp.path().join("missing-pack"), &out, &mut |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
}

#[test]
fn tiny_round_trip_is_exact() {
    round_trip(Shape::Tiny, false);
}

#[test]
fn text_only_round_trip_is_exact() {
    round_trip(Shape::Tiny, true);
}

#[test]
#[ignore = "writes and reads several GiB; run with --ignored (figures in BENCHMARKS.md)"]
fn round_trip_0_8b_is_exact() {
    round_trip(Shape::Qwen0_8b, false);
}

#[test]
#[ignore = "writes and reads several GiB; run with --ignored"]
fn round_trip_2b_is_exact() {
    round_trip(Shape::Qwen2b, false);
}

#[test]
#[ignore = "writes and reads ~20 GiB; run with --ignored"]
fn round_trip_4b_is_exact() {
    round_trip(Shape::Qwen4b, false);
}

#[test]
#[ignore = "writes and reads ~50 GiB; run with --ignored"]
fn round_trip_9b_is_exact() {
    round_trip(Shape::Qwen9b, false);
}

/// Runs weight-surgery, expecting failure with `needle` in its one-line message and
/// nothing written at `out`.
fn expect_refusal(args: &[&str], out: &Path, needle: &str) {
    let result = Command::new(SURGERY).args(args).output().unwrap();
    assert!(!result.status.success(), "{args:?} should fail");
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr:?} lacks {needle:?}");
    assert!(!out.exists(), "{} was written", out.display());
    let parent = out.parent().unwrap();
    let leftovers: Vec<PathBuf> = std::fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains("partial"))
        .collect();
    assert!(leftovers.is_empty(), "staging left behind: {leftovers:?}");
}

#[test]
fn refusals_leave_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    make_base(Shape::Tiny, &base, false);
    let pack_dir = tmp.path().join("pack");
    make_pack(Shape::Tiny, &pack_dir);
    let out = tmp.path().join("out");
    let s = |p: &Path| p.to_str().unwrap().to_string();

    // A truncated shard.
    let cut = tmp.path().join("cut");
    std::fs::create_dir(&cut).unwrap();
    for entry in std::fs::read_dir(&base).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, cut.join(p.file_name().unwrap())).unwrap();
    }
    let mut shards: Vec<_> = std::fs::read_dir(&cut)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".safetensors") && p.to_string_lossy().contains("-of-"))
        .collect();
    shards.sort();
    let shard = shards[shards.len() / 2].clone();
    let bytes = std::fs::read(&shard).unwrap();
    std::fs::write(&shard, &bytes[..bytes.len() - 1000]).unwrap();
    expect_refusal(
        &["splice", "--base", &s(&cut), "--chip", &s(&pack_dir), "--out", &s(&out)],
        &out,
        "truncated",
    );

    // A model that is not Qwen3.5.
    let llama = tmp.path().join("llama");
    std::fs::create_dir(&llama).unwrap();
    for entry in std::fs::read_dir(&base).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, llama.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::write(
        llama.join("config.json"),
        r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}"#,
    )
    .unwrap();
    expect_refusal(
        &[
            "splice",
            "--base",
            &s(&llama),
            "--chip",
            &s(&pack_dir),
            "--out",
            &s(&out),
        ],
        &out,
        "is not Qwen3.5",
    );

    // A pack built for another base config.
    let other_pack = tmp.path().join("pack-0.8b");
    make_pack(Shape::Qwen0_8b, &other_pack);
    expect_refusal(
        &[
            "splice",
            "--base",
            &s(&base),
            "--chip",
            &s(&other_pack),
            "--out",
            &s(&out),
        ],
        &out,
        "rebuild it with `weightgen --base",
    );

    // An existing output folder is never overwritten.
    std::fs::create_dir(&out).unwrap();
    let result = Command::new(SURGERY)
        .args([
            "splice",
            "--base",
            &s(&base),
            "--chip",
            &s(&pack_dir),
            "--out",
            &s(&out),
        ])
        .output()
        .unwrap();
    assert!(!result.status.success());
    assert!(String::from_utf8_lossy(&result.stderr).contains("never overwrites"));
    std::fs::remove_dir(&out).unwrap();

    // Splicing twice is refused.
    let spliced = tmp.path().join("spliced");
    splice::splice(&base, &pack_dir, &spliced, &mut |_, _| {}).unwrap();
    expect_refusal(
        &[
            "splice",
            "--base",
            &s(&spliced),
            "--chip",
            &s(&pack_dir),
            "--out",
            &s(&out),
        ],
        &out,
        "already contains a chip",
    );

    // Stripping a plain checkpoint is refused.
    expect_refusal(&["strip", &s(&base), "--out", &s(&out)], &out, "holds no chip");

    // A damaged chip tensor fails verification.
    let chip_shard = spliced.join("model-inband-chip.safetensors");
    let mut bytes = std::fs::read(&chip_shard).unwrap();
    let n = bytes.len();
    bytes[n - 2] ^= 0x40;
    std::fs::write(&chip_shard, bytes).unwrap();
    let result = Command::new(SURGERY).args(["verify", &s(&spliced)]).output().unwrap();
    assert!(!result.status.success());
    assert!(String::from_utf8_lossy(&result.stderr).contains("does not match its recorded SHA-256"));
}

#[test]
fn inspect_describes_base_and_chip() {
    let tmp = tempfile::tempdir().unwrap();
    let (base, pack_dir, spliced) = (
        tmp.path().join("base"),
        tmp.path().join("pack"),
        tmp.path().join("spliced"),
    );
    make_base(Shape::Tiny, &base, false);
    make_pack(Shape::Tiny, &pack_dir);
    splice::splice(&base, &pack_dir, &spliced, &mut |_, _| {}).unwrap();
    let out = Command::new(SURGERY)
        .args(["inspect", spliced.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("base: tiny shape"), "{text}");
    assert!(text.contains("chip: \"acc8\", 4 chip layers in front"), "{text}");
    assert!(text.contains("4096 base + 8192 chip tokens"), "{text}");
}

/// Names in `dir` (sorted), for checking what a run left behind.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Starts a splice and waits until it is writing its staging folder.
fn splice_in_progress(base: &Path, pack: &Path, out: &Path) -> std::process::Child {
    let child = Command::new(SURGERY)
        .args([
            "splice",
            "--base",
            base.to_str().unwrap(),
            "--chip",
            pack.to_str().unwrap(),
        ])
        .args(["--out", out.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let parent = out.parent().unwrap();
    let start = std::time::Instant::now();
    while !names_in(parent).iter().any(|n| n.contains(".partial-")) {
        assert!(start.elapsed().as_secs() < 60, "the splice never started writing");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child
}

#[test]
fn an_interrupted_splice_leaves_only_the_untouched_base() {
    let tmp = tempfile::tempdir().unwrap();
    let (base, pack_dir) = (tmp.path().join("base"), tmp.path().join("pack"));
    make_base(Shape::Tiny, &base, false);
    make_pack(Shape::Tiny, &pack_dir);
    let before: Vec<(String, Vec<u8>)> = names_in(&base)
        .into_iter()
        .filter(|n| base.join(n).is_file())
        .map(|n| (n.clone(), std::fs::read(base.join(&n)).unwrap()))
        .collect();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let out = work.join("spliced");

    // Ctrl-C: the staging folder goes with the process.
    let child = splice_in_progress(&base, &pack_dir, &out);
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let result = child.wait_with_output().unwrap();
    assert_eq!(result.status.code(), Some(130), "{result:?}");
    assert!(String::from_utf8_lossy(&result.stderr).contains("interrupted"));
    assert_eq!(names_in(&work), Vec::<String>::new());

    // Killed outright: the next run removes what it left, then writes the checkpoint.
    let mut child = splice_in_progress(&base, &pack_dir, &out);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(names_in(&work).len(), 1, "{:?}", names_in(&work));
    splice::splice(&base, &pack_dir, &out, &mut |_, _| {}).unwrap();
    assert_eq!(names_in(&work), vec!["spliced".to_string()]);

    for (name, bytes) in before {
        assert!(std::fs::read(base.join(&name)).unwrap() == bytes, "{name} changed");
    }
}
