//! People and what every app shares about them: relations, app accounts, addresses and
//! payment cards.

use serde::Serialize;

use crate::world::table::PersonId;
use crate::world::time::Date;

/// A person of the world. Person 1 is the user the agent works for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Person {
    /// Given name.
    pub first_name: String,
    /// Family name.
    pub last_name: String,
    /// Email address; also the username of most app accounts. Unique.
    pub email: String,
    /// Phone number, ten digits; the username of the `phone` account. Unique.
    pub phone_number: String,
    /// Date of birth.
    pub birthday: Date,
    /// Home city.
    pub city: String,
}

impl Person {
    /// `first_name last_name`.
    pub fn full_name(&self) -> String {
        format!("{} {}", self.first_name, self.last_name)
    }
}

/// How two people are related.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RelationKind {
    /// Friends.
    Friend,
    /// Relatives.
    Family,
    /// Share a home.
    Roommate,
    /// Work together.
    Coworker,
}

impl RelationKind {
    /// Every kind.
    pub const ALL: [RelationKind; 4] = [
        RelationKind::Friend,
        RelationKind::Family,
        RelationKind::Roommate,
        RelationKind::Coworker,
    ];

    /// The name APIs show (`friend`, `family`, `roommate`, `coworker`).
    pub fn name(self) -> &'static str {
        match self {
            RelationKind::Friend => "friend",
            RelationKind::Family => "family",
            RelationKind::Roommate => "roommate",
            RelationKind::Coworker => "coworker",
        }
    }
}

/// A relation between two different people; stored once per pair, `person < other`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Relation {
    /// The person with the lower id.
    pub person: PersonId,
    /// The person with the higher id.
    pub other: PersonId,
    /// How they are related.
    pub kind: RelationKind,
}

/// A person's account in one app.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Account {
    /// The account holder.
    pub person: PersonId,
    /// The app (`tunes`, `coinpay`, ...).
    pub app: &'static str,
    /// The login name: the person's email, or the phone number for `phone`.
    pub username: String,
    /// The password.
    pub password: String,
}

/// A postal address of a person.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Address {
    /// Whose address it is.
    pub owner: PersonId,
    /// A label such as `Home` or `Work`.
    pub label: String,
    /// Street and number.
    pub street: String,
    /// City.
    pub city: String,
    /// State code.
    pub state: String,
    /// Postal code.
    pub zip_code: String,
}

/// A payment card of a person; usable in `shop` and `coinpay`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PaymentCard {
    /// The card holder.
    pub owner: PersonId,
    /// The card's product name (`Visa Everyday`, ...).
    pub card_name: String,
    /// The name printed on the card.
    pub owner_name: String,
    /// Sixteen digits.
    pub card_number: String,
    /// Expiry month, 1-12.
    pub expiry_month: u32,
    /// Expiry year.
    pub expiry_year: i32,
    /// Three digits.
    pub cvv: String,
}

impl PaymentCard {
    /// Whether the card has expired on `day` (it is valid through its expiry month).
    pub fn is_expired_on(&self, day: Date) -> bool {
        (day.year(), day.month()) > (self.expiry_year, self.expiry_month)
    }
}
