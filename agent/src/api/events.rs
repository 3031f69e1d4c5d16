//! The events feed (issue 16): lifecycle events and decision records as
//! CloudEvents 1.0 JSON, `GET /v1/events[?afterEvent=N][&afterDecision=M]
//! [&follow=true]` — without `follow` a JSON array of what the state holds
//! after the cursors; with it, newline-delimited JSON streamed as new ones are
//! committed, so that any log pipeline can ship them. A consumer resumes from
//! the last `sequence` of each kind it saw.

use super::access::RouteAccess;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::apps::{any, plane};
use super::error::ApiError;
use super::{ApiRoute, AppState, Param};
use crate::control::cloud_events::{self, FeedCursor, cloud_events};
use crate::control::state::Feed;

/// Items per kind and page.
const PAGE: usize = 500;
/// How often a follower asks for new items.
const POLL: std::time::Duration = std::time::Duration::from_millis(500);

const PARAMS: &[Param] = &[
    Param {
        name: "afterEvent",
        location: "query",
        required: false,
        description: "Only lifecycle events with a sequence number above this",
        values: &[],
    },
    Param {
        name: "afterDecision",
        location: "query",
        required: false,
        description: "Only decisions with an id above this",
        values: &[],
    },
    Param {
        name: "follow",
        location: "query",
        required: false,
        description: "Stream new ones as newline-delimited JSON",
        values: &["true", "false"],
    },
];

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![ApiRoute {
        method: Method::GET,
        path: "/v1/events",
        access: RouteAccess::State,
        summary: "Lifecycle events and decisions as CloudEvents 1.0 JSON (io.daros.lifecycle.v1, io.daros.decision.v1); follow=true streams NDJSON",
        params: PARAMS,
        response: any,
        errors: &[400, 503],
        handler: get(route),
    }]
}

#[derive(Debug, Default, Clone, Copy)]
struct Cursor {
    at: FeedCursor,
    follow: bool,
}

fn parse(q: Option<&str>) -> Result<Cursor, ApiError> {
    let mut c = Cursor::default();
    for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, "true"));
        let num = |v: &str| {
            v.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("query {k}: expected a whole number, got {v:?}"))
            })
        };
        match k {
            "afterEvent" => c.at.event = num(v)?,
            "afterDecision" => c.at.decision = num(v)?,
            "follow" => {
                c.follow = match v {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "query follow: expected true or false, got {v:?}"
                        )));
                    }
                }
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "query {other:?}: unknown parameter (afterEvent, afterDecision, follow)"
                )));
            }
        }
    }
    Ok(c)
}

async fn page(s: &AppState, c: Cursor) -> Result<Feed, ApiError> {
    let p = plane(s)?;
    Ok(cloud_events::page(&p, c.at, PAGE).await?)
}

async fn route(State(s): State<AppState>, RawQuery(q): RawQuery) -> Response {
    match serve(s, q.as_deref()).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn serve(s: AppState, q: Option<&str>) -> Result<Response, ApiError> {
    let mut c = parse(q)?;
    let first = page(&s, c).await?;
    let items = cloud_events(&first, &mut c.at);
    if !c.follow {
        return Ok(axum::Json(items).into_response());
    }
    // The stream outlives the request's task: it reads as the same caller.
    let who = crate::control::plane::caller();
    // A full page means more is waiting: the next is read at once (a consumer
    // catching up is not held to one page per poll).
    let full = first.events.len() >= PAGE || first.decisions.len() >= PAGE;
    let stream = futures::stream::unfold(
        (s, c, Some(items), full),
        move |(s, mut c, pending, mut more)| {
            let who = who.clone();
            async move {
                let items = match pending {
                    Some(items) => items,
                    None => loop {
                        if !more {
                            tokio::time::sleep(POLL).await;
                        }
                        let read = match &who {
                            Some(a) => {
                                crate::control::plane::with_caller(a.clone(), page(&s, c)).await
                            }
                            None => page(&s, c).await,
                        };
                        // A failed read (no leader for a moment) is retried.
                        more = false;
                        if let Ok(f) = read {
                            let items = cloud_events(&f, &mut c.at);
                            if !items.is_empty() {
                                more = f.events.len() >= PAGE || f.decisions.len() >= PAGE;
                                break items;
                            }
                        }
                    },
                };
                let mut buf = Vec::new();
                for i in &items {
                    buf.extend(serde_json::to_vec(i).unwrap_or_default());
                    buf.push(b'\n');
                }
                Some((
                    Ok::<_, std::io::Error>(bytes::Bytes::from(buf)),
                    (s, c, None, more),
                ))
            }
        },
    );
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(stream),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_errors_name_the_key() {
        assert!(parse(Some("afterEvent=3&follow=true")).unwrap().follow);
        let e = parse(Some("afterEvent=x")).unwrap_err();
        assert!(e.message.contains("afterEvent"), "{}", e.message);
        let e = parse(Some("since=1")).unwrap_err();
        assert!(e.message.contains("unknown parameter"), "{}", e.message);
        assert_eq!(cloud_events::rfc3339(0), "1970-01-01T00:00:00.000Z");
    }
}
