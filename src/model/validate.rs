//! The rules every outside input must pass, each reported with the field it
//! concerns and the limit it broke. Nothing is stored before all of a
//! request's fields have passed.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Priority, QueueName};

/// The longest queue name, in bytes.
pub const MAX_QUEUE_NAME_BYTES: usize = 128;
/// The longest fairness key, in bytes.
pub const MAX_FAIRNESS_KEY_BYTES: usize = 256;
/// The most partitions a queue may have.
pub const MAX_PARTITIONS: u32 = 256;
/// The largest `limits.max_connections`.
pub const MAX_CONNECTIONS: usize = 1_000_000;
/// The smallest and largest fairness weights.
pub const MIN_WEIGHT: f64 = 0.001;
/// The largest fairness weight.
pub const MAX_WEIGHT: f64 = 1000.0;
/// The largest cost of a task: a task counts for at most this many tasks of
/// cost 1 in its key's share.
pub const MAX_TASK_COST: u32 = 1000;
/// The largest size a task may give (records, bytes: the queue's units),
/// made into a cost on the queue's curve.
pub const MAX_TASK_SIZE: u64 = 1_000_000_000_000_000;

/// Limits an operator may tune (section `[limits]` of the config file).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// The largest task payload, in bytes.
    pub max_payload_bytes: usize,
    /// The most tasks in one AddTasks call.
    pub max_batch_tasks: usize,
    /// The longest a PollTask may wait.
    #[serde(with = "crate::clock::duration_serde")]
    pub max_poll_wait: Duration,
    /// The most tasks one PollTasks call may take.
    pub max_poll_tasks: u32,
    /// The most bytes of one PollTasks response (the encoded message): a
    /// poll takes fewer than `max_tasks` rather than pass it, and the tasks
    /// left out stay ready for the next poll. One task is always given,
    /// however large. ListDeadLetters answers within it too (payloads and
    /// messages counted). The default is what gRPC clients accept by default.
    pub max_poll_response_bytes: usize,
    /// The longest delay of a task or a `retry_after`.
    #[serde(with = "crate::clock::duration_serde")]
    pub max_delay: Duration,
    /// The largest request the server decodes, in bytes (the encoded
    /// message); a larger one is refused before it is read into memory
    /// (`OUT_OF_RANGE`). At least `max_payload_bytes` and 64 KiB more, so
    /// that one task of the largest payload always fits; an AddTasks of
    /// many large tasks may have to be split.
    pub max_request_bytes: usize,
    /// The most polls one client connection may have in progress at once
    /// (requests forwarded by nodes are not counted); a poll past it is
    /// refused (`RESOURCE_EXHAUSTED`). A connection carries at most 1024
    /// requests at once in any case (HTTP/2 streams).
    pub max_polls_per_connection: usize,
    /// The most client connections open at once, TLS handshakes in
    /// progress included; a connection past it is closed as soon as it is
    /// accepted.
    pub max_connections: usize,
    /// The most connections open at once from one client IP address (a NAT
    /// or a proxy in front of many clients counts as one); a connection past
    /// it is closed as soon as it is accepted. At most `max_connections`.
    pub max_connections_per_address: usize,
    /// A connection with no request in progress for this long is closed
    /// (a client connects again when it next calls). A parked poll is a
    /// request in progress.
    #[serde(with = "crate::clock::duration_serde")]
    pub connection_idle_timeout: Duration,
    /// The server pings (HTTP/2 PING) a connection it has heard nothing on
    /// for this long…
    #[serde(with = "crate::clock::duration_serde")]
    pub keepalive_interval: Duration,
    /// …and closes it when the ping is not answered within this long: a
    /// client that vanished (its host gone, a network cut) holds no
    /// connection, nor the requests on it, for long.
    #[serde(with = "crate::clock::duration_serde")]
    pub keepalive_timeout: Duration,
    /// The most dead letters of one partition that one ListDeadLetters or
    /// RedriveDeadLetters call reads, those a filter passes over included:
    /// a filter that matches few letters of a long history ends there, and
    /// says so, instead of reading the whole history.
    pub max_dead_letters_read: usize,
    /// The most workers (one per queue and worker id) a node remembers for
    /// ListWorkers and ListNodes; past it the least recently seen with no
    /// poll waiting is forgotten.
    pub max_workers_seen: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_payload_bytes: 1024 * 1024,
            max_batch_tasks: 1000,
            max_poll_wait: Duration::from_secs(300),
            max_poll_tasks: 256,
            max_poll_response_bytes: 4 * 1024 * 1024,
            max_delay: Duration::from_secs(30 * 24 * 3600),
            max_request_bytes: 16 * 1024 * 1024,
            max_polls_per_connection: 512,
            max_connections: 10_000,
            max_connections_per_address: 1_000,
            connection_idle_timeout: Duration::from_secs(600),
            keepalive_interval: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(20),
            max_dead_letters_read: 10_000,
            max_workers_seen: 10_000,
        }
    }
}

