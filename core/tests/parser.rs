//! Integration tests of the skill parser: fences, top-level definitions with exact
//! spans, signatures and docstrings, calls, issues on malformed input, and totality
//! (random mutations of realistic responses and pathological inputs never panic, and
//! every span stays in bounds and on `char` boundaries).

use sage_core::skill::{
    find_code_blocks, parse_code, parse_response, parse_response_bytes, redefinitions, used_skills,
    CallSite, CodeAnalysis, FunctionDef, HashSkillLibrary, IssueKind, Origin, Param, ParamKind,
    ResponseAnalysis, Skill, SkillLibrary, MAX_ISSUES,
};

const AGENT_RESPONSE: &str = r#"I need the total amount Alice sent me on Venmo in March. No skill in the
library fits, so I will write a reusable one and call it.

```python
def venmo_total_received(sender: str, month: int, year: int = 2023) -> float:
    """Total amount received on Venmo from `sender` in `month` of `year`.

    Returns the sum of the amounts, 0.0 when there are none.
    """
    profile = apis.supervisor.show_profile()
    token = apis.venmo.login(username=profile["email"], password=get_password("venmo"))
    total = 0.0
    page = 0
    while True:
        txs = apis.venmo.show_transactions(access_token=token["access_token"], page_index=page)
        if not txs:
            break
        for tx in txs:
            if tx["sender"]["name"] == sender and tx["created_at"].startswith(f"{year}-{month:02d}"):
                total += tx["amount"]
        page += 1
    return total

answer = venmo_total_received("Alice", 3)
print(f"Alice sent {answer}")
```
"#;

fn param(name: &str, kind: ParamKind, annotation: Option<&str>, default: Option<&str>) -> Param {
    Param {
        name: name.into(),
        kind,
        annotation: annotation.map(Into::into),
        default: default.map(Into::into),
    }
}

fn regular(name: &str) -> Param {
    param(name, ParamKind::Regular, None, None)
}

/// The calls as (callee, line, enclosing def).
fn calls(analysis: &CodeAnalysis) -> Vec<(&str, u32, Option<usize>)> {
    analysis
        .calls
        .iter()
        .map(|c| (c.callee.as_str(), c.line, c.enclosing_def))
        .collect()
}

fn issue_kinds(analysis: &CodeAnalysis) -> Vec<(u32, IssueKind)> {
    analysis.issues.iter().map(|i| (i.line, i.kind)).collect()
}

/// Asserts that `def` spans exactly `expected` (found at its first occurrence in `code`).
fn assert_source(code: &str, def: &FunctionDef, expected: &str) {
    assert_eq!(def.source(code), expected);
    let start = code.find(expected).expect("expected source is in the code");
    assert_eq!(def.span, start..start + expected.len());
}

#[test]
fn realistic_agent_response() {
    let response = parse_response(AGENT_RESPONSE);
    assert_eq!(response.blocks.len(), 1);
    let block = &response.blocks[0];
    assert_eq!(block.language, "python");
    assert!(block.terminated);
    assert_eq!(block.line, 4);
    assert_eq!(block.text(AGENT_RESPONSE), response.code);
    assert!(response.has_code());
    assert!(response.issues.is_empty());

    let analysis = &response.analysis;
    assert!(analysis.issues.is_empty(), "{:?}", analysis.issues);
    assert_eq!(analysis.defs.len(), 1);
    let def = &analysis.defs[0];
    assert_eq!(def.name, "venmo_total_received");
    assert_eq!(def.line, 1);
    assert_eq!(
        def.params,
        vec![
            param("sender", ParamKind::Regular, Some("str"), None),
            param("month", ParamKind::Regular, Some("int"), None),
            param("year", ParamKind::Regular, Some("int"), Some("2023")),
        ]
    );
    assert_eq!(def.returns.as_deref(), Some("float"));
    assert_eq!(
        def.docstring.as_deref(),
        Some(
            "Total amount received on Venmo from `sender` in `month` of `year`.\n\n    \
             Returns the sum of the amounts, 0.0 when there are none.\n    "
        )
    );
    let code = &response.code;
    let body_end = code.find("    return total").unwrap() + "    return total".len();
    assert_eq!(def.span, 0..body_end);
    assert!(def.source(code).ends_with("return total"));
    assert_eq!(
        calls(analysis),
        vec![
            ("apis.supervisor.show_profile", 6, Some(0)),
            ("apis.venmo.login", 7, Some(0)),
            ("get_password", 7, Some(0)),
            ("apis.venmo.show_transactions", 11, Some(0)),
            ("venmo_total_received", 20, None),
            ("print", 21, None),
        ]
    );
    let login = &analysis.calls[1];
    assert_eq!(&code[login.span.clone()], "apis.venmo.login");

    let skill = Skill::from_def(def, code, Origin::default());
    assert_eq!(
        skill.signature(),
        "venmo_total_received(sender: str, month: int, year: int = 2023)"
    );
    assert!(skill.source.starts_with("def venmo_total_received("));
}

