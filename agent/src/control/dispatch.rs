//! Leader dispatch: while this server is the established leader (it committed
//! an entry of its own term), every node gets its complete desired work as a
//! fenced command after each commit that changes it; after a leader change and
//! once every `period`, each node is asked whether it still holds its work (a
//! bounded slice of nodes per round, `dispatch_due`) and sent it whole if not;
//! `Tick` is written when something is due; a node not
//! heard in gossip for `node_down_after` is marked Down, and Ready again once
//! it is heard. Every liveness clock starts at this leader's establishment (a
//! new leader never marks nodes Down from a cold view), and every decision is
//! written fenced by this leader's term.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use daros_coordinator::state::desired::DesiredWork;
use daros_coordinator::state::work_changes::WorkUpdate;
use daros_coordinator::{Command, NodeCondition};
use daros_gossip::NodeId;
use daros_gossip::fence::FenceToken;
use daros_gossip::membership::MemberStatus;
use daros_gossip::mesh::MeshError;
use daros_gossip::raft::{LogPosition, ServerRole};
use daros_gossip::rpc::ErrorCode;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::dispatch_due::{NodeBook, Serve, due, slice};
use super::dispatch_work::{Revised, WorkCopy};
use super::node::WORK_METHOD;
use super::plane::{ControlPlane, changed_or, now};
use super::work::{DesiredInstance, DesiredJob, NodeWork};
use super::work_digest::{DIGEST_FIELD, SAME_WORK_METHOD, SameWork, SameWorkAnswer, WorkDigest};

/// Converts the coordinator's desired work of `node` into the wire form.
pub fn node_work(node: &str, fence: FenceToken, d: &DesiredWork) -> NodeWork {
    NodeWork {
        node: node.to_string(),
        fence,
        instances: d
            .instances
            .iter()
            .map(|i| DesiredInstance {
                instance: i.instance.clone(),
                placement: i.placement,
                attempt: i.attempt,
                not_before: i.not_before,
                launch: i.launch.clone(),
            })
            .collect(),
        jobs: d
            .jobs
            .iter()
            .map(|j| DesiredJob {
                job: j.job.clone(),
                run: j.run,
                attempt: j.attempt,
                launch: j.launch.clone(),
            })
            .collect(),
    }
}

/// Longest wait for one node to take its work (a round waits for every node).
const SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// Work sends a round keeps in flight at once.
const SENDS_IN_FLIGHT: usize = 64;
/// How often the leader loop looks for due work without a new commit.
const ROUND_STEP: Duration = Duration::from_millis(250);
/// Fewest checks of held work per round (see [`slice`]).
const CHECKS_LEAST: usize = 2 * SENDS_IN_FLIGHT;

struct Leading {
    term: u64,
    /// When this leadership was established: no node is silent for longer.
    since: Instant,
    /// Work each node acknowledged in this term, and when each was served.
    book: NodeBook<Revised>,
    /// The desired work of every node, patched after each commit.
    desired: Option<WorkCopy>,
    last_tick: Option<Instant>,
    /// Last time this leader saw a new gossip heartbeat of each node.
    heard: BTreeMap<String, Instant>,
}

impl Leading {
    fn new(term: u64) -> Self {
        Self {
            term,
            since: Instant::now(),
            book: NodeBook::default(),
            desired: None,
            last_tick: None,
            heard: BTreeMap::new(),
        }
    }
}

/// How the leader loop runs.
#[derive(Debug, Clone, Copy)]
pub struct DispatchSettings {
    /// How often each node's held work is checked; the tick period.
    pub period: Duration,
    /// Silence after which a node is marked Down.
    pub node_down_after: Duration,
}

/// Runs on every server agent; acts while it is the established leader.
pub async fn leader_loop(
    plane: Arc<ControlPlane>,
    mut applied: watch::Receiver<LogPosition>,
    settings: DispatchSettings,
) {
    let period = settings.period;
    let mut lead: Option<Leading> = None;
    let step = ROUND_STEP.min(period);
    loop {
        changed_or(&mut applied, step).await;
        let Some(st) = plane.mesh().consensus_status() else {
            return;
        };
        if st.role != ServerRole::Leader || !st.established {
            if let Some(l) = lead.take() {
                debug!(
                    term = l.term,
                    "no longer the established leader; dispatch paused"
                );
            }
            continue;
        }
        if lead.as_ref().is_none_or(|l| l.term != st.term) {
            info!(term = st.term, "leading: dispatching work to every node");
            lead = Some(Leading::new(st.term));
        }
        let Some(lead) = lead.as_mut() else {
            continue;
        };
        let at = *applied.borrow_and_update();
        round(&plane, lead, at, period, st.commit_index.unwrap_or(0)).await;
        // Ticks (restarts due, instances lost) and liveness at least every second.
        if lead
            .last_tick
            .is_none_or(|t| t.elapsed() >= period.min(Duration::from_secs(1)))
        {
            lead.last_tick = Some(Instant::now());
            tick(&plane, lead.term).await;
            liveness(&plane, lead, settings.node_down_after).await;
        }
    }
}

