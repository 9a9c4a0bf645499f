//! Patterns of names in the configuration: `visits.git` names one name;
//! `visits.*` every name that starts with `visits.`; `*` every name. One `*`
//! at most, at the end: a pattern is a prefix, so that what it grants or
//! allows can be read at a glance.

use super::ValidationError;

/// Checks `pattern`; the error names `field`.
pub fn check(field: &str, pattern: &str) -> Result<(), ValidationError> {
    let name = pattern.strip_suffix('*').unwrap_or(pattern);
    if name.contains('*') || (name.is_empty() && pattern != "*") {
        return Err(ValidationError::new(
            field,
            format!("is {pattern:?}; it must be a name, or a prefix followed by one '*'"),
        ));
    }
    Ok(())
}

/// Whether `pattern` covers `name`.
pub fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_is_a_name_or_a_prefix() {
        assert!(matches("*", "anything") && matches("*", ""));
        assert!(matches("visits.*", "visits.git") && matches("visits.*", "visits."));
        assert!(!matches("visits.*", "visit") && !matches("visits.*", "other.visits.git"));
        assert!(matches("jobs", "jobs") && !matches("jobs", "jobs2"));
        for good in ["*", "jobs", "visits.*"] {
            assert!(check("f", good).is_ok(), "{good}");
        }
        for bad in ["", "**", "a*b", "*.git", "a**"] {
            assert_eq!(check("f", bad).unwrap_err().field, "f", "{bad}");
        }
    }
}
