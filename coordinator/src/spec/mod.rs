//! Spec files: Kubernetes-like documents (`apiVersion: daros.io/v1`, `kind`,
//! `metadata`, `spec`) in YAML (several documents separated by `---`) or
//! JSON (one object or an array of them). Kinds: Application, Tenant,
//! Policy, ResourcePool, Node, Config, Secret. Unknown fields are refused with their path;
//! every error names the document, the field path and the reason.

pub mod bounds;
pub mod envelope;
pub mod error;
pub mod plain;
pub mod validate;

use crate::field::FieldError;
use crate::model::application::Application;
use crate::model::node::ExecutionNode;
use crate::model::policy::Policy;
use crate::model::pool::ResourcePool;
use crate::model::tenant::Tenant;
use envelope::{
    API_VERSION, ApplicationDoc, ConfigDoc, NodeDoc, PolicyDoc, PoolDoc, SecretDoc, TenantDoc,
};
pub use error::{SpecError, SpecErrors};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Kinds understood.
pub const KINDS: [&str; 7] = [
    "Application",
    "Tenant",
    "Policy",
    "ResourcePool",
    "Node",
    "Config",
    "Secret",
];

/// A validated document.
// Most documents are Applications, and a handful are parsed per apply: boxing
// the large variant would cost an allocation on the common path for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "object")]
pub enum Document {
    /// An application.
    Application(Application),
    /// A tenant.
    Tenant(Tenant),
    /// A policy.
    Policy(Policy),
    /// A resource pool.
    ResourcePool(ResourcePool),
    /// An execution node.
    Node(ExecutionNode),
    /// A tenant's configuration.
    Config(crate::model::config::Config),
    /// A tenant's secret (values sealed once a server agent took it).
    Secret(crate::model::secret::Secret),
}

impl Document {
    /// The document's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Document::Application(_) => "Application",
            Document::Tenant(_) => "Tenant",
            Document::Policy(_) => "Policy",
            Document::ResourcePool(_) => "ResourcePool",
            Document::Node(_) => "Node",
            Document::Config(_) => "Config",
            Document::Secret(_) => "Secret",
        }
    }

    /// The object's name (`tenant/name` for an application).
    pub fn name(&self) -> String {
        match self {
            Document::Application(a) => a.key().to_string(),
            Document::Tenant(t) => t.name.clone(),
            Document::Policy(p) => p.name.clone(),
            Document::ResourcePool(p) => p.name.clone(),
            Document::Node(n) => n.name.clone(),
            Document::Config(c) => format!("{}/{}", c.tenant, c.name),
            Document::Secret(s) => format!("{}/{}", s.tenant, s.name),
        }
    }
}

/// Input format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Format {
    /// YAML, one or more documents.
    Yaml,
    /// JSON, an object or an array of objects.
    Json,
    /// JSON when the text starts with `{` or `[`, else YAML.
    Auto,
}

/// Parses and validates every document of `text`. Either every document is
/// valid, or the result lists every problem and nothing is returned.
pub fn parse(text: &str, format: Format) -> Result<Vec<Document>, SpecErrors> {
    let json = match format {
        Format::Json => true,
        Format::Yaml => false,
        Format::Auto => {
            let t = text.trim_start();
            t.starts_with('{') || t.starts_with('[')
        }
    };
    bounds::check_size(text)?;
    if json {
        parse_json(text)
    } else {
        bounds::check_yaml_depth(text)?;
        parse_yaml(text)
    }
}

/// Parses a single-document spec that must be an Application.
pub fn parse_application(text: &str, format: Format) -> Result<Application, SpecErrors> {
    let mut docs = parse(text, format)?;
    match (docs.len(), docs.pop()) {
        (1, Some(Document::Application(a))) => Ok(a),
        (n, d) => Err(SpecErrors(vec![SpecError {
            document: 0,
            kind: d.map(|d| d.kind().to_string()),
            name: None,
            path: String::new(),
            reason: format!("expected exactly one Application document, found {n} document(s)"),
            line: None,
        }])),
    }
}

