//! Access control lists as Kafka's `StandardAuthorizer` keeps and judges them: the ACL entries
//! (resource type, name, pattern type, principal, host, operation, allow/deny) that the metadata
//! log carries, the filters CreateAcls / DescribeAcls / DeleteAcls use, and the decision
//! [`Authorizer::authorize`] makes for one principal, host, operation and resource.
//!
//! Kafka's rules, kept here word for word in behaviour:
//! - a super user (`super.users`) is allowed everything, deny ACLs included;
//! - an ACL applies to a resource when its type matches and its name is the resource's (LITERAL),
//!   `*` (LITERAL wildcard) or a prefix of it (PREFIXED); to a principal when it names it or
//!   `User:*`; to a host when it names the client's IP address or `*`;
//! - any applicable DENY for the operation (or for `All`) denies; else any applicable ALLOW for
//!   the operation (or `All`, or one that implies it: Read, Write, Delete and Alter imply Describe;
//!   AlterConfigs implies DescribeConfigs) allows; else, when no ACL at all applies to the
//!   resource (whatever its principal), `allow.everyone.if.no.acl.found` decides; else deny.
//!
//! **Invariant:** the ACL set is a set: adding an entry that exists changes nothing, as in Kafka.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The only name a CLUSTER resource may have (Kafka's `CLUSTER_NAME`).
pub const CLUSTER_RESOURCE_NAME: &str = "kafka-cluster";
/// A LITERAL resource name matching every resource of its type.
pub const WILDCARD_RESOURCE: &str = "*";
/// The principal matching every principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The host matching every host.
pub const WILDCARD_HOST: &str = "*";
/// The principal of a connection that did not authenticate (PLAINTEXT, SSL without a client
/// certificate).
pub const ANONYMOUS_PRINCIPAL: &str = "User:ANONYMOUS";

macro_rules! kafka_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $code:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name { $($variant),+ }

        impl $name {
            /// Kafka's code on the wire.
            pub fn code(self) -> i8 {
                match self { $($name::$variant => $code),+ }
            }

            /// The value for a wire code; `Unknown` for a code Kafka does not define.
            pub fn from_code(code: i8) -> Self {
                match code { $($code => $name::$variant,)+ _ => $name::Unknown }
            }
        }
    };
}

kafka_enum!(
    /// Kafka's `ResourceType`.
    ResourceType {
        Unknown = 0,
        Any = 1,
        Topic = 2,
        Group = 3,
        Cluster = 4,
        TransactionalId = 5,
        DelegationToken = 6,
        User = 7,
    }
);

kafka_enum!(
    /// Kafka's `PatternType`: `Match` and `Any` exist only in filters.
    PatternType {
        Unknown = 0,
        Any = 1,
        Match = 2,
        Literal = 3,
        Prefixed = 4,
    }
);

kafka_enum!(
    /// Kafka's `AclOperation`.
    AclOperation {
        Unknown = 0,
        Any = 1,
        All = 2,
        Read = 3,
        Write = 4,
        Create = 5,
        Delete = 6,
        Alter = 7,
        Describe = 8,
        ClusterAction = 9,
        DescribeConfigs = 10,
        AlterConfigs = 11,
        IdempotentWrite = 12,
        CreateTokens = 13,
        DescribeTokens = 14,
        TwoPhaseCommit = 15,
    }
);

kafka_enum!(
    /// Kafka's `AclPermissionType`.
    AclPermission {
        Unknown = 0,
        Any = 1,
        Deny = 2,
        Allow = 3,
    }
);

impl ResourceType {
    /// The operations an ACL on this resource type can grant, for `authorized_operations` fields
    /// (Kafka's `AclEntry.supportedOperations`).
    pub fn supported_operations(self) -> &'static [AclOperation] {
        use AclOperation::*;
        match self {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Describe,
                Delete,
                Alter,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
            ResourceType::Cluster => &[
                Create,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
                Alter,
                Describe,
            ],
            ResourceType::TransactionalId => &[Describe, Write, TwoPhaseCommit],
            ResourceType::DelegationToken => &[Describe],
            ResourceType::User => &[CreateTokens, DescribeTokens],
            ResourceType::Unknown | ResourceType::Any => &[],
        }
    }
}

/// One ACL entry: a resource pattern and an access control entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StandardAcl {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    /// `Type:name`, e.g. `User:alice` or `User:*`.
    pub principal: String,
    /// An IP address or `*`.
    pub host: String,
    pub operation: AclOperation,
    pub permission: AclPermission,
}

