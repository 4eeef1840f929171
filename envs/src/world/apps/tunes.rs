//! The `tunes` app: music streaming. A shared catalog of artists, albums and songs,
//! and each person's liked songs, followed artists, playlists and play history.

use serde_json::{json, Value};

use super::{
    cmp_ignore_case, login, login_apis, logout, matches, message, needle, newest_first, not_found,
    not_yours, one_of, person_by_email, person_json, sort_rows,
};
use crate::sandbox::{ApiError, ParamType::*};
use crate::world::args::Args;
use crate::world::db::Db;
use crate::world::declare::{api, declare_app, AppDecl};
use crate::world::records::{ArtistFollow, Play, Playlist, Song, SongLike};
use crate::world::table::{Id, PersonId};
use crate::world::World;

const APP: &str = "tunes";

const SONG_SORTS: [&str; 7] = [
    "title",
    "play_count",
    "-play_count",
    "release_date",
    "-release_date",
    "duration_seconds",
    "-duration_seconds",
];

pub(super) fn app() -> AppDecl {
    let song = json!({
        "song_id": "int", "title": "str", "album_id": "int", "album_title": "str",
        "artists": [{"artist_id": "int", "name": "str"}], "genre": "str",
        "duration_seconds": "int", "release_date": "str (YYYY-MM-DD)", "play_count": "int"
    });
    let mut song_details = song.clone();
    song_details["like_count"] = json!("int");
    song_details["liked"] = json!("bool");
    let [login_api, logout_api] = login_apis(
        APP,
        "The email address of the tunes account.",
        |w, a| login(w, a, APP),
        |w, a| logout(w, a, APP),
    );
    declare_app(
        APP,
        "Music streaming: search songs, albums and artists; like songs, follow artists, keep playlists, play music.",
        vec![
            login_api,
            logout_api,
            api("show_account", "Shows the logged-in user's tunes account with counts of their likes, follows and playlists.", show_account)
                .token()
                .returns(json!({"name": "str", "email": "str", "liked_song_count": "int", "following_count": "int", "playlist_count": "int"})),
            api("search_songs", "Searches the song catalog. Without filters, lists every song in catalog order.", search_songs)
                .token()
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the song's title, its album's title or one of its artists' names.")
                .opt("genre", Str, Value::Null, "Only songs of this genre (case-insensitive).")
                .opt("artist_id", Int, Value::Null, "Only songs this artist performs on.")
                .opt("album_id", Int, Value::Null, "Only songs of this album.")
                .opt("sort_by", Str, Value::Null, "Order: one of title, play_count, -play_count, release_date, -release_date, duration_seconds, -duration_seconds (a leading - means descending). Default: catalog order.")
                .paged()
                .returns(json!([song]))
                .error("sort_by is not one of the listed orders"),
            api("show_song", "Shows one song, with how many people like it and whether the user does.", show_song)
                .token()
                .req("song_id", Int, "The song.")
                .returns(song_details)
                .error("there is no song with that id"),
            api("search_albums", "Searches the album catalog, in catalog order.", search_albums)
                .token()
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the album's title or its artist's name.")
                .opt("genre", Str, Value::Null, "Only albums of this genre (case-insensitive).")
                .opt("artist_id", Int, Value::Null, "Only albums of this artist.")
                .paged()
                .returns(json!([{"album_id": "int", "title": "str", "artist": {"artist_id": "int", "name": "str"}, "genre": "str", "release_date": "str", "song_count": "int"}])),
            api("show_album", "Shows one album with its songs in track order.", show_album)
                .token()
                .req("album_id", Int, "The album.")
                .returns(json!({"album_id": "int", "title": "str", "artist": {"artist_id": "int", "name": "str"}, "genre": "str", "release_date": "str", "songs": [{"song_id": "int", "title": "str", "duration_seconds": "int"}]}))
                .error("there is no album with that id"),
            api("search_artists", "Searches artists, in catalog order.", search_artists)
                .token()
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the artist's name.")
                .opt("genre", Str, Value::Null, "Only artists of this genre (case-insensitive).")
                .paged()
                .returns(json!([{"artist_id": "int", "name": "str", "genre": "str", "follower_count": "int"}])),
            api("show_artist", "Shows one artist with their albums, follower count and whether the user follows them.", show_artist)
                .token()
                .req("artist_id", Int, "The artist.")
                .returns(json!({"artist_id": "int", "name": "str", "genre": "str", "follower_count": "int", "following": "bool", "album_ids": ["int"]}))
                .error("there is no artist with that id"),
            api("show_liked_songs", "Lists the songs the user likes, most recently liked first.", show_liked_songs)
                .token()
                .paged()
                .returns(json!([{"song_id": "int", "title": "str", "artists": ["str"], "genre": "str", "liked_at": "str (YYYY-MM-DDTHH:MM:SS)"}])),
            api("like_song", "Adds a song to the user's liked songs.", like_song)
                .token()
                .req("song_id", Int, "The song.")
                .returns(json!({"message": "str"}))
                .error("there is no song with that id")
                .error("the user already likes the song"),
            api("unlike_song", "Removes a song from the user's liked songs.", unlike_song)
                .token()
                .req("song_id", Int, "The song.")
                .returns(json!({"message": "str"}))
                .error("the user does not like the song"),
            api("show_following_artists", "Lists the artists the user follows, most recently followed first.", show_following_artists)
                .token()
                .paged()
                .returns(json!([{"artist_id": "int", "name": "str", "genre": "str", "followed_at": "str"}])),
            api("follow_artist", "Follows an artist.", follow_artist)
                .token()
                .req("artist_id", Int, "The artist.")
                .returns(json!({"message": "str"}))
                .error("there is no artist with that id")
                .error("the user already follows the artist"),
            api("unfollow_artist", "Stops following an artist.", unfollow_artist)
                .token()
                .req("artist_id", Int, "The artist.")
                .returns(json!({"message": "str"}))
                .error("the user does not follow the artist"),
            api("show_playlists", "Lists the user's own playlists, oldest first.", show_playlists)
                .token()
                .paged()
                .returns(json!([{"playlist_id": "int", "title": "str", "is_public": "bool", "song_count": "int", "created_at": "str"}])),
            api("show_user_playlists", "Lists another user's public playlists, oldest first.", show_user_playlists)
                .token()
                .req("user_email", Str, "The other user's email address.")
                .paged()
                .returns(json!([{"playlist_id": "int", "title": "str", "is_public": "bool", "song_count": "int", "created_at": "str"}]))
                .error("there is no user with that email"),
            api("show_playlist", "Shows a playlist with its songs in order. The user's own playlists and other users' public ones can be shown.", show_playlist)
                .token()
                .req("playlist_id", Int, "The playlist.")
                .returns(json!({"playlist_id": "int", "title": "str", "owner": {"name": "str", "email": "str"}, "is_public": "bool", "created_at": "str", "songs": [{"song_id": "int", "title": "str", "artists": ["str"], "duration_seconds": "int"}]}))
                .error("there is no playlist with that id")
                .error("the playlist is another user's private playlist"),
            api("create_playlist", "Creates an empty playlist for the user.", create_playlist)
                .token()
                .req("title", Str, "Its title; must differ from the titles of the user's other playlists.")
                .opt("is_public", Bool, json!(false), "Whether other users can see it.")
                .returns(json!({"playlist_id": "int", "message": "str"}))
                .error("the title is empty or the user already has a playlist with that title"),
            api("update_playlist", "Renames a playlist of the user and/or changes its visibility.", update_playlist)
                .token()
                .req("playlist_id", Int, "The playlist.")
                .opt("title", Str, Value::Null, "New title; must differ from the user's other playlists' titles. Leave out to keep.")
                .opt("is_public", Bool, Value::Null, "New visibility. Leave out to keep.")
                .returns(json!({"message": "str"}))
                .error("there is no playlist with that id, or it belongs to another user")
                .error("the new title is empty or taken"),
            api("delete_playlist", "Deletes a playlist of the user.", delete_playlist)
                .token()
                .req("playlist_id", Int, "The playlist.")
                .returns(json!({"message": "str"}))
                .error("there is no playlist with that id, or it belongs to another user"),
            api("add_song_to_playlist", "Appends a song to the end of one of the user's playlists.", add_song_to_playlist)
                .token()
                .req("playlist_id", Int, "The playlist.")
                .req("song_id", Int, "The song.")
                .returns(json!({"message": "str", "song_count": "int"}))
                .error("there is no playlist with that id, or it belongs to another user")
                .error("there is no song with that id")
                .error("the song is already in the playlist"),
            api("remove_song_from_playlist", "Removes a song from one of the user's playlists.", remove_song_from_playlist)
                .token()
                .req("playlist_id", Int, "The playlist.")
                .req("song_id", Int, "The song.")
                .returns(json!({"message": "str", "song_count": "int"}))
                .error("there is no playlist with that id, or it belongs to another user")
                .error("the song is not in the playlist"),
            api("show_play_history", "Lists the songs the user played, most recent first.", show_play_history)
                .token()
                .paged()
                .returns(json!([{"play_id": "int", "song_id": "int", "title": "str", "artists": ["str"], "played_at": "str"}])),
            api("play_song", "Plays a song: adds it to the user's play history and counts the play.", play_song)
                .token()
                .req("song_id", Int, "The song.")
                .returns(json!({"play_id": "int", "message": "str"}))
                .error("there is no song with that id"),
        ],
    )
}

