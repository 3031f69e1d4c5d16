//! Building test executables on the host with `cargo test --no-run` and listing them
//! from cargo's JSON messages, so they can run in the VM (building under TCG is slow).

use std::ffi::{OsStr, OsString};
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::Deserialize;

/// Why the test executables could not be built or listed.
#[derive(Debug, thiserror::Error)]
pub enum CargoError {
    /// cargo could not be started.
    #[error("cannot run {cargo:?}: {source}")]
    Spawn {
        /// The cargo binary.
        cargo: OsString,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The build failed (cargo already printed why).
    #[error("`cargo test --no-run` failed ({0})")]
    BuildFailed(std::process::ExitStatus),
    /// A message line was not valid JSON.
    #[error("cargo message line {line}: {reason}")]
    BadMessage {
        /// 1-based line number.
        line: usize,
        /// The parse error.
        reason: String,
    },
    /// Reading cargo's output failed.
    #[error("reading cargo output: {0}")]
    Read(std::io::Error),
}

/// One test executable built by cargo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestExecutable {
    /// Package name (`daros-agent`).
    pub package: String,
    /// Target name (`daros_agent`, `vm_run`).
    pub target: String,
    /// Target kind (`lib`, `bin`, `test`, `bench`, `example`).
    pub kind: String,
    /// The executable.
    pub path: PathBuf,
    /// The package directory: cargo runs tests with this as cwd and `CARGO_MANIFEST_DIR`.
    pub manifest_dir: PathBuf,
}

#[derive(Deserialize)]
struct Message {
    reason: String,
    #[serde(default)]
    package_id: String,
    #[serde(default)]
    manifest_path: Option<PathBuf>,
    #[serde(default)]
    target: Option<Target>,
    #[serde(default)]
    profile: Option<Profile>,
    #[serde(default)]
    executable: Option<PathBuf>,
}

#[derive(Deserialize)]
struct Target {
    name: String,
    #[serde(default)]
    kind: Vec<String>,
}

#[derive(Deserialize)]
struct Profile {
    #[serde(default)]
    test: bool,
}

/// Package name from a package id: `path+file:///w/agent#daros-agent@0.1.0`,
/// `path+file:///w/agent#0.1.0` (name = last path segment) or `daros-agent 0.1.0 (...)`.
fn package_name(id: &str) -> String {
    if let Some((url, frag)) = id.rsplit_once('#') {
        return match frag.split_once('@') {
            Some((name, _)) => name.to_owned(),
            None => url.rsplit('/').next().unwrap_or(url).to_owned(),
        };
    }
    id.split_whitespace().next().unwrap_or(id).to_owned()
}

/// Parses cargo's `--message-format=json` stream into test executables, in build order,
/// without duplicates.
pub fn parse_messages(reader: impl BufRead) -> Result<Vec<TestExecutable>, CargoError> {
    let mut found: Vec<TestExecutable> = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(CargoError::Read)?;
        if !line.starts_with('{') {
            continue;
        }
        let msg: Message = serde_json::from_str(&line).map_err(|e| CargoError::BadMessage {
            line: i + 1,
            reason: e.to_string(),
        })?;
        if msg.reason != "compiler-artifact" || !msg.profile.is_some_and(|p| p.test) {
            continue;
        }
        let (Some(path), Some(target), Some(manifest)) =
            (msg.executable, msg.target, msg.manifest_path)
        else {
            continue;
        };
        if found.iter().any(|t| t.path == path) {
            continue;
        }
        found.push(TestExecutable {
            package: package_name(&msg.package_id),
            target: target.name,
            kind: target.kind.into_iter().next().unwrap_or_default(),
            manifest_dir: manifest.parent().map(PathBuf::from).unwrap_or_default(),
            path,
        });
    }
    Ok(found)
}

