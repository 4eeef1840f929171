//! The catalog of apps and APIs ([`Registry`]): each API's doc, signature and handler,
//! with lookups by name. Built once per process from the app modules; shared by every
//! world.
//!
//! Apps declare their APIs with the small builder here ([`api`] and its methods), which
//! also adds the parameters and errors every app shares: the access token and the
//! paging parameters.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{json, Value};

use super::apps;
use super::args::{Args, MAX_PAGE_LIMIT};
use super::docs::{ApiDoc, ParamDoc};
use super::World;
use crate::sandbox::{ApiError, ApiSpec, ParamType};

/// What runs an API: the world, and the arguments already bound to the signature.
pub(crate) type Handler = fn(&mut World, &Args) -> Result<Value, ApiError>;

/// One API: doc, signature and handler.
pub(crate) struct ApiDef {
    pub(crate) doc: ApiDoc,
    pub(crate) spec: ApiSpec,
    pub(crate) handler: Handler,
}

/// An app: its description and APIs.
struct AppEntry {
    name: &'static str,
    description: &'static str,
    apis: Vec<ApiDef>,
    by_name: HashMap<&'static str, usize>,
}

/// Every app and API of the world.
pub struct Registry {
    apps: Vec<AppEntry>,
    by_name: HashMap<&'static str, usize>,
}

/// The registry, built on first use.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry::new(apps::all()))
}

impl Registry {
    fn new(apps: Vec<AppDecl>) -> Registry {
        let apps: Vec<AppEntry> = apps
            .into_iter()
            .map(|app| {
                let apis: Vec<ApiDef> = app
                    .apis
                    .into_iter()
                    .map(|b| {
                        let mut doc = b.doc;
                        doc.app = app.name;
                        ApiDef {
                            spec: doc.spec(),
                            doc,
                            handler: b.handler,
                        }
                    })
                    .collect();
                let by_name = apis
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (a.doc.name, i))
                    .collect();
                AppEntry {
                    name: app.name,
                    description: app.description,
                    apis,
                    by_name,
                }
            })
            .collect();
        let by_name = apps.iter().enumerate().map(|(i, a)| (a.name, i)).collect();
        Registry { apps, by_name }
    }

    fn app(&self, app: &str) -> Option<&AppEntry> {
        self.by_name.get(app).map(|&i| &self.apps[i])
    }

    pub(crate) fn def(&self, app: &str, api: &str) -> Option<&ApiDef> {
        let entry = self.app(app)?;
        entry.by_name.get(api).map(|&i| &entry.apis[i])
    }

    /// App names with their descriptions, in catalog order.
    pub fn apps(&self) -> Vec<(&'static str, &'static str)> {
        self.apps.iter().map(|a| (a.name, a.description)).collect()
    }

    /// App names, in catalog order.
    pub fn app_names(&self) -> Vec<&'static str> {
        self.apps.iter().map(|a| a.name).collect()
    }

    /// The docs of an app's APIs, in catalog order; empty for an unknown app.
    pub fn docs(&self, app: &str) -> Vec<&ApiDoc> {
        self.app(app)
            .map(|a| a.apis.iter().map(|d| &d.doc).collect())
            .unwrap_or_default()
    }

    /// The doc of one API.
    pub fn doc(&self, app: &str, api: &str) -> Option<&ApiDoc> {
        self.def(app, api).map(|d| &d.doc)
    }

    /// The signature of one API.
    pub fn spec(&self, app: &str, api: &str) -> Option<&ApiSpec> {
        self.def(app, api).map(|d| &d.spec)
    }

    /// Number of APIs over all apps.
    pub fn api_count(&self) -> usize {
        self.apps.iter().map(|a| a.apis.len()).sum()
    }
}

/// An app as its module declares it.
pub(crate) struct AppDecl {
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    pub(crate) apis: Vec<ApiBuilder>,
}

/// An API being declared.
pub(crate) struct ApiBuilder {
    doc: ApiDoc,
    handler: Handler,
}

/// Starts declaring the API `name`.
pub(crate) fn api(name: &'static str, description: &str, handler: Handler) -> ApiBuilder {
    ApiBuilder {
        doc: ApiDoc {
            app: "",
            name,
            description: description.to_owned(),
            params: Vec::new(),
            response: Value::Null,
            errors: Vec::new(),
        },
        handler,
    }
}

impl ApiBuilder {
    /// Adds the `access_token` parameter and the errors of a bad token.
    pub(crate) fn token(mut self) -> ApiBuilder {
        self.doc.params.push(ParamDoc {
            name: "access_token",
            ty: ParamType::Str,
            default: None,
            description: "Access token from this app's `login`.".to_owned(),
        });
        self.doc.errors.extend(
            [
                "the access token is unknown, or was issued by another app",
                "the access token expired or was logged out: log in again",
            ]
            .map(str::to_owned),
        );
        self
    }

    /// Adds a required parameter.
    pub(crate) fn req(
        mut self,
        name: &'static str,
        ty: ParamType,
        description: &str,
    ) -> ApiBuilder {
        self.doc.params.push(ParamDoc {
            name,
            ty,
            default: None,
            description: description.to_owned(),
        });
        self
    }

    /// Adds an optional parameter.
    pub(crate) fn opt(
        mut self,
        name: &'static str,
        ty: ParamType,
        default: Value,
        description: &str,
    ) -> ApiBuilder {
        self.doc.params.push(ParamDoc {
            name,
            ty,
            default: Some(default),
            description: description.to_owned(),
        });
        self
    }

    /// Adds `page_index` and `page_limit`.
    pub(crate) fn paged(self) -> ApiBuilder {
        self.opt(
            "page_index",
            ParamType::Int,
            json!(0),
            "Which page to return, from 0. A page past the last one is an empty list.",
        )
        .opt(
            "page_limit",
            ParamType::Int,
            json!(10),
            &format!("Results per page, 1 to {MAX_PAGE_LIMIT}."),
        )
        .error(&format!(
            "page_index is negative, or page_limit is not between 1 and {MAX_PAGE_LIMIT}"
        ))
    }

    /// Sets the response shape.
    pub(crate) fn returns(mut self, response: Value) -> ApiBuilder {
        self.doc.response = response;
        self
    }

    /// Adds an error condition.
    pub(crate) fn error(mut self, condition: &str) -> ApiBuilder {
        self.doc.errors.push(condition.to_owned());
        self
    }
}

/// Declares an app: its name, description and APIs.
pub(crate) fn declare_app(
    name: &'static str,
    description: &'static str,
    apis: Vec<ApiBuilder>,
) -> AppDecl {
    AppDecl {
        name,
        description,
        apis,
    }
}
