//! Who may call each route (issue 15). Every route declares its class
//! ([`RouteAccess`]); one middleware identifies the caller — the uid the
//! kernel gives for the socket (`SO_PEERCRED`), or a bearer token
//! (`Authorization: Bearer daros-tk.<id>.<secret>`) — and runs the route as
//! that caller. The control plane's own routes are checked by the
//! coordinator per command and per read (and audited); the routes that act
//! on this node only are checked here, against the replicated bindings.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use daros_coordinator::access::{Actor, Need, Permission, Source};

use super::AppState;
use super::error::ApiError;
use super::serve::Peer;
use crate::control::plane::with_caller;
use crate::control::state::ControlQuery;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteAccess {
    /// Anyone who can open the socket (health, the API description).
    Open,
    /// The control plane decides, per command and per read (and audits).
    State,
    /// Acts on this node only: needs the permission cluster-wide.
    Node(Permission),
    /// Workload logs: operate in the workload's tenant (an application's
    /// instance, `tenant/app/...`), or cluster-wide for other workloads.
    Logs,
}

/// The prefix of the bearer tokens this agent issues.
pub const TOKEN_PREFIX: &str = "daros-tk";

/// The user name of `uid` in `/etc/passwd`, if it has one.
fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let _pw = f.next()?;
        (f.next()?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

/// SHA-256 of `secret`, hex.
pub fn sha256_hex(secret: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The caller of `req` on `node`: its bearer token if it presents one, else
/// the socket peer's uid.
fn actor_of(req: &Request, node: &str) -> Result<Option<Actor>, ApiError> {
    if let Some(h) = req.headers().get(axum::http::header::AUTHORIZATION) {
        let bad = || ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: format!(
                "Authorization: expected \"Bearer {TOKEN_PREFIX}.<id>.<secret>\" (darosctl access token issue prints one)"
            ),
        };
        let v = h.to_str().map_err(|_| bad())?;
        let token = v.strip_prefix("Bearer ").ok_or_else(bad)?.trim();
        let mut parts = token.split('.');
        let (Some(TOKEN_PREFIX), Some(id), Some(secret), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        return Ok(Some(Actor {
            principal: format!("token:{id}"),
            source: Source::Token {
                node: node.to_string(),
                id: id.to_string(),
                sha256: sha256_hex(secret),
            },
        }));
    }
    Ok(req
        .extensions()
        .get::<Peer>()
        // root needs no name (it is `root`): no passwd read on its requests.
        .map(|p| {
            let name = (p.uid != 0).then(|| user_name(p.uid)).flatten();
            Actor::socket(node, p.uid, name.as_deref())
        }))
}

/// The tenant a log selector (`tenant/app/workload[/replica]`) names.
fn logs_tenant(path: &str) -> Option<String> {
    let id = path
        .strip_prefix("/v1/logs/")
        .or_else(|| path.strip_prefix("/v1/workloads/")?.strip_suffix("/logs"))?;
    let parts: Vec<&str> = id.split('/').collect();
    (parts.len() >= 3
        && !id.starts_with("managed/")
        && !id.starts_with("k8s/")
        && !id.starts_with("systemd/"))
    .then(|| parts[0].to_string())
}

/// The middleware of a route of class `access`.
pub async fn guard(
    State((s, access)): State<(AppState, RouteAccess)>,
    req: Request,
    next: Next,
) -> Response {
    if access == RouteAccess::Open {
        return next.run(req).await;
    }
    let node = s.control.as_ref().map_or_else(
        || s.latest.get().node.node.clone(),
        |p| p.node_name().to_string(),
    );
    let actor = match actor_of(&req, &node) {
        Ok(Some(a)) => a,
        Ok(None) => {
            return ApiError {
                status: StatusCode::FORBIDDEN,
                message: "the caller's credentials are unknown (not a unix socket peer) and no token was presented".into(),
            }
            .into_response();
        }
        Err(e) => return e.into_response(),
    };
    let path = req.uri().path();
    // A workload's logs are also served under /v1/workloads/{id}/logs.
    let logs = access == RouteAccess::Logs
        || (path.starts_with("/v1/workloads/") && path.ends_with("/logs"));
    let need = match access {
        _ if logs => Some(match logs_tenant(path) {
            Some(t) => Need::tenant(Permission::Operate, &t),
            None => Need::global(Permission::Operate),
        }),
        RouteAccess::Node(p) => Some(Need::global(p)),
        RouteAccess::Logs => None,
        RouteAccess::State | RouteAccess::Open => None,
    };
    let what = format!("{} {}", req.method(), req.uri().path());
    // Writes that act on this node only are audited here (the control
    // plane's own writes are audited with their change).
    let record = matches!(access, RouteAccess::Node(_)) && req.method() != axum::http::Method::GET;
    if let Some(need) = need
        && let Err(e) = authorize(&s, &actor, need, &what).await
    {
        if record {
            audit_node_write(
                &s,
                &actor,
                &what,
                e.status.as_u16(),
                Some(e.message.clone()),
            )
            .await;
        }
        return e.into_response();
    }
    let resp = with_caller(actor.clone(), next.run(req)).await;
    if record {
        audit_node_write(&s, &actor, &what, resp.status().as_u16(), None).await;
    }
    resp
}

/// Records a write served on this node in the replicated audit trail (a
/// failure to record is logged: the request was already served).
async fn audit_node_write(
    s: &AppState,
    actor: &Actor,
    what: &str,
    status: u16,
    reason: Option<String>,
) {
    let Some(p) = &s.control else {
        return;
    };
    let cmd = daros_coordinator::Command::Record {
        verb: what.to_string(),
        status,
        reason,
    };
    if let Err(e) = with_caller(actor.clone(), p.write(cmd)).await {
        tracing::warn!(request = %what, error = %e, "audit record of a node write not committed");
    }
}

/// Checks a node route: against the replicated bindings when the control
/// plane runs; without it only root may change anything (anyone who can
/// open the socket may read).
async fn authorize(s: &AppState, actor: &Actor, need: Need, what: &str) -> Result<(), ApiError> {
    // root is a Platform Admin (the node's root owns the node anyway): no read needed.
    if actor.principal == "root" && matches!(actor.source, Source::Socket { .. }) {
        return Ok(());
    }
    match &s.control {
        Some(p) => {
            with_caller(
                actor.clone(),
                p.query(ControlQuery::Authorize {
                    need,
                    what: what.to_string(),
                }),
            )
            .await?;
            Ok(())
        }
        None => match need {
            Need::Permission {
                permission: Permission::Read,
                ..
            } => Ok(()),
            _ => Err(ApiError {
                status: StatusCode::FORBIDDEN,
                message: format!(
                    "forbidden: {actor} may not {what}: without the control plane only root may change this node"
                ),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_selectors_name_their_tenant() {
        assert_eq!(
            logs_tenant("/v1/logs/shop-team/shop/web"),
            Some("shop-team".into())
        );
        assert_eq!(
            logs_tenant("/v1/logs/managed/shop-team.shop.web-v1.0"),
            None
        );
        assert_eq!(
            logs_tenant("/v1/workloads/t-b/app/web/logs"),
            Some("t-b".into())
        );
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
