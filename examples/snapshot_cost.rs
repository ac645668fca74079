//! What the gateway's snapshot stream costs: one snapshot of a runner with
//! 200 breakers (tools) and 10,000 users with budgets in use, taken and
//! written as the stream sends it, timed over many; at ten a second that
//! is the share of one core printed last.
//! (`cargo run --profile dist --example snapshot_cost`)

use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::runner::{Runner, RunnerParts};
use std::time::Instant;

fn main() {
    let mut cfg = Config::default();
    let tool = cfg.tools["search_docs"].clone();
    for i in 0..(200 - cfg.tools.len() - cfg.providers.len() - cfg.models.len()) {
        cfg.tools.insert(format!("tool_{i:03}"), tool.clone());
    }
    cfg.budgets.max_tracked_users = 20_000;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let runner = Runner::new(cfg, RunnerParts::mock(Clock::system(), Seed(1))).expect("a runner");
        let now = runner.clock().elapsed_ms();
        for u in 0..10_000 {
            let r = runner
                .budgets()
                .reserve(&format!("user-{u:05}"), 100 + u % 900, 0.001, now);
            if let Ok(r) = r {
                runner.budgets().settle(r, 100 + u % 900, 0.001, now);
            }
        }
        let n = 200;
        let mut bytes = 0;
        let mut last = None;
        let t0 = Instant::now();
        // What the stream does each time it sends: take, compare with the
        // last one sent (times aside), write.
        for _ in 0..n {
            let s = runner.snapshot(100, 100);
            let mut timeless = s.clone();
            (timeless.t_ms, timeless.wall_ms) = (0, 0);
            let _changed = last.as_ref() != Some(&timeless);
            bytes = serde_json::to_string(&s).map_or(0, |j| j.len());
            last = Some(timeless);
        }
        let each = t0.elapsed().as_secs_f64() / n as f64;
        println!(
            "{} breakers, 10000 users: {:.3} ms a snapshot ({bytes} bytes); at 10/s {:.2} % of one core",
            runner.catalog().registry().len(),
            each * 1e3,
            each * 10.0 * 100.0
        );
    });
}
