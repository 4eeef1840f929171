//! Functional tests of the sandbox: persistence, output, errors and tracebacks, skill
//! loading, run-time tracing of functions, the API layer (login and token flow,
//! argument checks, conversions) and determinism.

mod fake_host;

use std::time::Duration;

use fake_host::FakeHost;
use sage_envs::sandbox::{
    ExecErrorKind, ExecOutcome, FunctionOrigin, FunctionRef, LimitKind, Limits, Sandbox,
};

/// The default limits, except that debug builds (an interpreter many times slower) get
/// a CPU-time cancel far beyond any case here, so that it never decides an outcome.
fn limits() -> Limits {
    let mut limits = Limits::default();
    if cfg!(debug_assertions) {
        limits.cpu_time = Duration::from_secs(120);
    }
    limits
}

fn run(sandbox: &mut Sandbox, host: &mut FakeHost, code: &str) -> ExecOutcome {
    sandbox.execute(code, host)
}

fn ok(sandbox: &mut Sandbox, host: &mut FakeHost, code: &str) -> String {
    let outcome = run(sandbox, host, code);
    assert!(
        outcome.succeeded(),
        "code failed:\n{code}\n---\n{}",
        outcome.observation()
    );
    outcome.output
}

fn err(sandbox: &mut Sandbox, host: &mut FakeHost, code: &str) -> ExecOutcome {
    let outcome = run(sandbox, host, code);
    assert!(
        !outcome.succeeded(),
        "code should fail:\n{code}\n---\n{}",
        outcome.output
    );
    outcome
}

fn from_turn(name: &str, execution: u32) -> FunctionRef {
    FunctionRef {
        name: name.into(),
        origin: FunctionOrigin::Execution(execution),
    }
}

fn from_library(name: &str) -> FunctionRef {
    FunctionRef {
        name: name.into(),
        origin: FunctionOrigin::Library,
    }
}

#[test]
fn state_persists_across_executions_until_reset() {
    let (mut sb, mut host) = (Sandbox::new(limits()), FakeHost::new());
    ok(
        &mut sb,
        &mut host,
        "items = [1, 2]\ndef total(xs: list) -> int:\n    return sum(xs)",
    );
    assert_eq!(
        ok(
            &mut sb,
            &mut host,
            "items.append(3)\nprint(total(items), items)"
        ),
        "6 [1, 2, 3]\n"
    );
    ok(&mut sb, &mut host, "def total(xs):\n    return 100");
    assert_eq!(ok(&mut sb, &mut host, "print(total(items))"), "100\n");
    sb.reset();
    let outcome = err(&mut sb, &mut host, "print(items)");
    assert!(outcome
        .error
        .unwrap()
        .message
        .contains("Variable `items` not found"));
    assert_eq!(sb.executions(), 1);
}

