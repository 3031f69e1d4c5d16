//! Calling RPC methods on other nodes over cached QUIC connections.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Mutex;

use super::error::{ErrorCode, RpcError};
use super::frame;
use super::stats::{RpcStats, Side};
use super::wire::{Reply, Request};

/// An RPC client: one cached connection per (address, node id).
pub struct RpcClient {
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    conns: Mutex<HashMap<(SocketAddr, String), quinn::Connection>>,
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

    async fn connection(&self, t: &Target) -> Result<(quinn::Connection, bool), RpcError> {
        let key = (t.addr, t.node.clone());
        let mut conns = self.conns.lock().await;
        if let Some(c) = conns.get(&key) {
            if c.close_reason().is_none() {
                return Ok((c.clone(), true));
            }
            conns.remove(&key);
        }
        drop(conns);
        let connecting = self
            .endpoint
            .connect_with(self.config.clone(), t.addr, &t.node)
            .map_err(|e| {
                RpcError::new(
                    ErrorCode::Unreachable,
                    format!("connecting to {} at {}: {e}", t.node, t.addr),
                )
            })?;
        let conn = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                return Err(RpcError::new(
                    ErrorCode::Unreachable,
                    format!("connecting to {} at {}: {e}", t.node, t.addr),
                ));
            }
            Err(_) => {
                return Err(RpcError::new(
                    ErrorCode::Unreachable,
                    format!(
                        "connecting to {} at {}: no answer within {:?}",
                        t.node, t.addr, self.connect_timeout
                    ),
                ));
            }
        };
        self.conns.lock().await.insert(key, conn.clone());
        Ok((conn, false))
    }

    async fn forget(&self, t: &Target) {
        self.conns.lock().await.remove(&(t.addr, t.node.clone()));
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
