//! Unit tests of the schedule rules, with explicit times.
