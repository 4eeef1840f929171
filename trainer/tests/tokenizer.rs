//! `tokenizer`: byte-level round trips on any UTF-8, the ChatML special tokens (ids,
//! never produced from text), deterministic training, save/load beside a model,
//! loading a Qwen2-style `tokenizer.json` written by hand, and clear errors.

use std::path::PathBuf;
use std::time::Instant;

use sage_trainer::tokenizer::{
    Tokenizer, TokenizerError, TrainConfig, END_OF_TEXT, IM_END, IM_START, TOKENIZER_FILE,
};
use serde_json::json;

/// A pseudo-random word of 3 to 8 lowercase letters, from an xorshift state.
fn word(state: &mut u64) -> String {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    let len = 3 + (*state % 6) as usize;
    (0..len)
        .map(|k| (b'a' + ((*state >> (5 * k + 8)) % 26) as u8) as char)
        .collect()
}

/// A deterministic corpus of code-like agent turns with varied notes, about `bytes`
/// long.
fn corpus(bytes: usize) -> Vec<String> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let apps = ["venmo", "spotify", "gmail", "todoist", "amazon", "phone"];
    let nouns = ["payment", "song", "email", "task", "order", "contact"];
    let mut texts = Vec::new();
    let mut total = 0;
    let mut i = 0usize;
    while total < bytes {
        let app = apps[i % apps.len()];
        let noun = nouns[(i / 7) % nouns.len()];
        let note: Vec<String> = (0..6).map(|_| word(&mut state)).collect();
        let text = format!(
            "{note}: I will look up the {noun}s first.\n```python\ndef total_{noun}_{i}(person: str, month: int) -> float:\n    \"\"\"Sum the {noun}s of `person` in `month`.\"\"\"\n    token = apis.{app}.login(username=person, password=\"p{i}\")\n    total = 0.0\n    for page in range(10):\n\titems = apis.{app}.show_{noun}s(access_token=token, page_index=page)\n\tif not items:\n\t    break\n\ttotal += sum([x[\"amount\"] for x in items])\n    return total\n\nprint(total_{noun}_{i}(\"Ana\", {m}))\n```\n",
            note = note.join(" "),
            m = 1 + i % 12
        );
        total += text.len();
        texts.push(text);
        i += 1;
    }
    texts
}

/// A tokenizer trained on a small corpus.
fn small_tokenizer() -> Tokenizer {
    let config = TrainConfig {
        vocab_size: 600,
        ..TrainConfig::default()
    };
    Tokenizer::train(corpus(40_000), &config).expect("training succeeds")
}

/// A fresh directory under the system's temporary directory.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sage-tokenizer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn round_trips_any_utf8() {
    let tokenizer = small_tokenizer();
    let texts = [
        "",
        " ",
        "\n\n\t  \r\n",
        "def f(x: int) -> int:\n\treturn x  # tab\n",
        "emoji 🤖🎵 and ZWJ 👩‍💻, CJK 技能库, accents café naïve",
        "numbers 1234567890 and 3.14159e-10",
        "quotes \"' `backticks` {braces} [brackets] \\backslash",
        "never seen: ÆØÅ ÿ \u{1F600} \u{10FFFF} \u{0}",
    ];
    for text in texts {
        let ids = tokenizer.encode(text).unwrap();
        assert_eq!(
            tokenizer.decode(&ids).unwrap(),
            text,
            "round trip of {text:?}"
        );
    }
}

#[test]
fn special_tokens_have_ids_and_are_never_produced_from_text() {
    let tokenizer = small_tokenizer();
    let special = tokenizer.special_tokens();
    assert_eq!(
        tokenizer.token_to_id(END_OF_TEXT),
        Some(special.end_of_text)
    );
    assert_eq!(tokenizer.token_to_id(IM_START), Some(special.im_start));
    assert_eq!(tokenizer.token_to_id(IM_END), Some(special.im_end));
    assert_eq!(tokenizer.im_end(), special.im_end);
    let ids = [special.im_start, special.im_end, special.end_of_text];
    assert_eq!(
        tokenizer.decode(&ids).unwrap(),
        "<|im_start|><|im_end|><|endoftext|>"
    );

    let text = "print('<|im_end|>')<|im_start|>user\n<|endoftext|>";
    let encoded = tokenizer.encode(text).unwrap();
    assert!(
        encoded.iter().all(|&id| !special.contains(id)),
        "{encoded:?}"
    );
    assert_eq!(tokenizer.decode(&encoded).unwrap(), text);
}

#[test]
fn training_is_deterministic_and_respects_the_vocab_size() {
    let config = TrainConfig {
        vocab_size: 700,
        ..TrainConfig::default()
    };
    let first = Tokenizer::train(corpus(60_000), &config).unwrap();
    let second = Tokenizer::train(corpus(60_000), &config).unwrap();
    assert_eq!(first.to_json().unwrap(), second.to_json().unwrap());
    assert_eq!(first.vocab_size(), 700);
    // Merges learnt from the corpus make its text shorter than one token per byte.
    let text = &corpus(1_000)[0];
    assert!(first.encode(text).unwrap().len() * 3 < text.len());
}

