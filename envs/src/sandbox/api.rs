//! The boundary between agent code and the world's apps: the [`ApiHost`] trait a world
//! implements, the signatures it publishes ([`ApiSpec`], [`ParamSpec`], [`ParamType`]),
//! the shared argument check [`bind_args`], and the [`ApiCall`] record of each call.
//!
//! Agent code calls `apis.<app>.<api>(name=value, ...)`. The sandbox looks the API up
//! with [`ApiHost::spec`], checks the keyword arguments against it with [`bind_args`]
//! (missing, unexpected and mistyped arguments are reported together, with a
//! suggestion for misspelled names), fills in defaults, and only then hands the
//! arguments to [`ApiHost::call`]. Whatever the host checks beyond the signature
//! (logins, tokens, permissions, existence of records) it reports as an [`ApiError`].

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::clip_name;

/// The type a parameter accepts, as JSON sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ParamType {
    /// A string.
    Str,
    /// An integer.
    Int,
    /// A number: an integer or a float.
    Float,
    /// `True` or `False`.
    Bool,
    /// A list (a Starlark list or tuple).
    List,
    /// A dict with string keys.
    Dict,
    /// Any JSON value.
    Any,
}

impl ParamType {
    /// The name shown in signatures and error messages (`str`, `int`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ParamType::Str => "str",
            ParamType::Int => "int",
            ParamType::Float => "float",
            ParamType::Bool => "bool",
            ParamType::List => "list",
            ParamType::Dict => "dict",
            ParamType::Any => "any",
        }
    }

    /// Whether `value` has this type (`null` is never accepted here; see [`ParamSpec`]).
    pub fn accepts(self, value: &Value) -> bool {
        match self {
            ParamType::Str => value.is_string(),
            ParamType::Int => value.is_i64() || value.is_u64(),
            ParamType::Float => value.is_number(),
            ParamType::Bool => value.is_boolean(),
            ParamType::List => value.is_array(),
            ParamType::Dict => value.is_object(),
            ParamType::Any => !value.is_null(),
        }
    }
}

/// The name of a JSON value's type as agent code sees it (`str`, `int`, `NoneType`, ...).
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// One keyword parameter of an API.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParamSpec {
    /// The keyword.
    pub name: String,
    /// The accepted type.
    pub ty: ParamType,
    /// The value used when the argument is left out; `None` makes the parameter
    /// required. A default of `null` also lets the caller pass `None` explicitly.
    #[serde(with = "default_value")]
    pub default: Option<Value>,
}

impl ParamSpec {
    /// A required parameter.
    pub fn required(name: &str, ty: ParamType) -> ParamSpec {
        ParamSpec {
            name: name.to_owned(),
            ty,
            default: None,
        }
    }

    /// An optional parameter with its default.
    pub fn optional(name: &str, ty: ParamType, default: Value) -> ParamSpec {
        ParamSpec {
            name: name.to_owned(),
            ty,
            default: Some(default),
        }
    }

    fn accepts(&self, value: &Value) -> bool {
        match value {
            Value::Null => self.default == Some(Value::Null),
            v => self.ty.accepts(v),
        }
    }
}

/// Serializes a parameter's default so that a default of `null` (`Some(Null)`) stays
/// distinct from no default (`None`): as a one-element list, or `null` for none.
mod default_value {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    pub(super) fn serialize<S: Serializer>(
        default: &Option<Value>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        default
            .as_ref()
            .map(std::slice::from_ref)
            .serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Value>, D::Error> {
        Ok(Option::<[Value; 1]>::deserialize(deserializer)?.map(|[value]| value))
    }
}

/// The signature of one API: `apis.<app>.<name>(params...)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiSpec {
    /// The app the API belongs to.
    pub app: String,
    /// The API's name within its app.
    pub name: String,
    /// Its keyword parameters, in documentation order.
    pub params: Vec<ParamSpec>,
}

impl ApiSpec {
    /// A signature from its parts.
    pub fn new(app: &str, name: &str, params: Vec<ParamSpec>) -> ApiSpec {
        ApiSpec {
            app: app.to_owned(),
            name: name.to_owned(),
            params,
        }
    }