#[test]
fn definition_forms() {
    struct Case {
        code: &'static str,
        source: &'static str,
        name: &'static str,
        params: Vec<Param>,
        docstring: Option<&'static str>,
        decorators: Vec<&'static str>,
        is_async: bool,
        line: u32,
    }
    let cases = vec![
        Case {
            code: "def f(): return 1\n",
            source: "def f(): return 1",
            name: "f",
            params: vec![],
            docstring: None,
            decorators: vec![],
            is_async: false,
            line: 1,
        },
        Case {
            code: "x = 1\n\nasync def fetch(url, *, timeout: float = 1.5):\n    return await get(url)  # net\n\n",
            source: "async def fetch(url, *, timeout: float = 1.5):\n    return await get(url)  # net",
            name: "fetch",
            params: vec![
                regular("url"),
                param("timeout", ParamKind::KeywordOnly, Some("float"), Some("1.5")),
            ],
            docstring: None,
            decorators: vec![],
            is_async: true,
            line: 3,
        },
        Case {
            code: "@retry(times=3)\n# why\n@cache\ndef g(a, /, b, *args, c=[1, (2, 3)], **kwargs):\n    '''Single.'''\n    return a\n",
            source: "@retry(times=3)\n# why\n@cache\ndef g(a, /, b, *args, c=[1, (2, 3)], **kwargs):\n    '''Single.'''\n    return a",
            name: "g",
            params: vec![
                regular("a"),
                regular("b"),
                param("args", ParamKind::VarArgs, None, None),
                param("c", ParamKind::KeywordOnly, None, Some("[1, (2, 3)]")),
                param("kwargs", ParamKind::KwArgs, None, None),
            ],
            docstring: Some("Single."),
            decorators: vec!["retry(times=3)", "cache"],
            is_async: false,
            line: 4,
        },
        Case {
            code: "def h(\n    a: dict[str, int] = {'k': 1},  # comment (\n    b=\"x, y\",\n):\n    r\"\"\"Raw \\d doc.\"\"\"\n",
            source: "def h(\n    a: dict[str, int] = {'k': 1},  # comment (\n    b=\"x, y\",\n):\n    r\"\"\"Raw \\d doc.\"\"\"",
            name: "h",
            params: vec![
                param("a", ParamKind::Regular, Some("dict[str, int]"), Some("{'k': 1}")),
                param("b", ParamKind::Regular, None, Some("\"x, y\"")),
            ],
            docstring: Some("Raw \\d doc."),
            decorators: vec![],
            is_async: false,
            line: 1,
        },
        Case {
            code: "def k(a,\\\n      b): \"one\" 'two'; return a\n",
            source: "def k(a,\\\n      b): \"one\" 'two'; return a",
            name: "k",
            params: vec![regular("a"), regular("b")],
            docstring: Some("onetwo"),
            decorators: vec![],
            is_async: false,
            line: 1,
        },
        Case {
            code: "def n(x):\n    f\"not {x} a docstring\"\n",
            source: "def n(x):\n    f\"not {x} a docstring\"",
            name: "n",
            params: vec![regular("x")],
            docstring: None,
            decorators: vec![],
            is_async: false,
            line: 1,
        },
        Case {
            code: "def m(x):\n    \"strip\".strip()\n",
            source: "def m(x):\n    \"strip\".strip()",
            name: "m",
            params: vec![regular("x")],
            docstring: None,
            decorators: vec![],
            is_async: false,
            line: 1,
        },
    ];
    for case in cases {
        let analysis = parse_code(case.code);
        assert!(
            analysis.issues.is_empty(),
            "{}: {:?}",
            case.code,
            analysis.issues
        );
        assert_eq!(analysis.defs.len(), 1, "{}", case.code);
        let def = &analysis.defs[0];
        assert_source(case.code, def, case.source);
        assert_eq!(def.name, case.name);
        assert_eq!(def.params, case.params, "{}", case.code);
        assert_eq!(def.docstring.as_deref(), case.docstring, "{}", case.code);
        assert_eq!(def.decorators, case.decorators);
        assert_eq!(def.is_async, case.is_async);
        assert_eq!(def.line, case.line);
    }
}

