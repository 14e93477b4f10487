//! `weightgen`: compile a chip into a chip pack.
fn main() -> anyhow::Result<()> {
    anyhow::bail!("weightgen: the circuit compiler is not built yet (see the Circuit compiler issue)")
}