impl Limits {
    /// Checks section `[limits]`; the error names the key.
    pub fn validate(&self) -> Result<()> {
        if !(1..=64 * 1024 * 1024).contains(&self.max_payload_bytes) {
            return Err(ValidationError::new("limits.max_payload_bytes", "must be in [1, 67108864] (64 MiB)"));
        }
        if !(1..=10_000).contains(&self.max_batch_tasks) {
            return Err(ValidationError::new("limits.max_batch_tasks", "must be in [1, 10000]"));
        }
        if self.max_poll_wait.is_zero() || self.max_poll_wait > Duration::from_secs(3600) {
            return Err(ValidationError::new("limits.max_poll_wait", "must be in (0s, 1h]"));
        }
        if !(1..=10_000).contains(&self.max_poll_tasks) {
            return Err(ValidationError::new("limits.max_poll_tasks", "must be 1 to 10000"));
        }
        if !(64 * 1024..=256 * 1024 * 1024).contains(&self.max_poll_response_bytes) {
            return Err(ValidationError::new(
                "limits.max_poll_response_bytes",
                "must be in [65536, 268435456] (64 KiB to 256 MiB)",
            ));
        }
        let smallest_request = self.max_payload_bytes + 64 * 1024;
        if !(smallest_request..=256 * 1024 * 1024).contains(&self.max_request_bytes) {
            return Err(ValidationError::new(
                "limits.max_request_bytes",
                format!(
                    "is {}; it must be in [{smallest_request}, 268435456]: at least limits.max_payload_bytes and 64 KiB",
                    self.max_request_bytes
                ),
            ));
        }
        if !(1..=1024).contains(&self.max_polls_per_connection) {
            return Err(ValidationError::new("limits.max_polls_per_connection", "must be 1 to 1024"));
        }
        if !(1..=MAX_CONNECTIONS).contains(&self.max_connections) {
            return Err(ValidationError::new(
                "limits.max_connections",
                format!("is {}; it must be 1 to {MAX_CONNECTIONS}", self.max_connections),
            ));
        }
        if !(1..=self.max_connections).contains(&self.max_connections_per_address) {
            return Err(ValidationError::new(
                "limits.max_connections_per_address",
                format!(
                    "is {}; it must be 1 to limits.max_connections ({})",
                    self.max_connections_per_address, self.max_connections
                ),
            ));
        }
        if !(1..=1_000_000).contains(&self.max_dead_letters_read) {
            return Err(ValidationError::new(
                "limits.max_dead_letters_read",
                format!("is {}; it must be 1 to 1000000", self.max_dead_letters_read),
            ));
        }
        if !(1..=1_000_000).contains(&self.max_workers_seen) {
            return Err(ValidationError::new(
                "limits.max_workers_seen",
                format!("is {}; it must be 1 to 1000000", self.max_workers_seen),
            ));
        }
        for (key, value, (shortest, longest)) in [
            ("limits.connection_idle_timeout", self.connection_idle_timeout, (1, 24 * 3600)),
            ("limits.keepalive_interval", self.keepalive_interval, (1, 3600)),
            ("limits.keepalive_timeout", self.keepalive_timeout, (1, 600)),
        ] {
            let (shortest, longest) = (Duration::from_secs(shortest), Duration::from_secs(longest));
            if !(shortest..=longest).contains(&value) {
                return Err(ValidationError::new(
                    key,
                    format!("is {value:?}; it must be in [{shortest:?}, {longest:?}]"),
                ));
            }
        }
        Ok(())
    }
}

/// A rejected input: which field, and what it should have been.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// The field of the request or the config key that was rejected.
    pub field: String,
    /// What the value was and the rule it broke.
    pub message: String,
}

impl ValidationError {
    /// The error of `field`, explained by `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ValidationError { field: field.into(), message: message.into() }
    }

    /// The same error of a field inside `parent` (`tasks[3]` + `payload`:
    /// `tasks[3].payload`): validations name the field alone, and the
    /// caller its path only when one fails, so that a valid request builds
    /// no names.
    pub fn within(mut self, parent: &str) -> Self {
        if !parent.is_empty() {
            self.field = format!("{parent}.{}", self.field);
        }
        self
    }
}

