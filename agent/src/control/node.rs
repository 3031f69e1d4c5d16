//! The node side of the control plane: takes the leader's fenced work and
//! hands it to the executor, forwards the executor's reports to the leader
//! through raft, and registers this node (again when its capacity changes).

use std::sync::Arc;
use std::time::Duration;

use daros_coordinator::Command;
use daros_gossip::membership::{LocalInfo, Resources};
use daros_gossip::rpc::{CallContext, ErrorCode, RpcError};
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast};
use tracing::{debug, info, warn};

use super::contact::Contact;
use super::plane::{ControlMesh, ControlPlane, NodeSpecFn};
use super::state::ControlCommand;
use super::work::{ExecError, NodeReport, NodeWork, WorkExecutor};
use super::work_digest::{
    DIGEST_FIELD, HeldWork, SAME_WORK_METHOD, SameWork, SameWorkAnswer, WorkDigest,
};

/// RPC method carrying a node's [`NodeWork`] (a fenced command).
pub const WORK_METHOD: &str = "control.work";

/// Registers the fenced work methods (the work, and the question whether this
/// node holds work of a digest); the returned notifier fires when work arrives
/// from a newer term (a new leader), so that reports are resent.
pub fn serve_work(
    mesh: &ControlMesh,
    me: String,
    exec: Arc<dyn WorkExecutor>,
    contact: Arc<Contact>,
) -> Arc<Notify> {
    let resync = Arc::new(Notify::new());
    let last_term = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let held = Arc::new(HeldWork::default());
    // Contact with a leader of `term`: a newer term resends every report.
    let heard = {
        let (notify, last_term, contact) = (
            Arc::clone(&resync),
            Arc::clone(&last_term),
            Arc::clone(&contact),
        );
        move |term: u64| {
            contact.touch();
            let prev = last_term.fetch_max(term, std::sync::atomic::Ordering::SeqCst);
            if term > prev {
                notify.notify_one();
            }
        }
    };
    let (work_me, work_held, work_heard) = (me.clone(), Arc::clone(&held), heard.clone());
    mesh.handle_command(WORK_METHOD, move |ctx: CallContext, mut body: Value| {
        let exec = Arc::clone(&exec);
        let me = work_me.clone();
        let held = Arc::clone(&work_held);
        let heard = work_heard.clone();
        async move {
            let digest = body
                .as_object_mut()
                .and_then(|o| o.remove(DIGEST_FIELD))
                .and_then(|d| serde_json::from_value::<WorkDigest>(d).ok());
            let mut work: NodeWork = serde_json::from_value(body)
                .map_err(|e| RpcError::bad_request(format!("node work: {e}")))?;
            // The mesh checked this token against the highest term accepted.
            if let Some(f) = ctx.fence {
                work.fence = f;
            }
            if work.node != me {
                return Err(wrong_node(me, work.node));
            }
            let fence = work.fence;
            let (n, j) = (work.instances.len(), work.jobs.len());
            match exec.execute(work).await {
                Ok(()) => {}
                Err(e @ ExecError::Stale { .. }) => {
                    return Err(RpcError::new(ErrorCode::StaleTerm, e.to_string()));
                }
                Err(e) => return Err(RpcError::internal(e.to_string())),
            }
            held.accepted(fence, digest);
            heard(fence.term);
            debug!(
                term = fence.term,
                instances = n,
                jobs = j,
                "node work accepted"
            );
            Ok(json!({ "accepted": true, "instances": n, "jobs": j }))
        }
    });
    mesh.handle_command(SAME_WORK_METHOD, move |ctx: CallContext, body: Value| {
        let me = me.clone();
        let held = Arc::clone(&held);
        let heard = heard.clone();
        async move {
            let q: SameWork = serde_json::from_value(body)
                .map_err(|e| RpcError::bad_request(format!("same work: {e}")))?;
            if q.node != me {
                return Err(wrong_node(me, q.node));
            }
            let fence = ctx.fence.unwrap_or_default();
            let same = held.holds(&q.digest, fence);
            if same {
                heard(fence.term);
            }
            serde_json::to_value(SameWorkAnswer { same })
                .map_err(|e| RpcError::internal(e.to_string()))
        }
    });
    resync
}

/// Work or a question for another node than this one.
fn wrong_node(expected: String, got: String) -> RpcError {
    RpcError::bad_request(ExecError::WrongNode { expected, got }.to_string())
}

/// How often a node sends its whole state (its inventory) besides changes: an
/// instance the coordinator believes live there but the node does not run is
/// failed within this.
pub const INVENTORY_EVERY: Duration = Duration::from_secs(10);

/// Items per inventory at most (a larger node sends its reports one by one,
/// without the absent-instance check, to stay under the raft command limit).
const INVENTORY_MAX_ITEMS: usize = 500;

