//! Runs a scenario check at many seeds: a documented bound must hold at
//! every one, not at the seed its figures were measured at.

use std::future::Future;
use std::ops::RangeInclusive;

/// The seeds every documented overload bound is checked at.
pub const SEEDS: RangeInclusive<u64> = 1..=30;

/// `check(seed)` at each of `seeds`, each on a fresh paused runtime (time
/// is virtual), two seeds at a time: the results in seed order. A seed
/// whose check panics does not stop the others; the test then fails
/// naming every such seed.
pub fn each_seed<T, F, Fut>(seeds: RangeInclusive<u64>, check: F) -> Vec<(u64, T)>
where
    T: Send,
    F: Fn(u64) -> Fut + Sync,
    Fut: Future<Output = T>,
{
    let seeds: Vec<u64> = seeds.collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<(u64, std::thread::Result<T>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&seed) = seeds.get(i) else { break };
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .start_paused(true)
                            .build()
                            .unwrap();
                        let run = std::panic::AssertUnwindSafe(|| rt.block_on(check(seed)));
                        mine.push((seed, std::panic::catch_unwind(run)));
                    }
                    mine
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    results.sort_by_key(|(seed, _)| *seed);
    let failed: Vec<u64> = results.iter().filter(|(_, r)| r.is_err()).map(|(s, _)| *s).collect();
    assert!(
        failed.is_empty(),
        "the check failed at seeds {failed:?} (each one's panic is above)"
    );
    results.into_iter().map(|(s, r)| (s, r.ok().unwrap())).collect()
}

/// The median of `values`.
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
