//! The Kubernetes runtime's RuntimeSpec: `{namespace, podTemplate}`. The
//! top level is strict (an unknown field is refused with its path); the
//! pod template is read by k8s-openapi, which, like the API server's
//! non-strict decoding, ignores fields it does not know.

use crate::error::AdapterError;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde::Deserialize;

/// RuntimeSpec of a container workload run as Kubernetes pods.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesSpec {
    /// Namespace of the pods (default: the adapter's).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The pod each instance runs.
    pub pod_template: PodTemplateSpec,
}

impl KubernetesSpec {
    /// Reads the spec from the opaque JSON; errors are prefixed with `path`.
    pub fn parse(value: &serde_json::Value, path: &str) -> Result<Self, AdapterError> {
        if value.is_null() {
            return Err(AdapterError::field(
                path,
                "the kubernetes runtime needs a runtimeSpec with a podTemplate",
            ));
        }
        let spec: KubernetesSpec = serde_path_to_error::deserialize(value).map_err(|e| {
            let inner = e.path().to_string();
            let at = if inner == "." {
                path.to_string()
            } else {
                format!("{path}.{inner}")
            };
            AdapterError::field(at, e.into_inner().to_string())
        })?;
        let containers = spec
            .pod_template
            .spec
            .as_ref()
            .map_or(0, |s| s.containers.len());
        if containers == 0 {
            return Err(AdapterError::field(
                format!("{path}.podTemplate.spec.containers"),
                "the pod template needs at least one container",
            ));
        }
        if let Some(ns) = &spec.namespace
            && let Some(e) =
                daros_coordinator::model::names::check_name(&format!("{path}.namespace"), ns)
        {
            return Err(AdapterError::InvalidSpec(vec![e]));
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strict_top_level_and_needs_a_container() {
        let ok = json!({"namespace": "shop", "podTemplate": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}});
        let s = KubernetesSpec::parse(&ok, "runtimeSpec").unwrap();
        assert_eq!(s.namespace.as_deref(), Some("shop"));
        let e = KubernetesSpec::parse(&json!({"podTemplate": {}, "replicas": 2}), "runtimeSpec")
            .unwrap_err();
        assert!(e.to_string().contains("replicas"), "{e}");
        let e = KubernetesSpec::parse(
            &json!({"podTemplate": {"spec": {"containers": []}}}),
            "runtimeSpec",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("runtimeSpec.podTemplate.spec.containers"),
            "{e}"
        );
        let e = KubernetesSpec::parse(
            &json!({"podTemplate": {"spec": {"containers": [{"name": 5}]}}}),
            "runtimeSpec",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("runtimeSpec.podTemplate.spec.containers[0].name"),
            "{e}"
        );
        let e = KubernetesSpec::parse(
            &json!({"namespace": "Bad_NS", "podTemplate": {"spec": {"containers": [{"name": "a"}]}}}),
            "runtimeSpec",
        )
        .unwrap_err();
        assert!(e.to_string().contains("runtimeSpec.namespace"), "{e}");
    }
}
