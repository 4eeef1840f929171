//! Tests of retrieval: words, hand-computed Jaccard values, the n-gram index against brute
//! force, same-scenario selection, cosine and the embedding index, the hashing embedder,
//! retrieval modes and the retriever.

use std::num::NonZeroUsize;

use sage_core::retrieval::{
    cosine, jaccard, same_scenario, words, Embedder, EmbeddingIndex, HashingEmbedder, Hit,
    IndexError, NgramIndex, RetrievalError, RetrievalMode, Retriever,
};
use sage_core::skill::{HashSkillLibrary, SkillLibrary};
use sage_core::{Origin, Skill, SkillStats, Task};

fn n(value: usize) -> NonZeroUsize {
    NonZeroUsize::new(value).unwrap()
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() < 1e-6
}

fn hit_names(hits: &[Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.name.as_str()).collect()
}

fn skill(name: &str, scenario: &str, task: &str, source: &str) -> Skill {
    Skill {
        name: name.into(),
        params: Vec::new(),
        docstring: None,
        source: source.into(),
        origin: Origin {
            scenario_id: scenario.into(),
            task_id: task.into(),
        },
        stats: SkillStats::default(),
        revision: 0,
    }
}

fn task(id: &str, scenario: &str, instruction: &str) -> Task {
    Task {
        id: id.into(),
        scenario_id: scenario.into(),
        instruction: instruction.into(),
    }
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
fn words_are_lowercased_alphanumeric_runs() {
    assert_eq!(
        words("Send $20 to Bob's_account, NOW! Café"),
        ["send", "20", "to", "bob", "s", "account", "now", "café"]
    );
    assert!(words(" ,.!? ").is_empty());
}

#[test]
fn jaccard_hand_computed() {
    let (a, b) = ("a b c d", "b c d e");
    // unigrams {a,b,c,d} vs {b,c,d,e}: 3 shared of 5.
    assert!(close(jaccard(a, b, n(1)), 3.0 / 5.0));
    // bigrams {ab,bc,cd} vs {bc,cd,de}: 2 of 4.
    assert!(close(jaccard(a, b, n(2)), 2.0 / 4.0));
    // trigrams {abc,bcd} vs {bcd,cde}: 1 of 3.
    assert!(close(jaccard(a, b, n(3)), 1.0 / 3.0));
    // 4-grams {abcd} vs {bcde}: nothing shared.
    assert_eq!(jaccard(a, b, n(4)), 0.0);
    // Repeated n-grams count once; case and punctuation do not matter.
    assert_eq!(jaccard("a a a", "A!", n(1)), 1.0);
    assert_eq!(jaccard("Play MUSIC, now.", "play music now", n(2)), 1.0);
    // Bigrams of "x y x y" are {xy, yx}; of "x y" {xy}: 1 of 2.
    assert!(close(jaccard("x y x y", "x y", n(2)), 0.5));
    // Order matters for n > 1.
    assert_eq!(jaccard("a b", "b a", n(2)), 0.0);
    assert_eq!(jaccard("a b", "b a", n(1)), 1.0);
}

#[test]
fn jaccard_short_and_empty_texts() {
    // Fewer words than n: the whole text is one n-gram.
    assert_eq!(jaccard("play music", "Play music!", n(3)), 1.0);
    assert_eq!(jaccard("play music", "play music now", n(3)), 0.0);
    assert_eq!(jaccard("", "", n(2)), 0.0);
    assert_eq!(jaccard("...", "play", n(1)), 0.0);
}

fn venmo_index(size: usize) -> NgramIndex {
    let mut index = NgramIndex::new(n(size));
    index.insert(
        "venmo_total",
        "How much money did I receive on Venmo from Alice last month?",
    );
    index.insert(
        "play_songs",
        "Play my most liked songs from the album Blue on Spotify",
    );
    index.insert(
        "venmo_sent",
        "How much money did I send on Venmo to Bob last week?",
    );
    index.insert("todo_done", "Mark all my todo tasks for today as done");
    index
}

#[test]
fn ngram_index_ranks_by_jaccard() {
    let index = venmo_index(2);
    let query = "How much money did I receive on Venmo from Carol last year?";
    let hits = index.top_k(query, 5);
    assert_eq!(hit_names(&hits), ["venmo_total", "venmo_sent"]);
    for hit in &hits {
        assert_eq!(Some(hit.score), index.score(query, &hit.name));
    }
    // Both texts have 11 distinct bigrams; shared: how much, much money, money did, did i,
    // i receive, receive on, on venmo, venmo from -> 8 / (11 + 11 - 8).
    assert!(close(hits[0].score, 8.0 / 14.0), "{}", hits[0].score);
    assert!(close(
        hits[0].score,
        jaccard(
            query,
            "How much money did I receive on Venmo from Alice last month?",
            n(2)
        )
    ));
    assert_eq!(hit_names(&index.top_k(query, 1)), ["venmo_total"]);
    assert!(index.top_k(query, 0).is_empty());
    assert!(index.top_k("", 3).is_empty());
    assert!(index.top_k("completely unrelated words", 3).is_empty());
}

#[test]
fn ngram_length_is_configurable() {
    let query = "play the songs";
    // Unigrams: "songs" and "the" are shared with play_songs.
    let unigram = venmo_index(1).top_k(query, 5);
    assert_eq!(hit_names(&unigram), ["play_songs"]);
    // Trigrams: nothing shared.
    assert!(venmo_index(3).top_k(query, 5).is_empty());
    assert_eq!(venmo_index(3).n().get(), 3);
}

#[test]
fn ngram_ties_go_to_the_earlier_entry_and_replacement_keeps_its_place() {
    let mut index = NgramIndex::new(n(2));
    index.insert("c", "send money to bob");
    index.insert("a", "send money to bob");
    index.insert("b", "send money to bob");
    assert_eq!(
        hit_names(&index.top_k("send money to bob", 3)),
        ["c", "a", "b"]
    );
    assert_eq!(hit_names(&index.top_k("send money to bob", 2)), ["c", "a"]);

    // Replacing "c" keeps it first among equals.
    assert!(index.insert("c", "send money to bob please"));
    assert!(!index.insert("d", "send money to bob"));
    let hits = index.top_k("send money to bob", 4);
    assert_eq!(hit_names(&hits), ["a", "b", "d", "c"]);
    index.insert("c", "send money to bob");
    assert_eq!(
        hit_names(&index.top_k("send money to bob", 4)),
        ["c", "a", "b", "d"]
    );

    assert!(index.remove("a"));
    assert!(!index.remove("a"));
    assert_eq!(index.len(), 3);
    assert_eq!(
        hit_names(&index.top_k("send money to bob", 4)),
        ["c", "b", "d"]
    );
    // A removed name added again goes last.
    index.insert("a", "send money to bob");
    assert_eq!(
        hit_names(&index.top_k("send money to bob", 4)),
        ["c", "b", "d", "a"]
    );
    // Filtering asks only about candidates and skips the refused ones.
    let hits = index.top_k_where("send money to bob", 2, |name| name != "b");
    assert_eq!(hit_names(&hits), ["c", "d"]);
}

#[test]
fn ngram_index_matches_brute_force() {
    const VOCABULARY: [&str; 24] = [
        "send", "money", "to", "bob", "alice", "venmo", "song", "play", "album", "the", "my",
        "last", "month", "week", "todo", "note", "file", "mark", "done", "how", "much", "did", "i",
        "from",
    ];
    let mut rng = XorShift(0x1234_5678);
    let sentence = |rng: &mut XorShift| {
        let len = 1 + rng.below(10);
        (0..len)
            .map(|_| VOCABULARY[rng.below(VOCABULARY.len())])
            .collect::<Vec<_>>()
            .join(" ")
    };
    for size in 1..=3 {
        let mut index = NgramIndex::new(n(size));
        let instructions: Vec<String> = (0..300).map(|_| sentence(&mut rng)).collect();
        for (i, text) in instructions.iter().enumerate() {
            index.insert(&format!("s{i}"), text);
        }
        for _ in 0..50 {
            let query = sentence(&mut rng);
            let mut expected: Vec<(f32, usize)> = instructions
                .iter()
                .enumerate()
                .map(|(i, text)| (jaccard(&query, text, n(size)), i))
                .filter(|&(score, _)| score > 0.0)
                .collect();
            expected.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            expected.truncate(7);
            let got: Vec<(f32, usize)> = index
                .top_k(&query, 7)
                .iter()
                .map(|h| (h.score, h.name[1..].parse().unwrap()))
                .collect();
            assert_eq!(got, expected, "n = {size}, query {query:?}");
        }
    }
}

#[test]
fn same_scenario_selects_other_tasks_of_the_scenario_in_order() {
    let mut library = HashSkillLibrary::new();
    for (name, scenario, task_id) in [
        ("a", "s1", "t1"),
        ("b", "s2", "t4"),
        ("c", "s1", "t2"),
        ("d", "s1", "t3"),
        ("e", "s1", "t1"),
    ] {
        library.insert(skill(name, scenario, task_id, "")).unwrap();
    }
    let third = task("t3", "s1", "whatever");
    let hits = same_scenario(&library, &third, 10);
    assert_eq!(hit_names(&hits), ["a", "c", "e"]);
    assert!(hits.iter().all(|h| h.score == 1.0));
    assert_eq!(hit_names(&same_scenario(&library, &third, 2)), ["a", "c"]);
    assert!(same_scenario(&library, &task("t9", "s9", ""), 10).is_empty());
    assert!(same_scenario(&library, &third, 0).is_empty());
}

#[test]
fn cosine_hand_computed() {
    assert!(close(
        cosine(&[1.0, 0.0], &[1.0, 1.0]).unwrap(),
        1.0 / 2f32.sqrt()
    ));
    // 32 / (sqrt(14) sqrt(77))
    assert!(close(
        cosine(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]).unwrap(),
        0.974_631_85
    ));
    assert!(close(cosine(&[2.0, -1.0], &[-4.0, 2.0]).unwrap(), -1.0));
    assert_eq!(cosine(&[3.0, 0.0], &[0.0, 5.0]).unwrap(), 0.0);
    assert_eq!(cosine(&[0.0, 0.0], &[1.0, 2.0]).unwrap(), 0.0);
    assert!(close(cosine(&[1e30, 1e30], &[1e30, 1e30]).unwrap(), 1.0));
    assert_eq!(
        cosine(&[1.0], &[1.0, 2.0]),
        Err(IndexError::DimensionMismatch {
            expected: 1,
            found: 2
        })
    );
    assert_eq!(cosine(&[f32::NAN], &[1.0]), Err(IndexError::NonFinite));
}