fn artist_names(db: &Db, song: &Song) -> Vec<String> {
    song.artist_ids
        .iter()
        .filter_map(|&a| db.artists.get(a))
        .map(|a| a.name.clone())
        .collect()
}

fn song_json(db: &Db, id: Id, song: &Song) -> Value {
    let artists: Vec<Value> = song
        .artist_ids
        .iter()
        .filter_map(|&a| {
            db.artists
                .get(a)
                .map(|artist| json!({"artist_id": a, "name": artist.name}))
        })
        .collect();
    json!({
        "song_id": id,
        "title": song.title,
        "album_id": song.album_id,
        "album_title": db.albums.get(song.album_id).map(|a| a.title.as_str()).unwrap_or(""),
        "artists": artists,
        "genre": song.genre,
        "duration_seconds": song.duration_seconds,
        "release_date": song.release_date,
        "play_count": song.play_count,
    })
}

fn existing_song(db: &Db, song_id: Id) -> Result<&Song, ApiError> {
    db.songs
        .get(song_id)
        .ok_or_else(|| not_found("song", song_id))
}

fn existing_artist(db: &Db, artist_id: Id) -> Result<(), ApiError> {
    if db.artists.contains(artist_id) {
        Ok(())
    } else {
        Err(not_found("artist", artist_id))
    }
}

