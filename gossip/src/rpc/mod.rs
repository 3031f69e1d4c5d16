//! RPC over QUIC with mutual TLS: length-prefixed versioned frames with a hard size limit,
//! request/response and server-push streams, every call authorized by the caller's certificate.

mod client;
mod error;
pub mod frame;
mod handler;
mod server;
mod stats;
mod wire;

pub use client::{CONNECT_TIMEOUT, RpcClient, Subscription, Target};
pub use error::{ErrorCode, RpcError};
pub use handler::{
    Access, BoxFuture, CallContext, PushSink, Registry, StreamHandler, UnaryHandler,
};
pub use server::serve;
pub use stats::{RpcStats, Side};
pub use wire::{Reply, Request};
