//! The membership service: a chitchat instance on the sealed transport, the keys this node
//! publishes, and the member view with phi-accrual liveness and last-heard times.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chitchat::{ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig, spawn_chitchat};

use super::member::{self, CoordinatorHint, LocalInfo, Member, MemberStatus, keys};
use super::seal::{Keyring, SealStats};
use super::transport::SealedUdpTransport;
use crate::identity::{NodeId, Role};

/// Errors of the membership service.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// Chitchat could not start (usually: the gossip port is taken).
    #[error("gossip could not start on {addr}: {reason}")]
    Start {
        /// Listen address.
        addr: SocketAddr,
        /// Cause.
        reason: String,
    },
}

/// Settings of the membership service.
#[derive(Clone, Debug)]
pub struct MembershipConfig {
    /// Cluster id (chitchat refuses gossip from other clusters).
    pub cluster_id: String,
    /// This node.
    pub node_id: NodeId,
    /// Generation: must grow across restarts.
    pub generation: u64,
    /// Role, published.
    pub role: Role,
    /// RPC address, published.
    pub rpc_addr: SocketAddr,
    /// UDP listen address.
    pub listen: SocketAddr,
    /// Address peers gossip to.
    pub advertise: SocketAddr,
    /// Seed addresses.
    pub seeds: Vec<SocketAddr>,
    /// Gossip round interval.
    pub interval: Duration,
    /// Phi-accrual threshold above which a member is dead.
    pub phi_threshold: f64,
    /// How long a dead member is remembered before being forgotten.
    pub dead_grace: Duration,
}

impl MembershipConfig {
    /// Defaults: 500 ms rounds (about 10 KB/s per node and 1-1.5 s convergence at 100 nodes), phi 8.
    pub fn new(
        cluster_id: String,
        node_id: NodeId,
        role: Role,
        rpc_addr: SocketAddr,
        listen: SocketAddr,
        advertise: SocketAddr,
    ) -> Self {
        Self {
            cluster_id,
            node_id,
            generation: 0,
            role,
            rpc_addr,
            listen,
            advertise,
            seeds: Vec::new(),
            interval: Duration::from_millis(700),
            phi_threshold: 8.0,
            dead_grace: Duration::from_secs(3600),
        }
    }
}

type LastHeard = Arc<Mutex<HashMap<ChitchatId, (u64, Instant)>>>;

/// A running membership service.
pub struct Membership {
    handle: ChitchatHandle,
    stats: Arc<SealStats>,
    last_heard: LastHeard,
    tracker: tokio::task::JoinHandle<()>,
    interval: Duration,
}

impl Membership {
    /// Starts gossiping with the given keyring.
    pub async fn start(cfg: MembershipConfig, keyring: Keyring) -> Result<Self, MembershipError> {
        let stats = Arc::new(SealStats::default());
        let transport = SealedUdpTransport::new(keyring, stats.clone());
        let chitchat_id = ChitchatId::new(cfg.node_id.as_str(), cfg.generation, cfg.advertise);
        let config = ChitchatConfig {
            chitchat_id,
            cluster_id: cfg.cluster_id.clone(),
            gossip_interval: cfg.interval,
            listen_addr: cfg.listen,
            seed_nodes: cfg.seeds.iter().map(|s| s.to_string()).collect(),
            failure_detector_config: FailureDetectorConfig {
                phi_threshold: cfg.phi_threshold,
                sampling_window_size: 1000,
                max_interval: Duration::from_secs(10),
                initial_interval: cfg.interval,
                dead_node_grace_period: cfg.dead_grace,
            },
            marked_for_deletion_grace_period: Duration::from_secs(3600),
            catchup_callback: None,
            extra_liveness_predicate: None,
        };
        let initial = vec![
            (keys::ROLE.to_string(), cfg.role.to_string()),
            (keys::RPC.to_string(), cfg.rpc_addr.to_string()),
        ];
        let handle = spawn_chitchat(config, initial, &transport)
            .await
            .map_err(|e| MembershipError::Start {
                addr: cfg.listen,
                reason: format!("{e:#}"),
            })?;
        let last_heard: LastHeard = Arc::default();
        let tracker = tokio::spawn(track_heartbeats(
            handle.chitchat(),
            last_heard.clone(),
            cfg.interval / 2,
        ));
        Ok(Self {
            handle,
            stats,
            last_heard,
            tracker,
            interval: cfg.interval,
        })
    }

