//! Calendar time without a clock: [`Date`] (a day) and [`Timestamp`] (a second), both
//! counted from 2000-01-01, with their ISO-8601 text forms, and the world's fixed
//! [`today`].
//!
//! The world never reads the system clock. Generated data lies before [`today`]'s
//! morning; records created by API calls are stamped by the world's logical clock,
//! which starts at noon of [`today`] and advances one second per API call.

use std::fmt;

use serde::{Serialize, Serializer};

/// Days from 1970-01-01 to 2000-01-01.
const EPOCH_SHIFT_DAYS: i64 = 10_957;
const SECONDS_PER_DAY: i64 = 86_400;

/// A calendar day, counted in days from 2000-01-01. Written `YYYY-MM-DD`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date(i32);

/// The world's "today": 2025-06-14 (a Saturday).
pub fn today() -> Date {
    Date::from_ymd(2025, 6, 14).unwrap_or(Date(0))
}

impl Date {
    /// The day with this year, month (1-12) and day of month, if it exists.
    pub fn from_ymd(year: i32, month: u32, day: u32) -> Option<Date> {
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return None;
        }
        let days = days_from_civil(i64::from(year), month, day) - EPOCH_SHIFT_DAYS;
        i32::try_from(days).ok().map(Date)
    }

    /// The day `days` days after 2000-01-01 (negative: before).
    pub fn from_days(days: i32) -> Date {
        Date(days)
    }

    /// Days since 2000-01-01.
    pub fn days(self) -> i32 {
        self.0
    }

    /// Year, month (1-12) and day of month.
    pub fn ymd(self) -> (i32, u32, u32) {
        let (y, m, d) = civil_from_days(i64::from(self.0) + EPOCH_SHIFT_DAYS);
        (y as i32, m, d)
    }

    /// The year.
    pub fn year(self) -> i32 {
        self.ymd().0
    }

    /// The month, 1-12.
    pub fn month(self) -> u32 {
        self.ymd().1
    }

    /// The day of the month, 1-31.
    pub fn day(self) -> u32 {
        self.ymd().2
    }

    /// The day `days` days later (earlier when negative).
    pub fn add_days(self, days: i32) -> Date {
        Date(self.0.saturating_add(days))
    }

    /// The weekday's English name (`Monday`, ...).
    pub fn weekday(self) -> &'static str {
        const NAMES: [&str; 7] = [
            "Saturday",
            "Sunday",
            "Monday",
            "Tuesday",
            "Wednesday",
            "Thursday",
            "Friday",
        ];
        NAMES[self.0.rem_euclid(7) as usize]
    }

    /// The moment `hour:minute:second` of this day.
    pub fn at(self, hour: u32, minute: u32, second: u32) -> Timestamp {
        let seconds = i64::from(hour.min(23)) * 3600
            + i64::from(minute.min(59)) * 60
            + i64::from(second.min(59));
        Timestamp(i64::from(self.0) * SECONDS_PER_DAY + seconds)
    }

    /// Parses `YYYY-MM-DD`.
    pub fn parse(text: &str) -> Option<Date> {
        let mut parts = text.trim().splitn(3, '-');
        let year = parts.next()?.parse().ok()?;
        let month = parts.next()?.parse().ok()?;
        let day = parts.next()?.parse().ok()?;
        Date::from_ymd(year, month, day)
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = self.ymd();
        write!(f, "{y:04}-{m:02}-{d:02}")
    }
}

impl Serialize for Date {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A moment to the second, counted in seconds from 2000-01-01T00:00:00. Written
/// `YYYY-MM-DDTHH:MM:SS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The moment `seconds` seconds after 2000-01-01T00:00:00.
    pub fn from_seconds(seconds: i64) -> Timestamp {
        Timestamp(seconds)
    }

    /// Seconds since 2000-01-01T00:00:00.
    pub fn seconds(self) -> i64 {
        self.0
    }

    /// The day this moment falls on.
    pub fn date(self) -> Date {
        Date(self.0.div_euclid(SECONDS_PER_DAY) as i32)
    }

    /// Hour, minute and second of the day.
    pub fn hms(self) -> (u32, u32, u32) {
        let s = self.0.rem_euclid(SECONDS_PER_DAY) as u32;
        (s / 3600, s / 60 % 60, s % 60)
    }

    /// The moment `seconds` seconds later.
    pub fn add_seconds(self, seconds: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(seconds))
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS` (a space may replace the `T`).
    pub fn parse(text: &str) -> Option<Timestamp> {
        let text = text.trim();
        let (date, time) = text.split_once(['T', ' '])?;
        let date = Date::parse(date)?;
        let mut parts = time.splitn(3, ':');
        let hour: u32 = parts.next()?.parse().ok()?;
        let minute: u32 = parts.next()?.parse().ok()?;
        let second: u32 = parts.next()?.parse().ok()?;
        if hour > 23 || minute > 59 || second > 59 {
            return None;
        }
        Some(date.at(hour, minute, second))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (h, m, s) = self.hms();
        write!(f, "{}T{h:02}:{m:02}:{s:02}", self.date())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Days in `month` of `year` (Gregorian).
pub fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days from 1970-01-01 to a Gregorian date (the proleptic calendar, any year).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    // Count years from March, so that the leap day ends a year.
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The Gregorian date `days` days after 1970-01-01; inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}