/// Renders an application as a YAML document.
pub fn application_to_yaml(app: &Application) -> String {
    serde_yaml_ng::to_string(&ApplicationDoc::from_model(app))
        .unwrap_or_else(|e| format!("# cannot render: {e}\n"))
}

fn whole_doc_error(document: usize, reason: String, line: Option<usize>) -> SpecError {
    SpecError {
        document,
        kind: None,
        name: None,
        path: String::new(),
        reason,
        line,
    }
}

fn parse_json(text: &str) -> Result<Vec<Document>, SpecErrors> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        SpecErrors(vec![whole_doc_error(
            0,
            format!("invalid JSON: {e}"),
            Some(e.line()),
        )])
    })?;
    let items = match value {
        serde_json::Value::Array(a) => a,
        v => vec![v],
    };
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        // Re-read through the YAML deserializer, which tracks field paths.
        let yaml = match serde_yaml_ng::to_string(&item) {
            Ok(y) => y,
            Err(e) => {
                errors.push(whole_doc_error(i, format!("cannot read: {e}"), None));
                continue;
            }
        };
        let header = Header::of(&item);
        match serde_yaml_ng::Deserializer::from_str(&yaml).next() {
            Some(de) => match typed(i, &header, de, false) {
                Ok(d) => out.push(d),
                Err(mut e) => errors.append(&mut e.0),
            },
            None => errors.push(whole_doc_error(i, "empty document".into(), None)),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(SpecErrors(errors))
    }
}

fn parse_yaml(text: &str) -> Result<Vec<Document>, SpecErrors> {
    // First pass: read each document loosely to learn its kind.
    let mut headers = Vec::new();
    for (i, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        match serde_json::Value::deserialize(de) {
            Ok(v) => headers.push(Header::of(&v)),
            Err(e) => {
                return Err(SpecErrors(vec![whole_doc_error(
                    i,
                    format!("invalid YAML: {}", strip_location(&e)),
                    e.location().map(|l| l.line()),
                )]));
            }
        }
    }
    // Second pass: read each document as its kind, keeping line numbers.
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (i, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let Some(h) = headers.get(i) else { break };
        if h.empty {
            continue;
        }
        match typed(i, h, de, true) {
            Ok(d) => out.push(d),
            Err(mut e) => errors.append(&mut e.0),
        }
    }
    if out.is_empty() && errors.is_empty() {
        errors.push(whole_doc_error(0, "no documents found".into(), None));
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(SpecErrors(errors))
    }
}

/// What is known of a document before reading it as its kind.
struct Header {
    kind: Option<String>,
    name: Option<String>,
    empty: bool,
}

impl Header {
    fn of(v: &serde_json::Value) -> Self {
        let s = |p: &str| v.pointer(p).and_then(|x| x.as_str()).map(str::to_string);
        Self {
            kind: s("/kind"),
            name: s("/metadata/name"),
            empty: v.is_null(),
        }
    }
}