#[test]
fn return_annotation_and_positional_only() {
    let analysis = parse_code("def f(a, b, /, c) -> Optional[list[int]]:\n    pass\n");
    let def = &analysis.defs[0];
    assert_eq!(def.positional_only, 2);
    assert_eq!(def.returns.as_deref(), Some("Optional[list[int]]"));
}

#[test]
fn strings_and_comments_containing_def_are_not_definitions() {
    let code = "s = 'def fake(x):'\n# def commented(y):\nt = \"\"\"\ndef in_doc():\n    pass(\n\"\"\"\ndef real():\n    return s.count('(')  # def (\n";
    let analysis = parse_code(code);
    assert!(analysis.issues.is_empty(), "{:?}", analysis.issues);
    let names: Vec<&str> = analysis.defs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, vec!["real"]);
    assert_source(
        code,
        &analysis.defs[0],
        "def real():\n    return s.count('(')  # def (",
    );
    assert_eq!(calls(&analysis), vec![("s.count", 8, Some(0))]);
}

#[test]
fn tabs_nested_defs_and_classes() {
    let code = "def outer(a):\n\tdef inner(y):\n\t\treturn helper(y)\n\tif a:\n\t\treturn inner(a)\n\treturn 0\nclass C:\n    def method(self):\n        return k()\nouter(1)\n";
    let analysis = parse_code(code);
    assert!(analysis.issues.is_empty(), "{:?}", analysis.issues);
    assert_eq!(analysis.defs.len(), 1);
    assert_source(
        code,
        &analysis.defs[0],
        "def outer(a):\n\tdef inner(y):\n\t\treturn helper(y)\n\tif a:\n\t\treturn inner(a)\n\treturn 0",
    );
    assert_eq!(
        calls(&analysis),
        vec![
            ("helper", 3, Some(0)),
            ("inner", 5, Some(0)),
            ("k", 9, None),
            ("outer", 10, None),
        ]
    );
}

#[test]
fn comment_at_column_zero_does_not_end_a_body() {
    let code = "def f():\n    a = 1\n# note\n\n    return g(a)\n    # trailing\nf()\n";
    let analysis = parse_code(code);
    assert_source(
        code,
        &analysis.defs[0],
        "def f():\n    a = 1\n# note\n\n    return g(a)",
    );
    assert_eq!(calls(&analysis), vec![("g", 5, Some(0)), ("f", 7, None)]);
}

#[test]
fn crlf_line_endings() {
    let code = "def f(x):\r\n    \"\"\"Doc.\"\"\"\r\n    return g(x)\r\n\r\nf(1)\r\n";
    let analysis = parse_code(code);
    assert!(analysis.issues.is_empty(), "{:?}", analysis.issues);
    assert_source(
        code,
        &analysis.defs[0],
        "def f(x):\r\n    \"\"\"Doc.\"\"\"\r\n    return g(x)",
    );
    assert_eq!(analysis.defs[0].docstring.as_deref(), Some("Doc."));
    assert_eq!(calls(&analysis), vec![("g", 3, Some(0)), ("f", 5, None)]);
    let response = parse_response("Plan.\r\n```python\r\nf(2)\r\n```\r\n");
    assert_eq!(response.code, "f(2)\r\n");
    assert!(response.blocks[0].terminated);
}

#[test]
fn call_forms() {
    let code = "x = apis . spotify.\\\n    login(u)\nif (a): pass\nreturn (b)\ny = obj[0].method() + g().h() + \"s\".join(l)\nprint(f\"{total(a, 3):.2f} {b!r} {{lit(x)}} {f'{inner(1)}'}\")\n@register(\"n\")\nclass K(Base): pass\n";
    let analysis = parse_code(code);
    assert_eq!(
        calls(&analysis),
        vec![
            ("apis.spotify.login", 1, None),
            ("g", 5, None),
            ("print", 6, None),
            ("total", 6, None),
            ("inner", 6, None),
            ("register", 7, None),
        ]
    );
    assert_eq!(
        &code[analysis.calls[0].span.clone()],
        "apis . spotify.\\\n    login"
    );
}