type Result<T> = std::result::Result<T, ValidationError>;

/// 1 to 128 bytes of ASCII letters, digits, `.`, `_` and `-`, starting with a
/// letter or a digit: `visits.git`, `tenant-7_jobs`.
pub fn queue_name(field: &str, name: &str) -> Result<QueueName> {
    let rule = "must be 1 to 128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit";
    if name.is_empty() {
        return Err(ValidationError::new(field, format!("is empty; it {rule}")));
    }
    if name.len() > MAX_QUEUE_NAME_BYTES {
        return Err(ValidationError::new(field, format!("is {} bytes long; it {rule}", name.len())));
    }
    let first_ok = name.as_bytes()[0].is_ascii_alphanumeric();
    let rest_ok = name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !first_ok || !rest_ok {
        return Err(ValidationError::new(field, format!("{name:?} {rule}")));
    }
    Ok(QueueName::new_unchecked(name))
}

/// The longest region name, in bytes.
pub const MAX_REGION_BYTES: usize = 48;

/// A region (a Cassandra datacenter's name): 1 to 48 ASCII letters, digits,
/// `_`, `-` or `.`; empty stands for the one region of a deployment that
/// names none.
pub fn region(field: &str, name: &str) -> Result<String> {
    let rule = "must be empty or 1 to 48 ASCII letters, digits, '.', '_' or '-' (the Cassandra datacenter's name)";
    let ok = name.len() <= MAX_REGION_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !ok {
        return Err(ValidationError::new(field, format!("{name:?} {rule}")));
    }
    Ok(name.to_owned())
}

/// At most 256 bytes; any UTF-8, the empty key included.
pub fn fairness_key(field: &str, key: &str) -> Result<()> {
    if key.len() > MAX_FAIRNESS_KEY_BYTES {
        return Err(ValidationError::new(
            field,
            format!("is {} bytes long; the limit is {MAX_FAIRNESS_KEY_BYTES} bytes", key.len()),
        ));
    }
    Ok(())
}

/// 0 means "the queue's weight for this key"; otherwise finite, in [0.001, 1000].
pub fn fairness_weight(field: &str, weight: f64) -> Result<Option<f64>> {
    if weight == 0.0 {
        return Ok(None);
    }
    check_weight(field, weight).map(Some)
}

/// A task's cost: 0 for the default (1), else 1 to [`MAX_TASK_COST`].
pub fn cost(field: &str, cost: u32) -> Result<u32> {
    if cost > MAX_TASK_COST {
        return Err(ValidationError::new(
            field,
            format!("is {cost}; it must be 1 to {MAX_TASK_COST} (or 0 for the default, 1)"),
        ));
    }
    Ok(cost.max(1))
}

/// A task's size: 0 for none, else 1 to [`MAX_TASK_SIZE`]; a task gives a
/// size or a cost, not both (`cost` is the field the producer set, 0 if
/// none).
pub fn size(field: &str, size: u64, cost: u32) -> Result<Option<u64>> {
    if size > MAX_TASK_SIZE {
        return Err(ValidationError::new(field, format!("is {size}; it must be 1 to {MAX_TASK_SIZE} (or 0 for none)")));
    }
    if size > 0 && cost > 0 {
        return Err(ValidationError::new(
            field,
            format!(
                "is {size} and cost is {cost}; give one of them (a size is made into a cost on the queue's cost_curve)"
            ),
        ));
    }
    Ok((size > 0).then_some(size))
}

/// A weight given by an operator: finite, in [0.001, 1000].
pub fn check_weight(field: &str, weight: f64) -> Result<f64> {
    if !weight.is_finite() || !(MIN_WEIGHT..=MAX_WEIGHT).contains(&weight) {
        return Err(ValidationError::new(
            field,
            format!("is {weight}; it must be a finite number in [{MIN_WEIGHT}, {MAX_WEIGHT}] (or 0 for the default)"),
        ));
    }
    Ok(weight)
}

/// A queue's partition count: 1 to [`MAX_PARTITIONS`].
pub fn partitions(field: &str, count: u32) -> Result<u32> {
    if !(1..=MAX_PARTITIONS).contains(&count) {
        return Err(ValidationError::new(field, format!("is {count}; it must be 1 to {MAX_PARTITIONS}")));
    }
    Ok(count)
}

