//! [`Style`]: the expert's variety knobs, drawn once per scenario from a seeded stream,
//! so that the SFT data holds several wordings of every template: the skill's name and
//! docstring, how it logs in, which docs it reads in which order, the thoughts it
//! writes, the result variable, and an occasional mistake that a later turn fixes.

use crate::scenarios::Template;

/// A mistake the expert makes on purpose in its first attempt, then fixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mistake {
    /// Passes the first access token as `token=` instead of `access_token=`.
    TokenKeyword,
    /// Asks for pages of 50 results, more than the APIs allow.
    PageLimit,
}

/// Every choice the expert makes for one scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Style {
    /// Index into the solution's names.
    pub name: usize,
    /// Index into the solution's docstring summaries.
    pub summary: usize,
    /// The docstring documents the parameters and the return value.
    pub args_section: bool,
    /// Which way of logging in (0 or 1).
    pub login: usize,
    /// How docs are looked up: 0 the app's API list then each doc, 1 each doc only, 2
    /// the list of apps first.
    pub docs: usize,
    /// Reverse the order the docs are read in.
    pub docs_reversed: bool,
    /// Seed for choosing thought wordings.
    pub thoughts: u64,
    /// The variable that holds the result.
    pub result_var: &'static str,
    /// The mistake of the first attempt, if any.
    pub mistake: Option<Mistake>,
    /// When reusing a skill, complete the task in the same turn.
    pub reuse_in_one_turn: bool,
}

/// The result variable names the expert uses.
const RESULT_VARS: [&str; 3] = ["result", "answer", "outcome"];

impl Style {
    /// The style for a scenario, drawn from `seed`; a mistake with probability
    /// `mistake_rate` (one that applies to the template's code).
    pub fn draw(template: &Template, seed: u64, mistake_rate: f64) -> Style {
        let mut rng = StyleRng(seed ^ 0x5851_f42d_4c95_7f2d);
        let solution = &template.solution;
        let page_limit = solution.body.contains("page_limit=20");
        let mistake = if rng.unit() < mistake_rate {
            if page_limit && rng.below(2) == 0 {
                Some(Mistake::PageLimit)
            } else {
                Some(Mistake::TokenKeyword)
            }
        } else {
            None
        };
        Style {
            name: rng.below(solution.names.len()),
            summary: rng.below(solution.summaries.len()),
            args_section: rng.below(3) != 0,
            login: rng.below(2),
            docs: rng.below(3),
            docs_reversed: rng.below(2) == 0,
            thoughts: rng.next(),
            result_var: RESULT_VARS[rng.below(RESULT_VARS.len())],
            mistake,
            reuse_in_one_turn: rng.below(2) == 0,
        }
    }
}

impl Style {
    /// The same style with every choice but the mistake fixed: the first name and
    /// summary, a one-line docstring, the first login, docs read in order, `result`,
    /// one fixed draw of thought wordings, and reuse completing the task in the same turn.
    pub fn canonical(self) -> Style {
        Style {
            name: 0,
            summary: 0,
            args_section: false,
            login: 0,
            docs: 0,
            docs_reversed: false,
            thoughts: 0,
            result_var: RESULT_VARS[0],
            mistake: self.mistake,
            reuse_in_one_turn: true,
        }
    }
}

/// A small seeded stream (SplitMix64) for the expert's choices.
pub(crate) struct StyleRng(pub(crate) u64);

impl StyleRng {
    /// The next 64 bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    /// A number in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// One of `options`.
    pub(crate) fn pick<'a>(&mut self, options: &[&'a str]) -> &'a str {
        options
            .get(self.below(options.len()))
            .copied()
            .unwrap_or("")
    }
}

/// A stable 64-bit hash of text (FNV-1a), for seeding styles from ids.
pub(crate) fn hash_text(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
