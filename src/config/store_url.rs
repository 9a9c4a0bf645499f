//! The store URL of a server (`--store`, `FAIRWAY_STORE`): `embedded:DIR`
//! or `cassandra://HOST:PORT/KEYSPACE`.
//!
//! Invariant: a parsed [`StoreUrl`] names a directory, or a contact point
//! with a port and a keyspace of 1 to 48 ASCII letters, digits or `_`; its
//! `Display` is the text it was parsed from.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Where a server keeps its queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// `embedded:DIR`: a redb file in DIR, for one node.
    Embedded(PathBuf),
    /// `cassandra://HOST:PORT/KEYSPACE`.
    Cassandra {
        /// `HOST:PORT` of a Cassandra node to connect through.
        contact_point: String,
        /// The keyspace: 1 to 48 ASCII letters, digits or `_`.
        keyspace: String,
    },
}

impl FromStr for StoreUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let usage = "use embedded:DIR or cassandra://HOST:PORT/KEYSPACE";
        if let Some(dir) = s.strip_prefix("embedded:") {
            if dir.is_empty() {
                return Err(format!("{s:?} names no directory; {usage}"));
            }
            return Ok(StoreUrl::Embedded(PathBuf::from(dir)));
        }
        if let Some(rest) = s.strip_prefix("cassandra://") {
            let (contact_point, keyspace) =
                rest.split_once('/').ok_or_else(|| format!("{s:?} names no keyspace; {usage}"))?;
            let keyspace_ok = !keyspace.is_empty()
                && keyspace.len() <= 48
                && keyspace.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !keyspace_ok {
                return Err(format!("keyspace {keyspace:?} must be 1 to 48 ASCII letters, digits or '_'"));
            }
            if !contact_point.contains(':') {
                return Err(format!("{s:?}: the contact point needs a port; {usage}"));
            }
            return Ok(StoreUrl::Cassandra { contact_point: contact_point.to_owned(), keyspace: keyspace.to_owned() });
        }
        Err(format!("{s:?} is not a store URL; {usage}"))
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Embedded(dir) => write!(f, "embedded:{}", dir.display()),
            StoreUrl::Cassandra { contact_point, keyspace } => write!(f, "cassandra://{contact_point}/{keyspace}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_kinds() {
        assert_eq!("embedded:./data".parse(), Ok(StoreUrl::Embedded("./data".into())));
        assert_eq!(
            "cassandra://127.0.0.1:9042/fairway".parse(),
            Ok(StoreUrl::Cassandra { contact_point: "127.0.0.1:9042".into(), keyspace: "fairway".into() })
        );
        for bad in ["", "embedded:", "cassandra://host/ks", "cassandra://h:1/", "cassandra://h:1/a-b", "redis://x"] {
            assert!(bad.parse::<StoreUrl>().is_err(), "{bad}");
        }
    }
}
