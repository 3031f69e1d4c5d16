//! `/v1/capabilities`: what the host offers; `/v1/iocost/calibrate`: the
//! data directory's disk measured again for iocost's model.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::access::RouteAccess;
use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{get, post};
use daros_coordinator::access::Permission;

use super::error::ApiError;
use super::{ApiRoute, AppState};
use crate::daemon::iocost::{IoCost, RecalibrateError};
use crate::model::Capabilities;
use crate::model::caps::IoCostCaps;

/// iocost as darosd runs it: the setup (locked while a calibration runs) and
/// what `caps` shows of it (updated after one).
#[derive(Debug)]
pub struct IoCostState {
    /// The setup.
    pub io_cost: Mutex<IoCost>,
    /// Its capabilities now.
    pub caps: RwLock<IoCostCaps>,
}

impl IoCostState {
    /// Shares `io_cost`.
    pub fn new(io_cost: IoCost) -> Arc<Self> {
        Arc::new(IoCostState {
            caps: RwLock::new(io_cost.caps.clone()),
            io_cost: Mutex::new(io_cost),
        })
    }

    /// Puts every disk back as it was before the agent (at shutdown).
    pub fn restore(&self) {
        self.io_cost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .restore();
    }
}

/// Routes of this module.
pub fn routes() -> Vec<ApiRoute> {
    vec![
        ApiRoute {
            method: Method::GET,
            path: "/v1/capabilities",
            access: RouteAccess::Node(Permission::Read),
            summary: "Host capabilities: cgroup mode and controllers, PSI, eBPF/BTF, bpffs, GPU, iocost, kernel",
            params: &[],
            response: |g| g.subschema_for::<Capabilities>(),
            errors: &[],
            handler: get(caps),
        },
        ApiRoute {
            method: Method::POST,
            path: "/v1/iocost/calibrate",
            access: RouteAccess::Node(Permission::PlatformAdmin),
            summary: "Measure the data directory's disk again (a bounded O_DIRECT run of a few seconds) and put the new iocost model in force; IO floor capacity taken from the model follows. On failure the previous model stays",
            params: &[],
            response: |g| g.subschema_for::<IoCostCaps>(),
            errors: &[409, 500, 503],
            handler: post(calibrate),
        },
    ]
}

async fn caps(State(s): State<AppState>) -> Json<Capabilities> {
    let mut c = (*s.caps).clone();
    if let Some(io) = &s.io_cost {
        let now = io
            .caps
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if now != c.io_cost {
            let line = |c: &IoCostCaps| IoCost::summary_of(c);
            let (old, new) = (line(&c.io_cost), line(&now));
            for l in c.summary.iter_mut().filter(|l| **l == old) {
                l.clone_from(&new);
            }
            c.io_cost = now;
        }
    }
    Json(c)
}

async fn calibrate(State(s): State<AppState>) -> Result<Json<IoCostCaps>, ApiError> {
    let unavailable = |message: String| ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message,
    };
    let io = s
        .io_cost
        .clone()
        .ok_or_else(|| unavailable("iocost is not set up by this agent".into()))?;
    let qos = s.qos.clone();
    let done = tokio::task::spawn_blocking(move || {
        let Ok(mut g) = io.io_cost.try_lock() else {
            return Err(ApiError {
                status: StatusCode::CONFLICT,
                message: "a calibration is already running".into(),
            });
        };
        let (read, write) = g.recalibrate().map_err(|e| ApiError {
            status: match e {
                RecalibrateError::NothingToMeasure(_) => StatusCode::SERVICE_UNAVAILABLE,
                RecalibrateError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
            },
            message: e.to_string(),
        })?;
        if let Some(q) = &qos {
            q.set_io_capacity(read, write);
        }
        let caps = g.caps.clone();
        *io.caps.write().unwrap_or_else(PoisonError::into_inner) = caps.clone();
        Ok(caps)
    })
    .await
    .map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("the calibration task failed: {e}"),
    })??;
    Ok(Json(done))
}