#[test]
fn decorator_calls_belong_to_their_definition() {
    let code = "@app.route(path('/x'))\ndef view():\n    return render()\n@orphan()\nx = 1\n";
    let analysis = parse_code(code);
    assert_eq!(
        calls(&analysis),
        vec![
            ("app.route", 1, Some(0)),
            ("path", 1, Some(0)),
            ("render", 3, Some(0)),
            ("orphan", 4, None),
        ]
    );
    assert_eq!(
        issue_kinds(&analysis),
        vec![(4, IssueKind::OrphanDecorator)]
    );
    assert_eq!(analysis.defs[0].decorators, vec!["app.route(path('/x'))"]);
}

#[test]
fn several_blocks_are_joined_in_order() {
    let text = "First:\n```python\ndef a():\n    return 1\n```\nsome JSON:\n```json\n{\"f\": g()}\n```\nthen\n```py\nprint(a())\n```\n```starlark\nb = a()\n```\n```\nc(1)\n```";
    let response = parse_response(text);
    let languages: Vec<&str> = response
        .blocks
        .iter()
        .map(|b| b.language.as_str())
        .collect();
    assert_eq!(languages, vec!["python", "json", "py", "starlark", ""]);
    assert_eq!(
        response.code,
        "def a():\n    return 1\nprint(a())\nb = a()\nc(1)\n"
    );
    assert_eq!(
        calls(&response.analysis),
        vec![
            ("print", 3, None),
            ("a", 3, None),
            ("a", 4, None),
            ("c", 5, None)
        ]
    );
    let unterminated_first = parse_response("```python\nx = a()\n~~~\ny = b()\n~~~\n");
    assert_eq!(unterminated_first.code, "x = a()\n~~~\ny = b()\n~~~\n");
}

#[test]
fn closing_fence_must_stand_alone() {
    let response = parse_response("```py\nprint(a())```\nmore()\n```\n");
    assert_eq!(response.blocks.len(), 1);
    assert_eq!(response.code, "print(a())```\nmore()\n");
}

#[test]
fn no_fence_means_no_code() {
    let text = "def f(x):\n    return x\n";
    let response = parse_response(text);
    assert!(response.blocks.is_empty());
    assert!(response.code.is_empty());
    assert!(!response.has_code());
    assert_eq!(response.analysis, CodeAnalysis::default());
    assert_eq!(parse_code(text).defs[0].name, "f");
}

#[test]
fn unterminated_fence_runs_to_the_end_and_is_flagged() {
    let text = "Let me try.\n```python\ndef f():\n    return apis.x.y()\n";
    let response = parse_response(text);
    assert_eq!(response.blocks.len(), 1);
    assert!(!response.blocks[0].terminated);
    assert_eq!(
        response.blocks[0].span,
        text.find("def f").unwrap()..text.len()
    );
    assert_eq!(response.issues.len(), 1);
    assert_eq!(response.issues[0].kind, IssueKind::UnterminatedFence);
    assert_eq!(response.issues[0].line, 2);
    assert_eq!(
        response.issues[0].to_string(),
        "line 2: code fence is never closed"
    );
    assert_eq!(response.analysis.defs[0].name, "f");
    assert_eq!(calls(&response.analysis), vec![("apis.x.y", 2, Some(0))]);
}

#[test]
fn indented_fence_in_a_list() {
    let text = "1. Define it:\n   ```python\n   def f(a):\n       return g(a)\n   ```\n";
    let response = parse_response(text);
    assert_eq!(response.code, "def f(a):\n    return g(a)\n");
    assert!(response.analysis.issues.is_empty());
    assert_eq!(
        response.analysis.defs[0].source(&response.code),
        "def f(a):\n    return g(a)"
    );
}

