//! The catalog of apps and APIs ([`Registry`]): each API's doc, signature and handler,
//! with lookups by name, built from the apps' declarations (`declare`). The world
//! builds it once per process and every world shares it (`super::registry`).

use std::collections::HashMap;

use super::declare::{AppDecl, Handler};
use super::docs::ApiDoc;
use crate::sandbox::ApiSpec;

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

impl Registry {
    /// The catalog of the declared apps, in their order.
    pub(super) fn new(apps: Vec<AppDecl>) -> Registry {
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
