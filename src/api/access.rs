//! The one gate every RPC of both services passes: [`Gate`] says who the
//! caller is before the request is decoded, and [`authorize`] whether it
//! may do what the RPC does on the resource it names, from the table of
//! [`Rpc::permission`]. Admin actions are logged with their caller (target
//! `fairway::audit`), allowed or not.
//!
//! Invariant: a request reaches a handler only with a [`Caller`] in its
//! extensions; routing metadata is honoured only with a node's fresh proof
//! for that RPC, and only on the RPCs nodes forward; a handler acts only
//! after [`authorize`] said yes.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use tonic::metadata::MetadataMap;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use super::{ConnInfo, status};
use crate::clock::SharedClock;
use crate::clock::{Clock, SystemClock};
use crate::cluster::{FORWARDED, FORWARDED_PARTITION};
use crate::model::TaskSpec;
use crate::security::{Authenticator, Caller, ClusterKeys, Grant, NODE_PROOF, NodeCall, Permission};

/// Every RPC of `fairway.v1.Matching` and `fairway.v1.Scheduler`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Rpc {
    AddTask,
    AddTasks,
    PollTask,
    PollTasks,
    CompleteTask,
    FailTask,
    HeartbeatTask,
    ListDeadLetters,
    RedriveDeadLetters,
    DescribeQueue,
    CreateQueue,
    MoveQueue,
    ListQueues,
    UpdateQueue,
    PauseQueue,
    ResumeQueue,
    GetTask,
    CancelTask,
    PurgeQueue,
    ListWorkers,
    ListNodes,
    RecordOrigins,
    FinishListing,
    RequestVisit,
    GetVisitStats,
    GetListerMetrics,
    RunRound,
    CreateSchedule,
    UpdateSchedule,
    DeleteSchedule,
    PauseSchedule,
    TriggerSchedule,
    ListSchedules,
    DescribeSchedule,
}

impl Rpc {
    /// Every RPC, for tests that go through them all.
    pub const ALL: [Rpc; 34] = [
        Rpc::AddTask,
        Rpc::AddTasks,
        Rpc::PollTask,
        Rpc::PollTasks,
        Rpc::CompleteTask,
        Rpc::FailTask,
        Rpc::HeartbeatTask,
        Rpc::ListDeadLetters,
        Rpc::RedriveDeadLetters,
        Rpc::DescribeQueue,
        Rpc::CreateQueue,
        Rpc::MoveQueue,
        Rpc::ListQueues,
        Rpc::UpdateQueue,
        Rpc::PauseQueue,
        Rpc::ResumeQueue,
        Rpc::GetTask,
        Rpc::CancelTask,
        Rpc::PurgeQueue,
        Rpc::ListWorkers,
        Rpc::ListNodes,
        Rpc::RecordOrigins,
        Rpc::FinishListing,
        Rpc::RequestVisit,
        Rpc::GetVisitStats,
        Rpc::GetListerMetrics,
        Rpc::RunRound,
        Rpc::CreateSchedule,
        Rpc::UpdateSchedule,
        Rpc::DeleteSchedule,
        Rpc::PauseSchedule,
        Rpc::TriggerSchedule,
        Rpc::ListSchedules,
        Rpc::DescribeSchedule,
    ];

