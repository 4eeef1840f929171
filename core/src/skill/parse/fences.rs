//! Markdown code fences in a model response: [`CodeBlock`], [`find_code_blocks`], and
//! joining the Python blocks into one program.
//!
//! A fence is a line whose first non-blank characters are three or more backticks (or
//! tildes), optionally followed by an info string whose first word is the language.
//! It closes at a line holding only a run of the same character at least as long.
//! Unlike CommonMark, fences may be indented by any number of spaces or tabs (models
//! indent them inside lists); the fence's indentation is removed from the block's lines
//! when the program is built. A fence that never closes runs to the end of the text.

use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

/// Languages (compared without case) whose blocks are Python code; the empty tag is
/// an untagged fence.
const PYTHON_TAGS: [&str; 9] = [
    "", "python", "python3", "py", "py3", "starlark", "star", "sky", "bzl",
];

/// A fenced code block found in a model response.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CodeBlock {
    /// Byte range of the code in the response: the lines between the fences, the last
    /// line's newline included.
    pub span: Range<usize>,
    /// Byte range of the whole block in the response, from the opening fence to the
    /// end of the closing fence (without its newline), or to the end of the text.
    pub outer: Range<usize>,
    /// The info string's first word as written (`python`, `py`, `starlark`), or empty.
    pub language: String,
    /// Columns of blanks before the opening fence.
    pub indent: usize,
    /// Whether a closing fence was found.
    pub terminated: bool,
    /// 1-based line of the opening fence in the response.
    pub line: u32,
}

impl CodeBlock {
    /// Whether the block holds Python (or Starlark) code: an untagged fence or one
    /// tagged `python`, `python3`, `py`, `py3`, `starlark`, `star`, `sky` or `bzl`.
    pub fn is_python(&self) -> bool {
        PYTHON_TAGS
            .iter()
            .any(|tag| tag.eq_ignore_ascii_case(&self.language))
    }

    /// The block's code as it stands in `response` (the text it was found in).
    pub fn text<'a>(&self, response: &'a str) -> &'a str {
        response.get(self.span.clone()).unwrap_or("")
    }
}

/// An opening fence being matched: its character, length and where it started.
struct OpenFence {
    marker: u8,
    len: usize,
    start: usize,
    content_start: usize,
    language: String,
    indent: usize,
    line: u32,
}

/// Finds every fenced code block in `text`, in order, whatever its language.
///
/// Text outside fences is never code: a response without fences has no blocks (use
/// [`parse_code`](super::parse_code) to treat a whole text as code).
pub fn find_code_blocks(text: &str) -> Vec<CodeBlock> {
    let bytes = text.as_bytes();
    let mut blocks = Vec::new();
    let mut open: Option<OpenFence> = None;
    let mut line_start = 0;
    let mut line_no: u32 = 1;
    while line_start < bytes.len() {
        let newline = next_newline(text, line_start);
        let next_start = newline.map_or(bytes.len(), |i| i + 1);
        let line_end = match newline {
            Some(i) if i > line_start && bytes.get(i - 1) == Some(&b'\r') => i - 1,
            Some(i) => i,
            None => bytes.len(),
        };
        let line = bytes.get(line_start..line_end).unwrap_or(&[]);
        match open.take() {
            None => {
                if let Some(fence) = opening_fence(text, line, line_start, next_start, line_no) {
                    open = Some(fence);
                }
            }
            Some(fence) => {
                if is_closing_fence(line, fence.marker, fence.len) {
                    blocks.push(CodeBlock {
                        span: fence.content_start..line_start,
                        outer: fence.start..line_end,
                        language: fence.language,
                        indent: fence.indent,
                        terminated: true,
                        line: fence.line,
                    });
                } else {
                    open = Some(fence);
                }
            }
        }
        line_start = next_start;
        line_no = line_no.saturating_add(1);
    }
    if let Some(fence) = open {
        let content_start = fence.content_start.min(bytes.len());
        blocks.push(CodeBlock {
            span: content_start..bytes.len(),
            outer: fence.start..bytes.len(),
            language: fence.language,
            indent: fence.indent,
            terminated: false,
            line: fence.line,
        });
    }
    blocks
}

/// Appends the Python blocks of `response` to `program`, in order, each starting on a
/// fresh line and with its fence's indentation removed from its lines.
pub(super) fn join_python_blocks(response: &str, blocks: &[CodeBlock], program: &mut String) {
    for block in blocks.iter().filter(|b| b.is_python()) {
        if !program.is_empty() && !program.ends_with('\n') {
            program.push('\n');
        }
        let code = block.text(response);
        if block.indent == 0 {
            program.push_str(code);
        } else {
            for line in code.split_inclusive('\n') {
                program.push_str(strip_blanks(line, block.indent));
            }
        }
    }
}