async fn round(
    plane: &Arc<ControlPlane>,
    lead: &mut Leading,
    at: LogPosition,
    period: Duration,
    index: u64,
) {
    // Only a new commit can change a node's work: read the nodes it changed
    // (all of them on this leader's first look).
    let mut changed = BTreeSet::new();
    if lead.desired.as_ref().is_none_or(|c| c.at() != at) {
        let cursor = lead.desired.as_ref().map(WorkCopy::cursor);
        let (cursor, update) = match plane
            .mesh()
            .read_with(move |s| s.desired_work_since(cursor))
            .await
        {
            Ok(d) => d,
            Err(e) => {
                debug!(error = %e, "desired work not readable");
                return;
            }
        };
        match lead.desired.as_mut() {
            Some(copy) => changed = copy.patch(at, cursor, update),
            None => {
                let all = match update {
                    WorkUpdate::All(all) => all,
                    // A first read is always whole; never reached.
                    WorkUpdate::Nodes(_) => return,
                };
                lead.desired = Some(WorkCopy::new(at, cursor, all));
            }
        }
    }
    let Some(desired) = lead.desired.as_ref().map(WorkCopy::nodes) else {
        return;
    };
    lead.book.retain(desired);
    let started = Instant::now();
    let checks = slice(desired.len(), ROUND_STEP.min(period), period, CHECKS_LEAST);
    let due_if =
        |gone: &BTreeSet<String>| due(desired, &changed, &lead.book, gone, started, period, checks);
    // Most looks find nothing due; gossip's view is read only when something is.
    if due_if(&BTreeSet::new()).is_empty() {
        return;
    }
    // Nodes gossip declares gone are tried once a period, so that a dead node
    // does not hold up the others' work on every commit.
    let gone: BTreeSet<String> = plane
        .mesh()
        .members()
        .await
        .into_iter()
        .filter(|m| matches!(m.status, MemberStatus::Dead | MemberStatus::Left))
        .map(|m| m.node_id.to_string())
        .collect();
    let due: Vec<(String, Revised, Serve)> = due_if(&gone)
        .into_iter()
        .map(|(n, w, s)| (n.to_string(), w.clone(), s))
        .collect();
    if due.is_empty() {
        return;
    }
    let fence = FenceToken {
        term: lead.term,
        index,
    };
    let sends = due.into_iter().map(|(node, d, serve)| {
        let plane = Arc::clone(plane);
        async move {
            let Ok(id) = NodeId::new(node.clone()) else {
                return (node, d, None, Sent::Failed("not a node name".into()));
            };
            // A check first asks whether the node holds this work already
            // (every node once a period; every node after a leader change).
            let (check, digest) = match serve {
                Serve::Whole => (false, WorkDigest::of(&d.work)),
                Serve::Confirm(g) => (true, g.or_else(|| WorkDigest::of(&d.work))),
            };
            if check && let Some(g) = &digest {
                match confirm(&plane, &id, &node, g).await {
                    Confirm::Same => return (node, d, digest, Sent::Confirmed),
                    Confirm::NotHeld => {}
                    // Not answering: the whole work would wait as long again.
                    Confirm::Failed(e) => return (node, d, None, Sent::Failed(e)),
                }
            }
            let mut work = node_work(&node, fence, &d.work);
            if let Some(k) = plane.secret_keys() {
                k.open_work(&mut work);
            }
            let mut body = match serde_json::to_value(work) {
                Ok(b) => b,
                Err(e) => return (node, d, None, Sent::Failed(e.to_string())),
            };
            if let (Some(o), Some(g)) = (body.as_object_mut(), &digest)
                && let Ok(v) = serde_json::to_value(g)
            {
                o.insert(DIGEST_FIELD.to_string(), v);
            }
            let sent =
                tokio::time::timeout(SEND_TIMEOUT, plane.mesh().command(&id, WORK_METHOD, body))
                    .await
                    .unwrap_or_else(|_| {
                        Err(MeshError::Rpc(daros_gossip::rpc::RpcError::new(
                            ErrorCode::Timeout,
                            format!("{node} did not take its work within {SEND_TIMEOUT:?}"),
                        )))
                    });
            match sent {
                Ok(_) => (node, d, digest, Sent::Whole),
                Err(e) => {
                    debug!(node = %node, error = %e, "work not delivered");
                    (node, d, None, Sent::Failed(e.to_string()))
                }
            }
        }
    });
    // At most SENDS_IN_FLIGHT at once: each send first builds (and seals) its
    // node's work, and a new leader's first round starting all of them in one
    // poll held a runtime worker for as long as that took for every node.
    let (mut whole, mut confirmed, mut failed) = (0usize, 0usize, 0usize);
    let mut first_failure: Option<String> = None;
    let mut done =
        futures::StreamExt::buffer_unordered(futures::stream::iter(sends), SENDS_IN_FLIGHT);
    while let Some((node, d, digest, sent)) = futures::StreamExt::next(&mut done).await {
        lead.book.served.insert(node.clone(), started);
        match sent {
            Sent::Whole | Sent::Confirmed => {
                if sent == Sent::Whole {
                    whole += 1;
                } else {
                    confirmed += 1;
                }
                lead.book.acked.insert(node, (d, digest));
            }
            Sent::Failed(e) => {
                failed += 1;
                first_failure.get_or_insert_with(|| format!("{node}: {e}"));
                lead.book.acked.remove(&node);
            }
        }
    }
    plane.timings().dispatched(whole, confirmed, failed);
    // A slow round delays every commit's work behind it: say so.
    let took = started.elapsed();
    if took > SEND_TIMEOUT {
        warn!(
            whole,
            confirmed,
            failed,
            took_ms = took.as_millis() as u64,
            first_failure = first_failure.as_deref().unwrap_or(""),
            "a dispatch round took longer than one send may"
        );
    }
}

