//! Who may do what: principals, the roles granted to them on patterns of
//! queue names, and the one check every request passes.
//!
//! Invariant: a request is allowed only when a grant of its caller covers
//! the permission it needs on the resource it names and, for an add, its
//! fairness key starts with that grant's `fairness_prefix`. Resources are
//! queue names; a lister's requests to the scheduler name `lister:<name>`.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::{ValidationError, pattern};

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
    /// starts with it: a tenant adds under its own keys only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness_prefix: Option<String>,
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
    /// A Fairway node of this cluster, forwarding a request it was sent
    /// (for the partition named, or for the receiver's partitions). The
    /// node that received it checked its caller.
    Node(Option<u32>),
    /// An authenticated principal.
    Principal(Arc<Principal>),
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
        let principal = match self {
            Caller::Anyone | Caller::Node(_) => return Ok(()),
            Caller::Principal(principal) => principal,
        };
        let mut covering = principal.grants.iter().filter(|g| g.covers(permission, resource)).peekable();
        if covering.peek().is_none() {
            return Err(Denied::Permission {
                principal: principal.name.clone(),
                permission,
                resource: resource.into(),
            });
        }
        let Some(key) = fairness_key else { return Ok(()) };
        let mut prefixes = Vec::new();
        for grant in covering {
            match &grant.fairness_prefix {
                None => return Ok(()),
                Some(prefix) if key.starts_with(prefix.as_str()) => return Ok(()),
                Some(prefix) => prefixes.push(prefix.clone()),
            }
        }
        Err(Denied::FairnessKey {
            principal: principal.name.clone(),
            resource: resource.into(),
            key: key.into(),
            prefixes,
        })
    }
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
        assert!(Caller::Node(None).may(Permission::Admin, "x", None).is_ok());
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
    }
}