#[test]
fn embedding_index_top_k() {
    let mut index = EmbeddingIndex::new(3).unwrap();
    index.insert("x", &[1.0, 0.0, 0.0]).unwrap();
    index.insert("xy", &[1.0, 1.0, 0.0]).unwrap();
    index.insert("zero", &[0.0, 0.0, 0.0]).unwrap();
    index.insert("minus_x", &[-2.0, 0.0, 0.0]).unwrap();
    index.insert("x_again", &[5.0, 0.0, 0.0]).unwrap();
    let hits = index.top_k(&[2.0, 0.0, 0.0], 10).unwrap();
    assert_eq!(hit_names(&hits), ["x", "x_again", "xy", "zero", "minus_x"]);
    let scores: Vec<f32> = hits.iter().map(|h| h.score).collect();
    assert!(close(scores[2], 1.0 / 2f32.sqrt()));
    assert_eq!(
        [scores[0], scores[1], scores[3], scores[4]],
        [1.0, 1.0, 0.0, -1.0]
    );
    assert_eq!(
        hit_names(&index.top_k(&[0.0, 1.0, 0.0], 1).unwrap()),
        ["xy"]
    );

    // A zero query ties everything at 0: insertion order.
    let hits = index.top_k(&[0.0, 0.0, 0.0], 2).unwrap();
    assert_eq!(hit_names(&hits), ["x", "xy"]);
    assert!(hits.iter().all(|h| h.score == 0.0));

    // Replacement keeps the slot, removal frees it.
    assert!(index.insert("x", &[0.0, 0.0, 1.0]).unwrap());
    assert!(index.remove("x_again"));
    assert!(!index.contains("x_again"));
    let hits = index.top_k(&[1.0, 0.0, 0.0], 10).unwrap();
    assert_eq!(hit_names(&hits), ["xy", "x", "zero", "minus_x"]);
    let hits = index
        .top_k_where(&[1.0, 0.0, 0.0], 2, |name| name != "xy")
        .unwrap();
    assert_eq!(hit_names(&hits), ["x", "zero"]);
    assert_eq!(index.len(), 4);
}

