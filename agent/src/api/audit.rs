//! The audit trail and who may do what (issue 15): `GET /v1/audit` (paged;
//! `lines=true` for JSON lines), `GET /v1/access` (role bindings, tokens
//! without their hashes), `POST /v1/access/bindings` and `DELETE
//! /v1/access/bindings/{name}`, `POST /v1/access/tokens` (the secret is
//! shown once, only its hash is kept) and `DELETE /v1/access/tokens/{id}`
//! (revokes). No route edits or deletes audit records.

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use daros_coordinator::Command;
use daros_coordinator::access::{ApiToken, RoleBinding};
use daros_coordinator::state::audit::{AuditFilter, AuditPage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::access::{RouteAccess, TOKEN_PREFIX, sha256_hex};
use super::apps::{WriteResult, any, plane, write};
use super::error::{ApiError, ApiJson};
use super::{ApiRoute, AppState, Param};
use crate::control::state::ControlQuery;

const AUDIT_PARAMS: &[Param] = &[
    Param {
        name: "after",
        location: "query",
        required: false,
        description: "Only records with a sequence number above this",
        values: &[],
    },
    Param {
        name: "tenant",
        location: "query",
        required: false,
        description: "Only records touching this tenant",
        values: &[],
    },
    Param {
        name: "principal",
        location: "query",
        required: false,
        description: "Only records of this principal (root, user:alice, token:<id> resolves to its principal)",
        values: &[],
    },
    Param {
        name: "since",
        location: "query",
        required: false,
        description: "Only records at or after this time (milliseconds since the epoch)",
        values: &[],
    },
    Param {
        name: "limit",
        location: "query",
        required: false,
        description: "At most this many (default 500, at most 5000)",
        values: &[],
    },
    Param {
        name: "lines",
        location: "query",
        required: false,
        description: "Answer JSON lines (one record per line) instead of a page object",
        values: &["true", "false"],
    },
];

const NAME: &[Param] = &[Param {
    name: "name",
    location: "path",
    required: true,
    description: "Binding name",
    values: &[],
}];

const ID: &[Param] = &[Param {
    name: "id",
    location: "path",
    required: true,
    description: "Token id",
    values: &[],
}];

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![
        ApiRoute {
            method: Method::GET,
            path: "/v1/audit",
            access: RouteAccess::State,
            summary: "The audit trail: every caller's write, applied, refused or forbidden (Platform Admins: all; Tenant Admins: their tenants')",
            params: AUDIT_PARAMS,
            response: any,
            errors: &[400, 403, 503],
            handler: get(audit),
        },
        ApiRoute {
            method: Method::GET,
            path: "/v1/access",
            access: RouteAccess::State,
            summary: "Role bindings and tokens (ids, principals, expiry; never secrets or hashes)",
            params: &[],
            response: any,
            errors: &[403, 503],
            handler: get(access),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/access/bindings",
            access: RouteAccess::State,
            summary: "Bind a role: {name, principal, role, tenant?} (a tenant's binding needs its Tenant Admin, a cluster-wide one a Platform Admin)",
            params: &[],
            response: any,
            errors: &[400, 403, 503],
            handler: post(bind),
        },
        ApiRoute {
            method: Method::DELETE,
            path: "/v1/access/bindings/{name}",
            access: RouteAccess::State,
            summary: "Remove a role binding",
            params: NAME,
            response: any,
            errors: &[403, 404, 503],
            handler: delete(unbind),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/access/tokens",
            access: RouteAccess::State,
            summary: "Issue a bearer token: {principal, expiresInSeconds?}; the answer holds the secret, shown this once",
            params: &[],
            response: any,
            errors: &[400, 403, 503],
            handler: post(issue),
        },
        ApiRoute {
            method: Method::DELETE,
            path: "/v1/access/tokens/{id}",
            access: RouteAccess::State,
            summary: "Revoke a bearer token",
            params: ID,
            response: any,
            errors: &[403, 404, 503],
            handler: delete(revoke),
        },
    ]
}