    /// The RPC's name, as its proto spells it.
    pub fn name(self) -> &'static str {
        match self {
            Rpc::AddTask => "AddTask",
            Rpc::AddTasks => "AddTasks",
            Rpc::PollTask => "PollTask",
            Rpc::PollTasks => "PollTasks",
            Rpc::CompleteTask => "CompleteTask",
            Rpc::FailTask => "FailTask",
            Rpc::HeartbeatTask => "HeartbeatTask",
            Rpc::ListDeadLetters => "ListDeadLetters",
            Rpc::RedriveDeadLetters => "RedriveDeadLetters",
            Rpc::DescribeQueue => "DescribeQueue",
            Rpc::CreateQueue => "CreateQueue",
            Rpc::MoveQueue => "MoveQueue",
            Rpc::ListQueues => "ListQueues",
            Rpc::UpdateQueue => "UpdateQueue",
            Rpc::PauseQueue => "PauseQueue",
            Rpc::ResumeQueue => "ResumeQueue",
            Rpc::GetTask => "GetTask",
            Rpc::CancelTask => "CancelTask",
            Rpc::PurgeQueue => "PurgeQueue",
            Rpc::ListWorkers => "ListWorkers",
            Rpc::ListNodes => "ListNodes",
            Rpc::RecordOrigins => "RecordOrigins",
            Rpc::FinishListing => "FinishListing",
            Rpc::RequestVisit => "RequestVisit",
            Rpc::GetVisitStats => "GetVisitStats",
            Rpc::GetListerMetrics => "GetListerMetrics",
            Rpc::RunRound => "RunRound",
            Rpc::CreateSchedule => "CreateSchedule",
            Rpc::UpdateSchedule => "UpdateSchedule",
            Rpc::DeleteSchedule => "DeleteSchedule",
            Rpc::PauseSchedule => "PauseSchedule",
            Rpc::TriggerSchedule => "TriggerSchedule",
            Rpc::ListSchedules => "ListSchedules",
            Rpc::DescribeSchedule => "DescribeSchedule",
        }
    }

    /// Whether a node forwards this RPC to the owner of a partition: the
    /// only RPCs a node's proof lets in.
    pub fn forwarded_between_nodes(self) -> bool {
        matches!(
            self,
            Rpc::AddTask
                | Rpc::PollTask
                | Rpc::PollTasks
                | Rpc::CompleteTask
                | Rpc::FailTask
                | Rpc::HeartbeatTask
                | Rpc::RedriveDeadLetters
                | Rpc::GetTask
                | Rpc::CancelTask
                | Rpc::PurgeQueue
                | Rpc::ListWorkers
                | Rpc::ListNodes
        )
    }

    /// What the RPC needs on the resource it names (a queue: the queue of
    /// the request or of its lease token, `visits.<type>` for visits, the
    /// queue its runs go to for a schedule; `lister:<name>` for a lister's
    /// records and counts).
    pub fn permission(self) -> Permission {
        match self {
            Rpc::AddTask | Rpc::AddTasks | Rpc::RecordOrigins | Rpc::FinishListing | Rpc::RequestVisit => {
                Permission::Add
            }
            Rpc::PollTask | Rpc::PollTasks | Rpc::CompleteTask | Rpc::FailTask | Rpc::HeartbeatTask => Permission::Work,
            Rpc::ListDeadLetters
            | Rpc::DescribeQueue
            | Rpc::ListQueues
            | Rpc::GetTask
            | Rpc::ListWorkers
            | Rpc::ListNodes
            | Rpc::GetVisitStats
            | Rpc::GetListerMetrics
            | Rpc::ListSchedules
            | Rpc::DescribeSchedule => Permission::Read,
            Rpc::RedriveDeadLetters
            | Rpc::CancelTask
            | Rpc::PurgeQueue
            | Rpc::CreateQueue
            | Rpc::MoveQueue
            | Rpc::UpdateQueue
            | Rpc::PauseQueue
            | Rpc::ResumeQueue
            | Rpc::RunRound
            | Rpc::CreateSchedule
            | Rpc::UpdateSchedule
            | Rpc::DeleteSchedule
            | Rpc::PauseSchedule
            | Rpc::TriggerSchedule => Permission::Admin,
        }
    }
}

/// The resource of a lister's requests.
pub fn lister_resource(lister: &str) -> String {
    format!("lister:{lister}")
}

/// Says who calls: a node (routing metadata with its proof), anyone (no
/// principal configured), or the principal its credentials name; puts the
/// [`Caller`] in the request's extensions. Runs before the request's body
/// is decoded.
#[derive(Clone, Debug)]
pub struct Gate {
    authenticator: Option<Arc<Authenticator>>,
    keys: ClusterKeys,
    clock: SharedClock,
}