/// The user's own playlist, for changing.
fn own_playlist(db: &mut Db, me: PersonId, playlist_id: Id) -> Result<&mut Playlist, ApiError> {
    match db.playlists.get(playlist_id) {
        None => return Err(not_found("playlist", playlist_id)),
        Some(p) if p.owner != me => return Err(not_yours("playlist", playlist_id)),
        Some(_) => {}
    }
    db.playlists
        .get_mut(playlist_id)
        .ok_or_else(|| not_found("playlist", playlist_id))
}

fn title_taken(db: &Db, me: PersonId, title: &str, except: Option<Id>) -> bool {
    db.playlists
        .find(|p| p.owner == me && p.title.eq_ignore_ascii_case(title))
        .is_some_and(|(id, _)| Some(id) != except)
}

fn playlist_summary(id: Id, p: &Playlist) -> Value {
    json!({"playlist_id": id, "title": p.title, "is_public": p.is_public, "song_count": p.song_ids.len(), "created_at": p.created_at})
}

fn show_account(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let db = &world.db;
    Ok(json!({
        "name": db.name_of(me),
        "email": db.email_of(me),
        "liked_song_count": db.song_likes.filter(|l| l.person == me).count(),
        "following_count": db.artist_follows.filter(|f| f.person == me).count(),
        "playlist_count": db.playlists.filter(|p| p.owner == me).count(),
    }))
}

