//! Loading: defaults < file < environment < flags, then validation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::validate::validate;
use super::{Config, ConfigError};

/// Read when no `--config` is given; a missing file is fine.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/daros/agent.toml";
/// Prefix of configuration environment variables (`DAROS_SENSING_INTERVAL`).
pub const ENV_PREFIX: &str = "DAROS_";
/// Names the config file instead of a key.
pub const ENV_CONFIG_FILE: &str = "DAROS_CONFIG";
/// `DAROS_*` variables that belong to tooling (tests, benchmarks, the cgroup-v2 VM
/// runner, scripts/run.sh), not to darosd; they are neither keys nor errors.
pub const RESERVED_ENV_PREFIXES: &[&str] = &[
    "DAROS_TEST_",
    "DAROS_BENCH_",
    "DAROS_VM_",
    "DAROS_IN_VM",
    "DAROS_RUN_",
];

fn is_config_var(name: &str) -> bool {
    name.starts_with(ENV_PREFIX)
        && name != ENV_CONFIG_FILE
        && !RESERVED_ENV_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// One flag that sets a key.
#[derive(Debug, Clone)]
pub struct FlagValue {
    /// Dotted key.
    pub key: &'static str,
    /// The flag as typed (`--interval`).
    pub flag: &'static str,
    /// The value.
    pub value: String,
}

/// What overrides the defaults.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// Explicit config file (must exist).
    pub file: Option<PathBuf>,
    /// File read when `file` is `None` and it exists.
    pub default_file: Option<PathBuf>,
    /// Environment variables (all of them; only `DAROS_*` are used).
    pub env: Vec<(String, String)>,
    /// Flags given on the command line.
    pub flags: Vec<FlagValue>,
}

impl Overrides {
    /// Overrides from the process environment and the default file location.
    pub fn from_process(file: Option<PathBuf>, flags: Vec<FlagValue>) -> Self {
        Overrides {
            file,
            default_file: Some(PathBuf::from(DEFAULT_CONFIG_FILE)),
            env: std::env::vars().collect(),
            flags,
        }
    }
}

/// Where a key's value came from, for error messages.
type Origins = HashMap<String, String>;

/// Builds the configuration.
pub fn load(o: &Overrides) -> Result<Config, ConfigError> {
    let mut origins = Origins::new();
    let file = o.file.clone().or_else(|| {
        o.env
            .iter()
            .find(|(k, _)| k == ENV_CONFIG_FILE)
            .map(|(_, v)| PathBuf::from(v))
    });
    let mut table = match (&file, &o.default_file) {
        (Some(f), _) => read_file(f)?,
        (None, Some(d)) if d.exists() => read_file(d)?,
        _ => Table::new(),
    };
    if let Some(f) = file
        .as_ref()
        .or(o.default_file.as_ref().filter(|d| d.exists()))
    {
        record_origins(&table, "", &format!(" (in {})", f.display()), &mut origins);
    }

    let defaults = Table::try_from(Config::default()).unwrap_or_default();
    let mut env: Vec<&(String, String)> = o.env.iter().filter(|(k, _)| is_config_var(k)).collect();
    env.sort();
    for (var, raw) in env {
        let origin = format!(" (from env {var})");
        let rest = var[ENV_PREFIX.len()..].to_ascii_lowercase();
        let Some((section, key)) = rest.split_once('_') else {
            return Err(ConfigError::Invalid {
                key: rest,
                reason: format!(
                    "{var} does not name a configuration key (expected {ENV_PREFIX}<SECTION>_<KEY>)"
                ),
                origin,
            });
        };
        let value = typed_env_value(raw, defaults.get(section).and_then(|s| s.get(key)));
        set(&mut table, section, key, value).map_err(|reason| ConfigError::Invalid {
            key: format!("{section}.{key}"),
            reason,
            origin: origin.clone(),
        })?;
        origins.insert(format!("{section}.{key}"), origin);
    }
    for f in &o.flags {
        let origin = format!(" (from flag {})", f.flag);
        let (section, key) = f.key.split_once('.').unwrap_or(("", f.key));
        let value = typed_env_value(&f.value, defaults.get(section).and_then(|s| s.get(key)));
        set(&mut table, section, key, value).map_err(|reason| ConfigError::Invalid {
            key: f.key.to_string(),
            reason,
            origin: origin.clone(),
        })?;
        origins.insert(f.key.to_string(), origin);
    }

    let config: Config = serde_path_to_error::deserialize(Value::Table(table)).map_err(|e| {
        let key = e.path().to_string();
        let reason = clean_serde_message(&e.inner().to_string());
        let origin = origin_of(&origins, &key);
        ConfigError::Invalid {
            key,
            reason,
            origin,
        }
    })?;
    validate(&config).map_err(|e| match e {
        ConfigError::Invalid { key, reason, .. } => {
            let origin = origin_of(&origins, &key);
            ConfigError::Invalid {
                key,
                reason,
                origin,
            }
        }
        other => other,
    })?;
    Ok(config)
}

