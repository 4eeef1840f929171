//! Templates on the `tunes` music app alone: liked songs, playlists, artists, plays.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::pick::{int, params, text};
use super::{SkillParam, Solution, TaskKind, Template};
use crate::sandbox::ApiError;
use crate::world::{Db, Id, USER};

/// The tunes templates.
pub(super) const TEMPLATES: &[Template] = &[
    Template {
        name: "tunes_genre_like_count",
        apps: &["tunes"],
        kind: TaskKind::Question,
        pick: |p| {
            let genres: BTreeSet<String> = liked_songs(p.db()).map(|(_, g)| g.to_lowercase()).collect();
            let genres: Vec<String> = genres.into_iter().collect();
            Some(params([("genre", json!(p.pick(&genres)?))]))
        },
        instruction: |p| format!("How many of the songs I like on tunes are {} songs?", text(p, "genre")),
        reference: |r, p| {
            let genre = text(p, "genre");
            Ok(json!(liked_songs(r.db()).filter(|(_, g)| g.eq_ignore_ascii_case(genre)).count()))
        },
        solution: Solution {
            names: &["count_liked_songs_in_genre", "liked_song_count_by_genre", "count_my_liked_genre"],
            summaries: &[
                "Counts the songs the user likes on tunes that belong to a genre.",
                "Returns how many of the user's liked tunes songs have the given genre.",
            ],
            params: &[SkillParam { name: "genre", ty: "str", doc: "the genre, e.g. jazz (case-insensitive)" }],
            returns: ("int", "the number of liked songs of that genre"),
            docs: &[("tunes", "show_liked_songs")],
            body: include_str!("skills/tunes_genre_like_count.star"),
        },
    },
    Template {
        name: "tunes_playlist_minutes",
        apps: &["tunes"],
        kind: TaskKind::Question,
        pick: |p| {
            let titles: Vec<String> = own_playlists(p.db()).map(|(_, t)| t.to_owned()).collect();
            Some(params([("title", json!(p.pick(&titles)?))]))
        },
        instruction: |p| {
            format!(
                "How many whole minutes long is my tunes playlist \"{}\"? Add up its songs' durations and round down.",
                text(p, "title")
            )
        },
        reference: |r, p| {
            let id = playlist_id(r.db(), text(p, "title"))?;
            let db = r.db();
            let seconds: u32 = db
                .playlists
                .get(id)
                .map(|pl| pl.song_ids.iter().filter_map(|s| db.songs.get(*s)).map(|s| s.duration_seconds).sum())
                .unwrap_or(0);
            Ok(json!(seconds / 60))
        },
        solution: Solution {
            names: &["playlist_minutes", "playlist_length_in_minutes", "total_playlist_minutes"],
            summaries: &[
                "Returns the total length of one of the user's tunes playlists in whole minutes.",
                "Adds up the durations of a playlist's songs and returns the whole minutes.",
            ],
            params: &[SkillParam { name: "title", ty: "str", doc: "the playlist's title" }],
            returns: ("int", "the total duration in minutes, rounded down"),
            docs: &[("tunes", "show_playlists"), ("tunes", "show_playlist")],
            body: include_str!("skills/tunes_playlist_minutes.star"),
        },
    },
    Template {
        name: "tunes_artist_playlist",
        apps: &["tunes"],
        kind: TaskKind::Action,
        pick: |p| {
            let db = p.db();
            let artists: Vec<(Id, String)> = db
                .artists
                .iter()
                .filter(|(id, _)| (3..=30).contains(&songs_by(db, *id).len()))
                .map(|(id, a)| (id, a.name.clone()))
                .collect();
            let (_, name) = p.pick(&artists)?;
            Some(params([("title", json!(format!("{name} Essentials"))), ("artist", json!(name))]))
        },
        instruction: |p| {
            format!(
                "Create a private tunes playlist titled \"{}\" holding every song that {} performs on.",
                text(p, "title"),
                text(p, "artist")
            )
        },
        reference: |r, p| {
            let artist = text(p, "artist");
            let artist_id = r
                .db()
                .artists
                .find(|a| a.name == artist)
                .map(|(id, _)| id)
                .ok_or_else(|| ApiError::new("no such artist"))?;
            let songs = songs_by(r.db(), artist_id);
            let created = r.call("tunes", "create_playlist", json!({"title": text(p, "title"), "is_public": false}))?;
            for song_id in songs {
                r.call("tunes", "add_song_to_playlist", json!({"playlist_id": created["playlist_id"], "song_id": song_id}))?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["create_artist_playlist", "make_playlist_of_artist", "playlist_from_artist"],
            summaries: &[
                "Creates a private tunes playlist with every song an artist performs on.",
                "Makes a new private playlist and fills it with all of one artist's songs.",
            ],
            params: &[
                SkillParam { name: "title", ty: "str", doc: "the new playlist's title" },
                SkillParam { name: "artist", ty: "str", doc: "the artist's exact name" },
            ],
            returns: ("int", "how many songs the playlist got"),
            docs: &[("tunes", "search_artists"), ("tunes", "search_songs"), ("tunes", "create_playlist"), ("tunes", "add_song_to_playlist")],
            body: include_str!("skills/tunes_artist_playlist.star"),
        },
    },
    Template {
        name: "tunes_follow_playlist_artists",
        apps: &["tunes"],
        kind: TaskKind::Action,
        pick: |p| {
            let titles: Vec<String> = own_playlists(p.db()).map(|(_, t)| t.to_owned()).collect();
            Some(params([("title", json!(p.pick(&titles)?))]))
        },
        instruction: |p| {
            format!(
                "Follow every artist who performs on my tunes playlist \"{}\" and whom I do not follow yet.",
                text(p, "title")
            )
        },
        reference: |r, p| {
            let id = playlist_id(r.db(), text(p, "title"))?;
            let db = r.db();
            let mut artists: Vec<Id> = Vec::new();
            for song in db.playlists.get(id).map(|pl| pl.song_ids.clone()).unwrap_or_default() {
                for artist in db.songs.get(song).map(|s| s.artist_ids.clone()).unwrap_or_default() {
                    let followed = db.artist_follows.find(|f| f.person == USER && f.artist_id == artist).is_some();
                    if !followed && !artists.contains(&artist) {
                        artists.push(artist);
                    }
                }
            }
            for artist_id in artists {
                r.call("tunes", "follow_artist", json!({"artist_id": artist_id}))?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["follow_playlist_artists", "follow_new_artists_of_playlist", "follow_artists_on_playlist"],
            summaries: &[
                "Follows every artist on one of the user's tunes playlists that the user does not follow yet.",
                "Makes the user follow all artists of a playlist, skipping those already followed.",
            ],
            params: &[SkillParam { name: "title", ty: "str", doc: "the playlist's title" }],
            returns: ("list", "the names of the artists newly followed"),
            docs: &[("tunes", "show_playlist"), ("tunes", "show_following_artists"), ("tunes", "follow_artist")],
            body: include_str!("skills/tunes_follow_playlist_artists.star"),
        },
    },
    Template {
        name: "tunes_like_top_genre_songs",
        apps: &["tunes"],
        kind: TaskKind::Action,
        pick: |p| {
            let genres: BTreeSet<String> = p.db().songs.iter().map(|(_, s)| s.genre.clone()).collect();
            let genres: Vec<String> = genres.into_iter().collect();
            Some(params([("genre", json!(p.pick(&genres)?)), ("count", json!(p.range(3, 5)))]))
        },
        instruction: |p| {
            format!(
                "Make sure I like each of the {} most played {} songs on tunes.",
                int(p, "count"),
                text(p, "genre")
            )
        },
        reference: |r, p| {
            let top = r.call(
                "tunes",
                "search_songs",
                json!({"genre": text(p, "genre"), "sort_by": "-play_count", "page_limit": int(p, "count")}),
            )?;
            for song in top.as_array().cloned().unwrap_or_default() {
                let id = song["song_id"].as_u64().unwrap_or(0);
                if !r.db().likes_song(USER, id) {
                    r.call("tunes", "like_song", json!({"song_id": id}))?;
                }
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["like_top_songs_of_genre", "like_most_played_in_genre", "ensure_top_genre_songs_liked"],
            summaries: &[
                "Likes the most played songs of a genre on tunes, skipping those the user already likes.",
                "Makes sure the user likes each of the top played songs of one genre.",
            ],
            params: &[
                SkillParam { name: "genre", ty: "str", doc: "the genre" },
                SkillParam { name: "count", ty: "int", doc: "how many of the most played songs" },
            ],
            returns: ("list", "titles of the songs that were liked now"),
            docs: &[("tunes", "search_songs"), ("tunes", "show_song"), ("tunes", "like_song")],
            body: include_str!("skills/tunes_like_top_genre_songs.star"),
        },
    },
    Template {
        name: "tunes_unlike_old_genre",
        apps: &["tunes"],
        kind: TaskKind::Action,
        pick: |p| {
            let db = p.db();
            let liked: Vec<(String, i32)> = db
                .song_likes
                .filter(|l| l.person == USER)
                .filter_map(|(_, l)| db.songs.get(l.song_id))
                .map(|s| (s.genre.clone(), s.release_date.year()))
                .collect();
            let (genre, year) = p.pick(&liked)?;
            Some(params([("genre", json!(genre)), ("year", json!(year + 1))]))
        },
        instruction: |p| {
            format!(
                "Remove from my liked songs on tunes every {} song released before {}.",
                text(p, "genre"),
                int(p, "year")
            )
        },
        reference: |r, p| {
            let (genre, year) = (text(p, "genre"), int(p, "year"));
            let db = r.db();
            let songs: Vec<Id> = db
                .song_likes
                .filter(|l| l.person == USER)
                .filter_map(|(_, l)| db.songs.get(l.song_id).map(|s| (l.song_id, s)))
                .filter(|(_, s)| s.genre.eq_ignore_ascii_case(genre) && i64::from(s.release_date.year()) < year)
                .map(|(id, _)| id)
                .collect();
            for song_id in songs {
                r.call("tunes", "unlike_song", json!({"song_id": song_id}))?;
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["unlike_old_songs_of_genre", "prune_old_liked_genre", "remove_old_genre_likes"],
            summaries: &[
                "Unlikes the user's liked tunes songs of a genre released before a year.",
                "Removes old songs of one genre from the user's liked songs.",
            ],
            params: &[
                SkillParam { name: "genre", ty: "str", doc: "the genre" },
                SkillParam { name: "year", ty: "int", doc: "songs released before this year are removed" },
            ],
            returns: ("list", "titles of the songs unliked"),
            docs: &[("tunes", "show_liked_songs"), ("tunes", "show_song"), ("tunes", "unlike_song")],
            body: include_str!("skills/tunes_unlike_old_genre.star"),
        },
    },
    Template {
        name: "tunes_playlist_genre_count",
        apps: &["tunes"],
        kind: TaskKind::Question,
        pick: |p| {
            let db = p.db();
            let pairs: Vec<(String, String)> = own_playlists(db)
                .flat_map(|(id, title)| {
                    playlist_songs(db, id).into_iter().map(move |s| (title.to_owned(), s))
                })
                .filter_map(|(title, song)| db.songs.get(song).map(|s| (title, s.genre.clone())))
                .collect();
            let (title, genre) = p.pick(&pairs)?;
            Some(params([("title", json!(title)), ("genre", json!(genre))]))
        },
        instruction: |p| {
            format!(
                "How many songs on my tunes playlist \"{}\" are {} songs?",
                text(p, "title"),
                text(p, "genre")
            )
        },
        reference: |r, p| {
            let db = r.db();
            let id = playlist_id(db, text(p, "title"))?;
            let genre = text(p, "genre");
            let count = playlist_songs(db, id)
                .into_iter()
                .filter(|s| db.songs.get(*s).is_some_and(|s| s.genre.eq_ignore_ascii_case(genre)))
                .count();
            Ok(json!(count))
        },
        solution: Solution {
            names: &["count_playlist_songs_in_genre", "playlist_genre_count", "genre_songs_in_playlist"],
            summaries: &[
                "Counts the songs of one of the user's tunes playlists that have a given genre.",
                "Returns how many songs on a playlist belong to a genre.",
            ],
            params: &[
                SkillParam { name: "title", ty: "str", doc: "the playlist's title" },
                SkillParam { name: "genre", ty: "str", doc: "the genre" },
            ],
            returns: ("int", "the number of songs of that genre"),
            docs: &[("tunes", "show_playlist"), ("tunes", "show_song")],
            body: include_str!("skills/tunes_playlist_genre_count.star"),
        },
    },
    Template {
        name: "tunes_plays_of_artist",
        apps: &["tunes"],
        kind: TaskKind::Question,
        pick: |p| {
            let db = p.db();
            let artists: Vec<String> = db
                .plays
                .filter(|pl| pl.person == USER)
                .filter_map(|(_, pl)| db.songs.get(pl.song_id))
                .flat_map(|s| s.artist_ids.iter().filter_map(|a| db.artists.get(*a)).map(|a| a.name.clone()))
                .collect();
            Some(params([("artist", json!(p.pick(&artists)?))]))
        },
        instruction: |p| {
            format!(
                "How many times have I played songs by {} on tunes, according to my play history?",
                text(p, "artist")
            )
        },
        reference: |r, p| {
            let db = r.db();
            let artist = text(p, "artist");
            let count = db
                .plays
                .filter(|pl| pl.person == USER)
                .filter_map(|(_, pl)| db.songs.get(pl.song_id))
                .filter(|s| s.artist_ids.iter().any(|a| db.artists.get(*a).is_some_and(|a| a.name == artist)))
                .count();
            Ok(json!(count))
        },
        solution: Solution {
            names: &["count_plays_of_artist", "artist_play_count", "times_played_artist"],
            summaries: &[
                "Counts the plays in the user's tunes play history of songs an artist performs on.",
                "Returns how often the user played songs by one artist.",
            ],
            params: &[SkillParam { name: "artist", ty: "str", doc: "the artist's exact name" }],
            returns: ("int", "the number of plays"),
            docs: &[("tunes", "show_play_history")],
            body: include_str!("skills/tunes_plays_of_artist.star"),
        },
    },
];

/// The user's liked songs as `(song id, genre)`.
fn liked_songs(db: &Db) -> impl Iterator<Item = (Id, String)> + '_ {
    db.song_likes
        .filter(|l| l.person == USER)
        .filter_map(|(_, l)| {
            db.songs
                .get(l.song_id)
                .map(|s| (l.song_id, s.genre.clone()))
        })
}

/// The user's playlists as `(id, title)`.
fn own_playlists(db: &Db) -> impl Iterator<Item = (Id, &str)> + '_ {
    db.playlists
        .filter(|pl| pl.owner == USER)
        .map(|(id, pl)| (id, pl.title.as_str()))
}

/// The id of the user's playlist titled `title`.
fn playlist_id(db: &Db, title: &str) -> Result<Id, ApiError> {
    own_playlists(db)
        .find(|(_, t)| t.eq_ignore_ascii_case(title))
        .map(|(id, _)| id)
        .ok_or_else(|| ApiError::new(format!("no playlist titled {title:?}")))
}

/// The songs of a playlist, in order.
fn playlist_songs(db: &Db, id: Id) -> Vec<Id> {
    db.playlists
        .get(id)
        .map(|pl| pl.song_ids.clone())
        .unwrap_or_default()
}

/// The songs an artist performs on, in catalog order.
fn songs_by(db: &Db, artist: Id) -> Vec<Id> {
    db.songs
        .filter(|s| s.artist_ids.contains(&artist))
        .map(|(id, _)| id)
        .collect()
}