async fn send(plane: &ControlPlane, command: ControlCommand) {
    let mut delay = Duration::from_millis(100);
    for _ in 0..8 {
        match plane.write_raw(command.clone()).await {
            Ok(_) => {
                plane.contact().touch();
                return;
            }
            Err(e) => {
                debug!(error = %e, "report not written yet; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(3));
            }
        }
    }
    warn!(
        ?command,
        "report not written; the next resync sends it again"
    );
}

fn report(plane: &ControlPlane, report: NodeReport) -> ControlCommand {
    ControlCommand::Report {
        node: plane.node_name().to_string(),
        report,
    }
}

/// Forwards every report of the executor to the leader (through raft), each
/// write carrying every report that arrived while the previous one was in
/// flight (one write per report held a node that started 160 instances at
/// once for 160 round trips: issue 18's fleet bench); sends
/// the executor's whole current state as one inventory after a leader change,
/// after losing reports, and every [`INVENTORY_EVERY`]. Stale and repeated
/// reports are dropped when applied.
pub async fn forward_reports(
    plane: Arc<ControlPlane>,
    exec: Arc<dyn WorkExecutor>,
    resync: Arc<Notify>,
) {
    let mut rx = exec.subscribe();
    let mut full = true;
    let mut every = tokio::time::interval(INVENTORY_EVERY);
    loop {
        if full {
            full = false;
            let reports = exec.current().await;
            if reports.len() <= INVENTORY_MAX_ITEMS {
                let node = plane.node_name().to_string();
                send(&plane, ControlCommand::Inventory { node, reports }).await;
            } else {
                for r in reports {
                    send(&plane, report(&plane, r)).await;
                }
            }
        }
        tokio::select! {
            r = rx.recv() => match r {
                Ok(r) => {
                    let mut batch = vec![r];
                    while batch.len() < INVENTORY_MAX_ITEMS {
                        match rx.try_recv() {
                            Ok(r) => batch.push(r),
                            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                                warn!(lost = n, "reports lagged; resending the current state");
                                full = true;
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    let command = if batch.len() == 1 {
                        report(&plane, batch.remove(0))
                    } else {
                        ControlCommand::Reports {
                            node: plane.node_name().to_string(),
                            reports: batch,
                        }
                    };
                    send(&plane, command).await;
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    warn!(lost = n, "reports lagged; resending the current state");
                    full = true;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = resync.notified() => full = true,
            _ = every.tick() => full = true,
        }
    }
}

/// Stops the instances whose `disconnect.stopOnClientAfter` has passed while this
/// node has had no contact with the servers (at-most-once across a partition).
pub async fn disconnect_watch(plane: Arc<ControlPlane>, exec: Arc<dyn WorkExecutor>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let silent = plane.contact().silent_for();
        if silent < Duration::from_secs(1) {
            continue;
        }
        let stopped = exec.stop_disconnected(silent).await;
        if !stopped.is_empty() {
            warn!(
                silent_ms = silent.as_millis() as u64,
                ?stopped,
                "no contact with the servers: stopped instances past their stopOnClientAfter"
            );
        }
    }
}

/// This node's gossip summary (what `darosctl members` shows).
fn local_info(n: &daros_coordinator::ExecutionNode) -> LocalInfo {
    let r = Resources {
        cpu_millicores: n.capacity.cpu.0,
        memory_bytes: n.capacity.memory.0,
        gpus: n.capacity.gpu.0,
        net_mbps: 0,
    };
    LocalInfo {
        capacity: r.clone(),
        allocatable: r,
        runtimes: n
            .runtimes
            .iter()
            .map(|r| format!("{r:?}").to_lowercase())
            .collect(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    }
}

/// Registers this node at start (retrying until a leader takes it) and again
/// whenever its description changes.
pub async fn register_loop(
    plane: Arc<ControlPlane>,
    spec: NodeSpecFn,
    first: tokio::sync::oneshot::Sender<()>,
) {
    let mut first = Some(first);
    let mut registered = None;
    let mut refused: Option<String> = None;
    loop {
        let node = spec();
        if registered.as_ref() != Some(&node) {
            plane.mesh().set_local_info(&local_info(&node)).await;
            match plane
                .write(Command::RegisterNode { node: node.clone() })
                .await
            {
                Ok(_) => {
                    info!(node = %node.name, cpu = %node.capacity.cpu, memory = %node.capacity.memory, "node registered");
                    registered = Some(node);
                    if let Some(f) = first.take() {
                        let _ = f.send(());
                    }
                }
                // A refusal will not heal by waiting for a leader: say why (once).
                Err(e @ super::ControlError::Refused(_)) => {
                    let why = e.to_string();
                    if refused.as_ref() != Some(&why) {
                        warn!(error = %why, "node registration refused by the coordinator");
                        refused = Some(why);
                    }
                }
                Err(e) => debug!(error = %e, "node registration not written yet"),
            }
        }
        let wait = if registered.is_some() { 10 } else { 1 };
        tokio::time::sleep(Duration::from_secs(wait)).await;
    }
}
