//! The `x-fusebox-*` headers, every one fusebox reads or writes, named once.
//!
//! Answers to clients carry how a request ended; calls to providers carry
//! which request, step and attempt they belong to (the mock providers key
//! their plan on them); operators and attached consoles name themselves and their
//! scope.

/// What every one of these names begins with.
pub const PREFIX: &str = "x-fusebox-";
/// Every answer's request name (a caller's `x-request-id` kept when usable).
pub const REQUEST_ID: &str = "x-fusebox-request-id";
/// How the request ended: `full`, `fallback`, `cached`, … .
pub const LEVEL: &str = "x-fusebox-level";
/// The hops taken, in ASCII (`gpt-4o:ok`, `gpt-4o:fail>claude:ok`).
pub const CHAIN: &str = "x-fusebox-chain";
/// The answer's quality, 0 to 1.
pub const QUALITY: &str = "x-fusebox-quality";
/// How many upstream attempts the request made.
pub const ATTEMPTS: &str = "x-fusebox-attempts";
/// A sub-user named by a caller key allowed to (read).
pub const USER: &str = "x-fusebox-user";
/// The caller's session, for its quota (read).
pub const SESSION: &str = "x-fusebox-session";
/// A caller's fallback choice for this request (read).
pub const FALLBACK: &str = "x-fusebox-fallback";
/// A caller's priority: `critical`, `default` or `batch` (read; its key
/// caps it).
pub const PRIORITY: &str = "x-fusebox-priority";
/// A caller's deadline in milliseconds (read).
pub const DEADLINE_MS: &str = "x-fusebox-deadline-ms";
/// The operator issuing a command (read on `/_fusebox/commands`, sent by
/// `fusebox attach`).
pub const OPERATOR: &str = "x-fusebox-operator";
/// What the credential may do on the live view: `operate`, `view` (a view
/// token), or `readonly` (the gateway refuses every command).
pub const SCOPE: &str = "x-fusebox-scope";
/// The agent request id a provider call belongs to (sent upstream).
pub const REQUEST: &str = "x-fusebox-request";
/// The agent-loop step of a provider call (sent upstream).
pub const STEP: &str = "x-fusebox-step";
/// The attempt number of a provider call (sent upstream).
pub const ATTEMPT: &str = "x-fusebox-attempt";

/// The headers fusebox looks up by name (a lookup by `&str` parses the
/// name each time); a chat call's are found in one pass over its headers.
pub mod name {
    use http::HeaderName;

    /// [`super::USER`].
    pub const USER: HeaderName = HeaderName::from_static(super::USER);
    /// [`super::SESSION`].
    pub const SESSION: HeaderName = HeaderName::from_static(super::SESSION);
}

/// A count as a header value: the small ones (a step, an attempt, almost
/// always) without allocating one.
pub fn count(n: u32) -> http::HeaderValue {
    const SMALL: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match SMALL.get(n as usize) {
        Some(s) => http::HeaderValue::from_static(s),
        None => http::HeaderValue::from(n),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_name_read_on_a_request_has_the_prefix() {
        use super::*;
        for name in [USER, SESSION, FALLBACK, PRIORITY, DEADLINE_MS] {
            assert!(name.starts_with(PREFIX), "{name}");
        }
    }

    #[test]
    fn a_count_reads_as_its_number() {
        for n in [0, 1, 9, 10, 42, u32::MAX] {
            assert_eq!(super::count(n).to_str().unwrap(), n.to_string());
        }
    }
}
