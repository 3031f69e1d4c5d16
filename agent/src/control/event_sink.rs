//! Shipping the events feed (issue 16): while this agent is the established
//! leader, lifecycle events and decisions are appended to a file (one
//! CloudEvent per line, fsync'd) and/or POSTed to an HTTP collector in
//! CloudEvents batch mode. Each sink keeps its cursor in the data directory
//! (written atomically after the batch was accepted), so a restart resumes
//! where it stopped. Delivery is at least once: after a leader change the new
//! leader resumes from its own cursor, and a consumer deduplicates on the
//! CloudEvents `id`.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType::Counter;
use serde_json::Value;

use super::cloud_events::{FeedCursor, cloud_events, page};
use super::plane::ControlPlane;
use crate::metrics::family;

/// Items of each kind per batch.
const BATCH: usize = 500;
/// How often the feed is read when idle.
const EVERY: Duration = Duration::from_secs(1);
/// The longest wait after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a collector may take to accept a batch.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP collector.
#[derive(Clone)]
pub struct HttpSink {
    uri: hyper::Uri,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSink").field("uri", &self.uri).finish()
    }
}

impl HttpSink {
    /// Checks `url` is `http://host:port/path`.
    pub fn parse(url: &str) -> Result<hyper::Uri, String> {
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| format!("not a URL ({e}): {url:?}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!(
                "must start with http:// (ship to a local collector such as Vector or Fluent Bit), got {url:?}"
            ));
        }
        if uri.authority().is_none_or(|a| a.port().is_none()) {
            return Err(format!("must name a host and a port, got {url:?}"));
        }
        Ok(uri)
    }

    /// A sink posting to `url`.
    pub fn new(url: &str) -> Result<Self, String> {
        Ok(Self {
            uri: Self::parse(url)?,
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    async fn post(&self, items: &[Value]) -> Result<(), String> {
        let body = serde_json::to_vec(items).map_err(|e| e.to_string())?;
        let req = hyper::Request::post(self.uri.clone())
            .header("content-type", "application/cloudevents-batch+json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let resp = tokio::time::timeout(HTTP_TIMEOUT, self.client.request(req))
            .await
            .map_err(|_| format!("{} did not answer within {HTTP_TIMEOUT:?}", self.uri))?
            .map_err(|e| format!("{}: {e}", self.uri))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(format!("{} answered {}", self.uri, resp.status()))
        }
    }
}

/// Where events go.
#[derive(Debug, Clone)]
pub enum Sink {
    /// Appended to a file, one JSON per line.
    File(PathBuf),
    /// POSTed to a collector.
    Http(HttpSink),
}

impl Sink {
    /// `file` or `http` (the metric label and the cursor file's name).
    pub fn name(&self) -> &'static str {
        match self {
            Sink::File(_) => "file",
            Sink::Http(_) => "http",
        }
    }

    async fn ship(&self, items: &[Value]) -> Result<(), String> {
        match self {
            Sink::File(path) => {
                let mut buf = Vec::new();
                for i in items {
                    buf.extend(serde_json::to_vec(i).map_err(|e| e.to_string())?);
                    buf.push(b'\n');
                }
                let p = path.clone();
                tokio::task::spawn_blocking(move || append(&p, &buf))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("{}: {e}", path.display()))
            }
            Sink::Http(h) => h.post(items).await,
        }
    }
}

fn append(path: &Path, buf: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(buf)?;
    f.sync_data()
}

fn cursor_path(data_dir: &Path, sink: &Sink) -> PathBuf {
    data_dir.join(format!("events-{}.cursor", sink.name()))
}

fn load_cursor(path: &Path) -> FeedCursor {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Writes the cursor so that a crash leaves the old one or the new one.
fn store_cursor(path: &Path, c: FeedCursor) -> std::io::Result<()> {
    let tmp = path.with_extension("cursor.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec(&c).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Counters of the sinks.
#[derive(Debug, Default)]
pub struct SinkStats {
    exported: [AtomicU64; 2],
    failures: [AtomicU64; 2],
}

fn slot(sink: &Sink) -> usize {
    match sink {
        Sink::File(_) => 0,
        Sink::Http(_) => 1,
    }
}

/// Encodes [`SinkStats`].
#[derive(Debug)]
pub struct SinkCollector(pub Arc<SinkStats>, pub Vec<&'static str>);

impl Collector for SinkCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let rows = |a: &[AtomicU64; 2]| {
            self.1
                .iter()
                .map(|n| {
                    let i = usize::from(*n == "http");
                    (
                        vec![("sink", (*n).to_string())],
                        a[i].load(Ordering::Relaxed) as f64,
                    )
                })
                .collect()
        };
        family(
            &mut enc,
            "daros_events_exported",
            "CloudEvents this agent shipped to a sink (file, http) as leader.",
            Counter,
            rows(&self.0.exported),
        )?;
        family(
            &mut enc,
            "daros_events_export_failures",
            "Batches a sink did not accept (retried with backoff; nothing is skipped).",
            Counter,
            rows(&self.0.failures),
        )
    }
}

/// Ships the feed to `sink` while this agent is the established leader.
pub async fn run(plane: Arc<ControlPlane>, sink: Sink, stats: Arc<SinkStats>) {
    let path = cursor_path(plane.data_dir(), &sink);
    let mut cursor = load_cursor(&path);
    let mut backoff = EVERY;
    tracing::info!(
        sink = sink.name(),
        after_event = cursor.event,
        after_decision = cursor.decision,
        "events sink on (ships while this agent leads)"
    );
    loop {
        tokio::time::sleep(backoff).await;
        let leading = plane
            .mesh()
            .consensus_status()
            .is_some_and(|s| s.established && s.leader.as_ref() == Some(&s.node_id));
        if !leading {
            backoff = EVERY;
            continue;
        }
        let mut next = cursor;
        let items = match page(&plane, cursor, BATCH).await {
            Ok(f) => cloud_events(&f, &mut next),
            Err(e) => {
                tracing::debug!(error = %e, "events sink: reading the feed");
                continue;
            }
        };
        if items.is_empty() {
            backoff = EVERY;
            continue;
        }
        match sink.ship(&items).await {
            Ok(()) => {
                stats.exported[slot(&sink)].fetch_add(items.len() as u64, Ordering::Relaxed);
                if let Err(e) = store_cursor(&path, next) {
                    tracing::warn!(path = %path.display(), error = %e, "events sink: cursor not saved (a restart ships this batch again)");
                }
                cursor = next;
                // More may wait: go again at once.
                backoff = Duration::ZERO;
            }
            Err(e) => {
                stats.failures[slot(&sink)].fetch_add(1, Ordering::Relaxed);
                backoff = (backoff * 2).clamp(EVERY, MAX_BACKOFF);
                tracing::warn!(sink = sink.name(), error = %e, retry_in = ?backoff, "events sink: batch not accepted");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_cursors_survive() {
        assert!(HttpSink::parse("http://127.0.0.1:8686/daros").is_ok());
        assert!(
            HttpSink::parse("https://x:443/")
                .unwrap_err()
                .contains("http://")
        );
        assert!(HttpSink::parse("http://x/").unwrap_err().contains("port"));
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("events-file.cursor");
        assert_eq!(load_cursor(&p), FeedCursor::default());
        let c = FeedCursor {
            event: 7,
            decision: 3,
        };
        store_cursor(&p, c).unwrap();
        assert_eq!(load_cursor(&p), c);
    }
}
