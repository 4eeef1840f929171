//! The byte-level Python/Starlark tokenizer: turns program text into logical lines of
//! [`Token`]s, each with its block depth from the indentation.
//!
//! It follows Python's rules where they matter for finding definitions and calls:
//! physical lines are joined inside brackets and after a backslash; blank and
//! comment-only lines carry no indentation; strings (any prefix, single or triple
//! quoted) and comments are single tokens or skipped, so `def` or `(` inside them is
//! never seen; tabs advance to the next multiple of 8 and are checked against spaces as
//! Python does. The expressions inside f-string replacement fields are tokenized too
//! (marked with a field id), so calls there are found. Every string, f-strings
//! included, ends at its first unescaped closing quote (the rule before Python 3.12,
//! and Starlark's), so a field may not reuse its string's quote.
//!
//! Every byte is looked at a bounded number of times (once, plus once per f-string
//! nesting level up to [`MAX_FSTRING_NESTING`]), so the work is linear in the input.
//! Malformed input is reported to the [`IssueLog`] and lexed on as well as possible: an
//! unclosed bracket ends at the next line that starts with `def`, `async def` or
//! `class` (which cannot be inside brackets), an unclosed single-quoted string at the
//! end of its line. Token boundaries are always ASCII bytes or the end of the text, so
//! every span lies on `char` boundaries.

use super::issue::{IssueKind, IssueLog};
use alloc::vec::Vec;
use core::ops::Range;

/// F-strings nested deeper than this inside replacement fields are not searched for
/// fields (Python's own limit without same-quote reuse is 4).
pub(super) const MAX_FSTRING_NESTING: u8 = 4;

/// Punctuation the parser tells apart; every other operator is [`Punct::Other`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Punct {
    /// `:`
    Colon,
    /// `,`
    Comma,
    /// `=` (not `==`, `:=` or an augmented assignment).
    Equals,
    /// `.`
    Dot,
    /// `*`
    Star,
    /// `**`
    DoubleStar,
    /// `/`
    Slash,
    /// `->`
    Arrow,
    /// `@`
    At,
    /// `;`
    Semicolon,
    /// Any other operator or stray character.
    Other,
}

/// What a string literal looks like: prefix, quotes, and whether it closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct StrInfo {
    /// Bytes of prefix letters (`r`, `f`, `rb`, ...).
    pub(super) prefix_len: u8,
    /// 1 for `'`/`"`, 3 for triple quotes.
    pub(super) quote_len: u8,
    /// Whether the closing quote was found.
    pub(super) terminated: bool,
    /// An f-string.
    pub(super) formatted: bool,
    /// A bytes literal.
    pub(super) bytes: bool,
}

impl StrInfo {
    /// The byte range between the quotes of the string token spanning `token`.
    pub(super) fn content(&self, token: Range<usize>) -> Range<usize> {
        let open = usize::from(self.prefix_len) + usize::from(self.quote_len);
        let close = if self.terminated {
            usize::from(self.quote_len)
        } else {
            0
        };
        let start = token.start.saturating_add(open).min(token.end);
        let end = token.end.saturating_sub(close).max(start);
        start..end
    }
}

/// The kind of a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TokenKind {
    /// An identifier or keyword.
    Name,
    /// A numeric literal.
    Number,
    /// A string literal, prefix and quotes included.
    Str(StrInfo),
    /// `(`, `[` or `{`.
    Open(u8),
    /// `)`, `]` or `}`.
    Close(u8),
    /// An operator or delimiter.
    Punct(Punct),
}

/// One token: its kind, byte span and 1-based line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Token {
    /// First byte.
    pub(super) start: usize,
    /// One past the last byte.
    pub(super) end: usize,
    /// 1-based line of the first byte.
    pub(super) line: u32,
    /// 0 for a token of the line itself, otherwise the id of the f-string
    /// replacement field it was found in.
    pub(super) field: u32,
    /// What it is.
    pub(super) kind: TokenKind,
}

