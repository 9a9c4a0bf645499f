//! Authentication and authorization over real gRPC with TLS on: every RPC of
//! both services refused without credentials; each role allowed exactly its
//! permission; a tenant-bound producer held to its fairness keys, its share,
//! its highest priority and its own dedup ids; API keys,
//! client certificates and JWTs mapped to their principals; a server beyond
//! loopback refusing to run open; `fairway auth key create` and `--token`.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use fairway::api::Rpc;
use fairway::config::Config;
use fairway::proto::v1 as pb;
use fairway::proto::v1::matching_client::MatchingClient;
use fairway::proto::v1::scheduler_client::SchedulerClient;
use fairway::proto::v1::schedules_client::SchedulesClient;
use fairway::security::{
    AuthChannel, BearerToken, Grant, Permission, PrincipalConfig, Role, api_key_hash, new_api_key,
};
use tonic::transport::{Channel, ClientTlsConfig};
use tonic::{Code, Status};

use crate::pki::{Authority, client_tls, write};
use crate::support::{TestServer, spec, wait};

/// The queues the roles are granted on; `other` is on none of them.
const QUEUE: &str = "jobs.a";
const LISTER: &str = "github";
const VISIT_TYPE: &str = "git";
const URL: &str = "https://github.com/fairway/fairway";

fn grant(role: Role, fairness_prefix: Option<&str>) -> Grant {
    Grant {
        role,
        queues: vec!["jobs.*".into(), "visits.*".into(), "lister:*".into()],
        fairness_prefix: fairness_prefix.map(str::to_owned),
        highest_priority: None,
    }
}

fn keyed(name: &str, key: &str, grants: Vec<Grant>) -> PrincipalConfig {
    PrincipalConfig {
        name: name.into(),
        api_key_sha256: vec![api_key_hash(key)],
        tls_common_name: None,
        jwt_subject: None,
        grants,
    }
}

/// A config serving TLS with `server`'s pair, written under `dir`.
fn tls_config(dir: &Path, ca: &Authority, principals: Vec<PrincipalConfig>) -> Config {
    let pair = ca.sign("server");
    let mut config = Config::default();
    config.security.tls_cert = write(dir, "server.crt", &pair.0).display().to_string();
    config.security.tls_key = write(dir, "server.key", &pair.1).display().to_string();
    config.security.principals = principals;
    config
}

/// Clients of both services over `tls`, sending `token`.
struct Clients {
    matching: MatchingClient<AuthChannel>,
    scheduler: SchedulerClient<AuthChannel>,
    schedules: SchedulesClient<AuthChannel>,
}

