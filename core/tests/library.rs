//! Tests of the skill library: order, replacement, counters, serde, postcard robustness
//! and the JSON lines format.

use sage_core::skill::library::JsonlProblem;
use sage_core::skill::{HashSkillLibrary, LibraryError, SkillLibrary};
use sage_core::{Origin, Param, ParamKind, Skill, SkillStats};

fn skill(name: &str, task: &str) -> Skill {
    Skill {
        name: name.into(),
        params: vec![Param {
            name: "who".into(),
            kind: ParamKind::Regular,
            annotation: Some("str".into()),
            default: None,
        }],
        docstring: Some(format!("Does {name}.")),
        source: format!("def {name}(who: str):\n    \"\"\"Does {name}.\"\"\"\n    return who\n"),
        origin: Origin {
            scenario_id: format!("scenario-{task}"),
            task_id: task.into(),
        },
        stats: SkillStats::default(),
        revision: 0,
    }
}

fn names(library: &dyn SkillLibrary) -> Vec<&str> {
    library.skills().iter().map(|s| s.name.as_str()).collect()
}

fn library_of(names: &[&str]) -> HashSkillLibrary {
    let mut library = HashSkillLibrary::new();
    for (i, name) in names.iter().enumerate() {
        library.insert(skill(name, &format!("t{i}"))).unwrap();
    }
    library
}

/// Every name's position agrees with the slice, and lookups agree with the slice.
fn assert_consistent(library: &HashSkillLibrary) {
    for (i, s) in library.skills().iter().enumerate() {
        assert_eq!(library.position(&s.name), Some(i));
        assert_eq!(library.get(&s.name), Some(s));
    }
    assert_eq!(library.len(), library.skills().len());
}

/// A deterministic xorshift64 generator.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}

#[test]
fn insertion_order_is_kept_across_replace_and_remove() {
    let mut library = library_of(&["a", "b", "c", "d"]);
    assert_eq!(names(&library), ["a", "b", "c", "d"]);

    let old = library.insert(skill("b", "t9")).unwrap().unwrap();
    assert_eq!(old.origin.task_id, "t1");
    assert_eq!(names(&library), ["a", "b", "c", "d"]);
    assert_eq!(library.get("b").unwrap().origin.task_id, "t9");

    assert_eq!(library.remove("a").unwrap().name, "a");
    assert_eq!(names(&library), ["b", "c", "d"]);
    assert_consistent(&library);

    assert!(library.remove("a").is_none());
    library.insert(skill("a", "t10")).unwrap();
    assert_eq!(names(&library), ["b", "c", "d", "a"]);
    library.remove("c");
    assert_eq!(names(&library), ["b", "d", "a"]);
    assert_consistent(&library);
    assert!(!library.contains("c"));
    assert!(library.get("c").is_none());
}

#[test]
fn many_removals_keep_index_consistent() {
    let all: Vec<String> = (0..50).map(|i| format!("f{i}")).collect();
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let mut library = library_of(&refs);
    let mut expected = all.clone();
    let mut rng = XorShift(7);
    while !expected.is_empty() {
        let gone = expected.remove(rng.below(expected.len()));
        assert!(library.remove(&gone).is_some());
        assert_eq!(names(&library), expected);
        assert_consistent(&library);
    }
    assert!(library.is_empty());
}

#[test]
fn replacement_bumps_revision() {
    let mut library = library_of(&["f"]);
    assert_eq!(library.get("f").unwrap().revision, 0);
    let mut newer = skill("f", "t1");
    newer.revision = 40;
    library.insert(newer).unwrap();
    assert_eq!(library.get("f").unwrap().revision, 1);
    library.insert(skill("f", "t2")).unwrap();
    assert_eq!(library.get("f").unwrap().revision, 2);
    assert_eq!(library.len(), 1);
}

