//! The REST API's OpenAPI 3.1 document, served at `GET /openapi.json` (public, like the health
//! checks).
//!
//! Every route is registered through [`utoipa_axum`]'s router together with its handler's
//! `#[utoipa::path]` operation (see `crate::routes`), and request and response bodies are the
//! handlers' own types deriving `ToSchema`, so the document can't drift from what is served.
//! What the handlers don't declare themselves is added here, once: the bearer API key scheme,
//! and the answers the front middleware gives for any protected route (401 without a valid key,
//! 403 for a key without the route's scope, 429 over the key's rate limit).

use utoipa::openapi::path::{Operation, ParameterIn, PathItem};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{Content, OpenApi as OpenApiDoc, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::{AppState, ErrorResponse, SharedState};

/// The document's frame: info, tags, the shared schemas and the modifiers. Paths come from the
/// router.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "hbidx",
        description = "Secondary indexes for Apache HBase: look rows up by phone, PRC idcard or \
                       name, write through, and operate the indexer.\n\nEvery route but the \
                       health checks, `/dashboard` and this document needs an API key, sent as \
                       `Authorization: Bearer <key>`; each operation lists the scope it needs \
                       (`lookup`, `write` or `admin`; an empty list means any valid key). Errors \
                       share one shape, `ErrorResponse`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(ErrorResponse)),
    modifiers(&Security),
    tags(
        (name = "lookups", description = "Rows by indexed field values, or by key"),
        (name = "writes", description = "Write-through to the row store"),
        (name = "tables", description = "Tables, their fields and rowkeys"),
        (name = "jobs", description = "Reindex and verify jobs"),
        (name = "ops", description = "Indexer status, metrics, dashboard data"),
        (name = "health", description = "Probes and this document"),
    )
)]
pub struct ApiDoc;

/// The document of the routes `crate::routes` registers, with the defaults of a server's
/// limits and no tables.
pub fn document() -> OpenApiDoc {
    let (_, mut document) =
        crate::routes(crate::Limits::default().max_body_bytes).split_for_parts();
    add_refusals(&mut document);
    document
}

/// The document a server serves: [`document`] with its own tables as the values `{table}` can
/// take and its own page limit, so a client (or a contract tester) knows what exists here.
pub fn document_for(state: &AppState) -> OpenApiDoc {
    let mut document = document();
    let mut tables: Vec<&str> = state.tables.keys().map(String::as_str).collect();
    tables.sort_unstable();
    for item in document.paths.paths.values_mut() {
        for operation in operations(item) {
            for parameter in operation.parameters.iter_mut().flatten() {
                match (&parameter.parameter_in, parameter.name.as_str()) {
                    (ParameterIn::Path, "table") => {
                        parameter.schema = Some(
                            ObjectBuilder::new()
                                .schema_type(Type::String)
                                .enum_values(Some(tables.clone()))
                                .into(),
                        );
                    }
                    (ParameterIn::Query, "limit") => {
                        parameter.schema = Some(
                            ObjectBuilder::new()
                                .schema_type(Type::Integer)
                                .minimum(Some(1))
                                .maximum(Some(state.limits.max_page as f64))
                                .default(Some(state.limits.default_page.into()))
                                .into(),
                        );
                    }
                    _ => {}
                }
            }
        }
    }
    document
}

fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
    ]
    .into_iter()
    .flatten()
}

/// The bearer scheme.
struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut OpenApiDoc) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An hbidx API key. Keys carry scopes: lookup, write, admin.",
                    ))
                    .build(),
            ),
        );
    }
}

/// The refusals of the front middleware, on every operation that needs a key. Added after the
/// router has merged the paths in (a `Modify` runs before).
fn add_refusals(openapi: &mut OpenApiDoc) {
    for item in openapi.paths.paths.values_mut() {
        for operation in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
        ]
        .into_iter()
        .flatten()
        {
            add_operation_refusals(operation);
        }
    }
}

fn add_operation_refusals(operation: &mut Operation) {
    let Some(requirements) = &operation.security else {
        return;
    };
    // A requirement with scopes needs one of them; an empty list takes any valid key.
    let scoped = serde_json::to_value(requirements).is_ok_and(|value| {
        value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|requirement| requirement.get("api_key"))
            .any(|scopes| scopes.as_array().is_some_and(|s| !s.is_empty()))
    });
    let mut refusals = vec![
        (
            "401",
            "No API key, a malformed Authorization header, or an unknown key",
        ),
        (
            "429",
            "The key is over its rate limit; Retry-After says when to retry",
        ),
    ];
    if scoped {
        refusals.push(("403", "The key lacks the scope this operation needs"));
    }
    for (status, description) in refusals {
        let response = ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                Content::new(Some(Ref::from_schema_name("ErrorResponse"))),
            )
            .build();
        operation
            .responses
            .responses
            .entry(status.to_string())
            .or_insert(response.into());
    }
}

/// This document, as JSON.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "health",
    responses((status = 200, description = "This OpenAPI 3.1 document", body = Object))
)]
pub(crate) async fn serve(
    axum::extract::State(state): axum::extract::State<SharedState>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let json = state.openapi.get_or_init(|| {
        document_for(&state)
            .to_json()
            .unwrap_or_else(|err| format!("{{\"error\": \"{err}\"}}"))
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json.clone(),
    )
        .into_response()
}