async fn clients(server: &TestServer, tls: ClientTlsConfig, token: Option<&str>) -> Clients {
    let channel = Channel::from_shared(format!("https://{}", server.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("connect over TLS");
    let channel = BearerToken::new(token).unwrap().on(channel);
    Clients {
        matching: MatchingClient::new(channel.clone()),
        scheduler: SchedulerClient::new(channel.clone()),
        schedules: SchedulesClient::new(channel),
    }
}

/// Makes `rpc` with a request that passes validation, on [`QUEUE`] (or the
/// lister, or the visit type), finishing the lease of `lease_token`.
async fn call(clients: &mut Clients, rpc: Rpc, lease_token: &str) -> Result<(), Status> {
    let (m, s, r) = (&mut clients.matching, &mut clients.scheduler, &mut clients.schedules);
    let queue = QUEUE.to_owned();
    let token = lease_token.to_owned();
    match rpc {
        Rpc::AddTask => m.add_task(pb::AddTaskRequest { queue, task: Some(spec("k", 1.0, 3, b"x")) }).await.map(drop),
        Rpc::AddTasks => {
            m.add_tasks(pb::AddTasksRequest { queue, tasks: vec![spec("k", 1.0, 3, b"x")] }).await.map(drop)
        }
        Rpc::PollTask => {
            let request =
                pb::PollTaskRequest { queue, worker_id: "w".into(), max_wait: wait(Duration::from_millis(10)) };
            m.poll_task(request).await.map(drop)
        }
        Rpc::PollTasks => {
            let max_wait = wait(Duration::from_millis(10));
            m.poll_tasks(pb::PollTasksRequest {
                queue,
                worker_id: "w".into(),
                max_wait,
                max_tasks: 1,
                completions: Vec::new(),
            })
            .await
            .map(drop)
        }
        Rpc::CompleteTask => {
            m.complete_task(pb::CompleteTaskRequest { lease_token: token, result: vec![] }).await.map(drop)
        }
        Rpc::FailTask => {
            let request = pb::FailTaskRequest { lease_token: token, retryable: true, ..Default::default() };
            m.fail_task(request).await.map(drop)
        }
        Rpc::HeartbeatTask => m.heartbeat_task(pb::HeartbeatTaskRequest { lease_token: token }).await.map(drop),
        Rpc::ListDeadLetters => {
            m.list_dead_letters(pb::ListDeadLettersRequest { queue, limit: 1, filter: None }).await.map(drop)
        }
        Rpc::RedriveDeadLetters => {
            m.redrive_dead_letters(pb::RedriveDeadLettersRequest { queue, limit: 1, filter: None }).await.map(drop)
        }
        Rpc::DescribeQueue => m.describe_queue(pb::DescribeQueueRequest { queue, top_keys: 1 }).await.map(drop),
        Rpc::CreateQueue => m
            .create_queue(pb::CreateQueueRequest { queue: "jobs.created".into(), partitions: 1, home: String::new() })
            .await
            .map(drop),
        Rpc::MoveQueue => m
            .move_queue(pb::MoveQueueRequest { queue, home: String::new(), force: false, abandon_previous: false })
            .await
            .map(drop),
        Rpc::ListQueues => m.list_queues(pb::ListQueuesRequest::default()).await.map(drop),
        Rpc::UpdateQueue => {
            let settings = pb::QueueSettings { max_attempts: Some(3), ..Default::default() };
            let request =
                pb::UpdateQueueRequest { queue, settings: Some(settings), clear: vec![], expected_version: 0 };
            m.update_queue(request).await.map(drop)
        }
        // Pauses one key no test task has: the others go on being dispatched.
        Rpc::PauseQueue => {
            m.pause_queue(pb::PauseQueueRequest { queue, fairness_key: Some("paused".into()) }).await.map(drop)
        }
        Rpc::ResumeQueue => {
            m.resume_queue(pb::ResumeQueueRequest { queue, fairness_key: Some("paused".into()) }).await.map(drop)
        }
        Rpc::GetTask => {
            let request = pb::GetTaskRequest { queue, partition: 0, task_id: 1, include_payload: false };
            m.get_task(request).await.map(drop)
        }
        // An id never used: NOT_FOUND for whom may cancel.
        Rpc::CancelTask => {
            m.cancel_task(pb::CancelTaskRequest { queue, partition: 0, task_id: 999_999 }).await.map(drop)
        }
        // Without a token: nothing is purged, a token comes back for whom may purge.
        Rpc::PurgeQueue => m.purge_queue(pb::PurgeQueueRequest { queue, confirmation: String::new() }).await.map(drop),
        Rpc::ListWorkers => m.list_workers(pb::ListWorkersRequest { queue }).await.map(drop),
        Rpc::ListNodes => m.list_nodes(pb::ListNodesRequest {}).await.map(drop),
        Rpc::RecordOrigins => {
            let origin = pb::ListedOrigin { url: URL.into(), visit_type: VISIT_TYPE.into(), ..Default::default() };
            s.record_origins(pb::RecordOriginsRequest { lister: LISTER.into(), origins: vec![origin] }).await.map(drop)
        }
        Rpc::FinishListing => s.finish_listing(pb::FinishListingRequest { lister: LISTER.into() }).await.map(drop),
        Rpc::RequestVisit => {
            s.request_visit(pb::RequestVisitRequest { url: URL.into(), visit_type: VISIT_TYPE.into() }).await.map(drop)
        }
        Rpc::GetVisitStats => s
            .get_visit_stats(pb::GetVisitStatsRequest { url: URL.into(), visit_type: VISIT_TYPE.into() })
            .await
            .map(drop),
        Rpc::GetListerMetrics => {
            s.get_lister_metrics(pb::GetListerMetricsRequest { lister: LISTER.into() }).await.map(drop)
        }
        Rpc::RunRound => s.run_round(pb::RunRoundRequest { visit_type: VISIT_TYPE.into() }).await.map(drop),
        Rpc::CreateSchedule => r.create_schedule(schedule("created")).await.map(drop),
        Rpc::UpdateSchedule => {
            let pb::CreateScheduleRequest { id, spec, template, .. } = schedule(KEPT);
            r.update_schedule(pb::UpdateScheduleRequest { id, spec, template }).await.map(drop)
        }
        Rpc::DeleteSchedule => r.delete_schedule(pb::DeleteScheduleRequest { id: DOOMED.into() }).await.map(drop),
        Rpc::PauseSchedule => {
            let request = pb::PauseScheduleRequest { id: KEPT.into(), paused: false, note: String::new() };
            r.pause_schedule(request).await.map(drop)
        }
        Rpc::TriggerSchedule => r.trigger_schedule(pb::TriggerScheduleRequest { id: KEPT.into() }).await.map(drop),
        Rpc::ListSchedules => r.list_schedules(pb::ListSchedulesRequest::default()).await.map(drop),
        Rpc::DescribeSchedule => r.describe_schedule(pb::DescribeScheduleRequest { id: KEPT.into() }).await.map(drop),
    }
}

/// The schedule every role's calls act on, and the one a delete removes
/// (created again before each role's turn).
const KEPT: &str = "kept";
const DOOMED: &str = "doomed";

/// A schedule of `id` whose runs go to [`QUEUE`].
fn schedule(id: &str) -> pb::CreateScheduleRequest {
    let period = prost_types::Duration { seconds: 3600, nanos: 0 };
    pb::CreateScheduleRequest {
        id: id.into(),
        spec: Some(pb::ScheduleSpec {
            cadence: Some(pb::schedule_spec::Cadence::Periodic(pb::PeriodicCadence {
                scheduling_period: Some(period),
                cooldown: None,
            })),
            ..Default::default()
        }),
        template: Some(pb::RunTemplate { queue: QUEUE.into(), ..Default::default() }),
        paused_note: "kept still by the test".into(),
    }
}

/// Creates the schedules [`call`] acts on, if they are missing.
async fn ensure_schedules(admin: &mut Clients) {
    for id in [KEPT, DOOMED] {
        match admin.schedules.create_schedule(schedule(id)).await {
            Ok(_) => {}
            Err(e) if e.code() == Code::AlreadyExists => {}
            Err(e) => panic!("creating schedule {id}: {e:?}"),
        }
    }
}

/// An admin adds a task to [`QUEUE`] and takes it: its lease token.
async fn leased_token(admin: &mut Clients) -> String {
    let added =
        admin.matching.add_task(pb::AddTaskRequest { queue: QUEUE.into(), task: Some(spec("k", 1.0, 3, b"x")) });
    added.await.expect("the admin adds");
    let request =
        pb::PollTaskRequest { queue: QUEUE.into(), worker_id: "admin".into(), max_wait: wait(Duration::from_secs(5)) };
    let task = admin.matching.poll_task(request).await.expect("the admin polls").into_inner().task.expect("a task");
    task.lease_token
}

#[tokio::test]
async fn every_rpc_needs_credentials_and_each_role_does_exactly_what_it_may() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::new("fairway test CA");
    let roles = [Role::Admin, Role::Producer, Role::Worker, Role::Reader];
    let keys: Vec<String> = roles.iter().map(|_| new_api_key()).collect();
    let principals = roles
        .iter()
        .zip(&keys)
        .map(|(role, key)| keyed(&format!("{role:?}").to_lowercase(), key, vec![grant(*role, None)]));
    let config = tls_config(dir.path(), &ca, principals.collect());
    let server = TestServer::start_tls(config, client_tls(&ca, None)).await;
    let mut admin = clients(&server, client_tls(&ca, None), Some(&keys[0])).await;
    admin
        .matching
        .create_queue(pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 1, home: String::new() })
        .await
        .unwrap();
    let token = leased_token(&mut admin).await;

    for credentials in [None, Some(new_api_key()), Some("not.a.jwt".to_owned()), Some(api_key_hash(&keys[0]))] {
        let mut stranger = clients(&server, client_tls(&ca, None), credentials.as_deref()).await;
        for rpc in Rpc::ALL {
            let error = call(&mut stranger, rpc, &token).await.expect_err("served without valid credentials");
            assert_eq!(error.code(), Code::Unauthenticated, "{rpc:?} with {credentials:?}: {error:?}");
        }
    }

    for (role, key) in roles.iter().zip(&keys) {
        ensure_schedules(&mut admin).await;
        let mut client = clients(&server, client_tls(&ca, None), Some(key)).await;
        for rpc in Rpc::ALL {
            let result = call(&mut client, rpc, &token).await;
            let denied = matches!(&result, Err(e) if e.code() == Code::PermissionDenied);
            assert_eq!(!denied, role.permits(rpc.permission()), "{role:?} {rpc:?}: {result:?}");
            if let (true, Err(error)) = (denied, &result) {
                let wanted = format!("lacks permission \"{}\"", rpc.permission());
                assert!(error.message().contains(&wanted), "{role:?} {rpc:?}: {}", error.message());
            }
        }
        // Nothing outside the grant's queues, whatever the role.
        let outside =
            client.matching.add_task(pb::AddTaskRequest { queue: "other".into(), task: Some(spec("k", 1.0, 3, b"x")) });
        assert_eq!(outside.await.unwrap_err().code(), Code::PermissionDenied, "{role:?} added outside its queues");
        let outside = client.matching.describe_queue(pb::DescribeQueueRequest { queue: "other".into(), top_keys: 0 });
        assert_eq!(outside.await.unwrap_err().code(), Code::PermissionDenied, "{role:?} read outside its queues");
    }
    assert!(Rpc::ALL.iter().any(|rpc| rpc.permission() == Permission::Admin));
    server.stop().await;
}

