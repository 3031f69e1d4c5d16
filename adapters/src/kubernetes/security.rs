//! The security baseline on a pod: every container (init containers and
//! sidecars included) gets the workload's [`SecurityContext`] — capabilities
//! dropped to what it keeps, `allowPrivilegeEscalation: false` under
//! no_new_privs, `runAsNonRoot`, a read-only root filesystem with an
//! `emptyDir` at each writable path — and the pod its seccomp profile. A
//! template asking for more (a privileged container) is refused.

use daros_coordinator::FieldError;
use daros_coordinator::model::security::{SeccompProfile, SecurityContext};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, PodSecurityContext, PodSpec,
    SeccompProfile as K8sSeccomp, SecurityContext as K8sSecurityContext, Volume, VolumeMount,
};

/// Applies `ctx` to `pod` (template at `base`); errors name the field.
pub fn apply(pod: &mut PodSpec, ctx: &SecurityContext, base: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let writable: Vec<(String, String)> = ctx
        .writable_paths
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, p)| (format!("daros-writable-{i}"), p.clone()))
        .collect();
    let user = ctx
        .run_as_user
        .as_deref()
        .and_then(|u| u.parse::<i64>().ok());
    let group = ctx
        .run_as_group
        .as_deref()
        .and_then(|g| g.parse::<i64>().ok());
    let mut each = |kind: &str, list: &mut Vec<Container>| {
        for (i, c) in list.iter_mut().enumerate() {
            let at = format!("{base}.spec.{kind}[{i}].securityContext");
            let sc = c
                .security_context
                .get_or_insert_with(K8sSecurityContext::default);
            if sc.privileged == Some(true) && !ctx.privileged {
                errs.push(FieldError::new(
                    format!("{at}.privileged"),
                    "privileged containers are not allowed by the security baseline",
                ));
            }
            if ctx.privileged {
                sc.privileged = Some(true);
                continue;
            }
            sc.privileged = Some(false);
            sc.allow_privilege_escalation = Some(!ctx.no_new_privileges);
            sc.capabilities = Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: Some(
                    ctx.capabilities
                        .iter()
                        .map(|c| c.name().to_string())
                        .collect(),
                ),
            });
            if ctx.run_as_non_root {
                sc.run_as_non_root = Some(true);
            }
            if let Some(u) = user {
                sc.run_as_user = Some(u);
            }
            if let Some(g) = group {
                sc.run_as_group = Some(g);
            }
            if ctx.writable_paths.is_some() {
                sc.read_only_root_filesystem = Some(true);
                let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
                for (name, path) in &writable {
                    mounts.push(VolumeMount {
                        name: name.clone(),
                        mount_path: path.clone(),
                        ..VolumeMount::default()
                    });
                }
            }
        }
    };
    each(
        "initContainers",
        pod.init_containers.get_or_insert_with(Vec::new),
    );
    each("containers", &mut pod.containers);
    if pod.init_containers.as_ref().is_some_and(Vec::is_empty) {
        pod.init_containers = None;
    }
    if !writable.is_empty() {
        let vols = pod.volumes.get_or_insert_with(Vec::new);
        for (name, _) in &writable {
            vols.push(Volume {
                name: name.clone(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            });
        }
    }
    let psc = pod
        .security_context
        .get_or_insert_with(PodSecurityContext::default);
    psc.seccomp_profile = Some(K8sSeccomp {
        type_: match ctx.seccomp {
            SeccompProfile::RuntimeDefault if !ctx.privileged => "RuntimeDefault".into(),
            _ => "Unconfined".into(),
        },
        localhost_profile: None,
    });
    if ctx.run_as_non_root {
        psc.run_as_non_root = Some(true);
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_container_is_confined_and_privileged_is_refused() {
        let mut pod: PodSpec = serde_json::from_value(json!({
            "initContainers": [{"name": "setup", "image": "busybox"}],
            "containers": [{"name": "web", "image": "nginx"}, {"name": "proxy", "image": "envoy",
                            "securityContext": {"privileged": true}}]
        }))
        .unwrap();
        let ctx = SecurityContext {
            run_as_non_root: true,
            writable_paths: Some(vec!["/tmp".into()]),
            ..SecurityContext::default()
        };
        let errs = apply(&mut pod, &ctx, "runtimeSpec.podTemplate");
        assert_eq!(
            errs[0].path,
            "runtimeSpec.podTemplate.spec.containers[1].securityContext.privileged"
        );
        let v = serde_json::to_value(&pod).unwrap();
        for c in v["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .chain(v["containers"].as_array().unwrap())
        {
            let sc = &c["securityContext"];
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{c}");
            assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
            assert_eq!(sc["readOnlyRootFilesystem"], true);
            assert_eq!(sc["runAsNonRoot"], true);
            assert_eq!(c["volumeMounts"][0]["mountPath"], "/tmp");
        }
        assert_eq!(
            v["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert_eq!(v["volumes"][0]["emptyDir"], json!({}));
    }
}
