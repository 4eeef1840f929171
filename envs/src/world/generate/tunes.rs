//! The music catalog, and each person's likes, follows, playlists and plays.

use super::words::{ADJECTIVES, FIRST_NAMES, GENRES, LAST_NAMES, NOUNS, VERBS};
use super::{others, past_moment};
use crate::world::db::Db;
use crate::world::records::{Album, Artist, ArtistFollow, Play, Playlist, Song, SongLike};
use crate::world::rng::Rng;
use crate::world::table::{Id, PersonId};
use crate::world::time::{today, Date};
use crate::world::USER;

const ARTISTS: usize = 36;

const PLAYLIST_TITLES: [&str; 12] = [
    "Morning Run",
    "Focus Flow",
    "Road Trip",
    "Sunday Chill",
    "Party Starters",
    "Rainy Days",
    "Throwbacks",
    "Dinner Jazz",
    "Workout Mix",
    "Late Night Drive",
    "Study Session",
    "Summer Hits",
];

pub(super) fn generate(db: &mut Db, rng: &mut Rng) {
    add_catalog(db, rng);
    let songs: Vec<Id> = db.songs.iter().map(|(id, _)| id).collect();
    let artists: Vec<Id> = db.artists.iter().map(|(id, _)| id).collect();
    let mut people = vec![USER];
    people.extend(others(db));
    for person in people {
        let user = person == USER;
        let likes = if user { 60 } else { rng.range(5, 25) as usize };
        for song_id in rng.sample(&songs, likes) {
            let liked_at = past_moment(rng, 700);
            db.song_likes.insert(SongLike {
                person,
                song_id,
                liked_at,
            });
        }
        let follows = if user { 8 } else { rng.range(1, 6) as usize };
        for artist_id in rng.sample(&artists, follows) {
            let followed_at = past_moment(rng, 900);
            db.artist_follows.insert(ArtistFollow {
                person,
                artist_id,
                followed_at,
            });
        }
        add_playlists(db, rng, person, &songs);
        let plays = if user { 80 } else { rng.range(0, 10) as usize };
        let mut moments: Vec<_> = (0..plays).map(|_| past_moment(rng, 60)).collect();
        moments.sort();
        for played_at in moments {
            let Some(&song_id) = rng.choose(&songs) else {
                break;
            };
            db.plays.insert(Play {
                person,
                song_id,
                played_at,
            });
        }
    }
}

/// A name made by `make` that is not in `taken` yet (numbered if the pool runs dry).
fn unique_name(
    rng: &mut Rng,
    taken: &mut Vec<String>,
    make: impl Fn(&mut Rng) -> String,
) -> String {
    let mut name = make(rng);
    for _ in 0..100 {
        if !taken.contains(&name) {
            break;
        }
        name = make(rng);
    }
    if taken.contains(&name) {
        name = format!("{name} {}", taken.len() + 1);
    }
    taken.push(name.clone());
    name
}

fn song_title(rng: &mut Rng) -> String {
    match rng.below(4) {
        0 => format!("{} {}", rng.pick(&ADJECTIVES), rng.pick(&NOUNS)),
        1 => format!("{} the {}", rng.pick(&VERBS), rng.pick(&NOUNS)),
        2 => format!("{} of the {}", rng.pick(&NOUNS), rng.pick(&NOUNS)),
        _ => format!("{} {}", rng.pick(&VERBS), rng.pick(&ADJECTIVES)),
    }
}

fn add_catalog(db: &mut Db, rng: &mut Rng) {
    let mut names = Vec::new();
    for _ in 0..ARTISTS {
        let name = unique_name(rng, &mut names, |rng| match rng.below(3) {
            0 => format!("The {} {}s", rng.pick(&ADJECTIVES), rng.pick(&NOUNS)),
            1 => format!("{} {}", rng.pick(&FIRST_NAMES), rng.pick(&LAST_NAMES)),
            _ => format!(
                "{} {}",
                rng.pick(&NOUNS),
                rng.pick(&["Club", "Society", "Collective", "Parade", "Theory"])
            ),
        });
        let genre = rng.pick(&GENRES).to_string();
        db.artists.insert(Artist { name, genre });
    }
    let artists: Vec<(Id, String)> = db
        .artists
        .iter()
        .map(|(id, a)| (id, a.genre.clone()))
        .collect();
    let mut titles = Vec::new();
    for (artist_id, genre) in &artists {
        for _ in 0..rng.range(2, 3) {
            let title = unique_name(rng, &mut titles, |rng| {
                format!("{} {}", rng.pick(&ADJECTIVES), rng.pick(&NOUNS))
            });
            let release_date = today().add_days(-(rng.range(30, 20 * 365) as i32));
            let album_id = db.albums.insert(Album {
                title,
                artist_id: *artist_id,
                genre: genre.clone(),
                release_date,
            });
            add_songs(
                db,
                rng,
                album_id,
                *artist_id,
                genre,
                release_date,
                &artists,
                &mut titles,
            );
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn add_songs(
    db: &mut Db,
    rng: &mut Rng,
    album_id: Id,
    artist_id: Id,
    genre: &str,
    release_date: Date,
    artists: &[(Id, String)],
    titles: &mut Vec<String>,
) {
    for _ in 0..rng.range(4, 8) {
        let title = unique_name(rng, titles, song_title);
        let mut artist_ids = vec![artist_id];
        if rng.chance(0.15) {
            if let Some(&(featured, _)) = rng.choose(artists) {
                if featured != artist_id {
                    artist_ids.push(featured);
                }
            }
        }
        db.songs.insert(Song {
            title,
            album_id,
            artist_ids,
            genre: genre.to_owned(),
            duration_seconds: rng.range(120, 360) as u32,
            release_date,
            play_count: rng.range(1_000, 5_000_000) as u64,
        });
    }
}

fn add_playlists(db: &mut Db, rng: &mut Rng, owner: PersonId, songs: &[Id]) {
    let count = if owner == USER {
        6
    } else {
        rng.range(0, 3) as usize
    };
    for title in rng.sample(&PLAYLIST_TITLES, count) {
        let size = rng.range(8, 25) as usize;
        let created_at = past_moment(rng, 500);
        db.playlists.insert(Playlist {
            owner,
            title: title.to_owned(),
            is_public: rng.chance(0.5),
            song_ids: rng.sample(songs, size),
            created_at,
        });
    }
}
