//! Who may do what: principals, the roles granted to them on patterns of
//! queue names, and the one check every request passes.
//!
//! Invariant: a request is allowed only when a grant of its caller covers
//! the permission it needs on the resource it names and, for an add, its
//! fairness key starts with that grant's `fairness_prefix`. An add allowed
//! only by such a tenant-bound grant is held to it: a priority no higher
//! than the grant's `highest_priority`, no weight of its own (the tenant's
//! keys share the weight the operator gives its prefix), and a dedup id
//! scoped to the prefix. Resources are queue names; a lister's requests to
//! the scheduler name `lister:<name>`.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::validate::MAX_DEDUP_ID_BYTES;
use crate::model::{Priority, TaskSpec, ValidationError, pattern};

/// What a request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Permission {
    /// Add tasks; record origins and ask for visits.
    Add,
    /// Poll tasks and finish or extend the leases of tasks polled.
    Work,
    /// Describe queues, list dead letters, read the scheduler's counts.
    Read,
    /// Create queues, redrive dead letters, run scheduler rounds.
    Admin,
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Permission::Add => "add",
            Permission::Work => "work",
            Permission::Read => "read",
            Permission::Admin => "admin",
        })
    }
}

/// A set of permissions, granted by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Every permission.
    Admin,
    /// [`Permission::Add`].
    Producer,
    /// [`Permission::Work`].
    Worker,
    /// [`Permission::Read`].
    Reader,
}

impl Role {
    /// Whether the role carries `permission`.
    pub fn permits(self, permission: Permission) -> bool {
        match self {
            Role::Admin => true,
            Role::Producer => permission == Permission::Add,
            Role::Worker => permission == Permission::Work,
            Role::Reader => permission == Permission::Read,
        }
    }
}

/// A role on the resources `queues` names (see [`pattern`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// The role granted.
    pub role: Role,
    /// Names or prefixes (`visits.*`) of the queues, or `lister:<name>`
    /// patterns of listers, it is granted on.
    pub queues: Vec<String>,
    /// When set, adds under this grant must carry a fairness key that
    /// starts with it: a tenant adds under its own keys only, and they share
    /// one fair share (the prefix's) on the queues of this grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness_prefix: Option<String>,
    /// With a `fairness_prefix`: the highest priority (the smallest number,
    /// 1 to 5) adds under this grant may carry; 3, the default priority,
    /// unless set, so that a tenant cannot pass the others by priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_priority: Option<u32>,
}

impl Grant {
    /// Checks the grant; errors name `field`.
    pub fn validate(&self, field: &str) -> Result<(), ValidationError> {
        if self.queues.is_empty() {
            return Err(ValidationError::new(format!("{field}.queues"), "is empty; it grants nothing"));
        }
        for (i, queues) in self.queues.iter().enumerate() {
            pattern::check(&format!("{field}.queues[{i}]"), queues)?;
        }
        if self.fairness_prefix.is_some() && self.role != Role::Producer {
            return Err(ValidationError::new(
                format!("{field}.fairness_prefix"),
                "binds the fairness keys of adds: it is for role \"producer\" only",
            ));
        }
        if self.fairness_prefix.as_deref() == Some("") {
            return Err(ValidationError::new(format!("{field}.fairness_prefix"), "is empty; it would bind nothing"));
        }
        if let Some(highest) = self.highest_priority {
            if self.fairness_prefix.is_none() {
                return Err(ValidationError::new(
                    format!("{field}.highest_priority"),
                    "bounds the adds of a tenant: it goes with a fairness_prefix",
                ));
            }
            if Priority::new(highest).is_none() {
                return Err(ValidationError::new(
                    format!("{field}.highest_priority"),
                    format!("is {highest}; it must be 1 (highest) to 5"),
                ));
            }
        }
        Ok(())
    }

    /// The highest priority an add under this tenant-bound grant may carry.
    fn highest_priority(&self) -> Priority {
        self.highest_priority.and_then(Priority::new).unwrap_or(Priority::DEFAULT)
    }

