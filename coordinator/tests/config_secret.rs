//! Configs, Secrets and the `env` trait: apply-time checks with field paths,
//! the replicated state holding only sealed secret values, references that
//! keep objects alive, and launches carrying the resolved environment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use daros_coordinator::model::secret::{Sealed, SecretValue};
use daros_coordinator::traits::env::EnvValue;
use daros_coordinator::*;

const CONFIG: &str = "apiVersion: daros.io/v1\nkind: Config\nmetadata: {name: settings, tenant: acme}\nspec: {data: {LOG_LEVEL: debug, MODE: fast}}\n---\n";

fn sealed_secret(keys: &[&str]) -> Document {
    let mut docs = docs(&format!(
        "apiVersion: daros.io/v1\nkind: Secret\nmetadata: {{name: db, tenant: acme}}\nspec: {{data: {{{}}}}}\n",
        keys.iter()
            .map(|k| format!("{k}: {{sealed: \"v1:{k}\"}}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    docs.remove(0)
}

fn app(env: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: shop, tenant: acme}}\nspec:\n  workloads:\n  - name: web\n    runtime: {{type: process}}\n    resources: {{cpu: {{request: 100m}}, memory: {{request: 64Mi}}}}\n    initJobs: [{{name: schema, runtimeSpec: {{command: \"true\"}}}}]\n    runtimeSpec: {{command: sleep, args: [\"100\"]}}\n    traits:\n    - type: env\n      properties: {env}\n"
    )
}

fn setup() -> Coordinator {
    let mut c = Coordinator::new();
    apply(
        &mut c,
        &format!(
            "{}{}{CONFIG}",
            node_yaml("n1", "4", "8Gi", "", ""),
            tenant_yaml("acme", "")
        ),
        0,
    );
    c.apply(
        Command::Apply {
            documents: vec![sealed_secret(&["password", "user"])],
            start: true,
        },
        t(1),
    )
    .unwrap();
    c
}

fn try_apply(c: &mut Coordinator, yaml: &str) -> Result<Outcome, CoordinatorError> {
    c.apply(
        Command::Apply {
            documents: docs(yaml),
            start: true,
        },
        t(5),
    )
}

#[test]
fn bad_env_traits_are_refused_with_field_paths() {
    let cases = [
        (
            "{vars: {1X: a}}",
            "spec.workloads[0].traits[0].properties.vars.1X",
        ),
        (
            "{vars: {DAROS_APP: a}}",
            "spec.workloads[0].traits[0].properties.vars.DAROS_APP",
        ),
        (
            "{vars: {A: {secret: db}}}",
            "spec.workloads[0].traits[0].properties.vars.A",
        ),
        (
            "{vars: {A: {secret: db, config: x, key: k}}}",
            "spec.workloads[0].traits[0].properties.vars.A",
        ),
        (
            "{from: [{}]}",
            "spec.workloads[0].traits[0].properties.from[0]",
        ),
        (
            "{from: [{secret: Db}]}",
            "spec.workloads[0].traits[0].properties.from[0]",
        ),
        ("{form: []}", "spec.workloads[0].traits[0].properties.form"),
        ("{}", "spec.workloads[0].traits[0].properties"),
    ];
    for (env, path) in cases {
        let e = daros_coordinator::spec::parse(&app(env), Format::Yaml).unwrap_err();
        assert!(
            e.0.iter().any(|x| x.path == path),
            "{env}: expected an error at {path}, got {e}"
        );
    }
    // Unknown trait type, and a trait the runtime's adapter cannot honour.
    let unknown = app("{vars: {A: b}}").replace("type: env", "type: envv");
    let e = daros_coordinator::spec::parse(&unknown, Format::Yaml).unwrap_err();
    assert!(
        e.to_string()
            .contains("unknown trait \"envv\"; registered: env"),
        "{e}"
    );
    let container =
        app("{vars: {A: b}}").replace("runtime: {type: process}", "runtime: {type: container}");
    let e = daros_coordinator::spec::parse(&container, Format::Yaml).unwrap_err();
    assert!(
        e.to_string().contains("spec.workloads[0].traits[0].type: trait \"env\" is not supported by the Container runtime's adapter"),
        "{e}"
    );
}

#[test]
fn references_must_exist_and_plain_secrets_never_enter_the_state() {
    let mut c = setup();
    let e = try_apply(&mut c, &app("{from: [{secret: nope}]}")).unwrap_err();
    assert!(
        e.to_string().contains(
            "spec.workloads[0].traits[0].properties.from[0]: no Secret \"nope\" in tenant \"acme\""
        ),
        "{e}"
    );
    let e = try_apply(&mut c, &app("{vars: {P: {secret: db, key: pass}}}")).unwrap_err();
    assert!(
        e.to_string()
            .contains("Secret \"db\" has no key \"pass\" (keys: password, user)"),
        "{e}"
    );
    assert!(
        c.describe(&key("acme", "shop"), t(5)).is_err(),
        "a refused apply leaves nothing"
    );

    // A plain value reaching the coordinator is refused (the server agent seals first).
    let plain = "apiVersion: daros.io/v1\nkind: Secret\nmetadata: {name: api, tenant: acme}\nspec: {data: {token: hunter2}}\n";
    let e = try_apply(&mut c, plain).unwrap_err();
    assert!(e.to_string().contains("data.token: not sealed"), "{e}");
    assert!(c.tenant_objects().secret("acme", "api").is_none());
    // A Secret for an unknown tenant.
    let e = try_apply(
        &mut c,
        "apiVersion: daros.io/v1\nkind: Config\nmetadata: {name: x, tenant: ghost}\nspec: {data: {A: b}}\n",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("metadata.tenant: unknown tenant \"ghost\""),
        "{e}"
    );
}

#[test]
fn launches_carry_the_environment_and_objects_in_use_stay() {
    let mut c = setup();
    let out = try_apply(
        &mut c,
        &app("{from: [{config: settings}], vars: {LOG_LEVEL: info, DB_PASSWORD: {secret: db, key: password}}}"),
    )
    .unwrap();
    let _ = out;
    let work = c.desired_work();
    let job = &work["n1"].jobs[0];
    let env: Vec<(&str, &EnvValue)> = job
        .launch
        .env
        .iter()
        .map(|v| (v.name.as_str(), &v.value))
        .collect();
    assert_eq!(
        env,
        [
            (
                "DB_PASSWORD",
                &EnvValue::Sealed {
                    from: "db/password".into(),
                    sealed: Sealed {
                        sealed: "v1:password".into()
                    }
                }
            ),
            (
                "LOG_LEVEL",
                &EnvValue::Text {
                    text: "info".into()
                }
            ),
            (
                "MODE",
                &EnvValue::Text {
                    text: "fast".into()
                }
            ),
        ],
        "vars win over from; the secret stays sealed"
    );

    // In use: neither object can be deleted, nor a key read be dropped.
    let e = c
        .apply(
            Command::DeleteSecret {
                tenant: "acme".into(),
                name: "db".into(),
            },
            t(6),
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("application acme/shop version 1"),
        "{e}"
    );
    let e = c
        .apply(
            Command::DeleteConfig {
                tenant: "acme".into(),
                name: "settings".into(),
            },
            t(6),
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("still used by application acme/shop"),
        "{e}"
    );
    let e = c
        .apply(
            Command::Apply {
                documents: vec![sealed_secret(&["user"])],
                start: true,
            },
            t(6),
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("key \"password\" is read by application acme/shop version 1"),
        "{e}"
    );
    let e = c
        .apply(
            Command::DeleteTenant {
                name: "acme".into(),
            },
            t(6),
        )
        .unwrap_err();
    assert!(e.to_string().contains("acme"), "{e}");
    // Adding a key is fine and keeps the others.
    c.apply(
        Command::Apply {
            documents: vec![sealed_secret(&["password", "user", "host"])],
            start: true,
        },
        t(7),
    )
    .unwrap();
    let s = c.tenant_objects().secret("acme", "db").unwrap();
    assert!(s.data.values().all(|v| matches!(v, SecretValue::Sealed(_))));
    assert_eq!(
        c.tenant_objects().secrets(Some("acme"))[0].keys,
        ["host", "password", "user"]
    );

    // Once the application is gone, so is the hold.
    c.apply(
        Command::Operate {
            app: key("acme", "shop"),
            operation: OperationRequest::Delete,
        },
        t(8),
    )
    .unwrap();
    c.apply(
        Command::DeleteSecret {
            tenant: "acme".into(),
            name: "db".into(),
        },
        t(9),
    )
    .unwrap();
    let e = c
        .apply(
            Command::DeleteSecret {
                tenant: "acme".into(),
                name: "db".into(),
            },
            t(10),
        )
        .unwrap_err();
    assert!(e.to_string().contains("no Secret acme/db"), "{e}");
}

#[test]
fn storage_volumes_reach_the_launch_and_bad_ones_are_refused() {
    let mut c = setup();
    let yaml = app("{vars: {A: b}}").replace(
        "    traits:\n",
        "    traits:\n    - type: storage\n      properties: {volumes: [{name: data, size: 16Mi}]}\n",
    );
    try_apply(&mut c, &yaml).unwrap();
    let work = c.desired_work();
    let v = &work["n1"].jobs[0].launch.volumes;
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].env_name(), "DAROS_VOLUME_DATA");
    for (props, path) in [
        (
            "{volumes: [{name: data, size: 1Mi}]}",
            "properties.volumes[0].size",
        ),
        (
            "{volumes: [{name: Data, size: 16Mi}]}",
            "properties.volumes[0].name",
        ),
        (
            "{volumes: [{name: a, size: 16Mi}, {name: a, size: 16Mi}]}",
            "properties.volumes[1].name",
        ),
        ("{volumes: []}", "properties.volumes"),
        ("{volumes: [{name: a}]}", "properties.volumes[0]"),
    ] {
        let bad = app("{vars: {A: b}}").replace(
            "    traits:\n",
            &format!("    traits:\n    - type: storage\n      properties: {props}\n"),
        );
        let e = daros_coordinator::spec::parse(&bad, Format::Yaml).unwrap_err();
        assert!(
            e.0.iter().any(|x| x.path.ends_with(path)),
            "{props}: expected an error at ...{path}, got {e}"
        );
    }
}

#[test]
fn sidecars_reach_the_launch_and_bad_ones_are_refused() {
    let with = |props: &str| {
        app("{vars: {A: b}}").replace(
            "    traits:\n",
            &format!("    traits:\n    - type: sidecar\n      properties: {props}\n"),
        )
    };
    let mut c = setup();
    try_apply(
        &mut c,
        &with("{sidecars: [{name: ship, image: /bin/sh, runtimeSpec: {command: /bin/sh}}]}"),
    )
    .unwrap();
    // The init job done, the replica is wanted, with its sidecar.
    let job = c.desired_work()["n1"].jobs[0].job.clone();
    report_job(&mut c, &job, ObservedState::Running, 6);
    report_job(&mut c, &job, ObservedState::Exited { code: 0 }, 7);
    let work = c.desired_work();
    let s = &work["n1"].instances[0].launch.sidecars;
    assert_eq!(
        (s.len(), s[0].name.as_str(), s[0].image.as_str()),
        (1, "ship", "/bin/sh")
    );
    for (props, path) in [
        ("{sidecars: []}", "properties.sidecars"),
        (
            "{sidecars: [{name: S, image: /bin/sh, runtimeSpec: {}}]}",
            "properties.sidecars[0].name",
        ),
        (
            "{sidecars: [{name: s, image: \"\", runtimeSpec: {}}]}",
            "properties.sidecars[0].image",
        ),
        (
            "{sidecars: [{name: s, image: /bin/sh, runtimeSpec: 3}]}",
            "properties.sidecars[0].runtimeSpec",
        ),
        (
            "{sidecars: [{name: s, image: /bin/sh}]}",
            "properties.sidecars[0]",
        ),
    ] {
        let e = daros_coordinator::spec::parse(&with(props), Format::Yaml).unwrap_err();
        assert!(
            e.0.iter().any(|x| x.path.ends_with(path)),
            "{props}: expected an error at ...{path}, got {e}"
        );
    }
}

#[test]
fn init_trait_jobs_run_after_init_jobs_and_are_checked_with_them() {
    let with = |jobs: &str| {
        app("{vars: {A: b}}").replace(
            "    traits:\n",
            &format!("    traits:\n    - type: init\n      properties: {{jobs: {jobs}}}\n"),
        )
    };
    let mut c = setup();
    try_apply(
        &mut c,
        &with("[{name: migrate, runtimeSpec: {command: \"true\"}}]"),
    )
    .unwrap();
    // Run each job the node is asked for (a finished one stays listed with
    // its result) until none is new.
    let mut order: Vec<String> = Vec::new();
    for at in 6..10 {
        let work = c.desired_work();
        let Some(job) = work["n1"]
            .jobs
            .iter()
            .map(|j| j.job.clone())
            .find(|j| !order.contains(&j.job))
        else {
            break;
        };
        order.push(job.job.clone());
        report_job(&mut c, &job, ObservedState::Running, at);
        report_job(&mut c, &job, ObservedState::Exited { code: 0 }, at);
    }
    assert_eq!(order, ["schema", "migrate"]);
    assert_eq!(
        c.desired_work()["n1"].instances.len(),
        1,
        "the replica after both"
    );

    let e = daros_coordinator::spec::parse(
        &with("[{name: schema, runtimeSpec: {command: \"true\"}}]"),
        Format::Yaml,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("spec.workloads[0].traits[0].properties.jobs[0].name: duplicate init job name \"schema\""),
        "{e}"
    );
    let e = daros_coordinator::spec::parse(&with("[]"), Format::Yaml).unwrap_err();
    assert!(
        e.to_string()
            .contains("traits[0].properties.jobs: name at least one job"),
        "{e}"
    );
    let e = daros_coordinator::spec::parse(
        &with("[{name: x, runtimeSpec: {}, retries: -1}]"),
        Format::Yaml,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("traits[0].properties.jobs[0].retries"),
        "{e}"
    );
}
