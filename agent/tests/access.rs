//! Who may do what, through a real darosd and real uids (issue 15): five
//! test users, each bound to one role in tenant t-a (the Platform Admin
//! everywhere), each tries every class of request with darosctl running
//! under its own uid (the agent learns it from the kernel, `SO_PEERCRED`);
//! each may do exactly its column and is refused the rest with a 403 that
//! names the permission; a Tenant Admin of t-a cannot read or touch t-b; an
//! unbound user reads nothing; a bearer token acts as its principal until it
//! is revoked; every attempt is in the audit trail, which no route edits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{RestartableDarosd, TestRoot, phase};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

/// Test users created for the run and removed after it.
struct Users(Vec<(String, u32)>);

impl Users {
    fn create(names: &[&str]) -> Self {
        let mut v = Vec::new();
        for n in names {
            let name = format!("daros-test-{n}");
            let exists = Command::new("id")
                .arg(&name)
                .output()
                .unwrap()
                .status
                .success();
            if !exists {
                let st = Command::new("useradd")
                    .args([
                        "--system",
                        "--no-create-home",
                        "--shell",
                        "/usr/sbin/nologin",
                        &name,
                    ])
                    .status()
                    .unwrap();
                assert!(st.success(), "useradd {name}");
            }
            let uid = String::from_utf8(
                Command::new("id")
                    .args(["-u", &name])
                    .output()
                    .unwrap()
                    .stdout,
            )
            .unwrap()
            .trim()
            .parse()
            .unwrap();
            v.push((name, uid));
        }
        Users(v)
    }

    fn uid(&self, n: &str) -> u32 {
        self.0
            .iter()
            .find(|(name, _)| name == &format!("daros-test-{n}"))
            .unwrap()
            .1
    }
}

impl Drop for Users {
    fn drop(&mut self) {
        for (name, _) in &self.0 {
            let _ = Command::new("userdel").arg(name).status();
        }
    }
}

const TENANTS: &str = "apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {name: t-a}\nspec: {quota: {cpu: \"2\"}}\n---\n\
apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {name: t-b}\nspec: {quota: {cpu: \"2\"}}\n";

fn app(tenant: &str, name: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: {name}, tenant: {tenant}}}\n\
         spec:\n  workloads:\n    - name: w\n      runtime: {{type: process, os: linux}}\n      \
         image: /bin/sleep\n      replicas: {{min: 1, max: 3}}\n      \
         resources: {{cpu: {{request: 10m}}, memory: {{request: 16Mi}}}}\n      \
         runtimeSpec: {{command: /bin/sleep, args: [\"3600\"]}}\n"
    )
}

struct Agent {
    d: RestartableDarosd,
    dir: std::path::PathBuf,
}

impl Agent {
    /// darosctl ARGS under `uid` (root when 0), optionally with a token.
    fn as_uid(&self, uid: u32, token: Option<&str>, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_darosctl"));
        c.arg("--socket").arg(&self.d.socket).args(args);
        c.env_remove("DAROS_API_TOKEN");
        if let Some(t) = token {
            c.env("DAROS_API_TOKEN", t);
        }
        if uid != 0 {
            c.uid(uid).gid(uid_gid(uid));
        }
        c.output().unwrap()
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        p.display().to_string()
    }
}

fn uid_gid(uid: u32) -> u32 {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.get(2)?.parse::<u32>().ok()? == uid).then(|| f.get(3)?.parse().ok())?
        })
        .unwrap()
}

fn forbidden(o: &Output) -> bool {
    let e = String::from_utf8_lossy(&o.stderr);
    !o.status.success() && e.contains("forbidden") && e.contains("(HTTP 403)")
}