fn typed(
    i: usize,
    h: &Header,
    de: serde_yaml_ng::Deserializer<'_>,
    lines: bool,
) -> Result<Document, SpecErrors> {
    let fail = |path: &str, reason: String| {
        SpecErrors(vec![SpecError {
            document: i,
            kind: h.kind.clone(),
            name: h.name.clone(),
            path: path.into(),
            reason,
            line: None,
        }])
    };
    let Some(kind) = h.kind.as_deref() else {
        return Err(fail(
            "kind",
            format!("missing; expected one of {}", KINDS.join(", ")),
        ));
    };
    let ctx = Ctx { i, h, lines };
    match kind {
        "Application" => {
            let d: ApplicationDoc = ctx.read(de)?;
            ctx.version(&d.api_version)?;
            let app = d.into_model();
            ctx.check(validate::application(&app))?;
            Ok(Document::Application(app))
        }
        "Tenant" => {
            let d: TenantDoc = ctx.read(de)?;
            ctx.version(&d.api_version)?;
            let t = d.into_model();
            ctx.check(validate::tenant(&t))?;
            Ok(Document::Tenant(t))
        }
        "Policy" => {
            let d: PolicyDoc = ctx.read(de)?;
            ctx.version(&d.api_version)?;
            ctx.check(validate::policy(&d.metadata.name, &d.spec))?;
            Ok(Document::Policy(d.into_model()))
        }
        "ResourcePool" => {
            let d: PoolDoc = ctx.read(de)?;
            ctx.version(&d.api_version)?;
            let p = d.into_model();
            ctx.check(validate::pool(&p))?;
            Ok(Document::ResourcePool(p))
        }
        "Node" => {
            let d: NodeDoc = ctx.read(de)?;
            ctx.version(&d.api_version)?;
            let n = d.into_model();
            ctx.check(validate::node(&n))?;
            Ok(Document::Node(n))
        }
        "Config" => {
            let d: ConfigDoc = ctx.read(de)?;
            ctx.version(&d.api_version)?;
            let c = d.into_model();
            ctx.check(validate::config(&c))?;
            Ok(Document::Config(c))
        }
        "Secret" => {
            let d: SecretDoc = ctx.read(de)?;
            ctx.version(&d.api_version)?;
            let s = d.into_model();
            ctx.check(validate::secret(&s))?;
            Ok(Document::Secret(s))
        }
        other => Err(fail(
            "kind",
            format!(
                "unknown kind {other:?}; expected one of {}",
                KINDS.join(", ")
            ),
        )),
    }
}

struct Ctx<'a> {
    i: usize,
    h: &'a Header,
    lines: bool,
}

impl Ctx<'_> {
    fn read<T: DeserializeOwned>(
        &self,
        de: serde_yaml_ng::Deserializer<'_>,
    ) -> Result<T, SpecErrors> {
        T::deserialize(de).map_err(|e| {
            let (path, reason) = split_yaml_error(&e);
            SpecErrors(vec![SpecError {
                document: self.i,
                kind: self.h.kind.clone(),
                name: self.h.name.clone(),
                path,
                reason,
                line: if self.lines {
                    e.location().map(|l| l.line())
                } else {
                    None
                },
            }])
        })
    }

    fn version(&self, v: &str) -> Result<(), SpecErrors> {
        if v == API_VERSION {
            return Ok(());
        }
        self.check(vec![FieldError::new(
            "apiVersion",
            format!("{v:?} is not supported; use {API_VERSION:?}"),
        )])
    }

    fn check(&self, errors: Vec<FieldError>) -> Result<(), SpecErrors> {
        if errors.is_empty() {
            return Ok(());
        }
        Err(SpecErrors::from_fields(
            self.i,
            self.h.kind.as_deref(),
            self.h.name.as_deref(),
            errors,
        ))
    }
}

fn strip_location(e: &serde_yaml_ng::Error) -> String {
    let s = plain::plain_types(&e.to_string());
    match e.location() {
        Some(l) => {
            let suffix = format!(" at line {} column {}", l.line(), l.column());
            s.strip_suffix(&suffix).map(str::to_string).unwrap_or(s)
        }
        None => s,
    }
}

/// Splits a serde_yaml_ng error ("path: message at line L column C") into
/// the field path and the reason; unknown and missing fields get their own
/// name appended to the path.
fn split_yaml_error(e: &serde_yaml_ng::Error) -> (String, String) {
    let msg = strip_location(e);
    let (mut path, reason) = match msg.split_once(": ") {
        Some((p, r)) if !p.is_empty() && !p.contains(char::is_whitespace) => {
            (p.to_string(), r.to_string())
        }
        _ => (String::new(), msg.clone()),
    };
    for prefix in ["unknown field `", "missing field `"] {
        if let Some(rest) = reason.strip_prefix(prefix)
            && let Some((field, _)) = rest.split_once('`')
        {
            path = crate::field::join(&path, field);
        }
    }
    (path, reason)
}

#[cfg(test)]
mod tests;
