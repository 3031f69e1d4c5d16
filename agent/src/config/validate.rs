//! Value checks that types alone cannot express. Each error names the key.

use std::net::SocketAddr;
use std::time::Duration;

use super::duration::format;
use super::{Config, ConfigError};
use crate::cgroup::CgroupPath;

const UNIT_TYPES: &[&str] = &["service", "slice", "scope", "socket", "mount", "swap"];

/// Refuses a duration outside `min..=max`, naming `key`.
pub(crate) fn range(
    key: &str,
    v: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), ConfigError> {
    if v < min || v > max {
        return Err(ConfigError::invalid(
            key,
            format!(
                "must be between {} and {}, got \"{}\"",
                format(min),
                format(max),
                format(v)
            ),
        ));
    }
    Ok(())
}

fn absolute(key: &str, p: &std::path::Path) -> Result<(), ConfigError> {
    if !p.is_absolute() {
        return Err(ConfigError::invalid(
            key,
            format!(
                "must be an absolute path, got {:?}",
                p.display().to_string()
            ),
        ));
    }
    Ok(())
}

/// Checks every value of `c`.
pub fn validate(c: &Config) -> Result<(), ConfigError> {
    if let Some(n) = &c.agent.node_name {
        let ok = !n.is_empty()
            && n.len() <= 253
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
        if !ok {
            return Err(ConfigError::invalid(
                "agent.node_name",
                format!("must be 1-253 characters of letters, digits, '-', '.' or '_', got {n:?}"),
            ));
        }
    }
    absolute("agent.data_dir", &c.agent.data_dir)?;
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&c.agent.log_level) {
        return Err(ConfigError::invalid(
            "agent.log_level",
            format!("invalid filter {:?}: {e}", c.agent.log_level),
        ));
    }
    absolute("api.socket", &c.api.socket)?;
    if c.api.socket.as_os_str().len() > 107 {
        return Err(ConfigError::invalid(
            "api.socket",
            "unix socket paths are limited to 107 bytes",
        ));
    }
    if let Some(g) = &c.api.socket_group
        && (g.is_empty() || g.contains(char::is_whitespace))
    {
        return Err(ConfigError::invalid(
            "api.socket_group",
            format!("must be a group name, got {g:?}"),
        ));
    }

    range(
        "api.header_timeout",
        c.api.header_timeout.0,
        Duration::from_secs(1),
        Duration::from_secs(300),
    )?;
    range(
        "api.body_timeout",
        c.api.body_timeout.0,
        Duration::from_secs(1),
        Duration::from_secs(600),
    )?;
    range(
        "sensing.interval",
        c.sensing.interval.0,
        Duration::from_millis(100),
        Duration::from_secs(60),
    )?;
    for (key, list) in [
        ("sensing.exclude_devices", &c.sensing.exclude_devices),
        ("sensing.exclude_interfaces", &c.sensing.exclude_interfaces),
    ] {
        if list.iter().any(String::is_empty) {
            return Err(ConfigError::invalid(
                key,
                "prefixes must not be empty (an empty prefix excludes everything)",
            ));
        }
    }

    let root = &c.cgroup.managed_root;
    if root.starts_with('/') {
        return Err(ConfigError::invalid(
            "cgroup.managed_root",
            format!("must be relative to the cgroup root (e.g. \"daros\"), got {root:?}"),
        ));
    }
    match CgroupPath::new(root) {
        Ok(p) if p.as_str().is_empty() => {
            return Err(ConfigError::invalid(
                "cgroup.managed_root",
                "must not be empty",
            ));
        }
        Ok(_) => {}
        Err(e) => return Err(ConfigError::invalid("cgroup.managed_root", e.to_string())),
    }

    range(
        "discovery.interval",
        c.discovery.interval.0,
        Duration::from_secs(1),
        Duration::from_secs(3600),
    )?;
    if c.discovery.interval.0 < c.sensing.interval.0 {
        return Err(ConfigError::invalid(
            "discovery.interval",
            format!(
                "must not be shorter than sensing.interval ({}), got \"{}\"",
                c.sensing.interval, c.discovery.interval
            ),
        ));
    }
    if c.discovery.max_workloads == 0 || c.discovery.max_workloads > 100_000 {
        return Err(ConfigError::invalid(
            "discovery.max_workloads",
            format!(
                "must be between 1 and 100000, got {}",
                c.discovery.max_workloads
            ),
        ));
    }
    for t in &c.discovery.systemd_unit_types {
        if !UNIT_TYPES.contains(&t.as_str()) {
            return Err(ConfigError::invalid(
                "discovery.systemd_unit_types",
                format!(
                    "unknown unit type {t:?} (expected one of {})",
                    UNIT_TYPES.join(", ")
                ),
            ));
        }
    }
    for r in &c.discovery.kubepods_roots {
        if r.is_empty() || CgroupPath::new(r).is_err() {
            return Err(ConfigError::invalid(
                "discovery.kubepods_roots",
                format!("invalid cgroup path {r:?}"),
            ));
        }
    }

    if let Some(l) = &c.metrics.listen
        && l.parse::<SocketAddr>().is_err()
    {
        return Err(ConfigError::invalid(
            "metrics.listen",
            format!("must be an IP address and port such as \"127.0.0.1:9464\", got {l:?}"),
        ));
    }
    if let Some(f) = &c.metrics.events_file
        && (!f.is_absolute() || f.file_name().is_none())
    {
        return Err(ConfigError::invalid(
            "metrics.events_file",
            format!("must be an absolute file path, got {}", f.display()),
        ));
    }
    if let Some(u) = &c.metrics.events_url {
        crate::control::event_sink::HttpSink::parse(u)
            .map_err(|why| ConfigError::invalid("metrics.events_url", why))?;
    }
    if let Some(l) = &c.gpu.library
        && l.is_empty()
    {
        return Err(ConfigError::invalid("gpu.library", "must not be empty"));
    }
    super::qos::validate(&c.qos)?;
    super::net::validate(c)?;
    super::mesh::validate(c)?;
    super::runtime::validate(&c.runtime)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HumanDuration;

    fn check(f: impl FnOnce(&mut Config), key: &str, reason_part: &str) {
        let mut c = Config::default();
        f(&mut c);
        let e = validate(&c).unwrap_err();
        assert_eq!(e.key(), Some(key), "{e}");
        assert!(e.to_string().contains(reason_part), "{e}");
    }

    #[test]
    fn every_out_of_range_or_malformed_value() {
        assert!(validate(&Config::default()).is_ok());
        check(
            |c| c.agent.node_name = Some("bad name".into()),
            "agent.node_name",
            "letters",
        );
        check(
            |c| c.agent.data_dir = "relative".into(),
            "agent.data_dir",
            "absolute",
        );
        check(
            |c| c.agent.log_level = "info,[".into(),
            "agent.log_level",
            "invalid filter",
        );
        check(
            |c| c.api.socket = "agent.sock".into(),
            "api.socket",
            "absolute",
        );
        check(
            |c| c.api.socket = format!("/{}", "x".repeat(200)).into(),
            "api.socket",
            "107 bytes",
        );
        check(
            |c| c.api.socket_group = Some(String::new()),
            "api.socket_group",
            "group name",
        );
        check(
            |c| c.sensing.interval = HumanDuration(Duration::from_secs(61)),
            "sensing.interval",
            "got \"61s\"",
        );
        check(
            |c| c.sensing.exclude_devices = vec![String::new()],
            "sensing.exclude_devices",
            "empty",
        );
        check(
            |c| c.cgroup.managed_root = "/sys/fs/cgroup/daros".into(),
            "cgroup.managed_root",
            "relative",
        );
        check(
            |c| c.cgroup.managed_root = "a/../b".into(),
            "cgroup.managed_root",
            "`..`",
        );
        check(
            |c| c.cgroup.managed_root = String::new(),
            "cgroup.managed_root",
            "empty",
        );
        check(
            |c| c.discovery.interval = HumanDuration(Duration::from_millis(500)),
            "discovery.interval",
            "between 1s and 1h",
        );
        check(
            |c| {
                c.sensing.interval = HumanDuration(Duration::from_secs(10));
                c.discovery.interval = HumanDuration(Duration::from_secs(5));
            },
            "discovery.interval",
            "shorter than sensing.interval",
        );
        check(
            |c| c.discovery.max_workloads = 0,
            "discovery.max_workloads",
            "between 1 and 100000",
        );
        check(
            |c| c.discovery.systemd_unit_types = vec!["timer".into()],
            "discovery.systemd_unit_types",
            "\"timer\"",
        );
        check(
            |c| c.discovery.kubepods_roots = vec!["..".into()],
            "discovery.kubepods_roots",
            "invalid cgroup path",
        );
        check(
            |c| c.metrics.listen = Some("localhost".into()),
            "metrics.listen",
            "IP address and port",
        );
        check(
            |c| c.metrics.events_file = Some("events.jsonl".into()),
            "metrics.events_file",
            "absolute",
        );
        check(
            |c| c.metrics.events_url = Some("https://collector:443/in".into()),
            "metrics.events_url",
            "http://",
        );
        check(
            |c| c.gpu.library = Some(String::new()),
            "gpu.library",
            "empty",
        );
    }
}
