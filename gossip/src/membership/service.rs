//! The membership service: SWIM on the sealed UDP socket ([`super::swim`]), the keys this node
//! publishes, and the member view built from both.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::member::{self, CoordinatorHint, LocalInfo, Member, MemberStatus, keys};
use super::seal::{Keyring, SealStats};
use super::swim::{
    Command, Description, Engine, EngineConfig, Peer, Shared, SwimId, Timing, cluster_tag, lock,
};
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
    /// Cluster id (gossip of other clusters is refused).
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
    /// SWIM probe period (memberlist: 1 s); notices are gossiped every fifth of it.
    pub interval: Duration,
    /// Suspicion lasts this many probe periods × max(1, log10 members) before a suspected
    /// member is down (memberlist's multiplier: 4), at least 2 s.
    pub suspicion_mult: f64,
    /// How long a dead member is remembered before being forgotten.
    pub dead_grace: Duration,
}

impl MembershipConfig {
    /// Defaults: memberlist's LAN profile (1 s probes, suspicion multiplier 4), dead members
    /// remembered an hour.
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
            interval: Duration::from_secs(1),
            suspicion_mult: 4.0,
            dead_grace: Duration::from_secs(3600),
        }
    }
}

/// A running membership service.
pub struct Membership {
    engine: Engine,
    stats: Arc<SealStats>,
    me: SwimId,
    interval: Duration,
    suspicion: Duration,
}

impl Membership {
    /// Starts gossiping with the given keyring.
    pub async fn start(cfg: MembershipConfig, keyring: Keyring) -> Result<Self, MembershipError> {
        let stats = Arc::new(SealStats::default());
        let socket =
            tokio::net::UdpSocket::bind(cfg.listen)
                .await
                .map_err(|e| MembershipError::Start {
                    addr: cfg.listen,
                    reason: e.to_string(),
                })?;
        let me = SwimId {
            node: cfg.node_id.to_string(),
            generation: cfg.generation,
            addr: cfg.advertise,
            bump: 0,
        };
        let timing = Timing {
            probe: cfg.interval,
            suspicion_mult: cfg.suspicion_mult,
            dead_grace: cfg.dead_grace,
        };
        let suspicion = timing.suspicion(1);
        let engine = Engine::start(
            EngineConfig {
                cluster: cluster_tag(&cfg.cluster_id),
                me: me.clone(),
                seeds: cfg.seeds.clone(),
                timing,
                kv: vec![
                    (keys::ROLE.to_string(), cfg.role.to_string()),
                    (keys::RPC.to_string(), cfg.rpc_addr.to_string()),
                ],
            },
            socket,
            keyring,
            stats.clone(),
        );
        Ok(Self {
            engine,
            stats,
            me,
            interval: cfg.interval,
            suspicion,
        })
    }

    /// Counters of the sealed transport.
    pub fn stats(&self) -> Arc<SealStats> {
        self.stats.clone()
    }

    /// Publishes this node's info.
    pub async fn set_info(&self, info: &LocalInfo) {
        let kv = info
            .to_kv()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        self.engine.send(Command::Set(kv));
    }

    /// Publishes who this node believes the coordinator is.
    pub async fn set_coordinator(&self, hint: Option<&CoordinatorHint>) {
        let v = hint.map(member::json).unwrap_or_default();
        self.engine
            .send(Command::Set(vec![(keys::COORDINATOR.to_string(), v)]));
    }

    /// Announces that this node leaves, waits a few probe periods so peers fetch that, tells
    /// SWIM it is down, and stops.
    pub async fn leave(self) {
        self.engine.send(Command::Set(vec![(
            keys::LEAVING.to_string(),
            "true".to_string(),
        )]));
        tokio::time::sleep(self.interval * 5).await;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.engine.send(Command::Leave(tx));
        let _ = tokio::time::timeout(self.interval * 2, rx).await;
        self.shutdown().await;
    }

    /// Stops gossiping.
    pub async fn shutdown(self) {
        self.engine.stop().await;
    }

    /// One member (latest generation), if known.
    pub async fn member(&self, node: &NodeId) -> Option<Member> {
        self.view(&lock(&self.engine.shared), node.as_str(), Instant::now())
    }

    /// All known members (latest generation of each node id), this node included.
    pub async fn members(&self) -> Vec<Member> {
        let s = lock(&self.engine.shared);
        let now = Instant::now();
        known(&s)
            .into_iter()
            .filter_map(|n| self.view(&s, n, now))
            .collect()
    }

    /// How many members this node knows, sees alive, and holds a description of, without
    /// decoding any description (for metrics and checks at fleet size: `members()` decodes
    /// every member's keys).
    pub async fn census(&self) -> Census {
        let s = lock(&self.engine.shared);
        let mut c = Census::default();
        for st in known(&s).into_iter().filter_map(|n| self.standing(&s, n)) {
            c.known += 1;
            c.alive += usize::from(st.status == MemberStatus::Alive);
            c.described += usize::from(st.desc.is_some());
        }
        c
    }

    /// The server members only, as `members()` shows them, decoding no other
    /// member: a client agent looks for the leader every 50 ms while one of its
    /// writes is in flight, and decoding every member for that cost O(members)
    /// per look (most of the CPU of 300 simulated agents in issue 18's fleet
    /// bench).
    pub async fn servers(&self) -> Vec<Member> {
        let s = lock(&self.engine.shared);
        let now = Instant::now();
        s.descriptions
            .servers()
            .filter_map(|n| self.view(&s, n, now))
            .collect()
    }

