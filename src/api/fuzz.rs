//! Fuzzing what a hostile client controls: request bytes through the
//! decoder, every decoded field through its validation, lease tokens and
//! bearer credentials through their checks. Nothing may panic; whatever
//! validation accepts keeps the limits; no edit of a token or a key is
//! accepted. A unit of it runs with the suite (proptest's default cases);
//! a long run: `PROPTEST_CASES=1000000 cargo test --release --lib api::fuzz`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;
use prost::Message;

use super::access::Gate;
use super::{convert, scheduler};
use crate::clock::SystemClock;
use crate::matcher::LeaseToken;
use crate::model::{Limits, QueueName, TaskSpec, validate};
use crate::proto::v1 as pb;
use crate::security::{Authenticator, ClusterKeys, Grant, PrincipalConfig, Role, SecurityConfig, api_key_hash};
use crate::visits::origin_url;

/// Decodes `bytes` as `M` the way the server's codec does, and validates
/// what decoded with `check`.
fn decode_then<M: Message + Default>(bytes: &[u8], check: impl FnOnce(M)) {
    if let Ok(message) = M::decode(bytes) {
        check(message);
    }
}

fn checked_spec(field: &str, spec: Option<pb::TaskSpec>, limits: &Limits) {
    if let Ok(spec) = convert::task_spec(|| field.to_owned(), spec, limits) {
        assert_within(&spec, limits);
    }
}

/// What validation promises of a task it accepts.
fn assert_within(spec: &TaskSpec, limits: &Limits) {
    assert!(spec.fairness_key.len() <= 256);
    assert!(spec.payload.len() <= limits.max_payload_bytes);
    assert!(spec.fairness_weight.is_none_or(|w| w.is_finite() && w > 0.0));
    assert!(spec.delay <= limits.max_delay);
    assert!(spec.dedup_id.as_ref().is_none_or(|id| !id.is_empty() && id.len() <= validate::MAX_DEDUP_ID_BYTES));
    assert!(spec.deadline.is_none_or(|d| (0..=validate::MAX_DEADLINE_UNIX_SECONDS * 1000 + 999).contains(&d)));
    assert!((1..=validate::MAX_TASK_COST).contains(&spec.cost));
    assert!(spec.size.is_none_or(|size| (1..=validate::MAX_TASK_SIZE).contains(&size) && spec.cost == 1));
}

fn checked_wait(wait: Option<prost_types::Duration>, limits: &Limits) {
    if let Ok(wait) = convert::duration("max_wait", wait)
        && let Ok(wait) = validate::poll_wait("max_wait", wait, Duration::from_secs(30), limits)
    {
        assert!(wait <= limits.max_poll_wait);
    }
}

/// Every request message of both services, from the same bytes.
fn decode_every_request(bytes: &[u8], keys: &ClusterKeys) {
    let limits = Limits::default();
    let queue = |name: &str| validate::queue_name("queue", name).map(|q| assert!(q.as_str().len() <= 128));
    decode_then::<pb::AddTaskRequest>(bytes, |r| {
        let _ = queue(&r.queue);
        checked_spec("task", r.task, &limits);
    });
    decode_then::<pb::AddTasksRequest>(bytes, |r| {
        if validate::batch_len("tasks", r.tasks.len(), &limits).is_ok() {
            for spec in r.tasks {
                checked_spec("tasks[]", Some(spec), &limits);
            }
        }
    });
    decode_then::<pb::PollTaskRequest>(bytes, |r| {
        let _ = queue(&r.queue);
        checked_wait(r.max_wait, &limits);
    });
    decode_then::<pb::PollTasksRequest>(bytes, |r| checked_wait(r.max_wait, &limits));
    decode_then::<pb::CompleteTaskRequest>(bytes, |r| {
        let _ = LeaseToken::verify(&r.lease_token, keys, 0).map(|_| panic!("a token made of noise verified"));
        let _ = validate::payload("result", r.result.len(), &limits);
        let _ = scheduler::visit_outcome(&r.result, 0);
    });
    decode_then::<pb::FailTaskRequest>(bytes, |r| {
        let _ = validate::failure_message("message", &r.message);
        if let Ok(delay) = convert::duration("retry_after", r.retry_after) {
            let _ = validate::delay("retry_after", delay, &limits);
        }
    });
    decode_then::<pb::HeartbeatTaskRequest>(bytes, |r| assert!(LeaseToken::verify(&r.lease_token, keys, 0).is_err()));
    decode_then::<pb::CreateQueueRequest>(bytes, |r| {
        let _ = queue(&r.queue);
        if let Ok(partitions) = validate::partitions("partitions", r.partitions) {
            assert!((1..=256).contains(&partitions));
        }
    });
    decode_then::<pb::MoveQueueRequest>(bytes, |r| {
        let _ = queue(&r.queue);
        let _ = validate::region("home", &r.home);
    });
    decode_then::<pb::DescribeQueueRequest>(bytes, |r| drop(queue(&r.queue)));
    decode_then::<pb::RecordOriginsRequest>(bytes, |r| {
        for origin in r.origins {
            let _ = origin_url::check("url", &origin.url, &r.lister, &["https".into()], &BTreeMap::new());
        }
    });
    decode_then::<pb::RequestVisitRequest>(bytes, |r| {
        let _ = origin_url::check_syntax("url", &r.url, &["https".into(), "git".into()]);
    });
    decode_then::<pb::RunRoundRequest>(bytes, |r| drop(queue(&format!("visits.{}", r.visit_type))));
}

