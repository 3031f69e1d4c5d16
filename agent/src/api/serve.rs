//! Serving a router over HTTP/1 with the limits a hostile or broken client
//! meets: a deadline for the request head (a half-sent request used to hold
//! its connection for ever), a bounded head, and hyper's own bodiless
//! parse-error answers given the API's JSON error shape
//! ([`super::parse_errors`]). The body's deadline and size are a middleware
//! ([`super::limits`]) so that they hold for every route.

use std::time::Duration;

use axum::Router;
use axum::serve::Listener;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;
use tracing::debug;

use super::limits::MAX_HEAD_BYTES;
use super::parse_errors::JsonParseErrors;

/// Who is at the other end of a connection, as the kernel says
/// (`SO_PEERCRED` on the unix socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// A connection that may know its peer's credentials.
pub trait PeerCredentials {
    /// The peer, when the transport tells.
    fn peer(&self) -> Option<Peer>;
}

impl PeerCredentials for tokio::net::UnixStream {
    fn peer(&self) -> Option<Peer> {
        self.peer_cred().ok().map(|c| Peer {
            uid: c.uid(),
            gid: c.gid(),
        })
    }
}

impl PeerCredentials for tokio::net::TcpStream {
    fn peer(&self) -> Option<Peer> {
        None
    }
}

/// Serves `app` on `listener` until `stop` turns true, then lets the open
/// connections finish their current request (the caller bounds the wait).
/// A connection that has not sent a whole request head within
/// `header_timeout` (`api.header_timeout`) is closed.
pub async fn serve<L>(
    mut listener: L,
    app: Router,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) where
    L: Listener,
    L::Io: PeerCredentials,
{
    let graceful = GracefulShutdown::new();
    loop {
        let (io, _addr) = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|s| *s) => break,
        };
        // Every request of the connection carries its peer (the access check).
        let peer = io.peer();
        let app = tower::ServiceExt::map_request(
            app.clone(),
            move |mut req: axum::http::Request<hyper::body::Incoming>| {
                if let Some(p) = peer {
                    req.extensions_mut().insert(p);
                }
                req
            },
        );
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .max_buf_size(MAX_HEAD_BYTES)
            .max_header_size(MAX_HEAD_BYTES)
            .serve_connection(
                TokioIo::new(JsonParseErrors::new(io)),
                TowerToHyperService::new(app),
            );
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                debug!(error = %e, "API connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
