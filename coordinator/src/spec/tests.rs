//! Spec parsing tests: the examples parse, and bad input is refused with the
//! field path and the reason.

use super::*;

const SHOP: &str = include_str!("../../../examples/shop.yaml");
const CLUSTER: &str = include_str!("../../../examples/cluster.yaml");

fn app_yaml(workloads: &str) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Application\nmetadata: {{name: a, tenant: t}}\nspec:\n  workloads:\n{workloads}"
    )
}

fn one_error(text: &str) -> SpecError {
    let errs = parse(text, Format::Auto).unwrap_err();
    assert_eq!(errs.0.len(), 1, "{errs}");
    errs.0.into_iter().next().unwrap()
}

#[test]
fn examples_parse() {
    let docs = parse(SHOP, Format::Yaml).unwrap();
    assert_eq!(docs.len(), 2);
    let Document::Application(app) = &docs[1] else {
        panic!("second document is not the application")
    };
    assert_eq!(app.key().to_string(), "shop-team/shop");
    assert_eq!(app.spec.workloads.len(), 2);
    assert_eq!(app.spec.workloads[1].depends_on, ["web"]);
    assert_eq!(app.spec.workloads[0].init_jobs[0].name, "prepare-docroot");
    assert_eq!(
        app.spec.workloads[0].runtime_spec.value()["command"],
        "/usr/bin/busybox"
    );
    let kinds: Vec<_> = parse(CLUSTER, Format::Auto)
        .unwrap()
        .iter()
        .map(Document::kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "Policy",
            "ResourcePool",
            "Tenant",
            "Tenant",
            "Node",
            "Node",
            "Node",
            "Node"
        ]
    );
}

#[test]
fn json_and_yaml_agree() {
    let docs = parse(SHOP, Format::Yaml).unwrap();
    let Document::Application(app) = &docs[1] else {
        panic!()
    };
    let yaml = application_to_yaml(app);
    let json = serde_json::to_string(&envelope::ApplicationDoc::from_model(app)).unwrap();
    assert_eq!(parse_application(&yaml, Format::Yaml).unwrap(), *app);
    assert_eq!(parse_application(&json, Format::Json).unwrap(), *app);
}

#[test]
fn unknown_field_names_its_path_and_line() {
    let e = one_error(&app_yaml(
        "    - name: w\n      runtime: {type: process}\n      resorces: {}\n",
    ));
    assert_eq!(e.path, "spec.workloads[0].resorces");
    assert!(e.reason.contains("unknown field `resorces`"), "{e}");
    assert_eq!(e.line, Some(8));
    assert_eq!(e.kind.as_deref(), Some("Application"));
    assert_eq!(e.name.as_deref(), Some("a"));
}

#[test]
fn bad_quantity_names_its_path() {
    let e = one_error(&app_yaml(
        "    - name: w\n      runtime: {type: process}\n      resources: {cpu: {limit: 2cores}}\n",
    ));
    assert_eq!(e.path, "spec.workloads[0].resources.cpu.limit");
    assert!(e.reason.contains("unknown unit"), "{e}");
}

#[test]
fn json_errors_have_paths_too() {
    let text = r#"{"apiVersion":"daros.io/v1","kind":"Application","metadata":{"name":"a","tenant":"t"},
        "spec":{"workloads":[{"name":"w","runtime":{"type":"process"}},{"name":"x","runtime":{"type":"unikernel"}}]}}"#;
    let e = one_error(text);
    assert_eq!(e.path, "spec.workloads[1].runtime.type");
    assert!(e.reason.contains("unikernel"), "{e}");
    let e = one_error("{\"kind\": ");
    assert!(e.reason.starts_with("invalid JSON"), "{e}");
}

