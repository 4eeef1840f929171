//! The `api_docs` app: the documentation of every app and API, looked up by agent code
//! instead of being shown up front. No login.

use serde_json::{json, Value};

use crate::sandbox::{ApiError, ParamType};
use crate::world::args::Args;
use crate::world::declare::{api, declare_app, AppDecl};
use crate::world::registry;
use crate::world::World;

pub(super) fn app() -> AppDecl {
    declare_app(
        "api_docs",
        "Documentation of every app and API: what each does, its parameters, response and errors.",
        vec![
            api(
                "show_app_descriptions",
                "Lists every app with a one-line description.",
                show_app_descriptions,
            )
            .returns(json!([{"name": "str", "description": "str"}])),
            api(
                "show_api_descriptions",
                "Lists the APIs of one app with their descriptions.",
                show_api_descriptions,
            )
            .req("app_name", ParamType::Str, "The app, as listed by show_app_descriptions.")
            .returns(json!([{"name": "str", "description": "str"}]))
            .error("there is no app with that name"),
            api(
                "show_api_doc",
                "Shows the full documentation of one API: signature, parameters (type, required, default, \
                 meaning), response shape and errors.",
                show_api_doc,
            )
            .req("app_name", ParamType::Str, "The app.")
            .req("api_name", ParamType::Str, "The API, as listed by show_api_descriptions.")
            .returns(json!({
                "app_name": "str", "api_name": "str", "signature": "str", "description": "str",
                "parameters": [{"name": "str", "type": "str", "required": "bool", "default": "any", "description": "str"}],
                "response": "any", "errors": ["str"]
            }))
            .error("there is no app or API with that name"),
        ],
    )
}

fn known_app(name: &str) -> Result<&str, ApiError> {
    if registry().app_names().contains(&name) {
        Ok(name)
    } else {
        Err(ApiError::new(format!(
            "no app named {name:?}; apps: {}",
            registry().app_names().join(", ")
        )))
    }
}

fn show_app_descriptions(_: &mut World, _: &Args) -> Result<Value, ApiError> {
    let apps = registry()
        .apps()
        .into_iter()
        .map(|(name, description)| json!({"name": name, "description": description}))
        .collect();
    Ok(Value::Array(apps))
}

fn show_api_descriptions(_: &mut World, args: &Args) -> Result<Value, ApiError> {
    let app = known_app(args.str("app_name")?.trim())?;
    let apis = registry()
        .docs(app)
        .into_iter()
        .map(|d| json!({"name": d.name, "description": d.description}))
        .collect();
    Ok(Value::Array(apis))
}

fn show_api_doc(_: &mut World, args: &Args) -> Result<Value, ApiError> {
    let app = known_app(args.str("app_name")?.trim())?;
    let name = args.str("api_name")?.trim();
    registry()
        .doc(app, name)
        .map(|d| d.to_json())
        .ok_or_else(|| {
            let names: Vec<&str> = registry().docs(app).iter().map(|d| d.name).collect();
            ApiError::new(format!(
                "{app} has no API named {name:?}; its APIs: {}",
                names.join(", ")
            ))
        })
}
