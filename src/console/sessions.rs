//! The console's sessions: who a browser logged in as, and the token its
//! forms carry.
//!
//! Invariants: a session id and a form token are 32 random bytes each,
//! given by the caller; a session lasts [`IDLE_MS`] after its last use, and
//! at most [`MAX_SESSIONS`] live at once (a new one pushes out the one used
//! longest ago); a credential is kept only here, in memory, never written
//! to disk or sent back to the browser.

use std::collections::HashMap;

use crate::clock::UnixMillis;
use crate::security::hex;

/// Sessions live this long after their last use: 8 hours.
pub const IDLE_MS: i64 = 8 * 3600 * 1000;

/// The most sessions kept at once.
pub const MAX_SESSIONS: usize = 1024;

/// One browser's session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// The API key or JWT it logged in with; `None` before a login (or when
    /// the node authenticates no one).
    pub credential: Option<String>,
    /// The principal's name, for the page header.
    pub who: String,
    /// Every form of the session carries it: a request without it is not
    /// the console's own.
    pub form_token: String,
    /// A message for the next page shown (what an action did, or why not).
    pub flash: Option<String>,
    last_used: UnixMillis,
}

/// The sessions of one console.
#[derive(Debug, Default)]
pub struct Sessions {
    by_id: HashMap<String, Session>,
}

impl Sessions {
    /// A new session (not logged in) with id and form token made of
    /// `random`; its id.
    pub fn open(&mut self, random: [[u8; 32]; 2], now: UnixMillis) -> String {
        self.expire(now);
        if self.by_id.len() >= MAX_SESSIONS
            && let Some(oldest) = self.by_id.iter().min_by_key(|(_, s)| s.last_used).map(|(id, _)| id.clone())
        {
            self.by_id.remove(&oldest);
        }
        let id = hex::encode(&random[0]);
        let session = Session {
            credential: None,
            who: String::new(),
            form_token: hex::encode(&random[1]),
            flash: None,
            last_used: now,
        };
        self.by_id.insert(id.clone(), session);
        id
    }

    /// The session `id`, if it lives; its idle time starts again.
    pub fn touch(&mut self, id: &str, now: UnixMillis) -> Option<&mut Session> {
        let session = self.by_id.get_mut(id).filter(|s| now - s.last_used < IDLE_MS)?;
        session.last_used = now;
        Some(session)
    }

    /// Ends the session `id`.
    pub fn close(&mut self, id: &str) {
        self.by_id.remove(id);
    }

    /// How many sessions are kept.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    fn expire(&mut self, now: UnixMillis) {
        self.by_id.retain(|_, s| now - s.last_used < IDLE_MS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: u8) -> [[u8; 32]; 2] {
        [[n; 32], [n.wrapping_add(100); 32]]
    }

    #[test]
    fn a_session_lasts_while_used_and_ends_idle_or_closed() {
        let mut sessions = Sessions::default();
        let id = sessions.open(random(1), 0);
        assert_eq!(id.len(), 64);
        sessions.touch(&id, 0).unwrap().credential = Some("key".into());
        assert!(sessions.touch(&id, IDLE_MS - 1).is_some(), "used within the idle time");
        assert!(sessions.touch(&id, 2 * IDLE_MS - 2).is_some(), "the idle time starts again at each use");
        assert!(sessions.touch(&id, 3 * IDLE_MS).is_none(), "idle too long");
        let other = sessions.open(random(2), 0);
        sessions.close(&other);
        assert!(sessions.touch(&other, 1).is_none());
        assert!(sessions.touch("not a session", 1).is_none());
    }

    #[test]
    fn past_the_bound_the_session_used_longest_ago_goes() {
        let mut sessions = Sessions::default();
        let first = sessions.open(random(0), 0);
        for n in 1..MAX_SESSIONS + 10 {
            let mut random = [[0; 32]; 2];
            random[0][..8].copy_from_slice(&(n as u64).to_le_bytes());
            sessions.open(random, n as i64);
        }
        assert_eq!(sessions.len(), MAX_SESSIONS, "the bound holds");
        assert!(sessions.touch(&first, MAX_SESSIONS as i64 + 10).is_none(), "the oldest went first");
    }
}
