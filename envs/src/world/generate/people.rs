//! People, relations, app accounts, addresses and payment cards.

use super::words::{
    CARD_NAMES, CITIES, EMAIL_DOMAINS, FIRST_NAMES, LAST_NAMES, STREETS, STREET_SUFFIXES,
};
use super::{digits, others};
use crate::world::apps::LOGIN_APPS;
use crate::world::db::Db;
use crate::world::records::{Account, Address, PaymentCard, Person, Relation, RelationKind};
use crate::world::rng::Rng;
use crate::world::table::PersonId;
use crate::world::time::{today, Date};
use crate::world::USER;

/// How many people the user has of each relation.
const USER_RELATIONS: [(RelationKind, usize); 4] = [
    (RelationKind::Roommate, 2),
    (RelationKind::Family, 4),
    (RelationKind::Friend, 10),
    (RelationKind::Coworker, 7),
];

/// Relations each other person starts (with people other than the user).
const RELATIONS_PER_PERSON: usize = 3;

const PASSWORD_CHARS: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";

pub(super) fn generate(db: &mut Db, rng: &mut Rng, count: usize) {
    add_people(db, rng, count);
    add_relations(db, rng);
    for (person, p) in db
        .people
        .iter()
        .map(|(id, p)| (id, p.clone()))
        .collect::<Vec<_>>()
    {
        for app in LOGIN_APPS {
            let username = if app == "phone" {
                p.phone_number.clone()
            } else {
                p.email.clone()
            };
            let password = (0..12)
                .map(|_| char::from(PASSWORD_CHARS[rng.below(PASSWORD_CHARS.len())]))
                .collect();
            db.accounts.insert(Account {
                person,
                app,
                username,
                password,
            });
        }
        add_addresses(db, rng, person, &p);
        add_cards(db, rng, person, &p);
    }
}

fn add_people(db: &mut Db, rng: &mut Rng, count: usize) {
    let mut names: Vec<(&str, &str)> = Vec::new();
    let mut numbers: Vec<String> = Vec::new();
    while names.len() < count {
        let name = (*rng.pick(&FIRST_NAMES), *rng.pick(&LAST_NAMES));
        if names.contains(&name) {
            continue;
        }
        let (city, _, area) = *rng.pick(&CITIES);
        let number = format!("{area}{}", digits(rng, 7));
        if numbers.contains(&number) {
            continue;
        }
        names.push(name);
        numbers.push(number.clone());
        let (first, last) = name;
        let birthday = Date::from_ymd(
            rng.range(1955, 2004) as i32,
            rng.range(1, 12) as u32,
            rng.range(1, 28) as u32,
        )
        .unwrap_or(today());
        db.people.insert(Person {
            first_name: first.to_owned(),
            last_name: last.to_owned(),
            email: format!(
                "{}.{}@{}",
                first.to_lowercase(),
                last.to_lowercase(),
                rng.pick(&EMAIL_DOMAINS)
            ),
            phone_number: number,
            birthday,
            city: city.to_owned(),
        });
    }
}

fn relate(db: &mut Db, a: PersonId, b: PersonId, kind: RelationKind) -> bool {
    let (person, other) = (a.min(b), a.max(b));
    if a == b
        || db
            .relations
            .find(|r| r.person == person && r.other == other)
            .is_some()
    {
        return false;
    }
    db.relations.insert(Relation {
        person,
        other,
        kind,
    });
    true
}

fn add_relations(db: &mut Db, rng: &mut Rng) {
    let mut pool = others(db);
    rng.shuffle(&mut pool);
    let mut pool = pool.into_iter();
    for (kind, n) in USER_RELATIONS {
        for person in pool.by_ref().take(n) {
            relate(db, USER, person, kind);
        }
    }
    let everyone = others(db);
    for &person in &everyone {
        let mut added = 0;
        let mut tries = 0;
        while added < RELATIONS_PER_PERSON && tries < 20 {
            tries += 1;
            let Some(&other) = rng.choose(&everyone) else {
                break;
            };
            if relate(db, person, other, *rng.pick(&RelationKind::ALL)) {
                added += 1;
            }
        }
    }
}

fn address(rng: &mut Rng, owner: PersonId, label: &str, city: &str) -> Address {
    let (_, state, _) = CITIES
        .iter()
        .find(|c| c.0 == city)
        .copied()
        .unwrap_or(CITIES[0]);
    Address {
        owner,
        label: label.to_owned(),
        street: format!(
            "{} {} {}",
            rng.range(10, 9899),
            rng.pick(&STREETS),
            rng.pick(&STREET_SUFFIXES)
        ),
        city: city.to_owned(),
        state: state.to_owned(),
        zip_code: format!("{:05}", rng.range(10000, 99950)),
    }
}

fn add_addresses(db: &mut Db, rng: &mut Rng, person: PersonId, p: &Person) {
    let home = address(rng, person, "Home", &p.city);
    db.addresses.insert(home);
    if person == USER {
        let work = address(rng, person, "Work", &p.city);
        db.addresses.insert(work);
        let (parents_city, _, _) = *rng.pick(&CITIES);
        let parents = address(rng, person, "Parents", parents_city);
        db.addresses.insert(parents);
    }
}

fn card(rng: &mut Rng, owner: PersonId, p: &Person, expired: bool) -> PaymentCard {
    let now = today();
    let expiry_year = if expired {
        now.year() - rng.range(0, 1) as i32
    } else {
        now.year() + rng.range(1, 5) as i32
    };
    let expiry_month = if expired && expiry_year == now.year() {
        rng.range(1, i64::from(now.month()) - 1).max(1) as u32
    } else {
        rng.range(1, 12) as u32
    };
    let (card_name, first_digit) = *rng.pick(&CARD_NAMES);
    PaymentCard {
        owner,
        card_name: card_name.to_owned(),
        owner_name: p.full_name(),
        card_number: format!("{first_digit}{}", digits(rng, 15)),
        expiry_month,
        expiry_year,
        cvv: digits(rng, 3),
    }
}

fn add_cards(db: &mut Db, rng: &mut Rng, person: PersonId, p: &Person) {
    let count = if person == USER {
        2
    } else {
        rng.range(1, 2) as usize
    };
    for _ in 0..count {
        let c = card(rng, person, p, false);
        db.payment_cards.insert(c);
    }
    if person == USER {
        let expired = card(rng, person, p, true);
        db.payment_cards.insert(expired);
    }
}
