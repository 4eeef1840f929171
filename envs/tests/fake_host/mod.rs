//! A small fake world for the sandbox's tests and benchmark: a supervisor app with the
//! user's passwords, a music app with login, expiring access tokens and playlists owned
//! by different users, and a util app for argument-type round trips.

use std::collections::HashMap;

use sage_envs::sandbox::{ApiError, ApiHost, ApiSpec, ParamSpec, ParamType};
use serde_json::{json, Map, Value};

struct Playlist {
    id: i64,
    owner: &'static str,
    title: String,
    songs: Vec<String>,
}

/// The fake world.
pub struct FakeHost {
    specs: HashMap<(String, String), ApiSpec>,
    passwords: HashMap<&'static str, &'static str>,
    /// token -> (user, time issued)
    tokens: HashMap<String, (&'static str, u64)>,
    playlists: Vec<Playlist>,
    /// Logical time: advances by one per call that reaches the host.
    clock: u64,
    /// Calls a token stays valid for.
    pub token_lifetime: u64,
    /// Calls that reached `call`.
    pub calls: u64,
}

impl Default for FakeHost {
    fn default() -> FakeHost {
        FakeHost::new()
    }
}

impl FakeHost {
    /// The world: alice (the supervisor's user) and bob, two playlists each.
    pub fn new() -> FakeHost {
        use ParamType::*;
        let specs = vec![
            ApiSpec::new("supervisor", "show_account_passwords", vec![]),
            ApiSpec::new(
                "music",
                "login",
                vec![
                    ParamSpec::required("username", Str),
                    ParamSpec::required("password", Str),
                ],
            ),
            ApiSpec::new(
                "music",
                "show_playlists",
                vec![
                    ParamSpec::required("access_token", Str),
                    ParamSpec::optional("page_index", Int, json!(0)),
                    ParamSpec::optional("page_limit", Int, json!(5)),
                ],
            ),
            ApiSpec::new(
                "music",
                "show_playlist",
                vec![
                    ParamSpec::required("access_token", Str),
                    ParamSpec::required("playlist_id", Int),
                ],
            ),
            ApiSpec::new(
                "music",
                "add_song",
                vec![
                    ParamSpec::required("access_token", Str),
                    ParamSpec::required("playlist_id", Int),
                    ParamSpec::required("title", Str),
                ],
            ),
            ApiSpec::new(
                "util",
                "echo",
                vec![ParamSpec::optional("value", Any, Value::Null)],
            ),
            ApiSpec::new(
                "util",
                "scale",
                vec![
                    ParamSpec::required("x", Float),
                    ParamSpec::optional("factor", Float, json!(2.0)),
                ],
            ),
            ApiSpec::new(
                "util",
                "tag",
                vec![
                    ParamSpec::required("flag", Bool),
                    ParamSpec::required("labels", List),
                    ParamSpec::optional("meta", Dict, json!({})),
                ],
            ),
        ];
        let playlists = [
            (1, "alice", "Road trip", &["Song A", "Song B"][..]),
            (2, "alice", "Focus", &["Song C"][..]),
            (3, "bob", "Gym", &["Song D"][..]),
            (4, "bob", "Sleep", &[][..]),
        ]
        .into_iter()
        .map(|(id, owner, title, songs)| Playlist {
            id,
            owner,
            title: title.to_owned(),
            songs: songs.iter().map(|s| s.to_string()).collect(),
        })
        .collect();
        FakeHost {
            specs: specs
                .into_iter()
                .map(|s| ((s.app.clone(), s.name.clone()), s))
                .collect(),
            passwords: HashMap::from([("alice", "alice-pw"), ("bob", "bob-pw")]),
            tokens: HashMap::new(),
            playlists,
            clock: 0,
            token_lifetime: 50,
            calls: 0,
        }
    }

