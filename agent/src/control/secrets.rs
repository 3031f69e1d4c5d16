//! Secret values on a server agent: sealed before a document reaches raft
//! (so the log, the snapshots and every server's memory hold only
//! ciphertext), opened by the leader only into the work it sends the node
//! that runs the workload (over mutual TLS).

use std::path::Path;

use daros_coordinator::model::secret::{Sealed, Secret, SecretText, SecretValue};
use daros_coordinator::spec::Document;
use daros_coordinator::traits::env::{EnvValue, EnvVar};
use daros_gossip::join::pki_dir;
use daros_gossip::pki::{ClusterCa, SecretSealer};

use super::work::NodeWork;

/// The sealing key of this server agent's cluster.
#[derive(Debug)]
pub struct SecretKeys {
    sealer: SecretSealer,
}

impl SecretKeys {
    /// The key, when `mesh_dir` holds the cluster CA (a server agent);
    /// `None` on client nodes.
    pub fn load(mesh_dir: &Path) -> Result<Option<Self>, String> {
        let dir = pki_dir(mesh_dir);
        if !ClusterCa::exists(&dir) {
            return Ok(None);
        }
        let ca = ClusterCa::load(&dir).map_err(|e| e.to_string())?;
        Ok(Some(Self::from_key(&ca.secret_objects_key())))
    }

    /// A sealer with `key` (tests).
    pub fn from_key(key: &[u8; 32]) -> Self {
        Self {
            sealer: SecretSealer::new(key),
        }
    }

    /// Seals every plain Secret value of `docs`; a value given sealed must
    /// open with this cluster's key for its tenant, secret and key. Errors
    /// name the document and field.
    pub fn seal_documents(&self, docs: &mut [Document]) -> Result<(), String> {
        let mut errors = Vec::new();
        for d in docs.iter_mut() {
            let Document::Secret(s) = d else { continue };
            let (tenant, name) = (s.tenant.clone(), s.name.clone());
            for (k, v) in s.data.iter_mut() {
                let aad = Secret::aad(&tenant, &name, k);
                match v {
                    SecretValue::Plain(text) => {
                        *v = SecretValue::Sealed(Sealed {
                            sealed: self.sealer.seal(&aad, text.expose()),
                        });
                    }
                    SecretValue::Sealed(sealed) => {
                        if let Err(e) = self.sealer.open(&aad, &sealed.sealed) {
                            errors.push(format!("Secret {tenant}/{name}: spec.data.{k}: {e}"));
                        }
                    }
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    /// Opens the sealed environment values of `work` (those that do not
    /// open become `Missing`, and their instance does not start).
    pub fn open_work(&self, work: &mut NodeWork) {
        let app_envs = work
            .instances
            .iter_mut()
            .map(|i| (i.instance.app.tenant.clone(), &mut i.launch.env))
            .chain(
                work.jobs
                    .iter_mut()
                    .map(|j| (j.job.app.tenant.clone(), &mut j.launch.env)),
            );
        for (tenant, env) in app_envs {
            for var in env.iter_mut() {
                self.open_var(&tenant, var);
            }
        }
    }

    fn open_var(&self, tenant: &str, var: &mut EnvVar) {
        let EnvValue::Sealed { from, sealed } = &var.value else {
            return;
        };
        let Some((name, key)) = from.split_once('/') else {
            return;
        };
        let aad = Secret::aad(tenant, name, key);
        var.value = match self.sealer.open(&aad, &sealed.sealed) {
            Ok(text) => EnvValue::Opened {
                from: from.clone(),
                value: SecretText::new(text),
            },
            Err(e) => EnvValue::Missing {
                what: format!("Secret {name:?} key {key:?}: {e}"),
            },
        };
    }
}