/// 0 (the default, 3) or 1 (highest) to 5 (lowest).
pub fn priority(field: &str, value: u32) -> Result<Priority> {
    if value == 0 {
        return Ok(Priority::DEFAULT);
    }
    Priority::new(value).ok_or_else(|| {
        ValidationError::new(field, format!("is {value}; it must be 0 (default, 3) or 1 (highest) to 5 (lowest)"))
    })
}

/// A payload of `len` bytes: at most `limits.max_payload_bytes`.
pub fn payload(field: &str, len: usize, limits: &Limits) -> Result<()> {
    if len > limits.max_payload_bytes {
        return Err(ValidationError::new(
            field,
            format!("is {len} bytes; the limit is {} bytes (limits.max_payload_bytes)", limits.max_payload_bytes),
        ));
    }
    Ok(())
}

/// The longest dedup id, in bytes.
pub const MAX_DEDUP_ID_BYTES: usize = 512;
/// The longest failure message, in bytes.
pub const MAX_FAILURE_MESSAGE_BYTES: usize = 4096;

/// Empty means none; else at most 512 bytes of any UTF-8.
pub fn dedup_id(field: &str, id: String) -> Result<Option<String>> {
    if id.len() > MAX_DEDUP_ID_BYTES {
        return Err(ValidationError::new(
            field,
            format!("is {} bytes long; the limit is {MAX_DEDUP_ID_BYTES} bytes", id.len()),
        ));
    }
    Ok((!id.is_empty()).then_some(id))
}

/// The earliest deadline a task may carry: 1970-01-01T00:00:00Z.
pub const MIN_DEADLINE_UNIX_SECONDS: i64 = 0;
/// The latest deadline a task may carry: 9999-12-31T23:59:59Z (and its
/// last nanoseconds), the end of a protobuf Timestamp's range.
pub const MAX_DEADLINE_UNIX_SECONDS: i64 = 253_402_300_799;

/// A task's deadline, given as `seconds` and `nanos` since the Unix epoch:
/// nanos 0 to 999 999 999, from 1970-01-01T00:00:00Z to
/// 9999-12-31T23:59:59.999999999Z; in ms since the epoch (nanos below a
/// millisecond dropped).
pub fn deadline(field: &str, seconds: i64, nanos: i32) -> Result<crate::clock::UnixMillis> {
    if !(0..1_000_000_000).contains(&nanos) {
        return Err(ValidationError::new(field, format!("has {nanos} nanos; they must be 0 to 999999999")));
    }
    if !(MIN_DEADLINE_UNIX_SECONDS..=MAX_DEADLINE_UNIX_SECONDS).contains(&seconds) {
        return Err(ValidationError::new(
            field,
            format!("is {seconds}s since the Unix epoch; it must be from 1970-01-01T00:00:00Z to 9999-12-31T23:59:59Z"),
        ));
    }
    Ok(seconds * 1000 + i64::from(nanos / 1_000_000))
}

/// A delay (of a task, or before a retry): at most `limits.max_delay`.
pub fn delay(field: &str, delay: Option<Duration>, limits: &Limits) -> Result<Duration> {
    let delay = delay.unwrap_or(Duration::ZERO);
    if delay > limits.max_delay {
        return Err(ValidationError::new(
            field,
            format!("is {delay:?}; the limit is {:?} (limits.max_delay)", limits.max_delay),
        ));
    }
    Ok(delay)
}

/// A failure message: at most 4096 bytes.
pub fn failure_message(field: &str, message: &str) -> Result<()> {
    if message.len() > MAX_FAILURE_MESSAGE_BYTES {
        return Err(ValidationError::new(
            field,
            format!("is {} bytes long; the limit is {MAX_FAILURE_MESSAGE_BYTES} bytes", message.len()),
        ));
    }
    Ok(())
}

/// The wait of a poll: unset means `default`; at most `limits.max_poll_wait`.
pub fn poll_wait(field: &str, wait: Option<Duration>, default: Duration, limits: &Limits) -> Result<Duration> {
    let wait = wait.unwrap_or(default.min(limits.max_poll_wait));
    if wait > limits.max_poll_wait {
        return Err(ValidationError::new(
            field,
            format!("is {:?}; the limit is {:?} (limits.max_poll_wait)", wait, limits.max_poll_wait),
        ));
    }
    Ok(wait)
}