#[tokio::test]
async fn a_tenant_bound_producer_adds_under_its_own_keys_only() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::new("fairway test CA");
    let (acme, admin_key) = (new_api_key(), new_api_key());
    let principals = vec![
        keyed("acme", &acme, vec![grant(Role::Producer, Some("acme/"))]),
        keyed("admin", &admin_key, vec![grant(Role::Admin, None)]),
    ];
    let server = TestServer::start_tls(tls_config(dir.path(), &ca, principals), client_tls(&ca, None)).await;
    let mut admin = clients(&server, client_tls(&ca, None), Some(&admin_key)).await;
    admin
        .matching
        .create_queue(pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 1, home: String::new() })
        .await
        .unwrap();
    let mut tenant = clients(&server, client_tls(&ca, None), Some(&acme)).await;

    let add = |key: &str| pb::AddTaskRequest { queue: QUEUE.into(), task: Some(spec(key, 0.0, 3, b"x")) };
    tenant.matching.add_task(add("acme/repo")).await.expect("its own key");
    let denied = tenant.matching.add_task(add("globex/repo")).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(denied.message().contains("acme/") && denied.message().contains("globex/repo"), "{}", denied.message());
    let batch = vec![spec("acme/one", 0.0, 3, b"x"), spec("globex/two", 0.0, 3, b"x"), spec("", 0.0, 3, b"x")];
    let results = tenant.matching.add_tasks(pb::AddTasksRequest { queue: QUEUE.into(), tasks: batch }).await.unwrap();
    let codes: Vec<Option<i32>> = results
        .into_inner()
        .results
        .into_iter()
        .map(|r| match r.outcome {
            Some(pb::add_task_result::Outcome::Error(e)) => Some(e.code),
            _ => None,
        })
        .collect();
    assert_eq!(codes, vec![None, Some(Code::PermissionDenied as i32), Some(Code::PermissionDenied as i32)]);

    let max_wait = wait(Duration::from_secs(1));
    let polled = admin.matching.poll_tasks(pb::PollTasksRequest {
        queue: QUEUE.into(),
        worker_id: "admin".into(),
        max_wait,
        max_tasks: 10,
        completions: Vec::new(),
    });
    let mut keys: Vec<String> = polled.await.unwrap().into_inner().tasks.into_iter().map(|t| t.fairness_key).collect();
    keys.sort();
    assert_eq!(keys, vec!["acme/one", "acme/repo"], "only the tenant's own keys hold tasks");
    server.stop().await;
}

