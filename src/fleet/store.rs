//! The shared-state store: the two atomic operations fleet limits and
//! budgets are built on, behind one interface with two implementations.
//!
//! - [`Store::take`] takes from token buckets (provider rate limits).
//! - [`Store::grant`] grants usage within minute/hour/day windows (budgets).
//! - [`Store::retry`] counts requests into a retry budget and takes retries
//!   from it (the fleet's retry budget).
//!
//! [`RedisStore`] runs each as one Lua script (EVALSHA) reading time from
//! Redis `TIME`; [`MemoryStore`] does the same in-process, and is what an
//! instance falls back to while Redis is unreachable. Both take an optional
//! `now` so tests drive time; the same property tests run against both.

use super::connect::Conn;
use crate::clock::Clock;
use parking_lot::Mutex;
use redis::Script;
use std::collections::HashMap;

/// One bucket to take from.
#[derive(Clone, Debug, PartialEq)]
pub struct Take {
    /// Its key (e.g. `fusebox:{provider:openai}:tpm`).
    pub key: String,
    /// Capacity (a missing bucket starts full).
    pub capacity: f64,
    /// Refill per second.
    pub per_s: f64,
    /// How much is wanted.
    pub want: f64,
}

/// What a take got from one bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Taken {
    /// Granted (at most the want, at most the level).
    pub grant: f64,
    /// Level left in the shared bucket.
    pub level: f64,
}

/// Budget windows: minute, hour, day (ms).
pub const WINDOWS_MS: [u64; 3] = [60_000, 3_600_000, 86_400_000];

/// What a grant got.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Granted {
    /// Granted (at most the want, at most what every window has left).
    pub grant: f64,
    /// The window (index into [`WINDOWS_MS`]) that cut the grant short.
    pub bound: Option<usize>,
}

/// The store could not be reached.
#[derive(Debug, thiserror::Error)]
#[error("shared store unreachable: {0}")]
pub struct StoreError(pub String);

/// The shared state's atomic operations.
#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// Takes up to each bucket's want, refilling it first at its rate since
    /// it was last touched; `now_us` (µs) is the store's own clock if None.
    async fn take(&self, buckets: &[Take], now_us: Option<u64>) -> Result<Vec<Taken>, StoreError>;

    /// Grants up to `want` of `key`'s usage within the minute, hour and day
    /// `limits` (0 = none), counting what it grants; `now_ms` is the store's
    /// own clock if None.
    async fn grant(&self, key: &str, want: f64, limits: [f64; 3], now_ms: Option<u64>) -> Result<Granted, StoreError>;

    /// Counts `ask`'s requests and retries taken into the retry budget
    /// `key` and grants up to its want, each retry while the retries of
    /// the last [`RETRY_WINDOW_S`] seconds stay under `floor + ratio ×
    /// requests` of that window; `now_ms` is the store's own clock if None.
    async fn retry(&self, key: &str, ask: RetryAsk, budget: RetryShare, now_ms: Option<u64>)
        -> Result<u32, StoreError>;
}

/// The window of a shared retry budget (s).
pub const RETRY_WINDOW_S: u64 = 10;

/// What an instance brings to a shared retry budget.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryAsk {
    /// Its requests since it last counted them.
    pub requests: u64,
    /// Retries it made without asking (while the store was away).
    pub taken: u64,
    /// Retries it asks for now.
    pub want: u32,
}

/// What a shared retry budget allows in its window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryShare {
    /// Retries per request.
    pub ratio: f64,
    /// Retries allowed whatever the requests.
    pub floor: f64,
}

impl RetryShare {
    /// Retries granted of `want` when the window holds `requests` and `retries`.
    fn grant(&self, requests: u64, retries: u64, want: u32) -> u32 {
        let room = (self.floor + self.ratio * requests as f64 - retries as f64).ceil();
        room.clamp(0.0, f64::from(want)) as u32
    }
}

/// Opens every script: `clock(arg, per_s)` is `arg` where the caller gave
/// a time (tests on a virtual clock), else Redis's own `TIME`, in units of
/// `1 / per_s` seconds.
macro_rules! lua {
    ($body:literal) => {
        concat!(
            r#"
local function clock(arg, per_s)
  if arg and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * per_s + math.floor(tonumber(t[2]) * per_s / 1000000)
end
"#,
            $body
        )
    };
}

/// The Lua script of [`Store::take`]. KEYS: buckets; ARGV: capacity, refill
/// per second, want, per bucket; then `now` in µs or ''. Levels are kept as
/// strings (Lua numbers are doubles).
const TAKE: &str = lua!(
    r#"
local n = #KEYS
local now = clock(ARGV[3 * n + 1], 1000000)
local out = {}
for i = 1, n do
  local cap = tonumber(ARGV[3 * i - 2])
  local rate = tonumber(ARGV[3 * i - 1])
  local want = tonumber(ARGV[3 * i])
  local b = redis.call('HMGET', KEYS[i], 'level', 'ts')
  local level = tonumber(b[1])
  local ts = tonumber(b[2])
  if level == nil or ts == nil then
    level = cap
    ts = now
  end
  if now > ts then
    level = math.min(cap, level + (now - ts) / 1000000 * rate)
    ts = now
  end
  local grant = math.max(0, math.min(want, level))
  level = level - grant
  redis.call('HSET', KEYS[i], 'level', string.format('%.17g', level), 'ts', string.format('%.17g', ts))
  redis.call('PEXPIRE', KEYS[i], 3600000)
  out[2 * i - 1] = string.format('%.17g', grant)
  out[2 * i] = string.format('%.17g', level)
end
return out
"#
);

