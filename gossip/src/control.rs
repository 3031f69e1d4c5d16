//! Local control socket of the standalone mesh node: one JSON request per line on a unix
//! socket, one JSON answer per line. It stands in for the agent's API until darosd embeds the
//! mesh; `daros-mesh-node ctl` and the multi-node test harness speak it.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::identity::NodeId;
use crate::mesh::{MeshError, MeshHandle};
use crate::raft::ReplicatedState;

/// Requests on the control socket.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ControlRequest {
    /// Gossip members.
    Members,
    /// Cluster status (leader, term, commit index, servers).
    Status,
    /// Raft status of this server.
    Raft,
    /// Write a state-machine command.
    Write {
        /// The command as JSON.
        command: Value,
    },
    /// Linearizable read.
    Read {
        /// The query as JSON.
        query: Value,
    },
    /// Add a server agent to raft.
    AddServer {
        /// Node id.
        node_id: NodeId,
        /// RPC address (default: from gossip).
        #[serde(default)]
        rpc_addr: Option<std::net::SocketAddr>,
    },
    /// Remove a server agent from raft.
    RemoveServer {
        /// Node id.
        node_id: NodeId,
    },
    /// Coordinator only: send a fenced command to an agent.
    Command {
        /// Target node.
        node_id: NodeId,
        /// Method.
        method: String,
        /// Body.
        #[serde(default)]
        body: Value,
    },
    /// Plain call to a node.
    Call {
        /// Target node.
        node_id: NodeId,
        /// Method.
        method: String,
        /// Body.
        #[serde(default)]
        body: Value,
    },
    /// Highest fence accepted by this agent.
    Fence,
    /// Gossip transport counters.
    Stats,
    /// Leave the cluster gracefully and exit.
    Leave,
}

/// Answer on the control socket.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlResponse {
    /// Success.
    Ok(Value),
    /// Failure: `kind` is machine-readable, `message` for people, `detail` structured.
    Error {
        /// Error class.
        kind: String,
        /// Message.
        message: String,
        /// Structured detail (consensus or RPC error).
        #[serde(default)]
        detail: Value,
    },
}

fn mesh_error(e: MeshError) -> ControlResponse {
    let (kind, detail) = if let Some(c) = e.consensus() {
        (
            "consensus".to_string(),
            serde_json::to_value(c).unwrap_or(Value::Null),
        )
    } else if let MeshError::Rpc(r) = &e {
        (
            r.code.to_string(),
            serde_json::to_value(r).unwrap_or(Value::Null),
        )
    } else {
        ("mesh".to_string(), Value::Null)
    };
    ControlResponse::Error {
        kind,
        message: e.to_string(),
        detail,
    }
}

fn ok<T: Serialize>(v: &T) -> ControlResponse {
    match serde_json::to_value(v) {
        Ok(v) => ControlResponse::Ok(v),
        Err(e) => ControlResponse::Error {
            kind: "internal".into(),
            message: e.to_string(),
            detail: Value::Null,
        },
    }
}