/// Whether `name` is one of the variables cargo sets for a crate it builds or
/// runs (its manifest, package, binaries, `OUT_DIR`), not a setting of cargo's
/// own. A cargo started from a test (nextest's or `cargo test`'s child) inherits
/// them, and build scripts that watch them (`ring`'s watches `CARGO_PKG_NAME`
/// and `CARGO_MANIFEST_DIR`) are then stale: every nested build recompiled ring
/// and all that depends on it (rustls, quinn, kube: 2.5 min on 2 cores), and the
/// next top-level build recompiled them back.
pub fn is_crate_env(name: &str) -> bool {
    const PREFIXES: [&str; 4] = [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_BIN_",
        "CARGO_CRATE_",
    ];
    const NAMES: [&str; 4] = [
        "OUT_DIR",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || NAMES.contains(&name)
}

/// `cargo` as a command with the crate variables of the process around it
/// removed ([`is_crate_env`]): a build from inside a test reuses what the
/// top-level build made.
pub fn cargo_command(cargo: &OsStr) -> Command {
    let mut cmd = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_crate_env) {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// Runs `cargo test --no-run --message-format=json-render-diagnostics <args>` (compiler
/// diagnostics still reach the terminal) and returns the test executables it built.
pub fn build_test_executables(
    cargo: &OsStr,
    args: &[OsString],
) -> Result<Vec<TestExecutable>, CargoError> {
    let mut child = cargo_command(cargo)
        .args([
            "test",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|source| CargoError::Spawn {
            cargo: cargo.to_owned(),
            source,
        })?;
    let parsed = match child.stdout.take() {
        Some(out) => parse_messages(std::io::BufReader::new(out)),
        None => Ok(Vec::new()),
    };
    let status = child.wait().map_err(CargoError::Read)?;
    if !status.success() {
        return Err(CargoError::BuildFailed(status));
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crates_own_variables_are_not_passed_to_a_nested_cargo() {
        for name in [
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_LINKS",
            "CARGO_BIN_EXE_darosd",
            "CARGO_CRATE_NAME",
            "OUT_DIR",
            "CARGO_TARGET_TMPDIR",
        ] {
            assert!(is_crate_env(name), "{name}");
        }
        // cargo's own settings stay.
        for name in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "CARGO_BUILD_JOBS",
            "CARGO_PROFILE_DEV_DEBUG",
            "PATH",
        ] {
            assert!(!is_crate_env(name), "{name}");
        }
        // Under `cargo test` this very process has them; the command drops them.
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        let cmd = cargo_command(OsStr::new("cargo"));
        let removed: Vec<_> = cmd
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert!(removed.iter().any(|k| k == "CARGO_PKG_NAME"), "{removed:?}");
        assert!(
            removed.iter().any(|k| k == "CARGO_MANIFEST_DIR"),
            "{removed:?}"
        );
        assert!(!removed.iter().any(|k| k == "PATH"), "{removed:?}");
    }

    #[test]
    fn test_artifacts_are_listed_and_others_skipped() {
        let msgs = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/agent#daros-agent@0.1.0","manifest_path":"/w/agent/Cargo.toml","target":{"kind":["lib"],"name":"daros_agent"},"profile":{"test":true},"executable":"/w/target/debug/deps/daros_agent-1"}
{"reason":"compiler-artifact","package_id":"path+file:///w/agent#daros-agent@0.1.0","manifest_path":"/w/agent/Cargo.toml","target":{"kind":["lib"],"name":"daros_agent"},"profile":{"test":false},"executable":null}
{"reason":"compiler-artifact","package_id":"path+file:///w/bpf-tests#0.1.0","manifest_path":"/w/bpf-tests/Cargo.toml","target":{"kind":["test"],"name":"vm_run"},"profile":{"test":true},"executable":"/w/target/debug/deps/vm_run-2"}
{"reason":"compiler-artifact","package_id":"path+file:///w/agent#daros-agent@0.1.0","manifest_path":"/w/agent/Cargo.toml","target":{"kind":["lib"],"name":"daros_agent"},"profile":{"test":true},"executable":"/w/target/debug/deps/daros_agent-1"}
{"reason":"build-finished","success":true}
not json: cargo warnings can interleave"#;
        let t = parse_messages(msgs.as_bytes()).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            (
                t[0].package.as_str(),
                t[0].kind.as_str(),
                t[0].manifest_dir.to_str()
            ),
            ("daros-agent", "lib", Some("/w/agent"))
        );
        assert_eq!(
            (t[1].package.as_str(), t[1].target.as_str()),
            ("bpf-tests", "vm_run")
        );
    }

    #[test]
    fn malformed_json_names_the_line() {
        let err = parse_messages("{\"reason\":\n".as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn old_style_package_ids_work() {
        assert_eq!(
            package_name("daros-agent 0.1.0 (path+file:///w/agent)"),
            "daros-agent"
        );
    }
}