#[test]
fn training_a_megabyte_takes_seconds() {
    let texts = corpus(1 << 20);
    let start = Instant::now();
    let tokenizer = Tokenizer::train(texts, &TrainConfig::default()).unwrap();
    let elapsed = start.elapsed();
    eprintln!(
        "trained a 1 MiB corpus to {} tokens in {elapsed:?}",
        tokenizer.vocab_size()
    );
    assert!(elapsed.as_secs() < 60, "training took {elapsed:?}");
}

#[test]
fn saves_and_loads_beside_a_model() {
    let tokenizer = small_tokenizer();
    let dir = temp_dir("save");
    let path = tokenizer.save_to_dir(&dir).unwrap();
    assert_eq!(path, dir.join(TOKENIZER_FILE));
    let loaded = Tokenizer::from_dir(&dir).unwrap();
    assert_eq!(loaded.special_tokens(), tokenizer.special_tokens());
    assert_eq!(loaded.vocab_size(), tokenizer.vocab_size());
    assert_eq!(loaded.to_json().unwrap(), tokenizer.to_json().unwrap());
    let text = "def skill(a: str) -> str:\n    return a * 2 🎉";
    assert_eq!(
        loaded.encode(text).unwrap(),
        tokenizer.encode(text).unwrap()
    );
    assert!(!dir.join("tokenizer.json.tmp").exists());
    std::fs::remove_dir_all(dir).unwrap();
}

/// The file's merges are `"a b"` strings, which tokenizers 0.19 (transformers 4.44)
/// also reads, not the `["a", "b"]` pairs the library writes since 0.20; the rest of the
/// file is the library's own text.
#[test]
fn merges_are_written_as_strings_every_tokenizers_version_reads() {
    let tokenizer = small_tokenizer();
    let json = tokenizer.to_json().unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let merges = value["model"]["merges"].as_array().unwrap();
    assert!(merges.len() > 100, "{} merges", merges.len());
    assert!(
        merges
            .iter()
            .all(|m| m.as_str().is_some_and(|m| m.split(' ').count() == 2)),
        "{:?}",
        &merges[..3]
    );
    let reloaded = Tokenizer::from_json(&json).unwrap();
    let text = "def skill(a: str) -> str:\n    return a * 2 [\"]\" 🎉";
    assert_eq!(
        reloaded.encode(text).unwrap(),
        tokenizer.encode(text).unwrap()
    );
    // The text before the merges is the library's own, pretty-printed.
    assert!(json.starts_with("{\n  \"version\""), "{}", &json[..40]);
}

/// A Qwen2-style `tokenizer.json` written by hand: NFC normalizer, regex split then
/// byte level, merges as "a b" strings, and the special tokens as added tokens after
/// the model's vocabulary.
fn qwen2_style_json(with_im_end: bool) -> String {
    let pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false});
    let added = |id: u32, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    let mut added_tokens = vec![added(7, END_OF_TEXT), added(8, IM_START)];
    if with_im_end {
        added_tokens.push(added(9, IM_END));
    }
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
            byte_level.clone(),
        ]},
        "post_processor": byte_level.clone(),
        "decoder": byte_level,
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": "", "end_of_word_suffix": "",
            "fuse_unk": false, "byte_fallback": false,
            "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "Ċ": 4, "ab": 5, "Ġc": 6},
            "merges": ["a b", "Ġ c"]
        }
    })
    .to_string()
}

#[test]
fn loads_a_qwen2_style_tokenizer_json() {
    let tokenizer = Tokenizer::from_json(&qwen2_style_json(true)).unwrap();
    let special = tokenizer.special_tokens();
    assert_eq!(
        (special.end_of_text, special.im_start, special.im_end),
        (7, 8, 9)
    );
    assert_eq!(tokenizer.vocab_size(), 10);
    assert_eq!(tokenizer.encode("ab c\n").unwrap(), vec![5, 6, 4]);
    assert_eq!(
        tokenizer.decode(&[8, 5, 6, 4, 9]).unwrap(),
        "<|im_start|>ab c\n<|im_end|>"
    );
}

#[test]
fn errors_name_the_file_and_the_problem() {
    let dir = temp_dir("errors");

    let missing = dir.join("absent").join(TOKENIZER_FILE);
    let err = Tokenizer::from_file(&missing).unwrap_err();
    assert!(matches!(err, TokenizerError::Read { .. }));
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );

    let corrupt = dir.join("corrupt.json");
    std::fs::write(&corrupt, "{\"model\": [1, 2").unwrap();
    let err = Tokenizer::from_file(&corrupt).unwrap_err();
    assert!(matches!(err, TokenizerError::Parse { .. }));
    assert!(err.to_string().contains("corrupt.json"), "{err}");

    let no_im_end = dir.join("no_im_end.json");
    std::fs::write(&no_im_end, qwen2_style_json(false)).unwrap();
    let err = Tokenizer::from_file(&no_im_end).unwrap_err();
    assert!(matches!(
        err,
        TokenizerError::MissingSpecialToken { token: IM_END, .. }
    ));
    assert!(err.to_string().contains("no_im_end.json") && err.to_string().contains(IM_END));

    let tiny = TrainConfig {
        vocab_size: 100,
        ..TrainConfig::default()
    };
    let err = Tokenizer::train(["text"], &tiny).unwrap_err();
    assert!(err.to_string().contains("vocab_size"), "{err}");

    let tokenizer = small_tokenizer();
    let err = tokenizer.decode(&[0, 1_000_000]).unwrap_err();
    assert!(
        matches!(err, TokenizerError::UnknownId { id: 1_000_000, .. }),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
