//! The OpenAPI 3.0 document, generated from the route table and the schemas
//! of the response types.

use super::access::RouteAccess;
use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::http::Method;
use axum::routing::get;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::ApiRoute;
use super::error::ErrorBody;

/// The route serving the document.
pub fn route() -> ApiRoute {
    ApiRoute {
        method: Method::GET,
        path: "/v1/openapi.json",
        access: RouteAccess::Open,
        summary: "This OpenAPI document",
        params: &[],
        response: |_| schemars::json_schema!({ "type": "object" }),
        errors: &[],
        handler: get(serve),
    }
}

async fn serve(Extension(doc): Extension<Arc<Value>>) -> Json<Value> {
    Json((*doc).clone())
}

/// `/v1/workloads/{*id}` → `/v1/workloads/{id}`.
pub fn openapi_path(axum_path: &str) -> String {
    axum_path.replace("{*", "{")
}

/// Builds the document for `routes`.
pub fn document(routes: &[ApiRoute]) -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let error_schema = generator.subschema_for::<ErrorBody>();
    let mut paths = Map::new();
    for r in routes {
        let response_schema = (r.response)(&mut generator);
        let params: Vec<Value> = r
            .params
            .iter()
            .map(|p| {
                let mut schema = json!({ "type": "string" });
                if !p.values.is_empty() {
                    schema["enum"] = json!(p.values);
                }
                json!({
                    "name": p.name,
                    "in": p.location,
                    "required": p.required,
                    "description": p.description,
                    "schema": schema,
                })
            })
            .collect();
        let mut responses = Map::new();
        responses.insert(
            "200".into(),
            json!({ "description": "OK", "content": { "application/json": { "schema": response_schema } } }),
        );
        for code in r.errors {
            responses.insert(
                code.to_string(),
                json!({ "$ref": "#/components/responses/Error" }),
            );
        }
        responses.insert(
            "default".into(),
            json!({ "$ref": "#/components/responses/Error" }),
        );
        let op_id = r
            .path
            .trim_start_matches('/')
            .replace(['/', '{', '}', '*', '.'], "_")
            .trim_matches('_')
            .to_string();
        let op = json!({
            "summary": r.summary,
            "operationId": format!("{}_{}", r.method.as_str().to_lowercase(), op_id),
            "parameters": params,
            "responses": responses,
        });
        let entry = paths
            .entry(openapi_path(r.path))
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = entry {
            m.insert(r.method.as_str().to_lowercase(), op);
        }
    }
    let schemas = generator.take_definitions(true);
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "darosd local API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "HTTP/JSON over the agent's unix socket (default /run/daros/agent.sock). Errors are JSON: {\"error\": \"...\", \"status\": N}."
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {
                "Error": {
                    "description": "Error",
                    "content": { "application/json": { "schema": error_schema } }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::routes;

    #[test]
    fn every_route_is_documented_with_resolvable_refs() {
        let routes = routes();
        let doc = document(&routes);
        for r in &routes {
            let p = openapi_path(r.path);
            let op = &doc["paths"][&p][r.method.as_str().to_lowercase()];
            assert!(op.is_object(), "{} {} missing", r.method, p);
            assert!(op["responses"]["200"].is_object());
        }
        // Every $ref points at a component that exists.
        let text = doc.to_string();
        for part in text.split("\"$ref\":\"").skip(1) {
            let target = part.split('"').next().unwrap();
            let pointer = target.trim_start_matches('#');
            assert!(doc.pointer(pointer).is_some(), "dangling {target}");
        }
        let names: Vec<&str> = doc["components"]["schemas"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for n in [
            "NodeSample",
            "Workload",
            "WorkloadList",
            "Capabilities",
            "ErrorBody",
            "Health",
        ] {
            assert!(names.contains(&n), "{n} not in {names:?}");
        }
        assert!(doc["paths"]["/v1/workloads/{id}"]["get"]["parameters"][0]["in"] == "path");
    }
}
