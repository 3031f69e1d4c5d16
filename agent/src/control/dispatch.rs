//! Leader dispatch: while this server leads, every node gets its complete
//! desired work as a fenced command after each commit that changes it, after
//! a leader change and every `period`; `Tick` is written when something is
//! due; nodes the mesh declares dead are marked down, and ready again when
//! they come back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use daros_coordinator::state::desired::DesiredWork;
use daros_coordinator::{Command, NodeCondition};
use daros_gossip::NodeId;
use daros_gossip::fence::FenceToken;
use daros_gossip::membership::MemberStatus;
use daros_gossip::raft::{LogPosition, ServerRole};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::node::WORK_METHOD;
use super::plane::{ControlPlane, changed_or, now};
use super::work::{DesiredInstance, DesiredJob, NodeWork};

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

#[derive(Default)]
struct Leading {
    term: u64,
    /// Work each node acknowledged in this term.
    acked: BTreeMap<String, DesiredWork>,
    last_full: Option<Instant>,
    last_tick: Option<Instant>,
    marked_down: BTreeSet<String>,
    /// Last applied position a round was computed at.
    seen: Option<LogPosition>,
}

/// Runs on every server agent; acts while it is the leader.
pub async fn leader_loop(
    plane: Arc<ControlPlane>,
    mut applied: watch::Receiver<LogPosition>,
    period: Duration,
) {
    let mut lead = Leading::default();
    let step = Duration::from_millis(250).min(period);
    loop {
        changed_or(&mut applied, step).await;
        let Some(st) = plane.mesh().consensus_status() else {
            return;
        };
        if st.role != ServerRole::Leader {
            if lead.term != 0 {
                debug!(term = lead.term, "no longer leading; dispatch paused");
            }
            lead = Leading::default();
            continue;
        }
        if st.term != lead.term {
            info!(term = st.term, "leading: dispatching work to every node");
            lead = Leading {
                term: st.term,
                ..Leading::default()
            };
        }
        let full = lead.last_full.is_none_or(|t| t.elapsed() >= period);
        let at = *applied.borrow_and_update();
        // Between full rounds, only a new commit can change a node's work.
        if full || lead.seen != Some(at) {
            if full {
                lead.last_full = Some(Instant::now());
            }
            lead.seen = Some(at);
            round(&plane, &mut lead, full, st.commit_index.unwrap_or(0)).await;
        }
        if lead.last_tick.is_none_or(|t| t.elapsed() >= period) {
            lead.last_tick = Some(Instant::now());
            tick(&plane).await;
            liveness(&plane, &mut lead).await;
        }
    }
}

async fn round(plane: &Arc<ControlPlane>, lead: &mut Leading, full: bool, index: u64) {
    let desired = match plane.mesh().read_with(|s| s.desired_work()).await {
        Ok(d) => d,
        Err(e) => {
            debug!(error = %e, "desired work not readable");
            return;
        }
    };
    let fence = FenceToken {
        term: lead.term,
        index,
    };
    // Nodes gossip declares gone only get the periodic full round, so that a
    // dead node does not hold up the others' work on every commit.
    let gone: BTreeSet<String> = plane
        .mesh()
        .members()
        .await
        .into_iter()
        .filter(|m| matches!(m.status, MemberStatus::Dead | MemberStatus::Left))
        .map(|m| m.node_id.to_string())
        .collect();
    let sends = desired
        .into_iter()
        .filter(|(n, d)| full || (lead.acked.get(n) != Some(d) && !gone.contains(n)))
        .map(|(node, d)| {
            let plane = Arc::clone(plane);
            async move {
                let Ok(id) = NodeId::new(node.clone()) else {
                    return (node, d, false);
                };
                let body = match serde_json::to_value(node_work(&node, fence, &d)) {
                    Ok(b) => b,
                    Err(_) => return (node, d, false),
                };
                let sent = tokio::time::timeout(
                    SEND_TIMEOUT,
                    plane.mesh().command(&id, WORK_METHOD, body),
                )
                .await
                .unwrap_or_else(|_| {
                    Err(daros_gossip::mesh::MeshError::Rpc(
                        daros_gossip::rpc::RpcError::new(
                            daros_gossip::rpc::ErrorCode::Timeout,
                            format!("{node} did not take its work within {SEND_TIMEOUT:?}"),
                        ),
                    ))
                });
                match sent {
                    Ok(_) => (node, d, true),
                    Err(e) => {
                        debug!(node = %node, error = %e, "work not delivered");
                        (node, d, false)
                    }
                }
            }
        });
    for (node, d, ok) in futures::future::join_all(sends).await {
        if ok {
            lead.acked.insert(node, d);
        } else {
            lead.acked.remove(&node);
        }
    }
}

async fn tick(plane: &ControlPlane) {
    let t = now();
    let due = plane
        .mesh()
        .read_with(move |s| s.coordinator().tick_due(t))
        .await
        .unwrap_or(false);
    if due && let Err(e) = plane.write(Command::Tick).await {
        debug!(error = %e, "tick not written");
    }
}

/// Marks nodes whose agent the mesh declares dead as down (their instances are
/// re-placed), and ready again once they are alive.
async fn liveness(plane: &ControlPlane, lead: &mut Leading) {
    let members: BTreeMap<String, MemberStatus> = plane
        .mesh()
        .members()
        .await
        .into_iter()
        .map(|m| (m.node_id.to_string(), m.status))
        .collect();
    let nodes: Vec<(String, bool)> = match plane
        .mesh()
        .read_with(|s| {
            s.coordinator()
                .cluster()
                .nodes()
                .iter()
                .map(|n| (n.spec.name.clone(), n.spec.schedulable))
                .collect()
        })
        .await
    {
        Ok(n) => n,
        Err(_) => return,
    };
    for (name, schedulable) in nodes {
        let status = members.get(&name).copied();
        let gone = matches!(status, Some(MemberStatus::Dead | MemberStatus::Left));
        let condition = if gone && schedulable {
            NodeCondition::Down
        } else if status == Some(MemberStatus::Alive) && lead.marked_down.contains(&name) {
            NodeCondition::Ready
        } else {
            continue;
        };
        match plane
            .write(Command::SetNodeCondition {
                node: name.clone(),
                condition,
            })
            .await
        {
            Ok(_) => {
                warn!(node = %name, ?condition, "node condition changed by the mesh's liveness");
                if condition == NodeCondition::Down {
                    lead.marked_down.insert(name);
                } else {
                    lead.marked_down.remove(&name);
                }
            }
            Err(e) => debug!(node = %name, error = %e, "node condition not written"),
        }
    }
}
