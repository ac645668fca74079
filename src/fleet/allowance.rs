//! Per-user token budgets held by the fleet: each user's minute, hour and
//! day usage lives in one Redis hash (windows from Redis's clock, one atomic
//! Lua script). An instance takes a user's tokens in chunks (an allowance,
//! a tenth of the minute limit) and spends them locally; it asks Redis again
//! only when the allowance runs out, and near the limit Redis grants only
//! what is left. What an instance spends was granted first, so the fleet
//! together stays within each user's budget.
//!
//! Without Redis an instance keeps to its own (local) budgets only: fail
//! open, as the local budgets still bound each instance.

use crate::config::BudgetConfig;
use crate::resilience::budget::BudgetExceeded;
use parking_lot::Mutex;
use redis::aio::ConnectionManager;
use redis::Script;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Grants up to ARGV[1] tokens of KEYS[1]'s user within the minute, hour
/// and day limits (ARGV[2..4]; 0 = none); ARGV[5] is an optional `now` in
/// ms (tests), else Redis TIME. Returns the grant and which window bound
/// it (0 = none), as strings.
const GRANT: &str = r#"
local now
if ARGV[5] and ARGV[5] ~= '' then
  now = tonumber(ARGV[5])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
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
  redis.call('HSET', KEYS[1], 'i' .. i, idx[i], 'u' .. i, tostring(used[i] + grant))
end
redis.call('PEXPIRE', KEYS[1], 86400000)
return {tostring(grant), tostring(bound)}
"#;

const WINDOWS: [(&str, u64); 3] = [
    ("tokens/minute", 60_000),
    ("tokens/hour", 3_600_000),
    ("tokens/day", 86_400_000),
];

/// A user's tokens granted to this instance and not spent yet.
#[derive(Clone, Debug, Default)]
struct Allowance {
    /// The minute the grant belongs to (a new minute starts from nothing).
    minute: u64,
    left: f64,
    /// Redis refused more this minute (the budget ran out): further calls
    /// beyond the allowance are refused here, without a round trip each.
    spent: Option<BudgetExceeded>,
}

/// Users' allowances on this instance.
pub struct Allowances {
    conn: ConnectionManager,
    script: Script,
    limits: [u64; 3],
    users: Mutex<HashMap<String, Allowance>>,
    /// Round trips made for allowances.
    pub round_trips: AtomicU64,
}

impl Allowances {
    pub(super) fn new(conn: ConnectionManager, cfg: &BudgetConfig) -> Self {
        Self {
            conn,
            script: Script::new(GRANT),
            limits: [
                cfg.user_tokens_per_minute,
                cfg.user_tokens_per_hour,
                cfg.user_tokens_per_day,
            ],
            users: Mutex::new(HashMap::new()),
            round_trips: AtomicU64::new(0),
        }
    }

    /// Takes `tokens` of `user`'s budgets for a call: from the allowance when
    /// it has them, else after a round trip for another chunk. Redis being
    /// unreachable lets the call go (the local budgets still apply).
    pub async fn reserve(&self, user: &str, tokens: u32, now_ms: u64) -> Result<(), BudgetExceeded> {
        let minute = now_ms / 60_000;
        let want = f64::from(tokens);
        let short = {
            let mut users = self.users.lock();
            let a = users.entry(user.to_string()).or_default();
            if a.minute != minute {
                *a = Allowance {
                    minute,
                    ..Allowance::default()
                };
            }
            if a.left >= want {
                a.left -= want;
                return Ok(());
            }
            if let Some(e) = &a.spent {
                return Err(e.clone());
            }
            want - a.left
        };
        let chunk = short.max(self.limits[0] as f64 / 10.0).ceil();
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let mut conn = self.conn.clone();
        let mut inv = self.script.prepare_invoke();
        inv.key(format!("fusebox:{{user:{user}}}:tokens")).arg(chunk);
        for l in self.limits {
            inv.arg(l);
        }
        inv.arg("");
        let (grant, bound) = match inv.invoke_async::<(String, String)>(&mut conn).await {
            Ok((g, b)) => (g.parse::<f64>().unwrap_or(0.0), b.parse::<usize>().unwrap_or(0)),
            Err(e) => {
                tracing::debug!(error = %e, "allowance round trip failed; local budgets only");
                return Ok(());
            }
        };
        let mut users = self.users.lock();
        let a = users.entry(user.to_string()).or_default();
        if a.minute != minute {
            *a = Allowance {
                minute,
                ..Allowance::default()
            };
        }
        a.left += grant;
        if a.left >= want {
            a.left -= want;
            return Ok(());
        }
        let (what, limit) = match bound {
            2 | 3 => (WINDOWS[bound - 1].0, self.limits[bound - 1]),
            _ => (WINDOWS[0].0, self.limits[0]),
        };
        let e = BudgetExceeded {
            scope: format!("user {user} (fleet)"),
            what,
            would: limit as f64 - a.left + want,
            limit: limit as f64,
            first_in_window: false,
        };
        a.spent = Some(e.clone());
        Err(e)
    }

    /// Settles a call that reserved `reserved` tokens and used `used`: the
    /// difference goes back to (or comes out of) the allowance.
    pub fn settle(&self, user: &str, reserved: u32, used: u32) {
        if let Some(a) = self.users.lock().get_mut(user) {
            a.left += f64::from(reserved) - f64::from(used);
        }
    }

    /// Drops the allowances of past minutes (what is kept is bounded by the
    /// users seen this minute).
    pub fn forget_idle(&self, now_ms: u64) {
        let minute = now_ms / 60_000;
        self.users.lock().retain(|_, a| a.minute == minute);
    }
}
