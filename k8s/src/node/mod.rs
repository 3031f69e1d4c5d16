//! Kubernetes mode of the node agent: watch the pods bound to this node
//! (field selector `spec.nodeName`), the namespaces, the policies and the
//! profiles; after every change (and on a timer) run a [`pass::pass`] and
//! write back what it found — this node's entry in each policy's status and
//! an Event on each pod whose floors are degraded.
//!
//! The watches are kube-runtime's: an expired resourceVersion (410 Gone)
//! makes them list again, a lost API server is retried with backoff, and
//! nothing is applied or released until all four have listed once, so a
//! restart of the agent or of the API server changes no knob.

pub mod enforcer;
pub mod pass;
mod report;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio::sync::{Notify, watch};
use tracing::{debug, info, warn};

use crate::pod::PodFacts;
use crate::policy::MinimalReservationPolicy;
use crate::profile::QoSProfile;
pub use enforcer::{Applied, PodEnforcer};
pub use pass::{PassResult, Picture};

/// Settings of Kubernetes mode.
#[derive(Debug, Clone)]
pub struct NodeAgentConfig {
    /// This node's name in Kubernetes (`spec.nodeName` of its pods).
    pub node: String,
    /// A pass this often even without changes (knobs re-read, pods whose
    /// cgroup appeared late).
    pub resync: Duration,
}

/// The watched objects.
#[derive(Clone)]
struct Stores {
    pods: Store<Pod>,
    namespaces: Store<Namespace>,
    policies: Store<MinimalReservationPolicy>,
    profiles: Store<QoSProfile>,
}

impl Stores {
    fn picture(&self) -> Picture {
        Picture {
            pods: self
                .pods
                .state()
                .iter()
                .filter_map(|p| PodFacts::of(p))
                .collect(),
            namespaces: self
                .namespaces
                .state()
                .iter()
                .filter_map(|n| {
                    Some((
                        n.metadata.name.clone()?,
                        n.metadata.labels.clone().unwrap_or_default(),
                    ))
                })
                .collect(),
            policies: self
                .policies
                .state()
                .iter()
                .map(|p| p.as_ref().clone())
                .collect(),
            profiles: self
                .profiles
                .state()
                .iter()
                .filter_map(|p| Some((p.metadata.name.clone()?, p.as_ref().clone())))
                .collect(),
        }
    }
}

// Runs a watch into a store, waking `changed` on every event; errors (410,
// a lost connection) are the watcher's to recover from, logged here.
fn watch_into<K>(
    api: Api<K>,
    cfg: watcher::Config,
    changed: Arc<Notify>,
    what: &'static str,
) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, cfg).default_backoff());
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Init) => debug!(what, "listing"),
                Ok(watcher::Event::InitDone) => {
                    info!(what, "listed");
                    changed.notify_one();
                }
                Ok(watcher::Event::InitApply(_)) => {}
                Ok(_) => changed.notify_one(),
                Err(e @ watcher::Error::WatchError(_)) => {
                    // 410 Gone and the like: the watcher lists again.
                    info!(what, error = %e, "watch expired; listing again");
                }
                Err(e) => warn!(what, error = %e, "watch failed; retrying with backoff"),
            }
        }
    });
    (reader, task)
}

/// Runs Kubernetes mode until `stop` turns true.
pub async fn run(
    client: Client,
    cfg: NodeAgentConfig,
    enforcer: Arc<dyn PodEnforcer>,
    mut stop: watch::Receiver<bool>,
) {
    let changed = Arc::new(Notify::new());
    let (pods, t1) = watch_into(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default().fields(&format!("spec.nodeName={}", cfg.node)),
        changed.clone(),
        "pods",
    );
    let (namespaces, t2) = watch_into(
        Api::<Namespace>::all(client.clone()),
        watcher::Config::default(),
        changed.clone(),
        "namespaces",
    );
    let (policies, t3) = watch_into(
        Api::<MinimalReservationPolicy>::all(client.clone()),
        watcher::Config::default(),
        changed.clone(),
        "minimalreservationpolicies",
    );
    let (profiles, t4) = watch_into(
        Api::<QoSProfile>::all(client.clone()),
        watcher::Config::default(),
        changed.clone(),
        "qosprofiles",
    );
    let tasks = [t1, t2, t3, t4];
    let stores = Stores {
        pods,
        namespaces,
        policies,
        profiles,
    };
    let ready = async {
        let _ = stores.pods.wait_until_ready().await;
        let _ = stores.namespaces.wait_until_ready().await;
        let _ = stores.policies.wait_until_ready().await;
        let _ = stores.profiles.wait_until_ready().await;
    };
    info!(node = %cfg.node, "Kubernetes mode: watching this node's pods, namespaces, MinimalReservationPolicies and QoSProfiles");
    tokio::select! {
        () = ready => {}
        _ = stop.wait_for(|s| *s) => {
            for t in tasks { t.abort(); }
            return;
        }
    }
    let mut reporter = report::Reporter::new(client, &cfg.node);
    loop {
        let picture = stores.picture();
        let e = enforcer.clone();
        match tokio::task::spawn_blocking(move || pass::pass(&picture, e.as_ref())).await {
            Ok(result) => {
                debug!(applied = result.applied, released = result.released, "pass");
                reporter.write(&stores.policies.state(), &result).await;
            }
            Err(e) => warn!(error = %e, "a Kubernetes-mode pass failed"),
        }
        tokio::select! {
            () = changed.notified() => {}
            () = tokio::time::sleep(cfg.resync) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    for t in tasks {
        t.abort();
    }
}

/// Each policy's generation (for `observedGeneration`) and UID (a policy
/// deleted and created again under its name is a new object), by name.
pub(crate) fn generations(
    policies: &[Arc<MinimalReservationPolicy>],
) -> BTreeMap<String, (Option<i64>, Option<String>)> {
    policies
        .iter()
        .filter_map(|p| {
            Some((
                p.metadata.name.clone()?,
                (p.metadata.generation, p.metadata.uid.clone()),
            ))
        })
        .collect()
}
