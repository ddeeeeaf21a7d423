//! `oncehook bench`: owned by the benchmark work; see BENCHMARKS.md.

use crate::cli::Common;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

pub async fn run(_args: BenchArgs, _common: &Common) -> anyhow::Result<()> {
    anyhow::bail!("the benchmark is not written yet")
}