impl Gate {
    /// A gate checking node proofs with `keys` and, when there is an
    /// `authenticator`, credentials, with JWT expiry read from `clock`.
    pub fn new(authenticator: Option<Arc<Authenticator>>, keys: ClusterKeys, clock: SharedClock) -> Gate {
        Gate { authenticator, keys, clock }
    }

    fn caller(&self, metadata: &MetadataMap, connection: Option<&ConnInfo>) -> Result<Caller, Status> {
        if let Some(call) = self.node(metadata)? {
            return Ok(Caller::Node(call));
        }
        let Some(authenticator) = &self.authenticator else { return Ok(Caller::Anyone) };
        let bearer = match metadata.get("authorization") {
            None => None,
            Some(value) => Some(bearer(value.to_str().ok()).ok_or_else(status::not_bearer)?),
        };
        let certificate = connection.and_then(|c| c.client_certificates.as_ref()).and_then(|chain| chain.first());
        let now = UNIX_EPOCH + Duration::from_millis(self.clock.now_ms().max(0) as u64);
        let principal = authenticator.authenticate(bearer, certificate, now).map_err(status::unauthenticated)?;
        Ok(Caller::Principal(principal))
    }

    /// `Some` for a request a node forwarded (with the RPC its proof is for
    /// and the partition it names, if any); routing metadata without a valid,
    /// fresh proof is refused (`PERMISSION_DENIED`), so that a client cannot
    /// skip the dedup check of a partition, or the recording of a visit, by
    /// naming a partition. Proofs are dated by the wall clock of both nodes.
    fn node(&self, metadata: &MetadataMap) -> Result<Option<NodeCall>, Status> {
        let partition = metadata.get(FORWARDED_PARTITION);
        if partition.is_none() && !metadata.contains_key(FORWARDED) {
            return Ok(None);
        }
        let subject = partition.map_or(Some(""), |p| p.to_str().ok()).unwrap_or("?");
        let proof = metadata.get(NODE_PROOF).and_then(|p| p.to_str().ok()).unwrap_or("");
        let now_secs = SystemClock.now_ms().div_euclid(1000);
        let Some(rpc) = self.keys.node_proof_rpc(subject, proof, now_secs) else {
            return Err(status::no_node_proof());
        };
        let partition = match partition {
            None => None,
            Some(_) => Some(subject.parse().map_err(|_| status::bad_forwarded_partition())?),
        };
        Ok(Some(NodeCall { rpc: rpc.to_owned(), partition }))
    }
}

/// The token of an `authorization` value `Bearer <token>`.
fn bearer(value: Option<&str>) -> Option<&str> {
    let value = value?;
    let (scheme, token) = value.split_once(' ')?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
}

impl Interceptor for Gate {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let caller = self.caller(request.metadata(), request.extensions().get::<ConnInfo>())?;
        request.extensions_mut().insert(caller);
        Ok(request)
    }
}

/// The caller [`Gate`] found for `request`; a request that did not pass
/// the gate is refused.
pub fn caller<T>(request: &Request<T>) -> Result<Caller, Status> {
    request.extensions().get::<Caller>().cloned().ok_or_else(status::not_gated)
}

/// Whether `caller` may make `rpc` on `resource` (for an add, with the
/// task's `fairness_key`): `PERMISSION_DENIED` naming what is missing, if
/// not. Admin RPCs are logged, allowed or not.
pub fn authorize(caller: &Caller, rpc: Rpc, resource: &str, fairness_key: Option<&str>) -> Result<(), Status> {
    authorize_bound(caller, rpc, resource, fairness_key).map(drop)
}

/// Whether `caller` may make `rpc` on `resource`, quietly: for filtering
/// what a listing shows (nothing is logged, nothing refused).
pub fn allowed(caller: &Caller, rpc: Rpc, resource: &str) -> bool {
    !matches!(caller, Caller::Node(_)) && caller.binding_grant(rpc.permission(), resource, None).is_ok()
}