#[test]
fn empty_and_blank_input() {
    for text in ["", "\n", "   ", "```\n```", "```python\n```\n"] {
        let response = parse_response(text);
        assert!(!response.has_code(), "{text:?}");
        assert!(response.analysis.defs.is_empty());
        assert!(response.analysis.calls.is_empty());
        assert!(response.analysis.issues.is_empty());
    }
    assert_eq!(parse_code(""), CodeAnalysis::default());
    let (text, response) = parse_response_bytes(b"");
    assert_eq!(text, "");
    assert_eq!(response, ResponseAnalysis::default());
}

#[test]
fn non_utf8_bytes_are_decoded_lossily() {
    let bytes = b"Thought \xff\xfe.\n```python\ndef f(\xc3):\n    return g('\xe2\x82')\n```\n";
    let (text, response) = parse_response_bytes(bytes);
    assert!(text.contains('\u{FFFD}'));
    let block = &response.blocks[0];
    assert!(text.is_char_boundary(block.span.start) && text.is_char_boundary(block.span.end));
    let def = &response.analysis.defs[0];
    assert_eq!(def.name, "f");
    assert_eq!(def.params, vec![regular("\u{FFFD}")]);
    assert_eq!(calls(&response.analysis), vec![("g", 2, Some(0))]);
}

#[test]
fn malformed_input_yields_issues_and_best_effort_results() {
    struct Case {
        code: &'static str,
        issues: Vec<(u32, IssueKind)>,
        defs: Vec<&'static str>,
    }
    let cases = vec![
        Case {
            code: "x = f(1,\n\ndef g():\n    pass\n",
            issues: vec![(1, IssueKind::UnclosedBracket('('))],
            defs: vec!["g"],
        },
        Case {
            code: "s = 'abc\ndef g(): pass\n",
            issues: vec![(1, IssueKind::UnterminatedString)],
            defs: vec!["g"],
        },
        Case {
            code: "def f():\n    \"\"\"never closed\n    return 1\n",
            issues: vec![(2, IssueKind::UnterminatedString)],
            defs: vec!["f"],
        },
        Case {
            code: "def f(x)\n    return x\n",
            issues: vec![
                (1, IssueKind::DefMissingColon),
                (2, IssueKind::UnexpectedIndent),
            ],
            defs: vec!["f"],
        },
        Case {
            code: "def f():\n        a = 1\n    b = 2\n",
            issues: vec![(3, IssueKind::InconsistentDedent)],
            defs: vec!["f"],
        },
        Case {
            code: "def f():\nreturn 1\n",
            issues: vec![(2, IssueKind::ExpectedIndentedBlock)],
            defs: vec!["f"],
        },
        Case {
            code: "def f():\n",
            issues: vec![(2, IssueKind::ExpectedIndentedBlock)],
            defs: vec!["f"],
        },
        Case {
            code: "def f():\n\tif a:\n        \treturn 1\n",
            issues: vec![],
            defs: vec!["f"],
        },
        Case {
            code: "if a:\n\tb = 1\n        c = 2\n",
            issues: vec![(3, IssueKind::InconsistentTabs)],
            defs: vec![],
        },
        Case {
            code: "x = (1]\ny = 2)\nz = 1 \\ 2\n",
            issues: vec![
                (
                    1,
                    IssueKind::MismatchedBracket {
                        open: '(',
                        close: ']',
                    },
                ),
                (2, IssueKind::UnmatchedBracket(')')),
                (3, IssueKind::StrayBackslash),
            ],
            defs: vec![],
        },
        Case {
            code: "def (x):\n    pass\ndef g:\n    pass\n",
            issues: vec![
                (1, IssueKind::DefMissingName),
                (3, IssueKind::DefMissingParameters),
            ],
            defs: vec!["g"],
        },
        Case {
            code: "def f(a, 1, b c):\n    pass\n",
            issues: vec![(1, IssueKind::BadParameter), (1, IssueKind::BadParameter)],
            defs: vec!["f"],
        },
        Case {
            code: "@dec\n\n",
            issues: vec![(1, IssueKind::OrphanDecorator)],
            defs: vec![],
        },
        Case {
            code: "    def f():\n        return 1\n",
            issues: vec![(1, IssueKind::UnexpectedIndent)],
            defs: vec!["f"],
        },
    ];
    for case in cases {
        let analysis = parse_code(case.code);
        assert_eq!(issue_kinds(&analysis), case.issues, "{:?}", case.code);
        let names: Vec<&str> = analysis.defs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, case.defs, "{:?}", case.code);
    }
}

