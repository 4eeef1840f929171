//! [`ExecError`]: how an execution failed, with a short Python-style traceback (file,
//! line, function and source line of each frame, repeated frames collapsed) that is
//! shown to the agent as the observation.

use std::fmt;

use serde::{Deserialize, Serialize};

use starlark::codemap::{CodeMap, FileSpan, Span};

use super::limits::LimitKind;

/// Frames shown at most; longer tracebacks keep the outermost and innermost ones.
const MAX_FRAMES: usize = 8;

/// Characters of a source line shown in a traceback.
const MAX_SOURCE_LINE_CHARS: usize = 200;

/// `text` cut to at most `max_bytes` bytes (at a character boundary), with a note of
/// how many bytes were cut when it was longer.
pub(crate) fn clip(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... [{} more bytes]", &text[..end], text.len() - end)
}

/// A name (of an app, API or variable) as messages show it: at most 64 bytes.
pub(crate) fn clip_name(name: &str) -> String {
    clip(name, 64)
}

/// What kind of failure ended an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ExecErrorKind {
    /// The code did not parse, or uses a construct the sandbox refuses.
    Syntax,
    /// An error raised while running (a missing key, a wrong type, an unknown name,
    /// `fail()`, ...).
    Runtime,
    /// An API call failed: unknown app or API, arguments that do not fit its signature,
    /// or an error reported by the host.
    Api,
    /// A resource limit was exceeded.
    Limit(LimitKind),
    /// The interpreter itself failed; the session was replaced by a fresh one.
    Internal,
}

impl ExecErrorKind {
    /// The label the traceback's last line starts with.
    fn label(self) -> &'static str {
        match self {
            ExecErrorKind::Syntax => "SyntaxError",
            ExecErrorKind::Runtime => "Error",
            ExecErrorKind::Api => "ApiError",
            ExecErrorKind::Limit(_) => "LimitExceeded",
            ExecErrorKind::Internal => "InternalError",
        }
    }
}

/// An execution's failure, as the agent is shown it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecError {
    /// The kind of failure.
    pub kind: ExecErrorKind,
    /// The error message alone.
    pub message: String,
    /// The short traceback: frames (if any), then `Label: message`.
    pub traceback: String,
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.traceback)
    }
}

impl std::error::Error for ExecError {}

/// One line of a traceback: where, and in which function.
#[derive(PartialEq, Eq)]
struct FrameLine {
    file: String,
    line: usize,
    function: String,
    source: String,
}

impl FrameLine {
    fn at(location: &FileSpan, function: &str) -> FrameLine {
        let line = location.file.find_line(location.span.begin());
        FrameLine {
            file: location.file.filename().to_owned(),
            line: line + 1,
            function: function.to_owned(),
            source: clip_chars(
                location.file.source_line(line).trim(),
                MAX_SOURCE_LINE_CHARS,
            ),
        }
    }
}

/// `line` cut to `max_chars` characters, with a marker when it was longer.
fn clip_chars(line: &str, max_chars: usize) -> String {
    match line.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{} ...", &line[..end]),
        None => line.to_owned(),
    }
}

impl ExecError {
    /// The error with its message and traceback cut to at most `max_bytes` bytes each
    /// (what the agent is shown is bounded like its printed output).
    pub(crate) fn clipped(self, max_bytes: usize) -> ExecError {
        ExecError {
            kind: self.kind,
            message: clip(&self.message, max_bytes),
            traceback: clip(&self.traceback, max_bytes),
        }
    }

    /// An error with no location (limits hit before running, internal failures).
    pub(crate) fn bare(kind: ExecErrorKind, message: String) -> ExecError {
        let traceback = format!("{}: {message}", kind.label());
        ExecError {
            kind,
            message,
            traceback,
        }
    }

    /// An error at one place in a file, with a caret under the column (syntax errors).
    pub(crate) fn at_span(
        kind: ExecErrorKind,
        message: String,
        codemap: &CodeMap,
        span: Span,
    ) -> ExecError {
        let resolved = codemap.resolve_span(span);
        let source_line = codemap.source_line(resolved.begin.line);
        let indent = source_line.len() - source_line.trim_start().len();
        let caret_column = resolved.begin.column.saturating_sub(indent);
        let traceback = format!(
            "  File \"{}\", line {}\n    {}\n    {}^\n{}: {message}",
            codemap.filename(),
            resolved.begin.line + 1,
            clip_chars(source_line.trim(), MAX_SOURCE_LINE_CHARS),
            " ".repeat(caret_column.min(MAX_SOURCE_LINE_CHARS)),
            kind.label()
        );
        ExecError {
            kind,
            message,
            traceback,
        }
    }

    /// An error raised while running, with the call stack it carries. The error's own
    /// location is dropped when it repeats the innermost frame's line (errors raised
    /// by built-ins point at their call site).
    pub(crate) fn from_starlark(
        kind: ExecErrorKind,
        message: String,
        error: &starlark::Error,
    ) -> ExecError {
        let frames = &error.call_stack().frames;
        let mut lines = Vec::new();
        let mut caller = "<module>";
        for frame in frames {
            if let Some(location) = &frame.location {
                lines.push(FrameLine::at(location, caller));
            }
            caller = &frame.name;
        }
        if let Some(location) = error.span() {
            let line = FrameLine::at(location, caller);
            if lines
                .last()
                .is_none_or(|last| (&last.file, last.line) != (&line.file, line.line))
            {
                lines.push(line);
            }
        }
        let mut traceback = render_frames(&lines);
        traceback.push_str(&format!("{}: {message}", kind.label()));
        ExecError {
            kind,
            message,
            traceback,
        }
    }
}

/// Renders frame lines, collapsing runs of identical frames and eliding the middle of
/// long stacks.
fn render_frames(lines: &[FrameLine]) -> String {
    let mut runs: Vec<(&FrameLine, usize)> = Vec::new();
    for line in lines {
        match runs.last_mut() {
            Some((last, count)) if *last == line => *count += 1,
            _ => runs.push((line, 1)),
        }
    }
    if runs.is_empty() {
        return String::new();
    }
    let mut out = String::from("Traceback (most recent call last):\n");
    let elided = runs.len().saturating_sub(MAX_FRAMES);
    for (i, (line, count)) in runs.iter().enumerate() {
        if elided > 0 && i == MAX_FRAMES / 2 {
            out.push_str(&format!("  [... {elided} more frames ...]\n"));
        }
        if elided > 0 && i >= MAX_FRAMES / 2 && i < MAX_FRAMES / 2 + elided {
            continue;
        }
        out.push_str(&format!(
            "  File \"{}\", line {}, in {}\n",
            line.file, line.line, line.function
        ));
        if !line.source.is_empty() {
            out.push_str(&format!("    {}\n", line.source));
        }
        if *count > 1 {
            out.push_str(&format!(
                "  [Previous line repeated {} more times]\n",
                count - 1
            ));
        }
    }
    out
}
