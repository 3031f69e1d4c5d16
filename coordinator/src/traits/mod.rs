//! Traits (seed 002 "特征"): declarative add-ons on a workload, each applied
//! by a registered [`TraitHandler`] rather than by branches in the core. A
//! handler declares its schema (checked at apply, errors with field paths),
//! the runtimes whose adapters honour it (any other is refused at
//! admission, never silently dropped) and the objects it reads (so that a
//! Config or Secret in use cannot be deleted from under it).
//!
//! Adding a trait is one file here implementing [`TraitHandler`] and one
//! line in [`REGISTRY`].

pub mod env;
pub mod init;
pub mod sidecar;
pub mod storage;

use crate::field::FieldError;
use crate::model::runtime::RuntimeType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A trait attached to a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trait {
    /// The registered handler's name (`env`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Its settings, checked against the handler's schema.
    #[serde(default)]
    pub properties: serde_json::Value,
}

/// A tenant object a trait reads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ObjectRef {
    /// A Config, and the key read (`None`: all of it).
    Config {
        /// Config name.
        name: String,
        /// Key read.
        key: Option<String>,
    },
    /// A Secret, and the key read (`None`: all of it).
    Secret {
        /// Secret name.
        name: String,
        /// Key read.
        key: Option<String>,
    },
}

impl ObjectRef {
    /// `Config app-settings` / `Secret db key password`.
    pub fn describe(&self) -> String {
        let (kind, name, key) = match self {
            ObjectRef::Config { name, key } => ("Config", name, key),
            ObjectRef::Secret { name, key } => ("Secret", name, key),
        };
        match key {
            Some(k) => format!("{kind} {name:?} key {k:?}"),
            None => format!("{kind} {name:?}"),
        }
    }
}

/// What a trait type must provide.
pub trait TraitHandler: Sync {
    /// Its `type` in specs.
    fn name(&self) -> &'static str;
    /// Runtime types whose adapters honour it.
    fn runtimes(&self) -> &'static [RuntimeType];
    /// Checks `properties`; each error's path starts with `path`.
    fn validate(&self, properties: &serde_json::Value, path: &str) -> Vec<FieldError>;
    /// The tenant objects it reads, each with the path of the field naming
    /// it (call after `validate` passed); none by default.
    fn references(&self, properties: &serde_json::Value, path: &str) -> Vec<(String, ObjectRef)> {
        let _ = (properties, path);
        Vec::new()
    }
}

/// Reads a trait's `properties` as `T`; an error names the field under
/// `path` (`...properties.vars.DB.key`).
pub(crate) fn read_properties<T: serde::de::DeserializeOwned>(
    properties: &serde_json::Value,
    path: &str,
) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(properties).map_err(|e| {
        let inner = e.path().to_string();
        let at = if inner == "." {
            path.to_string()
        } else {
            format!("{path}.{inner}")
        };
        FieldError::new(at, crate::spec::plain::plain_types(&e.inner().to_string()))
    })
}

/// The properties of the first trait of `kind` among `traits`, read as `T`
/// (`None` when there is none, or it does not read: apply refused it).
pub(crate) fn properties_of<T: serde::de::DeserializeOwned>(
    traits: &[Trait],
    kind: &str,
) -> Option<T> {
    traits
        .iter()
        .find(|t| t.kind == kind)
        .and_then(|t| read_properties(&t.properties, "").ok())
}

/// Every registered trait type.
pub static REGISTRY: &[&dyn TraitHandler] = &[
    &env::EnvTrait,
    &storage::StorageTrait,
    &sidecar::SidecarTrait,
    &init::InitTrait,
];

/// The handler of `kind`.
pub fn handler(kind: &str) -> Option<&'static dyn TraitHandler> {
    REGISTRY.iter().copied().find(|h| h.name() == kind)
}

/// Checks the traits of a workload running on `runtime`: known type, at
/// most one of each, supported by the runtime's adapter, valid properties.
pub fn validate(traits: &[Trait], runtime: RuntimeType, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, t) in traits.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let Some(h) = handler(&t.kind) else {
            let known: Vec<&str> = REGISTRY.iter().map(|h| h.name()).collect();
            errors.push(FieldError::new(
                format!("{at}.type"),
                format!(
                    "unknown trait {:?}; registered: {}",
                    t.kind,
                    known.join(", ")
                ),
            ));
            continue;
        };
        if !seen.insert(h.name()) {
            errors.push(FieldError::new(
                format!("{at}.type"),
                format!(
                    "trait {:?} appears twice; merge its properties into one",
                    t.kind
                ),
            ));
        }
        if !h.runtimes().contains(&runtime) {
            let ok: Vec<String> = h.runtimes().iter().map(|r| format!("{r:?}")).collect();
            errors.push(FieldError::new(
                format!("{at}.type"),
                format!(
                    "trait {:?} is not supported by the {runtime:?} runtime's adapter (supported: {})",
                    t.kind,
                    ok.join(", ")
                ),
            ));
        }
        errors.extend(h.validate(&t.properties, &format!("{at}.properties")));
    }
    errors
}

/// The tenant objects the traits read, with the path naming each.
pub fn references(traits: &[Trait], path: &str) -> Vec<(String, ObjectRef)> {
    traits
        .iter()
        .enumerate()
        .filter_map(|(i, t)| handler(&t.kind).map(|h| (i, t, h)))
        .flat_map(|(i, t, h)| h.references(&t.properties, &format!("{path}[{i}].properties")))
        .collect()
}