#[test]
fn counters_count_and_survive_replacement() {
    let mut library = library_of(&["f", "g"]);
    library.record_retrieved("f").unwrap();
    library.record_retrieved("f").unwrap();
    library.record_used("f", true).unwrap();
    library.record_used("f", false).unwrap();
    let stats = library.get("f").unwrap().stats;
    assert_eq!(
        stats,
        SkillStats {
            retrieved: 2,
            used: 2,
            used_in_success: 1
        }
    );
    assert_eq!(library.get("g").unwrap().stats, SkillStats::default());

    let mut newer = skill("f", "t5");
    newer.stats.retrieved = 3;
    library.insert(newer).unwrap();
    let stats = library.get("f").unwrap().stats;
    assert_eq!(
        (stats.retrieved, stats.used, stats.used_in_success),
        (5, 2, 1)
    );

    assert_eq!(
        library.record_used("nope", true),
        Err(LibraryError::UnknownSkill {
            name: "nope".into()
        })
    );
    assert!(library.record_retrieved("nope").is_err());
}

#[test]
fn empty_name_is_refused() {
    let mut library = HashSkillLibrary::new();
    assert_eq!(
        library.insert(skill("", "t0")),
        Err(LibraryError::EmptyName)
    );
    assert!(library.is_empty());
}

#[test]
fn works_through_dyn_and_generic_bounds() {
    fn count_generic<L: SkillLibrary + ?Sized>(library: &L) -> usize {
        library.skills().len()
    }
    let mut library = library_of(&["a", "b"]);
    let dynamic: &mut dyn SkillLibrary = &mut library;
    dynamic.insert(skill("c", "t2")).unwrap();
    dynamic.record_retrieved("c").unwrap();
    assert_eq!(count_generic(dynamic), 3);
    assert!(dynamic.contains("c"));
}

#[test]
fn from_skills_validates_names() {
    let ok = HashSkillLibrary::from_skills(vec![skill("a", "t0"), skill("b", "t1")]).unwrap();
    assert_eq!(names(&ok), ["a", "b"]);
    assert_eq!(
        HashSkillLibrary::from_skills(vec![skill("a", "t0"), skill("a", "t1")]),
        Err(LibraryError::DuplicateName { name: "a".into() })
    );
    assert_eq!(
        HashSkillLibrary::from_skills(vec![skill("", "t0")]),
        Err(LibraryError::EmptyName)
    );
}

#[test]
fn into_skills_gives_the_skills_in_insertion_order() {
    let library = library_of(&["z", "a", "m"]);
    let skills = library.into_skills();
    let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["z", "a", "m"]);
}

#[test]
fn serde_sees_only_the_ordered_skills() {
    let mut library = library_of(&["z", "a", "m"]);
    library.record_used("a", true).unwrap();
    let json = serde_json::to_string(&library).unwrap();
    let as_list: Vec<Skill> = serde_json::from_str(&json).unwrap();
    assert_eq!(as_list, library.skills());
    let back: HashSkillLibrary = serde_json::from_str(&json).unwrap();
    assert_eq!(back, library);
    assert_consistent(&back);

    let duplicate = serde_json::to_string(&vec![skill("a", "t0"), skill("a", "t1")]).unwrap();
    let err = serde_json::from_str::<HashSkillLibrary>(&duplicate).unwrap_err();
    assert!(
        err.to_string().contains("duplicate skill name `a`"),
        "{err}"
    );
    let empty = serde_json::to_string(&vec![skill("", "t0")]).unwrap();
    assert!(serde_json::from_str::<HashSkillLibrary>(&empty).is_err());
}

#[test]
fn postcard_round_trip() {
    let mut library = library_of(&["send_money", "list_songs", "total_received"]);
    library.insert(skill("list_songs", "t7")).unwrap();
    library.record_used("send_money", true).unwrap();
    let blob = library.to_postcard();
    let back = HashSkillLibrary::from_postcard(&blob).unwrap();
    assert_eq!(back, library);
    assert_eq!(back.get("list_songs").unwrap().revision, 1);
    assert_consistent(&back);

    let empty = HashSkillLibrary::new();
    assert_eq!(
        HashSkillLibrary::from_postcard(&empty.to_postcard()).unwrap(),
        empty
    );
}