/// Why an ACL may not be created (Kafka answers INVALID_REQUEST with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidAcl(pub String);

impl StandardAcl {
    /// Kafka's checks on a new ACL (`AclControlManager.validateNewAcl`, and the broker's check of
    /// the CLUSTER resource's name).
    pub fn validate(&self) -> Result<(), InvalidAcl> {
        let invalid = |what: &str, value: &dyn std::fmt::Debug| {
            Err(InvalidAcl(format!(
                "Invalid {what} {}",
                format!("{value:?}").to_uppercase()
            )))
        };
        // The broker's checks come first, then the controller's.
        if self.resource_type == ResourceType::Cluster
            && self.resource_name != CLUSTER_RESOURCE_NAME
        {
            return Err(InvalidAcl(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_RESOURCE_NAME}"
            )));
        }
        if self.resource_name.is_empty() {
            return Err(InvalidAcl("Invalid empty resource name".into()));
        }
        if matches!(
            self.resource_type,
            ResourceType::Unknown | ResourceType::Any
        ) {
            return invalid("resourceType", &self.resource_type);
        }
        if !matches!(
            self.pattern_type,
            PatternType::Literal | PatternType::Prefixed
        ) {
            return invalid("patternType", &self.pattern_type);
        }
        if matches!(self.operation, AclOperation::Unknown | AclOperation::Any) {
            return invalid("operation", &self.operation);
        }
        if !matches!(self.permission, AclPermission::Allow | AclPermission::Deny) {
            return invalid("permissionType", &self.permission);
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => {
                return Err(InvalidAcl(format!(
                    "Could not parse principal from `{}` (no colon is present separating the principal type from the principal name)",
                    self.principal
                )))
            }
        }
        Ok(())
    }

    /// Whether this ACL's pattern covers the resource `name` of its type.
    fn covers(&self, name: &str) -> bool {
        match self.pattern_type {
            PatternType::Literal => {
                self.resource_name == name || self.resource_name == WILDCARD_RESOURCE
            }
            PatternType::Prefixed => name.starts_with(self.resource_name.as_str()),
            _ => false,
        }
    }

    /// Whether this ACL speaks for `principal` connecting from `host`.
    fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == WILDCARD_PRINCIPAL)
            && (self.host == WILDCARD_HOST || self.host == host)
    }
}

/// A filter over ACLs (DescribeAcls, DeleteAcls): `None` fields and the `Any` values match
/// everything; pattern type `Match` matches every pattern that covers the named resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub resource_name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: AclOperation,
    pub permission: AclPermission,
}

impl AclFilter {
    /// Kafka refuses a filter with an UNKNOWN element (`AclControlManager.validateFilter`).
    pub fn validate(&self) -> Result<(), InvalidAcl> {
        if self.resource_type == ResourceType::Unknown || self.pattern_type == PatternType::Unknown
        {
            return Err(InvalidAcl("Unknown patternFilter.".into()));
        }
        if self.operation == AclOperation::Unknown || self.permission == AclPermission::Unknown {
            return Err(InvalidAcl("Unknown entryFilter.".into()));
        }
        Ok(())
    }

    /// Kafka's `AclBindingFilter.matches`.
    pub fn matches(&self, acl: &StandardAcl) -> bool {
        self.matches_pattern(acl) && self.matches_entry(acl)
    }

    fn matches_pattern(&self, acl: &StandardAcl) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != acl.resource_type {
            return false;
        }
        if !matches!(self.pattern_type, PatternType::Any | PatternType::Match)
            && self.pattern_type != acl.pattern_type
        {
            return false;
        }
        let Some(name) = &self.resource_name else {
            return true;
        };
        if self.pattern_type == PatternType::Any || self.pattern_type == acl.pattern_type {
            return *name == acl.resource_name;
        }
        // Match: every pattern that would apply to the named resource.
        acl.covers(name)
    }

    fn matches_entry(&self, acl: &StandardAcl) -> bool {
        self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && (self.operation == AclOperation::Any || self.operation == acl.operation)
            && (self.permission == AclPermission::Any || self.permission == acl.permission)
    }
}

/// The ACLs in force: what the metadata log's ACL records add up to.
pub type AclSet = BTreeSet<StandardAcl>;

/// The authorizer's settings: `super.users` and `allow.everyone.if.no.acl.found`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authorizer {
    /// Principals (`User:name`) allowed everything.
    pub super_users: BTreeSet<String>,
    /// Allow a request on a resource no ACL applies to.
    pub allow_everyone_if_no_acl_found: bool,
}

