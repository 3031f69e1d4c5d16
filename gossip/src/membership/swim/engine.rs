//! One member's gossip loop: SWIM (the `foca` crate, memberlist's LAN design) on the sealed UDP
//! socket, and beside it the descriptions every member publishes (notices broadcast, asks and
//! answers sent directly, a digest-first pull every 30 s).
//!
//! The loop owns foca and the socket's sending side; a reader task opens datagrams and hands
//! them over. What the member view needs (who is up, the descriptions, when each was last heard
//! from) lives in [`Shared`], read without going through the loop.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use foca::{BroadcastHandler, Config, Foca, Invalidates, OwnedNotification, PostcardCodec, Timer};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

use super::description::{At, Delta, Description, Descriptions, Notice, digest_of};
use super::id::SwimId;
use super::wire::{self, Message};
use crate::membership::codec;
use crate::membership::seal::{Keyring, OVERHEAD, Reassembly, SealStats};

/// Members down for less than this go in a roster (older deaths are known everywhere).
const RECENT_DOWN: Duration = Duration::from_secs(600);
/// Members per roster datagram (~40 bytes each).
const ROSTER_PART: usize = 24;
/// Own versions kept to answer asks with a delta.
const HISTORY: usize = 8;
/// How often a member sends the digest of its versions to one random member (memberlist's
/// push-pull: a broadcast reaches everyone only with high probability; this repairs misses).
const SYNC_EVERY: Duration = Duration::from_secs(30);
/// How long an ask waits for its answer before it is sent again.
const ASK_AGAIN: Duration = Duration::from_secs(1);
/// Quick asks for a noticed version (one every [`ASK_AGAIN`]).
const ASK_TRIES: u32 = 3;
/// Then one every this long while the owner is up and the version has not arrived.
const ASK_LATER: Duration = Duration::from_secs(5);
/// How often a member asks the members it sees up for descriptions it lacks.
const MISSING_EVERY: Duration = Duration::from_secs(2);
/// Most members asked for a missing description at once (the answers arrive together).
const MISSING_AT_ONCE: usize = 32;
/// A member asked for its missing description is not asked again before this: on a loaded
/// host the answer may be on its way, and asking again only adds to the load.
const MISSING_AGAIN: Duration = Duration::from_secs(6);
/// How often members gone longer than the grace period are forgotten.
const FORGET_EVERY: Duration = Duration::from_secs(60);
/// Shortest suspicion: a member paused this long by a loaded host is not declared down.
const MIN_SUSPICION: Duration = Duration::from_secs(2);
/// Largest SWIM packet: a datagram under a 1,400-byte path once sealed and enveloped.
const MAX_PACKET: usize = 1400 - OVERHEAD - 16;
/// Seeds that are not up members are announced to every this many seed ticks (3 probe
/// periods each: 8.4 s at the 700 ms default).
const SEEDS_AGAIN_TICKS: u32 = 4;
/// Datagrams waiting for the loop; beyond, new ones are dropped (UDP would too).
const INBOX: usize = 512;

/// Timing of one member's gossip.
#[derive(Clone, Debug)]
pub struct Timing {
    /// SWIM probe period (memberlist: 1 s); piggyback gossip runs at a fifth of it.
    pub probe: Duration,
    /// Suspicion lasts `mult × max(1, log10 N)` probe periods before a member is down
    /// (memberlist's suspicion multiplier, 4), at least [`MIN_SUSPICION`].
    pub suspicion_mult: f64,
    /// How long a member down (or its description) is remembered.
    pub dead_grace: Duration,
}

impl Timing {
    /// How long a suspected member of a cluster of `members` has to refute it.
    pub fn suspicion(&self, members: usize) -> Duration {
        let scale = (members.max(1) as f64).log10().max(1.0);
        self.probe
            .mul_f64(self.suspicion_mult * scale)
            .max(MIN_SUSPICION)
    }

