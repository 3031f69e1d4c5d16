//! Lifecycle events and decision records as CloudEvents 1.0 JSON (issue 16):
//! one encoding for the `/v1/events` feed and the file/HTTP sinks.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::ControlError;
use super::plane::ControlPlane;
use super::state::{ControlQuery, Feed};

/// Where a consumer of the feed stands: the last lifecycle event sequence
/// and the last decision id it has.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FeedCursor {
    /// Last lifecycle event sequence seen.
    pub event: u64,
    /// Last decision id seen.
    pub decision: u64,
}

/// RFC 3339 with milliseconds, UTC.
pub fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// The CloudEvents of a feed page, events then decisions; advances `c`.
pub fn cloud_events(feed: &Feed, c: &mut FeedCursor) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some((e, d)) = feed.scanned {
        c.event = c.event.max(e);
        c.decision = c.decision.max(d);
    }
    for e in &feed.events {
        c.event = c.event.max(e.seq);
        out.push(json!({
            "specversion": "1.0",
            "id": format!("event-{}", e.seq),
            "source": "/daros/coordinator",
            "type": "io.daros.lifecycle.v1",
            "subject": e.app.to_string(),
            "time": rfc3339(e.time.0),
            "sequence": e.seq,
            "datacontenttype": "application/json",
            "data": e,
        }));
    }
    for d in &feed.decisions {
        c.decision = c.decision.max(d.id.0);
        out.push(json!({
            "specversion": "1.0",
            "id": d.id.to_string(),
            "source": "/daros/coordinator",
            "type": "io.daros.decision.v1",
            "subject": d.app.to_string(),
            "time": rfc3339(d.time.0),
            "sequence": d.id.0,
            "datacontenttype": "application/json",
            "data": d,
        }));
    }
    out
}

/// One page (at most `limit` of each kind) after `c`, read through raft.
pub async fn page(plane: &ControlPlane, c: FeedCursor, limit: usize) -> Result<Feed, ControlError> {
    let v = plane
        .query(ControlQuery::Feed {
            after_event: c.event,
            after_decision: c.decision,
            limit,
        })
        .await?;
    serde_json::from_value(v).map_err(|e| ControlError::Unavailable(format!("events feed: {e}")))
}