/// Two tenants bound to prefixes `a/` and `b/` share a queue: whatever
/// tenant `a` tries (a higher priority, a weight of its own, many keys), the
/// first 200 tasks dispatched of 200 each are half `b`'s; their dedup ids
/// are their own.
#[tokio::test]
async fn tenants_keep_their_share_whatever_they_try() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::new("fairway test CA");
    let (a_key, b_key, admin_key) = (new_api_key(), new_api_key(), new_api_key());
    let principals = vec![
        keyed("tenant-a", &a_key, vec![grant(Role::Producer, Some("a/"))]),
        keyed("tenant-b", &b_key, vec![grant(Role::Producer, Some("b/"))]),
        keyed("admin", &admin_key, vec![grant(Role::Admin, None)]),
    ];
    let server = TestServer::start_tls(tls_config(dir.path(), &ca, principals), client_tls(&ca, None)).await;
    let mut admin = clients(&server, client_tls(&ca, None), Some(&admin_key)).await;
    let create = pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 1, home: String::new() };
    admin.matching.create_queue(create).await.unwrap();
    let mut a = clients(&server, client_tls(&ca, None), Some(&a_key)).await;
    let mut b = clients(&server, client_tls(&ca, None), Some(&b_key)).await;
    let add = |task: pb::TaskSpec| pb::AddTaskRequest { queue: QUEUE.into(), task: Some(task) };

    // Tricks past the grant are refused, naming the field and the bound.
    let refused = a.matching.add_task(add(spec("a/1", 0.0, 1, b"a"))).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert!(refused.message().contains("task.priority 1 is above the highest this grant allows, 3"), "{refused:?}");
    let refused = a.matching.add_task(add(spec("a/1", 1000.0, 3, b"a"))).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert!(refused.message().contains("task.fairness_weight"), "{refused:?}");

    // Many keys buy no more than one: the tenant's keys share its share.
    let tasks = 200;
    let batch = |tenant: &str, key: &dyn Fn(usize) -> String| pb::AddTasksRequest {
        queue: QUEUE.into(),
        tasks: (0..tasks).map(|i| spec(&key(i), 0.0, 3, tenant.as_bytes())).collect(),
    };
    let b_batch = batch("b", &|_| "b/1".to_owned());
    let a_batch = batch("a", &|i| format!("a/{i}"));
    for (client, request) in [(&mut b, b_batch), (&mut a, a_batch)] {
        let results = client.matching.add_tasks(request).await.unwrap().into_inner().results;
        assert!(results.iter().all(|r| matches!(r.outcome, Some(pb::add_task_result::Outcome::Added(_)))));
    }
    let mut b_first = 0;
    let mut taken = 0;
    while taken < tasks {
        let request = pb::PollTasksRequest {
            queue: QUEUE.into(),
            worker_id: "w".into(),
            max_wait: wait(Duration::from_secs(5)),
            max_tasks: (tasks - taken).min(32) as u32,
            completions: Vec::new(),
        };
        let polled = admin.matching.poll_tasks(request).await.unwrap().into_inner().tasks;
        assert!(!polled.is_empty(), "the backlog ran dry after {taken}");
        taken += polled.len();
        b_first += polled.iter().filter(|t| t.payload == b"b").count();
    }
    assert!((98..=102).contains(&b_first), "b got {b_first} of the first {tasks}, a the rest");

    // One tenant's dedup id is not the other's.
    let with_dedup = |key: &str| pb::TaskSpec { dedup_id: "invoice-42".into(), ..spec(key, 0.0, 3, b"d") };
    let first = a.matching.add_task(add(with_dedup("a/1"))).await.unwrap().into_inner();
    let second = b.matching.add_task(add(with_dedup("b/1"))).await.unwrap().into_inner();
    assert!(!second.duplicate && second.task_id != first.task_id, "{first:?} {second:?}");
    let again = b.matching.add_task(add(with_dedup("b/1"))).await.unwrap().into_inner();
    assert!(again.duplicate && again.task_id == second.task_id, "b's own dedup id still holds: {again:?}");
    server.stop().await;
}

