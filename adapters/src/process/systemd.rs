//! Starting shims outside the agent's sandbox. Under systemd the agent's own
//! unit is hardened (read-only system, no new privileges, a system-call
//! filter, a narrow capability set); a shim it forks would inherit all of
//! it, and so would every workload. Instead the agent asks systemd (PID 1,
//! through its D-Bus API on the private socket `systemctl` uses) to start
//! each shim as a transient unit `daros-shim-<run>.service` in
//! `daros.slice`: the shim starts with PID 1's full privileges and applies
//! exactly what the workload's spec asks (user, groups, cgroups). Podman and
//! the kubelet start their processes the same way.

use std::path::{Path, PathBuf};

use zbus::zvariant::Value;

/// systemd's private D-Bus socket (root only; no bus daemon needed).
pub const PRIVATE_SOCKET: &str = "/run/systemd/private";

/// How shims are started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Launcher {
    /// Forked by the agent (no systemd, or asked for): the shim and its
    /// workload start in the agent's own cgroup and sandbox.
    #[default]
    Direct,
    /// As transient systemd units.
    Systemd(SystemdLauncher),
}

/// Transient units through systemd's D-Bus API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemdLauncher {
    /// Slice the units go into (`daros.slice`).
    pub slice: String,
    /// The D-Bus socket of PID 1.
    pub socket: PathBuf,
}

impl SystemdLauncher {
    /// In `slice`, through [`PRIVATE_SOCKET`].
    pub fn new(slice: impl Into<String>) -> Self {
        Self {
            slice: slice.into(),
            socket: PathBuf::from(PRIVATE_SOCKET),
        }
    }

    /// Whether systemd runs this machine (`sd_booted()`) and its socket is there.
    pub fn available(&self) -> bool {
        Path::new("/run/systemd/system").is_dir() && self.socket.exists()
    }

    /// Starts `argv` as the transient service `unit`; returns once systemd
    /// accepted the job (the shim reports through its run directory).
    pub async fn start(
        &self,
        unit: &str,
        description: &str,
        argv: &[String],
    ) -> Result<(), String> {
        let Some(program) = argv.first() else {
            return Err("empty command".into());
        };
        let address = format!("unix:path={}", self.socket.display());
        let conn = zbus::connection::Builder::address(address.as_str())
            .map_err(|e| format!("{address}: {e}"))?
            .p2p()
            .build()
            .await
            .map_err(|e| format!("connecting to systemd at {}: {e}", self.socket.display()))?;
        let exec: Vec<(String, Vec<String>, bool)> = vec![(program.clone(), argv.to_vec(), false)];
        let properties: Vec<(&str, Value<'_>)> = vec![
            ("Description", Value::from(description)),
            ("Slice", Value::from(self.slice.as_str())),
            // Started once exec succeeded; a missing binary fails the job.
            ("Type", Value::from("exec")),
            ("ExecStart", Value::from(exec)),
            // Gone from systemd's memory once the shim ends, failed or not.
            ("CollectMode", Value::from("inactive-or-failed")),
            // The workload is in its own cgroup; only the shim is here.
            ("KillMode", Value::from("process")),
        ];
        let aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
        conn.call_method(
            None::<&str>,
            "/org/freedesktop/systemd1",
            Some("org.freedesktop.systemd1.Manager"),
            "StartTransientUnit",
            &(unit, "fail", properties, aux),
        )
        .await
        .map_err(|e| format!("systemd refused transient unit {unit}: {e}"))?;
        Ok(())
    }
}

/// The transient unit of run `generation` of instance `id`: characters a
/// unit name cannot hold are escaped as systemd does (`\xNN`), spelled with
/// `_` so no shell or log quoting trips on them.
pub fn unit_name(id: &str, generation: u64) -> String {
    let mut s = String::from("daros-shim-");
    for c in id.chars() {
        match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | ':' | '.' | '-' => s.push(c),
            '/' => s.push('-'),
            c => s.push_str(&format!("_x{:02x}", u32::from(c) & 0xff)),
        }
    }
    // Unit names are at most 255 bytes.
    let suffix = format!("-{generation}.service");
    s.truncate(255 - suffix.len());
    s + &suffix
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_names_are_valid_and_distinct_per_run() {
        assert_eq!(
            unit_name("acme/shop/web/0", 3),
            "daros-shim-acme-shop-web-0-3.service"
        );
        assert_eq!(unit_name("a b", 1), "daros-shim-a_x20b-1.service");
        let long = unit_name(&"x".repeat(400), 12);
        assert!(long.len() <= 255 && long.ends_with("-12.service"));
    }
}
