//! Which dead letters an operator means: those of one fairness key, whose
//! failure message contains some text, or that failed within a span of
//! time. An empty filter means every letter.
//!
//! Invariant: the filter only reads a letter; judging one needs no clock,
//! so the owner of a partition and a node listing its letters agree.

use crate::clock::UnixMillis;

use super::rows::RecordTask;

/// Dead letters chosen by their key, their failure message and when they
/// failed; each part set narrows the choice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeadLetterFilter {
    /// Only letters of this fairness key (the empty key is a key too).
    pub fairness_key: Option<String>,
    /// Only letters whose failure message contains this text (case matters).
    pub message_contains: Option<String>,
    /// Only letters that failed at or after this time.
    pub failed_from: Option<UnixMillis>,
    /// Only letters that failed before this time.
    pub failed_before: Option<UnixMillis>,
}

impl DeadLetterFilter {
    /// Whether the filter chooses every letter.
    pub fn is_everything(&self) -> bool {
        *self == DeadLetterFilter::default()
    }

    /// Whether `letter` is one the filter chooses.
    pub fn matches(&self, letter: &RecordTask) -> bool {
        self.fairness_key.as_ref().is_none_or(|key| *key == letter.task.fairness_key)
            && self.message_contains.as_ref().is_none_or(|text| letter.message.contains(text.as_str()))
            && self.failed_from.is_none_or(|from| letter.at_unix_ms >= from)
            && self.failed_before.is_none_or(|before| letter.at_unix_ms < before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Priority, TaskSpec};

    fn letter(key: &str, message: &str, failed_at: UnixMillis) -> RecordTask {
        let task = TaskSpec::new(key, Priority::DEFAULT, Vec::new()).at_level(crate::model::FairLevel::new(0, 1), 1);
        RecordTask { task, at_unix_ms: failed_at, message: message.into() }
    }

    #[test]
    fn an_empty_filter_chooses_every_letter() {
        let filter = DeadLetterFilter::default();
        assert!(filter.is_everything());
        assert!(filter.matches(&letter("", "", 0)));
        assert!(filter.matches(&letter("a", "lease expired", i64::MAX)));
    }

    #[test]
    fn each_part_narrows_the_choice() {
        let filter = DeadLetterFilter {
            fairness_key: Some("forge.a".into()),
            message_contains: Some("timeout".into()),
            failed_from: Some(1_000),
            failed_before: Some(2_000),
        };
        assert!(!filter.is_everything());
        assert!(filter.matches(&letter("forge.a", "connect timeout after 30 s", 1_000)));
        assert!(!filter.matches(&letter("forge.b", "connect timeout after 30 s", 1_000)), "another key");
        assert!(!filter.matches(&letter("forge.a", "refused", 1_000)), "another message");
        assert!(!filter.matches(&letter("forge.a", "Timeout", 1_000)), "case matters");
        assert!(!filter.matches(&letter("forge.a", "timeout", 999)), "failed before the span");
        assert!(!filter.matches(&letter("forge.a", "timeout", 2_000)), "the span's end is not in it");
    }

    #[test]
    fn the_empty_key_is_a_key() {
        let filter = DeadLetterFilter { fairness_key: Some(String::new()), ..DeadLetterFilter::default() };
        assert!(filter.matches(&letter("", "x", 5)));
        assert!(!filter.matches(&letter("a", "x", 5)));
    }
}
