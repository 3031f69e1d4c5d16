//! A chitchat [`Transport`] over UDP whose datagrams are sealed with the cluster gossip key.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context;
use chitchat::transport::{Socket, Transport};
use chitchat::{ChitchatMessage, Deserializable, Serializable};

use super::codec;
use super::seal::{Keyring, MAX_DATAGRAM, Reassembly, SealStats};

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Sealed UDP transport. Chitchat's trait is `async_trait`-shaped and returns `anyhow`; that is
/// the only place this library uses `anyhow`.
#[derive(Clone)]
pub struct SealedUdpTransport {
    keyring: Keyring,
    stats: Arc<SealStats>,
}

impl SealedUdpTransport {
    /// A transport sealing with `keyring` and counting into `stats`.
    pub fn new(keyring: Keyring, stats: Arc<SealStats>) -> Self {
        Self { keyring, stats }
    }
}

impl Transport for SealedUdpTransport {
    fn open<'life0, 'async_trait>(
        &'life0 self,
        listen_addr: SocketAddr,
    ) -> BoxFut<'async_trait, anyhow::Result<Box<dyn Socket>>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let socket = tokio::net::UdpSocket::bind(listen_addr)
                .await
                .with_context(|| format!("failed to bind {listen_addr}/udp for gossip"))?;
            let s: Box<dyn Socket> = Box::new(SealedSocket {
                socket,
                keyring: self.keyring.clone(),
                stats: self.stats.clone(),
                buf: vec![0u8; MAX_DATAGRAM].into_boxed_slice(),
                reassembly: Reassembly::default(),
            });
            Ok(s)
        })
    }
}

struct SealedSocket {
    socket: tokio::net::UdpSocket,
    keyring: Keyring,
    stats: Arc<SealStats>,
    buf: Box<[u8]>,
    reassembly: Reassembly,
}

impl Socket for SealedSocket {
    fn send<'life0, 'async_trait>(
        &'life0 mut self,
        to: SocketAddr,
        msg: ChitchatMessage,
    ) -> BoxFut<'async_trait, anyhow::Result<()>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let mut plain = Vec::with_capacity(msg.serialized_len());
            msg.serialize(&mut plain);
            let datagrams = match self.keyring.seal(&codec::encode(&plain)) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(error = %e, to = %to, "gossip message not sent");
                    return Ok(());
                }
            };
            for dg in datagrams {
                match self.socket.send_to(&dg, to).await {
                    Ok(n) => {
                        self.stats.datagrams_sent.fetch_add(1, Ordering::Relaxed);
                        self.stats.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    // Unreachable peers are normal in gossip (a dead node, a partition).
                    Err(e) => tracing::debug!(error = %e, to = %to, "gossip send failed"),
                }
            }
            Ok(())
        })
    }

    fn recv<'life0, 'async_trait>(
        &'life0 mut self,
    ) -> BoxFut<'async_trait, anyhow::Result<(SocketAddr, ChitchatMessage)>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            loop {
                let (len, from) = match self.socket.recv_from(&mut self.buf).await {
                    Ok(r) => r,
                    Err(e) if passing(&e) => continue,
                    Err(e) => return Err(e).context("gossip socket receive failed"),
                };
                self.stats
                    .datagrams_received
                    .fetch_add(1, Ordering::Relaxed);
                self.stats
                    .bytes_received
                    .fetch_add(len as u64, Ordering::Relaxed);
                let fragment = match self.keyring.open(&self.buf[..len]) {
                    Ok(f) => f,
                    Err(e) => {
                        self.stats.count_reject(&e);
                        tracing::debug!(from = %from, error = %e, "gossip datagram refused");
                        continue;
                    }
                };
                let Some(payload) = self.reassembly.push(from, fragment) else {
                    continue;
                };
                self.stats.opened.fetch_add(1, Ordering::Relaxed);
                let plain = match codec::decode(&payload) {
                    Ok(p) => p,
                    Err(e) => {
                        self.stats.rejected_decode.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(from = %from, error = %e, "sealed gossip payload refused");
                        continue;
                    }
                };
                let mut cursor: &[u8] = &plain;
                match ChitchatMessage::deserialize(&mut cursor) {
                    Ok(msg) => return Ok((from, msg)),
                    Err(e) => {
                        self.stats.rejected_decode.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(from = %from, error = %e, "sealed gossip message does not decode");
                    }
                }
            }
        })
    }
}

/// A receive error that is not the socket's failure: on Linux, ICMP errors of earlier sends
/// (a peer gone) surface on the next receive, and a momentary lack of memory passes.
pub(crate) fn passing(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::OutOfMemory
    )
}
