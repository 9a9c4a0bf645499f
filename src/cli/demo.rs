pub async fn run(_: DemoArgs) -> anyhow::Result<()> {
    Ok(())
}
#[derive(clap::Args, Debug)]
pub struct DemoArgs {}