#[tokio::test]
async fn client_certificates_map_to_principals_by_common_name() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::new("fairway test CA");
    let admin_key = new_api_key();
    let mut loader = keyed("loader", "unused", vec![grant(Role::Worker, None)]);
    loader.api_key_sha256.clear();
    loader.tls_common_name = Some("loader-1".into());
    let mut config =
        tls_config(dir.path(), &ca, vec![loader, keyed("admin", &admin_key, vec![grant(Role::Admin, None)])]);
    config.security.tls_client_ca = write(dir.path(), "clients.crt", &ca.pem()).display().to_string();
    let any_client = ca.sign("any");
    let server = TestServer::start_tls(config, client_tls(&ca, Some(&any_client))).await;
    let mut admin = clients(&server, client_tls(&ca, Some(&any_client)), Some(&admin_key)).await;
    let token = leased_token(&mut {
        admin
            .matching
            .create_queue(pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 1, home: String::new() })
            .await
            .unwrap();
        admin
    })
    .await;

    let mut loader = clients(&server, client_tls(&ca, Some(&ca.sign("loader-1"))), None).await;
    call(&mut loader, Rpc::HeartbeatTask, &token).await.expect("the loader's certificate makes it a worker");
    assert_eq!(call(&mut loader, Rpc::AddTask, &token).await.unwrap_err().code(), Code::PermissionDenied);
    let mut stranger = clients(&server, client_tls(&ca, Some(&ca.sign("stranger"))), None).await;
    let refused = call(&mut stranger, Rpc::HeartbeatTask, &token).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    assert!(refused.message().contains("stranger"), "{}", refused.message());
    server.stop().await;
}

/// An ES256 key pair as a JWKS file and a signer.
struct JwtIssuer {
    key: rcgen::KeyPair,
    kid: String,
}

impl JwtIssuer {
    fn new(kid: &str) -> JwtIssuer {
        JwtIssuer { key: rcgen::KeyPair::generate().unwrap(), kid: kid.into() }
    }

