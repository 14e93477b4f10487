//! `weight-surgery`: checkpoint surgery CLI.
fn main() -> anyhow::Result<()> {
    anyhow::bail!("weight-surgery: not built yet (see the weight-surgery issue)")
}