/// `line` without up to `count` leading spaces or tabs.
fn strip_blanks(line: &str, count: usize) -> &str {
    let blanks = line
        .bytes()
        .take(count)
        .take_while(|b| matches!(b, b' ' | b'\t'))
        .count();
    line.get(blanks..).unwrap_or(line)
}

/// Index of the first `\n` at or after `from` (a line start, so a `char` boundary);
/// `str::find` searches a word at a time.
fn next_newline(text: &str, from: usize) -> Option<usize> {
    text.get(from..)?.find('\n').map(|i| from + i)
}

/// The number of leading spaces and tabs of `line`.
fn leading_blanks(line: &[u8]) -> usize {
    line.iter()
        .take_while(|&&b| matches!(b, b' ' | b'\t'))
        .count()
}

/// The fence character and run length at the start of `line` (after blanks), if the
/// line starts with three or more backticks or tildes.
fn fence_run(line: &[u8]) -> Option<(u8, usize, usize)> {
    let indent = leading_blanks(line);
    let rest = line.get(indent..)?;
    let marker = *rest.first()?;
    if marker != b'`' && marker != b'~' {
        return None;
    }
    let len = rest.iter().take_while(|&&b| b == marker).count();
    (len >= 3).then_some((marker, len, indent))
}

/// The fence opened by `line` (which starts at `line_start` in `text`), if it is one.
fn opening_fence(
    text: &str,
    line: &[u8],
    line_start: usize,
    next_start: usize,
    line_no: u32,
) -> Option<OpenFence> {
    let (marker, len, indent) = fence_run(line)?;
    let info_start = indent + len;
    let info = line.get(info_start..).unwrap_or(&[]);
    if marker == b'`' && info.contains(&b'`') {
        return None;
    }
    let word_start = info_start + leading_blanks(info);
    let word_len = line
        .get(word_start..)
        .unwrap_or(&[])
        .iter()
        .take_while(|b| !b.is_ascii_whitespace())
        .count();
    let language = text
        .get(line_start + word_start..line_start + word_start + word_len)
        .unwrap_or("");
    Some(OpenFence {
        marker,
        len,
        start: line_start + indent,
        content_start: next_start,
        language: String::from(language),
        indent,
        line: line_no,
    })
}

/// Whether `line` closes a fence of `marker` opened with a run of `len`.
fn is_closing_fence(line: &[u8], marker: u8, len: usize) -> bool {
    match fence_run(line) {
        Some((m, run, indent)) if m == marker && run >= len => line
            .get(indent + run..)
            .unwrap_or(&[])
            .iter()
            .all(|b| b.is_ascii_whitespace()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_and_untagged_blocks() {
        let text = "a\n```python\nx = 1\n```\nb\n```\ny()\n```\n~~~json\n{}\n~~~";
        let blocks = find_code_blocks(text);
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[0].text(text), "x = 1\n");
        assert_eq!(blocks[0].language, "python");
        assert_eq!(blocks[0].line, 2);
        assert_eq!(&text[blocks[0].outer.clone()], "```python\nx = 1\n```");
        assert_eq!(blocks[1].text(text), "y()\n");
        assert!(blocks[1].is_python());
        assert_eq!(blocks[2].language, "json");
        assert!(!blocks[2].is_python());
        assert!(blocks.iter().all(|b| b.terminated));
    }

    #[test]
    fn closing_fence_must_be_long_enough_and_bare() {
        let text = "````py\n```\nx\n``` not\n````\n";
        let blocks = find_code_blocks(text);
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].text(text), "```\nx\n``` not\n");
    }

    #[test]
    fn inline_backticks_do_not_open() {
        assert!(find_code_blocks("use ```x``` here\n```py`\n").is_empty());
    }

    #[test]
    fn indented_fence_is_dedented_when_joined() {
        let text = "1. step\n   ```python\n   def f():\n       return 1\n   ```\n";
        let blocks = find_code_blocks(text);
        assert_eq!(blocks[0].indent, 3);
        let mut program = String::new();
        join_python_blocks(text, &blocks, &mut program);
        assert_eq!(program, "def f():\n    return 1\n");
    }

    #[test]
    fn unterminated_fence_runs_to_end() {
        let text = "```python\nx = (";
        let blocks = find_code_blocks(text);
        assert_eq!(blocks.len(), 1);
        assert!(!blocks[0].terminated);
        assert_eq!(blocks[0].text(text), "x = (");
        let bare = find_code_blocks("```python");
        assert_eq!(bare[0].span, 9..9);
    }
}