#[test]
fn embedding_index_refuses_bad_vectors() {
    assert_eq!(
        EmbeddingIndex::new(0).unwrap_err(),
        IndexError::ZeroDimension
    );
    let mut index = EmbeddingIndex::new(2).unwrap();
    assert_eq!(
        index.insert("a", &[1.0, 2.0, 3.0]),
        Err(IndexError::DimensionMismatch {
            expected: 2,
            found: 3
        })
    );
    assert_eq!(
        index.insert("a", &[f32::INFINITY, 0.0]),
        Err(IndexError::NonFinite)
    );
    assert!(index.is_empty());
    index.insert("a", &[1.0, 2.0]).unwrap();
    assert_eq!(
        index.top_k(&[1.0], 1),
        Err(IndexError::DimensionMismatch {
            expected: 2,
            found: 1
        })
    );
    assert!(index.top_k(&[1.0, 1.0], 0).unwrap().is_empty());
}

#[test]
fn hashing_embedder_is_deterministic_and_unit_length() {
    let mut a = HashingEmbedder::default();
    let mut b = HashingEmbedder::new(256, n(2)).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.dim(), 256);
    let text = "Send 20 dollars to Bob on Venmo for the pizza";
    let first = a.embed(text).unwrap();
    assert_eq!(first.len(), 256);
    assert_eq!(first, a.embed(text).unwrap());
    assert_eq!(first, b.embed(text).unwrap());
    assert_eq!(
        first,
        a.embed("send 20 DOLLARS to bob, on venmo; for the pizza!")
            .unwrap()
    );
    let norm: f32 = first.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!(close(norm, 1.0));
    assert!(a.embed("").unwrap().iter().all(|&x| x == 0.0));

    let similar = a
        .embed("Send 35 dollars to Alice on Venmo for the pizza")
        .unwrap();
    let unrelated = a.embed("Mark every todo item of today as done").unwrap();
    assert!(cosine(&first, &similar).unwrap() > cosine(&first, &unrelated).unwrap() + 0.3);

    let mut small = HashingEmbedder::new(7, n(3)).unwrap();
    assert_eq!(small.embed(text).unwrap().len(), 7);
    assert_eq!(small.max_n().get(), 3);
    assert_eq!(
        HashingEmbedder::new(0, n(1)),
        Err(IndexError::ZeroDimension)
    );
}

