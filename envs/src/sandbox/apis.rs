//! The `apis` object of agent code: `apis.<app>` is an app handle, `apis.<app>.<api>`
//! an API handle, and calling the latter with keyword arguments performs the API call
//! through the execution's [`ApiHost`](super::ApiHost): count it against the limits,
//! convert the arguments to JSON, check them against the API's signature, call the
//! host, and convert its answer back.
// `#[derive(ProvidesStaticType)]` implements starlark's `unsafe trait` of that name
// (a type-id marker), which the crate's `deny(unsafe_code)` counts; no unsafe code is
// written here.
#![allow(unsafe_code)]

use std::fmt;

use allocative::Allocative;
use serde_json::{Map, Value as Json};
use starlark::eval::{Arguments, Evaluator};
use starlark::starlark_simple_value;
use starlark::values::{
    starlark_value, Heap, NoSerialize, ProvidesStaticType, StarlarkValue, Value,
};

use super::api::{bind_args, closest, ApiCall};
use super::context::ExecContext;
use super::error::clip_name;
use super::error::ExecErrorKind;
use super::limits::LimitKind;
use super::text::check_api_value;
use super::values::{from_json, to_json, ConvertError};

/// The global `apis`: its attributes are the apps.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub(crate) struct Apis;

starlark_simple_value!(Apis);

impl fmt::Display for Apis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("apis")
    }
}

#[starlark_value(type = "apis")]
impl<'v> StarlarkValue<'v> for Apis {
    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        Some(heap.alloc(AppHandle {
            app: attribute.to_owned(),
        }))
    }
}

/// `apis.<app>`: its attributes are the app's APIs. Whether the app exists is checked
/// when an API of it is called.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub(crate) struct AppHandle {
    app: String,
}

starlark_simple_value!(AppHandle);

impl fmt::Display for AppHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "apis.{}", clip_name(&self.app))
    }
}

#[starlark_value(type = "app")]
impl<'v> StarlarkValue<'v> for AppHandle {
    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        Some(heap.alloc(ApiHandle {
            app: self.app.clone(),
            api: attribute.to_owned(),
        }))
    }
}

/// `apis.<app>.<api>`: callable with keyword arguments.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub(crate) struct ApiHandle {
    app: String,
    api: String,
}

starlark_simple_value!(ApiHandle);

impl fmt::Display for ApiHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "apis.{}.{}", clip_name(&self.app), clip_name(&self.api))
    }
}

#[starlark_value(type = "api")]
impl<'v> StarlarkValue<'v> for ApiHandle {
    fn invoke(
        &self,
        _me: Value<'v>,
        args: &Arguments<'v, '_>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let ctx = ExecContext::of(eval)?;
        let made = ctx.api_calls.borrow().len() as u32;
        if made >= ctx.limits.max_api_calls_per_execution {
            let kind = LimitKind::ApiCallsPerExecution;
            return Err(ctx.raise(ExecErrorKind::Limit(kind), kind.describe(&ctx.limits)));
        }
        if ctx.episode_calls_before + made >= ctx.limits.max_api_calls_per_episode {
            let kind = LimitKind::ApiCallsPerEpisode;
            return Err(ctx.raise(ExecErrorKind::Limit(kind), kind.describe(&ctx.limits)));
        }
        let result = self.perform(ctx, args, eval.heap());
        ctx.api_calls.borrow_mut().push(ApiCall {
            app: self.app.clone(),
            api: self.api.clone(),
            error: result.as_ref().err().map(|(_, message)| message.clone()),
        });
        let answer =
            result.map_err(|(kind, message)| ctx.raise(kind, format!("{self}: {message}")))?;
        from_json(&answer, eval.heap(), ctx.limits.max_value_depth).map_err(|e| {
            ctx.raise(
                ExecErrorKind::Api,
                format!("{self}: the host returned unusable data: {e}"),
            )
        })
    }
}

impl ApiHandle {
    /// Converts and checks the arguments, then calls the host.
    fn perform<'v>(
        &self,
        ctx: &ExecContext,
        args: &Arguments<'v, '_>,
        heap: Heap<'v>,
    ) -> Result<Json, (ExecErrorKind, String)> {
        let runtime =
            |e: starlark::Error| (ExecErrorKind::Runtime, e.without_diagnostic().to_string());
        if args.positions(heap).map_err(runtime)?.next().is_some() {
            return Err((
                ExecErrorKind::Api,
                "APIs take keyword arguments only, e.g. apis.app.api(name=value)".to_owned(),
            ));
        }
        let mut kwargs = Map::new();
        for (name, value) in args.names_map().map_err(runtime)? {
            // The JSON of a shared structure can be far larger than the heap holds:
            // measure it (without recursion) before converting, and refuse a value
            // larger than an API argument may be before anything is built or sent.
            let refused = check_api_value(ctx, value, heap).err().map(|_| {
                ctx.failure.take().unwrap_or((
                    ExecErrorKind::Limit(LimitKind::Heap),
                    LimitKind::Heap.describe(&ctx.limits),
                ))
            });
            if let Some((kind, message)) = refused {
                return Err((
                    kind,
                    format!("argument `{}`: {message}", clip_name(name.as_str())),
                ));
            }
            let mut path = format!("argument `{}`", name.as_str());
            let json = to_json(value, ctx.limits.max_value_depth, &mut path).map_err(|e| {
                let kind = match e {
                    ConvertError::TooDeep { .. } => ExecErrorKind::Limit(LimitKind::ValueDepth),
                    ConvertError::Unsupported { .. } => ExecErrorKind::Api,
                };
                (kind, e.to_string())
            })?;
            kwargs.insert(name.as_str().to_owned(), json);
        }
        let outcome = ctx.host.with(|host| {
            let Some(spec) = host.spec(&self.app, &self.api) else {
                return Err((
                    ExecErrorKind::Api,
                    self.unknown(&host.app_names(), &host.api_names(&self.app)),
                ));
            };
            let bound = bind_args(spec, kwargs).map_err(|e| (ExecErrorKind::Api, e.to_string()))?;
            host.call(&self.app, &self.api, bound)
                .map_err(|e| (ExecErrorKind::Api, e.message))
        });
        outcome
            .unwrap_or_else(|| Err((ExecErrorKind::Api, "no APIs are available here".to_owned())))
    }

    /// The message for a call to an app or API the host does not have.
    fn unknown(&self, apps: &[String], apis: &[String]) -> String {
        if apis.is_empty() {
            let mut message = format!("there is no app named `{}`", clip_name(&self.app));
            match closest(&self.app, apps.iter().map(String::as_str)) {
                Some(app) => message.push_str(&format!(" (did you mean `{app}`?)")),
                None => message.push_str(&format!("; apps: {}", apps.join(", "))),
            }
            message
        } else {
            let mut message = format!(
                "app `{}` has no API named `{}`",
                clip_name(&self.app),
                clip_name(&self.api)
            );
            if let Some(api) = closest(&self.api, apis.iter().map(String::as_str)) {
                message.push_str(&format!(" (did you mean `{api}`?)"));
            }
            message
        }
    }
}