    fn jwks(&self) -> String {
        let point = self.key.public_key_raw();
        assert_eq!((point.len(), point[0]), (65, 4), "an uncompressed P-256 point");
        let (x, y) = (URL_SAFE_NO_PAD.encode(&point[1..33]), URL_SAFE_NO_PAD.encode(&point[33..]));
        format!(
            r#"{{"keys": [{{"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": "{}", "x": "{x}", "y": "{y}"}}]}}"#,
            self.kid
        )
    }

    fn token(&self, subject: &str, audience: &str, expires_in: i64) -> String {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
        let claims =
            serde_json::json!({"sub": subject, "iss": "https://issuer.test", "aud": audience, "exp": now + expires_in});
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        let key = jsonwebtoken::EncodingKey::from_ec_der(&self.key.serialize_der());
        jsonwebtoken::encode(&header, &claims, &key).unwrap()
    }
}

#[tokio::test]
async fn jwts_signed_by_the_jwks_for_this_audience_and_not_expired_authenticate_their_subject() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::new("fairway test CA");
    let (issuer, impostor) = (JwtIssuer::new("k1"), JwtIssuer::new("k1"));
    let mut ci = keyed("ci", "unused", vec![grant(Role::Producer, None)]);
    ci.api_key_sha256.clear();
    ci.jwt_subject = Some("ci-bot".into());
    let mut config = tls_config(dir.path(), &ca, vec![ci]);
    config.security.jwt_jwks = write(dir.path(), "jwks.json", &issuer.jwks()).display().to_string();
    config.security.jwt_issuer = "https://issuer.test".into();
    config.security.jwt_audience = "fairway".into();
    let server = TestServer::start_tls(config, client_tls(&ca, None)).await;

    let add = |token: String| {
        let server = &server;
        let ca = &ca;
        async move {
            let mut client = clients(server, client_tls(ca, None), Some(&token)).await;
            call(&mut client, Rpc::AddTask, "").await
        }
    };
    add(issuer.token("ci-bot", "fairway", 300)).await.expect("a valid token");
    for (what, token) in [
        ("expired", issuer.token("ci-bot", "fairway", -3600)),
        ("another audience", issuer.token("ci-bot", "elsewhere", 300)),
        ("another subject", issuer.token("someone", "fairway", 300)),
        ("another key, same kid", impostor.token("ci-bot", "fairway", 300)),
    ] {
        let refused = add(token).await.expect_err(what);
        assert_eq!(refused.code(), Code::Unauthenticated, "{what}: {refused:?}");
    }
    // The same claims, signed with HMAC over the public key's bytes.
    let valid = issuer.token("ci-bot", "fairway", 300);
    let claims = valid.split('.').nth(1).unwrap();
    let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT","kid":"k1"}"#);
    let forged = format!("{header}.{claims}.{}", URL_SAFE_NO_PAD.encode([0u8; 32]));
    assert_eq!(add(forged).await.unwrap_err().code(), Code::Unauthenticated, "an algorithm the key is not for");
    server.stop().await;
}

/// Beyond loopback, no TLS or no principals: the server refuses to start,
/// naming the setting; `security.allow_insecure` lets it run, loudly.
#[test]
fn a_server_beyond_loopback_does_not_run_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().join("data").display());
    let refused = crate::support::fairway_command()
        .args(["serve", "--listen", "0.0.0.0:0", "--store", &store])
        .output()
        .expect("run fairway serve");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("without TLS and authentication") && stderr.contains("security.allow_insecure"),
        "{stderr}"
    );

    let open = crate::support::ServerProcess::start_listening(
        &store,
        &[("FAIRWAY_SECURITY__ALLOW_INSECURE", "true")],
        "0.0.0.0:0",
    );
    let log = open.terminate();
    assert!(log.contains("SERVING WITHOUT TLS AND AUTHENTICATION"), "{log}");
}