    /// The user an access token belongs to, if it is valid now.
    fn user_of(&self, args: &Map<String, Value>) -> Result<&'static str, ApiError> {
        let token = args["access_token"].as_str().unwrap_or_default();
        let &(user, issued) = self
            .tokens
            .get(token)
            .ok_or_else(|| ApiError::new("invalid access token; log in first"))?;
        if self.clock > issued + self.token_lifetime {
            return Err(ApiError::new("access token expired; log in again"));
        }
        Ok(user)
    }

    fn playlist(&mut self, user: &str, id: i64) -> Result<&mut Playlist, ApiError> {
        let playlist = self
            .playlists
            .iter_mut()
            .find(|p| p.id == id)
            .ok_or_else(|| ApiError::new(format!("no playlist with id {id}")))?;
        if playlist.owner != user {
            return Err(ApiError::new(format!(
                "playlist {id} belongs to another user"
            )));
        }
        Ok(playlist)
    }
}

impl ApiHost for FakeHost {
    fn spec(&self, app: &str, api: &str) -> Option<&ApiSpec> {
        self.specs.get(&(app.to_owned(), api.to_owned()))
    }

    fn app_names(&self) -> Vec<String> {
        let mut apps: Vec<String> = self.specs.keys().map(|(app, _)| app.clone()).collect();
        apps.sort();
        apps.dedup();
        apps
    }

    fn api_names(&self, app: &str) -> Vec<String> {
        let mut apis: Vec<String> = self
            .specs
            .keys()
            .filter(|(a, _)| a == app)
            .map(|(_, api)| api.clone())
            .collect();
        apis.sort();
        apis
    }

    fn call(&mut self, app: &str, api: &str, args: Map<String, Value>) -> Result<Value, ApiError> {
        self.clock += 1;
        self.calls += 1;
        match (app, api) {
            ("supervisor", "show_account_passwords") => {
                Ok(json!([{"account_name": "music", "password": "alice-pw"}]))
            }
            ("music", "login") => {
                let user = args["username"].as_str().unwrap_or_default();
                let (&user, &password) = self
                    .passwords
                    .get_key_value(user)
                    .ok_or_else(|| ApiError::new(format!("no account named {user}")))?;
                if args["password"] != password {
                    return Err(ApiError::new("wrong password"));
                }
                let token = format!("tok-{user}-{}", self.clock);
                self.tokens.insert(token.clone(), (user, self.clock));
                Ok(json!({"access_token": token, "token_type": "Bearer"}))
            }
            ("music", "show_playlists") => {
                let user = self.user_of(&args)?;
                let index = args["page_index"].as_i64().unwrap_or(0).max(0) as usize;
                let limit = args["page_limit"].as_i64().unwrap_or(5).clamp(1, 20) as usize;
                let mine: Vec<Value> = self
                    .playlists
                    .iter()
                    .filter(|p| p.owner == user)
                    .skip(index * limit)
                    .take(limit)
                    .map(|p| json!({"playlist_id": p.id, "title": p.title}))
                    .collect();
                Ok(Value::Array(mine))
            }
            ("music", "show_playlist") => {
                let user = self.user_of(&args)?;
                let id = args["playlist_id"].as_i64().unwrap_or(-1);
                let p = self.playlist(user, id)?;
                Ok(json!({"playlist_id": p.id, "title": p.title, "songs": p.songs}))
            }
            ("music", "add_song") => {
                let user = self.user_of(&args)?;
                let id = args["playlist_id"].as_i64().unwrap_or(-1);
                let title = args["title"].as_str().unwrap_or_default().to_owned();
                let p = self.playlist(user, id)?;
                p.songs.push(title);
                Ok(json!({"song_count": p.songs.len()}))
            }
            ("util", "echo") => Ok(args["value"].clone()),
            ("util", "scale") => {
                let x = args["x"].as_f64().unwrap_or_default();
                let factor = args["factor"].as_f64().unwrap_or_default();
                Ok(json!(x * factor))
            }
            ("util", "tag") => Ok(Value::Object(args)),
            _ => Err(ApiError::new("not implemented")),
        }
    }
}