#[test]
fn every_truncation_is_an_error() {
    let blob = library_of(&["a", "bb", "ccc"]).to_postcard();
    for end in 0..blob.len() {
        let result = HashSkillLibrary::from_postcard(&blob[..end]);
        assert!(
            matches!(result, Err(LibraryError::CorruptPostcard { .. })),
            "prefix of {end} bytes: {result:?}"
        );
    }
    let message = HashSkillLibrary::from_postcard(&blob[..blob.len() / 2])
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("corrupt or truncated postcard blob: "),
        "{message}"
    );
}

#[test]
fn trailing_bytes_are_an_error() {
    let mut blob = library_of(&["a"]).to_postcard();
    blob.extend_from_slice(&[0, 0]);
    assert_eq!(
        HashSkillLibrary::from_postcard(&blob),
        Err(LibraryError::TrailingBytes { count: 2 })
    );
}

#[test]
fn duplicate_name_blob_is_rejected() {
    let blob =
        postcard::to_allocvec(&vec![skill("a", "t0"), skill("b", "t1"), skill("a", "t2")]).unwrap();
    assert_eq!(
        HashSkillLibrary::from_postcard(&blob),
        Err(LibraryError::DuplicateName { name: "a".into() })
    );
}

#[test]
fn random_corruptions_never_panic() {
    let blob = library_of(&["send_money", "list_songs", "total_received", "x"]).to_postcard();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let mut bytes = blob.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(bytes.len());
            match rng.below(4) {
                0 => bytes[at] = rng.next() as u8,
                1 => bytes[at] ^= 1 << rng.below(8),
                2 => {
                    bytes.remove(at);
                }
                _ => bytes.insert(at, rng.next() as u8),
            }
            if bytes.is_empty() {
                break;
            }
        }
        if let Ok(library) = HashSkillLibrary::from_postcard(&bytes) {
            accepted += 1;
            assert_consistent(&library);
            assert!(library.skills().iter().all(|s| !s.name.is_empty()));
            assert_eq!(
                HashSkillLibrary::from_postcard(&library.to_postcard()).as_ref(),
                Ok(&library)
            );
        }
    }
    assert!(accepted < 20_000);
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = XorShift(12345);
    for _ in 0..20_000 {
        let len = rng.below(64);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let _ = HashSkillLibrary::from_postcard(&bytes);
    }
    // A huge declared count with no data behind it.
    let _ = HashSkillLibrary::from_postcard(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
}

#[test]
fn jsonl_export_format() {
    let library = library_of(&["f"]);
    let text = library.to_jsonl();
    let expected = concat!(
        r#"{"task_id":"t0","name":"f","function":"def f(who: str):\n    \"\"\"Does f.\"\"\"\n    return who\n"}"#,
        "\n"
    );
    assert_eq!(text, expected);
    assert_eq!(HashSkillLibrary::new().to_jsonl(), "");
}

#[test]
fn jsonl_round_trip() {
    let library = library_of(&["send_money", "list_songs", "total_received"]);
    let text = library.to_jsonl();
    let back = HashSkillLibrary::from_jsonl(&text, |task| format!("scenario-{task}")).unwrap();
    assert_eq!(back, library);
}

