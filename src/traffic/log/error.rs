//! Why a log could not be read, naming the file, the line and the field.

use std::io;
use std::path::PathBuf;

/// Why a log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file could not be opened or read. (The I/O error is part of the
    /// message, not a source, so a report does not say it twice.)
    #[error("{}: {error}", path.display())]
    Io {
        /// The log.
        path: PathBuf,
        /// The underlying error.
        error: io::Error,
    },
    /// The file has no lines.
    #[error("{}: empty log (no lines)", path.display())]
    Empty {
        /// The log.
        path: PathBuf,
    },
    /// A bad line, naming file, line number (1-based) and field (empty when
    /// the line is not a JSON object at all).
    #[error("{}:{line}: {}{message}", path.display(), field_prefix(field))]
    BadLine {
        /// The log.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// The offending field, or empty when the line as a whole is bad.
        field: String,
        /// What is wrong.
        message: String,
    },
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("field `{field}`: ")
    }
}

/// A problem with one line: (field, message).
pub(super) type Bad = (String, String);

pub(super) fn bad(field: &str, message: impl Into<String>) -> Bad {
    (field.to_string(), message.into())
}