#[test]
fn python_like_conveniences_work() {
    let (mut sb, mut host) = (Sandbox::new(limits()), FakeHost::new());
    let code = r#"
name = "Ada"
def greet(who: str, *, punct: str = "!") -> str:
    """Greets someone."""
    return "Hi " + who + punct
print(f"{name}", greet(name), greet(name, punct="?"), sep=" | ")
print("%d items, %s" % (3, "ok"), "{} and {}".format(1, 2), end="")
print()
d = {"a": 1}
d["b"] = 2
print(sorted(d.keys()), [x * 2 for x in range(3)], "ab" * 2, [0] * 3, 7 // 2, 7 % 3, sum([1.5, 2]))
"#;
    assert_eq!(
        ok(&mut sb, &mut host, code),
        "Ada | Hi Ada! | Hi Ada?\n3 items, ok 1 and 2\n[\"a\", \"b\"] [0, 2, 4] abab [0, 0, 0] 3 1 3.5\n"
    );
    let outcome = err(&mut sb, &mut host, "sum(['a', 'b'])");
    assert!(outcome
        .error
        .unwrap()
        .message
        .contains("sum() adds numbers only"));
}

#[test]
fn errors_come_back_as_short_tracebacks_with_line_numbers() {
    let (mut sb, mut host) = (Sandbox::new(limits()), FakeHost::new());
    let code = "def inner(d):\n    return d['missing']\n\ndef outer():\n    return inner({})\n\nprint('before')\nouter()\n";
    let outcome = err(&mut sb, &mut host, code);
    let error = outcome.error.as_ref().unwrap();
    assert_eq!(error.kind, ExecErrorKind::Runtime);
    let tb = &error.traceback;
    assert!(
        tb.starts_with("Traceback (most recent call last):\n"),
        "{tb}"
    );
    assert!(
        tb.contains("File \"<turn 1>\", line 8, in <module>\n    outer()"),
        "{tb}"
    );
    assert!(
        tb.contains("line 5, in outer\n    return inner({})"),
        "{tb}"
    );
    assert!(
        tb.contains("line 2, in inner\n    return d['missing']"),
        "{tb}"
    );
    assert!(tb.lines().last().unwrap().starts_with("Error: "), "{tb}");
    assert!(tb.contains("missing"), "{tb}");
    assert_eq!(outcome.observation(), format!("before\n{tb}"));
    assert_eq!(
        ok(&mut sb, &mut host, "print('still here')"),
        "still here\n"
    );
}

#[test]
fn syntax_errors_point_at_the_line() {
    let (mut sb, mut host) = (Sandbox::new(limits()), FakeHost::new());
    let outcome = err(&mut sb, &mut host, "x = 1\nprint(x +)\n");
    let error = outcome.error.unwrap();
    assert_eq!(error.kind, ExecErrorKind::Syntax);
    assert!(
        error
            .traceback
            .contains("File \"<turn 1>\", line 2\n    print(x +)\n             ^"),
        "{}",
        error.traceback
    );
    assert!(
        error.traceback.contains("SyntaxError: "),
        "{}",
        error.traceback
    );
    let outcome = err(&mut sb, &mut host, "x = 2\nx *= 3\n");
    assert!(outcome
        .error
        .unwrap()
        .message
        .contains("`*=` is not supported"));
    let outcome = err(&mut sb, &mut host, "def f(x):\n    x %= 3\n    return x\n");
    assert!(outcome
        .error
        .unwrap()
        .message
        .contains("write `x = x % y` instead"));
    assert_eq!(ok(&mut sb, &mut host, "x = 4\nprint(x)"), "4\n");
}

#[test]
fn tracing_reports_defined_called_and_completed_functions() {
    let (mut sb, mut host) = (Sandbox::new(limits()), FakeHost::new());
    let code = "def helper(x):\n    return x + 1\n\ndef broken(x):\n    return helper(x) + {}['k']\n\ndef unused():\n    pass\n\nprint(helper(1))\nbroken(2)\n";
    let outcome = err(&mut sb, &mut host, code);
    assert_eq!(outcome.defined, vec!["helper", "broken", "unused"]);
    assert_eq!(
        outcome.called,
        vec![from_turn("helper", 0), from_turn("broken", 0)]
    );
    assert_eq!(outcome.completed, vec![from_turn("helper", 0)]);

    let outcome = run(
        &mut sb,
        &mut host,
        "def main():\n    return helper(10)\nprint(main())",
    );
    assert!(outcome.succeeded());
    assert_eq!(outcome.defined, vec!["main"]);
    assert_eq!(
        outcome.called,
        vec![from_turn("main", 1), from_turn("helper", 0)]
    );
    assert_eq!(outcome.completed, outcome.called);

    let outcome = err(&mut sb, &mut host, "x = main()\ny = {}['nope']");
    assert_eq!(
        outcome.completed,
        vec![from_turn("main", 1), from_turn("helper", 0)],
        "functions that returned before the error completed"
    );

    let outcome = err(&mut sb, &mut host, "print(helper(1) + {}['nope'])");
    assert_eq!(
        outcome.completed,
        vec![from_turn("helper", 0)],
        "a call that returned within the failing statement completed"
    );

    let outcome = err(
        &mut sb,
        &mut host,
        "print(sorted([3, 1], key=lambda v: helper(v) + {}['k']))",
    );
    assert_eq!(outcome.called, vec![from_turn("helper", 0)]);
    assert_eq!(outcome.completed, vec![from_turn("helper", 0)]);

    let source = sb.function_source(&from_turn("broken", 0)).unwrap();
    assert_eq!(source, "def broken(x):\n    return helper(x) + {}['k']");
    assert_eq!(sb.function_source(&from_turn("broken", 1)), None);
}

#[test]
fn recursion_and_nested_functions_are_traced_to_their_top_level_function() {
    let (mut sb, mut host) = (Sandbox::new(limits()), FakeHost::new());
    let code = "def fact(n):\n    def mul(a, b):\n        return a * b\n    return 1 if n <= 1 else mul(n, fact(n - 1))\nprint(fact(5))";
    let outcome = run(&mut sb, &mut host, code);
    assert_eq!(outcome.output, "120\n");
    assert_eq!(outcome.called, vec![from_turn("fact", 0)]);
    assert_eq!(outcome.completed, vec![from_turn("fact", 0)]);
}

#[test]
fn library_skills_load_and_count_as_called_only_when_they_run() {
    let (mut sb, mut host) = (Sandbox::new(limits()), FakeHost::new());
    let skill = "def playlist_titles(access_token: str) -> list:\n    \"\"\"Titles of the user's playlists.\"\"\"\n    return [p[\"title\"] for p in apis.music.show_playlists(access_token=access_token)]";
    assert_eq!(sb.load_skill(skill).unwrap(), "playlist_titles");
    assert_eq!(
        sb.load_skill("def shout(s):\n    return s.upper()\n")
            .unwrap(),
        "shout"
    );

    let outcome = run(&mut sb, &mut host, "print(shout)");
    assert!(outcome.succeeded());
    assert!(
        outcome.called.is_empty(),
        "naming a skill is not calling it"
    );

    let code = "pw = apis.supervisor.show_account_passwords()[0]['password']\ntoken = apis.music.login(username='alice', password=pw)['access_token']\nprint(playlist_titles(token))";
    let outcome = run(&mut sb, &mut host, code);
    assert_eq!(outcome.observation(), "[\"Road trip\", \"Focus\"]\n");
    assert_eq!(outcome.called, vec![from_library("playlist_titles")]);
    assert_eq!(outcome.completed, vec![from_library("playlist_titles")]);
    assert_eq!(
        sb.function_source(&from_library("shout")).unwrap(),
        "def shout(s):\n    return s.upper()"
    );

    let outcome = run(
        &mut sb,
        &mut host,
        "def shout(s):\n    return s + '!'\nprint(shout('a'))",
    );
    assert_eq!(outcome.output, "a!\n");
    assert_eq!(
        outcome.called,
        vec![from_turn("shout", 2)],
        "a redefined skill is no longer the library's"
    );
}

#[test]
fn broken_skills_are_refused_and_leave_the_session_intact() {
    let (mut sb, mut host) = (Sandbox::new(limits()), FakeHost::new());
    sb.load_skill("def good():\n    return 1").unwrap();
    let e = sb.load_skill("def bad(:\n    return 1").unwrap_err();
    assert_eq!(e.kind, ExecErrorKind::Syntax);
    assert!(e.traceback.contains("<skill bad>"), "{}", e.traceback);
    let e = sb
        .load_skill("def two():\n    return 1\nx = 2")
        .unwrap_err();
    assert!(
        e.message
            .contains("exactly one top-level function definition"),
        "{}",
        e.message
    );
    let e = sb
        .load_skill("def sneaky(x=apis.util.echo(value=1)):\n    return x")
        .unwrap_err();
    assert_eq!(e.kind, ExecErrorKind::Syntax);
    assert!(e.message.contains("is not a literal"), "{}", e.message);
    let e = sb
        .load_skill("def uses_unknown():\n    return undefined_name")
        .unwrap_err();
    assert!(
        e.message.contains("Variable `undefined_name` not found"),
        "{}",
        e.message
    );
    assert_eq!(ok(&mut sb, &mut host, "print(good())"), "1\n");
    let e = err(&mut sb, &mut host, "sneaky()").error.unwrap();
    assert!(e.message.contains("`sneaky`"), "{}", e.traceback);
    assert_eq!(host.calls, 0);
}

#[test]
fn login_and_tokens_are_enforced_by_the_host() {
    let (mut sb, mut host) = (Sandbox::new(limits()), FakeHost::new());
    host.token_lifetime = 3;
    let api_error = |outcome: ExecOutcome| {
        let error = outcome.error.expect("should fail");
        assert_eq!(error.kind, ExecErrorKind::Api, "{}", error.traceback);
        error.message
    };
    let message = api_error(err(&mut sb, &mut host, "apis.music.show_playlists()"));
    assert!(
        message.contains("missing required argument `access_token` (str)"),
        "{message}"
    );
    let message = api_error(err(
        &mut sb,
        &mut host,
        "apis.music.show_playlists(access_token='forged')",
    ));
    assert!(message.contains("invalid access token"), "{message}");
    let message = api_error(err(
        &mut sb,
        &mut host,
        "apis.music.login(username='alice', password='guess')",
    ));
    assert!(message.contains("wrong password"), "{message}");

    ok(
        &mut sb,
        &mut host,
        "alice = apis.music.login(username='alice', password='alice-pw')['access_token']",
    );
    assert_eq!(
        ok(
            &mut sb,
            &mut host,
            "print(len(apis.music.show_playlists(access_token=alice)))"
        ),
        "2\n"
    );
    let message = api_error(err(
        &mut sb,
        &mut host,
        "apis.music.show_playlist(access_token=alice, playlist_id=3)",
    ));
    assert!(message.contains("belongs to another user"), "{message}");
    ok(&mut sb, &mut host, "apis.util.echo()\napis.util.echo()");
    let message = api_error(err(
        &mut sb,
        &mut host,
        "apis.music.show_playlists(access_token=alice)",
    ));
    assert!(message.contains("expired"), "{message}");
    assert_eq!(
        ok(
            &mut sb,
            &mut host,
            "alice = apis.music.login(username='alice', password='alice-pw')['access_token']\nprint(apis.music.add_song(access_token=alice, playlist_id=2, title='New'))"
        ),
        "{\"song_count\": 2}\n"
    );
}

#[test]
fn api_calls_are_checked_against_their_signatures() {
    let (mut sb, mut host) = (Sandbox::new(limits()), FakeHost::new());
    let message = |sb: &mut Sandbox, host: &mut FakeHost, code: &str| {
        let error = err(sb, host, code).error.unwrap();
        assert_eq!(error.kind, ExecErrorKind::Api, "{}", error.traceback);
        error.traceback
    };
    let m = message(
        &mut sb,
        &mut host,
        "apis.musik.login(username='a', password='b')",
    );
    assert!(
        m.contains("there is no app named `musik` (did you mean `music`?)"),
        "{m}"
    );
    let m = message(&mut sb, &mut host, "apis.nothing_like_it.login()");
    assert!(m.contains("apps: music, supervisor, util"), "{m}");
    let m = message(
        &mut sb,
        &mut host,
        "apis.music.lgoin(username='a', password='b')",
    );
    assert!(
        m.contains("app `music` has no API named `lgoin` (did you mean `login`?)"),
        "{m}"
    );
    let m = message(
        &mut sb,
        &mut host,
        "apis.music.login(username='a', pasword='b', extra=1)",
    );
    assert!(
        m.contains("missing required argument `password` (str)"),
        "{m}"
    );
    assert!(
        m.contains("unexpected argument `pasword` (did you mean `password`?)"),
        "{m}"
    );
    assert!(m.contains("unexpected argument `extra`"), "{m}");
    assert!(
        m.contains("expected apis.music.login(username: str, password: str)"),
        "{m}"
    );
    assert!(m.contains("File \"<turn 4>\", line 1, in <module>"), "{m}");
    let m = message(
        &mut sb,
        &mut host,
        "apis.music.show_playlists(access_token=1, page_index='2')",
    );
    assert!(
        m.contains("argument `access_token` must be str, got int"),
        "{m}"
    );
    assert!(
        m.contains("argument `page_index` must be int, got str"),
        "{m}"
    );
    let m = message(&mut sb, &mut host, "apis.util.scale(x=None)");
    assert!(
        m.contains("argument `x` must be float, got NoneType"),
        "{m}"
    );
    let m = message(&mut sb, &mut host, "apis.music.login('alice', 'alice-pw')");
    assert!(m.contains("keyword arguments only"), "{m}");
    let m = message(&mut sb, &mut host, "apis.util.echo(value=len)");
    assert!(
        m.contains("argument `value` cannot be passed to an API: a value of type function"),
        "{m}"
    );
    assert_eq!(host.calls, 0, "no bad call reaches the host");
    let outcome = run(&mut sb, &mut host, "print('x')");
    assert!(outcome.api_calls.is_empty());
}

#[test]
fn values_round_trip_between_starlark_and_json() {
    let (mut sb, mut host) = (Sandbox::new(limits()), FakeHost::new());
    let code = r#"
v = apis.util.echo(value={"n": None, "b": True, "i": -3, "f": 2.5, "s": "e", "l": [1, (2, 3)], "d": {"k": []}})
print(v)
v["l"].append(4)
print(v["l"], type(v["f"]), apis.util.scale(x=3), apis.util.scale(x=1.5, factor=3))
print(apis.util.tag(flag=False, labels=("a",)))
print(apis.util.echo(value="caf\u00e9"))
"#;
    assert_eq!(
        ok(&mut sb, &mut host, code),
        "{\"b\": True, \"d\": {\"k\": []}, \"f\": 2.5, \"i\": -3, \"l\": [1, [2, 3]], \"n\": None, \"s\": \"e\"}\n[1, [2, 3], 4] float 6.0 4.5\n{\"flag\": False, \"labels\": [\"a\"], \"meta\": {}}\ncafé\n"
    );
    let outcome = run(&mut sb, &mut host, "apis.util.echo(value={1: 2})");
    assert!(outcome
        .error
        .unwrap()
        .message
        .contains("a dict key of type int"));
}

#[test]
fn api_calls_are_recorded_and_capped_per_execution_and_episode() {
    let limits = Limits {
        max_api_calls_per_execution: 5,
        max_api_calls_per_episode: 8,
        ..limits()
    };
    let (mut sb, mut host) = (Sandbox::new(limits), FakeHost::new());
    let outcome = run(
        &mut sb,
        &mut host,
        "apis.util.echo(value=1)\napis.util.ecko()",
    );
    assert_eq!(outcome.api_calls.len(), 2);
    let first = &outcome.api_calls[0];
    assert_eq!(
        (
            first.app.as_str(),
            first.api.as_str(),
            first.error.is_none()
        ),
        ("util", "echo", true)
    );
    assert!(outcome.api_calls[1]
        .error
        .as_ref()
        .unwrap()
        .contains("did you mean `echo`"));

    let outcome = err(
        &mut sb,
        &mut host,
        "for i in range(10):\n    apis.util.echo(value=i)",
    );
    assert_eq!(
        outcome.error.unwrap().kind,
        ExecErrorKind::Limit(LimitKind::ApiCallsPerExecution)
    );
    assert_eq!(outcome.api_calls.len(), 5);
    let outcome = err(
        &mut sb,
        &mut host,
        "for i in range(3):\n    apis.util.echo(value=i)",
    );
    assert_eq!(
        outcome.error.unwrap().kind,
        ExecErrorKind::Limit(LimitKind::ApiCallsPerEpisode)
    );
    assert_eq!(outcome.api_calls.len(), 1);
    sb.reset();
    assert!(run(&mut sb, &mut host, "apis.util.echo(value=1)").succeeded());
}

#[test]
fn printed_output_is_truncated_with_a_marker() {
    let limits = Limits {
        max_output_bytes: 20,
        ..limits()
    };
    let (mut sb, mut host) = (Sandbox::new(limits), FakeHost::new());
    let outcome = run(
        &mut sb,
        &mut host,
        "for i in range(100):\n    print('line', i)",
    );
    assert!(outcome.succeeded());
    assert!(outcome.output_truncated);
    assert_eq!(
        outcome.output,
        "line 0\nline 1\nline 2\n[output truncated: 770 more bytes not shown]\n"
    );
}

#[test]
fn same_code_and_host_give_the_same_outcomes() {
    let script = [
        "pw = apis.supervisor.show_account_passwords()[0]['password']",
        "def titles(tok):\n    return [p['title'] for p in apis.music.show_playlists(access_token=tok)]",
        "tok = apis.music.login(username='alice', password=pw)['access_token']\nprint(titles(tok))",
        "x = []\nfor i in range(5000000):\n    x.append(i)",
        "x = []\nfor i in range(1000000):\n    x.append(i)",
        "print(titles('bad'))",
    ];
    let play = || {
        let (mut sb, mut host) = (Sandbox::new(limits()), FakeHost::new());
        script
            .iter()
            .map(|code| sb.execute(code, &mut host))
            .collect::<Vec<_>>()
    };
    let first = play();
    assert_eq!(first, play());
    assert!(first[2].ticks > 0);
    assert_eq!(
        first[3].error.as_ref().unwrap().kind,
        ExecErrorKind::Limit(LimitKind::SequenceLength)
    );
    assert_eq!(
        first[4].error.as_ref().unwrap().kind,
        ExecErrorKind::Limit(LimitKind::Ticks)
    );
}
