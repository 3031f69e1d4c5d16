//! Every configuration error through the real binary: `darosd --check-config`
//! exits with status 2 and names the key and the reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn darosd(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_darosd"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("DAROS_")) {
        cmd.env_remove(k);
    }
    cmd.arg("--check-config")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn with_file(content: &str) -> (tempfile::TempDir, String) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("agent.toml");
    std::fs::write(&p, content).unwrap();
    let s = p.to_str().unwrap().to_string();
    (d, s)
}

fn refused(out: &Output, expect: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    for e in expect {
        assert!(err.contains(e), "{e:?} not in {err:?}");
    }
}

#[test]
fn no_configuration_at_all_runs_with_defaults() {
    let out = darosd(&[], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("interval = \"1s\""), "{text}");
    assert!(text.contains("data_dir = \"/var/lib/daros\""));
    assert!(text.contains("socket = \"/run/daros/agent.sock\""));
}

#[test]
fn example_configuration_is_accepted_and_overridden_in_order() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/agent.toml");
    let out = darosd(
        &["--config", example, "--interval", "3s"],
        &[
            ("DAROS_SENSING_INTERVAL", "2s"),
            ("DAROS_AGENT_LOG_LEVEL", "debug"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("interval = \"3s\""), "flag wins: {text}");
    assert!(
        text.contains("log_level = \"debug\""),
        "env applies: {text}"
    );
}

#[test]
fn unknown_keys_are_refused() {
    let (_d, f) = with_file("verbose = true\n");
    refused(
        &darosd(&["--config", &f], &[]),
        &["verbose: unknown key `verbose`", "agent.toml"],
    );
    let (_d, f) = with_file("[discovery]\nkubernetes = true\npods = false\n");
    refused(
        &darosd(&["--config", &f], &[]),
        &["discovery.pods: unknown key `pods`, expected one of"],
    );
    refused(
        &darosd(&[], &[("DAROS_API_PORT", "80")]),
        &["api.port: unknown key `port`", "DAROS_API_PORT"],
    );
}

#[test]
fn wrong_types_are_refused() {
    let (_d, f) = with_file("[discovery]\nsystemd = \"yes please\"\n");
    refused(
        &darosd(&["--config", &f], &[]),
        &["discovery.systemd: invalid type: string \"yes please\", expected a boolean"],
    );
    let (_d, f) = with_file("[sensing]\nexclude_devices = \"loop\"\n");
    refused(
        &darosd(&["--config", &f], &[]),
        &["sensing.exclude_devices: invalid type: string \"loop\", expected a sequence"],
    );
}

#[test]
fn out_of_range_values_are_refused() {
    let (_d, f) = with_file("[sensing]\ninterval = \"0s\"\n");
    refused(
        &darosd(&["--config", &f], &[]),
        &["sensing.interval: must be between 100ms and 60s, got \"0s\""],
    );
    let (_d, f) = with_file("[discovery]\nmax_workloads = 0\n");
    refused(
        &darosd(&["--config", &f], &[]),
        &["discovery.max_workloads: must be between 1 and 100000, got 0"],
    );
    refused(
        &darosd(&["--metrics-listen", "everywhere"], &[]),
        &[
            "metrics.listen: must be an IP address and port",
            "--metrics-listen",
        ],
    );
    refused(
        &darosd(&["--managed-root", "/sys/fs/cgroup/x"], &[]),
        &["cgroup.managed_root: must be relative"],
    );
    refused(
        &darosd(&["--socket", "relative.sock"], &[]),
        &["api.socket: must be an absolute path"],
    );
}

#[test]
fn bad_environment_values_are_refused() {
    refused(
        &darosd(&[], &[("DAROS_SENSING_INTERVAL", "fast")]),
        &[
            "sensing.interval: invalid duration \"fast\"",
            "(from env DAROS_SENSING_INTERVAL)",
        ],
    );
    refused(
        &darosd(&[], &[("DAROS_DISCOVERY_MAX_WORKLOADS", "-5")]),
        &["discovery.max_workloads", "DAROS_DISCOVERY_MAX_WORKLOADS"],
    );
    refused(
        &darosd(&[], &[("DAROS_NOSECTION", "1")]),
        &["DAROS_NOSECTION does not name a configuration key"],
    );
}

#[test]
fn missing_explicit_config_file_is_an_error() {
    refused(
        &darosd(&["--config", "/nonexistent/agent.toml"], &[]),
        &["config file /nonexistent/agent.toml", "No such file"],
    );
    refused(
        &darosd(&[], &[("DAROS_CONFIG", "/nonexistent/env.toml")]),
        &["/nonexistent/env.toml"],
    );
}

#[test]
fn invalid_toml_is_refused_with_position() {
    let (_d, f) = with_file("[agent]\ndata_dir = /var/lib\n");
    refused(&darosd(&["--config", &f], &[]), &["invalid TOML", "line 2"]);
}

/// A join token whose role is not `mesh.role` is refused at start, naming the fix
/// (a client token used to join silently as a client).
#[test]
fn a_join_token_of_another_role_is_refused() {
    let token = |role| {
        daros_gossip::pki::JoinToken {
            role,
            secret: [1; 32],
            ca_fingerprint: [2; 32],
        }
        .to_string()
    };
    let client = token(daros_gossip::Role::Client);
    let out = darosd(&["--join", &client, "--server", "127.0.0.1:7100"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "mesh.role: the join token admits a client agent but mesh.role is \"server\"; \
             set mesh.role = \"client\" (DAROS_MESH_ROLE=client) or join with the server token"
        ),
        "{err}"
    );
    // With the matching role it is accepted.
    let out = darosd(
        &["--join", &client, "--server", "127.0.0.1:7100"],
        &[("DAROS_MESH_ROLE", "client")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = token(daros_gossip::Role::Server);
    let out = darosd(
        &["--join", &server, "--server", "127.0.0.1:7100"],
        &[("DAROS_MESH_ROLE", "client")],
    );
    refused(
        &out,
        &[
            "mesh.role",
            "admits a server agent",
            "mesh.role = \"server\"",
        ],
    );
}
