//! Checkpoints with damaged safetensors (offsets that would wrap around 2^64, tensors that
//! share bytes, bytes after the last tensor) are refused by every tool that opens them:
//! `weight-surgery` inspect, verify and splice, and `inband`'s text and VM modes.

use std::path::Path;

use inband_host_runtime::text::TextModel;
use inband_host_runtime::vm::Device;
use inband_model_surgery::synth::{synth, SynthOptions};
use inband_model_surgery::{inspect, splice, verify};
use inband_qwen35::presets::Shape;

/// The first shard of `dir`: its header as JSON and its data bytes.
fn first_shard(dir: &Path) -> (std::path::PathBuf, serde_json::Map<String, serde_json::Value>, Vec<u8>) {
    let mut shards: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    shards.sort();
    let path = shards.remove(0);
    let bytes = std::fs::read(&path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    (path, header.as_object().unwrap().clone(), bytes[8 + len..].to_vec())
}

fn write_shard(path: &Path, header: &serde_json::Map<String, serde_json::Value>, data: &[u8]) {
    let text = serde_json::to_vec(header).unwrap();
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend(text);
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

/// A fresh tiny checkpoint damaged by `damage` (applied to its first shard).
fn damaged(dir: &Path, damage: impl Fn(&mut serde_json::Map<String, serde_json::Value>, &mut Vec<u8>)) {
    synth(
        &SynthOptions {
            shape: Shape::Tiny,
            seed: 1,
            text_only: true,
        },
        dir,
        &mut |_, _| {},
    )
    .unwrap();
    let (path, mut header, mut data) = first_shard(dir);
    damage(&mut header, &mut data);
    write_shard(&path, &header, &data);
}

/// The names of tensors in the header, by data offset.
fn by_offset(header: &serde_json::Map<String, serde_json::Value>) -> Vec<(u64, u64, String)> {
    let mut v: Vec<_> = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, t)| {
            let o = t["data_offsets"].as_array().unwrap();
            (o[0].as_u64().unwrap(), o[1].as_u64().unwrap(), k.clone())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn every_tool_refuses_damaged_safetensors() {
    type Damage = Box<dyn Fn(&mut serde_json::Map<String, serde_json::Value>, &mut Vec<u8>)>;
    let cases: Vec<(&str, Damage)> = vec![
        (
            "offsets near 2^64",
            Box::new(|h, _| {
                let (a, b, name) = by_offset(h).pop().unwrap();
                let far = u64::MAX - (b - a) + 1;
                h[&name]["data_offsets"] = serde_json::json!([far, far.wrapping_add(b - a)]);
            }),
        ),
        (
            "overlapping tensors",
            Box::new(|h, _| {
                let spans = by_offset(h);
                let (a, _, _) = spans[0].clone();
                let (c, d, name) = spans[1].clone();
                h[&name]["data_offsets"] = serde_json::json!([a, a + (d - c)]);
            }),
        ),
        (
            "bytes after the last tensor",
            Box::new(|_, data| data.extend_from_slice(&[0; 64])),
        ),
    ];
    for (what, damage) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ckpt");
        damaged(&dir, damage);
        assert!(inspect::inspect(&dir).is_err(), "{what}: inspect accepted it");
        assert!(
            verify::verify(&dir, None, &mut |_, _| {}).is_err(),
            "{what}: verify accepted it"
        );
        let out = tmp.path().join("out");
        let pack = tmp.path().join("no-pack");
        let err = splice::splice(&dir, &pack, &out, &mut |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(!err.contains("no-pack"), "{what}: splice read the base: {err}");
        assert!(!out.exists());
        match TextModel::open(&dir, Device::Cpu) {
            Ok(_) => panic!("{what}: inband's text mode accepted it"),
            Err(e) => assert!(
                format!("{e:#}").contains("safetensors") || format!("{e:#}").contains("tensor"),
                "{what}: {e:#}"
            ),
        }
    }
}
