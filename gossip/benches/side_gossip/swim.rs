//! A design experiment, not darosd's membership: SWIM (the `foca` crate, memberlist's LAN
//! timing: 1 s probes, 200 ms piggyback gossip to 3, an announce to one member every 30 s) on
//! the same sealed UDP datagrams. A member's description is not broadcast itself: a small notice
//! of its new version is (retransmitted 8·log10(N+1) times, twice memberlist's count: it is a
//! tenth of the size), and a member that learns of a version newer than the description it holds
//! asks the owner for it directly (again after a second while it has not arrived). A member that
//! sees another up whose description it lacks asks that member too, at join and every 2 s while
//! any is missing; and every 30 s each sends the versions it holds to one random member, which
//! answers with every newer description (memberlist's push-pull, pull only), for what every
//! notice missed; the versions go only after a 32-byte digest of them differs. An ask carries the version the asker holds; an owner that still knows that
//! version (its last 8) answers with the keys that changed since, not the whole description.
//! Measured with the same scenario as the other two columns, before it replaces chitchat.
//!
//! Steps measured (docs/benchmarks.md): the whole description as the broadcast (passed on by
//! every member: republishing cost 2.7× Serf's; a missed broadcast waited for the 30 s pull; the
//! first full view took 146 s), then notices and direct asks (every member got every change
//! whole: republishing 4.4× Serf's bytes), then changes only (2.8×), then the pull's digest.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use daros_gossip::membership::{GossipKey, Keyring};
use foca::{BroadcastHandler, Config, Foca, Invalidates, OwnedNotification, PostcardCodec, Timer};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

use super::driver::{Member, drive};
use super::node_info;
use super::scenario::{Figures, Scenario};
use super::wire::{self, GOSSIP_BASE, WireCounter};

/// Who a member is: foca's identity (small: it travels in every message).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Id {
    node: String,
    generation: u64,
    addr: SocketAddr,
    bump: u16,
}

impl foca::Identity for Id {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(Id {
            bump: self.bump.wrapping_add(1),
            ..self.clone()
        })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, other: &Self) -> bool {
        (self.generation, self.bump) > (other.generation, other.bump)
    }
}

/// A member's description at one version.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Info {
    node: String,
    generation: u64,
    version: u64,
    kv: Vec<(String, String)>,
}

/// The answer to an ask from a member holding version `from`: the keys changed since.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Delta {
    node: String,
    generation: u64,
    from: u64,
    to: u64,
    set: Vec<(String, String)>,
    removed: Vec<String>,
}

impl Delta {
    /// The changes from `old` to `new` (two versions of one member's description).
    fn between(old: &Info, new: &Info) -> Self {
        let set = new
            .kv
            .iter()
            .filter(|kv| !old.kv.contains(kv))
            .cloned()
            .collect();
        let removed = old
            .kv
            .iter()
            .filter(|(k, _)| !new.kv.iter().any(|(n, _)| n == k))
            .map(|(k, _)| k.clone())
            .collect();
        Self {
            node: new.node.clone(),
            generation: new.generation,
            from: old.version,
            to: new.version,
            set,
            removed,
        }
    }

    /// Applies to the description held if it is the version this starts from.
    fn apply(self, store: &Store) {
        let mut s = store.lock().unwrap();
        let Some(info) = s.get_mut(&self.node) else {
            return;
        };
        if (info.generation, info.version) != (self.generation, self.from) {
            return;
        }
        info.kv.retain(|(k, _)| !self.removed.contains(k));
        for (k, v) in self.set {
            match info.kv.iter_mut().find(|(old, _)| *old == k) {
                Some(slot) => slot.1 = v,
                None => info.kv.push((k, v)),
            }
        }
        info.version = self.to;
    }
}

/// The broadcast: a member's description changed to this version; ask `addr` for it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Notice {
    node: String,
    generation: u64,
    version: u64,
    addr: SocketAddr,
}

/// What a notice replaces: older notices of the same member's.
struct InfoKey {
    node: String,
    at: (u64, u64),
}

impl Invalidates for InfoKey {
    fn invalidates(&self, other: &Self) -> bool {
        self.node == other.node && self.at >= other.at
    }
}