fn search_songs(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    world.auth(APP, args)?;
    let page = args.page()?;
    let query = needle(args.opt_str("query")?);
    let genre = args.opt_str("genre")?;
    let artist_id = args.opt_id("artist_id")?;
    let album_id = args.opt_id("album_id")?;
    let sort_by = args
        .opt_str("sort_by")?
        .map(|s| one_of("sort_by", s, &SONG_SORTS))
        .transpose()?;
    let db = &world.db;
    let mut songs: Vec<(Id, &Song)> = db
        .songs
        .filter(|s| {
            genre.is_none_or(|g| s.genre.eq_ignore_ascii_case(g))
                && artist_id.is_none_or(|a| s.artist_ids.contains(&a))
                && album_id.is_none_or(|a| s.album_id == a)
                && (query.is_none()
                    || matches(&query, &s.title)
                    || db
                        .albums
                        .get(s.album_id)
                        .is_some_and(|a| matches(&query, &a.title))
                    || s.artist_ids
                        .iter()
                        .any(|&a| db.artists.get(a).is_some_and(|a| matches(&query, &a.name))))
        })
        .collect();
    if let Some(order) = sort_by {
        let descending = order.starts_with('-');
        match order.trim_start_matches('-') {
            "title" => songs.sort_by(|a, b| cmp_ignore_case(&a.1.title, &b.1.title)),
            "play_count" => sort_rows(&mut songs, descending, |s| s.play_count),
            "release_date" => sort_rows(&mut songs, descending, |s| s.release_date),
            _ => sort_rows(&mut songs, descending, |s| s.duration_seconds),
        }
    }
    Ok(page.of(songs, |(id, s)| song_json(db, id, s)))
}

fn show_song(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let song_id = args.id("song_id")?;
    let db = &world.db;
    let mut song = song_json(db, song_id, existing_song(db, song_id)?);
    song["like_count"] = json!(db.song_like_count(song_id));
    song["liked"] = json!(db.likes_song(me, song_id));
    Ok(song)
}

fn album_artist(db: &Db, artist_id: Id) -> Value {
    json!({"artist_id": artist_id, "name": db.artists.get(artist_id).map(|a| a.name.as_str()).unwrap_or("")})
}

fn search_albums(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    world.auth(APP, args)?;
    let page = args.page()?;
    let query = needle(args.opt_str("query")?);
    let genre = args.opt_str("genre")?;
    let artist_id = args.opt_id("artist_id")?;
    let db = &world.db;
    let albums = db.albums.filter(|a| {
        genre.is_none_or(|g| a.genre.eq_ignore_ascii_case(g))
            && artist_id.is_none_or(|id| a.artist_id == id)
            && (matches(&query, &a.title)
                || db
                    .artists
                    .get(a.artist_id)
                    .is_some_and(|ar| matches(&query, &ar.name)))
    });
    Ok(page.of(albums, |(id, a)| {
        json!({
            "album_id": id, "title": a.title, "artist": album_artist(db, a.artist_id), "genre": a.genre,
            "release_date": a.release_date, "song_count": db.songs.filter(|s| s.album_id == id).count(),
        })
    }))
}

fn show_album(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    world.auth(APP, args)?;
    let album_id = args.id("album_id")?;
    let db = &world.db;
    let album = db
        .albums
        .get(album_id)
        .ok_or_else(|| not_found("album", album_id))?;
    let songs: Vec<Value> = db
        .songs
        .filter(|s| s.album_id == album_id)
        .map(|(id, s)| json!({"song_id": id, "title": s.title, "duration_seconds": s.duration_seconds}))
        .collect();
    Ok(json!({
        "album_id": album_id, "title": album.title, "artist": album_artist(db, album.artist_id),
        "genre": album.genre, "release_date": album.release_date, "songs": songs,
    }))
}

fn search_artists(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    world.auth(APP, args)?;
    let page = args.page()?;
    let query = needle(args.opt_str("query")?);
    let genre = args.opt_str("genre")?;
    let db = &world.db;
    let artists = db.artists.filter(|a| {
        genre.is_none_or(|g| a.genre.eq_ignore_ascii_case(g)) && matches(&query, &a.name)
    });
    Ok(page.of(artists, |(id, a)| {
        json!({"artist_id": id, "name": a.name, "genre": a.genre, "follower_count": db.follower_count(id)})
    }))
}

fn show_artist(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let artist_id = args.id("artist_id")?;
    let db = &world.db;
    let artist = db
        .artists
        .get(artist_id)
        .ok_or_else(|| not_found("artist", artist_id))?;
    let album_ids: Vec<Id> = db
        .albums
        .filter(|a| a.artist_id == artist_id)
        .map(|(id, _)| id)
        .collect();
    let following = db
        .artist_follows
        .find(|f| f.person == me && f.artist_id == artist_id)
        .is_some();
    Ok(json!({
        "artist_id": artist_id, "name": artist.name, "genre": artist.genre,
        "follower_count": db.follower_count(artist_id), "following": following, "album_ids": album_ids,
    }))
}