impl Token {
    /// Whether this is a token of the line itself rather than of an f-string field.
    pub(super) fn is_direct(&self) -> bool {
        self.field == 0
    }
}

/// A logical line: the tokens are in the buffer given to [`Lexer::next_line`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LogicalLine {
    /// Block depth from the indentation: 0 for a top-level statement.
    pub(super) depth: usize,
    /// End of the line's last token or trailing comment.
    pub(super) end: usize,
}

/// A column of an enclosing block's indentation: with tabs to multiples of 8, and
/// with tabs as one column (Python's check for ambiguous tab use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Indent {
    col: usize,
    alt: usize,
}

/// An open bracket and the line it opened on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OpenBracket {
    byte: u8,
    line: u32,
}

/// Splits program text into logical lines of tokens.
pub(super) struct Lexer<'a> {
    scan: Scanner<'a>,
    indents: Vec<Indent>,
    brackets: Vec<OpenBracket>,
    /// Whether the previous logical line ended with `:` (a block header).
    opens_block: bool,
    /// The id given to the last f-string field.
    last_field: u32,
}

impl<'a> Lexer<'a> {
    /// A lexer at the start of `code`.
    pub(super) fn new(code: &'a str) -> Lexer<'a> {
        let src = code.as_bytes();
        Lexer {
            scan: Scanner {
                src,
                pos: 0,
                end: src.len(),
                line: 1,
            },
            indents: Vec::new(),
            brackets: Vec::new(),
            opens_block: false,
            last_field: 0,
        }
    }

    /// Lexes the next logical line into `tokens` (cleared first), or returns `None`
    /// at the end of the text.
    pub(super) fn next_line(
        &mut self,
        tokens: &mut Vec<Token>,
        issues: &mut IssueLog,
    ) -> Option<LogicalLine> {
        tokens.clear();
        let indent = loop {
            let indent = self.scan.skip_indent();
            match self.scan.peek() {
                None => {
                    self.finish(issues);
                    return None;
                }
                Some(b'#') => {
                    self.scan.skip_comment();
                    self.scan.eat_newline();
                }
                Some(b'\n' | b'\r') => {
                    self.scan.eat_newline();
                }
                Some(_) => break indent,
            }
        };
        let depth = self.enter_block(indent, issues);
        let end = self.lex_line(tokens, issues);
        self.opens_block = tokens
            .iter()
            .rev()
            .find(|t| t.is_direct())
            .is_some_and(|t| t.kind == TokenKind::Punct(Punct::Colon));
        Some(LogicalLine { depth, end })
    }

    /// Lexes tokens up to the end of the logical line; returns the end of its content.
    fn lex_line(&mut self, tokens: &mut Vec<Token>, issues: &mut IssueLog) -> usize {
        let mut end = self.scan.pos;
        while let Some(byte) = self.scan.peek() {
            match byte {
                b' ' | b'\t' | 0x0b | 0x0c => self.scan.pos += 1,
                b'#' => {
                    self.scan.skip_comment();
                    end = self.scan.pos;
                }
                b'\n' | b'\r' => {
                    self.scan.eat_newline();
                    if self.brackets.is_empty() {
                        return end;
                    }
                    if self.scan.at_definition_keyword() {
                        self.report_unclosed(issues);
                        return end;
                    }
                }
                b'\\' => {
                    self.scan.pos += 1;
                    if !self.scan.eat_newline() {
                        issues.push(self.scan.line, IssueKind::StrayBackslash);
                    }
                }
                _ => {
                    let token = self.scan.token(issues);
                    match token.kind {
                        TokenKind::Open(byte) => self.brackets.push(OpenBracket {
                            byte,
                            line: token.line,
                        }),
                        TokenKind::Close(byte) => self.close_bracket(byte, token.line, issues),
                        _ => {}
                    }
                    end = token.end;
                    tokens.push(token);
                    if let TokenKind::Str(info) = token.kind {
                        if info.formatted {
                            let content = info.content(token.start..token.end);
                            let mut fields = FieldLexer {
                                src: self.scan.src,
                                last_field: &mut self.last_field,
                                tokens,
                                issues,
                            };
                            fields.lex_fields(content, token.line, 1);
                        }
                    }
                }
            }
        }
        self.report_unclosed(issues);
        end
    }

    /// Reports the outermost still-open bracket, if any, and forgets all of them.
    fn report_unclosed(&mut self, issues: &mut IssueLog) {
        if let Some(open) = self.brackets.first() {
            issues.push(open.line, IssueKind::UnclosedBracket(char::from(open.byte)));
        }
        self.brackets.clear();
    }

    /// Matches a closing bracket against the innermost open one.
    fn close_bracket(&mut self, close: u8, line: u32, issues: &mut IssueLog) {
        let expected = match close {
            b')' => b'(',
            b']' => b'[',
            _ => b'{',
        };
        match self.brackets.pop() {
            None => issues.push(line, IssueKind::UnmatchedBracket(char::from(close))),
            Some(open) if open.byte == expected => {}
            Some(open) => issues.push(
                line,
                IssueKind::MismatchedBracket {
                    open: char::from(open.byte),
                    close: char::from(close),
                },
            ),
        }
    }

    /// Applies a logical line's indentation to the block stack and returns its depth.
    ///
    /// The first line's indentation is the base (depth 0) even when it is not column 0,
    /// so an indented snippet still has top-level statements.
    fn enter_block(&mut self, indent: Indent, issues: &mut IssueLog) -> usize {
        let line = self.scan.line;
        let opened = self.opens_block;
        let Some(&top) = self.indents.last() else {
            if indent.col > 0 {
                issues.push(line, IssueKind::UnexpectedIndent);
            }
            self.indents.push(indent);
            return 0;
        };
        if indent.col > top.col {
            if indent.alt <= top.alt {
                issues.push(line, IssueKind::InconsistentTabs);
            }
            if !opened {
                issues.push(line, IssueKind::UnexpectedIndent);
            }
            self.indents.push(indent);
        } else {
            if opened {
                issues.push(line, IssueKind::ExpectedIndentedBlock);
            }
            while self.indents.len() > 1 && self.indents.last().is_some_and(|i| indent.col < i.col)
            {
                self.indents.pop();
            }
            match self.indents.last_mut() {
                Some(level) if level.col == indent.col => {
                    if level.alt != indent.alt {
                        issues.push(line, IssueKind::InconsistentTabs);
                    }
                }
                Some(level) if indent.col < level.col => {
                    issues.push(line, IssueKind::InconsistentDedent);
                    *level = indent;
                }
                _ => {
                    issues.push(line, IssueKind::InconsistentDedent);
                    self.indents.push(indent);
                }
            }
        }
        self.indents.len().saturating_sub(1)
    }

    /// Reports what is still open at the end of the text.
    fn finish(&mut self, issues: &mut IssueLog) {
        if self.opens_block {
            issues.push(self.scan.line, IssueKind::ExpectedIndentedBlock);
            self.opens_block = false;
        }
        self.report_unclosed(issues);
    }
}

/// Tokenizes the replacement fields of an f-string into the line's token buffer.
struct FieldLexer<'s, 'b> {
    src: &'s [u8],
    last_field: &'b mut u32,
    tokens: &'b mut Vec<Token>,
    issues: &'b mut IssueLog,
}

impl FieldLexer<'_, '_> {
    /// Finds the replacement fields in an f-string's `content` (which starts on `line`)
    /// and tokenizes their expressions; `nesting` is 1 for a top-level f-string.
    fn lex_fields(&mut self, content: Range<usize>, line: u32, nesting: u8) {
        let mut scan = Scanner {
            src: self.src,
            pos: content.start,
            end: content.end,
            line,
        };
        while let Some(byte) = scan.peek() {
            match byte {
                b'{' if scan.peek_at(1) == Some(b'{') => scan.pos += 2,
                b'{' => {
                    scan.pos += 1;
                    *self.last_field = self.last_field.saturating_add(1);
                    let field = *self.last_field;
                    self.lex_field(&mut scan, field, nesting);
                }
                b'\n' | b'\r' => {
                    scan.eat_newline();
                }
                _ => scan.pos += 1,
            }
        }
    }