/// `wanted`, or the next visible ASCII byte if `wanted` is `current`: an edit
/// that changes the byte.
fn other_than(current: u8, wanted: u8) -> u8 {
    match (wanted == current, wanted) {
        (false, _) => wanted,
        (true, b'~') => b'!',
        (true, _) => wanted + 1,
    }
}

/// An authenticator with one API key and a JWKS of one EC key.
fn authenticator(dir: &std::path::Path, key: &str) -> Authenticator {
    let jwks = dir.join("jwks.json");
    std::fs::write(
        &jwks,
        r#"{"keys": [{"kty": "EC", "crv": "P-256", "alg": "ES256", "kid": "k1",
            "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#,
    )
    .unwrap();
    let config = SecurityConfig {
        principals: vec![PrincipalConfig {
            name: "p".into(),
            api_key_sha256: vec![api_key_hash(key)],
            tls_common_name: None,
            jwt_subject: Some("s".into()),
            grants: vec![Grant {
                role: Role::Admin,
                queues: vec!["*".into()],
                fairness_prefix: None,
                highest_priority: None,
            }],
        }],
        jwt_jwks: jwks.display().to_string(),
        jwt_issuer: "i".into(),
        jwt_audience: "a".into(),
        ..SecurityConfig::default()
    };
    Authenticator::new(&config).unwrap().unwrap()
}

proptest! {
    #[test]
    fn noise_decodes_and_validates_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_every_request(&bytes, &ClusterKeys::from_secret(&[3; 32]));
    }

    #[test]
    fn near_valid_task_specs_are_accepted_only_within_the_limits(
        key in ".{0,300}",
        weight in prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(-1.0), Just(0.0), 0.0f64..1e9],
        priority in 0u32..8,
        payload_len in prop_oneof![0usize..64, Just(1024 * 1024), Just(1024 * 1024 + 1)],
        dedup_id in ".{0,300}",
        delay_seconds in prop_oneof![Just(-1i64), 0i64..100, Just(i64::MAX)],
        nanos in prop_oneof![Just(-1i32), 0i32..1_000_000_000, Just(1_000_000_000)],
        deadline_seconds in prop_oneof![
            Just(i64::MIN), Just(-1i64), 0i64..2_000_000_000, Just(validate::MAX_DEADLINE_UNIX_SECONDS + 1), Just(i64::MAX)
        ],
        cost in prop_oneof![Just(0u32), 1u32..2000, Just(u32::MAX)],
        size in prop_oneof![Just(0u64), 1u64..2_000_000, Just(validate::MAX_TASK_SIZE + 1), Just(u64::MAX)],
    ) {
        let spec = pb::TaskSpec {
            fairness_key: key,
            fairness_weight: weight,
            priority,
            payload: vec![0; payload_len],
            dedup_id,
            delay: Some(prost_types::Duration { seconds: delay_seconds, nanos }),
            deadline: Some(prost_types::Timestamp { seconds: deadline_seconds, nanos }),
            cost,
            size,
        };
        let limits = Limits::default();
        match convert::task_spec(|| "task".into(), Some(spec), &limits) {
            Ok(spec) => assert_within(&spec, &limits),
            Err(error) => prop_assert!(error.field.starts_with("task."), "{error}"),
        }
    }

    #[test]
    fn no_edit_of_a_lease_token_verifies(
        partition in 0u32..256, lease_id in any::<i64>(), attempt in 1u32..100,
        at in any::<prop::sample::Index>(), byte in 0x21u8..0x7f,
    ) {
        let keys = ClusterKeys::from_secret(&[5; 32]);
        let token = LeaseToken { queue: QueueName::new_unchecked("jobs"), partition, lease_id, attempt };
        let text = token.sign(&keys, 0);
        prop_assert_eq!(LeaseToken::verify(&text, &keys, 0), Ok(token));
        let mut edited = text.clone().into_bytes();
        let i = at.index(edited.len());
        edited[i] = other_than(edited[i], byte);
        let edited = String::from_utf8_lossy(&edited).into_owned();
        prop_assert!(LeaseToken::verify(&edited, &keys, 0).is_err(), "{} verified", edited);
    }

    #[test]
    fn no_bearer_but_the_key_authenticates(token in ".{0,200}", at in any::<prop::sample::Index>(), byte in 0x21u8..0x7f) {
        let dir = tempfile::tempdir().unwrap();
        let key = "fwk_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let authenticator = authenticator(dir.path(), key);
        let now = SystemTime::now();
        prop_assert!(authenticator.authenticate(Some(&token), None, now).is_err());
        let mut edited = key.as_bytes().to_vec();
        let i = at.index(edited.len());
        edited[i] = other_than(edited[i], byte);
        let edited = String::from_utf8(edited).unwrap();
        prop_assert!(authenticator.authenticate(Some(&edited), None, now).is_err());
        prop_assert!(authenticator.authenticate(Some(key), None, now).is_ok());
        // The gate, on any authorization value.
        let mut gate = Gate::new(Some(Arc::new(authenticator)), ClusterKeys::random(), Arc::new(SystemClock));
        let mut request = tonic::Request::new(());
        if let Ok(value) = token.parse() {
            request.metadata_mut().insert("authorization", value);
            use tonic::service::Interceptor;
            prop_assert!(gate.call(request).is_err());
        }
    }
}
