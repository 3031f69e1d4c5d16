//! The `env` trait: environment variables from literals, Config keys and
//! Secret keys (`vars`), or from whole Configs and Secrets (`from`, in
//! order: a later one wins; `vars` win over `from`; both win over a
//! `runtimeSpec.env` of the same name).
//!
//! ```yaml
//! traits:
//! - type: env
//!   properties:
//!     from: [{config: settings}, {secret: db}]
//!     vars:
//!       LOG_LEVEL: debug
//!       DB_PASSWORD: {secret: db, key: password}
//! ```

use super::{ObjectRef, TraitHandler};
use crate::field::FieldError;
use crate::model::config::Config;
use crate::model::runtime::RuntimeType;
use crate::model::secret::{Sealed, Secret, SecretText, SecretValue};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `env` trait's handler.
pub struct EnvTrait;

/// Longest variable name.
const MAX_NAME: usize = 256;
/// Prefix the agent sets itself (`DAROS_TENANT`, ...).
const RESERVED_PREFIX: &str = "DAROS_";

/// `properties` of the `env` trait.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvProperties {
    /// Whole objects, every key a variable.
    #[serde(default)]
    pub from: Vec<EnvFrom>,
    /// Single variables.
    #[serde(default)]
    pub vars: BTreeMap<String, EnvSource>,
}

/// A whole object taken as variables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EnvFrom {
    /// A Config of the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// A Secret of the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// Where one variable's value comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EnvSource {
    /// The value itself.
    Literal(String),
    /// A key of a Config or a Secret.
    Key(EnvKeyRef),
}

/// A key of a Config or of a Secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvKeyRef {
    /// A Config of the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// A Secret of the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// The key.
    pub key: String,
}

/// One resolved variable of a launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    /// Variable name.
    pub name: String,
    /// Its value.
    pub value: EnvValue,
}

/// A variable's value on its way to the runtime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum EnvValue {
    /// A literal or a Config value.
    Text {
        /// The value.
        text: String,
    },
    /// A Secret value, still sealed (the coordinator's form).
    Sealed {
        /// `secret/key`, for messages.
        from: String,
        /// The sealed value.
        sealed: Sealed,
    },
    /// A Secret value opened by the leader for the node that runs it.
    Opened {
        /// `secret/key`, for messages.
        from: String,
        /// The value.
        value: SecretText,
    },
    /// Named object or key absent (refused at apply; kept in case state
    /// from before the check says otherwise): the instance must not start.
    Missing {
        /// What is absent.
        what: String,
    },
}

/// A well-formed variable name, or why not.
pub fn check_var_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "{name:?} is not a variable name: letters, digits and '_', not starting with a digit"
        ));
    }
    if name.len() > MAX_NAME {
        return Err(format!("longer than {MAX_NAME} characters"));
    }
    if name.starts_with(RESERVED_PREFIX) {
        return Err(format!(
            "the {RESERVED_PREFIX} prefix is reserved for the agent"
        ));
    }
    Ok(())
}

fn parse(properties: &serde_json::Value, path: &str) -> Result<EnvProperties, FieldError> {
    if properties.is_null() {
        return Ok(EnvProperties::default());
    }
    super::read_properties(properties, path)
}

fn one_of(config: &Option<String>, secret: &Option<String>, at: &str) -> Option<FieldError> {
    match (config, secret) {
        (Some(_), None) | (None, Some(_)) => None,
        _ => Some(FieldError::new(
            at,
            "name exactly one of `config` or `secret`",
        )),
    }
}