type Store = Arc<Mutex<HashMap<String, Info>>>;
/// The newest notice of every member: the version and where to ask for it.
type Noticed = Arc<Mutex<HashMap<String, ((u64, u64), SocketAddr)>>>;

/// Keeps the newest notice of every member (a newer one is passed on) and
/// queues the member to be asked when its description is older.
struct Handler {
    store: Store,
    noticed: Noticed,
    wanted: Arc<Mutex<Vec<String>>>,
}

#[derive(Debug, thiserror::Error)]
#[error("notice does not decode: {0}")]
struct BadInfo(String);

/// Keeps `info` if it is newer than the description held.
fn take(store: &Store, info: Info) {
    let mut s = store.lock().unwrap();
    let at = (info.generation, info.version);
    if s.get(&info.node)
        .is_none_or(|old| (old.generation, old.version) < at)
    {
        s.insert(info.node.clone(), info);
    }
}

/// A [`TELL`] of a whole description.
fn tell(info: &Info) -> Vec<u8> {
    let mut m = vec![TELL];
    m.extend(serde_json::to_vec(info).unwrap());
    m
}

/// SHA-256 of every (member, generation, version) held, in member order.
fn versions_digest(store: &Store) -> Vec<u8> {
    let s = store.lock().unwrap();
    let mut nodes: Vec<&Info> = s.values().collect();
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for i in nodes {
        ctx.update(i.node.as_bytes());
        ctx.update(&[0]);
        ctx.update(&i.generation.to_le_bytes());
        ctx.update(&i.version.to_le_bytes());
    }
    ctx.finish().as_ref().to_vec()
}

fn versions(store: &Store) -> HashMap<String, (u64, u64)> {
    store
        .lock()
        .unwrap()
        .values()
        .map(|i| (i.node.clone(), (i.generation, i.version)))
        .collect()
}

fn held(store: &Store, node: &str) -> Option<(u64, u64)> {
    store
        .lock()
        .unwrap()
        .get(node)
        .map(|i| (i.generation, i.version))
}

impl BroadcastHandler<Id> for Handler {
    type Key = InfoKey;
    type Error = BadInfo;

    fn receive_item(&mut self, data: &[u8], _: Option<&Id>) -> Result<Option<InfoKey>, BadInfo> {
        let n: Notice = postcard::from_bytes(data).map_err(|e| BadInfo(e.to_string()))?;
        let at = (n.generation, n.version);
        let mut noticed = self.noticed.lock().unwrap();
        if noticed.get(&n.node).is_some_and(|(old, _)| *old >= at) {
            return Ok(None);
        }
        noticed.insert(n.node.clone(), (at, n.addr));
        if held(&self.store, &n.node).is_none_or(|h| h < at) {
            self.wanted.lock().unwrap().push(n.node.clone());
        }
        Ok(Some(InfoKey { node: n.node, at }))
    }
}

/// Datagram kinds inside the seal.
const FOCA: u8 = 0;
const ASK: u8 = 1;
const TELL: u8 = 2;
/// The versions of every description the sender holds; the answer is a TELL of each newer one.
const SYNC: u8 = 3;
/// A [`Delta`], the answer to an ask from a member holding a recent version.
const DELTA: u8 = 4;
/// The 30 s pull starts with a digest of the versions the sender holds (32 bytes): the full
/// list (~30 bytes a member) goes only to a member whose view differs, which asks for it.
const SYNC_DIGEST: u8 = 5;
/// "Our views differ: send me your versions" (the answer to a [`SYNC_DIGEST`]).
const SYNC_PLEASE: u8 = 6;
/// Own versions kept to answer asks with a delta.
const HISTORY: usize = 8;
/// How often a member sends its versions to one random member (memberlist's push-pull: a
/// broadcast reaches everyone only with high probability; this repairs the misses).
const SYNC_EVERY: Duration = Duration::from_secs(30);
/// How long an ask waits for its answer before it is sent again.
const ASK_AGAIN: Duration = Duration::from_secs(1);
/// Asks for a noticed version before the 30 s pull is left to repair it.
const ASK_TRIES: u32 = 3;
/// How often a member asks the members it sees up for the descriptions it lacks.
const MISSING_EVERY: Duration = Duration::from_secs(2);
/// Most members asked for a missing description at once (the answers arrive together).
const MISSING_AT_ONCE: usize = 32;