/// The answer to "do you hold this work?".
enum Confirm {
    /// The node holds work of that digest and took the fence.
    Same,
    /// It does not (or does not know the question: an older agent).
    NotHeld,
    /// No answer in time, or the node is unreachable.
    Failed(String),
}

async fn confirm(plane: &ControlPlane, id: &NodeId, node: &str, digest: &WorkDigest) -> Confirm {
    let q = SameWork {
        node: node.to_string(),
        digest: digest.clone(),
    };
    let Ok(body) = serde_json::to_value(q) else {
        return Confirm::NotHeld;
    };
    match tokio::time::timeout(
        SEND_TIMEOUT,
        plane.mesh().command(id, SAME_WORK_METHOD, body),
    )
    .await
    {
        Ok(Ok(v)) => match serde_json::from_value::<SameWorkAnswer>(v) {
            Ok(a) if a.same => Confirm::Same,
            _ => Confirm::NotHeld,
        },
        Ok(Err(MeshError::Rpc(e)))
            if matches!(e.code, ErrorCode::Timeout | ErrorCode::Unreachable) =>
        {
            Confirm::Failed(e.to_string())
        }
        Ok(Err(_)) => Confirm::NotHeld,
        Err(_) => Confirm::Failed(format!(
            "{node} did not answer whether it holds its work within {SEND_TIMEOUT:?}"
        )),
    }
}

/// How one node's send in a round ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sent {
    /// The whole work was taken.
    Whole,
    /// The node already held this work (same digest) and took the fence.
    Confirmed,
    /// Not delivered (unreachable, timed out, refused), and why.
    Failed(String),
}

async fn tick(plane: &ControlPlane, term: u64) {
    let t = now();
    let due = plane
        .mesh()
        .read_with(move |s| s.coordinator().tick_due(t))
        .await
        .unwrap_or(false);
    if due && let Err(e) = plane.write_as_leader(term, Command::Tick).await {
        debug!(error = %e, "tick not written");
    }
}

/// Marks a registered node Down once this leader has not seen a new gossip
/// heartbeat of it for `down_after` (or it announced it leaves), and Ready again
/// once it is alive and heard within `down_after`. Both are committed facts:
/// any later leader sees them and can bring the node back.
async fn liveness(plane: &ControlPlane, lead: &mut Leading, down_after: Duration) {
    let now = Instant::now();
    let members: BTreeMap<String, (MemberStatus, Option<u64>)> = plane
        .mesh()
        .members()
        .await
        .into_iter()
        .map(|m| (m.node_id.to_string(), (m.status, m.last_heard_ms)))
        .collect();
    for (name, (_, ms)) in &members {
        if let Some(at) = ms.and_then(|ms| now.checked_sub(Duration::from_millis(ms))) {
            let h = lead.heard.entry(name.clone()).or_insert(at);
            *h = (*h).max(at);
        }
    }
    let nodes: Vec<(String, bool)> = match plane
        .mesh()
        .read_with(|s| {
            s.coordinator()
                .cluster()
                .live_nodes()
                // A node only declared has no agent to hear from: it stays
                // not yet seen rather than Down.
                .filter(|n| n.registered)
                .map(|n| (n.spec.name.clone(), n.down.is_some()))
                .collect()
        })
        .await
    {
        Ok(n) => n,
        Err(_) => return,
    };
    for (name, down) in nodes {
        let heard = lead
            .heard
            .get(&name)
            .copied()
            .unwrap_or(lead.since)
            .max(lead.since);
        let silent = now.saturating_duration_since(heard);
        let status = members.get(&name).map(|(s, _)| *s);
        let condition = if !down && (silent > down_after || status == Some(MemberStatus::Left)) {
            NodeCondition::Down
        } else if down && status == Some(MemberStatus::Alive) && silent <= down_after {
            NodeCondition::Ready
        } else {
            continue;
        };
        match plane
            .write_as_leader(
                lead.term,
                Command::SetNodeCondition {
                    node: name.clone(),
                    condition,
                },
            )
            .await
        {
            Ok(_) => warn!(
                node = %name,
                ?condition,
                silent_ms = silent.as_millis() as u64,
                term = lead.term,
                "node condition changed by the leader's liveness view"
            ),
            Err(e) => debug!(node = %name, error = %e, "node condition not written"),
        }
    }
}
