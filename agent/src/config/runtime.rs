//! `[runtime]`: the node executor and its runtime adapters (process runtime
//! always; Kubernetes when enabled).

use std::path::{Path, PathBuf};
use std::time::Duration;

use daros_coordinator::Bytes;
use serde::{Deserialize, Serialize};

use super::{ConfigError, HumanDuration};

/// `[runtime]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeSection {
    /// Run the executor (false: the control plane accepts work and runs nothing).
    pub enabled: bool,
    /// Executor and process-runtime state (records, logs); `<agent.data_dir>/runtime` when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<PathBuf>,
    /// Volumes of the `storage` trait (image files and their mount points;
    /// workload users traverse it, so it is not under the data directory);
    /// `/var/lib/daros-volumes` when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_dir: Option<PathBuf>,
    /// The `daros-shim` binary; beside `darosd` when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shim_path: Option<PathBuf>,
    /// Rotate a workload's log file before it passes this size (`"10Mi"`), unless its RuntimeSpec says otherwise.
    pub log_max_size: Bytes,
    /// Log files kept per workload, the current one included.
    pub log_max_files: u32,
    /// Grace between SIGTERM and SIGKILL when a workload is stopped.
    pub stop_grace: HumanDuration,
    /// Add the Kubernetes adapter (pods through the API server of `kubeconfig`,
    /// `KUBECONFIG`, or the in-cluster service account).
    pub kubernetes: bool,
    /// Kubeconfig file for the Kubernetes adapter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// This node's name in Kubernetes (pods are bound to it); the host name
    /// when unset (the kubelet's default; a DaemonSet sets it from spec.nodeName).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes_node: Option<String>,
    /// The kubelet's `--cgroup-root`: where `kubepods` lives in each hierarchy.
    pub kubernetes_cgroup_root: String,
    /// Kubernetes mode: enforce MinimalReservationPolicy and QoSProfile
    /// objects on the pods bound to this node (API server as for
    /// `kubernetes`; works with `enabled = false`). Needs QoS enforcement.
    pub kubernetes_policies: bool,
    /// How workload shims start: `systemd` (transient units in `slice`,
    /// outside the agent's own sandbox), `direct` (forked by darosd, inside
    /// it), or `auto` (systemd when it runs the machine).
    pub launcher: LauncherChoice,
    /// The systemd slice of the shims' transient units.
    pub slice: String,
}

/// `runtime.launcher`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LauncherChoice {
    /// systemd when it runs the machine, else direct.
    Auto,
    /// Forked by darosd.
    Direct,
    /// Transient systemd units (refused at start when systemd does not run the machine).
    Systemd,
}

impl Default for RuntimeSection {
    fn default() -> Self {
        RuntimeSection {
            enabled: true,
            state_dir: None,
            volume_dir: None,
            shim_path: None,
            log_max_size: Bytes::from_mib(10),
            log_max_files: 5,
            stop_grace: HumanDuration(Duration::from_secs(10)),
            kubernetes: false,
            kubeconfig: None,
            kubernetes_node: None,
            kubernetes_cgroup_root: "/".into(),
            kubernetes_policies: false,
            launcher: LauncherChoice::Auto,
            slice: "daros.slice".into(),
        }
    }
}

impl RuntimeSection {
    /// The state directory for agent data dir `data_dir`.
    pub fn state_dir(&self, data_dir: &Path) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(|| data_dir.join("runtime"))
    }

    /// The volume directory.
    pub fn volume_dir(&self) -> PathBuf {
        self.volume_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/var/lib/daros-volumes"))
    }
}

fn absolute(key: &str, p: &Option<PathBuf>) -> Result<(), ConfigError> {
    match p {
        Some(p) if !p.is_absolute() => Err(ConfigError::invalid(
            key,
            format!(
                "must be an absolute path, got {:?}",
                p.display().to_string()
            ),
        )),
        _ => Ok(()),
    }
}

