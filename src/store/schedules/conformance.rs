//! The conformance suite of [`super::ScheduleStore`]: generic tests every backend passes.
