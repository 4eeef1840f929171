//! API documentation: [`ApiDoc`] and [`ParamDoc`], what `apis.api_docs.show_api_doc`
//! returns. An API's [`ApiSpec`] (the signature the sandbox checks calls against) is
//! derived from its doc, so the two cannot disagree.

use serde_json::{json, Value};

use crate::sandbox::{ApiSpec, ParamSpec, ParamType};

/// One documented keyword parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamDoc {
    /// The keyword.
    pub name: &'static str,
    /// The accepted type.
    pub ty: ParamType,
    /// The default; `None`: the parameter is required.
    pub default: Option<Value>,
    /// What the parameter means and which values it accepts.
    pub description: String,
}

impl ParamDoc {
    /// Whether the caller must pass it.
    pub fn required(&self) -> bool {
        self.default.is_none()
    }
}

/// The documentation of one API.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiDoc {
    /// Its app.
    pub app: &'static str,
    /// Its name within the app.
    pub name: &'static str,
    /// What it does, side effects included.
    pub description: String,
    /// Its keyword parameters, in signature order.
    pub params: Vec<ParamDoc>,
    /// The shape of a successful response: JSON whose leaves name types (`"int"`,
    /// `"str"`, ...) and whose one-element lists stand for lists of that shape.
    pub response: Value,
    /// The errors it can report, as conditions.
    pub errors: Vec<String>,
}

impl ApiDoc {
    /// The signature the sandbox checks calls against.
    pub fn spec(&self) -> ApiSpec {
        let params = self
            .params
            .iter()
            .map(|p| match &p.default {
                None => ParamSpec::required(p.name, p.ty),
                Some(default) => ParamSpec::optional(p.name, p.ty, default.clone()),
            })
            .collect();
        ApiSpec::new(self.app, self.name, params)
    }

    /// Whether calls need an `access_token` from the app's `login`.
    pub fn needs_login(&self) -> bool {
        self.params.iter().any(|p| p.name == "access_token")
    }

    /// The doc as `show_api_doc` returns it.
    pub fn to_json(&self) -> Value {
        let params: Vec<Value> = self
            .params
            .iter()
            .map(|p| {
                json!({
                    "name": p.name,
                    "type": p.ty.name(),
                    "required": p.required(),
                    "default": p.default.clone().unwrap_or(Value::Null),
                    "description": p.description,
                })
            })
            .collect();
        json!({
            "app_name": self.app,
            "api_name": self.name,
            "signature": self.spec().signature(),
            "description": self.description,
            "parameters": params,
            "response": self.response,
            "errors": self.errors,
        })
    }
}
