//! The typed rows of the world's tables, one module per app (`people` holds what the
//! supervisor app and every app share: people, relations, accounts, addresses and
//! payment cards).
//!
//! Conventions: rows do not hold their own id (a [`Table`](super::Table) keys them);
//! references to other rows are ids named `<thing>_id` or, for people, a
//! [`PersonId`](super::PersonId) named for its role (`owner`, `sender`, ...); money is
//! [`Money`](super::Money), moments are [`Timestamp`](super::Timestamp)s and days are
//! [`Date`](super::Date)s. Enums serialize in `snake_case`, as APIs show them.

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

pub use coinpay::{PaymentRequest, RequestStatus, Transaction, Wallet};
pub use files::{parent_path, EntryKind, FileEntry};
pub use mail::{Email, Folder};
pub use notes::Note;
pub use people::{Account, Address, PaymentCard, Person, Relation, RelationKind};
pub use phone::{Alarm, Call, CallKind, Contact, MessageDirection, TextMessage};
pub use shop::{CartItem, Order, OrderLine, OrderStatus, Product, Review, WishlistItem};
pub use splitbill::{BillGroup, Expense, Settlement, Share};
pub use todo::{Priority, TodoItem, TodoList};
pub use tunes::{Album, Artist, ArtistFollow, Play, Playlist, Song, SongLike};