/// The Lua script of [`Store::grant`]. KEYS[1]: the usage hash; ARGV: want,
/// minute, hour and day limits (0 = none), `now` in ms or ''. Returns the
/// grant and the bounding window (0 = none, else 1..3), as strings.
const GRANT: &str = lua!(
    r#"
local now = clock(ARGV[5], 1000)
local lens = {60000, 3600000, 86400000}
local grant = tonumber(ARGV[1])
local bound = 0
local used = {}
local idx = {}
for i = 1, 3 do
  idx[i] = math.floor(now / lens[i])
  local cur = tonumber(redis.call('HGET', KEYS[1], 'i' .. i))
  used[i] = tonumber(redis.call('HGET', KEYS[1], 'u' .. i)) or 0
  if cur ~= idx[i] then used[i] = 0 end
  local lim = tonumber(ARGV[1 + i])
  if lim > 0 and lim - used[i] < grant then
    grant = math.max(0, lim - used[i])
    bound = i
  end
end
for i = 1, 3 do
  redis.call('HSET', KEYS[1], 'i' .. i, idx[i], 'u' .. i, string.format('%.17g', used[i] + grant))
end
redis.call('PEXPIRE', KEYS[1], 86400000)
return {string.format('%.17g', grant), tostring(bound)}
"#
);

/// The Lua script of [`Store::retry`]. KEYS[1]: the budget's hash (per
/// second slot `i`: `s<i>` the second, `q<i>` requests, `r<i>` retries);
/// ARGV: requests, want, ratio, floor, retries taken without asking,
/// `now` in ms or ''. Returns the retries granted.
const RETRY: &str = lua!(
    r#"
local now = clock(ARGV[6], 1000)
local s = math.floor(now / 1000)
local i = s % 10
if tonumber(redis.call('HGET', KEYS[1], 's' .. i)) ~= s then
  redis.call('HSET', KEYS[1], 's' .. i, s, 'q' .. i, 0, 'r' .. i, 0)
end
redis.call('HINCRBY', KEYS[1], 'q' .. i, tonumber(ARGV[1]))
redis.call('HINCRBY', KEYS[1], 'r' .. i, tonumber(ARGV[5]))
local q, r = 0, 0
for j = 0, 9 do
  local v = redis.call('HMGET', KEYS[1], 's' .. j, 'q' .. j, 'r' .. j)
  local sj = tonumber(v[1])
  if sj and sj <= s and s - sj < 10 then
    q = q + tonumber(v[2])
    r = r + tonumber(v[3])
  end
end
local room = math.ceil(tonumber(ARGV[4]) + tonumber(ARGV[3]) * q - r)
local grant = math.max(0, math.min(tonumber(ARGV[2]), room))
redis.call('HINCRBY', KEYS[1], 'r' .. i, grant)
redis.call('PEXPIRE', KEYS[1], 20000)
return grant
"#
);

/// The store on Redis: each operation is one atomic script.
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    take: Script,
    grant: Script,
    retry: Script,
}

impl RedisStore {
    /// The store on `conn`.
    pub fn new(conn: Conn) -> Self {
        Self {
            conn,
            take: Script::new(TAKE),
            grant: Script::new(GRANT),
            retry: Script::new(RETRY),
        }
    }

    /// Runs a prepared script, its last argument the caller's time (`''`:
    /// Redis's own).
    async fn run<T: redis::FromRedisValue>(
        &self,
        mut inv: redis::ScriptInvocation<'_>,
        now: Option<u64>,
    ) -> Result<T, StoreError> {
        inv.arg(now.map_or(String::new(), |t| t.to_string()));
        inv.invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| StoreError(e.to_string()))
    }
}

fn num(s: Option<&String>) -> f64 {
    s.and_then(|s| s.parse().ok()).unwrap_or(0.0)
}

#[async_trait::async_trait]
impl Store for RedisStore {
    async fn take(&self, buckets: &[Take], now_us: Option<u64>) -> Result<Vec<Taken>, StoreError> {
        let mut inv = self.take.prepare_invoke();
        for b in buckets {
            inv.key(&b.key).arg(b.capacity).arg(b.per_s).arg(b.want);
        }
        let out: Vec<String> = self.run(inv, now_us).await?;
        Ok((0..buckets.len())
            .map(|i| Taken {
                grant: num(out.get(2 * i)),
                level: num(out.get(2 * i + 1)),
            })
            .collect())
    }

