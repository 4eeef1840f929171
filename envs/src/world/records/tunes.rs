//! Rows of the `tunes` music-streaming app: the catalog (artists, albums, songs) and
//! each person's likes, follows, playlists and plays.

use serde::Serialize;

use crate::world::table::{Id, PersonId};
use crate::world::time::{Date, Timestamp};

/// A performing artist.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Artist {
    /// Stage name.
    pub name: String,
    /// Main genre.
    pub genre: String,
}

/// An album of one artist.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Album {
    /// Title.
    pub title: String,
    /// The album's artist.
    pub artist_id: Id,
    /// Genre.
    pub genre: String,
    /// Release day.
    pub release_date: Date,
}

/// A song on an album.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Song {
    /// Title.
    pub title: String,
    /// The album it is on.
    pub album_id: Id,
    /// Its artists: the album's artist first, then featured artists.
    pub artist_ids: Vec<Id>,
    /// Genre.
    pub genre: String,
    /// Length in seconds.
    pub duration_seconds: u32,
    /// Release day (the album's).
    pub release_date: Date,
    /// Times played by anyone, ever.
    pub play_count: u64,
}

/// A person likes a song.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SongLike {
    /// Who likes it.
    pub person: PersonId,
    /// The song.
    pub song_id: Id,
    /// When they liked it.
    pub liked_at: Timestamp,
}

/// A person follows an artist.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ArtistFollow {
    /// The follower.
    pub person: PersonId,
    /// The artist.
    pub artist_id: Id,
    /// Since when.
    pub followed_at: Timestamp,
}

/// A playlist: an ordered list of songs (a song appears at most once).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Playlist {
    /// Who made it.
    pub owner: PersonId,
    /// Title.
    pub title: String,
    /// Whether other people can see it.
    pub is_public: bool,
    /// Its songs in order.
    pub song_ids: Vec<Id>,
    /// When it was made.
    pub created_at: Timestamp,
}

/// One play of a song by a person.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Play {
    /// The listener.
    pub person: PersonId,
    /// The song.
    pub song_id: Id,
    /// When it started.
    pub played_at: Timestamp,
}
