//! The process runtime's RuntimeSpec: `{command, args, env, workingDir,
//! user, group, logs}`. Parsed strictly (unknown fields are refused with
//! their path) and resolved at create time, so that a missing command, user
//! or directory is a clear error before anything runs.

use crate::error::AdapterError;
use crate::logs::LogLimits;
use crate::sys;
use daros_coordinator::{Bytes, FieldError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// `PATH` given to workloads that set none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Log rotation settings of a spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LogSpec {
    /// Rotate a file before it passes this size (default 10Mi).
    #[serde(default)]
    pub max_size: Option<Bytes>,
    /// Files kept, the current one included (default 5).
    #[serde(default)]
    pub max_files: Option<u32>,
}

/// The RuntimeSpec of a process workload, as written in the spec file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProcessSpec {
    /// Program: an absolute path, or a name looked up in `PATH`.
    pub command: String,
    /// Arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables (added to `PATH`, `HOME`, `USER` and the
    /// `DAROS_*` variables, which they may override).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory (default `/`).
    #[serde(default)]
    pub working_dir: Option<PathBuf>,
    /// User name or uid (default: the agent's user).
    #[serde(default)]
    pub user: Option<String>,
    /// Group name or gid (default: the user's primary group).
    #[serde(default)]
    pub group: Option<String>,
    /// Log rotation.
    #[serde(default)]
    pub logs: Option<LogSpec>,
}

impl ProcessSpec {
    /// Reads the spec from the opaque JSON; errors are prefixed with `path`
    /// (the spec's own path, e.g. `runtimeSpec`).
    pub fn parse(value: &serde_json::Value, path: &str) -> Result<Self, AdapterError> {
        if value.is_null() {
            return Err(AdapterError::field(
                path,
                "the process runtime needs a runtimeSpec with at least a command",
            ));
        }
        serde_path_to_error::deserialize::<_, ProcessSpec>(value).map_err(|e| {
            let inner = e.path().to_string();
            let at = if inner == "." {
                path.to_string()
            } else {
                format!("{path}.{inner}")
            };
            AdapterError::field(at, e.into_inner().to_string())
        })
    }
}

/// A spec resolved against this host: what the shim needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchPlan {
    /// Absolute path of the program.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// The whole environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub working_dir: PathBuf,
    /// User.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Log rotation.
    pub log_limits: LogLimits,
    /// Confinement (capabilities, no_new_privs, seccomp, writable paths).
    pub security: daros_coordinator::model::security::SecurityContext,
    /// Processes run beside it (`sidecar` trait).
    pub sidecars: Vec<super::protocol::SidecarPlan>,
}

/// Variables that name the instance to the workload.
pub struct InstanceEnv<'a> {
    /// Tenant.
    pub tenant: &'a str,
    /// Application.
    pub app: &'a str,
    /// Workload.
    pub workload: &'a str,
    /// Replica.
    pub replica: u32,
}

