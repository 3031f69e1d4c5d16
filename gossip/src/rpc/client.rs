//! Calling RPC methods on other nodes over cached QUIC connections.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use serde_json::Value;
use tokio::sync::Mutex;

use super::error::{ErrorCode, RpcError};
use super::frame;
use super::handler::Registry;
use super::server::serve_connection;
use super::stats::{RpcStats, Side};
use super::wire::{Reply, Request};
use crate::tls;

/// A handshake in progress, shared by every caller that waits for it.
type Handshake = Shared<BoxFuture<'static, Result<quinn::Connection, String>>>;

/// A cached connection, or the one handshake under way to that peer.
enum Slot {
    Open(quinn::Connection),
    /// Driven by its own task: a caller that stops waiting (its connect timeout)
    /// does not abandon it, so the next call picks it up where it is. A handshake
    /// restarted on every call never finished while both sides were busy: a new
    /// leader's calls to 500 agents on a saturated host failed for minutes.
    Connecting(Handshake),
}

/// Serves the calls a peer makes on a connection this node dialed.
#[derive(Clone)]
struct Serving {
    /// Weak: the registry's handlers hold this client.
    registry: std::sync::Weak<Registry>,
    cluster_id: String,
}

/// An RPC client: one cached connection per (address, node id).
///
/// A connection works both ways, as Nomad's servers reach their clients over
/// the connection each client opened: a call to a peer goes over one this
/// node dialed or, failing that, over one the peer dialed here (lent by
/// [`super::serve`], by the node id its certificate proves), and dials only
/// when there is neither. After a leader change every agent dials the new
/// leader and the leader would dial every agent: one handshake per pair
/// instead of two, and the leader's calls reach agents whose endpoint cannot
/// take a handshake in time (or at all, behind NAT).
pub struct RpcClient {
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    conns: Mutex<HashMap<(SocketAddr, String), Slot>>,
    /// Connections peers dialed to this node, by their verified node id.
    lent: std::sync::Mutex<HashMap<String, quinn::Connection>>,
    /// Set when this node serves calls: then it also serves them on the
    /// connections it dials.
    serving: std::sync::OnceLock<Serving>,
    max_frame: usize,
    connect_timeout: Duration,
    stats: Arc<RpcStats>,
}

/// How long a QUIC handshake may take before the peer is considered unreachable. A dead peer
/// answers nothing, so without this a call would wait for the whole idle timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);

/// Where to call: the address and the node id its certificate must carry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// RPC address.
    pub addr: SocketAddr,
    /// Expected node id (TLS server name).
    pub node: String,
}

impl Target {
    /// A target.
    pub fn new(addr: SocketAddr, node: impl Into<String>) -> Self {
        Self {
            addr,
            node: node.into(),
        }
    }
}

/// An open subscription.
pub struct Subscription {
    recv: quinn::RecvStream,
    _send: quinn::SendStream,
    max_frame: usize,
    done: bool,
}

