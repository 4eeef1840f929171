//! ChatML tokenisation against Hugging Face: every conversation of
//! `tests/goldens/chatml/goldens.json` (made by `scripts/chatml_goldens.py` with
//! transformers' `apply_chat_template` and one tokenisation of the rendered text, on
//! awkward contents: leading and trailing newlines and spaces, CRLF, tabs, unicode,
//! empty messages) must give exactly the same token ids through
//! `ChatTemplate::from_messages`, and an agent mask that covers exactly the tokens
//! overlapping an assistant message's content, plus its closing `<|im_end|>`.

use std::path::PathBuf;

use sage_trainer::chat::{ChatTemplate, Message, Role};
use sage_trainer::tokenizer::Tokenizer;
use serde::Deserialize;

#[derive(Deserialize)]
struct Goldens {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    messages: Vec<GoldenMessage>,
    add_generation_prompt: bool,
    ids: Vec<u32>,
    agent_mask: Vec<bool>,
}

#[derive(Deserialize)]
struct GoldenMessage {
    role: String,
    content: String,
}

fn goldens_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/goldens/chatml")
}

#[test]
fn conversations_tokenise_as_hugging_face_renders_them() {
    let dir = goldens_dir();
    let tokenizer = Tokenizer::from_dir(&dir).expect("the golden tokenizer loads");
    let template = ChatTemplate::new(&tokenizer).unwrap();
    let text = std::fs::read_to_string(dir.join("goldens.json")).unwrap();
    let goldens: Goldens = serde_json::from_str(&text).unwrap();
    assert!(goldens.cases.len() >= 20);
    let mut leading_newline_cases = 0;
    for (index, case) in goldens.cases.iter().enumerate() {
        let messages: Vec<Message> = case
            .messages
            .iter()
            .map(|m| {
                let role = match m.role.as_str() {
                    "system" => Role::System,
                    "user" => Role::User,
                    _ => Role::Assistant,
                };
                Message::new(role, m.content.clone())
            })
            .collect();
        let episode = template.from_messages(&messages).unwrap();
        assert_eq!(
            episode.awaiting_agent(),
            case.add_generation_prompt,
            "case {index}"
        );
        assert_eq!(episode.tokens(), case.ids, "case {index}: token ids");
        assert_eq!(
            episode.agent_mask(),
            case.agent_mask,
            "case {index}: agent mask"
        );
        leading_newline_cases += usize::from(
            case.messages
                .iter()
                .any(|m| m.role == "assistant" && m.content.starts_with('\n')),
        );
    }
    assert!(
        leading_newline_cases >= 4,
        "the goldens lost their awkward cases"
    );
}