fn parse_filter(q: Option<&str>) -> Result<(AuditFilter, bool), ApiError> {
    let mut f = AuditFilter::default();
    let mut lines = false;
    for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v);
        let num = |v: &str| {
            v.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("query {k}: expected a whole number, got {v:?}"))
            })
        };
        match k {
            "after" => f.after = num(&v)?,
            "since" => f.since = Some(daros_coordinator::Timestamp(num(&v)?)),
            "limit" => f.limit = Some(usize::try_from(num(&v)?).unwrap_or(usize::MAX)),
            "tenant" => f.tenant = Some(v),
            "principal" => f.principal = Some(v),
            "lines" => lines = matches!(v.as_str(), "true" | "1" | ""),
            other => {
                return Err(ApiError::bad_request(format!(
                    "query {other:?}: unknown parameter (after, tenant, principal, since, limit, lines)"
                )));
            }
        }
    }
    Ok((f, lines))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn audit(State(s): State<AppState>, RawQuery(q): RawQuery) -> Result<Response, ApiError> {
    let (filter, lines) = parse_filter(q.as_deref())?;
    let v = plane(&s)?.query(ControlQuery::Audit { filter }).await?;
    if !lines {
        return Ok(Json(v).into_response());
    }
    let page: AuditPage = serde_json::from_value(v).map_err(|e| ApiError {
        status: axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("audit page: {e}"),
    })?;
    let mut body = String::new();
    for r in &page.records {
        body.push_str(&serde_json::to_string(r).unwrap_or_default());
        body.push('\n');
    }
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

async fn access(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(plane(&s)?.query(ControlQuery::Access).await?))
}

async fn bind(
    State(s): State<AppState>,
    ApiJson(binding): ApiJson<RoleBinding>,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(&s)?;
    write(&p, Command::Bind { binding }).await
}

async fn unbind(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(&s)?;
    write(&p, Command::Unbind { name }).await
}

/// `POST /v1/access/tokens`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IssueBody {
    /// What the token acts as (`user:ci`).
    pub principal: String,
    /// Lifetime; none: until revoked.
    #[serde(default)]
    pub expires_in_seconds: Option<u64>,
}

/// A token just issued: the only time its secret is shown.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Issued {
    /// `daros-tk.<id>.<secret>`: pass it as `Authorization: Bearer ...`
    /// (`darosctl --token`, `DAROS_API_TOKEN`).
    pub token: String,
    /// Id (to list and revoke it).
    pub id: String,
    /// Principal.
    pub principal: String,
    /// Expiry (ms since the epoch).
    pub expires: Option<u64>,
}

fn random_hex(bytes: usize) -> Result<String, ApiError> {
    use ring::rand::SecureRandom;
    let mut b = vec![0u8; bytes];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| ApiError {
            status: axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            message: "no randomness for a token".into(),
        })?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

async fn issue(
    State(s): State<AppState>,
    ApiJson(b): ApiJson<IssueBody>,
) -> Result<Json<Issued>, ApiError> {
    let p = plane(&s)?;
    let id = random_hex(6)?;
    let secret = random_hex(32)?;
    let now = crate::control::plane::now();
    let expires = b
        .expires_in_seconds
        .map(|s| daros_coordinator::Timestamp(now.0.saturating_add(s.saturating_mul(1000))));
    p.write(Command::IssueToken {
        token: ApiToken {
            id: id.clone(),
            principal: b.principal.clone(),
            sha256: sha256_hex(&secret),
            issued: now,
            expires,
            revoked: None,
        },
    })
    .await?;
    Ok(Json(Issued {
        token: format!("{TOKEN_PREFIX}.{id}.{secret}"),
        id,
        principal: b.principal,
        expires: expires.map(|t| t.0),
    }))
}

async fn revoke(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<WriteResult>, ApiError> {
    let p = plane(&s)?;
    write(&p, Command::RevokeToken { id }).await
}
