//! Serving RPC on a QUIC endpoint: one bidirectional stream per call.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::client::RpcClient;
use super::error::RpcError;
use super::frame;
use super::handler::{CallContext, Kind, PushSink, Registry};
use super::stats::{RpcStats, Side};
use super::wire::{Reply, Request};
use crate::identity::PeerIdentity;
use crate::tls;

/// Accepts connections on `endpoint` until it is closed. A connection from a peer
/// with a verified identity is lent to `client` for the calls this node makes to
/// that peer (see [`RpcClient`]).
pub async fn serve(
    endpoint: quinn::Endpoint,
    registry: Arc<Registry>,
    cluster_id: String,
    max_frame: usize,
    client: Option<Arc<RpcClient>>,
) {
    while let Some(incoming) = endpoint.accept().await {
        let registry = registry.clone();
        let cluster_id = cluster_id.clone();
        let client = client.clone();
        tokio::spawn(async move {
            let remote = incoming.remote_address();
            let conn = match incoming.await {
                Ok(c) => c,
                Err(e) => {
                    registry.stats().count_handshake_failure();
                    tracing::debug!(%remote, error = %e, "QUIC handshake failed");
                    return;
                }
            };
            let peer = tls::peer_identity(&conn, &cluster_id);
            tracing::debug!(%remote, peer = ?peer, "RPC connection");
            let lent = match (&client, &peer) {
                (Some(c), Some(p)) => {
                    c.adopt(p.node_id.as_str(), &conn);
                    Some((c, p.node_id.as_str().to_string()))
                }
                _ => None,
            };
            serve_connection(conn.clone(), peer, registry, max_frame).await;
            if let Some((c, node)) = lent {
                c.release(&node, &conn);
            }
        });
    }
}

/// Serves the calls a peer makes on one connection, whichever side dialed it,
/// until it closes.
pub(crate) async fn serve_connection(
    conn: quinn::Connection,
    peer: Option<PeerIdentity>,
    registry: Arc<Registry>,
    max_frame: usize,
) {
    let remote = conn.remote_address();
    loop {
        let (send, recv) = match conn.accept_bi().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%remote, error = %e, "RPC connection closed");
                return;
            }
        };
        let ctx = CallContext {
            peer: peer.clone(),
            remote,
            fence: None,
        };
        tokio::spawn(handle_stream(registry.clone(), ctx, send, recv, max_frame));
    }
}

async fn reply(send: &mut quinn::SendStream, r: &Reply, max: usize) {
    reply_bytes(send, r, max).await;
}

/// Sends the final reply of a call and counts its outcome.
async fn finish(send: &mut quinn::SendStream, r: &Reply, max: usize, stats: &RpcStats) {
    let error = match r {
        Reply::Err { error } => Some(error.code),
        _ => None,
    };
    stats.count(Side::Served, error);
    reply_bytes(send, r, max).await;
}

async fn reply_bytes(send: &mut quinn::SendStream, r: &Reply, max: usize) {
    let r = match frame::encode(r, max) {
        Ok(b) => b,
        Err(e) => match frame::encode(&Reply::Err { error: e }, max) {
            Ok(b) => b,
            Err(_) => return,
        },
    };
    if let Err(e) = send.write_all(&r).await {
        tracing::debug!(error = %e, "RPC reply not delivered");
    }
}

async fn handle_stream(
    registry: Arc<Registry>,
    mut ctx: CallContext,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    max: usize,
) {
    let req: Request = match frame::read(&mut recv, max).await {
        Ok(Some(r)) => r,
        Ok(None) => return,
        Err(error) => {
            tracing::warn!(remote = %ctx.remote, peer = ?ctx.peer, %error, "bad RPC request");
            finish(&mut send, &Reply::Err { error }, max, registry.stats()).await;
            let _ = send.finish();
            return;
        }
    };
    ctx.fence = req.fence;
    let span = tracing::debug_span!("rpc", method = %req.method, peer = ?ctx.peer);
    let _enter = span.enter();
    let entry = match registry.authorize(&req.method, &ctx) {
        Ok(e) => e,
        Err(error) => {
            tracing::info!(method = %req.method, remote = %ctx.remote, peer = ?ctx.peer, %error, "RPC refused");
            finish(&mut send, &Reply::Err { error }, max, registry.stats()).await;
            let _ = send.finish();
            return;
        }
    };
    drop(_enter);
    match entry.kind {
        Kind::Unary(h) => {
            let r = match h.call(ctx, req.body).await {
                Ok(body) => Reply::Ok { body },
                Err(error) => Reply::Err { error },
            };
            finish(&mut send, &r, max, registry.stats()).await;
        }
        Kind::Stream(h) => {
            let (tx, mut rx) = mpsc::channel(64);
            let mut task = tokio::spawn(h.open(ctx, req.body, PushSink::new(tx)));
            let end = loop {
                tokio::select! {
                    item = rx.recv() => match item {
                        Some(body) => {
                            let bytes = match frame::encode(&Reply::Item { body }, max) {
                                Ok(b) => b,
                                Err(error) => break Reply::Err { error },
                            };
                            if send.write_all(&bytes).await.is_err() {
                                task.abort();
                                return;
                            }
                        }
                        None => {
                            // Handler dropped its sink; wait for its result.
                            break match (&mut task).await {
                                Ok(Ok(())) => Reply::End,
                                Ok(Err(error)) => Reply::Err { error },
                                Err(e) => Reply::Err { error: RpcError::internal(format!("stream handler failed: {e}")) },
                            };
                        }
                    },
                    res = &mut task => {
                        // Deliver what was pushed before the handler returned.
                        while let Ok(body) = rx.try_recv() {
                            reply(&mut send, &Reply::Item { body }, max).await;
                        }
                        break match res {
                            Ok(Ok(())) => Reply::End,
                            Ok(Err(error)) => Reply::Err { error },
                            Err(e) => Reply::Err { error: RpcError::internal(format!("stream handler failed: {e}")) },
                        };
                    }
                }
            };
            finish(&mut send, &end, max, registry.stats()).await;
        }
    }
    let _ = send.finish();
    // Wait until the peer has the data (or went away) before the stream is dropped.
    let _ = send.stopped().await;
}
