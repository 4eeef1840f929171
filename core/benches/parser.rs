//! Skill parser throughput: `parse_response` on realistic agent outputs (a thought and
//! a Python block of several documented, parameterised skills calling `apis.*`), a few
//! KB each and all different. Target: at least 100 MB/s.

#[path = "harness.rs"]
mod harness;

use sage_core::skill::parse_response;
use std::hint::black_box;
use std::time::Duration;

const TARGET_MB_PER_S: f64 = 100.0;

const APPS: [&str; 6] = [
    "spotify",
    "venmo",
    "gmail",
    "todoist",
    "amazon",
    "file_system",
];
const NOUNS: [&str; 6] = ["songs", "payments", "emails", "tasks", "orders", "files"];
const VERBS: [&str; 4] = ["total", "latest", "count", "archive"];

/// One skill: a typed, documented function over an app's paginated API.
fn skill(out: &mut String, app: &str, noun: &str, verb: &str, variant: usize) {
    out.push_str(&format!(
        "def {verb}_{app}_{noun}(owner: str, month: int, limit: int = {limit}, *, \
         include_archived: bool = False) -> list[dict]:\n    \
         \"\"\"Return the {noun} of `owner` in `month` from {app} ({verb}).\n\n    \
         Pages through `apis.{app}.show_{noun}` until an empty page; at most `limit`.\n    \
         \"\"\"\n    \
         password = get_password(\"{app}\")  # from the supervisor\n    \
         token = apis.{app}.login(username=apis.supervisor.show_profile()[\"email\"], password=password)\n    \
         found, page = [], 0\n    \
         while len(found) < limit:\n        \
         batch = apis.{app}.show_{noun}(access_token=token[\"access_token\"], page_index=page)\n        \
         if not batch:\n            \
         break\n        \
         for item in batch:\n            \
         if item[\"owner\"] == owner and item[\"created_at\"].startswith(f\"2023-{{month:02d}}\"):\n                \
         found.append(item)\n        \
         page += 1\n    \
         return found[:limit]\n\n",
        limit = 10 + variant,
    ));
}

/// A realistic response: a thought, then a block defining three skills and using them.
fn response(variant: usize) -> String {
    let mut out = format!(
        "Thought: task {variant} asks for the {} of a contact. No retrieved skill fits, so I \
         will write reusable, parameterised functions and call them right away.\n\n```python\n",
        NOUNS[variant % NOUNS.len()]
    );
    let mut names = Vec::new();
    for k in 0..3 {
        let i = variant + k;
        let (app, noun, verb) = (
            APPS[i % APPS.len()],
            NOUNS[(i / 2) % NOUNS.len()],
            VERBS[(i / 3) % VERBS.len()],
        );
        skill(&mut out, app, noun, verb, i);
        names.push(format!("{verb}_{app}_{noun}"));
    }
    for (k, name) in names.iter().enumerate() {
        out.push_str(&format!(
            "result_{k} = {name}(\"Alice Smith\", {month}, limit=5)\nprint(f\"{{len(result_{k})}} \
             items: {{result_{k}}}\")\n",
            month = 1 + (variant + k) % 12
        ));
    }
    out.push_str("apis.supervisor.complete_task(answer=len(result_0))\n```\n");
    out
}

fn main() {
    let responses: Vec<String> = (0..64).map(response).collect();
    let bytes: usize = responses.iter().map(String::len).sum();
    let mut next = 0;
    let per_call = harness::median_time(
        || {
            next = (next + 1) % responses.len();
            black_box(parse_response(black_box(&responses[next])))
        },
        21,
        Duration::from_millis(50),
    );
    let mean_len = bytes as f64 / responses.len() as f64;
    let mb_per_s = mean_len / per_call.as_secs_f64() / 1e6;
    harness::header();
    harness::report(
        &format!("parse_response, {:.1} KB agent outputs", mean_len / 1e3),
        mb_per_s,
        "MB/s",
        ">= 100 MB/s",
        mb_per_s >= TARGET_MB_PER_S,
    );
}
