#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or("127.0.0.1:8799".into());
    let a = fusebox::mockserver::MockServer::instant(fusebox::clock::Seed(1), Default::default())
        .spawn(&addr)
        .await?;
    println!("{a}");
    std::future::pending::<()>().await;
    Ok(())
}
