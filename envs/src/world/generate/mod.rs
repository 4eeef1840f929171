//! The seeded generator of a consistent world: people and their relations first, then
//! every app's data about them. Each part draws from its own random stream
//! ([`Rng::fork`] of the seed and the part's name), so the same seed always yields the
//! same world. Every generated moment lies before noon of [`today`], when episodes
//! start.
//!
//! Shape of the world: person 1 (the user) has roommates, family, friends and
//! coworkers; the other people are related among themselves too. Most data involves
//! the user (who the tasks are about), and every other person has some of their own,
//! so that APIs must tell whose data is whose.

mod coinpay;
mod files;
mod mail;
mod notes;
mod people;
mod phone;
mod shop;
mod splitbill;
mod todo;
mod tunes;
mod words;

use super::db::Db;
use super::rng::Rng;
use super::table::PersonId;
use super::time::{today, Timestamp};
use super::USER;

/// The fewest people a world has.
pub(crate) const MIN_PEOPLE: usize = 30;
/// The most people a world has.
pub(crate) const MAX_PEOPLE: usize = 1000;

/// The world of `seed` with `people` people (clamped to
/// [`MIN_PEOPLE`]..=[`MAX_PEOPLE`]).
pub(crate) fn generate(seed: u64, people: usize) -> Db {
    let mut db = Db::default();
    people::generate(
        &mut db,
        &mut Rng::fork(seed, "people"),
        people.clamp(MIN_PEOPLE, MAX_PEOPLE),
    );
    tunes::generate(&mut db, &mut Rng::fork(seed, "tunes"));
    coinpay::generate(&mut db, &mut Rng::fork(seed, "coinpay"));
    mail::generate(&mut db, &mut Rng::fork(seed, "mail"));
    phone::generate(&mut db, &mut Rng::fork(seed, "phone"));
    notes::generate(&mut db, &mut Rng::fork(seed, "notes"));
    todo::generate(&mut db, &mut Rng::fork(seed, "todo"));
    shop::generate(&mut db, &mut Rng::fork(seed, "shop"));
    files::generate(&mut db, &mut Rng::fork(seed, "files"));
    splitbill::generate(&mut db, &mut Rng::fork(seed, "splitbill"));
    db
}

/// A moment between 1 and `days_back` days before today, between 07:00 and 22:59.
fn past_moment(rng: &mut Rng, days_back: i32) -> Timestamp {
    let day = today().add_days(-(rng.range(1, i64::from(days_back.max(1))) as i32));
    day.at(
        rng.range(7, 22) as u32,
        rng.range(0, 59) as u32,
        rng.range(0, 59) as u32,
    )
}

/// A moment `min_seconds` to `max_seconds` after `start`, but no later than 09:00
/// today and never before `start`.
fn moment_after(rng: &mut Rng, start: Timestamp, min_seconds: i64, max_seconds: i64) -> Timestamp {
    start
        .add_seconds(rng.range(min_seconds, max_seconds))
        .min(today().at(9, 0, 0))
        .max(start)
}

/// Every person but the user, in id order.
fn others(db: &Db) -> Vec<PersonId> {
    db.people
        .iter()
        .map(|(id, _)| id)
        .filter(|&id| id != USER)
        .collect()
}

/// The people related to `person`, in id order.
fn acquaintances(db: &Db, person: PersonId) -> Vec<PersonId> {
    db.relations_of(person)
        .into_iter()
        .map(|(p, _)| p)
        .collect()
}

/// `count` random decimal digits.
fn digits(rng: &mut Rng, count: usize) -> String {
    (0..count)
        .map(|_| char::from(b'0' + rng.below(10) as u8))
        .collect()
}