    /// Holds `spec`, allowed by this grant alone, to the grant: its priority
    /// at most the grant's highest, no weight of its own. `Err` says which
    /// field and which bound.
    pub fn check_bounds(&self, spec: &TaskSpec) -> Result<(), String> {
        let highest = self.highest_priority();
        if spec.priority < highest {
            return Err(format!(
                "task.priority {} is above the highest this grant allows, {highest} (its highest_priority)",
                spec.priority
            ));
        }
        if spec.fairness_weight.is_some() {
            return Err(
                "task.fairness_weight: a tenant's keys share the weight the operator gives its prefix; a task \
                 cannot set one"
                    .into(),
            );
        }
        Ok(())
    }

    /// Scopes `spec`'s dedup id, if any, to this grant's prefix, so that
    /// tenants never see or stop each other's tasks by dedup id. `Err` (about
    /// the dedup id) when the scoped id is too long.
    pub fn scope_dedup_id(&self, spec: &mut TaskSpec) -> Result<(), String> {
        let (Some(prefix), Some(id)) = (&self.fairness_prefix, &spec.dedup_id) else { return Ok(()) };
        let scoped = format!("{prefix}{id}");
        if scoped.len() > MAX_DEDUP_ID_BYTES {
            return Err(format!(
                "is {} bytes long with the tenant prefix {prefix:?}; the limit is {MAX_DEDUP_ID_BYTES} bytes",
                scoped.len()
            ));
        }
        spec.dedup_id = Some(scoped);
        Ok(())
    }

    fn covers(&self, permission: Permission, resource: &str) -> bool {
        self.role.permits(permission) && self.queues.iter().any(|p| pattern::matches(p, resource))
    }
}

/// Someone the server knows, with what they were granted.
#[derive(Clone, Debug, PartialEq)]
pub struct Principal {
    /// The name that logs and errors give.
    pub name: String,
    /// What the principal may do.
    pub grants: Vec<Grant>,
}

/// Who sent a request.
#[derive(Clone, Debug)]
pub enum Caller {
    /// Anyone: authentication is off (no principal is configured).
    Anyone,
    /// A Fairway node of this cluster, forwarding a request it was sent.
    /// The node that received it checked its caller.
    Node(NodeCall),
    /// An authenticated principal.
    Principal(Arc<Principal>),
}

impl Caller {
    /// The principal's name, if an authenticated principal calls.
    pub fn principal_name(&self) -> Option<&str> {
        match self {
            Caller::Principal(principal) => Some(&principal.name),
            Caller::Anyone | Caller::Node(_) => None,
        }
    }
}

/// What a node's proof vouches for: one RPC, about one partition or the
/// receiver's partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCall {
    /// The name of the RPC the proof is for (e.g. `AddTask`).
    pub rpc: String,
    /// The partition the request is for, if it names one.
    pub partition: Option<u32>,
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No grant covers the permission on the resource.
    #[error("{principal:?} lacks permission \"{permission}\" on {resource:?}")]
    Permission {
        /// Who asked.
        principal: String,
        /// What was missing.
        permission: Permission,
        /// On what.
        resource: String,
    },
    /// Grants cover the resource, none the fairness key.
    #[error("{principal:?} may add to {resource:?} only under fairness keys starting with {prefixes:?}, not {key:?}")]
    FairnessKey {
        /// Who asked.
        principal: String,
        /// The queue added to.
        resource: String,
        /// The task's fairness key.
        key: String,
        /// The prefixes the grants allow.
        prefixes: Vec<String>,
    },
}

impl Caller {
    /// The name logs give the caller.
    pub fn name(&self) -> &str {
        match self {
            Caller::Anyone => "anyone",
            Caller::Node(_) => "node",
            Caller::Principal(principal) => &principal.name,
        }
    }

    /// Whether the caller may do what needs `permission` on `resource`; for
    /// an add, `fairness_key` is the key of the task.
    pub fn may(&self, permission: Permission, resource: &str, fairness_key: Option<&str>) -> Result<(), Denied> {
        self.binding_grant(permission, resource, fairness_key).map(drop)
    }

    /// Whether the caller holds `permission` on some resource (anyone does
    /// when authentication is off; a node never does on its own).
    pub fn holds_anywhere(&self, permission: Permission) -> bool {
        match self {
            Caller::Anyone => true,
            Caller::Node(_) => false,
            Caller::Principal(principal) => principal.grants.iter().any(|g| g.role.permits(permission)),
        }
    }