    /// Counters of the sealed transport.
    pub fn stats(&self) -> Arc<SealStats> {
        self.stats.clone()
    }

    /// Publishes this node's info.
    pub async fn set_info(&self, info: &LocalInfo) {
        let kv = info.to_kv();
        self.handle
            .with_chitchat(|c| {
                let me = c.self_node_state();
                for (k, v) in &kv {
                    if me.get(k) != Some(v.as_str()) {
                        me.set(*k, v);
                    }
                }
            })
            .await;
    }

    /// Publishes who this node believes the coordinator is.
    pub async fn set_coordinator(&self, hint: Option<&CoordinatorHint>) {
        let v = hint.map(member::json).unwrap_or_default();
        self.handle
            .with_chitchat(|c| {
                let me = c.self_node_state();
                if me.get(keys::COORDINATOR).unwrap_or("") != v {
                    me.set(keys::COORDINATOR, &v);
                }
            })
            .await;
    }

    /// Announces that this node leaves, waits a few gossip rounds so peers learn it, and stops.
    pub async fn leave(self) {
        self.handle
            .with_chitchat(|c| c.self_node_state().set(keys::LEAVING, "true"))
            .await;
        tokio::time::sleep(self.interval * 5).await;
        self.shutdown().await;
    }

    /// Stops gossiping.
    pub async fn shutdown(self) {
        self.tracker.abort();
        if let Err(e) = self.handle.shutdown().await {
            tracing::debug!(error = %e, "gossip shutdown");
        }
    }

    /// One member (latest generation), if known.
    pub async fn member(&self, node: &NodeId) -> Option<Member> {
        self.members_matching(Which::Node(node)).await.pop()
    }

    /// All known members (latest generation of each node id), this node included.
    pub async fn members(&self) -> Vec<Member> {
        self.members_matching(Which::All).await
    }

    /// The server members only, as `members()` shows them, decoding no other
    /// member: a client agent looks for the leader every 50 ms while one of its
    /// writes is in flight, and decoding every member for that cost O(members)
    /// per look (most of the CPU of 300 simulated agents in issue 18's fleet
    /// bench).
    pub async fn servers(&self) -> Vec<Member> {
        self.members_matching(Which::Servers).await
    }