#[test]
fn semantic_errors_are_all_reported() {
    let errs = parse(
        &app_yaml(concat!(
            "    - name: w\n      runtime: {type: process}\n",
            "      resources: {cpu: {request: \"2\", limit: \"1\"}}\n",
            "      replicas: {min: 3, max: 2}\n",
            "    - name: w\n      runtime: {type: process}\n      dependsOn: [nope]\n",
        )),
        Format::Yaml,
    )
    .unwrap_err();
    let paths: Vec<_> = errs.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.workloads[0].resources.cpu.request",
            "spec.workloads[0].replicas.max",
            "spec.workloads[1].name",
            "spec.workloads[1].dependsOn[0]",
        ],
        "{errs}"
    );
    assert!(errs.to_string().contains("request 2 exceeds limit 1"));
}

#[test]
fn dependency_cycle_is_named() {
    let e = one_error(&app_yaml(concat!(
        "    - {name: a, runtime: {type: process}, dependsOn: [b]}\n",
        "    - {name: b, runtime: {type: process}, dependsOn: [c]}\n",
        "    - {name: c, runtime: {type: process}, dependsOn: [a]}\n",
    )));
    assert_eq!(e.path, "spec.workloads[0].dependsOn");
    assert_eq!(e.reason, "dependency cycle: a -> b -> c -> a");
}

#[test]
fn qos_rules_apply_to_workloads() {
    let e = one_error(&app_yaml(concat!(
        "    - name: w\n      runtime: {type: container}\n      qos: GuaranteedPro\n",
        "      resources: {cpu: {request: \"1\", limit: \"1\"}, memory: {request: 1Gi, limit: 1Gi}}\n",
    )));
    assert_eq!(e.path, "spec.workloads[0].resources");
    assert!(e.reason.contains("MinimalReservation"), "{e}");
}

#[test]
fn envelope_errors() {
    let e = one_error("apiVersion: daros.io/v1\nmetadata: {name: a}\nspec: {}\n");
    assert_eq!(e.path, "kind");
    let e = one_error("apiVersion: daros.io/v1\nkind: Gadget\nmetadata: {name: a}\nspec: {}\n");
    assert!(e.reason.contains("unknown kind \"Gadget\""), "{e}");
    let e = one_error(
        "apiVersion: v2\nkind: ResourcePool\nmetadata: {name: p}\nspec: {selector: {}}\n",
    );
    assert_eq!(e.path, "apiVersion");
    let e = one_error("apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {name: t}\n");
    assert_eq!(e.path, "spec");
    assert!(e.reason.contains("missing field `spec`"), "{e}");
    let e = one_error("a: [1, 2\n");
    assert!(e.reason.starts_with("invalid YAML"), "{e}");
}

#[test]
fn policy_scope_fields_are_checked() {
    let e = one_error(
        "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {name: p}\nspec: {scope: Tenant, rules: {enablePreemption: false}}\n",
    );
    assert_eq!(e.path, "spec.tenant");
    let docs = parse(
        "apiVersion: daros.io/v1\nkind: Policy\nmetadata: {name: p}\nspec: {scope: Application, tenant: t, application: a, rules: {maxOvercommitRatio: 1.3}}\n",
        Format::Yaml,
    )
    .unwrap();
    let Document::Policy(p) = &docs[0] else {
        panic!()
    };
    assert_eq!(
        p.scope,
        crate::model::policy::PolicyScope::Application {
            tenant: "t".into(),
            application: "a".into()
        }
    );
}

#[test]
fn second_document_error_is_attributed() {
    let text = format!(
        "{}---\napiVersion: daros.io/v1\nkind: Node\nmetadata: {{name: n1}}\nspec: {{capacity: {{cpu: \"0\", memory: 1Gi}}, runtimes: [process]}}\n",
        app_yaml("    - {name: w, runtime: {type: process}}\n")
    );
    let e = one_error(&text);
    assert_eq!(e.document, 1);
    assert_eq!(e.path, "spec.capacity.cpu");
    assert!(
        e.to_string()
            .starts_with("document 2 (Node n1): spec.capacity.cpu")
    );
}
