//! Fuzzes the skill parser: `parse_response_bytes` on arbitrary bytes must not panic,
//! and every span it returns must lie in bounds and on `char` boundaries, with every
//! top-level definition's source starting at its `def`, `async` or first decorator.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sage_core::skill::{parse_code, parse_response_bytes, CodeAnalysis, MAX_ISSUES};
use std::ops::Range;

fn check_span(text: &str, span: &Range<usize>) {
    assert!(
        span.start <= span.end && span.end <= text.len(),
        "span {span:?} out of bounds"
    );
    assert!(text.is_char_boundary(span.start) && text.is_char_boundary(span.end));
}

fn check_analysis(code: &str, analysis: &CodeAnalysis) {
    for def in &analysis.defs {
        check_span(code, &def.span);
        let source = def.source(code);
        assert!(
            source.starts_with("def") || source.starts_with("async") || source.starts_with('@'),
            "definition source {source:?}"
        );
        assert!(!def.name.is_empty() && def.line >= 1);
    }
    for call in &analysis.calls {
        check_span(code, &call.span);
        assert!(!call.callee.is_empty() && call.line >= 1);
        assert!(call.enclosing_def.is_none_or(|i| i < analysis.defs.len()));
    }
    assert!(analysis.issues.len() <= MAX_ISSUES + 1);
}

fuzz_target!(|data: &[u8]| {
    let (text, response) = parse_response_bytes(data);
    for block in &response.blocks {
        check_span(&text, &block.span);
        check_span(&text, &block.outer);
    }
    check_analysis(&response.code, &response.analysis);
    check_analysis(&text, &parse_code(&text));
});
