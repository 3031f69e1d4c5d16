//! The runtime security baseline (seed 000 §13.2.2, §7.3.3, §4.4.1): what a
//! workload may do once it runs. Policies set the rules ([`SecurityRules`],
//! merged tighter-wins like the other policy fields); a workload asks for
//! what it needs ([`WorkloadSecurity`]); admission refuses a request the
//! rules forbid, naming the rule and the policy; every adapter enforces the
//! resolved [`SecurityContext`] on every process and container it starts.

use crate::field::{FieldError, join};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Linux capabilities by number, named as Kubernetes names them (no `CAP_`).
pub const CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// What a container runtime grants by default (containerd's and Docker's
/// set): a workload keeps these, and only these unless it adds one a policy
/// allows.
pub const DEFAULT_CAPABILITIES: [&str; 14] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "NET_RAW",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// One Linux capability (`NET_BIND_SERVICE`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Capability(String);

impl Capability {
    /// Its number (`CAP_CHOWN` = 0).
    pub fn number(&self) -> u32 {
        CAPABILITIES
            .iter()
            .position(|c| *c == self.0)
            .map_or(u32::MAX, |i| i as u32)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.0
    }

    /// The default set.
    pub fn defaults() -> Vec<Capability> {
        DEFAULT_CAPABILITIES
            .iter()
            .map(|c| Capability((*c).to_string()))
            .collect()
    }
}

impl TryFrom<String> for Capability {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let name = s.strip_prefix("CAP_").unwrap_or(&s).to_ascii_uppercase();
        if CAPABILITIES.contains(&name.as_str()) {
            Ok(Capability(name))
        } else {
            Err(format!(
                "unknown capability {s:?}; one of {}",
                CAPABILITIES.join(", ")
            ))
        }
    }
}

impl From<Capability> for String {
    fn from(c: Capability) -> String {
        c.0
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The system-call filter a workload runs under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeccompProfile {
    /// Refuses the calls a workload has no business making (module and
    /// kexec loading, mount, namespaces, ptrace, bpf, keyrings, clock and
    /// swap changes, reboot): they fail with EPERM.
    #[default]
    RuntimeDefault,
    /// No filter.
    Unconfined,
}

/// The baseline rules one policy sets; every field optional, merged across
/// scopes with the tighter value winning.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct SecurityRules {
    /// Privileged workloads (every capability, no filter) allowed (default
    /// false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_privileged: Option<bool>,
    /// Workloads must not run as root (default false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    /// Users (names or uids) workloads may run as (default: any).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_users: Option<Vec<String>>,
    /// Groups (names or gids) workloads may run as (default: any).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_groups: Option<Vec<String>>,
    /// Capabilities a workload may add to the default set (default: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_capabilities: Option<Vec<Capability>>,
    /// `no_new_privs`: setuid binaries and file capabilities grant nothing
    /// (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_new_privileges: Option<bool>,
    /// System-call filter (default RuntimeDefault; Unconfined only when no
    /// scope asks for RuntimeDefault).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<SeccompProfile>,
    /// The filesystem is read-only for workloads except their
    /// `writablePaths` (default false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_root: Option<bool>,
    /// Where workloads may ask to write (path prefixes; default: anywhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_writable_paths: Option<Vec<String>>,
    /// The host's network, PID and IPC namespaces (a process workload always
    /// runs in them; a pod's `hostNetwork`/`hostPID`/`hostIPC`) allowed
    /// (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_host_namespaces: Option<bool>,
    /// Pod `hostPath` volumes allowed (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_host_paths: Option<bool>,
}

impl SecurityRules {
    /// Checks the values; `path` is the rules' path.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (field, list) in [
            ("allowedUsers", &self.allowed_users),
            ("allowedGroups", &self.allowed_groups),
        ] {
            if list.as_ref().is_some_and(Vec::is_empty) {
                errs.push(FieldError::new(
                    join(path, field),
                    "an empty list allows nobody; leave it out to allow every one",
                ));
            }
        }
        if let Some(ps) = &self.allowed_writable_paths {
            for (i, p) in ps.iter().enumerate() {
                if !p.starts_with('/') {
                    errs.push(FieldError::new(
                        format!("{}[{i}]", join(path, "allowedWritablePaths")),
                        format!("{p:?} is not an absolute path"),
                    ));
                }
            }
        }
        errs
    }
}