#[test]
fn issues_display_clearly_and_are_capped() {
    let analysis = parse_code("def f():\n        a = 1\n    b = 2\n");
    assert_eq!(
        analysis.issues[0].to_string(),
        "line 3: unindent does not match any outer indentation level"
    );
    let analysis = parse_code(&")\n".repeat(1000));
    assert_eq!(analysis.issues.len(), MAX_ISSUES + 1);
    assert_eq!(analysis.issues[MAX_ISSUES].kind, IssueKind::TooManyIssues);
    assert_eq!(analysis.issues[0].to_string(), "line 1: unmatched ')'");
}

#[test]
fn redefinitions_and_used_skills_against_a_library() {
    let saved = parse_code("def total(a):\n    return a\n\ndef other():\n    pass\n");
    let saved_code = "def total(a):\n    return a\n\ndef other():\n    pass\n";
    let mut library = HashSkillLibrary::new();
    for def in &saved.defs {
        library
            .insert(Skill::from_def(def, saved_code, Origin::default()))
            .unwrap();
    }
    let code =
        "def total(a, b):\n    return a + b\nprint(total(1, 2), other(), other(), missing())\n";
    let analysis = parse_code(code);
    let redefined: Vec<&str> = redefinitions(&analysis, &library)
        .into_iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(redefined, vec!["total"]);
    assert_eq!(used_skills(&analysis, &library), vec!["other"]);
    let dynamic: &dyn SkillLibrary = &library;
    assert_eq!(redefinitions(&analysis, dynamic).len(), 1);
    assert!(analysis.defines("total"));
    assert_eq!(analysis.calls_to("other").count(), 2);
}

#[test]
fn find_code_blocks_reports_spans() {
    let text = "a\n```python\nx = 1\n```\n";
    let blocks = find_code_blocks(text);
    assert_eq!(blocks[0].span, 12..18);
    assert_eq!(blocks[0].outer, 2..21);
}

// ---------------------------------------------------------------------------------
// Totality.

/// A small deterministic xorshift64* generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const SNIPPETS: &[&[u8]] = &[
    b"\"",
    b"'",
    b"\"\"\"",
    b"'''",
    b"(",
    b")",
    b"[",
    b"]",
    b"{",
    b"}",
    b"\n",
    b"\r\n",
    b"\r",
    b"\t",
    b"    ",
    b"\\",
    b"\\\n",
    b"```",
    b"```python\n",
    b"~~~",
    b"def ",
    b"async def ",
    b"class ",
    b"@",
    b":",
    b"#",
    b"f\"{",
    b"rb'",
    b"}",
    b"\xff",
    b"\xe2\x82",
    b"\xc3\xa9",
    b"->",
    b"*",
    b"**",
    b"/",
    b",",
    b"=",
    b".",
    b"lambda ",
    b"\x0c",
    b"\0",
];

fn seeds() -> Vec<Vec<u8>> {
    let mut seeds = vec![
        AGENT_RESPONSE.as_bytes().to_vec(),
        b"Use the skill.\n```py\nresult = spotify_top_songs(genre='jazz', limit=5)\nprint(result)\n```".to_vec(),
        b"```python\n@cache\nasync def f(a, /, b: int = 3, *args, c, **kw) -> dict:\n\t'''Doc.'''\n\tdef g(): return h(a)\n\treturn {k: v for k, v in kw.items()}\n```\n```json\n{}\n```".to_vec(),
        b"Thought: update the skill.\r\n```python\r\ndef total(x,\r\n          y=(1,\r\n             2)):\r\n    s = f\"{x!r:>{y}} {{}} {apis.a.b(x)}\"\r\n    return s \\\r\n        + t(y)\r\n```\r\n".to_vec(),
    ];
    seeds.push(seeds.concat());
    seeds
}

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(input.len() + 1);
        match rng.below(6) {
            0 if !input.is_empty() => {
                let i = rng.below(input.len());
                input[i] = rng.next() as u8;
            }
            1 => {
                let snippet = SNIPPETS[rng.below(SNIPPETS.len())];
                input.splice(at..at, snippet.iter().copied());
            }
            2 => {
                let end = (at + rng.below(64)).min(input.len());
                input.drain(at..end);
            }
            3 => {
                let donor = &seeds[rng.below(seeds.len())];
                let from = rng.below(donor.len());
                let to = (from + rng.below(256)).min(donor.len());
                input.splice(at..at, donor[from..to].iter().copied());
            }
            4 => input.truncate(at),
            _ => {
                let indent: &[u8] = if rng.below(2) == 0 { b"    " } else { b"\t" };
                let line_start = input[..at]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                input.splice(line_start..line_start, indent.iter().copied());
            }
        }
    }
}