/// The number of tasks of one AddTasks call: 1 to `limits.max_batch_tasks`.
pub fn batch_len(field: &str, len: usize, limits: &Limits) -> Result<()> {
    if len == 0 {
        return Err(ValidationError::new(field, "is empty; send at least one task"));
    }
    if len > limits.max_batch_tasks {
        return Err(ValidationError::new(
            field,
            format!("has {len} tasks; the limit is {} (limits.max_batch_tasks)", limits.max_batch_tasks),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names() {
        assert!(queue_name("queue", "visits.git").is_ok());
        assert!(queue_name("queue", "a").is_ok());
        assert!(queue_name("queue", &"a".repeat(128)).is_ok());
        for bad in ["", ".hidden", "-x", "with space", "ünïcode", &"a".repeat(129)] {
            let err = queue_name("queue", bad).unwrap_err();
            assert_eq!(err.field, "queue");
            assert!(err.message.contains("128"), "{err}");
        }
    }

    #[test]
    fn weights() {
        assert_eq!(fairness_weight("w", 0.0).unwrap(), None);
        assert_eq!(fairness_weight("w", 0.001).unwrap(), Some(0.001));
        assert_eq!(fairness_weight("w", 1000.0).unwrap(), Some(1000.0));
        for bad in [f64::NAN, f64::INFINITY, -1.0, 0.0009, 1000.5] {
            assert!(fairness_weight("w", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn connection_limits_are_bounded_and_name_their_key() {
        assert_eq!(Limits::default().validate(), Ok(()));
        let refused = |limits: Limits, key: &str, says: &str| {
            let err = limits.validate().unwrap_err();
            assert_eq!(err.field, key, "{err}");
            assert!(err.message.contains(says), "{err}");
        };
        refused(Limits { max_connections: 0, ..Limits::default() }, "limits.max_connections", "1 to 1000000");
        refused(Limits { max_connections: 1_000_001, ..Limits::default() }, "limits.max_connections", "1 to 1000000");
        refused(
            Limits { max_connections: 100, max_connections_per_address: 101, ..Limits::default() },
            "limits.max_connections_per_address",
            "is 101; it must be 1 to limits.max_connections (100)",
        );
        refused(
            Limits { max_connections_per_address: 0, ..Limits::default() },
            "limits.max_connections_per_address",
            "1 to limits.max_connections",
        );
        let d = Duration::from_secs;
        for (limits, key) in [
            (Limits { connection_idle_timeout: d(0), ..Limits::default() }, "limits.connection_idle_timeout"),
            (Limits { connection_idle_timeout: d(86_401), ..Limits::default() }, "limits.connection_idle_timeout"),
            (
                Limits { keepalive_interval: Duration::from_millis(999), ..Limits::default() },
                "limits.keepalive_interval",
            ),
            (Limits { keepalive_interval: d(3601), ..Limits::default() }, "limits.keepalive_interval"),
            (Limits { keepalive_timeout: d(0), ..Limits::default() }, "limits.keepalive_timeout"),
            (Limits { keepalive_timeout: d(601), ..Limits::default() }, "limits.keepalive_timeout"),
        ] {
            refused(limits, key, "it must be in [1s, ");
        }
        let smallest = Limits {
            max_connections: 1,
            max_connections_per_address: 1,
            connection_idle_timeout: d(1),
            keepalive_interval: d(1),
            keepalive_timeout: d(1),
            ..Limits::default()
        };
        assert_eq!(smallest.validate(), Ok(()));
    }

    #[test]
    fn deadlines_are_bounded_and_name_their_field() {
        assert_eq!(deadline("task.deadline", 1_700_000_000, 123_999_999).unwrap(), 1_700_000_000_123);
        assert_eq!(deadline("task.deadline", 0, 0).unwrap(), 0);
        assert_eq!(deadline("task.deadline", MAX_DEADLINE_UNIX_SECONDS, 999_999_999).unwrap(), 253_402_300_799_999);
        for (seconds, nanos) in
            [(-1, 0), (MAX_DEADLINE_UNIX_SECONDS + 1, 0), (i64::MAX, 0), (5, -1), (5, 1_000_000_000)]
        {
            assert_eq!(deadline("task.deadline", seconds, nanos).unwrap_err().field, "task.deadline");
        }
    }

    #[test]
    fn priorities() {
        assert_eq!(priority("p", 0).unwrap(), Priority::DEFAULT);
        assert_eq!(priority("p", 1).unwrap(), Priority::HIGHEST);
        assert!(priority("p", 6).is_err());
    }
}