    /// Tokenizes one replacement field's expression, from after its `{` to its `}`
    /// (or the start of its conversion or format spec, which are skipped).
    fn lex_field(&mut self, scan: &mut Scanner<'_>, field: u32, nesting: u8) {
        let mut depth = 0usize;
        while let Some(byte) = scan.peek() {
            match byte {
                b' ' | b'\t' | 0x0b | 0x0c | b'\\' => scan.pos += 1,
                b'\n' | b'\r' => {
                    scan.eat_newline();
                }
                b'}' if depth == 0 => {
                    scan.pos += 1;
                    return;
                }
                b':' if depth == 0 => return scan.skip_format_spec(),
                b'!' if depth == 0 && scan.peek_at(1) != Some(b'=') => {
                    return scan.skip_format_spec()
                }
                _ => {
                    let mut token = scan.token(self.issues);
                    token.field = field;
                    match token.kind {
                        TokenKind::Open(_) => depth += 1,
                        TokenKind::Close(_) => depth = depth.saturating_sub(1),
                        _ => {}
                    }
                    self.tokens.push(token);
                    if let TokenKind::Str(info) = token.kind {
                        if info.formatted && nesting < MAX_FSTRING_NESTING {
                            let content = info.content(token.start..token.end);
                            self.lex_fields(content, token.line, nesting + 1);
                        }
                    }
                }
            }
        }
    }
}

/// Which bytes can continue an identifier: ASCII letters, digits, `_`, and any
/// non-ASCII byte (every byte of a non-ASCII character is taken as part of a name).
const NAME_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        let b = byte as u8;
        table[byte] = b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80;
        byte += 1;
    }
    table
};