#[test]
fn jsonl_import_takes_params_and_docstring_from_the_source() {
    let text = concat!(
        r#"{"task_id": "t1", "name": "pay", "extra": 1, "function": "import math\ndef helper(x):\n    return x\n\ndef pay(to: str, amount: float = 1.0):\n    \"\"\"Pays someone.\"\"\"\n    return helper(amount)\n"}"#,
        "\n\n"
    );
    let library = HashSkillLibrary::from_jsonl(text, |_| String::new()).unwrap();
    let pay = library.get("pay").unwrap();
    assert_eq!(pay.docstring.as_deref(), Some("Pays someone."));
    let params: Vec<&str> = pay.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(params, ["to", "amount"]);
    assert_eq!(pay.params[1].default.as_deref(), Some("1.0"));
    assert!(pay.source.starts_with("import math\n"));
    assert_eq!(
        pay.origin,
        Origin {
            scenario_id: String::new(),
            task_id: "t1".into()
        }
    );
    assert_eq!(library.len(), 1);
}

fn jsonl_error(text: &str) -> (usize, JsonlProblem, String) {
    match HashSkillLibrary::from_jsonl(text, |_| String::new()) {
        Err(err @ LibraryError::BadJsonlLine { .. }) => {
            let message = err.to_string();
            let LibraryError::BadJsonlLine { line, problem } = err else {
                unreachable!()
            };
            (line, problem, message)
        }
        other => panic!("expected a bad line, got {other:?}"),
    }
}

#[test]
fn jsonl_malformed_lines_name_the_line_and_the_problem() {
    let (line, problem, message) = jsonl_error("  \n{not json\n");
    assert_eq!(line, 2);
    assert!(matches!(problem, JsonlProblem::InvalidJson { .. }));
    assert!(
        message.starts_with("bad JSONL line 2: not valid JSON"),
        "{message}"
    );

    let (line, problem, message) = jsonl_error("\n\n[1, 2]\n");
    assert_eq!((line, problem), (3, JsonlProblem::NotAnObject));
    assert_eq!(message, "bad JSONL line 3: not a JSON object");

    let (line, problem, message) = jsonl_error(r#"{"task_id": "t", "function": "def f(): pass"}"#);
    assert_eq!(
        (line, problem),
        (1, JsonlProblem::MissingField { field: "name" })
    );
    assert_eq!(message, "bad JSONL line 1: missing field `name`");

    let (line, problem, _) = jsonl_error(r#"{"name": "f", "function": "def f(): pass"}"#);
    assert_eq!(
        (line, problem),
        (1, JsonlProblem::MissingField { field: "task_id" })
    );

    let (line, problem, _) = jsonl_error(r#"{"task_id": "t", "name": "f"}"#);
    assert_eq!(
        (line, problem),
        (1, JsonlProblem::MissingField { field: "function" })
    );

    let (line, problem, message) =
        jsonl_error(r#"{"task_id": 7, "name": "f", "function": "def f(): pass"}"#);
    assert_eq!(
        (line, problem),
        (1, JsonlProblem::NotAString { field: "task_id" })
    );
    assert_eq!(message, "bad JSONL line 1: field `task_id` is not a string");

    let (line, problem, _) = jsonl_error(r#"{"task_id": "t", "name": "", "function": ""}"#);
    assert_eq!((line, problem), (1, JsonlProblem::EmptyName));

    let (line, problem, message) = jsonl_error(concat!(
        "\n",
        r#"{"task_id": "t", "name": "g", "function": "def h():\n    def g():\n        pass\n"}"#
    ));
    assert_eq!(
        (line, problem),
        (2, JsonlProblem::NotDefined { name: "g".into() })
    );
    assert_eq!(
        message,
        "bad JSONL line 2: the function does not define `g`"
    );
}

#[test]
fn jsonl_duplicate_name_is_an_error() {
    let good = r#"{"task_id": "t", "name": "f", "function": "def f():\n    pass\n"}"#;
    let (line, problem, message) = jsonl_error(&format!("{good}\n\n{good}\n"));
    assert_eq!(
        (line, problem),
        (3, JsonlProblem::DuplicateName { name: "f".into() })
    );
    assert!(message.starts_with("bad JSONL line 3: "), "{message}");
}
