//! The tenants' Configs and Secrets: stored by `tenant/name`, checked when
//! applied (tenant known, secret values sealed, no key removed that a
//! workload reads), refused for deletion while in use, resolved into the
//! environment of the launches that read them.

use super::Coordinator;
use crate::error::CoordinatorError;
use crate::field::FieldError;
use crate::model::application::Application;
use crate::model::config::Config;
use crate::model::secret::Secret;
use crate::model::workload::Workload;
use crate::spec::Document;
use crate::traits::ObjectRef;
use crate::traits::env::{EnvVar, Objects};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Configs and Secrets by `tenant/name`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TenantObjects {
    configs: BTreeMap<String, Config>,
    secrets: BTreeMap<String, Secret>,
}

fn key(tenant: &str, name: &str) -> String {
    format!("{tenant}/{name}")
}

/// What `describe`/`get` show of a Secret: its keys, never a value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretView {
    /// Name.
    pub name: String,
    /// Tenant.
    pub tenant: String,
    /// Its keys.
    pub keys: Vec<String>,
}

impl TenantObjects {
    /// A Config.
    pub fn config(&self, tenant: &str, name: &str) -> Option<&Config> {
        self.configs.get(&key(tenant, name))
    }

    /// A Secret (values sealed).
    pub fn secret(&self, tenant: &str, name: &str) -> Option<&Secret> {
        self.secrets.get(&key(tenant, name))
    }

    /// The tenant's Configs (every tenant's with `None`).
    pub fn configs(&self, tenant: Option<&str>) -> Vec<&Config> {
        self.configs
            .values()
            .filter(|c| tenant.is_none_or(|t| c.tenant == t))
            .collect()
    }

    /// The tenant's Secrets, keys only.
    pub fn secrets(&self, tenant: Option<&str>) -> Vec<SecretView> {
        self.secrets
            .values()
            .filter(|s| tenant.is_none_or(|t| s.tenant == t))
            .map(|s| SecretView {
                name: s.name.clone(),
                tenant: s.tenant.clone(),
                keys: s.data.keys().cloned().collect(),
            })
            .collect()
    }

    /// True when the tenant has a Config or Secret.
    pub fn tenant_has_any(&self, tenant: &str) -> bool {
        self.configs.values().any(|c| c.tenant == tenant)
            || self.secrets.values().any(|s| s.tenant == tenant)
    }
}

/// Whether `r` (of an application in `tenant`) is satisfied by the objects.
fn missing(objs: &TenantObjects, docs: &[Document], tenant: &str, r: &ObjectRef) -> Option<String> {
    let in_docs_config = |n: &str| {
        docs.iter().find_map(|d| match d {
            Document::Config(c) if c.tenant == tenant && c.name == n => Some(c.data.keys()),
            _ => None,
        })
    };
    let in_docs_secret = |n: &str| {
        docs.iter().find_map(|d| match d {
            Document::Secret(s) if s.tenant == tenant && s.name == n => Some(s.data.keys()),
            _ => None,
        })
    };
    let (keys, what): (Option<BTreeSet<String>>, &str) = match r {
        ObjectRef::Config { name, .. } => (
            in_docs_config(name)
                .map(|k| k.cloned().collect())
                .or_else(|| {
                    objs.config(tenant, name)
                        .map(|c| c.data.keys().cloned().collect())
                }),
            "Config",
        ),
        ObjectRef::Secret { name, .. } => (
            in_docs_secret(name)
                .map(|k| k.cloned().collect())
                .or_else(|| {
                    objs.secret(tenant, name)
                        .map(|s| s.data.keys().cloned().collect())
                }),
            "Secret",
        ),
    };
    let (ObjectRef::Config { name, key } | ObjectRef::Secret { name, key }) = r;
    match (keys, key) {
        (None, _) => Some(format!(
            "no {what} {name:?} in tenant {tenant:?}; apply it first"
        )),
        (Some(keys), Some(k)) if !keys.contains(k) => Some(format!(
            "{what} {name:?} has no key {k:?} (keys: {})",
            keys.into_iter().collect::<Vec<_>>().join(", ")
        )),
        _ => None,
    }
}

/// Every (workload path, reference) of an application's spec.
fn app_refs(app: &Application) -> Vec<(String, ObjectRef)> {
    app.spec
        .workloads
        .iter()
        .enumerate()
        .flat_map(|(i, w)| {
            crate::traits::references(&w.traits, &format!("spec.workloads[{i}].traits"))
        })
        .collect()
}

impl Coordinator {
    /// The environment `w`'s `env` trait gives, for a launch.
    pub(super) fn env_of(&self, tenant: &str, w: &Workload) -> Vec<EnvVar> {
        if w.traits.is_empty() {
            return Vec::new();
        }
        let configs = |n: &str| self.objects.config(tenant, n);
        let secrets = |n: &str| self.objects.secret(tenant, n);
        crate::traits::env::resolve(
            &w.traits,
            &Objects {
                configs: &configs,
                secrets: &secrets,
            },
        )
    }