/// [`authorize`] for an add of `spec` to `queue`: when only a tenant-bound
/// grant allows it, the task must keep to that grant's bounds
/// (`PERMISSION_DENIED` naming the field and the bound), and the grant is
/// returned, for the dedup id to be scoped to it.
pub fn authorize_add<'c>(
    caller: &'c Caller,
    rpc: Rpc,
    queue: &str,
    spec: &TaskSpec,
) -> Result<Option<&'c Grant>, Status> {
    let grant = authorize_bound(caller, rpc, queue, Some(&spec.fairness_key))?;
    if let Some(grant) = grant {
        grant.check_bounds(spec).map_err(|bound| status::out_of_bounds(caller.name(), bound))?;
    }
    Ok(grant)
}

fn authorize_bound<'c>(
    caller: &'c Caller,
    rpc: Rpc,
    resource: &str,
    fairness_key: Option<&str>,
) -> Result<Option<&'c Grant>, Status> {
    if let Caller::Node(call) = caller
        && (call.rpc != rpc.name() || !rpc.forwarded_between_nodes())
    {
        return Err(status::node_proof_not_for(&call.rpc, rpc.name()));
    }
    let permission = rpc.permission();
    let decision = caller.binding_grant(permission, resource, fairness_key);
    if permission == Permission::Admin {
        tracing::info!(
            target: "fairway::audit",
            caller = caller.name(),
            rpc = ?rpc,
            resource,
            allowed = decision.is_ok(),
            "admin action"
        );
    }
    decision.map_err(status::denied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::NODE_PROOF_VALIDITY_SECS;

    #[test]
    fn only_a_bearer_scheme_carries_a_token() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(Some("Bearerabc")), None);
        assert_eq!(bearer(None), None);
    }

    #[test]
    fn forwarded_metadata_needs_a_fresh_node_proof_for_its_rpc() {
        let keys = ClusterKeys::random();
        let gate = Gate::new(None, keys.clone(), Arc::new(crate::clock::SystemClock));
        let now = SystemClock.now_ms() / 1000;
        let mut metadata = MetadataMap::new();
        assert!(matches!(gate.caller(&metadata, None), Ok(Caller::Anyone)));
        metadata.insert(FORWARDED_PARTITION, "3".parse().unwrap());
        assert_eq!(gate.caller(&metadata, None).unwrap_err().code(), tonic::Code::PermissionDenied);
        metadata.insert(NODE_PROOF, keys.node_proof("AddTask", "4", now).parse().unwrap());
        assert_eq!(gate.caller(&metadata, None).unwrap_err().code(), tonic::Code::PermissionDenied, "another subject");
        let stale = keys.node_proof("AddTask", "3", now - NODE_PROOF_VALIDITY_SECS - 5);
        metadata.insert(NODE_PROOF, stale.parse().unwrap());
        assert_eq!(gate.caller(&metadata, None).unwrap_err().code(), tonic::Code::PermissionDenied, "stale");
        metadata.insert(NODE_PROOF, keys.node_proof("AddTask", "3", now).parse().unwrap());
        let caller = gate.caller(&metadata, None).unwrap();
        let Caller::Node(call) = &caller else { panic!("{caller:?}") };
        assert_eq!((call.rpc.as_str(), call.partition), ("AddTask", Some(3)));
        assert!(authorize(&caller, Rpc::AddTask, "q", Some("k")).is_ok());
        assert_eq!(authorize(&caller, Rpc::PollTask, "q", None).unwrap_err().code(), tonic::Code::PermissionDenied);
    }

    #[test]
    fn a_node_proof_never_lets_in_what_nodes_do_not_forward() {
        for rpc in Rpc::ALL {
            let caller = Caller::Node(NodeCall { rpc: rpc.name().into(), partition: None });
            assert_eq!(authorize(&caller, rpc, "q", None).is_ok(), rpc.forwarded_between_nodes(), "{rpc:?}");
        }
        for rpc in [Rpc::CreateQueue, Rpc::MoveQueue, Rpc::RunRound, Rpc::RecordOrigins, Rpc::DescribeQueue] {
            assert!(!rpc.forwarded_between_nodes(), "{rpc:?}");
        }
    }
}