    /// The signature as agent code would call it:
    /// `apis.music.search(query: str, page_index: int = 0)`.
    pub fn signature(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|p| match &p.default {
                None => format!("{}: {}", p.name, p.ty.name()),
                Some(d) => format!("{}: {} = {}", p.name, p.ty.name(), python_literal(d)),
            })
            .collect();
        format!("apis.{}.{}({})", self.app, self.name, params.join(", "))
    }
}

/// A JSON value written as agent code would write it (`None`, `True`, `"x"`, ...).
fn python_literal(value: &Value) -> String {
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        other => other.to_string(),
    }
}

/// What is wrong with one argument of a call.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgProblem {
    /// A required parameter was not given.
    Missing {
        /// The parameter.
        param: String,
        /// Its type.
        ty: ParamType,
    },
    /// A keyword the API does not have.
    Unexpected {
        /// The keyword given.
        name: String,
        /// The parameter it most likely meant, if one is close.
        suggestion: Option<String>,
    },
    /// A value of the wrong type.
    WrongType {
        /// The parameter.
        param: String,
        /// The type it accepts.
        expected: ParamType,
        /// The type given (`str`, `NoneType`, ...).
        found: &'static str,
    },
}

impl fmt::Display for ArgProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgProblem::Missing { param, ty } => {
                write!(f, "missing required argument `{param}` ({})", ty.name())
            }
            ArgProblem::Unexpected { name, suggestion } => {
                write!(f, "unexpected argument `{}`", clip_name(name))?;
                match suggestion {
                    Some(s) => write!(f, " (did you mean `{s}`?)"),
                    None => Ok(()),
                }
            }
            ArgProblem::WrongType {
                param,
                expected,
                found,
            } => write!(
                f,
                "argument `{param}` must be {}, got {found}",
                expected.name()
            ),
        }
    }
}

/// Arguments that do not fit an API's signature; lists every problem found.
#[derive(Clone, Debug, PartialEq)]
pub struct BindError {
    /// The signature the arguments were checked against.
    pub signature: String,
    /// The problems, in parameter order (unexpected keywords last).
    pub problems: Vec<ArgProblem>,
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let problems: Vec<String> = self.problems.iter().map(|p| p.to_string()).collect();
        write!(f, "{}; expected {}", problems.join("; "), self.signature)
    }
}

impl std::error::Error for BindError {}

/// Checks keyword arguments against `spec` and fills in defaults: the result has exactly
/// the API's parameters, in signature order. Fails with every missing, unexpected or
/// mistyped argument at once.
pub fn bind_args(
    spec: &ApiSpec,
    mut args: Map<String, Value>,
) -> Result<Map<String, Value>, BindError> {
    let mut problems = Vec::new();
    let mut bound = Map::new();
    for param in &spec.params {
        match args.remove(&param.name) {
            Some(value) if param.accepts(&value) => {
                bound.insert(param.name.clone(), value);
            }
            Some(value) => problems.push(ArgProblem::WrongType {
                param: param.name.clone(),
                expected: param.ty,
                found: json_type_name(&value),
            }),
            None => match &param.default {
                Some(default) => {
                    bound.insert(param.name.clone(), default.clone());
                }
                None => problems.push(ArgProblem::Missing {
                    param: param.name.clone(),
                    ty: param.ty,
                }),
            },
        }
    }
    for name in args.keys() {
        let names = spec.params.iter().map(|p| p.name.as_str());
        problems.push(ArgProblem::Unexpected {
            name: name.clone(),
            suggestion: closest(name, names).map(str::to_owned),
        });
    }
    if problems.is_empty() {
        Ok(bound)
    } else {
        Err(BindError {
            signature: spec.signature(),
            problems,
        })
    }
}

/// An error an API reports: bad credentials, an expired token, a missing record, ...
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// The message shown to the agent.
    pub message: String,
}

