//! The driver's errors in the store's words: a failed read is
//! `Unavailable` (retry); a failed write is `Unavailable` only when the
//! driver says it was never sent or refused, else `Uncertain` (it may have
//! applied). Connection set-up errors are [`ConnectError`].

use scylla::errors::DbError;
use scylla::errors::{ExecutionError, RequestAttemptError};

use crate::store::StoreError;

/// Why the store could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// No session could be opened through the contact point.
    #[error("cannot reach Cassandra at {contact_point}: {message}")]
    Unreachable {
        /// The `HOST:PORT` tried.
        contact_point: String,
        /// The driver's error.
        message: String,
    },
    /// A statement could not be prepared: the schema may be missing or older
    /// than this server.
    #[error("cannot prepare `{statement}`: {message} (was the schema applied? see `fairway schema apply`)")]
    Prepare {
        /// The statement's CQL.
        statement: String,
        /// Cassandra's error.
        message: String,
    },
    /// Cassandra refused the credentials (not tried again: a wrong
    /// password stays wrong).
    #[error("Cassandra at {contact_point} refused the login: {message} (cassandra.username, cassandra.password_file)")]
    Refused {
        /// The `HOST:PORT` tried.
        contact_point: String,
        /// The driver's error.
        message: String,
    },
    /// Section `[cassandra]` holds a value the store cannot use (a consistency
    /// level, say).
    #[error("config cassandra: {0}")]
    Config(String),
}

impl From<String> for ConnectError {
    fn from(message: String) -> Self {
        ConnectError::Config(message)
    }
}

/// The server answered before doing anything: nothing was applied.
fn refused_up_front(error: &DbError) -> bool {
    matches!(
        error,
        DbError::Unavailable { .. } | DbError::Overloaded | DbError::IsBootstrapping | DbError::RateLimitReached { .. }
    )
}

fn invalid_request(error: &DbError) -> bool {
    matches!(
        error,
        DbError::SyntaxError
            | DbError::Invalid
            | DbError::AlreadyExists { .. }
            | DbError::ConfigError
            | DbError::Unauthorized
            | DbError::AuthenticationError
    )
}

/// A write's error: certainly not applied only when the request never
/// reached a replica or was refused before it ran.
pub(super) fn write_error(error: ExecutionError) -> StoreError {
    let message = error.to_string();
    match &error {
        ExecutionError::EmptyPlan | ExecutionError::ConnectionPoolError(_) | ExecutionError::PrepareError(_) => {
            StoreError::Unavailable(message)
        }
        ExecutionError::BadQuery(_) => StoreError::Invalid(message),
        ExecutionError::LastAttemptError(attempt) => match attempt {
            RequestAttemptError::DbError(db, _) if refused_up_front(db) => StoreError::Unavailable(message),
            RequestAttemptError::DbError(db, _) if invalid_request(db) => StoreError::Invalid(message),
            RequestAttemptError::UnableToAllocStreamId
            | RequestAttemptError::SerializationError(_)
            | RequestAttemptError::CqlRequestSerialization(_) => StoreError::Unavailable(message),
            _ => StoreError::Uncertain(message),
        },
        _ => StoreError::Uncertain(message),
    }
}

/// A read applies nothing: whatever went wrong, it may be tried again.
pub(super) fn read_error(error: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(error.to_string())
}