/// Whether `byte` can start an identifier.
fn is_name_start(byte: u8) -> bool {
    is_name_byte(byte) && !byte.is_ascii_digit()
}

/// Whether `byte` can continue an identifier.
pub(super) fn is_name_byte(byte: u8) -> bool {
    NAME_BYTES[usize::from(byte)]
}

/// Whether `prefix` is a string prefix: one or two of `r`, `b`, `u`, `f` in any case.
fn is_string_prefix(prefix: &[u8]) -> bool {
    !prefix.is_empty()
        && prefix.len() <= 2
        && prefix
            .iter()
            .all(|b| matches!(b.to_ascii_lowercase(), b'r' | b'b' | b'u' | b'f'))
}

/// A cursor over `src[..end]` that lexes single tokens and counts lines.
struct Scanner<'a> {
    src: &'a [u8],
    pos: usize,
    end: usize,
    line: u32,
}

impl<'a> Scanner<'a> {
    /// The byte at the cursor, if before the end.
    fn peek(&self) -> Option<u8> {
        self.peek_at(0)
    }

    /// The byte `ahead` bytes past the cursor, if before the end.
    fn peek_at(&self, ahead: usize) -> Option<u8> {
        let at = self.pos.checked_add(ahead)?;
        if at < self.end {
            self.src.get(at).copied()
        } else {
            None
        }
    }