fn check_span(text: &str, span: &std::ops::Range<usize>, what: &str) {
    assert!(
        span.start <= span.end && span.end <= text.len(),
        "{what} span {span:?} out of bounds"
    );
    assert!(
        text.is_char_boundary(span.start) && text.is_char_boundary(span.end),
        "{what} span {span:?} not on char boundaries"
    );
}

fn check_analysis(code: &str, analysis: &CodeAnalysis) {
    let lines = code.len() as u64 + 2;
    for def in &analysis.defs {
        check_span(code, &def.span, "def");
        let source = def.source(code);
        assert!(
            source.starts_with("def") || source.starts_with("async") || source.starts_with('@'),
            "def source {source:?}"
        );
        assert!(!def.name.is_empty());
        assert!(def.line >= 1 && u64::from(def.line) <= lines);
        assert!(def.positional_only <= def.params.len());
    }
    for CallSite {
        callee,
        span,
        line,
        enclosing_def,
    } in &analysis.calls
    {
        check_span(code, span, "call");
        assert!(!callee.is_empty());
        assert!(*line >= 1 && u64::from(*line) <= lines);
        assert!(enclosing_def.is_none_or(|i| i < analysis.defs.len()));
    }
    assert!(analysis.issues.len() <= MAX_ISSUES + 1);
    assert!(analysis
        .issues
        .iter()
        .all(|i| i.line >= 1 && u64::from(i.line) <= lines));
}

fn check_response(bytes: &[u8]) {
    let (text, response) = parse_response_bytes(bytes);
    for block in &response.blocks {
        check_span(&text, &block.span, "block");
        check_span(&text, &block.outer, "block outer");
        assert!(block.outer.start <= block.span.start && block.span.end <= text.len());
    }
    check_analysis(&response.code, &response.analysis);
    check_analysis(&text, &parse_code(&text));
}

#[test]
fn never_panics_on_mutated_responses() {
    let seeds = seeds();
    let scale = if cfg!(debug_assertions) { 10 } else { 1 };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (max_len, iterations) in [(48usize, 150_000), (400, 60_000), (usize::MAX, 12_000)] {
        for _ in 0..iterations / scale {
            let seed = &seeds[rng.below(seeds.len())];
            let start = rng.below(seed.len());
            let end = start.saturating_add(max_len).min(seed.len());
            let mut input = seed[start..end].to_vec();
            mutate(&mut rng, &mut input, &seeds);
            check_response(&input);
        }
    }
}

#[test]
fn pathological_inputs_finish() {
    const N: usize = 1 << 20;
    let pyramid: String = (0..1000)
        .map(|i| format!("{}if x:\n", " ".repeat(i)))
        .collect();
    let zigzag = "if x:\n    y()\n".repeat(N / 14);
    let inputs: Vec<String> = vec![
        "(".repeat(N),
        ")".repeat(N),
        "\"\"\"".repeat(N / 3),
        "'".repeat(N),
        "`".repeat(N),
        "```\n".repeat(N / 4),
        format!("```python\n{}", "(".repeat(N)),
        format!("{pyramid}z()\n"),
        zigzag,
        "def f(\n".repeat(N / 7),
        "@d\n".repeat(N / 3),
        format!("{}(", "a.".repeat(N / 2)),
        format!("def f({}):\n    pass\n", "a,".repeat(N / 2)),
        "\\\n".repeat(N / 2),
        "#".repeat(N),
        "\r".repeat(N),
        "\t".repeat(N),
        format!("f\"{}\"", "{".repeat(N)),
        "f'{f\"{f'''{f\"\"\"{x(".repeat(N / 20),
        "x = [\n".repeat(N / 6),
        "def f():\n    \"\"\"doc\"\"\"\n".repeat(N / 24),
    ];
    for input in &inputs {
        check_response(input.as_bytes());
        let fenced = format!("```python\n{input}\n```\n");
        check_response(fenced.as_bytes());
    }
}
