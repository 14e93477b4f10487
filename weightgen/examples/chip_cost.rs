use inband_qwen35::presets::Shape;
use inband_weightgen::{compile, rv32im, target_of, ChipRunner, MathPath};
fn main() {
    let base = Shape::Qwen0_8b.config();
    let t = std::time::Instant::now();
    let (circuit, _) = rv32im::circuit(target_of(&base));
    println!("circuit {:?}", t.elapsed());
    let chip = compile(&circuit, &base).unwrap();
    println!("compile {:?}", t.elapsed());
    let runner = ChipRunner::new(&chip, MathPath::Sparse(Default::default())).unwrap();
    println!("sparse {:?}", t.elapsed());
    drop(runner);
    println!("non-bf16 {}", chip.non_bf16_weights());
    for (l, layer) in chip.layers.iter().enumerate() {
        let parts: Vec<String> = layer
            .named_tensors()
            .iter()
            .filter(|(_, a)| a.nonzeros() > 1000)
            .map(|(n, a)| format!("{}={}", n, a.nonzeros()))
            .collect();
        println!("layer {l}: {}", parts.join(" "));
    }
}
#[allow(dead_code)]
fn breakdown() {}