    /// The bytes from the cursor to the end.
    fn rest(&self) -> &'a [u8] {
        self.src.get(self.pos..self.end).unwrap_or(&[])
    }

    /// Moves the cursor to the first byte from it on that satisfies `stop` (or to the
    /// end); returns that byte.
    fn advance_until(&mut self, stop: impl Fn(u8) -> bool) -> Option<u8> {
        let rest = self.rest();
        match rest.iter().position(|&b| stop(b)) {
            Some(i) => {
                self.pos += i;
                rest.get(i).copied()
            }
            None => {
                self.pos += rest.len();
                None
            }
        }
    }

    /// Consumes one `\n`, `\r\n` or lone `\r` and counts the line; false if none.
    fn eat_newline(&mut self) -> bool {
        match self.peek() {
            Some(b'\n') => self.pos += 1,
            Some(b'\r') => {
                self.pos += 1;
                if self.peek() == Some(b'\n') {
                    self.pos += 1;
                }
            }
            _ => return false,
        }
        self.line = self.line.saturating_add(1);
        true
    }

    /// Skips a comment up to (not including) its line break.
    fn skip_comment(&mut self) {
        self.advance_until(|b| b == b'\n' || b == b'\r');
    }

    /// Skips blanks at the start of a line and returns their indentation.
    fn skip_indent(&mut self) -> Indent {
        let mut indent = Indent { col: 0, alt: 0 };
        loop {
            match self.peek() {
                Some(b' ') => {
                    indent.col = indent.col.saturating_add(1);
                    indent.alt = indent.alt.saturating_add(1);
                }
                Some(b'\t') => {
                    indent.col = (indent.col | 7).saturating_add(1);
                    indent.alt = indent.alt.saturating_add(1);
                }
                Some(0x0c) => indent = Indent { col: 0, alt: 0 },
                _ => return indent,
            }
            self.pos += 1;
        }
    }

    /// Whether the line at the cursor starts (after blanks) with `def`, `class` or
    /// `async def`: keywords that cannot appear inside brackets.
    fn at_definition_keyword(&self) -> bool {
        let rest = self.src.get(self.pos..self.end).unwrap_or(&[]);
        let rest = skip_blanks(rest);
        if let Some(after) = keyword_then_blank(rest, b"async") {
            return keyword_then_blank(skip_blanks(after), b"def").is_some();
        }
        keyword_then_blank(rest, b"def").is_some() || keyword_then_blank(rest, b"class").is_some()
    }

    /// Skips an f-string field's conversion and format spec, up to and including the
    /// field's closing `}`.
    fn skip_format_spec(&mut self) {
        let mut depth = 0usize;
        while let Some(byte) = self.peek() {
            if self.eat_newline() {
                continue;
            }
            self.pos += 1;
            match byte {
                b'{' => depth += 1,
                b'}' if depth == 0 => return,
                b'}' => depth -= 1,
                _ => {}
            }
        }
    }

    /// Lexes the token at the cursor, which is not a blank, line break, comment or
    /// backslash.
    #[inline(always)]
    fn token(&mut self, issues: &mut IssueLog) -> Token {
        let start = self.pos;
        let line = self.line;
        let byte = self.peek().unwrap_or(b' ');
        let kind = match byte {
            b'"' | b'\'' => TokenKind::Str(self.string(0, issues)),
            b'0'..=b'9' => self.number(),
            b'.' if self.peek_at(1).is_some_and(|b| b.is_ascii_digit()) => self.number(),
            b'(' | b'[' | b'{' => {
                self.pos += 1;
                TokenKind::Open(byte)
            }
            b')' | b']' | b'}' => {
                self.pos += 1;
                TokenKind::Close(byte)
            }
            _ if is_name_start(byte) => {
                self.pos += 1;
                self.advance_until(|b| !is_name_byte(b));
                let prefix = self.src.get(start..self.pos).unwrap_or(&[]);
                if matches!(self.peek(), Some(b'"' | b'\'')) && is_string_prefix(prefix) {
                    TokenKind::Str(self.string(self.pos - start, issues))
                } else {
                    TokenKind::Name
                }
            }
            _ => TokenKind::Punct(self.punct()),
        };
        Token {
            start,
            end: self.pos,
            line,
            field: 0,
            kind,
        }
    }

    /// Lexes a numeric literal (loosely: digits, letters, `_`, `.` and exponent signs).
    fn number(&mut self) -> TokenKind {
        self.pos += 1;
        while let Some(byte) = self.peek() {
            if byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'.' {
                self.pos += 1;
                if matches!(byte, b'e' | b'E') && matches!(self.peek(), Some(b'+' | b'-')) {
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
        TokenKind::Number
    }

    /// Lexes a string literal whose quote is at the cursor and whose prefix (of
    /// `prefix_len` bytes) is just before it.
    fn string(&mut self, prefix_len: usize, issues: &mut IssueLog) -> StrInfo {
        let line = self.line;
        let prefix = self
            .src
            .get(self.pos.saturating_sub(prefix_len)..self.pos)
            .unwrap_or(&[]);
        let quote = self.peek().unwrap_or(b'"');
        let triple = self.peek_at(1) == Some(quote) && self.peek_at(2) == Some(quote);
        let quote_len: u8 = if triple { 3 } else { 1 };
        self.pos += usize::from(quote_len);
        let terminated = loop {
            let special = |b: u8| b == quote || b == b'\\' || b == b'\n' || b == b'\r';
            let Some(byte) = self.advance_until(special) else {
                break false;
            };
            match byte {
                b'\\' => {
                    self.pos += 1;
                    if !self.eat_newline() && self.peek().is_some() {
                        self.pos += 1;
                    }
                }
                b'\n' | b'\r' if triple => {
                    self.eat_newline();
                }
                b'\n' | b'\r' => break false,
                _ if !triple => {
                    self.pos += 1;
                    break true;
                }
                _ if self.peek_at(1) == Some(quote) && self.peek_at(2) == Some(quote) => {
                    self.pos += 3;
                    break true;
                }
                _ => self.pos += 1,
            }
        };
        if !terminated {
            issues.push(line, IssueKind::UnterminatedString);
        }
        StrInfo {
            prefix_len: u8::try_from(prefix.len()).unwrap_or(0),
            quote_len,
            terminated,
            formatted: prefix.iter().any(|b| matches!(b, b'f' | b'F')),
            bytes: prefix.iter().any(|b| matches!(b, b'b' | b'B')),
        }
    }

    /// Lexes an operator or stray character (longest match for the ones that matter).
    fn punct(&mut self) -> Punct {
        let first = self.peek().unwrap_or(b' ');
        let second = self.peek_at(1);
        let third = self.peek_at(2);
        let (len, punct) = match (first, second) {
            (b':', Some(b'=')) => (2, Punct::Other),
            (b':', _) => (1, Punct::Colon),
            (b',', _) => (1, Punct::Comma),
            (b';', _) => (1, Punct::Semicolon),
            (b'=', Some(b'=')) => (2, Punct::Other),
            (b'=', _) => (1, Punct::Equals),
            (b'.', Some(b'.')) if third == Some(b'.') => (3, Punct::Other),
            (b'.', _) => (1, Punct::Dot),
            (b'*', Some(b'*')) if third == Some(b'=') => (3, Punct::Other),
            (b'*', Some(b'*')) => (2, Punct::DoubleStar),
            (b'*', Some(b'=')) => (2, Punct::Other),
            (b'*', _) => (1, Punct::Star),
            (b'/', Some(b'/')) if third == Some(b'=') => (3, Punct::Other),
            (b'/', Some(b'/' | b'=')) => (2, Punct::Other),
            (b'/', _) => (1, Punct::Slash),
            (b'-', Some(b'>')) => (2, Punct::Arrow),
            (b'@', Some(b'=')) => (2, Punct::Other),
            (b'@', _) => (1, Punct::At),
            (b'<', Some(b'<')) | (b'>', Some(b'>')) if third == Some(b'=') => (3, Punct::Other),
            (b'<', Some(b'<')) | (b'>', Some(b'>')) => (2, Punct::Other),
            (b'!' | b'<' | b'>' | b'+' | b'-' | b'%' | b'&' | b'|' | b'^', Some(b'=')) => {
                (2, Punct::Other)
            }
            _ => (1, Punct::Other),
        };
        self.pos += len;
        punct
    }
}

/// `bytes` without its leading spaces and tabs.
fn skip_blanks(bytes: &[u8]) -> &[u8] {
    let blanks = bytes
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    bytes.get(blanks..).unwrap_or(&[])
}

/// What follows `keyword` and one blank at the start of `bytes`, if they are there.
fn keyword_then_blank<'b>(bytes: &'b [u8], keyword: &[u8]) -> Option<&'b [u8]> {
    let rest = bytes.strip_prefix(keyword)?;
    match rest.first() {
        Some(b' ' | b'\t') => rest.get(1..),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn lines(code: &str) -> (Vec<(usize, Vec<&str>)>, Vec<IssueKind>) {
        let mut lexer = Lexer::new(code);
        let mut issues = IssueLog::default();
        let mut tokens = Vec::new();
        let mut out = Vec::new();
        while let Some(line) = lexer.next_line(&mut tokens, &mut issues) {
            let texts = tokens.iter().map(|t| &code[t.start..t.end]).collect();
            out.push((line.depth, texts));
        }
        let kinds = issues.into_vec().into_iter().map(|i| i.kind).collect();
        (out, kinds)
    }

    #[test]
    fn joins_lines_in_brackets_and_after_backslash() {
        let (out, issues) = lines("x = (1,\n  2)\ny = 1 + \\\n  2\n");
        assert_eq!(out[0], (0, vec!["x", "=", "(", "1", ",", "2", ")"]));
        assert_eq!(out[1], (0, vec!["y", "=", "1", "+", "2"]));
        assert!(issues.is_empty());
    }

    #[test]
    fn strings_and_comments_hide_keywords() {
        let (out, _) = lines("s = 'def f(' # def g(\nt = rb\"\"\"(\ndef\"\"\"\n");
        assert_eq!(out[0].1, vec!["s", "=", "'def f('"]);
        assert_eq!(out[1].1, vec!["t", "=", "rb\"\"\"(\ndef\"\"\""]);
    }

    #[test]
    fn fstring_fields_are_tokenized() {
        let code = "print(f\"{a(1)!r:>{w}} {{x}} {b['k']}\")";
        let mut lexer = Lexer::new(code);
        let mut issues = IssueLog::default();
        let mut tokens = Vec::new();
        lexer.next_line(&mut tokens, &mut issues);
        let fields: Vec<(&str, u32)> = tokens
            .iter()
            .filter(|t| !t.is_direct())
            .map(|t| (&code[t.start..t.end], t.field))
            .collect();
        assert_eq!(
            fields,
            vec![
                ("a", 1),
                ("(", 1),
                ("1", 1),
                (")", 1),
                ("b", 2),
                ("[", 2),
                ("'k'", 2),
                ("]", 2)
            ]
        );
    }

    #[test]
    fn indentation_depths_and_issues() {
        let (out, issues) = lines("if a:\n\tb\n        c\nd\n  e\n");
        let depths: Vec<usize> = out.iter().map(|l| l.0).collect();
        assert_eq!(depths, vec![0, 1, 1, 0, 1]);
        assert_eq!(
            issues,
            vec![IssueKind::InconsistentTabs, IssueKind::UnexpectedIndent]
        );
    }

    #[test]
    fn unclosed_bracket_recovers_at_def() {
        let (out, issues) = lines("x = f(1,\ndef g():\n    pass\n");
        assert_eq!(out[1].1[0], "def");
        assert_eq!(issues, vec![IssueKind::UnclosedBracket('(')]);
    }
}