/// Resolves `spec` (found at `path`) on this host; `image`, when set, is
/// the program policy allows, and the command must be it.
pub fn resolve(
    spec: &ProcessSpec,
    path: &str,
    image: Option<&str>,
    inst: &InstanceEnv<'_>,
) -> Result<LaunchPlan, AdapterError> {
    let mut errs = Vec::new();
    let f = |name: &str| format!("{path}.{name}");

    for (k, v) in &spec.env {
        if k.is_empty() || k.contains(['=', '\0']) {
            errs.push(FieldError::new(
                f(&format!("env.{k}")),
                "a variable name must be non-empty without '=' or NUL",
            ));
        }
        if v.contains('\0') {
            errs.push(FieldError::new(
                f(&format!("env.{k}")),
                "value contains NUL",
            ));
        }
    }
    for (i, a) in spec.args.iter().enumerate() {
        if a.contains('\0') {
            errs.push(FieldError::new(f(&format!("args[{i}]")), "contains NUL"));
        }
    }
    let search_path = spec.env.get("PATH").map_or(DEFAULT_PATH, String::as_str);
    let program = match find_program(&spec.command, search_path) {
        Ok(p) => Some(p),
        Err(reason) => {
            errs.push(FieldError::new(f("command"), reason));
            None
        }
    };
    if let (Some(prog), Some(img)) = (&program, image) {
        match find_program(img, search_path) {
            Ok(img_path) if same_file(prog, &img_path) => {}
            Ok(img_path) => errs.push(FieldError::new(
                f("command"),
                format!(
                    "runs {} but the workload's image (the program allowed to run) is {}",
                    prog.display(),
                    img_path.display()
                ),
            )),
            Err(reason) => errs.push(FieldError::new("image", reason)),
        }
    }
    let working_dir = spec
        .working_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/"));
    if !working_dir.is_absolute() {
        errs.push(FieldError::new(f("workingDir"), "must be an absolute path"));
    } else if !working_dir.is_dir() {
        errs.push(FieldError::new(
            f("workingDir"),
            format!("{} is not an existing directory", working_dir.display()),
        ));
    }
    let ids = match resolve_user(spec.user.as_deref(), spec.group.as_deref()) {
        Ok(ids) => Some(ids),
        Err(e) => {
            errs.push(FieldError::new(f(e.0), e.1));
            None
        }
    };
    let mut log_limits = LogLimits::default();
    if let Some(l) = spec.logs {
        if let Some(s) = l.max_size {
            if s.0 < 4096 {
                errs.push(FieldError::new(f("logs.maxSize"), "must be at least 4Ki"));
            }
            log_limits.max_bytes = s.0;
        }
        if let Some(n) = l.max_files {
            if !(1..=100).contains(&n) {
                errs.push(FieldError::new(f("logs.maxFiles"), "must be 1..=100"));
            }
            log_limits.max_files = n;
        }
    }
    let (Some(program), Some(ids), true) = (program, ids, errs.is_empty()) else {
        return Err(AdapterError::InvalidSpec(errs));
    };

    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert("PATH".into(), DEFAULT_PATH.into());
    env.insert("HOME".into(), ids.home.clone());
    if let Some(name) = &ids.name {
        env.insert("USER".into(), name.clone());
        env.insert("LOGNAME".into(), name.clone());
    }
    env.insert("DAROS_TENANT".into(), inst.tenant.into());
    env.insert("DAROS_APP".into(), inst.app.into());
    env.insert("DAROS_WORKLOAD".into(), inst.workload.into());
    env.insert("DAROS_REPLICA".into(), inst.replica.to_string());
    env.extend(spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(LaunchPlan {
        program,
        args: spec.args.clone(),
        env: env.into_iter().collect(),
        working_dir,
        uid: ids.uid,
        gid: ids.gid,
        groups: ids.groups,
        log_limits,
        security: Default::default(),
        sidecars: Vec::new(),
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Finds `command` (absolute, or a bare name searched in `search_path`)
/// and checks that it is an executable file.
pub fn find_program(command: &str, search_path: &str) -> Result<PathBuf, String> {
    if command.is_empty() {
        return Err("must not be empty".into());
    }
    if command.contains('\0') {
        return Err("contains NUL".into());
    }
    if command.contains('/') {
        let p = PathBuf::from(command);
        if !p.is_absolute() {
            return Err(format!(
                "{command:?} must be an absolute path or a bare name looked up in PATH"
            ));
        }
        return check_executable(&p).map(|()| p);
    }
    for dir in search_path.split(':').filter(|d| !d.is_empty()) {
        let p = Path::new(dir).join(command);
        if check_executable(&p).is_ok() {
            return Ok(p);
        }
    }
    Err(format!("{command:?} was not found in PATH {search_path}"))
}

fn check_executable(p: &Path) -> Result<(), String> {
    match std::fs::metadata(p) {
        Err(e) => Err(format!("{}: {e}", p.display())),
        Ok(m) if !m.is_file() => Err(format!("{} is not a file", p.display())),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => {
            Err(format!("{} is not executable", p.display()))
        }
        Ok(_) => Ok(()),
    }
}

struct Ids {
    uid: Option<u32>,
    gid: Option<u32>,
    groups: Vec<u32>,
    name: Option<String>,
    home: String,
}

fn resolve_user(user: Option<&str>, group: Option<&str>) -> Result<Ids, (&'static str, String)> {
    let account = match user {
        None => None,
        Some("") => return Err(("user", "must not be empty".into())),
        Some(u) => {
            let found = match u.parse::<u32>() {
                Ok(uid) => sys::user_by_uid(uid).map(|a| a.ok_or(uid)),
                Err(_) => sys::user_by_name(u).map(|a| a.ok_or(u32::MAX)),
            };
            match found {
                Err(e) => return Err(("user", format!("looking up {u:?}: {e}"))),
                Ok(Ok(a)) => Some(Ok(a)),
                Ok(Err(u32::MAX)) => return Err(("user", format!("no user {u:?} on this node"))),
                Ok(Err(uid)) => Some(Err(uid)),
            }
        }
    };
    let gid = match group {
        None => None,
        Some(g) => Some(match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => match sys::group_by_name(g) {
                Ok(Some(gid)) => gid,
                Ok(None) => return Err(("group", format!("no group {g:?} on this node"))),
                Err(e) => return Err(("group", format!("looking up {g:?}: {e}"))),
            },
        }),
    };
    Ok(match account {
        None => match gid {
            None => Ids {
                uid: None,
                gid: None,
                groups: Vec::new(),
                name: None,
                home: "/".into(),
            },
            Some(g) => Ids {
                uid: None,
                gid: Some(g),
                groups: vec![g],
                name: None,
                home: "/".into(),
            },
        },
        Some(Ok(a)) => {
            let gid = gid.unwrap_or(a.gid);
            let groups = sys::group_list(&a.name, gid).unwrap_or_else(|_| vec![gid]);
            Ids {
                uid: Some(a.uid),
                gid: Some(gid),
                groups,
                name: Some(a.name),
                home: a.home,
            }
        }
        Some(Err(uid)) => {
            let Some(g) = gid else {
                return Err((
                    "group",
                    format!("uid {uid} has no account on this node: set group"),
                ));
            };
            Ids {
                uid: Some(uid),
                gid: Some(g),
                groups: vec![g],
                name: None,
                home: "/".into(),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const INST: InstanceEnv<'static> = InstanceEnv {
        tenant: "t",
        app: "a",
        workload: "w",
        replica: 1,
    };

    fn err_paths(e: AdapterError) -> Vec<String> {
        match e {
            AdapterError::InvalidSpec(v) => v.into_iter().map(|f| f.path).collect(),
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn unknown_fields_are_refused_with_their_path() {
        let e =
            ProcessSpec::parse(&json!({"command": "sh", "argz": []}), "runtimeSpec").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("runtimeSpec"), "{msg}");
        assert!(msg.contains("argz"), "{msg}");
        let e = ProcessSpec::parse(
            &json!({"command": "sh", "logs": {"maxSize": "1Qi"}}),
            "runtimeSpec",
        )
        .unwrap_err();
        assert_eq!(err_paths(e), ["runtimeSpec.logs.maxSize"]);
        let e = ProcessSpec::parse(&json!({"command": "sh", "env": {"A": 1}}), "runtimeSpec")
            .unwrap_err();
        assert_eq!(err_paths(e), ["runtimeSpec.env.A"]);
        assert!(ProcessSpec::parse(&serde_json::Value::Null, "runtimeSpec").is_err());
    }

    #[test]
    fn resolves_command_user_env_and_defaults() {
        let s = ProcessSpec::parse(
            &json!({"command": "sh", "args": ["-c", "true"], "env": {"X": "1", "PATH": "/usr/bin:/bin"},
                    "user": "root", "workingDir": "/tmp", "logs": {"maxSize": "1Mi", "maxFiles": 2}}),
            "runtimeSpec",
        )
        .unwrap();
        let p = resolve(&s, "runtimeSpec", Some("/bin/sh"), &INST).unwrap();
        assert!(p.program.ends_with("sh"));
        assert_eq!((p.uid, p.gid), (Some(0), Some(0)));
        assert_eq!(
            p.log_limits,
            LogLimits {
                max_bytes: 1 << 20,
                max_files: 2
            }
        );
        let env: BTreeMap<_, _> = p.env.into_iter().collect();
        assert_eq!(env["X"], "1");
        assert_eq!(env["PATH"], "/usr/bin:/bin");
        assert_eq!(env["USER"], "root");
        assert_eq!(env["DAROS_WORKLOAD"], "w");
        assert_eq!(env["DAROS_REPLICA"], "1");
    }

    #[test]
    fn host_problems_are_field_errors_all_at_once() {
        let s = ProcessSpec::parse(
            &json!({"command": "/no/such/daros-bin", "user": "daros-no-such-user",
                    "workingDir": "/no/such/dir", "env": {"A=B": "x"}}),
            "runtimeSpec",
        )
        .unwrap();
        let paths = err_paths(resolve(&s, "runtimeSpec", None, &INST).unwrap_err());
        assert_eq!(
            paths,
            [
                "runtimeSpec.env.A=B",
                "runtimeSpec.command",
                "runtimeSpec.workingDir",
                "runtimeSpec.user"
            ]
        );
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("data.txt");
        std::fs::write(&plain, "x").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let s = ProcessSpec::parse(&json!({"command": plain}), "runtimeSpec").unwrap();
        let e = resolve(&s, "runtimeSpec", None, &INST)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not executable"), "{e}");
        let s = ProcessSpec::parse(&json!({"command": "relative/sh"}), "runtimeSpec").unwrap();
        assert!(resolve(&s, "runtimeSpec", None, &INST).is_err());
    }

    #[test]
    fn the_command_must_be_the_image() {
        let s = ProcessSpec::parse(&json!({"command": "/bin/sh"}), "runtimeSpec").unwrap();
        let e = resolve(&s, "runtimeSpec", Some("/bin/true"), &INST)
            .unwrap_err()
            .to_string();
        assert!(e.contains("image"), "{e}");
        let s = ProcessSpec::parse(&json!({"command": "true"}), "runtimeSpec").unwrap();
        assert!(resolve(&s, "runtimeSpec", Some("/bin/true"), &INST).is_ok());
    }

    #[test]
    fn numeric_uid_without_account_needs_a_group() {
        let s = ProcessSpec::parse(
            &json!({"command": "/bin/true", "user": "54321"}),
            "runtimeSpec",
        )
        .unwrap();
        assert_eq!(
            err_paths(resolve(&s, "runtimeSpec", None, &INST).unwrap_err()),
            ["runtimeSpec.group"]
        );
        let s = ProcessSpec::parse(
            &json!({"command": "/bin/true", "user": "54321", "group": "54321"}),
            "runtimeSpec",
        )
        .unwrap();
        let p = resolve(&s, "runtimeSpec", None, &INST).unwrap();
        assert_eq!(
            (p.uid, p.gid, p.groups),
            (Some(54321), Some(54321), vec![54321])
        );
    }
}