impl TraitHandler for EnvTrait {
    fn name(&self) -> &'static str {
        "env"
    }

    // The Kubernetes adapter would need the values as Kubernetes Secrets in
    // the pod's namespace; until it creates them it refuses the trait.
    fn runtimes(&self) -> &'static [RuntimeType] {
        &[RuntimeType::Process]
    }

    fn validate(&self, properties: &serde_json::Value, path: &str) -> Vec<FieldError> {
        let p = match parse(properties, path) {
            Ok(p) => p,
            Err(e) => return vec![e],
        };
        let mut errors = Vec::new();
        if p.from.is_empty() && p.vars.is_empty() {
            errors.push(FieldError::new(path, "set `from`, `vars` or both"));
        }
        for (i, f) in p.from.iter().enumerate() {
            let at = format!("{path}.from[{i}]");
            errors.extend(one_of(&f.config, &f.secret, &at));
            for name in f.config.iter().chain(&f.secret) {
                errors.extend(crate::model::names::check_name(&at, name));
            }
        }
        for (name, src) in &p.vars {
            let at = format!("{path}.vars.{name}");
            if let Err(reason) = check_var_name(name) {
                errors.push(FieldError::new(&at, reason));
            }
            if let EnvSource::Key(k) = src {
                errors.extend(one_of(&k.config, &k.secret, &at));
                if let Err(reason) = check_key(&k.key) {
                    errors.push(FieldError::new(format!("{at}.key"), reason));
                }
            }
        }
        errors
    }

    fn references(&self, properties: &serde_json::Value, path: &str) -> Vec<(String, ObjectRef)> {
        let Ok(p) = parse(properties, path) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let obj = |config: &Option<String>, secret: &Option<String>, key: Option<String>| match (
            config, secret,
        ) {
            (Some(name), _) => Some(ObjectRef::Config {
                name: name.clone(),
                key,
            }),
            (None, Some(name)) => Some(ObjectRef::Secret {
                name: name.clone(),
                key,
            }),
            (None, None) => None,
        };
        for (i, f) in p.from.iter().enumerate() {
            out.extend(obj(&f.config, &f.secret, None).map(|r| (format!("{path}.from[{i}]"), r)));
        }
        for (name, src) in &p.vars {
            if let EnvSource::Key(k) = src {
                out.extend(
                    obj(&k.config, &k.secret, Some(k.key.clone()))
                        .map(|r| (format!("{path}.vars.{name}"), r)),
                );
            }
        }
        out
    }
}

/// A well-formed Config or Secret key (the same rule as variable names, so
/// that `from` can use every key as a variable).
pub fn check_key(key: &str) -> Result<(), String> {
    check_var_name(key)
}

/// The tenant's objects a resolution reads.
pub struct Objects<'a> {
    /// Configs by name.
    pub configs: &'a dyn Fn(&str) -> Option<&'a Config>,
    /// Secrets by name.
    pub secrets: &'a dyn Fn(&str) -> Option<&'a Secret>,
}

/// The variables the `env` trait among `traits` gives, in name order.
pub fn resolve(traits: &[super::Trait], objects: &Objects<'_>) -> Vec<EnvVar> {
    let Some(p) = super::properties_of::<EnvProperties>(traits, EnvTrait.name()) else {
        return Vec::new();
    };
    let mut vars: BTreeMap<String, EnvValue> = BTreeMap::new();
    let config_value = |name: &str, key: &str| match (objects.configs)(name) {
        None => EnvValue::Missing {
            what: format!("Config {name:?}"),
        },
        Some(c) => match c.data.get(key) {
            Some(v) => EnvValue::Text { text: v.clone() },
            None => EnvValue::Missing {
                what: format!("Config {name:?} key {key:?}"),
            },
        },
    };
    let secret_value = |name: &str, key: &str| match (objects.secrets)(name) {
        None => EnvValue::Missing {
            what: format!("Secret {name:?}"),
        },
        Some(s) => match s.data.get(key) {
            Some(SecretValue::Sealed(sealed)) => EnvValue::Sealed {
                from: format!("{name}/{key}"),
                sealed: sealed.clone(),
            },
            Some(SecretValue::Plain(_)) => EnvValue::Missing {
                what: format!("Secret {name:?} key {key:?} (not sealed)"),
            },
            None => EnvValue::Missing {
                what: format!("Secret {name:?} key {key:?}"),
            },
        },
    };
    for f in &p.from {
        if let Some(name) = &f.config {
            match (objects.configs)(name) {
                Some(c) => {
                    for k in c.data.keys() {
                        vars.insert(k.clone(), config_value(name, k));
                    }
                }
                None => {
                    vars.insert(
                        format!("<{name}>"),
                        EnvValue::Missing {
                            what: format!("Config {name:?}"),
                        },
                    );
                }
            }
        }
        if let Some(name) = &f.secret {
            match (objects.secrets)(name) {
                Some(s) => {
                    for k in s.data.keys() {
                        vars.insert(k.clone(), secret_value(name, k));
                    }
                }
                None => {
                    vars.insert(
                        format!("<{name}>"),
                        EnvValue::Missing {
                            what: format!("Secret {name:?}"),
                        },
                    );
                }
            }
        }
    }
    for (name, src) in &p.vars {
        let v = match src {
            EnvSource::Literal(text) => EnvValue::Text { text: text.clone() },
            EnvSource::Key(k) => match (&k.config, &k.secret) {
                (Some(c), _) => config_value(c, &k.key),
                (None, Some(s)) => secret_value(s, &k.key),
                (None, None) => EnvValue::Missing {
                    what: format!("{name}: neither config nor secret"),
                },
            },
        };
        vars.insert(name.clone(), v);
    }
    vars.into_iter()
        .map(|(name, value)| EnvVar { name, value })
        .collect()
}
