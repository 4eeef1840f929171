//! The code the expert writes, from a template's [`Solution`]: the login lines, the
//! skill's full definition (typed signature, docstring, body), a task's values bound to
//! the parameters' names, the call of a skill with those names or with literals, the
//! same work inlined without a function (the no-skill mode), the docs lookups, and the
//! deliberate mistakes of [`Mistake`].

use serde_json::Value;

use super::style::{Mistake, Style};
use crate::scenarios::{Params, Solution, Template};
use crate::world::LOGIN_APPS;

/// `value` written as a Starlark literal.
pub(crate) fn literal(value: &Value) -> String {
    match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned()),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(literal).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", literal(&Value::String(k.clone())), literal(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The apps of `template` that need a login, in the template's order.
fn login_apps(template: &Template) -> Vec<&'static str> {
    template
        .apps
        .iter()
        .copied()
        .filter(|a| LOGIN_APPS.contains(a))
        .collect()
}

/// Lines that log in to the template's apps, leaving each token in `<app>_token`.
fn login_lines(template: &Template, style: &Style) -> Vec<String> {
    let apps = login_apps(template);
    let username = |app: &str| {
        if app == "phone" {
            "phone_number"
        } else {
            "email"
        }
    };
    let mut lines = Vec::new();
    if style.login == 0 {
        lines.push(
            "passwords = {p[\"account_name\"]: p[\"password\"] for p in apis.supervisor.show_account_passwords()}"
                .to_owned(),
        );
        lines.push("profile = apis.supervisor.show_profile()".to_owned());
        for app in apps {
            lines.push(format!(
                "{app}_token = apis.{app}.login(username=profile[\"{}\"], password=passwords[\"{app}\"])[\"access_token\"]",
                username(app)
            ));
        }
    } else {
        lines.push("profile = apis.supervisor.show_profile()".to_owned());
        lines.push("accounts = apis.supervisor.show_account_passwords()".to_owned());
        for app in apps {
            lines.push(format!(
                "{app}_password = [a[\"password\"] for a in accounts if a[\"account_name\"] == \"{app}\"][0]"
            ));
            lines.push(format!(
                "{app}_login = apis.{app}.login(username=profile[\"{}\"], password={app}_password)",
                username(app)
            ));
            lines.push(format!("{app}_token = {app}_login[\"access_token\"]"));
        }
    }
    lines
}

/// The solution's body with `mistake` made in it.
fn body_with(solution: &Solution, mistake: Option<Mistake>) -> String {
    match mistake {
        None => solution.body.to_owned(),
        Some(Mistake::TokenKeyword) => solution.body.replacen("access_token=", "token=", 1),
        Some(Mistake::PageLimit) => solution.body.replace("page_limit=20", "page_limit=50"),
    }
}

/// The skill's name under `style`.
pub(crate) fn skill_name(template: &Template, style: &Style) -> &'static str {
    let names = template.solution.names;
    names
        .get(style.name)
        .or(names.first())
        .copied()
        .unwrap_or("solve")
}

/// The skill's signature as written in its `def` line (without `def`).
fn signature(template: &Template, style: &Style) -> String {
    let solution = &template.solution;
    let params: Vec<String> = solution
        .params
        .iter()
        .map(|p| format!("{}: {}", p.name, p.ty))
        .collect();
    format!(
        "{}({}) -> {}",
        skill_name(template, style),
        params.join(", "),
        solution.returns.0
    )
}

/// The skill's full definition, with `mistake` made in it.
pub(crate) fn skill_source(template: &Template, style: &Style, mistake: Option<Mistake>) -> String {
    let solution = &template.solution;
    let summary = solution
        .summaries
        .get(style.summary)
        .or(solution.summaries.first())
        .copied()
        .unwrap_or("");
    let mut out = format!("def {}:\n    \"\"\"{summary}", signature(template, style));
    if style.args_section {
        out.push_str("\n\n    Args:");
        for p in solution.params {
            out.push_str(&format!("\n        {}: {}.", p.name, p.doc));
        }
        out.push_str(&format!(
            "\n\n    Returns:\n        {}.\n    \"\"\"\n",
            solution.returns.1
        ));
    } else {
        out.push_str("\"\"\"\n");
    }
    for line in login_lines(template, style) {
        out.push_str(&format!("    {line}\n"));
    }
    out.push_str(&body_with(solution, mistake));
    out
}

/// A call of the skill with the task's values as literals, storing and printing the
/// result (a task that reuses the skill).
pub(crate) fn call(template: &Template, style: &Style, params: &Params) -> String {
    let args: Vec<String> = template.arguments(params).iter().map(literal).collect();
    call_with(template, style, &args)
}

/// A call of the skill with the variables [`values`] bound, storing and printing the
/// result (the task that defines the skill).
pub(crate) fn call_bound(template: &Template, style: &Style) -> String {
    let args: Vec<String> = template
        .solution
        .params
        .iter()
        .map(|p| p.name.to_owned())
        .collect();
    call_with(template, style, &args)
}

fn call_with(template: &Template, style: &Style, args: &[String]) -> String {
    format!(
        "{var} = {}({})\nprint({var})",
        skill_name(template, style),
        args.join(", "),
        var = style.result_var
    )
}

/// The task's values bound to the skill's parameter names, a line each. Code writes
/// them first, next to the instruction it copies them from.
pub(crate) fn values(template: &Template, params: &Params) -> String {
    let mut out = String::new();
    for (p, value) in template
        .solution
        .params
        .iter()
        .zip(template.arguments(params))
    {
        out.push_str(&format!("{} = {}\n", p.name, literal(&value)));
    }
    out
}

/// The work of the skill inlined at top level for one task: the values as variables,
/// the login lines, the body without its function, the result printed.
pub(crate) fn direct(
    template: &Template,
    style: &Style,
    params: &Params,
    mistake: Option<Mistake>,
) -> String {
    let mut out = values(template, params);
    for line in login_lines(template, style) {
        out.push_str(&line);
        out.push('\n');
    }
    for line in body_with(&template.solution, mistake).lines() {
        let line = line.strip_prefix("    ").unwrap_or(line);
        match line.strip_prefix("return ") {
            Some(value) => out.push_str(&format!("{} = {value}\n", style.result_var)),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out.push_str(&format!("print({})", style.result_var));
    out
}

/// Code that prints the docs the solution needs, in the style's order.
pub(crate) fn docs_lookup(template: &Template, style: &Style) -> String {
    let mut docs: Vec<(&str, &str)> = template.solution.docs.to_vec();
    if style.docs_reversed {
        docs.reverse();
    }
    let mut lines = Vec::new();
    if style.docs == 2 {
        lines.push("print(apis.api_docs.show_app_descriptions())".to_owned());
    }
    if style.docs != 1 {
        for app in login_apps(template) {
            lines.push(format!(
                "print(apis.api_docs.show_api_descriptions(app_name=\"{app}\"))"
            ));
        }
    }
    for (app, api) in docs {
        lines.push(format!(
            "print(apis.api_docs.show_api_doc(app_name=\"{app}\", api_name=\"{api}\"))"
        ));
    }
    lines.join("\n")
}

/// The code that ends the task: with the result as the answer for questions.
pub(crate) fn complete(question: bool, style: &Style) -> String {
    if question {
        format!("apis.supervisor.complete_task(answer={})", style.result_var)
    } else {
        "apis.supervisor.complete_task()".to_owned()
    }
}

/// An agent turn: a thought and one Python block.
pub(crate) fn turn(thought: &str, code: &str) -> String {
    format!("{thought}\n\n```python\n{code}\n```")
}
