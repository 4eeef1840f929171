//! [`Reference`]: the world a template's reference solution acts in, with the user
//! logged in to every app, so the reference calls the same APIs as agent code and
//! leaves exactly the changes a correct agent leaves.

use serde_json::{Map, Value};

use crate::sandbox::ApiError;
use crate::world::{Db, World, LOGIN_APPS, USER};

/// A world with the user logged in to every app.
pub struct Reference {
    world: World,
    tokens: Vec<(&'static str, String)>,
}

impl Reference {
    /// Starts an episode on `world` and logs the user in everywhere.
    pub fn new(mut world: World) -> Result<Reference, ApiError> {
        world.start_episode();
        let tokens = LOGIN_APPS
            .iter()
            .map(|&app| world.issue_token(app, USER).map(|t| (app, t)))
            .collect::<Result<_, _>>()?;
        Ok(Reference { world, tokens })
    }

    /// The current state.
    pub fn db(&self) -> &Db {
        self.world.db()
    }

    /// The world, once the reference is done.
    pub fn into_world(self) -> World {
        self.world
    }

    /// Calls `apis.<app>.<api>` with `args` (a JSON object), adding the user's access
    /// token when the app has a login.
    pub fn call(&mut self, app: &str, api: &str, args: Value) -> Result<Value, ApiError> {
        let mut args = match args {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            _ => return Err(ApiError::new("reference arguments must be an object")),
        };
        if let Some((_, token)) = self.tokens.iter().find(|(a, _)| *a == app) {
            args.insert("access_token".to_owned(), Value::String(token.clone()));
        }
        self.world.invoke(app, api, Value::Object(args))
    }

    /// Every page of the list API `apis.<app>.<api>(args...)`, concatenated.
    pub fn all_pages(&mut self, app: &str, api: &str, args: Value) -> Result<Vec<Value>, ApiError> {
        let mut rows = Vec::new();
        for page in 0.. {
            let mut page_args = args.clone();
            if let Value::Object(map) = &mut page_args {
                map.insert("page_index".to_owned(), Value::from(page));
                map.insert("page_limit".to_owned(), Value::from(20));
            }
            match self.call(app, api, page_args)? {
                Value::Array(batch) if !batch.is_empty() => rows.extend(batch),
                _ => break,
            }
        }
        Ok(rows)
    }
}