    /// foca's settings for a cluster of `members`.
    fn foca(&self, members: usize) -> Config {
        let n =
            NonZeroU32::new(members.clamp(1, u32::MAX as usize) as u32).unwrap_or(NonZeroU32::MIN);
        let mut c = Config::new_lan(n);
        c.probe_period = self.probe;
        c.probe_rtt = self.probe / 2;
        c.suspect_to_down_after = self.suspicion(members);
        c.remove_down_after = self.dead_grace;
        // foca's LAN retransmissions, floor(4 × log10(N + 1)) (8 at 150, 12 at 1,000; memberlist
        // rounds the logarithm up: 12 at 150), for membership changes and notices alike: a member misses a notice with probability ~e^-count, and the asks
        // and the 30 s pull repair what it missed. (Twice that made joining 1,000 members on
        // one 2-core host slower, not surer.)
        c.max_packet_size = NonZeroUsize::new(MAX_PACKET).unwrap_or(NonZeroUsize::MIN);
        if let Some(g) = c.periodic_gossip.as_mut() {
            g.frequency = (self.probe / 5).max(Duration::from_millis(10));
        }
        c
    }
}

/// A member as this one sees it through SWIM.
#[derive(Clone, Debug)]
pub struct Peer {
    /// Its identity (the latest seen).
    pub id: SwimId,
    /// Up (alive or suspect) or down.
    pub up: bool,
    /// Since when it is up, or down.
    pub since: Instant,
}

/// What the member view reads.
#[derive(Debug, Default)]
pub struct Shared {
    /// Descriptions held, this member's own included.
    pub descriptions: Descriptions,
    /// Members SWIM knows, by node id.
    pub peers: HashMap<String, Peer>,
    /// When a datagram last came from each address.
    pub heard: HashMap<SocketAddr, Instant>,
    /// The newest notice of each member: the version, and where to ask.
    noticed: HashMap<String, (At, SocketAddr)>,
    /// Members noticed at a version newer than held, not yet asked.
    wanted: Vec<String>,
    /// Members up whose description (of their current generation) is not here: where they are.
    /// Kept so that looking for them costs nothing once every description is here.
    undescribed: HashMap<String, (u64, SocketAddr)>,
}

impl Shared {
    /// Keeps a description if newer than the one held (see [`Descriptions::take`]).
    fn take(&mut self, d: Description, now: Instant) {
        let (node, generation) = (d.node.clone(), d.generation);
        if self.descriptions.take(d, now)
            && self
                .undescribed
                .get(&node)
                .is_some_and(|(g, _)| *g <= generation)
        {
            self.undescribed.remove(&node);
        }
    }

    /// Where the newest notice of `node` said to ask for its description.
    pub fn noticed_addr(&self, node: &str) -> Option<SocketAddr> {
        self.noticed.get(node).map(|(_, a)| *a)
    }
}

/// Locks the shared state (a poisoned lock still holds consistent data: every update is one
/// statement).
pub fn lock(s: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a notice replaces: older notices of the same member's.
pub struct NoticeKey {
    node: String,
    /// A hash of `node`: foca compares a new notice's key with every notice still being
    /// passed on, and node names of one fleet share their length and most of their bytes
    /// (a `memcmp` per pair was 10 % of a process hosting 1,000 simulated agents).
    tag: u64,
    at: At,
}

impl NoticeKey {
    fn new(node: String, at: At) -> Self {
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&node, &mut h);
        NoticeKey {
            tag: std::hash::Hasher::finish(&h),
            node,
            at,
        }
    }
}

impl Invalidates for NoticeKey {
    fn invalidates(&self, other: &Self) -> bool {
        self.tag == other.tag && self.node == other.node && self.at >= other.at
    }
}

/// A notice that did not decode.
#[derive(Debug, thiserror::Error)]
#[error("notice does not decode: {0}")]
pub struct BadNotice(postcard::Error);

/// Keeps the newest notice of every member (a newer one is passed on) and queues the member
/// to be asked when the description held is older.
struct Notices {
    shared: Arc<Mutex<Shared>>,
}

impl BroadcastHandler<SwimId> for Notices {
    type Key = NoticeKey;
    type Error = BadNotice;

