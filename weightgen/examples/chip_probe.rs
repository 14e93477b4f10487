use inband_qwen35::presets::Shape;
use inband_weightgen::rv32im::host::{boot_tokens, Rv32Chip};
use inband_weightgen::{ChipRunner, MathPath};
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let steps: usize = std::env::args().nth(2).unwrap().parse().unwrap();
    let prefix = std::env::args().nth(3).unwrap_or_default();
    let tc = inband_firmware::Toolchain::locate(None).unwrap();
    let bytes = tc
        .build_to_bytes(&[path.clone().into()], inband_firmware::Flavor::BareMetal, "-O2")
        .unwrap();
    let image = inband_firmware::load_elf(&bytes).unwrap();
    let chip = Rv32Chip::build(&Shape::Qwen0_8b.config()).unwrap();
    let mut r = ChipRunner::new(&chip.chip, MathPath::Sparse(Default::default())).unwrap();
    let toks = boot_tokens(&image).unwrap();
    let mut out = None;
    for t in &toks {
        out = Some(r.step(t).unwrap());
    }
    let mut next = out.unwrap();
    for i in 0..steps {
        let t = next.clone();
        next = r.step(&t).unwrap();
        println!("pass {i}: in {:?} -> out {:?}", t, next);
        let trigger = std::env::args().nth(4).unwrap_or_default();
        let hit = chip
            .chip
            .circuit
            .signals
            .iter()
            .enumerate()
            .any(|(k, s)| s.name == trigger && r.signal(inband_circuits::Signal(k as u32)) > 0.5);
        if hit {
            break;
        }
    }
    for (i, s) in chip.chip.circuit.signals.iter().enumerate() {
        if !prefix.is_empty() && s.name.starts_with(&prefix) {
            let v = r.signal(inband_circuits::Signal(i as u32));
            if v != 0.0 {
                println!("{} = {}", s.name, v);
            }
        }
    }
}
