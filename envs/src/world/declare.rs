//! How an app declares its APIs: [`declare_app`] with a list of [`api`] builders, which
//! also add the parameters and errors every app shares (the access token, the paging
//! parameters). The [`Registry`](super::Registry) is built from these declarations.

use serde_json::{json, Value};

use super::args::{Args, MAX_PAGE_LIMIT};
use super::docs::{ApiDoc, ParamDoc};
use super::World;
use crate::sandbox::{ApiError, ParamType};

/// What runs an API: the world, and the arguments already bound to the signature.
pub(crate) type Handler = fn(&mut World, &Args) -> Result<Value, ApiError>;

/// An app as its module declares it.
pub(crate) struct AppDecl {
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    pub(crate) apis: Vec<ApiBuilder>,
}

/// An API being declared.
pub(crate) struct ApiBuilder {
    pub(super) doc: ApiDoc,
    pub(super) handler: Handler,
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