    async fn members_matching(&self, which: Which<'_>) -> Vec<Member> {
        let last_heard = self.last_heard.clone();
        let server = Role::Server.as_str();
        self.handle
            .with_chitchat(|c| {
                let me = c.self_chitchat_id().clone();
                let picked: Vec<(&ChitchatId, &chitchat::NodeState)> = c
                    .node_states()
                    .iter()
                    .filter(|(id, st)| match which {
                        Which::All => true,
                        Which::Node(n) => n.as_str() == &*id.node_id,
                        Which::Servers => st.get(keys::ROLE) == Some(server),
                    })
                    .collect();
                // A few picked members are looked up in the liveness lists;
                // all of them, through sets.
                let few = !matches!(which, Which::All);
                let among = |id: &&ChitchatId| !few || picked.iter().any(|(p, _)| p == id);
                let live: std::collections::HashSet<&ChitchatId> =
                    c.live_nodes().filter(among).collect();
                let dead: std::collections::HashSet<&ChitchatId> =
                    c.dead_nodes().filter(among).collect();
                let heard = last_heard.lock().ok();
                let heard_of = |id: &ChitchatId| heard.as_ref().and_then(|m| m.get(id).copied());
                let mut latest: HashMap<String, Member> = HashMap::new();
                for (id, state) in picked {
                    let Ok(node_id) = NodeId::new(id.node_id.to_string()) else {
                        continue;
                    };
                    let get = |k: &str| state.get(k);
                    let mut invalid = Vec::new();
                    let status = status_of(
                        get(keys::LEAVING) == Some("true"),
                        *id == me || live.contains(id),
                        dead.contains(id),
                        || heard_of(id).map(|(hb, _)| hb),
                    );
                    let last_heard_ms = if *id == me {
                        Some(0)
                    } else {
                        heard_of(id).map(|(_, t)| t.elapsed().as_millis() as u64)
                    };
                    let m = Member {
                        node_id,
                        generation: id.generation_id,
                        gossip_addr: id.gossip_advertise_addr,
                        status,
                        last_heard_ms,
                        role: member::parse(keys::ROLE, get(keys::ROLE), &mut invalid),
                        rpc_addr: member::parse(keys::RPC, get(keys::RPC), &mut invalid),
                        capacity: member::decode(keys::CAPACITY, get(keys::CAPACITY), &mut invalid),
                        allocatable: member::decode(
                            keys::ALLOCATABLE,
                            get(keys::ALLOCATABLE),
                            &mut invalid,
                        ),
                        usage: member::decode(keys::USAGE, get(keys::USAGE), &mut invalid),
                        qos: member::decode(keys::QOS, get(keys::QOS), &mut invalid),
                        runtimes: member::decode(keys::RUNTIMES, get(keys::RUNTIMES), &mut invalid),
                        agent_version: get(keys::VERSION).map(str::to_string),
                        coordinator: match get(keys::COORDINATOR) {
                            None | Some("") => None,
                            raw => member::decode(keys::COORDINATOR, raw, &mut invalid),
                        },
                        invalid_keys: invalid,
                    };
                    match latest.get(id.node_id.as_ref()) {
                        Some(prev) if prev.generation >= m.generation => {}
                        _ => {
                            latest.insert(id.node_id.to_string(), m);
                        }
                    }
                }
                let mut v: Vec<Member> = latest.into_values().collect();
                v.sort_by(|a, b| a.node_id.cmp(&b.node_id));
                v
            })
            .await
    }
}

/// Which members a view decodes.
#[derive(Clone, Copy)]
enum Which<'a> {
    All,
    Node(&'a NodeId),
    Servers,
}

/// A member's status: `Left` once it says it leaves, `Alive` while the
/// failure detector holds it live, `Dead` once judged dead after it was heard
/// beating (a member never heard is still `Joining`).
fn status_of(
    leaving: bool,
    live: bool,
    dead: bool,
    heartbeats: impl FnOnce() -> Option<u64>,
) -> MemberStatus {
    if leaving {
        MemberStatus::Left
    } else if live {
        MemberStatus::Alive
    } else if dead && heartbeats().is_some_and(|hb| hb > 1) {
        MemberStatus::Dead
    } else {
        MemberStatus::Joining
    }
}

/// Records when each node's heartbeat last advanced (chitchat keeps this private).
async fn track_heartbeats(
    chitchat: Arc<tokio::sync::Mutex<chitchat::Chitchat>>,
    last_heard: LastHeard,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let beats: Vec<(ChitchatId, u64)> = {
            let c = chitchat.lock().await;
            c.node_states()
                .iter()
                .map(|(id, st)| (id.clone(), u64::from(st.heartbeat())))
                .collect()
        };
        let now = Instant::now();
        if let Ok(mut m) = last_heard.lock() {
            for (id, hb) in beats {
                match m.get(&id) {
                    Some((prev, _)) if *prev >= hb => {}
                    _ => {
                        m.insert(id, (hb, now));
                    }
                }
            }
        }
    }
}