impl Subscription {
    /// Next pushed item; `None` at the normal end.
    pub async fn next(&mut self) -> Option<Result<Value, RpcError>> {
        if self.done {
            return None;
        }
        match frame::read::<_, Reply>(&mut self.recv, self.max_frame).await {
            Ok(Some(Reply::Item { body })) => Some(Ok(body)),
            Ok(Some(Reply::End)) | Ok(None) => {
                self.done = true;
                None
            }
            Ok(Some(Reply::Err { error })) => {
                self.done = true;
                Some(Err(error))
            }
            Ok(Some(Reply::Ok { body })) => Some(Ok(body)),
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl RpcClient {
    /// A client dialing from `endpoint` with `config`.
    pub fn new(endpoint: quinn::Endpoint, config: quinn::ClientConfig, max_frame: usize) -> Self {
        Self {
            endpoint,
            config,
            conns: Mutex::default(),
            lent: std::sync::Mutex::default(),
            serving: std::sync::OnceLock::new(),
            max_frame,
            connect_timeout: CONNECT_TIMEOUT,
            stats: Arc::default(),
        }
    }

    /// The counters calls made are counted into (share them with the
    /// node's [`super::Registry`] for one view of both sides).
    pub fn stats(&self) -> Arc<RpcStats> {
        self.stats.clone()
    }

    /// Serves calls from `registry` on every connection this client dials from
    /// now on, so that the peer may call back over it (set once).
    pub fn serve_dialed(&self, registry: &Arc<Registry>, cluster_id: String) {
        let _ = self.serving.set(Serving {
            registry: Arc::downgrade(registry),
            cluster_id,
        });
    }

    /// Lends this client a connection `node` dialed (its certificate proved the id).
    pub(crate) fn adopt(&self, node: &str, conn: &quinn::Connection) {
        if let Ok(mut lent) = self.lent.lock() {
            lent.insert(node.to_string(), conn.clone());
        }
    }

    /// Takes back a lent connection that closed (unless a newer one replaced it).
    pub(crate) fn release(&self, node: &str, conn: &quinn::Connection) {
        if let Ok(mut lent) = self.lent.lock()
            && lent
                .get(node)
                .is_some_and(|c| c.stable_id() == conn.stable_id())
        {
            lent.remove(node);
        }
    }

    /// An open connection `node` dialed to this node.
    fn lent_by(&self, node: &str) -> Option<quinn::Connection> {
        let mut lent = self.lent.lock().ok()?;
        match lent.get(node) {
            Some(c) if c.close_reason().is_none() => Some(c.clone()),
            Some(_) => {
                lent.remove(node);
                None
            }
            None => None,
        }
    }

    async fn connection(&self, t: &Target) -> Result<(quinn::Connection, bool), RpcError> {
        let key = (t.addr, t.node.clone());
        let unreachable = |why: String| {
            RpcError::new(
                ErrorCode::Unreachable,
                format!("connecting to {} at {}: {why}", t.node, t.addr),
            )
        };
        // A handshake that had already failed when this call found it is not
        // this call's answer: one fresh attempt follows.
        for _ in 0..2 {
            let mut conns = self.conns.lock().await;
            if let Some(Slot::Open(c)) = conns.get(&key)
                && c.close_reason().is_none()
            {
                return Ok((c.clone(), true));
            }
            if let Some(c) = self.lent_by(&t.node) {
                self.stats.count_on_peer_connection();
                return Ok((c, true));
            }
            let handshake = match conns.get(&key) {
                Some(Slot::Connecting(h)) => h.clone(),
                _ => {
                    let connecting = self
                        .endpoint
                        .connect_with(self.config.clone(), t.addr, &t.node)
                        .map_err(|e| unreachable(e.to_string()))?;
                    let serving = self.serving.get().cloned();
                    let (stats, max_frame) = (self.stats.clone(), self.max_frame);
                    let task = tokio::spawn(async move {
                        let conn = connecting.await?;
                        stats.count_dialed();
                        if let Some(s) = serving
                            && let Some(registry) = s.registry.upgrade()
                        {
                            let peer = tls::peer_identity(&conn, &s.cluster_id);
                            tokio::spawn(serve_connection(conn.clone(), peer, registry, max_frame));
                        }
                        Ok::<_, quinn::ConnectionError>(conn)
                    });
                    let h: Handshake = async move {
                        match task.await {
                            Ok(r) => r.map_err(|e| e.to_string()),
                            Err(e) => Err(e.to_string()),
                        }
                    }
                    .boxed()
                    .shared();
                    conns.insert(key.clone(), Slot::Connecting(h.clone()));
                    h
                }
            };
            drop(conns);
            let finished_before = handshake.peek().is_some();
            match tokio::time::timeout(self.connect_timeout, handshake.clone()).await {
                Ok(Ok(c)) => {
                    self.settle(&key, &handshake, Some(&c)).await;
                    return Ok((c, false));
                }
                Ok(Err(e)) => {
                    self.settle(&key, &handshake, None).await;
                    if !finished_before {
                        return Err(unreachable(e));
                    }
                }
                // Left running for the next call.
                Err(_) => {
                    return Err(unreachable(format!(
                        "no answer within {:?}",
                        self.connect_timeout
                    )));
                }
            }
        }
        Err(unreachable("no handshake succeeded".into()))
    }

    /// Replaces the finished `handshake` in the cache by its connection (or
    /// removes it), unless something newer took its place.
    async fn settle(
        &self,
        key: &(SocketAddr, String),
        handshake: &Handshake,
        conn: Option<&quinn::Connection>,
    ) {
        let mut conns = self.conns.lock().await;
        let current = matches!(conns.get(key), Some(Slot::Connecting(h)) if h.ptr_eq(handshake));
        if current {
            match conn {
                Some(c) => conns.insert(key.clone(), Slot::Open(c.clone())),
                None => conns.remove(key),
            };
        }
    }

    /// Drops the connection to `t` that just failed, dialed or lent.
    async fn forget(&self, t: &Target) {
        self.conns.lock().await.remove(&(t.addr, t.node.clone()));
        if let Ok(mut lent) = self.lent.lock() {
            lent.remove(&t.node);
        }
    }

    async fn open(
        &self,
        t: &Target,
        req: &Request,
    ) -> Result<(quinn::SendStream, quinn::RecvStream), RpcError> {
        let bytes = frame::encode(req, self.max_frame)?;
        // A cached connection may have died silently: retry once on a fresh one.
        for attempt in 0..2 {
            let (conn, cached) = self.connection(t).await?;
            let res = async {
                let (mut send, recv) = conn.open_bi().await.map_err(|e| {
                    RpcError::transport(format!("opening a stream to {}: {e}", t.node))
                })?;
                match send.write_all(&bytes).await {
                    Ok(()) => {
                        send.finish().map_err(|e| {
                            RpcError::transport(format!("sending to {}: {e}", t.node))
                        })?;
                    }
                    // The server refused the request before reading all of it (too large, bad
                    // version): its reply explains why.
                    Err(quinn::WriteError::Stopped(_)) => {}
                    Err(e) => {
                        return Err(RpcError::transport(format!("sending to {}: {e}", t.node)));
                    }
                }
                Ok::<_, RpcError>((send, recv))
            }
            .await;
            match res {
                Ok(s) => return Ok(s),
                Err(e) => {
                    self.forget(t).await;
                    if !(cached && attempt == 0) {
                        return Err(e);
                    }
                }
            }
        }
        Err(RpcError::transport(format!("no connection to {}", t.node)))
    }

    /// Calls a unary method and waits at most `timeout`.
    pub async fn call(
        &self,
        t: &Target,
        req: &Request,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let r = self.call_uncounted(t, req, timeout).await;
        self.stats
            .count(Side::Made, r.as_ref().err().map(|e| e.code));
        r
    }

    async fn call_uncounted(
        &self,
        t: &Target,
        req: &Request,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let fut = async {
            let (_send, mut recv) = self.open(t, req).await?;
            match frame::read::<_, Reply>(&mut recv, self.max_frame).await {
                Ok(Some(Reply::Ok { body })) => Ok(body),
                Ok(Some(Reply::Err { error })) => Err(error),
                Ok(Some(other)) => Err(RpcError::bad_request(format!(
                    "unexpected reply to a unary call: {other:?}"
                ))),
                Ok(None) => Err(RpcError::transport(format!(
                    "{} closed the stream without a reply",
                    t.node
                ))),
                Err(e) => {
                    if e.is_transport() {
                        self.forget(t).await;
                    }
                    Err(e)
                }
            }
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(RpcError::new(
                ErrorCode::Timeout,
                format!(
                    "{} did not answer {} within {timeout:?}",
                    t.node, req.method
                ),
            )),
        }
    }

    /// Opens a subscription (server-push stream).
    pub async fn subscribe(&self, t: &Target, req: &Request) -> Result<Subscription, RpcError> {
        let opened = self.open(t, req).await;
        self.stats
            .count(Side::Made, opened.as_ref().err().map(|e| e.code));
        let (send, recv) = opened?;
        Ok(Subscription {
            recv,
            _send: send,
            max_frame: self.max_frame,
            done: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::ClusterCa;
    use crate::pki::NodeCredentials;
    use crate::{NodeId, Role, tls};

    /// Credentials of cluster `c1` for each (node, role).
    fn creds<const N: usize>(nodes: [(&str, Role); N]) -> [NodeCredentials; N] {
        let ca = ClusterCa::init("c1").unwrap();
        nodes.map(|(n, r)| ca.issue_local(&NodeId::new(n).unwrap(), r).unwrap())
    }

    /// A handshake the server completes only after the first call gave up is the
    /// one the next call gets: no second handshake is started.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_handshake_outlives_one_calls_timeout() {
        let [s1, c1] = creds([("s1", Role::Server), ("c1", Role::Client)]);
        let server = quinn::Endpoint::server(
            tls::server_config(&s1).unwrap(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .unwrap();
        let addr = server.local_addr().unwrap();
        let ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut client = RpcClient::new(ep, tls::client_config(&c1).unwrap(), 1 << 16);
        client.connect_timeout = Duration::from_millis(300);
        let target = Target::new(addr, "s1");

        // The server holds the first handshake past the caller's timeout.
        let first = client.connection(&target).await.unwrap_err();
        assert!(first.message.contains("no answer within"), "{first}");
        let incoming = tokio::time::timeout(Duration::from_secs(5), server.accept())
            .await
            .unwrap()
            .unwrap();
        let accepted = tokio::spawn(async move { incoming.accept().unwrap().await });

        let (conn, cached) = client.connection(&target).await.unwrap();
        assert!(!cached);
        // Both ends of that one handshake are open.
        let server_side = accepted.await.unwrap().unwrap();
        assert!(conn.close_reason().is_none() && server_side.close_reason().is_none());
        // Only that one handshake reached the server.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), server.accept())
                .await
                .is_err(),
            "a second handshake was started"
        );
        let (_, cached) = client.connection(&target).await.unwrap();
        assert!(cached);
    }

    /// A server calls back an agent over the connection the agent dialed, although
    /// the agent's endpoint cannot take a handshake at all; the caller's
    /// certificate on that call is the server's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_is_called_back_over_the_connection_it_dialed() {
        use crate::rpc::{Access, CallContext, Registry};
        use serde_json::json;
        let [s1, a1] = creds([("s1", Role::Server), ("a1", Role::Client)]);
        let who = |ctx: CallContext, _b: Value| async move {
            Ok(json!(ctx.peer.map(|p| p.node_id.as_str().to_string())))
        };

        let server_ep = quinn::Endpoint::server(
            tls::server_config(&s1).unwrap(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .unwrap();
        let server_addr = server_ep.local_addr().unwrap();
        let server = Arc::new(RpcClient::new(
            server_ep.clone(),
            tls::client_config(&s1).unwrap(),
            1 << 16,
        ));
        let server_reg = Arc::new(Registry::new(None).with_stats(server.stats()));
        server_reg.unary("test.who", Access::Member, who);
        tokio::spawn(crate::rpc::serve(
            server_ep,
            server_reg,
            "c1".into(),
            1 << 16,
            Some(server.clone()),
        ));

        // The agent's endpoint has no server configuration: no handshake reaches it.
        let agent_ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        let agent_addr = agent_ep.local_addr().unwrap();
        let agent = RpcClient::new(agent_ep.clone(), tls::client_config(&a1).unwrap(), 1 << 16);
        let agent_reg = Arc::new(Registry::new(None));
        agent_reg.unary("test.who", Access::Server, who);
        agent.serve_dialed(&agent_reg, "c1".into());

        let timeout = Duration::from_secs(5);
        let to_server = Target::new(server_addr, "s1");
        let r = agent
            .call(&to_server, &Request::new("test.who", Value::Null), timeout)
            .await
            .unwrap();
        assert_eq!(r, json!("a1"));
        let (to_agent, who_req) = (
            Target::new(agent_addr, "a1"),
            Request::new("test.who", Value::Null),
        );
        let r = server.call(&to_agent, &who_req, timeout).await.unwrap();
        assert_eq!(r, json!("s1"), "the agent saw the server's certificate");
        assert_eq!(agent_ep.open_connections(), 1);
        assert_eq!(server.stats().dialed(), 0);
        assert_eq!(server.stats().on_peer_connections(), 1);
        assert_eq!(agent.stats().dialed(), 1);

        // Once that connection is gone the server dials, and an agent that takes
        // no handshakes is unreachable.
        agent_ep.close(0u32.into(), b"gone");
        let deadline = std::time::Instant::now() + timeout;
        while server.lent_by("a1").is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "the close never arrived"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let e = server.call(&to_agent, &who_req, timeout).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unreachable, "{e}");
    }
}