    /// Like [`Self::may`]; when only a tenant-bound grant allows the add, that
    /// grant, which the add is then held to ([`Grant::check_bounds`],
    /// [`Grant::scope_dedup_id`]).
    pub fn binding_grant(
        &self,
        permission: Permission,
        resource: &str,
        fairness_key: Option<&str>,
    ) -> Result<Option<&Grant>, Denied> {
        let principal = match self {
            // A node's calls are bound to their RPC where they are let in.
            Caller::Anyone | Caller::Node(_) => return Ok(None),
            Caller::Principal(principal) => principal,
        };
        let covering: Vec<&Grant> = principal.grants.iter().filter(|g| g.covers(permission, resource)).collect();
        if covering.is_empty() {
            return Err(Denied::Permission {
                principal: principal.name.clone(),
                permission,
                resource: resource.into(),
            });
        }
        let Some(key) = fairness_key else { return Ok(None) };
        if covering.iter().any(|g| g.fairness_prefix.is_none()) {
            return Ok(None);
        }
        let bound = covering.iter().find(|g| g.fairness_prefix.as_deref().is_some_and(|p| key.starts_with(p)));
        match bound {
            Some(grant) => Ok(Some(grant)),
            None => Err(Denied::FairnessKey {
                principal: principal.name.clone(),
                resource: resource.into(),
                key: key.into(),
                prefixes: covering.iter().filter_map(|g| g.fairness_prefix.clone()).collect(),
            }),
        }
    }
}

