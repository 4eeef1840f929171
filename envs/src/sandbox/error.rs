//! [`ExecError`]: how an execution failed, with a short Python-style traceback (file,
//! line, function and source line of each frame, repeated frames collapsed) that is
//! shown to the agent as the observation.

use std::fmt;

use starlark::codemap::{CodeMap, FileSpan, Span};

use super::limits::LimitKind;

/// Frames shown at most; longer tracebacks keep the outermost and innermost ones.
const MAX_FRAMES: usize = 8;

/// What kind of failure ended an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
#[derive(Clone, Debug, PartialEq, Eq)]
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
            source: location.file.source_line(line).trim().to_owned(),
        }
    }
}

impl ExecError {
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
            source_line.trim(),
            " ".repeat(caret_column),
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
