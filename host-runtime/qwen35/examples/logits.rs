//! Prints the dense model's logits for token ids as JSON {"decode": [[...], ...]}:
//! `cargo run --release -p inband-qwen35 --example logits -- CHECKPOINT_DIR ID...`
//! (compared against tests/reference/qwen35_reference.py).

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = std::path::Path::new(&args[0]);
    let ids: Vec<u32> = args[1..].iter().map(|s| s.parse()).collect::<Result<_, _>>()?;
    let ck = inband_qwen35::checkpoint::Checkpoint::open(dir)?;
    let model = inband_qwen35::model::DenseModel::from_checkpoint(&ck, &candle_core::Device::Cpu)?;
    let mut state = model.new_state()?;
    let mut rows = Vec::new();
    for id in ids {
        let logits = model.logits(&[id], &mut state)?;
        rows.push(logits.squeeze(0)?.to_vec1::<f32>()?);
    }
    println!("{}", serde_json::json!({ "decode": rows }));
    Ok(())
}