#[test]
fn hashing_embedder_is_stable_across_builds() {
    // Pinned output: a change of tokenisation or hashing shows up here.
    let vector = HashingEmbedder::new(16, n(1))
        .unwrap()
        .embed("hello world")
        .unwrap();
    let nonzero: Vec<(usize, f32)> = vector
        .iter()
        .enumerate()
        .filter(|(_, &x)| x != 0.0)
        .map(|(i, &x)| (i, x))
        .collect();
    assert_eq!(nonzero, PINNED_HELLO_WORLD);
}

const PINNED_HELLO_WORLD: [(usize, f32); 2] = [
    (4, -std::f32::consts::FRAC_1_SQRT_2),
    (7, std::f32::consts::FRAC_1_SQRT_2),
];

#[test]
fn retrieval_mode_names() {
    let modes = [
        (
            RetrievalMode::SameScenario,
            "same-scenario",
            r#""same_scenario""#,
        ),
        (
            RetrievalMode::QueryNgram { n: n(3) },
            "query-ngram:3",
            r#"{"query_ngram":{"n":3}}"#,
        ),
        (
            RetrievalMode::QueryEmbedding,
            "query-embedding",
            r#""query_embedding""#,
        ),
        (
            RetrievalMode::SkillEmbedding,
            "skill-embedding",
            r#""skill_embedding""#,
        ),
        (RetrievalMode::None, "none", r#""none""#),
    ];
    for (mode, text, json) in modes {
        assert_eq!(mode.to_string(), text);
        assert_eq!(text.parse::<RetrievalMode>().unwrap(), mode);
        assert_eq!(serde_json::to_string(&mode).unwrap(), json);
        assert_eq!(serde_json::from_str::<RetrievalMode>(json).unwrap(), mode);
    }
    assert_eq!(
        "query-ngram".parse::<RetrievalMode>().unwrap(),
        RetrievalMode::QueryNgram { n: n(2) }
    );
    assert_eq!(RetrievalMode::default(), RetrievalMode::SameScenario);
    for bad in ["query-ngram:0", "query-ngram:x", "Same-Scenario", ""] {
        let err = bad.parse::<RetrievalMode>().unwrap_err();
        assert_eq!(err.input, bad);
    }
    assert!(serde_json::from_str::<RetrievalMode>(r#"{"query_ngram":{"n":0}}"#).is_err());
}

/// Three scenarios' skills, each written by its scenario's first task.
fn world() -> (HashSkillLibrary, Vec<(Skill, &'static str)>) {
    let made = vec![
        (
            skill("venmo_total_received", "venmo", "venmo-1",
                "def venmo_total_received(sender, month):\n    \"\"\"Total money received on venmo from sender.\"\"\"\n"),
            "How much money did I receive on Venmo from Alice in March?",
        ),
        (
            skill("play_liked_songs", "music", "music-1",
                "def play_liked_songs(album):\n    \"\"\"Play liked songs of an album on spotify.\"\"\"\n"),
            "Play my liked songs from the album Blue on Spotify",
        ),
        (
            skill("complete_todos", "todo", "todo-1",
                "def complete_todos(day):\n    \"\"\"Mark todo tasks of a day done.\"\"\"\n"),
            "Mark all my todo tasks for Monday as done",
        ),
    ];
    let mut library = HashSkillLibrary::new();
    for (skill, _) in &made {
        library.insert(skill.clone()).unwrap();
    }
    (library, made)
}

#[test]
fn retriever_finds_the_matching_skill_in_every_mode() {
    let query = task(
        "venmo-2",
        "venmo",
        "How much money did I receive on Venmo from Bob in April?",
    );
    for mode in [
        RetrievalMode::SameScenario,
        RetrievalMode::QueryNgram { n: n(2) },
        RetrievalMode::QueryEmbedding,
        RetrievalMode::SkillEmbedding,
    ] {
        let (mut library, made) = world();
        let mut retriever = Retriever::new(mode, 1, HashingEmbedder::default()).unwrap();
        assert_eq!((retriever.mode(), retriever.k()), (mode, 1));
        for (skill, instruction) in &made {
            retriever.add(skill, instruction).unwrap();
        }
        let hits = retriever.retrieve(&mut library, &query).unwrap();
        assert_eq!(hit_names(&hits), ["venmo_total_received"], "{mode}");
        assert_eq!(
            library.get("venmo_total_received").unwrap().stats.retrieved,
            1
        );
        assert_eq!(library.get("play_liked_songs").unwrap().stats.retrieved, 0);

        // `select` does not count.
        retriever.select(&library, &query).unwrap();
        assert_eq!(
            library.get("venmo_total_received").unwrap().stats.retrieved,
            1
        );

        // A skill gone from the library is not returned, even while still indexed.
        library.remove("venmo_total_received");
        let hits = retriever.select(&library, &query).unwrap();
        assert!(
            !hit_names(&hits).contains(&"venmo_total_received"),
            "{mode}"
        );
    }
}

#[test]
fn retriever_none_mode_shows_nothing() {
    let (mut library, made) = world();
    let mut retriever = Retriever::new(RetrievalMode::None, 5, HashingEmbedder::default()).unwrap();
    for (skill, instruction) in &made {
        retriever.add(skill, instruction).unwrap();
    }
    let query = task("venmo-2", "venmo", "How much money did I receive on Venmo?");
    assert!(retriever.retrieve(&mut library, &query).unwrap().is_empty());
}

/// An embedder that fails, or returns vectors of the wrong length.
struct Faulty {
    dim: usize,
    fail: bool,
}

impl Embedder for Faulty {
    type Error = &'static str;

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&mut self, _text: &str) -> Result<Vec<f32>, &'static str> {
        if self.fail {
            Err("model offline")
        } else {
            Ok(vec![1.0; self.dim + 1])
        }
    }
}

#[test]
fn retriever_reports_embedder_and_index_errors() {
    let (_, made) = world();
    let (skill, instruction) = &made[0];
    let mut failing = Retriever::new(
        RetrievalMode::QueryEmbedding,
        3,
        Faulty { dim: 4, fail: true },
    )
    .unwrap();
    let err = failing.add(skill, instruction).unwrap_err();
    assert_eq!(err, RetrievalError::Embedder("model offline"));
    assert_eq!(err.to_string(), "embedder: model offline");

    let mut wrong = Retriever::new(
        RetrievalMode::SkillEmbedding,
        3,
        Faulty {
            dim: 4,
            fail: false,
        },
    )
    .unwrap();
    assert_eq!(
        wrong.add(skill, instruction).unwrap_err(),
        RetrievalError::Index(IndexError::DimensionMismatch {
            expected: 4,
            found: 5
        })
    );
    assert!(matches!(
        Retriever::new(
            RetrievalMode::QueryEmbedding,
            3,
            Faulty {
                dim: 0,
                fail: false
            }
        ),
        Err(RetrievalError::Index(IndexError::ZeroDimension))
    ));
    // Modes without embeddings never call the embedder.
    let mut lexical = Retriever::<Faulty>::new(
        RetrievalMode::QueryNgram { n: n(1) },
        3,
        Faulty { dim: 4, fail: true },
    )
    .unwrap();
    lexical.add(skill, instruction).unwrap();
    let (library, _) = world();
    let hits = lexical
        .select(&library, &task("venmo-2", "venmo", instruction))
        .unwrap();
    assert_eq!(hit_names(&hits), ["venmo_total_received"]);
}