    fn receive_item(
        &mut self,
        data: &[u8],
        _: Option<&SwimId>,
    ) -> Result<Option<NoticeKey>, BadNotice> {
        let n = Notice::decode(data).map_err(BadNotice)?;
        let at = n.at();
        let mut s = lock(&self.shared);
        if s.noticed.get(&n.node).is_some_and(|(old, _)| *old >= at) {
            return Ok(None);
        }
        s.noticed.insert(n.node.clone(), (at, n.addr));
        // The change it carries, where it applies to the version held: nothing to ask.
        if let Some(delta) = n.delta() {
            s.descriptions.apply(delta, Instant::now());
        }
        if s.descriptions.at(&n.node).is_none_or(|h| h < at) {
            s.wanted.push(n.node.clone());
        }
        Ok(Some(NoticeKey::new(n.node, at)))
    }
}

/// What the service asks of the loop.
pub enum Command {
    /// Set these keys of this member's description.
    Set(Vec<(String, String)>),
    /// Tell the cluster this member is down (after its description says it leaves).
    Leave(oneshot::Sender<()>),
}

enum Input {
    Timer(Timer<SwimId>),
    Command(Command),
}

/// Settings of one engine.
pub struct EngineConfig {
    /// Tag of the cluster id.
    pub cluster: [u8; 4],
    /// This member.
    pub me: SwimId,
    /// Gossip addresses to announce to until some member answers.
    pub seeds: Vec<SocketAddr>,
    /// Timing.
    pub timing: Timing,
    /// This member's first key-values.
    pub kv: Vec<(String, String)>,
}

/// A running member.
pub struct Engine {
    tx: mpsc::UnboundedSender<Input>,
    task: tokio::task::JoinHandle<()>,
    reader: tokio::task::JoinHandle<()>,
    /// What the member view reads.
    pub shared: Arc<Mutex<Shared>>,
}

impl Engine {
    /// Starts gossiping on `socket`.
    pub fn start(
        cfg: EngineConfig,
        socket: UdpSocket,
        keyring: Keyring,
        stats: Arc<SealStats>,
    ) -> Self {
        let shared: Arc<Mutex<Shared>> = Arc::default();
        let socket = Arc::new(socket);
        let (in_tx, in_rx) = mpsc::channel(INBOX);
        let reader = tokio::spawn(read(
            socket.clone(),
            keyring.clone(),
            stats.clone(),
            cfg.cluster,
            shared.clone(),
            in_tx,
        ));
        let (tx, rx) = mpsc::unbounded_channel();
        let looped = Loop::new(cfg, socket, keyring, stats, shared.clone(), tx.clone());
        let task = tokio::spawn(looped.run(rx, in_rx));
        Self {
            tx,
            task,
            reader,
            shared,
        }
    }

    /// Hands a command to the loop.
    pub fn send(&self, c: Command) {
        let _ = self.tx.send(Input::Command(c));
    }

    /// Stops the loop and the reader (the socket closes with them).
    pub async fn stop(self) {
        self.task.abort();
        self.reader.abort();
        let _ = self.task.await;
        let _ = self.reader.await;
    }
}

/// Opens datagrams and hands the messages to the loop.
async fn read(
    socket: Arc<UdpSocket>,
    keyring: Keyring,
    stats: Arc<SealStats>,
    cluster: [u8; 4],
    shared: Arc<Mutex<Shared>>,
    to_loop: mpsc::Sender<(SocketAddr, Message)>,
) {
    let mut buf = vec![0u8; crate::membership::seal::MAX_DATAGRAM];
    let mut reassembly = Reassembly::default();
    loop {
        let (len, from) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) if crate::membership::transport::passing(&e) => continue,
            Err(e) => {
                tracing::error!(error = %e, "gossip socket receive failed");
                return;
            }
        };
        stats.datagrams_received.fetch_add(1, Ordering::Relaxed);
        stats
            .bytes_received
            .fetch_add(len as u64, Ordering::Relaxed);
        let fragment = match keyring.open(&buf[..len]) {
            Ok(f) => f,
            Err(e) => {
                stats.count_reject(&e);
                tracing::debug!(from = %from, error = %e, "gossip datagram refused");
                continue;
            }
        };
        let Some(payload) = reassembly.push(from, fragment) else {
            continue;
        };
        stats.opened.fetch_add(1, Ordering::Relaxed);
        let message = match codec::decode(&payload)
            .map_err(|e| e.to_string())
            .and_then(|plain| wire::decode(cluster, &plain).map_err(|e| e.to_string()))
        {
            Ok(m) => m,
            Err(e) => {
                stats.rejected_decode.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(from = %from, error = %e, "sealed gossip message refused (a member of another cluster, or of another darosd version?)");
                continue;
            }
        };
        lock(&shared).heard.insert(from, Instant::now());
        // A full inbox drops the datagram, as a full socket buffer would.
        let _ = to_loop.try_send((from, message));
    }
}

