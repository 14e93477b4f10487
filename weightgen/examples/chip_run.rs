use inband_golden::{Environment, Machine};
use inband_qwen35::presets::Shape;
use inband_weightgen::rv32im::host::{ChipMachine, Rv32Chip};
use inband_weightgen::MathPath;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let budget: u64 = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(1_000_000);
    let tc = inband_firmware::Toolchain::locate(None).unwrap();
    let bytes = if path.ends_with(".elf") {
        std::fs::read(&path).unwrap()
    } else {
        tc.build_to_bytes(&[path.clone().into()], inband_firmware::Flavor::BareMetal, "-O2")
            .unwrap()
    };
    let image = inband_firmware::load_elf(&bytes).unwrap();
    let chip = Rv32Chip::build(&Shape::Qwen0_8b.config()).unwrap();
    let t = std::time::Instant::now();
    let mut m = ChipMachine::boot(&chip, &image, MathPath::Sparse(Default::default())).unwrap();
    println!("boot {:?} ({} passes)", t.elapsed(), m.counts.boot_passes);
    let mut g = Machine::new(&image, Environment::BareMetal);
    let t = std::time::Instant::now();
    let end = m.run(budget, Some(&mut g));
    println!("{:?}", end);
    println!("console {:?}", String::from_utf8_lossy(&m.console));
    println!("counts {:?} in {:?}", m.counts, t.elapsed());
}
