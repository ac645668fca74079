//! The container image (`docs/deploy/Containerfile`, built by
//! `docs/deploy/image` from the binary under test): its entrypoint, run by
//! `buildah run --isolation chroot` as the image declares it, serves a
//! call through a provider whose key is a mounted file, as a user of its
//! own that can write nowhere in the image, and drains on SIGTERM. Needs
//! buildah (and root); without it the test prints a notice and passes,
//! unless FUSEBOX_REQUIRE_BUILDAH is set (as `.ci/run` does).

use crate::common::strict::{Strict, ANSWER};
use crate::common::Serve;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// An image and a working container made from it, both removed on drop.
struct Image {
    tag: String,
    container: String,
}

impl Image {
    /// Builds the image from the binary under test, or None (with a notice)
    /// without buildah.
    fn build() -> Option<Image> {
        if Command::new("buildah").arg("--version").output().is_err() {
            assert!(
                std::env::var_os("FUSEBOX_REQUIRE_BUILDAH").is_none(),
                "FUSEBOX_REQUIRE_BUILDAH is set but buildah cannot run"
            );
            eprintln!("notice: buildah is not on PATH; the image test was skipped");
            return None;
        }
        let tag = format!("localhost/fusebox-it:{}", std::process::id());
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let built = Command::new(root.join("docs/deploy/image"))
            .args([env!("CARGO_BIN_EXE_fusebox"), &tag])
            .output()
            .expect("run docs/deploy/image");
        assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
        let container = format!("fusebox-it-{}", std::process::id());
        let image = Image { tag, container };
        buildah(&["from", "--quiet", "--name", &image.container, &image.tag]);
        Some(image)
    }

    /// The image's config (`Entrypoint`, `Cmd`, `Env`, `User`, …).
    fn config(&self) -> Value {
        let out = buildah(&["inspect", "--type", "image", &self.tag]);
        let image: Value = serde_json::from_str(&out).unwrap();
        image["OCIv1"]["config"].clone()
    }

    /// Where the container's root filesystem is mounted on this host.
    fn mounted(&self) -> PathBuf {
        PathBuf::from(buildah(&["mount", &self.container]).trim())
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("buildah").args(["rm", &self.container]).output();
        let _ = Command::new("buildah").args(["rmi", "--force", &self.tag]).output();
    }
}

/// Runs `buildah args`; its stdout.
fn buildah(args: &[&str]) -> String {
    let out = Command::new("buildah").args(args).output().expect("run buildah");
    assert!(
        out.status.success(),
        "buildah {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The process named `fusebox` that descends from `ancestor` (the one the
/// runtime started inside the container), if any yet.
fn fusebox_under(ancestor: u32) -> Option<u32> {
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit(')').next()?.split_whitespace().nth(1)?.parse().ok()
    };
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        if comm.trim() != "fusebox" {
            return None;
        }
        let mut p = pid;
        while let Some(up) = parent(p).filter(|up| *up > 1) {
            if up == ancestor {
                return Some(pid);
            }
            p = up;
        }
        None
    })
}

/// The effective uid a process runs as.
fn uid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_serves_as_its_own_user_with_a_mounted_config_and_key_and_drains_on_sigterm() {
    let Some(image) = tokio::task::spawn_blocking(Image::build).await.unwrap() else {
        return;
    };
    let config = image.config();
    assert_eq!(config["User"], "10001:10001");
    let env: Vec<&str> = config["Env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(env.contains(&"FUSEBOX_LOG_DIR=-"), "{env:?}");
    // Nothing in the image is the serving user's or writable by all.
    let rootfs = image.mounted();
    for entry in walkdir(&rootfs) {
        let meta = std::fs::symlink_metadata(&entry).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert!(
            meta.uid() == 0 && (meta.file_type().is_symlink() || meta.mode() & 0o022 == 0),
            "{} is writable to others than root",
            entry.display()
        );
    }

    // The provider's key mounted as a file, the config as a file.
    let upstream = Strict::start().await;
    let hold = Arc::new(Notify::new());
    upstream.state.stream.lock().hold = Some(hold.clone());
    let dir = tempfile::tempdir().unwrap();
    let (etc, secrets) = (dir.path().join("etc"), dir.path().join("secrets"));
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("openai"), "sk-test\n").unwrap();
    std::fs::write(
        etc.join("fusebox.toml"),
        format!(
            "[providers.openai]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\n\
             api_key_file = \"/run/secrets/openai\"\n\
             [models.gpt-4o]\nprovider = \"openai\"\ninput_per_m = 2.5\noutput_per_m = 10.0\n\
             [routes.default]\nchain = [\"gpt-4o\"]\n",
            upstream.base()
        ),
    )
    .unwrap();
    for f in [etc.join("fusebox.toml"), secrets.join("openai")] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    for d in [dir.path(), &etc, &secrets] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    // The image's own entrypoint and command; only the address differs
    // (loopback, a free port: the chroot shares the host's network).
    let mut argv: Vec<String> = Vec::new();
    for part in ["Entrypoint", "Cmd"] {
        argv.extend(
            config[part]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string()),
        );
    }
    let mut run = Command::new("buildah");
    run.args(["run", "--isolation", "chroot", "--env", "FUSEBOX_LISTEN=127.0.0.1:0"])
        .arg("--volume")
        .arg(format!("{}:/etc/fusebox:ro", etc.display()))
        .arg("--volume")
        .arg(format!("{}:/run/secrets:ro", secrets.display()))
        .args([&image.container, "--"])
        .args(&argv)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut serve = tokio::task::spawn_blocking(move || Serve::started(run.spawn().expect("run buildah run")))
        .await
        .unwrap();
    let inside = fusebox_under(serve.pid()).expect("fusebox runs under buildah run");
    assert_eq!(uid_of(inside), 10001);

    // A whole call and a streamed one in flight, then SIGTERM to the
    // container's process, as the runtime sends it.
    let calls: Vec<_> = [false, true]
        .into_iter()
        .map(|stream| {
            let url = format!("{}/v1/chat/completions", serve.base);
            tokio::spawn(async move {
                let body = json!({"model": "default", "stream": stream,
                                  "messages": [{"role": "user", "content": "Where is order #38100?"}]});
                let r = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
                (stream, r.status().as_u16(), r.text().await.unwrap())
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while upstream.received().len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the calls did not reach the upstream"
        );
        tokio::time::sleep(Duration::from_millis(10)).await; // another process's progress
    }
    let received = upstream.received();
    assert!(
        received
            .iter()
            .all(|r| r.headers.get("authorization").map(|v| v.as_bytes()) == Some(b"Bearer sk-test")),
        "the mounted key reached the provider"
    );
    let sent = Command::new("kill")
        .args(["-TERM", &inside.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    serve.until_closed().await;
    let release = crate::common::strict::release(hold);
    for call in calls {
        let (stream, status, text) = call.await.unwrap();
        assert_eq!(status, 200, "{text}");
        if stream {
            assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
        } else {
            assert!(text.contains(ANSWER), "{text}");
        }
    }
    release.abort();
    let exit = tokio::task::spawn_blocking(move || serve.wait()).await.unwrap();
    assert!(exit.success(), "the container's process drained and exited 0: {exit}");
}

/// Every path under `root` (not following links).
fn walkdir(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if std::fs::symlink_metadata(&out[i]).unwrap().is_dir() {
            let children: Vec<PathBuf> = std::fs::read_dir(&out[i]).unwrap().map(|e| e.unwrap().path()).collect();
            out.extend(children);
        }
        i += 1;
    }
    out
}