/// `fairway auth key create` prints a key and the principal to configure;
/// the CLI sends it with `--token` (or `FAIRWAY_TOKEN`); without it the
/// server refuses; admin actions are logged with their principal.
#[tokio::test]
async fn a_key_made_by_the_cli_authenticates_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let created = crate::support::fairway_command()
        .args(["auth", "key", "create", "--name", "ops team", "--role", "admin", "--queues", "jobs.*"])
        .output()
        .expect("run fairway auth key create");
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let printed = String::from_utf8(created.stdout).unwrap();
    let key = printed.lines().find(|l| l.starts_with("fwk_")).expect("the key").to_owned();
    let config = printed.split_once("[[security.principals]]").map(|(_, rest)| rest).expect("the principal");
    assert!(!config.contains(&key), "the config holds only the hash");
    let config_path = write(dir.path(), "fairway.toml", &format!("[[security.principals]]{config}"));
    let store = format!("embedded:{}", dir.path().join("data").display());
    let server =
        crate::support::ServerProcess::start_on(&store, &[("FAIRWAY_CONFIG", &config_path.display().to_string())]);
    let url = format!("http://{}", server.addr);
    let cli = |args: &[&str], token: Option<&str>| {
        let mut command = crate::support::fairway_command();
        command.args(args).args(["--server", &url]);
        if let Some(token) = token {
            command.env("FAIRWAY_TOKEN", token);
        }
        command.output().expect("run the CLI")
    };
    let create = ["queue", "create", "--queue", "jobs.cli"];
    let anonymous = cli(&create, None);
    assert!(!anonymous.status.success());
    assert!(String::from_utf8_lossy(&anonymous.stderr).contains("Unauthenticated"));
    let with_key = cli(&create, Some(&key));
    assert!(with_key.status.success(), "{}", String::from_utf8_lossy(&with_key.stderr));
    let outside = cli(&["queue", "create", "--queue", "other"], Some(&key));
    assert!(String::from_utf8_lossy(&outside.stderr).contains("PermissionDenied"), "{outside:?}");
    let log = server.terminate();
    let audit: Vec<&str> = log.lines().filter(|l| l.contains("admin action")).collect();
    assert!(
        audit.iter().any(|l| l.contains("ops team") && l.contains("jobs.cli") && l.contains("allowed=true")),
        "{log}"
    );
    assert!(
        audit.iter().any(|l| l.contains("ops team") && l.contains("other") && l.contains("allowed=false")),
        "{log}"
    );
}

/// With `matcher.max_queues_per_principal` = 2, a producer that created two
/// queues by adding to them is refused a third (`RESOURCE_EXHAUSTED` naming
/// the key and the bound; nothing created), still adds to its own queues,
/// and another producer, or an admin's CreateQueue, still creates.
#[tokio::test]
async fn one_principal_at_its_queue_bound_leaves_others_free_to_create() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::new("fairway test CA");
    let (a_key, b_key, admin_key) = (new_api_key(), new_api_key(), new_api_key());
    let principals = vec![
        keyed("tenant-a", &a_key, vec![grant(Role::Producer, None)]),
        keyed("tenant-b", &b_key, vec![grant(Role::Producer, None)]),
        keyed("admin", &admin_key, vec![grant(Role::Admin, None)]),
    ];
    let mut config = tls_config(dir.path(), &ca, principals);
    config.matcher.max_queues_per_principal = 2;
    let server = TestServer::start_tls(config, client_tls(&ca, None)).await;
    let mut a = clients(&server, client_tls(&ca, None), Some(&a_key)).await;
    let mut b = clients(&server, client_tls(&ca, None), Some(&b_key)).await;
    let mut admin = clients(&server, client_tls(&ca, None), Some(&admin_key)).await;
    let add = |queue: &str| pb::AddTaskRequest { queue: queue.into(), task: Some(spec("k", 0.0, 3, b"x")) };

    a.matching.add_task(add("jobs.a1")).await.expect("the first queue of tenant-a");
    a.matching.add_task(add("jobs.a2")).await.expect("the second");
    let refused = a.matching.add_task(add("jobs.a3")).await.expect_err("a third, past the bound");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains("matcher.max_queues_per_principal (2)"), "{refused:?}");
    let describe = |queue: &str| pb::DescribeQueueRequest { queue: queue.into(), top_keys: 0 };
    let absent = admin.matching.describe_queue(describe("jobs.a3")).await.expect_err("nothing was created");
    assert_eq!(absent.code(), Code::NotFound, "{absent:?}");
    a.matching.add_task(add("jobs.a1")).await.expect("its own queues still take adds");

    b.matching.add_task(add("jobs.b1")).await.expect("another principal still creates");
    b.matching.add_task(add("jobs.b2")).await.expect("up to its own bound");
    let create = pb::CreateQueueRequest { queue: "jobs.made".into(), partitions: 1, home: String::new() };
    admin.matching.create_queue(create).await.expect("CreateQueue is bounded by the global limits only");
    let refused = b.matching.add_task(add("jobs.b3")).await.expect_err("tenant-b at its bound too");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    server.stop().await;
}

/// A TLS server with a queue, and clients of its admin, a reader, and a
/// worker of the `acme/` keys who may also read: who may see which payloads.
struct PayloadRoles {
    server: TestServer,
    admin: Clients,
    reader: Clients,
    acme: Clients,
    _dir: tempfile::TempDir,
}