type Swim = Foca<SwimId, PostcardCodec, StdRng, Notices>;

/// The loop's state.
struct Loop {
    cluster: [u8; 4],
    seeds: Vec<SocketAddr>,
    timing: Timing,
    foca: Swim,
    sized_for: usize,
    rt: foca::AccumulatingRuntime<SwimId>,
    socket: Arc<UdpSocket>,
    keyring: Keyring,
    stats: Arc<SealStats>,
    shared: Arc<Mutex<Shared>>,
    timers: mpsc::UnboundedSender<Input>,
    own: Description,
    history: VecDeque<Description>,
    /// Noticed versions not yet held: when last asked, and how often.
    asking: HashMap<String, (Instant, u32)>,
    /// Members up without a description here: when last asked for it.
    asked_missing: HashMap<String, Instant>,
    rng: StdRng,
}

impl Loop {
    fn new(
        cfg: EngineConfig,
        socket: Arc<UdpSocket>,
        keyring: Keyring,
        stats: Arc<SealStats>,
        shared: Arc<Mutex<Shared>>,
        timers: mpsc::UnboundedSender<Input>,
    ) -> Self {
        let sized_for = cfg.seeds.len().max(1);
        let foca = Foca::with_custom_broadcast(
            cfg.me.clone(),
            cfg.timing.foca(sized_for),
            StdRng::from_os_rng(),
            PostcardCodec,
            Notices {
                shared: shared.clone(),
            },
        );
        let own = Description {
            node: cfg.me.node.clone(),
            generation: cfg.me.generation,
            version: 1,
            kv: cfg.kv,
        };
        lock(&shared).take(own.clone(), Instant::now());
        Self {
            cluster: cfg.cluster,
            seeds: cfg.seeds,
            timing: cfg.timing,
            foca,
            sized_for,
            rt: foca::AccumulatingRuntime::new(),
            socket,
            keyring,
            stats,
            shared,
            timers,
            history: VecDeque::from([own.clone()]),
            own,
            asking: HashMap::new(),
            asked_missing: HashMap::new(),
            rng: StdRng::from_os_rng(),
        }
    }

    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Input>,
        mut inbox: mpsc::Receiver<(SocketAddr, Message)>,
    ) {
        self.announce_to_seeds(false);
        let mut seed_ticks = 0u32;
        let mut again = tokio::time::interval(ASK_AGAIN / 2);
        let mut missing = tokio::time::interval(MISSING_EVERY);
        // The first pull soon after joining: the descriptions in one exchange with one member
        // rather than an ask to each.
        let mut sync = tokio::time::interval_at(
            tokio::time::Instant::now() + self.timing.probe * 2,
            SYNC_EVERY,
        );
        let mut seeds =
            tokio::time::interval((self.timing.probe * 3).max(Duration::from_millis(300)));
        let mut forget = tokio::time::interval(FORGET_EVERY);
        for t in [&mut again, &mut missing, &mut sync, &mut seeds, &mut forget] {
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        loop {
            let mut asks: Vec<(SocketAddr, String)> = Vec::new();
            tokio::select! {
                Some((from, m)) = inbox.recv() => self.on_message(from, m).await,
                input = commands.recv() => match input {
                    Some(Input::Timer(t)) => {
                        if let Err(e) = self.foca.handle_timer(t, &mut self.rt) {
                            tracing::debug!(error = %e, "swim timer");
                        }
                    }
                    Some(Input::Command(Command::Set(kv))) => self.publish(kv),
                    Some(Input::Command(Command::Leave(done))) => {
                        if let Err(e) = self.foca.leave_cluster(&mut self.rt) {
                            tracing::debug!(error = %e, "swim leave");
                        }
                        self.flush(&mut Vec::new()).await;
                        let _ = done.send(());
                        return;
                    }
                    None => return,
                },
                _ = again.tick() => self.ask_again(&mut asks),
                _ = missing.tick() => self.ask_missing(&mut asks),
                _ = sync.tick() => self.send_digest().await,
                _ = seeds.tick() => {
                    seed_ticks += 1;
                    // Alone: every seed, every tick. Otherwise, now and then, the seeds
                    // that are not up members: one that comes back (or lost its state)
                    // hears of this member at once.
                    if self.foca.num_members() == 0 {
                        self.announce_to_seeds(false);
                    } else if seed_ticks.is_multiple_of(SEEDS_AGAIN_TICKS) {
                        self.announce_to_seeds(true);
                    }
                }
                _ = forget.tick() => self.forget(),
            }
            self.flush(&mut asks).await;
        }
    }

    /// Announces this member to every seed but itself (`absent`: only to those that are not
    /// up members).
    fn announce_to_seeds(&mut self, absent: bool) {
        let me = self.foca.identity().addr;
        let up: std::collections::HashSet<SocketAddr> = if absent {
            self.foca.iter_members().map(|m| m.id().addr).collect()
        } else {
            Default::default()
        };
        for s in self
            .seeds
            .clone()
            .into_iter()
            .filter(|s| *s != me && !up.contains(s))
        {
            let seed = SwimId {
                node: String::new(),
                generation: 0,
                addr: s,
                bump: 0,
            };
            if let Err(e) = self.foca.announce(seed, &mut self.rt) {
                tracing::debug!(seed = %s, error = %e, "swim announce");
            }
        }
    }

    /// Publishes a change of this member's description: a new version, and its notice.
    fn publish(&mut self, kv: Vec<(String, String)>) {
        let before = self.own.clone();
        let mut changed = false;
        for (k, v) in &kv {
            changed |= self.own.set(k, v);
        }
        if !changed {
            return;
        }
        self.own.version += 1;
        self.history.push_back(self.own.clone());
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
        lock(&self.shared).take(self.own.clone(), Instant::now());
        let notice = Notice::of(&before, &self.own, self.foca.identity().addr);
        match postcard::to_allocvec(&notice) {
            Ok(b) => {
                if let Err(e) = self.foca.add_broadcast(&b) {
                    tracing::warn!(error = %e, "gossip notice not queued");
                }
            }
            Err(e) => tracing::warn!(error = %e, "gossip notice does not encode"),
        }
    }

    async fn on_message(&mut self, from: SocketAddr, m: Message) {
        match m {
            Message::Swim(data) => {
                if let Err(e) = self.foca.handle_data(&data, &mut self.rt) {
                    tracing::debug!(from = %from, error = %e, "swim packet");
                }
            }
            Message::Ask(holds) => {
                if let Some(answer) = self.answer(holds) {
                    self.send(from, answer).await;
                }
            }
            Message::Tell(d) => {
                lock(&self.shared).take(d, Instant::now());
            }
            Message::Delta(d) => {
                let node = d.node.clone();
                let lacking = {
                    let mut s = lock(&self.shared);
                    !s.descriptions.apply(d, Instant::now())
                        && s.noticed.get(&node).is_some_and(|(want, _)| {
                            s.descriptions.at(&node).is_none_or(|h| h < *want)
                        })
                };
                // The version held moved since the ask (or never was what it said): ask for
                // the whole description rather than wait for a retry.
                if lacking {
                    self.send(from, Message::Ask(None)).await;
                }
            }
            Message::SyncDigest {
                descriptions,
                members,
            } => {
                if descriptions != lock(&self.shared).descriptions.digest() {
                    self.send(from, Message::SyncPlease).await;
                }
                if members != self.members_digest() {
                    self.send_roster(from, true).await;
                }
            }
            Message::Roster { members, answer } => {
                // Learned for this member alone: passing every difference of a pull on to
                // the cluster made pulls at 1,000 members feed each other.
                if let Err(e) = self
                    .foca
                    .apply_many(members.into_iter(), false, &mut self.rt)
                {
                    tracing::debug!(from = %from, error = %e, "swim roster");
                }
                if answer {
                    self.send_roster(from, false).await;
                }
            }
            Message::SyncPlease => {
                let versions = lock(&self.shared).descriptions.versions();
                self.send(from, Message::Sync(versions)).await;
            }
            Message::Sync(theirs) => {
                let newer = lock(&self.shared).descriptions.newer_than(&theirs);
                for d in newer {
                    self.send(from, Message::Tell(d)).await;
                }
            }
        }
    }

    /// The answer to an ask from a member holding version `holds` of this one's description:
    /// nothing when it is current, the keys changed since when that version is still in the
    /// history, the whole description otherwise.
    fn answer(&self, holds: Option<At>) -> Option<Message> {
        let since = holds
            .filter(|(g, _)| *g == self.own.generation)
            .and_then(|(_, v)| self.history.iter().find(|d| d.version == v));
        match since {
            Some(old) if old.version == self.own.version => None,
            Some(old) => Some(Message::Delta(Delta::between(old, &self.own))),
            None => Some(Message::Tell(self.own.clone())),
        }
    }

    /// Noticed versions whose description has not arrived: asks again, a few times.
    fn ask_again(&mut self, asks: &mut Vec<(SocketAddr, String)>) {
        let now = Instant::now();
        let s = lock(&self.shared);
        self.asking.retain(|node, (at, tries)| {
            let Some((want, from)) = s.noticed.get(node).copied() else {
                return false;
            };
            if s.descriptions.at(node).is_some_and(|h| h >= want) {
                return false;
            }
            // After a few quick tries, every ASK_LATER while the owner is up.
            let wait = if *tries < ASK_TRIES {
                ASK_AGAIN
            } else if s.peers.get(node).is_some_and(|p| p.up) {
                ASK_LATER
            } else {
                return false;
            };
            if now.duration_since(*at) >= wait {
                *at = now;
                *tries += 1;
                asks.push((from, node.clone()));
            }
            true
        });
    }

    /// Members up whose description never arrived (a lost answer at join): asks a random few
    /// of those not asked lately.
    fn ask_missing(&mut self, asks: &mut Vec<(SocketAddr, String)>) {
        let now = Instant::now();
        self.asked_missing
            .retain(|_, t| now.duration_since(*t) < MISSING_AGAIN);
        let mut lacking: Vec<(SocketAddr, String)> = lock(&self.shared)
            .undescribed
            .iter()
            .filter(|(node, _)| !self.asked_missing.contains_key(*node))
            .map(|(node, (_, addr))| (*addr, node.clone()))
            .collect();
        let pick = lacking.len().min(MISSING_AT_ONCE);
        let (chosen, _) = lacking.partial_shuffle(&mut self.rng, pick);
        for (addr, node) in chosen.iter().cloned() {
            self.asked_missing.insert(node.clone(), now);
            asks.push((addr, node));
        }
    }

    /// The 30 s pull: the digests of the versions held and of the members up, to one random
    /// member.
    async fn send_digest(&mut self) {
        let n = self.foca.num_members();
        if n == 0 {
            return;
        }
        let pick = self.rng.random_range(0..n);
        let Some(to) = self.foca.iter_members().nth(pick).map(|m| m.id().addr) else {
            return;
        };
        let descriptions = lock(&self.shared).descriptions.digest();
        let members = self.members_digest();
        self.send(
            to,
            Message::SyncDigest {
                descriptions,
                members,
            },
        )
        .await;
    }

    /// SHA-256 of every member up (node, generation, renewal), this one included, in order.
    fn members_digest(&self) -> [u8; 32] {
        let me = self.foca.identity();
        let mut up: Vec<(&str, u64, u64)> = self
            .foca
            .iter_members()
            .map(|m| m.id())
            .chain(std::iter::once(me))
            .map(|id| (id.node.as_str(), id.generation, u64::from(id.bump)))
            .collect();
        up.sort_unstable();
        digest_of(up)
    }

    /// Sends the members this one sees up (and itself, alive), and those it saw go down in the
    /// last [`RECENT_DOWN`], in datagram-sized parts: what the other lacks (a member it never
    /// heard of, a renewal, a death whose broadcast it missed) it takes.
    async fn send_roster(&self, to: SocketAddr, answer: bool) {
        let me = foca::Member::alive(self.foca.identity().clone());
        let recent: std::collections::HashSet<SwimId> = {
            let now = Instant::now();
            lock(&self.shared)
                .peers
                .values()
                .filter(|p| !p.up && now.duration_since(p.since) < RECENT_DOWN)
                .map(|p| p.id.clone())
                .collect()
        };
        let all: Vec<foca::Member<SwimId>> = self
            .foca
            .iter_membership_state()
            .filter(|m| m.state() != foca::State::Down || recent.contains(m.id()))
            .cloned()
            .chain(std::iter::once(me))
            .collect();
        let parts = all.chunks(ROSTER_PART).count();
        for (i, part) in all.chunks(ROSTER_PART).enumerate() {
            // The last part asks for the answer, once.
            self.send(
                to,
                Message::Roster {
                    members: part.to_vec(),
                    answer: answer && i + 1 == parts,
                },
            )
            .await;
        }
    }

    /// Forgets members down (and descriptions unchanged) for longer than the grace period.
    fn forget(&mut self) {
        let Some(before) = Instant::now().checked_sub(self.timing.dead_grace) else {
            return;
        };
        let me = self.own.node.clone();
        let mut s = lock(&self.shared);
        s.peers.retain(|_, p| p.up || p.since >= before);
        let stale: Vec<String> = s
            .descriptions
            .unchanged_since(before)
            .into_iter()
            .filter(|n| *n != me && !s.peers.contains_key(n))
            .collect();
        for n in stale {
            s.descriptions.remove(&n);
            s.noticed.remove(&n);
        }
        s.heard.retain(|_, t| *t >= before);
    }

    /// Sends what foca queued, schedules its timers, records its notifications, then sends
    /// the asks of this turn and of notices just received.
    async fn flush(&mut self, asks: &mut Vec<(SocketAddr, String)>) {
        while let Some((dst, data)) = self.rt.to_send() {
            self.send(dst.addr, Message::Swim(data.to_vec())).await;
        }
        while let Some((delay, t)) = self.rt.to_schedule() {
            let tx = self.timers.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = tx.send(Input::Timer(t));
            });
        }
        let mut changed = false;
        while let Some(note) = self.rt.to_notify() {
            changed = true;
            self.note(note, asks);
        }
        if changed {
            self.resize();
        }
        let wanted: Vec<(String, Option<SocketAddr>)> = {
            let mut s = lock(&self.shared);
            let w = std::mem::take(&mut s.wanted);
            w.into_iter()
                .map(|n| {
                    let from = s.noticed.get(&n).map(|(_, a)| *a);
                    (n, from)
                })
                .collect()
        };
        for (node, from) in wanted {
            if let (Some(from), false) = (from, node == self.own.node) {
                self.asking.insert(node.clone(), (Instant::now(), 1));
                asks.push((from, node));
            }
        }
        for (to, node) in asks.drain(..) {
            let holds = lock(&self.shared).descriptions.at(&node);
            self.send(to, Message::Ask(holds)).await;
        }
    }

    /// Records a change of who is up.
    fn note(&mut self, note: OwnedNotification<SwimId>, asks: &mut Vec<(SocketAddr, String)>) {
        let now = Instant::now();
        let mut guard = lock(&self.shared);
        let s = &mut *guard;
        match note {
            OwnedNotification::MemberUp(id) => {
                if s.peers.get(&id.node).is_some_and(|p| p.id.later_than(&id)) {
                    return;
                }
                if s.descriptions
                    .at(&id.node)
                    .is_none_or(|(g, _)| g < id.generation)
                {
                    asks.push((id.addr, id.node.clone()));
                    s.undescribed
                        .insert(id.node.clone(), (id.generation, id.addr));
                }
                s.peers.insert(
                    id.node.clone(),
                    Peer {
                        id,
                        up: true,
                        since: now,
                    },
                );
            }
            OwnedNotification::MemberDown(id) => {
                if let Some(p) = s.peers.get_mut(&id.node)
                    && p.id == id
                {
                    p.up = false;
                    p.since = now;
                    s.undescribed.remove(&id.node);
                }
            }
            OwnedNotification::Rename(old, new) => {
                if let Some(p) = s.peers.get_mut(&old.node)
                    && p.id == old
                {
                    if let Some(u) = s.undescribed.get_mut(&new.node) {
                        *u = (new.generation, new.addr);
                    }
                    p.id = new;
                }
            }
            OwnedNotification::Rejoin(me) => {
                tracing::warn!(
                    bump = me.bump,
                    "gossip: this member was declared down and rejoins"
                );
            }
            OwnedNotification::Defunct => {
                tracing::warn!("gossip: this member was declared down");
            }
            OwnedNotification::Active | OwnedNotification::Idle => {}
        }
    }

    /// Resizes SWIM's timing (retransmissions, suspicion) to the cluster's size as it changes.
    fn resize(&mut self) {
        let n = self.foca.num_members() + 1;
        if n * 4 < self.sized_for * 5 && n * 5 > self.sized_for * 4 {
            return;
        }
        if let Err(e) = self.foca.set_config(self.timing.foca(n)) {
            tracing::debug!(error = %e, "swim config");
            return;
        }
        self.sized_for = n;
    }

    async fn send(&self, to: SocketAddr, m: Message) {
        let plain = match wire::encode(self.cluster, m) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "gossip message does not encode");
                return;
            }
        };
        let datagrams = match self.keyring.seal(&codec::encode(&plain)) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(error = %e, "gossip message not sealed");
                return;
            }
        };
        for dg in datagrams {
            match self.socket.send_to(&dg, to).await {
                Ok(n) => {
                    self.stats.datagrams_sent.fetch_add(1, Ordering::Relaxed);
                    self.stats.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) => tracing::debug!(to = %to, error = %e, "gossip send"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_replaces_only_older_notices_of_the_same_member() {
        let k = |node: &str, at: At| NoticeKey::new(node.to_string(), at);
        assert!(k("fleet-a00001", (1, 5)).invalidates(&k("fleet-a00001", (1, 4))));
        assert!(k("fleet-a00001", (2, 0)).invalidates(&k("fleet-a00001", (1, 9))));
        assert!(!k("fleet-a00001", (1, 4)).invalidates(&k("fleet-a00001", (1, 5))));
        assert!(!k("fleet-a00001", (1, 5)).invalidates(&k("fleet-a00002", (1, 4))));
    }

    #[test]
    fn suspicion_grows_with_the_log_of_the_cluster_and_has_a_floor() {
        let t = Timing {
            probe: Duration::from_millis(500),
            suspicion_mult: 4.0,
            dead_grace: Duration::from_secs(3600),
        };
        assert_eq!(t.suspicion(3), MIN_SUSPICION);
        assert_eq!(t.suspicion(10), Duration::from_secs(2));
        assert_eq!(t.suspicion(1000), Duration::from_secs(6));
        let c = t.foca(1000);
        assert_eq!(c.probe_period, Duration::from_millis(500));
        assert_eq!(c.suspect_to_down_after, Duration::from_secs(6));
        assert!(c.max_packet_size.get() + OVERHEAD < 1400);
    }
}