fn read_file(path: &Path) -> Result<Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    text.parse::<Table>().map_err(|e| ConfigError::Syntax {
        path: path.display().to_string(),
        reason: e.to_string().trim().replace('\n', " "),
    })
}

fn record_origins(t: &Table, prefix: &str, origin: &str, out: &mut Origins) {
    for (k, v) in t {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        if let Value::Table(inner) = v {
            record_origins(inner, &key, origin, out);
        }
        out.insert(key, origin.to_string());
    }
}

fn origin_of(origins: &Origins, key: &str) -> String {
    // The key itself, or the closest parent that has an origin.
    let mut k = key;
    loop {
        if let Some(o) = origins.get(k) {
            return o.clone();
        }
        match k.rsplit_once('.') {
            Some((parent, _)) => k = parent,
            None => return String::new(),
        }
    }
}

fn set(table: &mut Table, section: &str, key: &str, value: Value) -> Result<(), String> {
    let entry = table
        .entry(section.to_string())
        .or_insert_with(|| Value::Table(Table::new()));
    match entry {
        Value::Table(t) => {
            t.insert(key.to_string(), value);
            Ok(())
        }
        _ => Err(format!("`{section}` is not a section")),
    }
}

/// Types an environment or flag string like the key's default value: lists are
/// comma-separated, booleans and integers parsed when they look like one; anything
/// else stays a string so that deserialisation reports the mismatch by key.
fn typed_env_value(raw: &str, default: Option<&Value>) -> Value {
    match default {
        Some(Value::Array(_)) => Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
                .collect(),
        ),
        Some(Value::Boolean(_)) => match raw.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Value::Boolean(true),
            "false" | "0" | "no" | "off" => Value::Boolean(false),
            _ => Value::String(raw.to_string()),
        },
        Some(Value::Integer(_)) => raw
            .trim()
            .parse::<i64>()
            .map_or_else(|_| Value::String(raw.to_string()), Value::Integer),
        _ => Value::String(raw.to_string()),
    }
}