fn show_liked_songs(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let db = &world.db;
    let mut likes: Vec<(Id, &SongLike)> = db.song_likes.filter(|l| l.person == me).collect();
    newest_first(&mut likes, |l| l.liked_at);
    Ok(page.of(likes, |(_, l)| {
        let song = db.songs.get(l.song_id);
        json!({
            "song_id": l.song_id,
            "title": song.map(|s| s.title.as_str()).unwrap_or(""),
            "artists": song.map(|s| artist_names(db, s)).unwrap_or_default(),
            "genre": song.map(|s| s.genre.as_str()).unwrap_or(""),
            "liked_at": l.liked_at,
        })
    }))
}

fn like_song(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let song_id = args.id("song_id")?;
    existing_song(&world.db, song_id)?;
    if world.db.likes_song(me, song_id) {
        return Err(ApiError::new(format!("you already like song {song_id}")));
    }
    let liked_at = world.now();
    world.db.song_likes.insert(SongLike {
        person: me,
        song_id,
        liked_at,
    });
    Ok(message(&format!("Liked song {song_id}.")))
}

fn unlike_song(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let song_id = args.id("song_id")?;
    let removed = world
        .db
        .song_likes
        .remove_where(|l| l.person == me && l.song_id == song_id);
    if removed == 0 {
        return Err(ApiError::new(format!("you do not like song {song_id}")));
    }
    Ok(message(&format!("Unliked song {song_id}.")))
}

fn show_following_artists(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let db = &world.db;
    let mut follows: Vec<(Id, &ArtistFollow)> =
        db.artist_follows.filter(|f| f.person == me).collect();
    newest_first(&mut follows, |f| f.followed_at);
    Ok(page.of(follows, |(_, f)| {
        let artist = db.artists.get(f.artist_id);
        json!({
            "artist_id": f.artist_id,
            "name": artist.map(|a| a.name.as_str()).unwrap_or(""),
            "genre": artist.map(|a| a.genre.as_str()).unwrap_or(""),
            "followed_at": f.followed_at,
        })
    }))
}

fn follow_artist(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let artist_id = args.id("artist_id")?;
    existing_artist(&world.db, artist_id)?;
    if world
        .db
        .artist_follows
        .find(|f| f.person == me && f.artist_id == artist_id)
        .is_some()
    {
        return Err(ApiError::new(format!(
            "you already follow artist {artist_id}"
        )));
    }
    let followed_at = world.now();
    world.db.artist_follows.insert(ArtistFollow {
        person: me,
        artist_id,
        followed_at,
    });
    Ok(message(&format!("Following artist {artist_id}.")))
}

fn unfollow_artist(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let artist_id = args.id("artist_id")?;
    if world
        .db
        .artist_follows
        .remove_where(|f| f.person == me && f.artist_id == artist_id)
        == 0
    {
        return Err(ApiError::new(format!(
            "you do not follow artist {artist_id}"
        )));
    }
    Ok(message(&format!("Unfollowed artist {artist_id}.")))
}

fn show_playlists(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    Ok(
        page.of(world.db.playlists.filter(|p| p.owner == me), |(id, p)| {
            playlist_summary(id, p)
        }),
    )
}

fn show_user_playlists(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    world.auth(APP, args)?;
    let page = args.page()?;
    let owner = person_by_email(&world.db, APP, args.str("user_email")?)?;
    Ok(page.of(
        world
            .db
            .playlists
            .filter(|p| p.owner == owner && p.is_public),
        |(id, p)| playlist_summary(id, p),
    ))
}

fn show_playlist(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let playlist_id = args.id("playlist_id")?;
    let db = &world.db;
    let playlist = db
        .playlists
        .get(playlist_id)
        .ok_or_else(|| not_found("playlist", playlist_id))?;
    if playlist.owner != me && !playlist.is_public {
        return Err(ApiError::new(format!(
            "playlist {playlist_id} is another user's private playlist"
        )));
    }
    let songs: Vec<Value> = playlist
        .song_ids
        .iter()
        .filter_map(|&id| db.songs.get(id).map(|s| (id, s)))
        .map(|(id, s)| json!({"song_id": id, "title": s.title, "artists": artist_names(db, s), "duration_seconds": s.duration_seconds}))
        .collect();
    Ok(json!({
        "playlist_id": playlist_id, "title": playlist.title, "owner": person_json(db, playlist.owner),
        "is_public": playlist.is_public, "created_at": playlist.created_at, "songs": songs,
    }))
}

