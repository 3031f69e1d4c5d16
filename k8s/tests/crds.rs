//! The custom resources (issue 13): the CRDs in packaging/kubernetes are
//! what the Rust types generate, their schemas are structural, the shipped
//! examples parse into the types and check clean, bad input is refused
//! naming the field, and every manifest validates offline against the
//! Kubernetes schemas (`kubernetes-validate --strict`, PyPI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use daros_k8s::{MinimalReservationPolicy, QoSProfile};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/kubernetes")
}

#[test]
fn the_committed_crds_are_what_the_types_generate() {
    let want = daros_k8s::crds_yaml().unwrap();
    let path = dir().join("crds.yaml");
    if std::env::var_os("DAROS_TEST_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} differs from the types; run DAROS_TEST_BLESS=1 cargo test -p daros-k8s --test crds",
        path.display()
    );
}

/// Every schema node says its type (Kubernetes refuses non-structural
/// schemas), no `$ref` is left.
fn structural(v: &serde_json::Value, at: &str, errs: &mut Vec<String>) {
    let Some(o) = v.as_object() else { return };
    if o.contains_key("$ref") {
        errs.push(format!("{at}: $ref"));
    }
    let free = o.contains_key("x-kubernetes-int-or-string")
        || o.contains_key("x-kubernetes-preserve-unknown-fields");
    if !o.contains_key("type") && !free {
        errs.push(format!("{at}: no type"));
    }
    for (k, sub) in o
        .get("properties")
        .and_then(|p| p.as_object())
        .into_iter()
        .flatten()
    {
        structural(sub, &format!("{at}.{k}"), errs);
    }
    if let Some(items) = o.get("items") {
        structural(items, &format!("{at}[]"), errs);
    }
    if let Some(a) = o.get("additionalProperties").filter(|a| a.is_object()) {
        structural(a, &format!("{at}{{}}"), errs);
    }
}

#[test]
fn the_crd_schemas_are_structural() {
    use kube::CustomResourceExt;
    for crd in [QoSProfile::crd(), MinimalReservationPolicy::crd()] {
        let v = serde_json::to_value(&crd).unwrap();
        let schema = &v["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut errs = Vec::new();
        structural(schema, &crd.metadata.name.clone().unwrap(), &mut errs);
        assert!(errs.is_empty(), "{errs:?}");
        // The status is a subresource the agents patch.
        if crd.spec.names.kind == "MinimalReservationPolicy" {
            assert!(v["spec"]["versions"][0]["subresources"]["status"].is_object());
        }
    }
}

fn examples() -> (QoSProfile, MinimalReservationPolicy) {
    let text = std::fs::read_to_string(dir().join("examples/reservation.yaml")).unwrap();
    let mut docs = serde_yaml_ng::Deserializer::from_str(&text);
    let p: QoSProfile = serde::Deserialize::deserialize(docs.next().unwrap()).unwrap();
    let m: MinimalReservationPolicy =
        serde::Deserialize::deserialize(docs.next().unwrap()).unwrap();
    (p, m)
}

#[test]
fn the_examples_parse_check_clean_and_select_what_they_say() {
    let (p, m) = examples();
    assert!(p.spec.validate().is_empty(), "{:?}", p.spec.validate());
    assert!(m.spec.validate().is_empty(), "{:?}", m.spec.validate());
    let labels = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let none = BTreeMap::new();
    assert!(m.spec.selects("shop", &none, &labels(&[("tier", "web")])));
    assert!(
        !m.spec
            .selects("shop", &none, &labels(&[("tier", "web"), ("canary", "1")]))
    );
    assert!(!m.spec.selects("other", &none, &labels(&[("tier", "web")])));
    // The higher priority wins, then the name.
    let mut low = m.clone();
    low.spec.priority = 1;
    low.metadata.name = Some("a-low".into());
    let mut twin = m.clone();
    twin.metadata.name = Some("a-twin".into());
    let w = daros_k8s::policy::winner([&low, &m, &twin]).unwrap();
    assert_eq!(w.metadata.name.as_deref(), Some("a-twin"));
}

#[test]
fn bad_input_is_refused_naming_the_field() {
    let (mut p, mut m) = examples();
    p.spec.floors.cpu = Some("lots".into());
    p.spec.class = daros_k8s::profile::ClassName::Burstable;
    let e: Vec<String> = p.spec.validate().iter().map(ToString::to_string).collect();
    assert!(
        e.iter()
            .any(|e| e.contains("spec.floors.cpu") && e.contains("lots")),
        "{e:?}"
    );
    assert!(e.iter().any(|e| e.contains("GuaranteedPro")), "{e:?}");
    m.spec.pod_selector.as_mut().unwrap().match_expressions[0].operator = "Maybe".into();
    m.spec.floors.network_egress = Some("fast".into());
    let e: Vec<String> = m.spec.validate().iter().map(ToString::to_string).collect();
    assert!(
        e.iter()
            .any(|e| e.contains("spec.podSelector.matchExpressions[0].operator")),
        "{e:?}"
    );
    assert!(
        e.iter().any(|e| e.contains("spec.floors.networkEgress")),
        "{e:?}"
    );
    // Unknown fields are refused by the types, as the CRDs' schemas refuse them.
    let r: Result<QoSProfile, _> = serde_yaml_ng::from_str(
        "apiVersion: daros.io/v1alpha1\nkind: QoSProfile\nmetadata: {name: x}\nspec: {class: Guaranteed, weight: 3}\n",
    );
    assert!(r.unwrap_err().to_string().contains("weight"));
}

#[test]
fn every_manifest_validates_against_the_kubernetes_schemas() {
    let files: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        // kustomization.yaml configures kustomize; it is not an API object.
        .filter(|p| p.file_name().is_some_and(|n| n != "kustomization.yaml"))
        .collect();
    assert!(files.len() >= 5, "{files:?}");
    let out = match std::process::Command::new("kubernetes-validate")
        .args(["--strict", "--no-warn"])
        .args(&files)
        .output()
    {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "SKIPPED: kubernetes-validate not installed (PyPI; scripts/test.sh installs it)"
            );
            return;
        }
        r => r.unwrap(),
    };
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The kustomization names every manifest.
    let k = std::fs::read_to_string(dir().join("kustomization.yaml")).unwrap();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy();
        assert!(k.contains(&*name), "kustomization.yaml misses {name}");
    }
}