impl ApiError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> ApiError {
        ApiError {
            message: message.into(),
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

/// The apps and APIs agent code can reach through `apis`. Implemented by the world.
pub trait ApiHost {
    /// The signature of `apis.<app>.<api>`, or `None` when there is no such API.
    fn spec(&self, app: &str, api: &str) -> Option<&ApiSpec>;

    /// Names of all apps (used for error messages only).
    fn app_names(&self) -> Vec<String>;

    /// Names of the APIs of `app`, empty when there is no such app (used for error
    /// messages only).
    fn api_names(&self, app: &str) -> Vec<String>;

    /// Performs the call. `args` has already been checked by [`bind_args`] against
    /// [`ApiHost::spec`]: it holds exactly the API's parameters, defaults filled in.
    fn call(&mut self, app: &str, api: &str, args: Map<String, Value>) -> Result<Value, ApiError>;
}

/// One API call made by agent code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiCall {
    /// The app named in the call.
    pub app: String,
    /// The API named in the call.
    pub api: String,
    /// Why the call failed (unknown API, bad arguments, or the host's error), or `None`
    /// when it succeeded.
    pub error: Option<String>,
}

/// Names longer than this get no "did you mean" suggestion (the search's cost grows
/// with the name's length, and no real name is this long).
const MAX_SUGGESTED_NAME_CHARS: usize = 64;

/// The candidate closest to `name` by edit distance, if it is close enough to be a
/// plausible misspelling.
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    if name.len() > 4 * MAX_SUGGESTED_NAME_CHARS || name.chars().count() > MAX_SUGGESTED_NAME_CHARS
    {
        return None;
    }
    let max_distance = name.chars().count().div_ceil(3);
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= max_distance)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> ApiSpec {
        ApiSpec::new(
            "music",
            "search",
            vec![
                ParamSpec::required("query", ParamType::Str),
                ParamSpec::optional("page_limit", ParamType::Int, json!(5)),
                ParamSpec::optional("min_rating", ParamType::Float, Value::Null),
            ],
        )
    }

    fn args(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn binds_and_fills_defaults() {
        let bound = bind_args(&spec(), args(json!({"query": "jazz", "min_rating": 4}))).unwrap();
        assert_eq!(
            Value::Object(bound),
            json!({"query": "jazz", "page_limit": 5, "min_rating": 4})
        );
    }

    #[test]
    fn reports_every_problem() {
        let err = bind_args(&spec(), args(json!({"page_limit": "5", "querry": "x"}))).unwrap_err();
        assert_eq!(
            err.problems,
            vec![
                ArgProblem::Missing {
                    param: "query".into(),
                    ty: ParamType::Str
                },
                ArgProblem::WrongType {
                    param: "page_limit".into(),
                    expected: ParamType::Int,
                    found: "str"
                },
                ArgProblem::Unexpected {
                    name: "querry".into(),
                    suggestion: Some("query".into())
                },
            ]
        );
        let text = err.to_string();
        assert!(text.contains("did you mean `query`"), "{text}");
        assert!(
            text.contains(
                "apis.music.search(query: str, page_limit: int = 5, min_rating: float = None)"
            ),
            "{text}"
        );
    }

    #[test]
    fn signatures_survive_serialization_with_null_defaults() {
        let spec = spec();
        let text = serde_json::to_string(&spec).unwrap();
        let back: ApiSpec = serde_json::from_str(&text).unwrap();
        assert_eq!(back, spec);
        assert_eq!(back.params[2].default, Some(Value::Null));
        assert_eq!(back.params[0].default, None);
    }

    #[test]
    fn none_only_where_default_is_none() {
        assert!(bind_args(&spec(), args(json!({"query": "a", "min_rating": null}))).is_ok());
        assert!(bind_args(&spec(), args(json!({"query": null}))).is_err());
    }

    #[test]
    fn suggestions_need_closeness() {
        assert_eq!(
            closest("lgoin", ["login", "logout"].into_iter()),
            Some("login")
        );
        assert_eq!(closest("delete_everything", ["login"].into_iter()), None);
    }
}