fn create_playlist(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let title = args.text("title")?;
    let is_public = args.opt_bool("is_public")?.unwrap_or(false);
    if title_taken(&world.db, me, title, None) {
        return Err(ApiError::new(format!(
            "you already have a playlist titled {title:?}"
        )));
    }
    let created_at = world.now();
    let id = world.db.playlists.insert(Playlist {
        owner: me,
        title: title.to_owned(),
        is_public,
        song_ids: Vec::new(),
        created_at,
    });
    Ok(json!({"playlist_id": id, "message": format!("Created playlist {title:?}.")}))
}

fn update_playlist(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let playlist_id = args.id("playlist_id")?;
    let title = args.opt_text("title")?;
    let is_public = args.opt_bool("is_public")?;
    own_playlist(&mut world.db, me, playlist_id)?;
    if let Some(title) = title {
        if title_taken(&world.db, me, title, Some(playlist_id)) {
            return Err(ApiError::new(format!(
                "you already have a playlist titled {title:?}"
            )));
        }
    }
    let playlist = own_playlist(&mut world.db, me, playlist_id)?;
    if let Some(title) = title {
        playlist.title = title.to_owned();
    }
    if let Some(is_public) = is_public {
        playlist.is_public = is_public;
    }
    Ok(message(&format!("Updated playlist {playlist_id}.")))
}

fn delete_playlist(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let playlist_id = args.id("playlist_id")?;
    own_playlist(&mut world.db, me, playlist_id)?;
    world.db.playlists.remove(playlist_id);
    Ok(message(&format!("Deleted playlist {playlist_id}.")))
}

fn add_song_to_playlist(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let playlist_id = args.id("playlist_id")?;
    let song_id = args.id("song_id")?;
    existing_song(&world.db, song_id)?;
    let playlist = own_playlist(&mut world.db, me, playlist_id)?;
    if playlist.song_ids.contains(&song_id) {
        return Err(ApiError::new(format!(
            "song {song_id} is already in playlist {playlist_id}"
        )));
    }
    playlist.song_ids.push(song_id);
    Ok(
        json!({"message": format!("Added song {song_id} to playlist {playlist_id}."), "song_count": playlist.song_ids.len()}),
    )
}

fn remove_song_from_playlist(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let playlist_id = args.id("playlist_id")?;
    let song_id = args.id("song_id")?;
    let playlist = own_playlist(&mut world.db, me, playlist_id)?;
    let Some(position) = playlist.song_ids.iter().position(|&s| s == song_id) else {
        return Err(ApiError::new(format!(
            "song {song_id} is not in playlist {playlist_id}"
        )));
    };
    playlist.song_ids.remove(position);
    Ok(
        json!({"message": format!("Removed song {song_id} from playlist {playlist_id}."), "song_count": playlist.song_ids.len()}),
    )
}

fn show_play_history(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let db = &world.db;
    let mut plays: Vec<(Id, &Play)> = db.plays.filter(|p| p.person == me).collect();
    newest_first(&mut plays, |p| p.played_at);
    Ok(page.of(plays, |(id, p)| {
        let song = db.songs.get(p.song_id);
        json!({
            "play_id": id,
            "song_id": p.song_id,
            "title": song.map(|s| s.title.as_str()).unwrap_or(""),
            "artists": song.map(|s| artist_names(db, s)).unwrap_or_default(),
            "played_at": p.played_at,
        })
    }))
}

fn play_song(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let song_id = args.id("song_id")?;
    existing_song(&world.db, song_id)?;
    let played_at = world.now();
    if let Some(song) = world.db.songs.get_mut(song_id) {
        song.play_count += 1;
    }
    let play_id = world.db.plays.insert(Play {
        person: me,
        song_id,
        played_at,
    });
    Ok(json!({"play_id": play_id, "message": format!("Playing song {song_id}.")}))
}