/// What a workload asks for (`security` on the workload).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadSecurity {
    /// User (name or uid) it runs as; for a process workload also
    /// `runtimeSpec.user` (the two must agree).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<String>,
    /// Group (name or gid); for a process workload also `runtimeSpec.group`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<String>,
    /// Every capability and no system-call filter.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
    /// Capabilities beyond the default set.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub add_capabilities: Vec<Capability>,
    /// Capabilities of the default set it does without (`[ALL]` is not a
    /// name: list them, or ask for none with `dropAllCapabilities`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drop_capabilities: Vec<Capability>,
    /// Keeps no capability at all (besides what it adds).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub drop_all_capabilities: bool,
    /// Where it writes when the filesystem is otherwise read-only (absolute
    /// paths; with `readOnlyRoot` from a policy, or its own).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub writable_paths: Vec<String>,
    /// Asks for a read-only filesystem (besides `writablePaths`) itself.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub read_only_root: bool,
    /// System-call filter it asks for (Unconfined only where policies allow).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<SeccompProfile>,
}

impl WorkloadSecurity {
    /// True when nothing is asked.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Checks the values; `path` is the block's path.
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, p) in self.writable_paths.iter().enumerate() {
            if !p.starts_with('/') {
                errs.push(FieldError::new(
                    format!("{}[{i}]", join(path, "writablePaths")),
                    format!("{p:?} is not an absolute path"),
                ));
            }
        }
        if self.run_as_user.as_deref() == Some("") {
            errs.push(FieldError::new(
                join(path, "runAsUser"),
                "must not be empty",
            ));
        }
        errs
    }
}

/// What the adapter enforces on one process or container (resolved at
/// admission from the workload's request and the policies).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityContext {
    /// Every capability, no filter.
    pub privileged: bool,
    /// User to run as, when the workload names one here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<String>,
    /// Group to run as, when the workload names one here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_group: Option<String>,
    /// Refuse to start as root (the adapter checks the user it resolved).
    pub run_as_non_root: bool,
    /// Capabilities kept in the bounding, permitted and effective sets.
    pub capabilities: Vec<Capability>,
    /// `PR_SET_NO_NEW_PRIVS`.
    pub no_new_privileges: bool,
    /// System-call filter.
    pub seccomp: SeccompProfile,
    /// `Some`: the filesystem is read-only except these paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable_paths: Option<Vec<String>>,
}

impl Default for SecurityContext {
    fn default() -> Self {
        Self {
            privileged: false,
            run_as_user: None,
            run_as_group: None,
            run_as_non_root: false,
            capabilities: Capability::defaults(),
            no_new_privileges: true,
            seccomp: SeccompProfile::RuntimeDefault,
            writable_paths: None,
        }
    }
}

impl SecurityContext {
    /// One line for `describe`.
    pub fn describe(&self) -> String {
        if self.privileged {
            return "privileged (every capability, no system-call filter)".into();
        }
        let mut parts = Vec::new();
        if let Some(u) = &self.run_as_user {
            parts.push(format!("user {u}"));
        }
        if let Some(g) = &self.run_as_group {
            parts.push(format!("group {g}"));
        }
        if self.run_as_non_root {
            parts.push("non-root".into());
        }
        parts.push(format!(
            "capabilities [{}]",
            self.capabilities
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if self.no_new_privileges {
            parts.push("no_new_privs".into());
        }
        parts.push(format!("seccomp {:?}", self.seccomp));
        if let Some(w) = &self.writable_paths {
            parts.push(format!("read-only but [{}]", w.join(", ")));
        }
        parts.join(", ")
    }
}

/// True when `user` names root (by name or uid).
pub fn is_root(user: &str) -> bool {
    user == "root" || user == "0"
}