enum Input {
    Timer(Timer<Id>),
    Publish(Vec<(String, String)>),
    Counts(oneshot::Sender<(usize, usize)>),
    Lookup(String, oneshot::Sender<(bool, Option<Info>)>),
    Stop,
}

struct Node {
    tx: mpsc::UnboundedSender<Input>,
    task: tokio::task::JoinHandle<()>,
}

impl Node {
    /// How many members this one sees up, and how many descriptions it holds (its own too).
    async fn counts(&self) -> (usize, usize) {
        let (tx, rx) = oneshot::channel();
        let _ = self.tx.send(Input::Counts(tx));
        rx.await.unwrap_or_default()
    }

    /// Whether this member sees `node` up, and its description of it.
    async fn lookup(&self, node: String) -> (bool, Option<Info>) {
        let (tx, rx) = oneshot::channel();
        let _ = self.tx.send(Input::Lookup(node, tx));
        rx.await.unwrap_or_default()
    }

    fn publish_kv(&self, kv: &[(&'static str, String)]) {
        let kv = kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let _ = self.tx.send(Input::Publish(kv));
    }
}

fn name(i: usize) -> String {
    format!("node-{i:04}")
}

fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], GOSSIP_BASE + i as u16))
}

async fn start(i: usize, n: usize, ring: Keyring, seeds: Vec<SocketAddr>) -> Node {
    let me = Id {
        node: name(i),
        generation: 1,
        addr: addr(i),
        bump: 0,
    };
    let store: Store = Arc::default();
    let noticed: Noticed = Arc::default();
    let wanted: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut cfg = Config::new_lan(NonZeroU32::new(n as u32).unwrap());
    // Notices are small: twice memberlist's retransmissions make a miss rare
    // (each member receives each ~that many times; a miss is ~e^-count).
    cfg.max_transmissions = cfg
        .max_transmissions
        .saturating_mul(std::num::NonZeroU8::new(2).unwrap());
    let mut foca = Foca::with_custom_broadcast(
        me.clone(),
        cfg,
        StdRng::from_os_rng(),
        PostcardCodec,
        Handler {
            store: store.clone(),
            noticed: noticed.clone(),
            wanted: wanted.clone(),
        },
    );
    let socket = Arc::new(UdpSocket::bind(me.addr).await.unwrap());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let recv_tx = tx.clone();
    let sock = socket.clone();
    let ring_in = ring.clone();
    // Datagrams in: opened, then handed to the member's loop.
    let (data_tx, mut data_rx) = mpsc::unbounded_channel::<(SocketAddr, Vec<u8>)>();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((len, from)) = sock.recv_from(&mut buf).await {
            if let Ok(f) = ring_in.open(&buf[..len])
                && data_tx.send((from, f.plaintext)).is_err()
            {
                break;
            }
        }
    });
    let task = tokio::spawn(async move {
        let mut rt = foca::AccumulatingRuntime::new();
        let mut version = 0u64;
        let mut rng = StdRng::from_os_rng();
        let mut sweep = tokio::time::interval(SYNC_EVERY);
        let mut again = tokio::time::interval(ASK_AGAIN / 2);
        let mut missing = tokio::time::interval(MISSING_EVERY);
        // Noticed versions not yet held: when last asked, and how often.
        let mut asking: HashMap<String, (Instant, u32)> = HashMap::new();
        // This member's last versions, to answer an ask with what changed since.
        let mut history: std::collections::VecDeque<Info> = Default::default();
        for s in seeds.into_iter().filter(|s| *s != me.addr) {
            let seed = Id {
                node: String::new(),
                generation: 0,
                addr: s,
                bump: 0,
            };
            let _ = foca.announce(seed, &mut rt);
        }
        loop {
            // Whom to ask, for which member's description.
            let mut asks: Vec<(SocketAddr, String)> = Vec::new();
            tokio::select! {
                Some((from, plain)) = data_rx.recv() => match plain.first() {
                    Some(&FOCA) => {
                        let _ = foca.handle_data(&plain[1..], &mut rt);
                    }
                    Some(&ASK) => {
                        let theirs: Option<(u64, u64)> =
                            postcard::from_bytes(&plain[1..]).unwrap_or(None);
                        let mine = store.lock().unwrap().get(&me.node).cloned();
                        if let Some(mine) = mine {
                            let since = theirs
                                .filter(|(g, _)| *g == mine.generation)
                                .and_then(|(_, v)| history.iter().find(|i| i.version == v));
                            let m = match since {
                                Some(old) if old.version == mine.version => Vec::new(),
                                Some(old) => {
                                    let mut buf = [0u8; 2048];
                                    match postcard::to_slice(&Delta::between(old, &mine), &mut buf) {
                                        Ok(b) => [&[DELTA][..], &*b].concat(),
                                        Err(_) => tell(&mine),
                                    }
                                }
                                None => tell(&mine),
                            };
                            if !m.is_empty() {
                                send(&socket, &ring, from, &m).await;
                            }
                        }
                    }
                    // Same digest, same view: nothing to send.
                    Some(&SYNC_DIGEST) if plain[1..] != versions_digest(&store)[..] => {
                        send(&socket, &ring, from, &[SYNC_PLEASE]).await;
                    }
                    Some(&SYNC_PLEASE) => {
                        let mut m = vec![SYNC];
                        m.extend(serde_json::to_vec(&versions(&store)).unwrap());
                        send(&socket, &ring, from, &m).await;
                    }
                    Some(&DELTA) => {
                        if let Ok(d) = postcard::from_bytes::<Delta>(&plain[1..]) {
                            d.apply(&store);
                        }
                    }
                    Some(&TELL) => {
                        if let Ok(info) = serde_json::from_slice::<Info>(&plain[1..]) {
                            take(&store, info);
                        }
                    }
                    Some(&SYNC) => {
                        let theirs: HashMap<String, (u64, u64)> =
                            serde_json::from_slice(&plain[1..]).unwrap_or_default();
                        let newer: Vec<Info> = store
                            .lock()
                            .unwrap()
                            .values()
                            .filter(|i| {
                                theirs
                                    .get(&i.node)
                                    .is_none_or(|at| *at < (i.generation, i.version))
                            })
                            .cloned()
                            .collect();
                        for info in newer {
                            send(&socket, &ring, from, &tell(&info)).await;
                        }
                    }
                    _ => {}
                },
                Some(input) = rx.recv() => match input {
                    Input::Timer(t) => {
                        let _ = foca.handle_timer(t, &mut rt);
                    }
                    Input::Publish(kv) => {
                        version += 1;
                        let info = Info { node: me.node.clone(), generation: 1, version, kv };
                        history.push_back(info.clone());
                        if history.len() > HISTORY {
                            history.pop_front();
                        }
                        take(&store, info);
                        let notice = Notice {
                            node: me.node.clone(),
                            generation: 1,
                            version,
                            addr: me.addr,
                        };
                        let mut buf = [0u8; 256];
                        if let Ok(b) = postcard::to_slice(&notice, &mut buf) {
                            let _ = foca.add_broadcast(b);
                        }
                    }
                    Input::Counts(reply) => {
                        let _ = reply.send((foca.num_members(), store.lock().unwrap().len()));
                    }
                    Input::Lookup(node, reply) => {
                        let up = foca.iter_members().any(|m| m.id().node == node);
                        let info = store.lock().unwrap().get(&node).cloned();
                        let _ = reply.send((up, info));
                    }
                    Input::Stop => break,
                },
                _ = again.tick() => {
                    // Noticed versions whose description has not arrived: ask again.
                    let now = Instant::now();
                    asking.retain(|node, (at, tries)| {
                        let Some((want, from)) = noticed.lock().unwrap().get(node).copied() else {
                            return false;
                        };
                        if held(&store, node).is_some_and(|h| h >= want) || *tries >= ASK_TRIES {
                            return false;
                        }
                        if now.duration_since(*at) >= ASK_AGAIN {
                            *at = now;
                            *tries += 1;
                            asks.push((from, node.clone()));
                        }
                        true
                    });
                }
                _ = missing.tick() => {
                    // Members seen up whose description never arrived (a lost answer at join).
                    let lacking: Vec<(SocketAddr, String)> = foca
                        .iter_members()
                        .map(|m| m.id())
                        .filter(|id| {
                            held(&store, &id.node).is_none_or(|(g, _)| g < id.generation)
                        })
                        .map(|id| (id.addr, id.node.clone()))
                        .take(MISSING_AT_ONCE)
                        .collect();
                    asks.extend(lacking);
                }
                _ = sweep.tick() => {
                    let members: Vec<SocketAddr> = foca.iter_members().map(|m| m.id().addr).collect();
                    if !members.is_empty() {
                        use rand::Rng;
                        let to = members[rng.random_range(0..members.len())];
                        let mut m = vec![SYNC_DIGEST];
                        m.extend(versions_digest(&store));
                        send(&socket, &ring, to, &m).await;
                    }
                }
            }
            while let Some((dst, data)) = rt.to_send() {
                let mut m = vec![FOCA];
                m.extend_from_slice(&data);
                send(&socket, &ring, dst.addr, &m).await;
            }
            while let Some((delay, t)) = rt.to_schedule() {
                let tx = recv_tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = tx.send(Input::Timer(t));
                });
            }
            // Notices of versions newer than held: ask their owners now.
            let fresh: Vec<String> = std::mem::take(&mut *wanted.lock().unwrap());
            for node in fresh {
                if node == me.node {
                    continue;
                }
                if let Some((_, from)) = noticed.lock().unwrap().get(&node).copied() {
                    asking.insert(node.clone(), (Instant::now(), 1));
                    asks.push((from, node));
                }
            }
            while let Some(note) = rt.to_notify() {
                if let OwnedNotification::MemberUp(id) = note {
                    let known = store
                        .lock()
                        .unwrap()
                        .get(&id.node)
                        .is_some_and(|x| x.generation >= id.generation);
                    if !known {
                        asks.push((id.addr, id.node.clone()));
                    }
                }
            }
            for (to, node) in asks {
                let mut buf = [0u8; 32];
                let holds = held(&store, &node);
                let m = match postcard::to_slice(&holds, &mut buf) {
                    Ok(b) => [&[ASK][..], &*b].concat(),
                    Err(_) => vec![ASK],
                };
                send(&socket, &ring, to, &m).await;
            }
        }
        reader.abort();
    });
    Node { tx, task }
}