    async fn grant(&self, key: &str, want: f64, limits: [f64; 3], now_ms: Option<u64>) -> Result<Granted, StoreError> {
        let mut inv = self.grant.prepare_invoke();
        inv.key(key).arg(want);
        for l in limits {
            inv.arg(l);
        }
        let (grant, bound): (String, String) = self.run(inv, now_ms).await?;
        Ok(Granted {
            grant: grant.parse().unwrap_or(0.0),
            bound: bound.parse::<usize>().ok().filter(|b| *b > 0).map(|b| b - 1),
        })
    }

    async fn retry(
        &self,
        key: &str,
        ask: RetryAsk,
        budget: RetryShare,
        now_ms: Option<u64>,
    ) -> Result<u32, StoreError> {
        let mut inv = self.retry.prepare_invoke();
        inv.key(key).arg(ask.requests).arg(ask.want);
        inv.arg(budget.ratio).arg(budget.floor).arg(ask.taken);
        self.run(inv, now_ms).await
    }
}

/// The store in this process: the same operations on local maps, on the
/// runner's clock.
pub struct MemoryStore {
    clock: Clock,
    /// Bucket level and when it was last refilled (µs).
    buckets: Mutex<HashMap<String, (f64, u64)>>,
    /// Per key and window: the window's index and its usage.
    usage: Mutex<HashMap<String, [(u64, f64); 3]>>,
    /// Per retry budget, its second slots.
    retries: Mutex<HashMap<String, [RetrySlot; RETRY_WINDOW_S as usize]>>,
}

/// One second of a retry budget: the second, requests, retries.
type RetrySlot = (u64, u64, u64);

impl MemoryStore {
    /// An empty store on `clock`.
    pub fn new(clock: Clock) -> Self {
        Self {
            clock,
            buckets: Mutex::new(HashMap::new()),
            usage: Mutex::new(HashMap::new()),
            retries: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets usage whose windows all ended before `now_ms` (bounded memory).
    pub fn forget_idle(&self, now_ms: u64) {
        self.usage
            .lock()
            .retain(|_, w| w[2].0 == now_ms / WINDOWS_MS[2] && w.iter().any(|(_, u)| *u > 0.0));
    }
}

#[async_trait::async_trait]
impl Store for MemoryStore {
    async fn take(&self, buckets: &[Take], now_us: Option<u64>) -> Result<Vec<Taken>, StoreError> {
        let now = now_us.unwrap_or_else(|| self.clock.wall_ms() * 1_000);
        let mut map = self.buckets.lock();
        Ok(buckets
            .iter()
            .map(|b| {
                let (level, ts) = map.entry(b.key.clone()).or_insert((b.capacity, now));
                if now > *ts {
                    *level = b.capacity.min(*level + (now - *ts) as f64 / 1_000_000.0 * b.per_s);
                    *ts = now;
                }
                let grant = b.want.min(*level).max(0.0);
                *level -= grant;
                Taken { grant, level: *level }
            })
            .collect())
    }

    async fn grant(&self, key: &str, want: f64, limits: [f64; 3], now_ms: Option<u64>) -> Result<Granted, StoreError> {
        let now = now_ms.unwrap_or_else(|| self.clock.wall_ms());
        let mut map = self.usage.lock();
        let windows = map.entry(key.to_string()).or_default();
        let mut g = Granted {
            grant: want,
            bound: None,
        };
        for (i, w) in windows.iter_mut().enumerate() {
            let idx = now / WINDOWS_MS[i];
            if w.0 != idx {
                *w = (idx, 0.0);
            }
            if limits[i] > 0.0 && limits[i] - w.1 < g.grant {
                g = Granted {
                    grant: (limits[i] - w.1).max(0.0),
                    bound: Some(i),
                };
            }
        }
        for w in windows.iter_mut() {
            w.1 += g.grant;
        }
        Ok(g)
    }

    async fn retry(
        &self,
        key: &str,
        ask: RetryAsk,
        budget: RetryShare,
        now_ms: Option<u64>,
    ) -> Result<u32, StoreError> {
        let s = now_ms.unwrap_or_else(|| self.clock.wall_ms()) / 1_000;
        let mut map = self.retries.lock();
        let slots = map
            .entry(key.to_string())
            .or_insert([(u64::MAX, 0, 0); RETRY_WINDOW_S as usize]);
        let slot = &mut slots[(s % RETRY_WINDOW_S) as usize];
        if slot.0 != s {
            *slot = (s, 0, 0);
        }
        slot.1 += ask.requests;
        slot.2 += ask.taken;
        let live = slots.iter().filter(|x| x.0 <= s && s - x.0 < RETRY_WINDOW_S);
        let (q, r) = live.fold((0, 0), |(q, r), x| (q + x.1, r + x.2));
        let grant = budget.grant(q, r, ask.want);
        slots[(s % RETRY_WINDOW_S) as usize].2 += u64::from(grant);
        Ok(grant)
    }
}