async fn answer<S: ReplicatedState>(
    h: &MeshHandle<S>,
    req: ControlRequest,
) -> (ControlResponse, bool) {
    let r = match req {
        ControlRequest::Members => ok(&h.members().await),
        ControlRequest::Status => match h.cluster_status().await {
            Ok(s) => ok(&s),
            Err(e) => mesh_error(e),
        },
        ControlRequest::Raft => ok(&h.consensus_status()),
        ControlRequest::Write { command } => match serde_json::from_value::<S::Command>(command) {
            Ok(cmd) => match h.write(cmd).await {
                Ok(c) => ok(&c),
                Err(e) => mesh_error(e),
            },
            Err(e) => ControlResponse::Error {
                kind: "bad_request".into(),
                message: format!("command: {e}"),
                detail: Value::Null,
            },
        },
        ControlRequest::Read { query } => match serde_json::from_value::<S::Query>(query) {
            Ok(q) => match h.read(q).await {
                Ok(a) => ok(&a),
                Err(e) => mesh_error(e),
            },
            Err(e) => ControlResponse::Error {
                kind: "bad_request".into(),
                message: format!("query: {e}"),
                detail: Value::Null,
            },
        },
        ControlRequest::AddServer { node_id, rpc_addr } => {
            match h.add_server(&node_id, rpc_addr).await {
                Ok(()) => ControlResponse::Ok(Value::Null),
                Err(e) => mesh_error(e),
            }
        }
        ControlRequest::RemoveServer { node_id } => match h.remove_server(&node_id).await {
            Ok(()) => ControlResponse::Ok(Value::Null),
            Err(e) => mesh_error(e),
        },
        ControlRequest::Command {
            node_id,
            method,
            body,
        } => match h.command(&node_id, &method, body).await {
            Ok(v) => ControlResponse::Ok(v),
            Err(e) => mesh_error(e),
        },
        ControlRequest::Call {
            node_id,
            method,
            body,
        } => match h.call(&node_id, &method, body).await {
            Ok(v) => ControlResponse::Ok(v),
            Err(e) => mesh_error(e),
        },
        ControlRequest::Fence => ok(&h.fence_highest()),
        ControlRequest::Stats => {
            let s = h.seal_stats();
            ControlResponse::Ok(json!({
                "datagrams_sent": s.datagrams_sent.load(Ordering::Relaxed),
                "bytes_sent": s.bytes_sent.load(Ordering::Relaxed),
                "datagrams_received": s.datagrams_received.load(Ordering::Relaxed),
                "bytes_received": s.bytes_received.load(Ordering::Relaxed),
                "opened": s.opened.load(Ordering::Relaxed),
                "rejected_auth": s.rejected_auth.load(Ordering::Relaxed),
                "rejected_epoch": s.rejected_epoch.load(Ordering::Relaxed),
                "rejected_stale": s.rejected_stale.load(Ordering::Relaxed),
                "rejected_malformed": s.rejected_malformed.load(Ordering::Relaxed),
                "rejected_total": s.rejected_total(),
            }))
        }
        ControlRequest::Leave => {
            h.leave().await;
            return (ControlResponse::Ok(Value::Null), true);
        }
    };
    (r, false)
}

/// Serves the control socket at `path` until a `leave` request; returns then.
pub async fn serve<S: ReplicatedState>(path: &Path, h: MeshHandle<S>) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    // The socket can write to raft: owner only.
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let (left_tx, mut left_rx) = tokio::sync::mpsc::channel::<()>(1);
    loop {
        tokio::select! {
            _ = left_rx.recv() => return Ok(()),
            accepted = listener.accept() => {
                let (stream, _) = accepted?;
                let h = h.clone();
                let left_tx = left_tx.clone();
                tokio::spawn(async move {
                    let (r, w) = stream.into_split();
                    let mut lines = BufReader::new(r).lines();
                    let mut w = w;
                    while let Ok(Some(line)) = lines.next_line().await {
                        let (resp, left) = match serde_json::from_str::<ControlRequest>(&line) {
                            Ok(req) => answer(&h, req).await,
                            Err(e) => (ControlResponse::Error {
                                kind: "bad_request".into(),
                                message: format!("control request: {e}"),
                                detail: Value::Null,
                            }, false),
                        };
                        let mut out = serde_json::to_vec(&resp).unwrap_or_default();
                        out.push(b'\n');
                        if w.write_all(&out).await.is_err() {
                            break;
                        }
                        if left {
                            let _ = left_tx.send(()).await;
                            break;
                        }
                    }
                });
            }
        }
    }
}

/// A control-socket client.
pub struct ControlClient {
    path: PathBuf,
}

impl ControlClient {
    /// Client for the socket at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Sends one request and waits for the answer.
    pub async fn request(&self, req: &ControlRequest) -> std::io::Result<ControlResponse> {
        let stream = UnixStream::connect(&self.path).await?;
        let (r, mut w) = stream.into_split();
        let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
        line.push(b'\n');
        w.write_all(&line).await?;
        let mut lines = BufReader::new(r).lines();
        match lines.next_line().await? {
            Some(l) => serde_json::from_str(&l).map_err(std::io::Error::other),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "control socket closed without an answer",
            )),
        }
    }
}