async fn send(socket: &UdpSocket, ring: &Keyring, to: SocketAddr, plain: &[u8]) {
    if let Ok(dgs) = ring.seal(plain) {
        for dg in dgs {
            let _ = socket.send_to(&dg, to).await;
        }
    }
}

impl Member for Node {
    async fn sees_all(&self, n: usize) -> bool {
        let (up, infos) = self.counts().await;
        up + 1 >= n && infos >= n
    }

    async fn has_update(&self, who: usize, marker: u64) -> bool {
        let kv = node_info::info(who, marker).to_kv();
        let usage = kv.iter().find(|(k, _)| *k == "usage").map(|(_, v)| v);
        self.lookup(name(who))
            .await
            .1
            .is_some_and(|i| i.kv.iter().any(|(k, v)| k == "usage" && Some(v) == usage))
    }

    async fn sees_dead(&self, victim: usize) -> bool {
        !self.lookup(name(victim)).await.0
    }

    async fn publish(&self, sc: &Scenario, i: usize, marker: u64) {
        self.publish_kv(&sc.tags(i, marker));
    }

    async fn stop(self) {
        let _ = self.tx.send(Input::Stop);
        let _ = self.task.await;
    }

    fn own_bytes(&self) -> Option<u64> {
        None
    }
}

pub async fn run(sc: &Scenario) -> Figures {
    let n = sc.nodes;
    let counter = WireCounter::install(n);
    let rss0 = wire::rss_bytes(std::process::id());
    let ring = Keyring::new(&GossipKey::generate(1), &[]);
    let seeds: Vec<SocketAddr> = (0..n.min(3)).map(addr).collect();
    let t0 = Instant::now();
    let mut nodes = Vec::new();
    for i in 0..n {
        let node = start(i, n, ring.clone(), seeds.clone()).await;
        node.publish_kv(&sc.tags(i, 0));
        nodes.push(Some(node));
    }
    drive(sc, &counter, nodes, t0, rss0).await
}
