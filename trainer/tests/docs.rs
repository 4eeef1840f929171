//! The documentation holds: every relative link of README.md, BENCHMARKS.md and docs/
//! reaches a file of the repository (and its anchor a heading there), no link leaves
//! the repository but for web addresses, and every `sage` command they quote parses:
//! it is run with `--help` appended, so its subcommand and flags are checked by the CLI
//! itself without doing any work.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the trainer sits in the workspace")
        .to_path_buf()
}

/// README.md, BENCHMARKS.md and every Markdown file under docs/.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    let mut pending = vec![root.join("docs")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// One line of a document, and whether it lies inside a fenced code block.
struct Line<'a> {
    text: &'a str,
    in_code: bool,
}

/// The lines of `text`, each marked inside or outside fenced code blocks (a fence
/// closes with at least as many backticks as opened it; fence lines count as code).
fn lines(text: &str) -> Vec<Line<'_>> {
    let mut fence: Option<usize> = None;
    text.lines()
        .map(|line| {
            let ticks = line.trim_start().chars().take_while(|&c| c == '`').count();
            match fence {
                Some(open) if ticks >= open => {
                    fence = None;
                    Line {
                        text: line,
                        in_code: true,
                    }
                }
                Some(_) => Line {
                    text: line,
                    in_code: true,
                },
                None if ticks >= 3 => {
                    fence = Some(ticks);
                    Line {
                        text: line,
                        in_code: true,
                    }
                }
                None => Line {
                    text: line,
                    in_code: false,
                },
            }
        })
        .collect()
}

/// The anchors of a document's headings as GitHub makes them: lower case, punctuation
/// dropped, spaces as hyphens, a repeated heading numbered.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in lines(text).iter().filter(|l| !l.in_code) {
        let Some(title) = line.text.strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The targets of the Markdown links `[text](target)` outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in lines(text).iter().filter(|l| !l.in_code) {
        let mut rest = line.text;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else {
                break;
            };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("a readable document");
        let dir = file.parent().expect("a file has a directory");
        for target in links(&text) {
            if target.starts_with("https://") || target.starts_with("http://") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            let inside = resolved
                .canonicalize()
                .is_ok_and(|p| p.starts_with(root().canonicalize().expect("the root")));
            if !inside {
                broken.push(format!(
                    "{}: {target} (no such file in the repository)",
                    file.display()
                ));
                continue;
            }
            if !anchor.is_empty() {
                let found = std::fs::read_to_string(&resolved)
                    .map(|text| anchors(&text).contains(anchor))
                    .unwrap_or(false);
                if !found {
                    broken.push(format!("{}: {target} (no such heading)", file.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn no_document_points_outside_the_repository() {
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("a readable document");
        assert!(
            !text.contains("../shared"),
            "{} refers to ../shared, which users do not have",
            file.display()
        );
    }
}

/// The argument lists of the `sage` commands `text` quotes: the words after `cargo run
/// --release -- ` in code blocks (comments cut, continued lines joined) and inline code
/// spans that start with `sage `. Optional parts in brackets are dropped, and commands
/// whose first word is a placeholder (`COMMAND`, `<command>`) are skipped.
fn quoted_commands(text: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut continued = String::new();
    // Prose between code blocks, as one string: an inline span may wrap across lines.
    let mut prose = String::new();
    for line in lines(text) {
        if line.in_code {
            inline_spans(&mut prose, &mut found);
            let joined = format!("{continued}{}", line.text.trim());
            continued.clear();
            if let Some(stripped) = joined.strip_suffix('\\') {
                continued = format!("{stripped} ");
                continue;
            }
            if let Some((_, args)) = joined.split_once("cargo run --release -- ") {
                found.push(args.split(" #").next().unwrap_or(args).to_owned());
            }
        } else {
            prose.push_str(line.text);
            prose.push(' ');
        }
    }
    inline_spans(&mut prose, &mut found);
    found
        .into_iter()
        .map(|args| drop_optional(&args))
        .filter(|args| {
            args.first()
                .is_some_and(|command| command.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        })
        .collect()
}

/// Moves the arguments of the inline `sage ...` spans of `prose` into `found` and
/// empties it.
fn inline_spans(prose: &mut String, found: &mut Vec<String>) {
    for (i, span) in prose.split('`').enumerate() {
        if i % 2 == 1 {
            if let Some(args) = span.strip_prefix("sage ") {
                found.push(args.to_owned());
            }
        }
    }
    prose.clear();
}

/// `args` split into words, with every `[...]` group removed and quotes taken off.
fn drop_optional(args: &str) -> Vec<String> {
    let mut kept = String::new();
    let mut depth = 0usize;
    for c in args.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => kept.push(c),
            _ => {}
        }
    }
    shell_words(&kept)
}

/// `text` split into words as a shell would at its simplest: at whitespace, but not
/// inside single or double quotes, which are taken off.
fn shell_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in text.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

#[test]
fn every_quoted_sage_command_parses() {
    let sage = env!("CARGO_BIN_EXE_sage");
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("a readable document");
        for args in quoted_commands(&text) {
            let output = Command::new(sage)
                .args(&args)
                .arg("--help")
                .output()
                .expect("the sage binary runs");
            checked += 1;
            if !output.status.success() {
                failures.push(format!(
                    "{}: sage {}\n{}",
                    file.display(),
                    args.join(" "),
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} commands found: is the parser right?"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_checker_sees_links_anchors_and_commands() {
    let text = "# A `b` c\n\n## Glossary\n\nSee [x](y.md#z) and `sage train --control`.\n\n```bash\ncargo run --release -- eval --checkpoint a \\\n    --splits iid  # comment\ncargo run --release -- COMMAND\n[not](a link)\n```\n";
    assert_eq!(links(text), ["y.md#z"]);
    let anchors = anchors(text);
    assert!(anchors.contains("a-b-c") && anchors.contains("glossary"));
    assert_eq!(
        quoted_commands(text),
        [
            vec!["train", "--control"],
            vec!["eval", "--checkpoint", "a", "--splits", "iid"],
        ]
    );
    assert_eq!(
        drop_optional("import --gguf F [--dtype f32|bf16]"),
        ["import", "--gguf", "F"]
    );
    assert_eq!(
        drop_optional("generate --prompt \"List my playlists.\" --seed 7"),
        ["generate", "--prompt", "List my playlists.", "--seed", "7"]
    );
}