impl PayloadRoles {
    async fn start() -> PayloadRoles {
        let dir = tempfile::tempdir().unwrap();
        let ca = Authority::new("fairway test CA");
        let (admin_key, reader_key, acme_key) = (new_api_key(), new_api_key(), new_api_key());
        let principals = vec![
            keyed("admin", &admin_key, vec![grant(Role::Admin, None)]),
            keyed("reader", &reader_key, vec![grant(Role::Reader, None)]),
            keyed("acme-worker", &acme_key, vec![grant(Role::Worker, Some("acme/")), grant(Role::Reader, None)]),
        ];
        let server = TestServer::start_tls(tls_config(dir.path(), &ca, principals), client_tls(&ca, None)).await;
        let mut admin = clients(&server, client_tls(&ca, None), Some(&admin_key)).await;
        let create = pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 1, home: String::new() };
        admin.matching.create_queue(create).await.unwrap();
        let reader = clients(&server, client_tls(&ca, None), Some(&reader_key)).await;
        let acme = clients(&server, client_tls(&ca, None), Some(&acme_key)).await;
        PayloadRoles { server, admin, reader, acme, _dir: dir }
    }
}

#[tokio::test]
async fn get_task_shows_a_payload_only_to_whom_may_work_the_task() {
    let PayloadRoles { server, mut admin, mut reader, mut acme, _dir } = PayloadRoles::start().await;
    let add = pb::AddTaskRequest { queue: QUEUE.into(), task: Some(spec("globex/repo", 0.0, 3, b"secret")) };
    let added = admin.matching.add_task(add).await.unwrap().into_inner();
    let request = |include_payload| pb::GetTaskRequest {
        queue: QUEUE.into(),
        partition: added.partition,
        task_id: added.task_id,
        include_payload,
    };

    let seen = reader.matching.get_task(request(false)).await.expect("a reader sees the task").into_inner();
    assert_eq!((seen.fairness_key.as_str(), seen.payload.len(), seen.payload_bytes), ("globex/repo", 0, 6));
    let denied = reader.matching.get_task(request(true)).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(denied.message().contains("include_payload"), "{}", denied.message());

    // A worker bound to another tenant's keys does not see this one's payload.
    let denied = acme.matching.get_task(request(true)).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");

    let shown = admin.matching.get_task(request(true)).await.unwrap().into_inner();
    assert_eq!(shown.payload, b"secret");
    server.stop().await;
}

#[tokio::test]
async fn dead_letters_show_a_payload_only_to_whom_may_work_its_key() {
    let PayloadRoles { server, mut admin, mut reader, mut acme, _dir } = PayloadRoles::start().await;
    for key in ["globex/repo", "acme/repo"] {
        let add = pb::AddTaskRequest { queue: QUEUE.into(), task: Some(spec(key, 0.0, 0, b"secret")) };
        admin.matching.add_task(add).await.unwrap();
        let poll = pb::PollTaskRequest {
            queue: QUEUE.into(),
            worker_id: "admin".into(),
            max_wait: Some(prost_types::Duration { seconds: 10, nanos: 0 }),
        };
        let task = admin.matching.poll_task(poll).await.unwrap().into_inner().task.expect("the task is ready");
        let fail = pb::FailTaskRequest {
            lease_token: task.lease_token,
            retryable: false,
            message: "gone".into(),
            retry_after: None,
        };
        admin.matching.fail_task(fail).await.unwrap();
    }
    let list = || pb::ListDeadLettersRequest { queue: QUEUE.into(), limit: 10, filter: None };
    let shown = |mut letters: Vec<pb::DeadLetter>| {
        letters.sort_by(|a, b| a.fairness_key.cmp(&b.fairness_key));
        letters.into_iter().map(|d| (d.fairness_key, d.payload, d.payload_bytes)).collect::<Vec<_>>()
    };
    let secret = || b"secret".to_vec();

    let letters = admin.matching.list_dead_letters(list()).await.unwrap().into_inner().dead_letters;
    assert_eq!(shown(letters), [("acme/repo".into(), secret(), 6), ("globex/repo".into(), secret(), 6)]);
    let letters = reader.matching.list_dead_letters(list()).await.unwrap().into_inner().dead_letters;
    assert_eq!(shown(letters), [("acme/repo".into(), vec![], 6), ("globex/repo".into(), vec![], 6)]);
    let letters = acme.matching.list_dead_letters(list()).await.unwrap().into_inner().dead_letters;
    assert_eq!(shown(letters), [("acme/repo".into(), secret(), 6), ("globex/repo".into(), vec![], 6)]);
    server.stop().await;
}