#[test]
fn each_role_does_exactly_its_column() {
    let t = TestRoot::new("access");
    let dir = tempfile::tempdir().unwrap();
    // Other users must reach the socket (its mode and group are the first gate).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut d = RestartableDarosd::new(dir.path(), t.name(), "access", &[], &[]);
    d.spawn_serving();
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(
        d.socket.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let a = Agent {
        d,
        dir: dir.path().to_path_buf(),
    };
    let users = Users::create(&[
        "viewer",
        "operator",
        "developer",
        "tenantadmin",
        "platformadmin",
        "nobody",
    ]);

    // root is a Platform Admin: it sets the stage.
    let tenants = a.file("tenants.yaml", TENANTS);
    let a1 = a.file("a1.yaml", &app("t-a", "a1"));
    let b1 = a.file("b1.yaml", &app("t-b", "b1"));
    for f in [&tenants, &a1, &b1] {
        let o = a.as_uid(0, None, &["apply", "-f", f]);
        assert!(o.status.success(), "{o:?}");
    }
    for (user, role, tenant) in [
        ("viewer", "Viewer", Some("t-a")),
        ("operator", "Operator", Some("t-a")),
        ("developer", "Developer", Some("t-a")),
        ("tenantadmin", "TenantAdmin", Some("t-a")),
        ("platformadmin", "PlatformAdmin", None),
    ] {
        let mut args = vec![
            "access".to_string(),
            "bind".into(),
            format!("{user}-binding"),
            "--principal".into(),
            format!("user:daros-test-{user}"),
            "--role".into(),
            role.into(),
        ];
        if let Some(t) = tenant {
            args.extend(["--tenant".into(), t.into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = a.as_uid(0, None, &args);
        assert!(o.status.success(), "{o:?}");
    }
    a.d.wait_app("a1 Running", "t-a/a1", |v| phase(v) == "Running");

    // The columns: read, operate, develop, tenant-admin, platform-admin.
    let tenant_c = a.file(
        "tc.yaml",
        "apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {name: t-c}\nspec: {quota: {cpu: \"1\"}}\n",
    );
    let requests: [(&str, Vec<&str>); 5] = [
        ("read", vec!["get", "apps"]),
        ("operate", vec!["operate", "t-a/a1", "scale", "w", "2"]),
        ("develop", vec!["apply", "-f", &a1]),
        (
            "tenant-admin",
            vec![
                "access",
                "bind",
                "extra",
                "--principal",
                "user:x",
                "--role",
                "Viewer",
                "--tenant",
                "t-a",
            ],
        ),
        ("platform-admin", vec!["apply", "-f", &tenant_c]),
    ];
    let table: [(&str, [bool; 5]); 6] = [
        ("viewer", [true, false, false, false, false]),
        ("operator", [true, true, false, false, false]),
        ("developer", [true, false, true, false, false]),
        ("tenantadmin", [true, true, true, true, false]),
        ("platformadmin", [true, true, true, true, true]),
        ("nobody", [false, false, false, false, false]),
    ];
    for (user, allowed) in table {
        let uid = users.uid(user);
        for ((perm, req), ok) in requests.iter().zip(allowed) {
            let o = a.as_uid(uid, None, req);
            if ok {
                assert!(o.status.success(), "{user} may {perm}: {o:?}");
            } else {
                assert!(forbidden(&o), "{user} may not {perm}: {o:?}");
                let e = String::from_utf8_lossy(&o.stderr);
                assert!(
                    e.contains(&format!("user:daros-test-{user}")),
                    "names who: {e}"
                );
                assert!(e.contains(perm), "names the permission {perm}: {e}");
            }
        }
    }

    // Tenant isolation: t-a's admin neither reads nor touches t-b.
    let ta = users.uid("tenantadmin");
    let o = a.as_uid(ta, None, &["-o", "json", "get", "apps"]);
    let apps: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = apps
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["app"]["tenant"].as_str().unwrap())
        .collect();
    assert!(
        names.iter().all(|t| *t == "t-a") && !names.is_empty(),
        "{apps}"
    );
    assert!(forbidden(&a.as_uid(
        ta,
        None,
        &["describe", "app", "t-b/b1"]
    )));
    assert!(forbidden(&a.as_uid(
        ta,
        None,
        &["operate", "t-b/b1", "stop"]
    )));
    let o = a.as_uid(0, None, &["-o", "json", "describe", "app", "t-b/b1"]);
    let b: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(b["phase"], "Running", "b1 untouched: {b}");

    // A decision of t-b is not explained through an application of t-a.
    let d: serde_json::Value = serde_json::from_slice(
        &a.as_uid(0, None, &["-o", "json", "describe", "app", "t-b/b1"])
            .stdout,
    )
    .unwrap();
    let b_decision = d["decisions"][0].as_u64().or_else(|| {
        d["decisions"][0]
            .as_str()
            .and_then(|s| s.trim_start_matches("d-").parse().ok())
    });
    let b_decision = b_decision
        .unwrap_or_else(|| panic!("a decision of b1: {d}"))
        .to_string();
    let o = a.as_uid(ta, None, &["explain", "t-a/a1", "--decision", &b_decision]);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no decision"),
        "{o:?}"
    );
    // Logs are an operator's: a viewer is refused them, an operator reads them.
    assert!(forbidden(&a.as_uid(
        users.uid("viewer"),
        None,
        &["logs", "t-a/a1/w"]
    )));
    let o = a.as_uid(users.uid("operator"), None, &["logs", "t-a/a1/w"]);
    assert!(o.status.success(), "{o:?}");

    // A token acts as its principal (an Operator of t-a) for an unbound
    // user, until revoked.
    let o = a.as_uid(
        0,
        None,
        &[
            "access",
            "bind",
            "ci-op",
            "--principal",
            "user:ci",
            "--role",
            "Operator",
            "--tenant",
            "t-a",
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let o = a.as_uid(
        0,
        None,
        &[
            "-o",
            "json",
            "access",
            "token",
            "issue",
            "--principal",
            "user:ci",
            "--expires",
            "1h",
        ],
    );
    let issued: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let token = issued["token"].as_str().unwrap().to_string();
    let id = issued["id"].as_str().unwrap().to_string();
    let nobody = users.uid("nobody");
    let scale = ["operate", "t-a/a1", "scale", "w", "1"];
    assert!(forbidden(&a.as_uid(nobody, None, &scale)));
    let o = a.as_uid(nobody, Some(&token), &scale);
    assert!(o.status.success(), "{o:?}");
    let listed = a.as_uid(0, None, &["-o", "json", "access", "list"]);
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(
        !text.contains(token.rsplit('.').next().unwrap()),
        "the secret is never listed"
    );
    assert!(!text.contains("sha256"), "nor its hash: {text}");
    assert!(
        a.as_uid(0, None, &["access", "token", "revoke", &id])
            .status
            .success()
    );
    assert!(forbidden(&a.as_uid(nobody, Some(&token), &scale)));

    // Writes on this node only (QoS) are audited too: refused ones and served ones.
    assert!(forbidden(&a.as_uid(
        nobody,
        None,
        &["qos", "unset", "managed/access-none"]
    )));
    let o = a.as_uid(0, None, &["qos", "unset", "managed/access-none"]);
    assert!(!o.status.success(), "no such workload: {o:?}");

    // The trail: every attempt, forbidden ones included, with who and how.
    let o = a.as_uid(0, None, &["-o", "json", "audit"]);
    let records: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let dev_forbidden = records
        .iter()
        .filter(|r| {
            r["principal"] == "user:daros-test-developer" && r["outcome"]["result"] == "forbidden"
        })
        .count();
    assert_eq!(
        dev_forbidden, 3,
        "operate, tenant-admin, platform-admin: {records:?}"
    );
    let uid = users.uid("developer");
    assert!(records.iter().any(|r| {
        r["principal"] == "user:daros-test-developer"
            && r["source"]
                .as_str()
                .unwrap()
                .contains(&format!("socket uid {uid}"))
            && r["verb"] == "Apply"
            && r["outcome"]["result"] == "applied"
    }));
    assert!(records.iter().any(|r| {
        r["principal"] == "user:ci"
            && r["source"]
                .as_str()
                .unwrap()
                .contains(&format!("token {id}"))
    }));
    let qos: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["verb"] == "DELETE /v1/qos/workloads/managed/access-none")
        .collect();
    assert_eq!(qos.len(), 2, "{records:?}");
    assert_eq!(qos[0]["principal"], "user:daros-test-nobody");
    assert_eq!(qos[0]["outcome"]["result"], "forbidden");
    assert_eq!(
        (&qos[1]["principal"], &qos[1]["outcome"]["result"]),
        (&"root".into(), &"refused".into())
    );
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // A Tenant Admin reads its tenant's records only; a Developer none.
    let o = a.as_uid(ta, None, &["-o", "json", "audit"]);
    let mine: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!mine.is_empty());
    assert!(
        mine.iter()
            .all(|r| r["tenants"].as_array().unwrap().iter().any(|t| t == "t-a"))
    );
    assert!(forbidden(&a.as_uid(uid, None, &["audit"])));
    // No route edits or deletes a record.
    for method in ["DELETE", "PUT", "POST", "PATCH"] {
        let (status, _) = common::raw_http::exchange(
            &a.d.socket,
            format!("{method} /v1/audit HTTP/1.1\r\nHost: d\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        );
        assert_eq!(status, 405, "{method} /v1/audit");
    }
    let o = a.as_uid(0, None, &["-o", "json", "audit"]);
    let again: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(&again[..records.len()], &records[..]);

    // The report counts per tenant and who was refused.
    let o = a.as_uid(0, None, &["-o", "json", "audit", "report"]);
    let rep: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(rep["tenants"]["t-a"][2].as_u64().unwrap() >= 1, "{rep}");
    assert!(
        rep["forbiddenBy"]["user:daros-test-nobody"]
            .as_u64()
            .unwrap()
            >= 5,
        "{rep}"
    );
}
