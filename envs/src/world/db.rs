//! [`Db`]: the world's whole state as named, typed tables, with snapshots (a clone,
//! which shares every table) and diffs ([`Db::diff`]).
//!
//! Why typed tables: scenario templates and the expert read and plant data in Rust with
//! the compiler's help (`db.transactions.filter(|t| t.sender == user)`), while every
//! table still diffs the same way, through its rows' JSON form (see `diff.rs`). The
//! one list below names every table once; the struct, the table names and the diff
//! loop all come from it, so no table can be left out of a diff.

use super::diff::{AnyTable, DbDiff};
use super::records::*;
use super::table::Table;

macro_rules! tables {
    ($($(#[doc = $doc:literal])* $field:ident: $row:ty = $name:literal,)*) => {
        /// The world's state: one [`Table`] per kind of row. Cloning it is a snapshot:
        /// tables are shared until written.
        #[derive(Clone, Debug, Default)]
        pub struct Db {
            $($(#[doc = $doc])* pub $field: Table<$row>,)*
        }

        impl Db {
            /// Every table's name, in diff order. Names are `<app>.<table>`, or a bare
            /// name for data every app shares.
            pub const TABLE_NAMES: &'static [&'static str] = &[$($name),*];

            /// Every table with its name, in [`Db::TABLE_NAMES`] order.
            pub fn tables(&self) -> Vec<(&'static str, &dyn AnyTable)> {
                vec![$(($name, &self.$field as &dyn AnyTable)),*]
            }
        }
    };
}

tables! {
    /// Everyone in the world; person 1 is the user.
    people: Person = "people",
    /// Relations between people, one row per pair.
    relations: Relation = "relations",
    /// App accounts with their passwords.
    accounts: Account = "accounts",
    /// Postal addresses.
    addresses: Address = "addresses",
    /// Payment cards.
    payment_cards: PaymentCard = "payment_cards",
    /// Music catalog: artists.
    artists: Artist = "tunes.artists",
    /// Music catalog: albums.
    albums: Album = "tunes.albums",
    /// Music catalog: songs.
    songs: Song = "tunes.songs",
    /// Liked songs.
    song_likes: SongLike = "tunes.song_likes",
    /// Followed artists.
    artist_follows: ArtistFollow = "tunes.artist_follows",
    /// Playlists.
    playlists: Playlist = "tunes.playlists",
    /// Play history.
    plays: Play = "tunes.plays",
    /// Coinpay balances.
    wallets: Wallet = "coinpay.wallets",
    /// Coinpay payments.
    transactions: Transaction = "coinpay.transactions",
    /// Coinpay payment requests.
    payment_requests: PaymentRequest = "coinpay.payment_requests",
    /// Mailbox copies of emails.
    emails: Email = "mail.emails",
    /// Phone contacts.
    contacts: Contact = "phone.contacts",
    /// Phone copies of text messages.
    text_messages: TextMessage = "phone.text_messages",
    /// Call logs.
    calls: Call = "phone.calls",
    /// Phone alarms.
    alarms: Alarm = "phone.alarms",
    /// Notes.
    notes: Note = "notes.notes",
    /// To-do lists.
    todo_lists: TodoList = "todo.lists",
    /// To-do items.
    todo_items: TodoItem = "todo.items",
    /// Shop catalog.
    products: Product = "shop.products",
    /// Product reviews.
    reviews: Review = "shop.reviews",
    /// Cart contents.
    cart_items: CartItem = "shop.cart_items",
    /// Orders.
    orders: Order = "shop.orders",
    /// Wish lists.
    wishlist_items: WishlistItem = "shop.wishlist_items",
    /// Files and directories.
    files: FileEntry = "files.entries",
    /// Bill-splitting groups.
    bill_groups: BillGroup = "splitbill.groups",
    /// Shared expenses.
    expenses: Expense = "splitbill.expenses",
    /// Repayments.
    settlements: Settlement = "splitbill.settlements",
}

impl Db {
    /// The changes from `self` (before) to `later` (after). Tables that `later` still
    /// shares with `self` are skipped without looking at their rows.
    pub fn diff(&self, later: &Db) -> DbDiff {
        let tables = self
            .tables()
            .into_iter()
            .zip(later.tables())
            .filter_map(|((name, before), (_, after))| before.diff_with(name, after))
            .filter(|t| !t.is_empty())
            .collect();
        DbDiff { tables }
    }

    /// Rows in all tables together.
    pub fn row_count(&self) -> usize {
        self.tables().iter().map(|(_, t)| t.row_count()).sum()
    }
}