impl Authorizer {
    /// From `super.users` (`User:a;User:b`) and `allow.everyone.if.no.acl.found`.
    pub fn new(super_users: &str, allow_everyone_if_no_acl_found: bool) -> Self {
        Self {
            super_users: super_users
                .split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            allow_everyone_if_no_acl_found,
        }
    }

    pub fn is_super_user(&self, principal: &str) -> bool {
        self.super_users.contains(principal)
    }

    /// Whether `principal` from `host` may perform `operation` on the resource (Kafka's
    /// `StandardAuthorizerData.authorize` for one LITERAL resource).
    pub fn authorize(
        &self,
        acls: &AclSet,
        principal: &str,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if self.is_super_user(principal) {
            return true;
        }
        let mut any_acl_for_resource = false;
        let mut allowed = false;
        for acl in acls
            .iter()
            .filter(|a| a.resource_type == resource_type && a.covers(name))
        {
            any_acl_for_resource = true;
            if !acl.applies_to(principal, host) {
                continue;
            }
            match acl.permission {
                AclPermission::Deny
                    if acl.operation == operation || acl.operation == AclOperation::All =>
                {
                    return false;
                }
                AclPermission::Allow if grants(acl.operation, operation) => allowed = true,
                _ => {}
            }
        }
        allowed || (!any_acl_for_resource && self.allow_everyone_if_no_acl_found)
    }

    /// Whether `principal` may perform `operation` on at least one resource of the type (Kafka's
    /// `Authorizer.authorizeByResourceType`: an idempotent producer needs Write on some topic).
    pub fn authorize_any(
        &self,
        acls: &AclSet,
        principal: &str,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        // Kafka first asks about a made-up name: super users and "no ACL found" pass there.
        if self.authorize(acls, principal, host, operation, resource_type, "hardcode") {
            return true;
        }
        let mut denied_literal = BTreeSet::new();
        let mut denied_prefixes = BTreeSet::new();
        let mut allowed = Vec::new();
        let mut wildcard_allowed = false;
        for acl in acls.iter().filter(|a| {
            a.resource_type == resource_type
                && a.applies_to(principal, host)
                && (a.operation == operation || a.operation == AclOperation::All)
        }) {
            match (acl.permission, acl.pattern_type) {
                (AclPermission::Deny, PatternType::Literal) => {
                    if acl.resource_name == WILDCARD_RESOURCE {
                        return false;
                    }
                    denied_literal.insert(acl.resource_name.as_str());
                }
                (AclPermission::Deny, PatternType::Prefixed) => {
                    denied_prefixes.insert(acl.resource_name.as_str());
                }
                (AclPermission::Allow, PatternType::Literal | PatternType::Prefixed) => {
                    if acl.pattern_type == PatternType::Literal
                        && acl.resource_name == WILDCARD_RESOURCE
                    {
                        // Decided after the loop: a wildcard deny further on still wins.
                        wildcard_allowed = true;
                    } else {
                        allowed.push(acl);
                    }
                }
                _ => {}
            }
        }
        if wildcard_allowed {
            return true;
        }
        allowed.into_iter().any(|acl| {
            let name = acl.resource_name.as_str();
            let literal_denied =
                acl.pattern_type == PatternType::Literal && denied_literal.contains(name);
            let prefix_denied = name
                .char_indices()
                .map(|(i, c)| &name[..i + c.len_utf8()])
                .any(|prefix| denied_prefixes.contains(prefix));
            !literal_denied && !prefix_denied
        })
    }

    /// Kafka's `authorized_operations` bit field for one resource: bit `code` set for each
    /// operation the resource type supports that the principal is allowed.
    pub fn authorized_operations(
        &self,
        acls: &AclSet,
        principal: &str,
        host: &str,
        resource_type: ResourceType,
        name: &str,
    ) -> i32 {
        resource_type
            .supported_operations()
            .iter()
            .filter(|op| self.authorize(acls, principal, host, **op, resource_type, name))
            .fold(0, |bits, op| bits | (1 << op.code()))
    }
}

