//! [`Sessions`]: the access tokens apps hand out at login, and the checks every call
//! with a token goes through.
//!
//! A token belongs to one person in one app. It stops working when that person logs
//! out with it, or once `lifetime` further API calls (of any app) have been made since
//! it was issued: expiry follows the world's logical clock, never wall time. Sessions
//! are not part of the database, so logging in and out never shows in a diff.

use std::collections::HashMap;

use super::rng::mix;
use super::table::PersonId;
use crate::sandbox::ApiError;

#[derive(Clone, Debug)]
struct Session {
    app: &'static str,
    person: PersonId,
    issued_at: u64,
    logged_out: bool,
}

/// Issued access tokens.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sessions {
    tokens: HashMap<String, Session>,
}

impl Sessions {
    /// A new token for `person` in `app`, issued at logical time `clock`. The token is
    /// a function of the seed, app, person and clock: the same run gives the same tokens.
    pub(crate) fn issue(
        &mut self,
        seed: u64,
        app: &'static str,
        person: PersonId,
        clock: u64,
    ) -> String {
        let app_hash = app.bytes().fold(0u64, |h, b| mix(h ^ u64::from(b)));
        let mut salt = 0u64;
        loop {
            let bits =
                mix(seed ^ mix(app_hash ^ person.rotate_left(32) ^ clock.rotate_left(17) ^ salt));
            let token = format!("{app}-{bits:016x}");
            if !self.tokens.contains_key(&token) {
                let session = Session {
                    app,
                    person,
                    issued_at: clock,
                    logged_out: false,
                };
                self.tokens.insert(token.clone(), session);
                return token;
            }
            salt += 1;
        }
    }

    /// The person `token` logs into `app` at logical time `clock`, or why it does not.
    pub(crate) fn check(
        &self,
        token: &str,
        app: &str,
        clock: u64,
        lifetime: u64,
    ) -> Result<PersonId, ApiError> {
        let session = self.tokens.get(token).ok_or_else(|| {
            ApiError::new(format!(
                "invalid access token for {app}: get one with apis.{app}.login(username=..., password=...)"
            ))
        })?;
        if session.app != app {
            return Err(ApiError::new(format!(
                "this access token was issued by the {} app, not {app}: log in to {app} with apis.{app}.login(...)",
                session.app
            )));
        }
        if session.logged_out {
            return Err(ApiError::new(format!(
                "this {app} access token was logged out: log in again"
            )));
        }
        if clock.saturating_sub(session.issued_at) > lifetime {
            return Err(ApiError::new(format!(
                "this {app} access token expired ({lifetime} API calls after login): log in again"
            )));
        }
        Ok(session.person)
    }

    /// Ends the session of a valid token.
    pub(crate) fn log_out(&mut self, token: &str) {
        if let Some(session) = self.tokens.get_mut(token) {
            session.logged_out = true;
        }
    }

    /// Forgets every token.
    pub(crate) fn clear(&mut self) {
        self.tokens.clear();
    }
}
