//! Registered job types (seed 002 Q3–Q6): what a workflow step of a given
//! `type` runs. A [`JobType`] declares its parameter schema (checked at
//! apply, errors with field paths), the most a step of its type may ask
//! ([`JobLimits`]), and turns a step's `properties` into a [`JobRun`]: a
//! process the runtime runs on a node like an init job — in its own cgroup,
//! with the workload confinement, killed at its timeout — never code inside
//! the coordinator.
//!
//! A type is one file implementing [`JobType`] and one [`register`] call at
//! start-up (the built-ins are registered here). The handler runs inside the
//! coordinator only to check and translate: a handler that panics is caught
//! and fails the step (or refuses the apply) with the reason, the
//! coordinator goes on. A slow one is stopped at the edge: darosd's API
//! checks documents (which calls every handler of their steps with the same
//! properties the coordinator will) within a time budget and refuses them,
//! naming the step ([`in_handler`]), when a handler does not answer in time
//! — so the coordinator, which has no clock, only ever calls handlers that
//! answered. Every server of a cluster must register the same types (the
//! coordinator is replicated).

pub mod command;
pub mod gpu;

use crate::field::FieldError;
use crate::model::resources::{Bytes, MilliCpu, ResourceProfile};
use crate::model::time::DurationMs;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// What one run of a job step is.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRun {
    /// Program and its arguments.
    pub argv: Vec<String>,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// Resources while it runs (GPUs included: checked against the nodes
    /// at admission and when the step starts).
    pub resources: ResourceProfile,
}

/// The most a step of a type may ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLimits {
    /// Longest run (also the default timeout).
    pub max_timeout: DurationMs,
    /// Most GPUs.
    pub max_gpus: u32,
    /// Most CPU.
    pub max_cpu: MilliCpu,
    /// Most memory.
    pub max_memory: Bytes,
}

impl Default for JobLimits {
    fn default() -> Self {
        Self {
            max_timeout: DurationMs::from_secs(3600),
            max_gpus: 0,
            max_cpu: MilliCpu(2000),
            max_memory: Bytes(4 << 30),
        }
    }
}

/// What a job type provides.
pub trait JobType: Send + Sync {
    /// Its `type` in workflow steps.
    fn name(&self) -> &'static str;
    /// One line for `darosctl` and errors.
    fn summary(&self) -> &'static str;
    /// Checks `properties`; each error's path starts with `path`.
    fn validate(&self, properties: &serde_json::Value, path: &str) -> Vec<FieldError>;
    /// The run of a step whose properties passed `validate`.
    fn run(&self, properties: &serde_json::Value) -> Result<JobRun, String>;
    /// Its limits.
    fn limits(&self) -> JobLimits {
        JobLimits::default()
    }
}

/// Step types the workflow engine itself handles (not job types).
pub const BUILT_IN_STEPS: &[&str] = &["deploy", "approval", "group"];

/// Registering failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// The name is taken.
    #[error("job type {0:?} is already registered")]
    Taken(String),
    /// Not a usable name.
    #[error("job type name {0:?}: expected a DNS label that is not a built-in step type")]
    BadName(String),
}

type Registry = BTreeMap<&'static str, Arc<dyn JobType>>;

fn registry() -> &'static RwLock<Registry> {
    static R: std::sync::OnceLock<RwLock<Registry>> = std::sync::OnceLock::new();
    R.get_or_init(|| {
        let mut m: Registry = BTreeMap::new();
        let built_in: [Arc<dyn JobType>; 2] =
            [Arc::new(command::CommandJob), Arc::new(gpu::GpuJob)];
        for t in built_in {
            m.insert(t.name(), t);
        }
        RwLock::new(m)
    })
}

/// Adds a job type.
pub fn register(t: Arc<dyn JobType>) -> Result<(), RegisterError> {
    let name = t.name();
    if crate::model::names::check_name("", name).is_some() || BUILT_IN_STEPS.contains(&name) {
        return Err(RegisterError::BadName(name.to_string()));
    }
    let mut r = registry().write().unwrap_or_else(|p| p.into_inner());
    if r.contains_key(name) {
        return Err(RegisterError::Taken(name.to_string()));
    }
    r.insert(name, t);
    Ok(())
}

/// The type named `name`.
pub fn get(name: &str) -> Option<Arc<dyn JobType>> {
    registry()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(name)
        .cloned()
}

/// Names of every registered type.
pub fn names() -> Vec<&'static str> {
    registry()
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .copied()
        .collect()
}

/// Which handler each thread is inside now (`path: job type "x"`): what
/// darosd's API names when checking documents outlives its budget.
fn in_handlers()
-> &'static std::sync::Mutex<std::collections::HashMap<std::thread::ThreadId, String>> {
    static M: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<std::thread::ThreadId, String>>,
    > = std::sync::OnceLock::new();
    M.get_or_init(Default::default)
}

/// The handler thread `t` is inside, if any (`spec.workflow.steps[0]: job
/// type "x"`).
pub fn in_handler(t: std::thread::ThreadId) -> Option<String> {
    in_handlers()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&t)
        .cloned()
}

/// Runs `f` on the handler of type `name` for the step at `at`, a panic
/// turned into an error naming the type.
pub(crate) fn guarded<T>(name: &str, at: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    let me = std::thread::current().id();
    in_handlers()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(me, format!("{at}: job type {name:?}"));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    in_handlers()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&me);
    r.map_err(|p| {
        let why = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        format!("job type {name:?} failed inside its handler (panicked: {why})")
    })
}

/// Checks a step of type `t` (its properties and the type's limits on
/// `timeout`); `path` is the step's path.
pub fn validate_step(
    t: &dyn JobType,
    properties: &serde_json::Value,
    timeout: Option<DurationMs>,
    path: &str,
) -> Vec<FieldError> {
    let props = format!("{path}.properties");
    let mut errs = match guarded(t.name(), path, || t.validate(properties, &props)) {
        Ok(e) => e,
        Err(why) => return vec![FieldError::new(format!("{path}.type"), why)],
    };
    let limits = t.limits();
    if let Some(to) = timeout
        && to > limits.max_timeout
    {
        errs.push(FieldError::new(
            format!("{path}.timeout"),
            format!(
                "{to} is longer than job type {:?} allows ({})",
                t.name(),
                limits.max_timeout
            ),
        ));
    }
    if errs.is_empty() {
        match guarded(t.name(), path, || t.run(properties)) {
            Ok(Ok(run)) => {
                let r = &run.resources;
                let gpus = r.gpu.request.map_or(0, |g| g.0);
                let cpu = r.cpu.request.max(r.cpu.limit).unwrap_or_default();
                let memory = r.memory.request.max(r.memory.limit).unwrap_or_default();
                let over = [
                    (gpus > limits.max_gpus)
                        .then(|| format!("{gpus} GPU(s) (at most {})", limits.max_gpus)),
                    (cpu > limits.max_cpu)
                        .then(|| format!("cpu {cpu} (at most {})", limits.max_cpu)),
                    (memory > limits.max_memory)
                        .then(|| format!("memory {memory} (at most {})", limits.max_memory)),
                ];
                let over: Vec<String> = over.into_iter().flatten().collect();
                if !over.is_empty() {
                    errs.push(FieldError::new(
                        props,
                        format!(
                            "asks for {}: more than job type {:?} allows",
                            over.join(", "),
                            t.name()
                        ),
                    ));
                }
            }
            Ok(Err(why)) => errs.push(FieldError::new(props, why)),
            Err(why) => errs.push(FieldError::new(format!("{path}.type"), why)),
        }
    }
    errs
}