/// The fairness prefixes of the tenant-bound `grants` that cover adds to
/// `queue`: the groups of keys that share one fair share there.
pub fn tenant_prefixes<'g>(grants: impl IntoIterator<Item = &'g Grant>, queue: &str) -> Vec<String> {
    let mut prefixes: Vec<String> = grants
        .into_iter()
        .filter(|g| g.covers(Permission::Add, queue))
        .filter_map(|g| g.fairness_prefix.clone())
        .collect();
    prefixes.sort();
    prefixes.dedup();
    prefixes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(grants: Vec<Grant>) -> Caller {
        Caller::Principal(Arc::new(Principal { name: "p".into(), grants }))
    }

    fn grant(role: Role, queues: &[&str], fairness_prefix: Option<&str>) -> Grant {
        Grant {
            role,
            queues: queues.iter().map(|q| q.to_string()).collect(),
            fairness_prefix: fairness_prefix.map(str::to_owned),
            highest_priority: None,
        }
    }

    #[test]
    fn each_role_carries_its_permission_on_its_queues_only() {
        let all = [Permission::Add, Permission::Work, Permission::Read, Permission::Admin];
        for (role, allowed) in [
            (Role::Admin, &all[..]),
            (Role::Producer, &[Permission::Add][..]),
            (Role::Worker, &[Permission::Work][..]),
            (Role::Reader, &[Permission::Read][..]),
        ] {
            let caller = principal(vec![grant(role, &["jobs.*"], None)]);
            for permission in all {
                assert_eq!(caller.may(permission, "jobs.a", None).is_ok(), allowed.contains(&permission));
                let denied = caller.may(permission, "other", None).unwrap_err();
                assert!(matches!(denied, Denied::Permission { .. }), "{denied}");
            }
        }
        assert!(Caller::Anyone.may(Permission::Admin, "x", None).is_ok());
        let node = Caller::Node(NodeCall { rpc: "AddTask".into(), partition: None });
        assert!(node.may(Permission::Add, "x", None).is_ok());
    }

    #[test]
    fn a_tenant_bound_producer_adds_under_its_prefix_only() {
        let caller = principal(vec![
            grant(Role::Producer, &["shared"], Some("acme/")),
            grant(Role::Producer, &["shared"], Some("acme-labs/")),
            grant(Role::Producer, &["own"], None),
        ]);
        assert!(caller.may(Permission::Add, "shared", Some("acme/repo")).is_ok());
        assert!(caller.may(Permission::Add, "shared", Some("acme-labs/x")).is_ok());
        let denied = caller.may(Permission::Add, "shared", Some("globex/repo")).unwrap_err();
        assert_eq!(
            denied.to_string(),
            "\"p\" may add to \"shared\" only under fairness keys starting with [\"acme/\", \"acme-labs/\"], not \"globex/repo\""
        );
        assert!(caller.may(Permission::Add, "shared", Some("")).is_err(), "the empty key is no tenant's");
        assert!(caller.may(Permission::Add, "own", Some("globex/repo")).is_ok());
    }

    #[test]
    fn grants_are_checked() {
        assert!(grant(Role::Producer, &["a", "b.*"], Some("t/")).validate("g").is_ok());
        assert_eq!(grant(Role::Producer, &[], None).validate("g").unwrap_err().field, "g.queues");
        assert_eq!(grant(Role::Worker, &["a*b"], None).validate("g").unwrap_err().field, "g.queues[0]");
        assert_eq!(grant(Role::Worker, &["a"], Some("t/")).validate("g").unwrap_err().field, "g.fairness_prefix");
        assert_eq!(grant(Role::Producer, &["a"], Some("")).validate("g").unwrap_err().field, "g.fairness_prefix");
        let highest = |prefix: Option<&str>, value| Grant {
            highest_priority: Some(value),
            ..grant(Role::Producer, &["a"], prefix)
        };
        assert!(highest(Some("t/"), 1).validate("g").is_ok());
        assert_eq!(highest(Some("t/"), 0).validate("g").unwrap_err().field, "g.highest_priority");
        assert_eq!(highest(Some("t/"), 6).validate("g").unwrap_err().field, "g.highest_priority");
        assert_eq!(highest(None, 2).validate("g").unwrap_err().field, "g.highest_priority");
    }

    #[test]
    fn a_tenants_adds_are_held_to_its_grant() {
        let tenant = grant(Role::Producer, &["shared"], Some("a/"));
        let caller = principal(vec![tenant.clone(), grant(Role::Producer, &["own"], None)]);
        assert_eq!(caller.binding_grant(Permission::Add, "shared", Some("a/1")).unwrap(), Some(&tenant));
        assert_eq!(caller.binding_grant(Permission::Add, "own", Some("a/1")).unwrap(), None, "an unbound grant");
        let spec = |priority: u32, weight: Option<f64>, dedup: Option<&str>| TaskSpec {
            fairness_weight: weight,
            dedup_id: dedup.map(str::to_owned),
            ..TaskSpec::new("a/1", Priority::new(priority).unwrap(), Vec::new())
        };
        assert!(tenant.check_bounds(&spec(3, None, None)).is_ok());
        assert!(tenant.check_bounds(&spec(5, None, None)).is_ok());
        let above = tenant.check_bounds(&spec(2, None, None)).unwrap_err();
        assert!(above.starts_with("task.priority 2 is above the highest this grant allows, 3"), "{above}");
        assert!(tenant.check_bounds(&spec(3, Some(1000.0), None)).unwrap_err().starts_with("task.fairness_weight"));
        let urgent = Grant { highest_priority: Some(1), ..tenant.clone() };
        assert!(urgent.check_bounds(&spec(1, None, None)).is_ok());

        let mut scoped = spec(3, None, Some("invoice-42"));
        tenant.scope_dedup_id(&mut scoped).unwrap();
        assert_eq!(scoped.dedup_id.as_deref(), Some("a/invoice-42"));
        let mut long = spec(3, None, Some(&"x".repeat(MAX_DEDUP_ID_BYTES)));
        assert!(tenant.scope_dedup_id(&mut long).unwrap_err().starts_with("is 514 bytes long"));
    }

    #[test]
    fn the_tenants_of_a_queue_are_the_prefixes_granted_on_it() {
        let grants = [
            grant(Role::Producer, &["shared", "jobs.*"], Some("a/")),
            grant(Role::Producer, &["shared"], Some("b/")),
            grant(Role::Producer, &["shared"], Some("b/")),
            grant(Role::Admin, &["*"], None),
        ];
        assert_eq!(tenant_prefixes(&grants, "shared"), ["a/", "b/"]);
        assert_eq!(tenant_prefixes(&grants, "jobs.x"), ["a/"]);
        assert!(tenant_prefixes(&grants, "other").is_empty());
    }
}