/// Checks `[runtime]`.
pub fn validate(r: &RuntimeSection) -> Result<(), ConfigError> {
    absolute("runtime.state_dir", &r.state_dir)?;
    absolute("runtime.volume_dir", &r.volume_dir)?;
    absolute("runtime.shim_path", &r.shim_path)?;
    absolute("runtime.kubeconfig", &r.kubeconfig)?;
    if r.log_max_size.0 < 4096 {
        return Err(ConfigError::invalid(
            "runtime.log_max_size",
            format!("must be at least 4Ki, got {}", r.log_max_size),
        ));
    }
    if !(1..=100).contains(&r.log_max_files) {
        return Err(ConfigError::invalid(
            "runtime.log_max_files",
            format!("must be 1..=100, got {}", r.log_max_files),
        ));
    }
    if r.stop_grace.0 > Duration::from_secs(600) {
        return Err(ConfigError::invalid(
            "runtime.stop_grace",
            format!("must be at most 10m, got \"{}\"", r.stop_grace),
        ));
    }
    let slice_ok = r.slice.len() > ".slice".len()
        && r.slice.ends_with(".slice")
        && r.slice
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '.' | '-' | '\\'));
    if !slice_ok {
        return Err(ConfigError::invalid(
            "runtime.slice",
            format!(
                "must be a systemd slice name such as \"daros.slice\", got {:?}",
                r.slice
            ),
        ));
    }
    if r.kubeconfig.is_some() && !r.kubernetes && !r.kubernetes_policies {
        return Err(ConfigError::invalid(
            "runtime.kubeconfig",
            "is set but neither runtime.kubernetes nor runtime.kubernetes_policies is on",
        ));
    }
    if let Some(n) = &r.kubernetes_node
        && !is_dns_subdomain(n)
    {
        return Err(ConfigError::invalid(
            "runtime.kubernetes_node",
            format!(
                "{n:?} is not a Kubernetes node name (lowercase DNS subdomain, at most 253 characters)"
            ),
        ));
    }
    if !r.kubernetes_cgroup_root.starts_with('/')
        || r.kubernetes_cgroup_root.split('/').any(|c| c == "..")
    {
        return Err(ConfigError::invalid(
            "runtime.kubernetes_cgroup_root",
            format!(
                "must be an absolute cgroup path without \"..\" (the kubelet's --cgroup-root), got {:?}",
                r.kubernetes_cgroup_root
            ),
        ));
    }
    Ok(())
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_bad_values_name_their_key() {
        assert!(validate(&RuntimeSection::default()).is_ok());
        type Case = (fn(&mut RuntimeSection), &'static str);
        let cases: Vec<Case> = vec![
            (|r| r.state_dir = Some("rel".into()), "runtime.state_dir"),
            (|r| r.shim_path = Some("shim".into()), "runtime.shim_path"),
            (|r| r.log_max_size = Bytes(100), "runtime.log_max_size"),
            (|r| r.log_max_files = 0, "runtime.log_max_files"),
            (
                |r| r.stop_grace = HumanDuration(Duration::from_secs(3600)),
                "runtime.stop_grace",
            ),
            (|r| r.kubeconfig = Some("/k".into()), "runtime.kubeconfig"),
            (
                |r| r.kubernetes_node = Some("Node_A".into()),
                "runtime.kubernetes_node",
            ),
            (
                |r| r.kubernetes_cgroup_root = "kube".into(),
                "runtime.kubernetes_cgroup_root",
            ),
            (
                |r| r.kubernetes_cgroup_root = "/a/../b".into(),
                "runtime.kubernetes_cgroup_root",
            ),
        ];
        for (f, key) in cases {
            let mut r = RuntimeSection::default();
            f(&mut r);
            assert_eq!(validate(&r).unwrap_err().key(), Some(key));
        }
        let r: RuntimeSection =
            toml::from_str("log_max_size = \"1Mi\"\nstop_grace = \"3s\"").unwrap();
        assert_eq!(r.log_max_size, Bytes::from_mib(1));
        assert_eq!(r.stop_grace.0, Duration::from_secs(3));
        assert_eq!(
            r.state_dir(Path::new("/var/lib/daros")),
            PathBuf::from("/var/lib/daros/runtime")
        );
    }
}
