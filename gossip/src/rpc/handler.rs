//! Handler registry: each method declares who may call it and whether it is fenced.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use serde_json::Value;
use tokio::sync::mpsc;

use super::error::{ErrorCode, RpcError};
use crate::fence::{FenceError, FenceGuard, FenceToken};
use crate::identity::{PeerIdentity, Role};

/// Boxed future returned by handlers.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a handler knows about the call.
#[derive(Clone, Debug)]
pub struct CallContext {
    /// Verified identity of the caller (None: no client certificate).
    pub peer: Option<PeerIdentity>,
    /// Caller's address.
    pub remote: SocketAddr,
    /// Fence token (checked already for fenced methods).
    pub fence: Option<FenceToken>,
}

impl CallContext {
    /// The verified caller; errors when anonymous.
    pub fn require_peer(&self) -> Result<&PeerIdentity, RpcError> {
        self.peer.as_ref().ok_or_else(|| {
            RpcError::new(
                ErrorCode::Unauthenticated,
                "a client certificate is required",
            )
        })
    }
}

/// Who may call a method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone who can reach the port (only the join, which checks a token itself).
    Anonymous,
    /// Any node with a certificate of this cluster.
    Member,
    /// Server agents only.
    Server,
}

/// A request/response handler.
pub trait UnaryHandler: Send + Sync + 'static {
    /// Handles one call.
    fn call(&self, ctx: CallContext, body: Value) -> BoxFuture<Result<Value, RpcError>>;
}

impl<F, Fut> UnaryHandler for F
where
    F: Fn(CallContext, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, RpcError>> + Send + 'static,
{
    fn call(&self, ctx: CallContext, body: Value) -> BoxFuture<Result<Value, RpcError>> {
        Box::pin(self(ctx, body))
    }
}

/// Where a subscription handler pushes items.
pub struct PushSink {
    tx: mpsc::Sender<Value>,
}

impl PushSink {
    pub(crate) fn new(tx: mpsc::Sender<Value>) -> Self {
        Self { tx }
    }

    /// Pushes one item; fails once the subscriber is gone.
    pub async fn send(&self, item: Value) -> Result<(), RpcError> {
        self.tx
            .send(item)
            .await
            .map_err(|_| RpcError::transport("subscriber went away"))
    }

    /// True once the subscriber is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// A server-push handler: runs until it returns; each `sink.send` reaches the subscriber.
pub trait StreamHandler: Send + Sync + 'static {
    /// Serves one subscription.
    fn open(
        &self,
        ctx: CallContext,
        body: Value,
        sink: PushSink,
    ) -> BoxFuture<Result<(), RpcError>>;
}

impl<F, Fut> StreamHandler for F
where
    F: Fn(CallContext, Value, PushSink) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), RpcError>> + Send + 'static,
{
    fn open(
        &self,
        ctx: CallContext,
        body: Value,
        sink: PushSink,
    ) -> BoxFuture<Result<(), RpcError>> {
        Box::pin(self(ctx, body, sink))
    }
}

#[derive(Clone)]
pub(crate) enum Kind {
    Unary(Arc<dyn UnaryHandler>),
    Stream(Arc<dyn StreamHandler>),
}

#[derive(Clone)]
pub(crate) struct Entry {
    pub access: Access,
    pub fenced: bool,
    pub kind: Kind,
}

/// The methods a node serves.
pub struct Registry {
    methods: RwLock<HashMap<String, Entry>>,
    fence: Option<Arc<FenceGuard>>,
    stats: Arc<super::RpcStats>,
}

impl Registry {
    /// An empty registry; fenced methods need `fence`.
    pub fn new(fence: Option<Arc<FenceGuard>>) -> Self {
        Self {
            methods: RwLock::default(),
            fence,
            stats: Arc::default(),
        }
    }

    /// Counts into `stats` (shared with the node's client).
    #[must_use]
    pub fn with_stats(mut self, stats: Arc<super::RpcStats>) -> Self {
        self.stats = stats;
        self
    }

    /// The counters calls served are counted into.
    pub fn stats(&self) -> &super::RpcStats {
        &self.stats
    }

    fn insert(&self, method: &str, e: Entry) {
        let replaced = self
            .methods
            .write()
            .map(|mut m| m.insert(method.to_string(), e).is_some())
            .unwrap_or(false);
        if replaced {
            tracing::warn!(method, "RPC handler replaced");
        }
    }

    /// Registers a request/response method.
    pub fn unary(&self, method: &str, access: Access, h: impl UnaryHandler) {
        self.insert(
            method,
            Entry {
                access,
                fenced: false,
                kind: Kind::Unary(Arc::new(h)),
            },
        );
    }

    /// Registers a fenced command: callable by server agents only, with a fence token whose term
    /// is not older than the highest this node accepted.
    pub fn command(&self, method: &str, h: impl UnaryHandler) {
        self.insert(
            method,
            Entry {
                access: Access::Server,
                fenced: true,
                kind: Kind::Unary(Arc::new(h)),
            },
        );
    }

    /// Registers a server-push method.
    pub fn stream(&self, method: &str, access: Access, h: impl StreamHandler) {
        self.insert(
            method,
            Entry {
                access,
                fenced: false,
                kind: Kind::Stream(Arc::new(h)),
            },
        );
    }

    /// Looks up `method` and checks the caller may call it.
    pub(crate) fn authorize(&self, method: &str, ctx: &CallContext) -> Result<Entry, RpcError> {
        let entry = self
            .methods
            .read()
            .ok()
            .and_then(|m| m.get(method).cloned())
            .ok_or_else(|| {
                // Anonymous callers learn nothing about which methods exist.
                if ctx.peer.is_none() {
                    RpcError::new(
                        ErrorCode::Unauthenticated,
                        "a client certificate is required",
                    )
                } else {
                    RpcError::new(ErrorCode::UnknownMethod, format!("no method {method:?}"))
                }
            })?;
        match entry.access {
            Access::Anonymous => {}
            Access::Member => {
                ctx.require_peer()?;
            }
            Access::Server => {
                let p = ctx.require_peer()?;
                if p.role != Role::Server {
                    return Err(RpcError::new(
                        ErrorCode::Forbidden,
                        format!("{method} is for server agents; caller is {p}"),
                    ));
                }
            }
        }
        if entry.fenced {
            let token = ctx.fence.ok_or_else(|| {
                RpcError::new(
                    ErrorCode::FenceRequired,
                    format!("{method} is a coordinator command and needs a (term, index) fence"),
                )
            })?;
            let guard = self
                .fence
                .as_ref()
                .ok_or_else(|| RpcError::internal("fenced method without a fence guard"))?;
            guard.admit(token).map_err(|e| match e {
                FenceError::Stale { highest, .. } => {
                    RpcError::new(ErrorCode::StaleTerm, e.to_string()).with_detail(
                        serde_json::json!({
                            "presented": token,
                            "highest_term": highest,
                        }),
                    )
                }
                FenceError::Store(m) => RpcError::internal(m),
            })?;
        }
        Ok(entry)
    }
}
