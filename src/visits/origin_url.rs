//! What an origin URL recorded by a lister (or a "save code now" request)
//! must be, since loader workers will fetch it: an absolute URL of a scheme
//! the scheduler allows (`scheduler.origin_schemes`), with a host, no
//! whitespace or control characters, and, for a lister with an allow-list
//! (`scheduler.origin_hosts`), a host on it.

use std::collections::BTreeMap;

use crate::model::ValidationError;

/// The longest origin URL, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// The schemes loaders fetch by default.
pub fn default_schemes() -> Vec<String> {
    ["https", "http", "git", "svn", "svn+ssh", "hg", "bzr", "ftp", "sftp", "rsync", "pserver"]
        .map(String::from)
        .to_vec()
}

/// The host of an absolute URL `scheme://[user@]host[:port]/…`, lower-cased;
/// an error saying what is wrong.
fn host_of<'a>(url: &'a str, schemes: &[String]) -> Result<&'a str, String> {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("holds whitespace or a control character".into());
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("is not an absolute URL (scheme://host/…)".into());
    };
    if !schemes.iter().any(|allowed| allowed.eq_ignore_ascii_case(scheme)) {
        return Err(format!("has scheme {scheme:?}; scheduler.origin_schemes allows {schemes:?}"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map(|(host, _)| host).unwrap_or(""),
        None => host_port.split(':').next().unwrap_or(""),
    };
    if host.is_empty() {
        return Err("has no host".into());
    }
    Ok(host)
}

/// Whether `host` is `pattern`, or under it when the pattern is `*.suffix`.
fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.len() > suffix.len() + 1 && host.to_ascii_lowercase().ends_with(&format!(".{suffix}")),
        None => host.eq_ignore_ascii_case(pattern),
    }
}

/// Checks `url`, recorded by `lister`, against the rules of the module docs.
pub fn check(
    field: &str,
    url: &str,
    lister: &str,
    schemes: &[String],
    hosts: &BTreeMap<String, Vec<String>>,
) -> Result<(), ValidationError> {
    check_syntax(field, url, schemes)?;
    let host = host_of(url, schemes).map_err(|m| ValidationError::new(field, m))?;
    match hosts.get(lister) {
        Some(allowed) if !allowed.iter().any(|pattern| host_matches(pattern, host)) => Err(ValidationError::new(
            field,
            format!("has host {host:?}, which scheduler.origin_hosts does not allow lister {lister:?}"),
        )),
        _ => Ok(()),
    }
}

/// Checks the length, characters, scheme and host of `url`.
pub fn check_syntax(field: &str, url: &str, schemes: &[String]) -> Result<(), ValidationError> {
    if url.is_empty() || url.len() > MAX_URL_BYTES {
        return Err(ValidationError::new(
            field,
            format!("is {} bytes long; it must be 1 to {MAX_URL_BYTES}", url.len()),
        ));
    }
    host_of(url, schemes).map(drop).map_err(|m| ValidationError::new(field, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_absolute_of_an_allowed_scheme_with_a_host_on_the_listers_list() {
        let schemes = default_schemes();
        let hosts =
            BTreeMap::from([("gitlab/framagit".to_owned(), vec!["framagit.org".to_owned(), "*.fsf.org".into()])]);
        let ok = |url: &str, lister: &str| check("url", url, lister, &schemes, &hosts);
        for url in ["https://github.com/a/b", "git://example.org:9418/x.git", "svn+ssh://user@svn.example.org/r"] {
            ok(url, "github").unwrap_or_else(|e| panic!("{url}: {e}"));
        }
        ok("https://framagit.org/a/b", "gitlab/framagit").unwrap();
        ok("https://git.fsf.org/a", "gitlab/framagit").unwrap();
        ok("https://[::1]:8080/a", "github").unwrap();
        let refused = [
            ("", "github", "1 to 2048"),
            ("github.com/a/b", "github", "absolute"),
            ("file:///etc/passwd", "github", "scheme \"file\""),
            ("gopher://example.org/", "github", "scheme"),
            ("https:///path", "github", "no host"),
            ("https://user@/path", "github", "no host"),
            ("https://exa mple.org/", "github", "whitespace"),
            ("https://example.org/\n", "github", "control"),
            ("https://github.com/a/b", "gitlab/framagit", "does not allow lister"),
            ("https://evil-framagit.org/a", "gitlab/framagit", "does not allow"),
            ("https://fsf.org/a", "gitlab/framagit", "does not allow"),
        ];
        for (url, lister, words) in refused {
            let error = ok(url, lister).expect_err(url);
            assert_eq!(error.field, "url");
            assert!(error.message.contains(words), "{url}: {error}");
        }
        let long = format!("https://example.org/{}", "a".repeat(MAX_URL_BYTES));
        assert!(ok(&long, "github").unwrap_err().message.contains("2048"));
    }
}
