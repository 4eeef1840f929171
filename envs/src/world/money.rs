//! [`Money`]: an amount in whole cents, shown to agent code as a float of dollars.

use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Neg, Sub, SubAssign};

use serde::{Serialize, Serializer};

/// Largest amount one API call may move: $1,000,000.
const MAX_AMOUNT_CENTS: i64 = 100_000_000;

/// An amount of money in cents. Exact arithmetic; serialized (and returned by APIs) as
/// dollars, e.g. `12.5` for 1250 cents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Money(i64);

impl Money {
    /// Zero dollars.
    pub const ZERO: Money = Money(0);

    /// An amount in cents.
    pub const fn from_cents(cents: i64) -> Money {
        Money(cents)
    }

    /// An amount in whole dollars.
    pub const fn from_dollars(dollars: i64) -> Money {
        Money(dollars.saturating_mul(100))
    }

    /// The amount in cents.
    pub const fn cents(self) -> i64 {
        self.0
    }

    /// The amount in dollars, as agent code sees it.
    pub fn dollars(self) -> f64 {
        self.0 as f64 / 100.0
    }

    /// The amount as a JSON number of dollars.
    pub fn to_json(self) -> serde_json::Value {
        serde_json::Value::from(self.dollars())
    }

    /// Reads an amount agent code passed: a positive number of dollars with at most two
    /// decimals, at most $1,000,000. The error says what is wrong.
    pub fn parse_amount(dollars: f64) -> Result<Money, String> {
        if !dollars.is_finite() || dollars <= 0.0 {
            return Err(format!(
                "amount must be a positive number of dollars, got {dollars}"
            ));
        }
        let cents = (dollars * 100.0).round();
        if (dollars * 100.0 - cents).abs() > 1e-6 {
            return Err(format!(
                "amount must have at most 2 decimal places, got {dollars}"
            ));
        }
        if cents > MAX_AMOUNT_CENTS as f64 {
            return Err(format!("amount must be at most $1,000,000, got {dollars}"));
        }
        Ok(Money(cents as i64))
    }

    /// Splits the amount into `parts` shares that differ by at most one cent and add up
    /// exactly; the leftover cents go to the first shares. Empty when `parts` is 0.
    pub fn split_evenly(self, parts: usize) -> Vec<Money> {
        if parts == 0 {
            return Vec::new();
        }
        let n = parts as i64;
        let base = self.0.div_euclid(n);
        let leftover = self.0.rem_euclid(n);
        (0..n)
            .map(|i| Money(base + i64::from(i < leftover)))
            .collect()
    }

    /// The amount `count` times over (a unit price times a quantity).
    pub fn times(self, count: u32) -> Money {
        Money(self.0.saturating_mul(i64::from(count)))
    }

    /// The absolute amount.
    pub fn abs(self) -> Money {
        Money(self.0.saturating_abs())
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let cents = self.0.unsigned_abs();
        write!(f, "{sign}${}.{:02}", cents / 100, cents % 100)
    }
}

impl Serialize for Money {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.dollars())
    }
}

impl Add for Money {
    type Output = Money;
    fn add(self, other: Money) -> Money {
        Money(self.0.saturating_add(other.0))
    }
}

impl Sub for Money {
    type Output = Money;
    fn sub(self, other: Money) -> Money {
        Money(self.0.saturating_sub(other.0))
    }
}

impl Neg for Money {
    type Output = Money;
    fn neg(self) -> Money {
        Money(self.0.saturating_neg())
    }
}

impl AddAssign for Money {
    fn add_assign(&mut self, other: Money) {
        *self = *self + other;
    }
}

impl SubAssign for Money {
    fn sub_assign(&mut self, other: Money) {
        *self = *self - other;
    }
}

impl Sum for Money {
    fn sum<I: Iterator<Item = Money>>(iter: I) -> Money {
        iter.fold(Money::ZERO, Add::add)
    }
}
