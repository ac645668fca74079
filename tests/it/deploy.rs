//! The Kubernetes manifests (`docs/deploy/kubernetes`): rendered by
//! `kubectl kustomize`, validated strictly against Kubernetes 1.30's
//! schemas (`kubernetes-validate`, from the test venv), and held to what
//! fusebox and its image need: probes on the endpoints that mean liveness
//! and readiness, a grace period that covers preStop and the drain, the
//! image's user and port, a config fusebox loads, arguments it parses,
//! selectors that match the pods. Needs kubectl and the venv's Python;
//! without them the test prints a notice and passes, unless
//! FUSEBOX_REQUIRE_KUBECTL (and FUSEBOX_REQUIRE_SDK) are set, as in CI.

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `kubectl kustomize` of the base, or None without kubectl.
fn rendered() -> Option<String> {
    let out = match Command::new("kubectl")
        .arg("kustomize")
        .arg(root().join("docs/deploy/kubernetes"))
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var_os("FUSEBOX_REQUIRE_KUBECTL").is_none(),
                "FUSEBOX_REQUIRE_KUBECTL is set but kubectl cannot run: {e}"
            );
            eprintln!("notice: kubectl is not on PATH; the manifests test was skipped");
            return None;
        }
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8(out.stdout).unwrap())
}

/// Runs `python args`, with `stdin`; its stdout.
fn python(python: &str, args: &[&str], stdin: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(python)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The YAML documents of `yaml`, as JSON.
fn documents(py: &str, yaml: &str) -> Vec<Value> {
    let json = python(
        py,
        &[
            "-c",
            "import sys, json, yaml; print(json.dumps(list(yaml.safe_load_all(sys.stdin))))",
        ],
        yaml,
    );
    serde_json::from_str(&json).unwrap()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

/// The value of `NAME VALUE` on a Containerfile line starting `word`.
fn containerfile(word: &str) -> String {
    let text = std::fs::read_to_string(root().join("docs/deploy/Containerfile")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(word))
        .unwrap_or_else(|| panic!("no {word}"));
    line[word.len()..].trim().to_string()
}

#[test]
fn the_manifests_render_validate_and_fit_fusebox_and_its_image() {
    let Some(yaml) = rendered() else { return };
    let Some(py) = crate::sdk::python() else { return };
    // Strictly valid for the oldest Kubernetes they are for (1.30: preStop's
    // `sleep`), unknown fields refused.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let said = python(
        &py,
        &[
            "-m",
            "kubernetes_validate",
            "--strict",
            "-k",
            "1.30",
            file.to_str().unwrap(),
        ],
        "",
    );
    for kind in ["configmap", "service", "deployment", "poddisruptionbudget"] {
        assert!(said.contains(&format!("passed for resource {kind}/")), "{said}");
    }

    let docs = documents(&py, &yaml);
    let deployment = of_kind(&docs, "Deployment");
    let pod = &deployment["spec"]["template"];
    let labels = &pod["metadata"]["labels"];
    assert_eq!(deployment["spec"]["selector"]["matchLabels"], *labels);
    assert_eq!(of_kind(&docs, "Service")["spec"]["selector"], *labels);
    assert_eq!(
        of_kind(&docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        *labels
    );
    let spec = &pod["spec"];
    let c = &spec["containers"][0];

    // Probes: liveness and startup on /healthz, readiness on /readyz, on
    // the port the image listens on.
    for (probe, path) in [
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], "http", "{probe}");
    }
    let port = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "http")
        .unwrap();
    let text = std::fs::read_to_string(root().join("docs/deploy/Containerfile")).unwrap();
    let image_port = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("FUSEBOX_LISTEN=0.0.0.0:"))
        .expect("the image listens on every address");
    assert_eq!(port["containerPort"].as_u64().unwrap().to_string(), image_port);
    assert_eq!(containerfile("EXPOSE"), image_port);

    // The image's user, unprivileged and read-only.
    let user = containerfile("USER");
    assert_eq!(
        format!(
            "{}:{}",
            spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]
        ),
        user
    );
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);

    // The arguments parse (`--help` after them answers only if they do),
    // and the drain fits in the grace period after preStop.
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let parsed = Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args(&args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        parsed.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    let drain = args
        .iter()
        .position(|a| *a == "--drain-timeout")
        .map(|i| humantime::parse_duration(args[i + 1]).unwrap())
        .expect("the drain timeout is stated");
    let pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"].as_u64().unwrap();
    let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(
        grace > pre_stop + drain.as_secs(),
        "a grace period of {grace} s cuts preStop's {pre_stop} s and a {drain:?} drain"
    );

    // The config it is given is the ConfigMap's, and fusebox loads it.
    let config_at = args.iter().position(|a| *a == "--config").map(|i| args[i + 1]).unwrap();
    let (dir_at, file_name) = config_at.rsplit_once('/').unwrap();
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == dir_at)
        .unwrap();
    let volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    let map = of_kind(&docs, "ConfigMap");
    assert_eq!(volume["configMap"]["name"], map["metadata"]["name"]);
    let toml = map["data"][file_name]
        .as_str()
        .expect("the ConfigMap holds the config file");
    let cfg = dir.path().join(file_name);
    std::fs::write(&cfg, toml).unwrap();
    let cfg = fusebox::config::Config::load(&cfg).unwrap_or_else(|e| panic!("{e:#}"));
    // Its keys are files of the mounted Secret.
    let secrets = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "provider-keys")
        .unwrap();
    for (name, p) in &cfg.providers {
        let file = p
            .api_key_file
            .as_ref()
            .unwrap_or_else(|| panic!("providers.{name} reads its key from a file"));
        assert!(
            file.starts_with(secrets["mountPath"].as_str().unwrap()),
            "{}",
            file.display()
        );
    }

    // The ServiceMonitor scrapes the Service's port with the pods' labels.
    let monitor =
        std::fs::read_to_string(root().join("docs/deploy/kubernetes/monitoring/servicemonitor.yaml")).unwrap();
    let monitor = &documents(&py, &monitor)[0];
    assert_eq!(monitor["spec"]["selector"]["matchLabels"], *labels);
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http");
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
}