    /// The tenant's objects.
    pub fn tenant_objects(&self) -> &TenantObjects {
        &self.objects
    }

    /// Problems of a Config or Secret document applied with `docs`.
    pub(super) fn object_doc_errors(
        &self,
        d: &Document,
        new_tenants: &BTreeSet<&str>,
    ) -> Vec<FieldError> {
        let (tenant, name, keys): (&str, &str, BTreeSet<&String>) = match d {
            Document::Config(c) => (&c.tenant, &c.name, c.data.keys().collect()),
            Document::Secret(s) => (&s.tenant, &s.name, s.data.keys().collect()),
            _ => return Vec::new(),
        };
        let mut errors = Vec::new();
        if !self.tenants.contains_key(tenant) && !new_tenants.contains(tenant) {
            errors.push(FieldError::new(
                "metadata.tenant",
                format!("unknown tenant {tenant:?}; apply the Tenant first"),
            ));
        }
        if let Document::Secret(s) = d {
            for k in s.plain_keys() {
                errors.push(FieldError::new(
                    format!("data.{k}"),
                    "not sealed: secret values are sealed by a server agent before they are replicated (apply through a server agent's API)",
                ));
            }
        }
        // A key a running workload reads may not disappear.
        for (user, r) in self.object_users(tenant) {
            let (ObjectRef::Config {
                name: n,
                key: Some(k),
            }
            | ObjectRef::Secret {
                name: n,
                key: Some(k),
            }) = &r
            else {
                continue;
            };
            let same_kind = matches!(
                (&r, d),
                (ObjectRef::Config { .. }, Document::Config(_))
                    | (ObjectRef::Secret { .. }, Document::Secret(_))
            );
            if same_kind && n == name && !keys.contains(k) {
                errors.push(FieldError::new(
                    "data",
                    format!("key {k:?} is read by {user}; keep it or change that first"),
                ));
            }
        }
        errors
    }

    /// Problems of an application's references to Configs and Secrets
    /// (those in the same apply count).
    pub(super) fn app_reference_errors(
        &self,
        app: &Application,
        docs: &[Document],
    ) -> Vec<FieldError> {
        app_refs(app)
            .into_iter()
            .filter_map(|(path, r)| {
                missing(&self.objects, docs, &app.tenant, &r)
                    .map(|reason| FieldError::new(path, reason))
            })
            .collect()
    }

    /// What reads objects of `tenant`: (`application t/a version v`, reference),
    /// over the spec in force and every version an instance still runs.
    fn object_users(&self, tenant: &str) -> Vec<(String, ObjectRef)> {
        let mut out = Vec::new();
        for e in self.apps.values().filter(|e| e.key.tenant == tenant) {
            let mut versions: BTreeSet<u32> =
                e.runtime.instances.values().map(|i| i.version).collect();
            versions.insert(e.current);
            for v in versions {
                if let Some(av) = e.version(v) {
                    for (_, r) in app_refs(&av.spec) {
                        out.push((format!("application {} version {v}", e.key), r));
                    }
                }
            }
        }
        out
    }

    pub(super) fn store_object(&mut self, d: Document) {
        match d {
            Document::Config(c) => {
                self.objects.configs.insert(key(&c.tenant, &c.name), c);
            }
            Document::Secret(s) => {
                self.objects.secrets.insert(key(&s.tenant, &s.name), s);
            }
            _ => {}
        }
    }

    /// Deletes a Config (`secret` false) or a Secret; refused while read.
    pub(super) fn cmd_delete_object(
        &mut self,
        secret: bool,
        tenant: &str,
        name: &str,
    ) -> Result<(), CoordinatorError> {
        let kind = if secret { "Secret" } else { "Config" };
        let k = key(tenant, name);
        let exists = if secret {
            self.objects.secrets.contains_key(&k)
        } else {
            self.objects.configs.contains_key(&k)
        };
        if !exists {
            return Err(CoordinatorError::NotFound(format!("{kind} {k}")));
        }
        let mut by: Vec<String> = self
            .object_users(tenant)
            .into_iter()
            .filter(|(_, r)| match r {
                ObjectRef::Config { name: n, .. } => !secret && n == name,
                ObjectRef::Secret { name: n, .. } => secret && n == name,
            })
            .map(|(user, _)| user)
            .collect();
        by.dedup();
        if !by.is_empty() {
            return Err(CoordinatorError::InUse {
                what: format!("{kind} {k}"),
                by,
            });
        }
        if secret {
            self.objects.secrets.remove(&k);
        } else {
            self.objects.configs.remove(&k);
        }
        Ok(())
    }
}