    /// One member as this node sees it: SWIM says whether it is up, its description what it
    /// publishes.
    fn view(&self, s: &Shared, node: &str, now: Instant) -> Option<Member> {
        let node_id = NodeId::new(node.to_string()).ok()?;
        let st = self.standing(s, node)?;
        let last_heard_ms = last_heard(st.is_me, st.peer, s, self.suspicion, now);
        let get = |k: &str| st.desc.and_then(|d| d.get(k));
        Some(member_of(
            node_id,
            st.generation,
            st.gossip_addr,
            st.status,
            last_heard_ms,
            &get,
        ))
    }

    /// Where one member stands here (None: known only by a description with nowhere to reach it).
    fn standing<'a>(&self, s: &'a Shared, node: &str) -> Option<Standing<'a>> {
        let peer = s.peers.get(node);
        let desc = s.descriptions.get(node);
        let is_me = node == self.me.node;
        let (generation, gossip_addr) = match (is_me, peer, desc) {
            (true, _, _) => (self.me.generation, self.me.addr),
            (false, Some(p), _) => (p.id.generation, p.id.addr),
            // Known by its description alone (not yet seen up): where its notice said it is.
            (false, None, Some(d)) => (d.generation, s.noticed_addr(node)?),
            (false, None, None) => return None,
        };
        // A description of an earlier run says nothing of this one.
        let desc = desc.filter(|d| d.generation == generation);
        let leaving = desc.and_then(|d| d.get(keys::LEAVING)) == Some("true");
        Some(Standing {
            is_me,
            peer,
            generation,
            gossip_addr,
            desc,
            status: status_of(is_me, leaving, peer.map(|p| p.up)),
        })
    }
}

/// One member as SWIM and its description show it here.
struct Standing<'a> {
    is_me: bool,
    peer: Option<&'a Peer>,
    generation: u64,
    gossip_addr: SocketAddr,
    desc: Option<&'a Description>,
    status: MemberStatus,
}

/// Every node id known here (SWIM's members and descriptions), sorted, once each.
fn known(s: &Shared) -> Vec<&String> {
    let mut names: Vec<&String> = s
        .peers
        .keys()
        .chain(s.descriptions.iter().map(|d| &d.node))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Counts of the members one node sees (see [`Membership::census`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Members known (this node included).
    pub known: usize,
    /// Of them, alive.
    pub alive: usize,
    /// Of them, with their description (of their current generation) here.
    pub described: usize,
}

/// A member's status: `Left` once it says it leaves, `Alive` while SWIM holds it up (alive or
/// suspected), `Dead` once SWIM declared it down, `Joining` while only its description is known.
fn status_of(is_me: bool, leaving: bool, up: Option<bool>) -> MemberStatus {
    match (is_me, leaving, up) {
        (true, _, _) => MemberStatus::Alive,
        (false, true, _) => MemberStatus::Left,
        (false, false, Some(true)) => MemberStatus::Alive,
        (false, false, Some(false)) => MemberStatus::Dead,
        (false, false, None) => MemberStatus::Joining,
    }
}

/// Milliseconds since this node last knew the member alive: 0 while SWIM holds it up (some
/// member's probe got its answer within the suspicion time); once down, since the last
/// datagram from it, or since its suspicion began if none came here.
fn last_heard(
    is_me: bool,
    peer: Option<&Peer>,
    s: &Shared,
    suspicion: Duration,
    now: Instant,
) -> Option<u64> {
    if is_me {
        return Some(0);
    }
    let p = peer?;
    if p.up {
        return Some(0);
    }
    let suspected = p.since.checked_sub(suspicion).unwrap_or(p.since);
    let at = s
        .heard
        .get(&p.id.addr)
        .copied()
        .map_or(suspected, |h| h.min(p.since));
    Some(now.saturating_duration_since(at).as_millis() as u64)
}

/// Builds the member from its description's keys (bad values named, never dropped).
fn member_of<'a>(
    node_id: NodeId,
    generation: u64,
    gossip_addr: SocketAddr,
    status: MemberStatus,
    last_heard_ms: Option<u64>,
    get: &dyn Fn(&str) -> Option<&'a str>,
) -> Member {
    let mut invalid = Vec::new();
    Member {
        node_id,
        generation,
        gossip_addr,
        status,
        last_heard_ms,
        role: member::parse(keys::ROLE, get(keys::ROLE), &mut invalid),
        rpc_addr: member::parse(keys::RPC, get(keys::RPC), &mut invalid),
        capacity: member::decode(keys::CAPACITY, get(keys::CAPACITY), &mut invalid),
        allocatable: member::decode(keys::ALLOCATABLE, get(keys::ALLOCATABLE), &mut invalid),
        usage: member::decode(keys::USAGE, get(keys::USAGE), &mut invalid),
        qos: member::decode(keys::QOS, get(keys::QOS), &mut invalid),
        runtimes: member::decode(keys::RUNTIMES, get(keys::RUNTIMES), &mut invalid),
        agent_version: get(keys::VERSION).map(str::to_string),
        coordinator: match get(keys::COORDINATOR) {
            None | Some("") => None,
            raw => member::decode(keys::COORDINATOR, raw, &mut invalid),
        },
        invalid_keys: invalid,
    }
}
