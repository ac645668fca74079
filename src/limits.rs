//! Bounds on the names callers, operators and files give fusebox (they are
//! kept as keys and in events, so their length bounds what can be made to
//! stay in memory). Every bound is listed in `docs/limits.md`.

/// The longest user, session, model or route name.
pub const MAX_NAME_LEN: usize = 256;

/// The longest target name (`provider:NAME`, `tool:NAME`) accepted, and the
/// most of an operator's text an event keeps.
pub const MAX_TARGET_LEN: usize = 128;

/// The largest prompt and output cap (tokens) a request may give, a
/// replay read or a recording hold: beyond any model's context window.
pub const MAX_TOKENS: u32 = 2_000_000;

/// The most bytes a request's head (request line and headers) may take on
/// a gateway connection; a larger one is answered 431. Real clients send a
/// few KiB; common proxies stop at 8 to 64 KiB.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How long a streamed answer's client may leave it unread (its
/// connection taking no more while the call has more to give) before the
/// call is dropped, ending failed as for a client that left: a client that
/// stops reading keeps no upstream stream, limiter slot or reservation.
pub const CLIENT_STALL: std::time::Duration = std::time::Duration::from_secs(60);

/// The most of a streamed answer the gateway holds for a client that has
/// not taken it (beyond its connection's write buffer, [`WRITE_BUFFER`]):
/// past it the upstream's answer is left unread in its socket until the
/// client reads, so a client that stops reading costs this, not the answer.
pub const STREAM_BACKLOG: usize = 64 * 1024;

/// The most of a streamed answer's text kept beside what goes to the
/// client (for its outcome and record, and to resume it if it is cut): an
/// answer longer than this is not resumed, and its record keeps this much.
pub const STREAM_TEXT_KEPT: usize = 128 * 1024;

/// The most of a continuation's text held while it may be writing again
/// what the client was sent (a cut answer resumed in a user turn): one
/// still repeating it past this ends the stream as not resumed.
pub const RESUME_HOLD: usize = 4 * 1024;

/// The most a gateway connection buffers to write (and to read: a
/// request's head must fit, see [`MAX_HEAD_BYTES`]).
pub const WRITE_BUFFER: usize = 2 * MAX_HEAD_BYTES;

/// The largest config file read, at start or on a reload: a config is a
/// few KiB; a larger file is the wrong one, refused before it is read.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// How long a reload waits for its config file to be read (on a blocking
/// thread) before refusing it: a stalled mount holds that thread, never
/// the gateway.
pub const CONFIG_READ_TIME: std::time::Duration = std::time::Duration::from_secs(5);
