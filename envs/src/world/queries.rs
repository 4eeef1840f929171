//! Read-only questions about the database that both the apps and scenario code ask:
//! who someone is, who they are related to, balances, ratings, debts. The APIs answer
//! through these same functions, so expected answers computed with them agree with
//! what agent code sees.

use std::collections::BTreeMap;

use super::db::Db;
use super::money::Money;
use super::records::*;
use super::table::{Id, PersonId};

impl Db {
    /// The person with this email address (case-insensitive).
    pub fn person_by_email(&self, email: &str) -> Option<(PersonId, &Person)> {
        let email = email.trim();
        self.people.find(|p| p.email.eq_ignore_ascii_case(email))
    }

    /// The person with this phone number.
    pub fn person_by_phone(&self, phone_number: &str) -> Option<(PersonId, &Person)> {
        let phone_number = phone_number.trim();
        self.people.find(|p| p.phone_number == phone_number)
    }

    /// A person's full name, or `unknown` for an id that does not exist.
    pub fn name_of(&self, person: PersonId) -> String {
        self.people
            .get(person)
            .map_or_else(|| "unknown".to_owned(), Person::full_name)
    }

    /// A person's email address, or an empty string for an id that does not exist.
    pub fn email_of(&self, person: PersonId) -> String {
        self.people
            .get(person)
            .map(|p| p.email.clone())
            .unwrap_or_default()
    }

    /// Everyone related to `person`, with how, in ascending id order.
    pub fn relations_of(&self, person: PersonId) -> Vec<(PersonId, RelationKind)> {
        let mut related: Vec<(PersonId, RelationKind)> = self
            .relations
            .iter()
            .filter_map(|(_, r)| match () {
                _ if r.person == person => Some((r.other, r.kind)),
                _ if r.other == person => Some((r.person, r.kind)),
                _ => None,
            })
            .collect();
        related.sort();
        related
    }

    /// The people related to `person` by `kind`, in ascending id order.
    pub fn related(&self, person: PersonId, kind: RelationKind) -> Vec<PersonId> {
        self.relations_of(person)
            .into_iter()
            .filter(|&(_, k)| k == kind)
            .map(|(p, _)| p)
            .collect()
    }

    /// `person`'s account in `app`.
    pub fn account(&self, person: PersonId, app: &str) -> Option<&Account> {
        self.accounts
            .find(|a| a.person == person && a.app == app)
            .map(|(_, a)| a)
    }

    /// `person`'s coinpay wallet.
    pub fn wallet_of(&self, person: PersonId) -> Option<(Id, &Wallet)> {
        self.wallets.find(|w| w.owner == person)
    }

    /// How many people like the song.
    pub fn song_like_count(&self, song_id: Id) -> usize {
        self.song_likes.filter(|l| l.song_id == song_id).count()
    }

    /// Whether `person` likes the song.
    pub fn likes_song(&self, person: PersonId, song_id: Id) -> bool {
        self.song_likes
            .find(|l| l.person == person && l.song_id == song_id)
            .is_some()
    }

    /// How many people follow the artist.
    pub fn follower_count(&self, artist_id: Id) -> usize {
        self.artist_follows
            .filter(|f| f.artist_id == artist_id)
            .count()
    }

    /// A product's average rating rounded to two decimals (`None` without reviews), and
    /// its number of reviews.
    pub fn product_rating(&self, product_id: Id) -> (Option<f64>, usize) {
        let (sum, count) = self
            .reviews
            .filter(|r| r.product_id == product_id)
            .fold((0u32, 0usize), |(s, c), (_, r)| {
                (s + u32::from(r.rating), c + 1)
            });
        if count == 0 {
            return (None, 0);
        }
        let average = f64::from(sum) / count as f64;
        (Some((average * 100.0).round() / 100.0), count)
    }

    /// What each other member of the group owes `person` (negative: what `person` owes
    /// them), counting every expense and settlement of the group pairwise: a member who
    /// paid an expense is owed each other member's share of it, and a settlement from A
    /// to B lowers what A owes B. Members in group order; people who left the group but
    /// still have a balance come last.
    pub fn group_debts(&self, group_id: Id, person: PersonId) -> Vec<(PersonId, Money)> {
        let mut owed: BTreeMap<PersonId, Money> = BTreeMap::new();
        for (_, expense) in self.expenses.filter(|e| e.group_id == group_id) {
            for share in &expense.shares {
                if expense.payer == person && share.person != person {
                    *owed.entry(share.person).or_default() += share.amount;
                } else if share.person == person && expense.payer != person {
                    *owed.entry(expense.payer).or_default() -= share.amount;
                }
            }
        }
        for (_, s) in self.settlements.filter(|s| s.group_id == group_id) {
            if s.from == person {
                *owed.entry(s.to).or_default() += s.amount;
            } else if s.to == person {
                *owed.entry(s.from).or_default() -= s.amount;
            }
        }
        let members = self
            .bill_groups
            .get(group_id)
            .map(|g| g.member_ids.clone())
            .unwrap_or_default();
        let mut debts: Vec<(PersonId, Money)> = members
            .iter()
            .filter(|&&m| m != person)
            .map(|&m| (m, owed.remove(&m).unwrap_or_default()))
            .collect();
        debts.extend(
            owed.into_iter()
                .filter(|&(p, m)| p != person && m != Money::ZERO),
        );
        debts
    }

    /// The file or directory at `path` in `owner`'s tree.
    pub fn file_at(&self, owner: PersonId, path: &str) -> Option<(Id, &FileEntry)> {
        self.files.find(|f| f.owner == owner && f.path == path)
    }
}
