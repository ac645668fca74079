//! W3C Trace Context: the `traceparent` header a caller sends, so that
//! fusebox's spans continue its trace.

use opentelemetry::trace::{SpanId, TraceId};

/// A caller's span, as its `traceparent` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace the caller is in.
    pub trace_id: TraceId,
    /// The caller's span: the parent of fusebox's.
    pub span_id: SpanId,
    /// The caller sampled it (flag `01`).
    pub sampled: bool,
}

impl TraceParent {
    /// Reads a `traceparent` header value (`00-<trace>-<span>-<flags>`).
    /// None for anything the spec says to ignore: a malformed value, an
    /// all-zero id, version `ff`. A later version is read by its first
    /// four fields, as the spec asks.
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim();
        let mut parts = value.splitn(5, '-');
        let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let rest = parts.next();
        let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
            return None;
        }
        if version == "00" && rest.is_some() {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
        let span_id = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        Some(TraceParent {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The header value naming `span` in this trace.
    pub fn header_for(&self, span: SpanId) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, span, u8::from(self.sampled))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_spec_allows_and_ignores_the_rest() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let p = TraceParent::parse(ok).unwrap();
        assert_eq!(p.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(p.span_id.to_string(), "00f067aa0ba902b7");
        assert!(p.sampled);
        assert_eq!(p.header_for(p.span_id), ok);
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra";
        assert!(!TraceParent::parse(later).unwrap().sampled);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
    }
}
