//! Reading a config file within bounds: only a regular file (a FIFO or a
//! device would block its reader for as long as its writer likes) of at
//! most [`MAX_CONFIG_BYTES`]; and, for a reload while serving, on a
//! blocking thread waited for at most a time, so a stalled mount never
//! holds the runtime.

use super::ConfigError;
use crate::limits::MAX_CONFIG_BYTES;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

/// The text of the config file at `path`, refused unless it is a regular
/// file of at most [`MAX_CONFIG_BYTES`].
pub fn read(path: &Path) -> Result<String, ConfigError> {
    let read_error = |source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    };
    // Looked at before it is opened: opening a FIFO blocks until a writer comes.
    check(path, &std::fs::metadata(path).map_err(read_error)?)?;
    let file = std::fs::File::open(path).map_err(read_error)?;
    // And what was opened, in case the path changed meanwhile.
    check(path, &file.metadata().map_err(read_error)?)?;
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_error)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        // It grew while it was read.
        return Err(too_large(path, text.len() as u64));
    }
    Ok(text)
}

/// Refuses what is not a regular file, or is larger than a config may be.
fn check(path: &Path, meta: &std::fs::Metadata) -> Result<(), ConfigError> {
    if !meta.is_file() {
        return Err(ConfigError::NotAFile {
            path: path.display().to_string(),
            kind: kind(meta.file_type()),
        });
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(too_large(path, meta.len()));
    }
    Ok(())
}

fn too_large(path: &Path, size: u64) -> ConfigError {
    ConfigError::TooLarge {
        path: path.display().to_string(),
        size,
        max: MAX_CONFIG_BYTES,
    }
}

/// What a file that is not a regular one is, in words.
fn kind(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// `read` (of the file at `path`) on a blocking thread, waited for at most
/// `within`: past it, refused naming the file. The read itself goes on
/// until it ends; the caller does not wait for it.
pub async fn off_runtime<T: Send + 'static>(
    path: &Path,
    within: Duration,
    read: impl FnOnce() -> Result<T, ConfigError> + Send + 'static,
) -> Result<T, ConfigError> {
    match tokio::time::timeout(within, tokio::task::spawn_blocking(read)).await {
        Ok(Ok(read)) => read,
        Ok(Err(failed)) => Err(ConfigError::Read {
            path: path.display().to_string(),
            source: std::io::Error::other(failed),
        }),
        Err(_) => Err(ConfigError::Stalled {
            path: path.display().to_string(),
            within,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that does not end in time is refused at the bound, naming
    /// the file, while the read is still blocked.
    #[tokio::test(start_paused = true)]
    async fn a_read_that_stalls_is_refused_at_the_bound() {
        let (release, stalled) = std::sync::mpsc::channel::<()>();
        let within = Duration::from_secs(5);
        let waiting = off_runtime(Path::new("/mnt/stalled/fb.toml"), within, move || {
            let _ = stalled.recv();
            Ok(())
        });
        tokio::pin!(waiting);
        assert!(futures_util::poll!(&mut waiting).is_pending());
        // A blocking thread at work holds a paused clock: moved by hand.
        tokio::time::advance(within - Duration::from_millis(1)).await;
        assert!(futures_util::poll!(&mut waiting).is_pending(), "not before the bound");
        tokio::time::advance(Duration::from_millis(1)).await;
        let said = futures_util::poll!(&mut waiting);
        release.send(()).unwrap();
        let std::task::Poll::Ready(Err(said)) = said else {
            panic!("not refused at the bound: {said:?}")
        };
        let said = said.to_string();
        assert!(
            said.contains("/mnt/stalled/fb.toml") && said.contains("did not read in 5 s"),
            "{said}"
        );
    }

    #[test]
    fn a_fifo_or_a_directory_is_refused_unopened_and_a_large_file_by_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let said = read(dir.path()).unwrap_err().to_string();
        assert!(said.contains("is not a regular file (it is a directory)"), "{said}");
        let fifo = dir.path().join("fifo.toml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        // Opened for reading, a FIFO without a writer would block here.
        let said = read(&fifo).unwrap_err().to_string();
        assert!(said.contains("fifo.toml") && said.contains("(it is a FIFO)"), "{said}");
        let big = dir.path().join("big.toml");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_CONFIG_BYTES + 1)
            .unwrap();
        let said = read(&big).unwrap_err().to_string();
        assert!(said.contains("big.toml") && said.contains("4194304 bytes"), "{said}");
    }
}