/// Whether an ALLOW ACL for `granted` allows `wanted`.
fn grants(granted: AclOperation, wanted: AclOperation) -> bool {
    use AclOperation::*;
    granted == All
        || granted == wanted
        || (wanted == Describe && matches!(granted, Read | Write | Delete | Alter))
        || (wanted == DescribeConfigs && granted == AlterConfigs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        rt: ResourceType,
        name: &str,
        pt: PatternType,
        principal: &str,
        op: AclOperation,
        perm: AclPermission,
    ) -> StandardAcl {
        StandardAcl {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    fn topic_acl(
        name: &str,
        pt: PatternType,
        principal: &str,
        op: AclOperation,
        perm: AclPermission,
    ) -> StandardAcl {
        acl(ResourceType::Topic, name, pt, principal, op, perm)
    }

    const ALICE: &str = "User:alice";
    const HOST: &str = "127.0.0.1";

    fn allows(a: &Authorizer, acls: &AclSet, p: &str, op: AclOperation, topic: &str) -> bool {
        a.authorize(acls, p, HOST, op, ResourceType::Topic, topic)
    }

    #[test]
    fn no_acl_denies_unless_everyone_is_allowed_and_super_users_pass() {
        let acls = AclSet::new();
        let strict = Authorizer::new("User:admin; User:ops", false);
        assert!(!allows(&strict, &acls, ALICE, AclOperation::Read, "t"));
        assert!(allows(
            &strict,
            &acls,
            "User:admin",
            AclOperation::Read,
            "t"
        ));
        assert!(allows(&strict, &acls, "User:ops", AclOperation::Read, "t"));
        let open = Authorizer::new("", true);
        assert!(allows(&open, &acls, ALICE, AclOperation::Read, "t"));
        // An ACL for someone else on the resource ends "no ACL found".
        let mut acls = AclSet::new();
        acls.insert(topic_acl(
            "t",
            PatternType::Literal,
            "User:bob",
            AclOperation::Read,
            AclPermission::Allow,
        ));
        assert!(!allows(&open, &acls, ALICE, AclOperation::Read, "t"));
        assert!(allows(&open, &acls, ALICE, AclOperation::Read, "u"));
    }

    #[test]
    fn literal_wildcard_and_prefixed_patterns_and_implied_describe() {
        let a = Authorizer::default();
        let mut acls = AclSet::new();
        acls.insert(topic_acl(
            "t",
            PatternType::Literal,
            ALICE,
            AclOperation::Write,
            AclPermission::Allow,
        ));
        acls.insert(topic_acl(
            "pre-",
            PatternType::Prefixed,
            ALICE,
            AclOperation::Read,
            AclPermission::Allow,
        ));
        acls.insert(topic_acl(
            "*",
            PatternType::Literal,
            "User:*",
            AclOperation::AlterConfigs,
            AclPermission::Allow,
        ));
        assert!(allows(&a, &acls, ALICE, AclOperation::Write, "t"));
        assert!(allows(&a, &acls, ALICE, AclOperation::Describe, "t"));
        assert!(!allows(&a, &acls, ALICE, AclOperation::Read, "t"));
        assert!(!allows(&a, &acls, ALICE, AclOperation::Write, "t2"));
        assert!(allows(&a, &acls, ALICE, AclOperation::Read, "pre-x"));
        assert!(!allows(&a, &acls, ALICE, AclOperation::Read, "pre"));
        assert!(allows(
            &a,
            &acls,
            "User:bob",
            AclOperation::DescribeConfigs,
            "any"
        ));
        assert!(!allows(
            &a,
            &acls,
            "User:bob",
            AclOperation::Describe,
            "any"
        ));
    }

    #[test]
    fn deny_wins_only_for_its_operation_and_super_users_ignore_it() {
        let a = Authorizer::new("User:carol", false);
        let mut acls = AclSet::new();
        acls.insert(topic_acl(
            "t",
            PatternType::Literal,
            "User:*",
            AclOperation::All,
            AclPermission::Allow,
        ));
        acls.insert(topic_acl(
            "t",
            PatternType::Literal,
            ALICE,
            AclOperation::Read,
            AclPermission::Deny,
        ));
        acls.insert(topic_acl(
            "t",
            PatternType::Literal,
            "User:carol",
            AclOperation::All,
            AclPermission::Deny,
        ));
        assert!(!allows(&a, &acls, ALICE, AclOperation::Read, "t"));
        assert!(allows(&a, &acls, ALICE, AclOperation::Describe, "t"));
        assert!(allows(&a, &acls, "User:bob", AclOperation::Read, "t"));
        assert!(allows(&a, &acls, "User:carol", AclOperation::Read, "t"));
        let mut host = topic_acl(
            "t",
            PatternType::Literal,
            "User:bob",
            AclOperation::Write,
            AclPermission::Deny,
        );
        host.host = HOST.into();
        acls.insert(host);
        assert!(!allows(&a, &acls, "User:bob", AclOperation::Write, "t"));
        assert!(a.authorize(
            &acls,
            "User:bob",
            "10.0.0.1",
            AclOperation::Write,
            ResourceType::Topic,
            "t"
        ));
    }

    #[test]
    fn authorize_any_follows_kafkas_dominance_rules() {
        let a = Authorizer::default();
        let any = |acls: &AclSet| {
            a.authorize_any(acls, ALICE, HOST, AclOperation::Write, ResourceType::Topic)
        };
        let mut acls = AclSet::new();
        assert!(!any(&acls));
        acls.insert(topic_acl(
            "t",
            PatternType::Literal,
            ALICE,
            AclOperation::Write,
            AclPermission::Allow,
        ));
        assert!(any(&acls));
        acls.insert(topic_acl(
            "t",
            PatternType::Literal,
            ALICE,
            AclOperation::Write,
            AclPermission::Deny,
        ));
        assert!(!any(&acls));
        acls.insert(topic_acl(
            "abc",
            PatternType::Prefixed,
            ALICE,
            AclOperation::Write,
            AclPermission::Allow,
        ));
        assert!(any(&acls));
        acls.insert(topic_acl(
            "ab",
            PatternType::Prefixed,
            ALICE,
            AclOperation::All,
            AclPermission::Deny,
        ));
        assert!(!any(&acls));
        acls.insert(topic_acl(
            "*",
            PatternType::Literal,
            "User:*",
            AclOperation::Write,
            AclPermission::Allow,
        ));
        assert!(any(&acls));
        acls.insert(topic_acl(
            "*",
            PatternType::Literal,
            ALICE,
            AclOperation::Write,
            AclPermission::Deny,
        ));
        assert!(!any(&acls));
    }

    #[test]
    fn filters_match_as_kafkas() {
        let lit = topic_acl(
            "foo",
            PatternType::Literal,
            ALICE,
            AclOperation::Read,
            AclPermission::Allow,
        );
        let wild = topic_acl(
            "*",
            PatternType::Literal,
            ALICE,
            AclOperation::Read,
            AclPermission::Allow,
        );
        let pre = topic_acl(
            "fo",
            PatternType::Prefixed,
            ALICE,
            AclOperation::Read,
            AclPermission::Allow,
        );
        let filter = |pt: PatternType, name: Option<&str>| AclFilter {
            resource_type: ResourceType::Topic,
            resource_name: name.map(str::to_string),
            pattern_type: pt,
            principal: None,
            host: None,
            operation: AclOperation::Any,
            permission: AclPermission::Any,
        };
        let m = filter(PatternType::Match, Some("foo"));
        assert!(m.matches(&lit) && m.matches(&wild) && m.matches(&pre));
        let any = filter(PatternType::Any, Some("foo"));
        assert!(any.matches(&lit) && !any.matches(&wild) && !any.matches(&pre));
        let p = filter(PatternType::Prefixed, None);
        assert!(!p.matches(&lit) && p.matches(&pre));
        let all = filter(PatternType::Any, None);
        assert!(all.matches(&lit) && all.matches(&wild) && all.matches(&pre));
        let mut other = all.clone();
        other.principal = Some("User:bob".into());
        assert!(!other.matches(&lit));
    }

    #[test]
    fn validation_refuses_what_kafka_refuses() {
        let ok = topic_acl(
            "t",
            PatternType::Literal,
            ALICE,
            AclOperation::Read,
            AclPermission::Allow,
        );
        assert!(ok.validate().is_ok());
        let mut bad = ok.clone();
        bad.pattern_type = PatternType::Match;
        assert_eq!(bad.validate().unwrap_err().0, "Invalid patternType MATCH");
        let mut bad = ok.clone();
        bad.operation = AclOperation::Any;
        assert_eq!(bad.validate().unwrap_err().0, "Invalid operation ANY");
        let mut bad = ok.clone();
        bad.resource_name = String::new();
        assert!(bad.validate().is_err());
        let mut bad = ok.clone();
        bad.principal = "alice".into();
        assert!(bad.validate().is_err());
        let cluster = acl(
            ResourceType::Cluster,
            "other",
            PatternType::Literal,
            ALICE,
            AclOperation::Alter,
            AclPermission::Allow,
        );
        assert!(cluster.validate().is_err());
    }

    #[test]
    fn authorized_operations_sets_one_bit_per_allowed_operation() {
        let a = Authorizer::default();
        let mut acls = AclSet::new();
        acls.insert(topic_acl(
            "t",
            PatternType::Literal,
            ALICE,
            AclOperation::Write,
            AclPermission::Allow,
        ));
        let bits = a.authorized_operations(&acls, ALICE, HOST, ResourceType::Topic, "t");
        assert_eq!(bits, (1 << 4) | (1 << 8));
    }
}
