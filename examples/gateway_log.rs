//! Writes a gateway-shaped traffic log for replay benchmarks: N one-call
//! requests at a steady rate from 20,000 users, each answered by openai's
//! gpt-4o (200, 200–600 ms), with attempts and outcomes at their end times as
//! fusebox writes them. Seeded, so the same arguments give the same file.
//!
//! `cargo run --release --example gateway_log -- 1000000 2000 gw1m.jsonl`
//! then `fusebox replay gw1m.jsonl --headless --speed max --config
//! examples/replay-bench.toml` (limits that let 2,000 requests a second
//! through); the summary's `wall_ms` gives the rate.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(n), Some(rps), Some(path)) = (
        args.first().and_then(|a| a.parse::<u64>().ok()),
        args.get(1).and_then(|a| a.parse::<u64>().ok()).filter(|&r| r > 0),
        args.get(2),
    ) else {
        eprintln!("usage: gateway_log REQUESTS RATE_PER_S OUT.jsonl");
        std::process::exit(2);
    };
    let written = std::fs::File::create(path)
        .and_then(|f| fusebox::traffic::load::synth::gateway_log(n, rps, &mut std::io::BufWriter::new(f)));
    if let Err(e) = written {
        eprintln!("error: {path}: {e}");
        std::process::exit(1);
    }
}
