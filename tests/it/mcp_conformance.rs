//! The official MCP conformance suite's server scenarios against `fusebox
//! serve`'s `/mcp`, with the suite's reference server behind it, over HTTP
//! (`url`) and over stdio (`command`): `tests/mcp_conformance/run` runs them
//! and fails if a scenario that passes against the reference server itself
//! fails through fusebox.
//!
//! It needs `npm ci` in `tests/mcp_conformance` (`.ci/run` does it); without
//! its `node_modules` the test prints a notice and passes, unless
//! FUSEBOX_REQUIRE_CONFORMANCE is set, as in CI.

use std::path::Path;
use std::process::Command;

#[test]
fn mcp_conformance_suite_through_fusebox() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_conformance");
    if !dir.join("node_modules").is_dir() {
        if std::env::var_os("FUSEBOX_REQUIRE_CONFORMANCE").is_some() {
            panic!(
                "FUSEBOX_REQUIRE_CONFORMANCE is set but {} has no node_modules (run `npm ci` there)",
                dir.display()
            );
        }
        eprintln!("notice: tests/mcp_conformance has no node_modules; the MCP conformance suite was skipped");
        return;
    }
    let out = Command::new(dir.join("run"))
        .arg(env!("CARGO_BIN_EXE_fusebox"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", dir.join("run").display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tests/mcp_conformance/run failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    print!("{stdout}");
}