/// Serde's messages list expected fields with backticks; keep them but drop
/// noise, and say Rust type names in the user's terms.
fn clean_serde_message(m: &str) -> String {
    let m = daros_coordinator::spec::plain::plain_types(m.trim());
    if let Some(rest) = m.strip_prefix("unknown field ") {
        return format!("unknown key {rest}");
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn with_file(content: &str) -> (tempfile::TempDir, Overrides) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("agent.toml");
        std::fs::write(&p, content).unwrap();
        (
            dir,
            Overrides {
                file: Some(p),
                ..Overrides::default()
            },
        )
    }

    fn err_of(o: &Overrides) -> String {
        load(o).unwrap_err().to_string()
    }

    #[test]
    fn nothing_at_all_gives_defaults() {
        let c = load(&Overrides::default()).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.interval(), Duration::from_secs(1));
    }

    #[test]
    fn missing_default_file_is_fine_but_missing_explicit_file_is_not() {
        let o = Overrides {
            default_file: Some("/nonexistent/daros.toml".into()),
            ..Overrides::default()
        };
        assert!(load(&o).is_ok());
        let o = Overrides {
            file: Some("/nonexistent/daros.toml".into()),
            ..Overrides::default()
        };
        let e = err_of(&o);
        assert!(
            e.contains("/nonexistent/daros.toml") && e.contains("No such file"),
            "{e}"
        );
    }

    #[test]
    fn precedence_flag_over_env_over_file() {
        let (_d, mut o) =
            with_file("[sensing]\ninterval = \"2s\"\n[agent]\nlog_level = \"debug\"\n");
        assert_eq!(load(&o).unwrap().interval(), Duration::from_secs(2));
        o.env = vec![
            ("DAROS_SENSING_INTERVAL".into(), "3s".into()),
            ("UNRELATED".into(), "x".into()),
        ];
        assert_eq!(load(&o).unwrap().interval(), Duration::from_secs(3));
        o.flags = vec![FlagValue {
            key: "sensing.interval",
            flag: "--interval",
            value: "4s".into(),
        }];
        let c = load(&o).unwrap();
        assert_eq!(c.interval(), Duration::from_secs(4));
        assert_eq!(c.agent.log_level, "debug");
    }

    #[test]
    fn env_lists_and_bools() {
        let o = Overrides {
            env: vec![
                ("DAROS_SENSING_EXCLUDE_DEVICES".into(), "loop, nbd".into()),
                ("DAROS_DISCOVERY_SYSTEMD".into(), "false".into()),
                ("DAROS_DISCOVERY_MAX_WORKLOADS".into(), "10".into()),
                ("DAROS_METRICS_LISTEN".into(), "127.0.0.1:9464".into()),
            ],
            ..Overrides::default()
        };
        let c = load(&o).unwrap();
        assert_eq!(c.sensing.exclude_devices, vec!["loop", "nbd"]);
        assert!(!c.discovery.systemd);
        assert_eq!(c.discovery.max_workloads, 10);
        assert_eq!(c.metrics.listen.as_deref(), Some("127.0.0.1:9464"));
    }

    #[test]
    fn unknown_top_level_key() {
        let (_d, o) = with_file("colour = \"blue\"\n");
        let e = err_of(&o);
        assert!(e.starts_with("colour: unknown key `colour`"), "{e}");
        assert!(e.contains("agent.toml"), "{e}");
    }

    #[test]
    fn unknown_nested_key() {
        let (_d, o) = with_file("[sensing]\nintervall = \"1s\"\n");
        let e = err_of(&o);
        assert!(
            e.starts_with("sensing.intervall: unknown key `intervall`, expected one of"),
            "{e}"
        );
    }

    #[test]
    fn unknown_section() {
        let (_d, o) = with_file("[sensor]\ninterval = \"1s\"\n");
        let e = err_of(&o);
        assert!(e.starts_with("sensor: unknown key `sensor`"), "{e}");
    }

    #[test]
    fn wrong_types() {
        let (_d, o) = with_file("[discovery]\nmax_workloads = \"many\"\n");
        let e = err_of(&o);
        assert!(
            e.starts_with("discovery.max_workloads: invalid type: string \"many\""),
            "{e}"
        );
        let (_d, o) = with_file("[sensing]\ninterval = 5\n");
        let e = err_of(&o);
        assert!(
            e.starts_with("sensing.interval: invalid type: integer `5`, expected a duration"),
            "{e}"
        );
        let (_d, o) = with_file("[agent]\nlog_format = \"xml\"\n");
        let e = err_of(&o);
        assert!(
            e.starts_with("agent.log_format: unknown variant `xml`"),
            "{e}"
        );
        let (_d, o) = with_file("sensing = 3\n");
        let e = err_of(&o);
        assert!(e.starts_with("sensing: invalid type: integer `3`"), "{e}");
    }

    #[test]
    fn bad_duration_and_range() {
        let (_d, o) = with_file("[sensing]\ninterval = \"fast\"\n");
        let e = err_of(&o);
        assert!(
            e.starts_with("sensing.interval: invalid duration \"fast\""),
            "{e}"
        );
        let (_d, o) = with_file("[sensing]\ninterval = \"0s\"\n");
        let e = err_of(&o);
        assert!(
            e.starts_with("sensing.interval: must be between 100ms and 60s, got \"0s\""),
            "{e}"
        );
    }

    #[test]
    fn bad_env_value_names_variable() {
        let o = Overrides {
            env: vec![("DAROS_SENSING_INTERVAL".into(), "soon".into())],
            ..Overrides::default()
        };
        let e = err_of(&o);
        assert!(
            e.starts_with("sensing.interval: invalid duration \"soon\""),
            "{e}"
        );
        assert!(e.ends_with("(from env DAROS_SENSING_INTERVAL)"), "{e}");
        let o = Overrides {
            env: vec![("DAROS_DISCOVERY_MAX_WORKLOADS".into(), "lots".into())],
            ..Overrides::default()
        };
        let e = err_of(&o);
        assert!(
            e.starts_with("discovery.max_workloads: invalid type: string \"lots\""),
            "{e}"
        );
        assert!(e.contains("DAROS_DISCOVERY_MAX_WORKLOADS"), "{e}");
        assert!(e.contains("expected a whole number, 0 or more"), "{e}");
        assert!(!e.contains("usize"), "{e}");
        let o = Overrides {
            env: vec![("DAROS_SENSING_NOPE".into(), "1".into())],
            ..Overrides::default()
        };
        let e = err_of(&o);
        assert!(e.starts_with("sensing.nope: unknown key `nope`"), "{e}");
        assert!(e.contains("DAROS_SENSING_NOPE"), "{e}");
        let o = Overrides {
            env: vec![("DAROS_X".into(), "1".into())],
            ..Overrides::default()
        };
        let e = err_of(&o);
        assert!(
            e.contains("DAROS_X does not name a configuration key"),
            "{e}"
        );
    }

    #[test]
    fn tooling_variables_are_not_configuration() {
        let o = Overrides {
            env: vec![
                ("DAROS_IN_VM".into(), "1".into()),
                ("DAROS_VM_DISK_MOUNT".into(), "/mnt/vmdisk".into()),
                ("DAROS_TEST_IO_DIR".into(), "/tmp".into()),
                ("DAROS_BENCH_SECONDS".into(), "5".into()),
                ("DAROS_RUN_DIR".into(), "/tmp/x".into()),
            ],
            ..Overrides::default()
        };
        assert_eq!(load(&o).unwrap(), Config::default());
        // A typo in a section name is still refused.
        let o = Overrides {
            env: vec![("DAROS_SENSNG_INTERVAL".into(), "1s".into())],
            ..Overrides::default()
        };
        assert!(err_of(&o).starts_with("sensng: unknown key `sensng`"));
    }

    #[test]
    fn bad_flag_value_names_flag() {
        let o = Overrides {
            flags: vec![FlagValue {
                key: "cgroup.managed_root",
                flag: "--managed-root",
                value: "../escape".into(),
            }],
            ..Overrides::default()
        };
        let e = err_of(&o);
        assert!(e.starts_with("cgroup.managed_root: "), "{e}");
        assert!(e.ends_with("(from flag --managed-root)"), "{e}");
    }

    #[test]
    fn syntax_error_names_file_and_line() {
        let (_d, o) = with_file("[sensing\ninterval = 1\n");
        let e = err_of(&o);
        assert!(
            e.contains("agent.toml: invalid TOML") && e.contains("line 1"),
            "{e}"
        );
    }

    #[test]
    fn example_file_is_valid() {
        let text = include_str!("../../../examples/agent.toml");
        let (_d, o) = with_file(text);
        load(&o).unwrap();
    }

    /// The DaemonSet's agent.toml (packaging/kubernetes/configmap.yaml) is a
    /// valid configuration with Kubernetes mode on.
    #[test]
    fn the_daemonset_configuration_loads() {
        let yaml = include_str!("../../../packaging/kubernetes/configmap.yaml");
        let cm: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).unwrap();
        let text = cm["data"]["agent.toml"].as_str().unwrap();
        let (_d, o) = with_file(text);
        let c = load(&o).unwrap();
        assert!(c.runtime.kubernetes_policies && !c.runtime.enabled);
        assert_eq!(c.runtime.kubernetes_cgroup_root, "/");
    }

    /// The example promises every key: each key of the defaults and the
    /// optional ones are named in it (set, or shown commented out), and its
    /// commented-out examples (`# key = value`) are valid values too (but
    /// `<placeholders>`).
    #[test]
    fn example_file_names_every_key() {
        let text = include_str!("../../../examples/agent.toml");
        let mut named = std::collections::BTreeSet::new();
        let mut section = String::new();
        let mut uncommented = String::new();
        for l in text.lines() {
            let t = l.trim_start_matches("# ");
            if let Some(name) = t.strip_prefix('[') {
                section = name.split(']').next().unwrap_or_default().to_string();
                // `[mesh.labels]` names the key `labels` of `[mesh]`.
                named.insert(section.clone());
            }
            let key = t
                .split_once(" =")
                .map(|(k, _)| k)
                .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
            if let Some(k) = key {
                named.insert(format!("{section}.{k}"));
            }
            let example = l.starts_with("# ") && key.is_some() && !t.contains('<');
            uncommented.push_str(if example { t } else { l });
            uncommented.push('\n');
        }
        let (_d, o) = with_file(&uncommented);
        let loaded = load(&o).unwrap();
        let mut keys = Vec::new();
        for v in [
            toml::Value::try_from(Config::default()).unwrap(),
            toml::Value::try_from(&loaded).unwrap(),
        ] {
            for (section, table) in v.as_table().unwrap() {
                for key in table.as_table().unwrap().keys() {
                    keys.push(format!("{section}.{key}"));
                }
            }
        }
        keys.extend(
            [
                "qos.io_read_capacity",
                "net.egress_capacity",
                "mesh.join_token",
                "metrics.events_url",
                "runtime.kubeconfig",
            ]
            .map(String::from),
        );
        for k in keys {
            assert!(named.contains(&k), "examples/agent.toml does not name {k}");
        }
    }
}
