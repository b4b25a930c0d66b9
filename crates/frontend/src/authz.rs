//! The authorizer as request handlers see it: one [`Authz`] per request, holding the client's
//! principal and address and a snapshot of the ACLs in force, answering "may this client do that
//! to this resource" with Kafka's rules ([`millrace_cluster::acl::Authorizer`]). With no
//! `authorizer.class.name` every answer is yes and nothing is looked up.
//!
//! Principals: `User:<name>` after SASL; on TLS with a client certificate, `User:` and the
//! certificate's subject through `ssl.principal.mapping.rules`; otherwise `User:ANONYMOUS`.

use std::sync::Arc;

use millrace_cluster::acl::{
    AclOperation, AclSet, Authorizer, ResourceType, CLUSTER_RESOURCE_NAME,
};

use crate::error_codes::{
    CLUSTER_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED,
};
use crate::session::Session;

/// Kafka's config resource types (`ConfigResource.Type`).
const CONFIG_RESOURCE_TOPIC: i8 = 2;
const CONFIG_RESOURCE_BROKER: i8 = 4;
const CONFIG_RESOURCE_BROKER_LOGGER: i8 = 8;
const CONFIG_RESOURCE_CLIENT_METRICS: i8 = 16;
const CONFIG_RESOURCE_GROUP: i8 = 32;
use crate::BrokerContext;

/// The client's address as Kafka's ACLs name hosts (Java's `InetAddress.getHostAddress()`): an
/// IPv4 address (also when it reached a dual-stack listener as `::ffff:a.b.c.d`) dotted, an IPv6
/// address as eight hexadecimal groups without `::` compression.
pub fn java_host_address(ip: std::net::IpAddr) -> String {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => v6
            .segments()
            .iter()
            .map(|g| format!("{g:x}"))
            .collect::<Vec<_>>()
            .join(":"),
    }
}

/// One request's authorization context.
#[derive(Debug, Clone, Default)]
pub struct Authz {
    active: Option<Arc<Active>>,
}

#[derive(Debug)]
struct Active {
    authorizer: Arc<Authorizer>,
    acls: Arc<AclSet>,
    principal: String,
    host: String,
}

impl Authz {
    /// Everything allowed: no authorizer configured.
    pub fn allow_all() -> Self {
        Self::default()
    }

    /// For a request of `session`, with the ACLs of the current metadata image.
    pub fn for_session(ctx: &BrokerContext, session: &Session) -> Self {
        let Some(authorizer) = &ctx.authorizer else {
            return Self::allow_all();
        };
        Self {
            active: Some(Arc::new(Active {
                authorizer: authorizer.clone(),
                acls: ctx.cluster.image().acls.clone(),
                principal: session.principal(),
                host: java_host_address(session.peer.ip()),
            })),
        }
    }

    /// Whether an authorizer is configured (CreateAcls and friends answer SECURITY_DISABLED
    /// without one).
    pub fn enabled(&self) -> bool {
        self.active.is_some()
    }

    /// Whether the client may perform `operation` on the resource.
    pub fn allows(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        self.active.as_ref().is_none_or(|a| {
            let allowed = a.authorizer.authorize(
                &a.acls,
                &a.principal,
                &a.host,
                operation,
                resource_type,
                name,
            );
            if !allowed {
                tracing::debug!(
                    principal = %a.principal,
                    host = %a.host,
                    ?operation,
                    ?resource_type,
                    resource = name,
                    "denied"
                );
            }
            allowed
        })
    }

    pub fn topic(&self, operation: AclOperation, name: &str) -> bool {
        self.allows(operation, ResourceType::Topic, name)
    }

    pub fn group(&self, operation: AclOperation, name: &str) -> bool {
        self.allows(operation, ResourceType::Group, name)
    }

    pub fn cluster(&self, operation: AclOperation) -> bool {
        self.allows(operation, ResourceType::Cluster, CLUSTER_RESOURCE_NAME)
    }

    pub fn transactional_id(&self, operation: AclOperation, name: &str) -> bool {
        self.allows(operation, ResourceType::TransactionalId, name)
    }

    /// Whether the client may perform `operation` on some resource of the type (an idempotent
    /// producer's Write on any topic).
    pub fn any(&self, operation: AclOperation, resource_type: ResourceType) -> bool {
        self.active.as_ref().is_none_or(|a| {
            a.authorizer
                .authorize_any(&a.acls, &a.principal, &a.host, operation, resource_type)
        })
    }

    /// Whether the client may `operation` (DescribeConfigs, AlterConfigs) the config resource of
    /// Kafka's `resource_type` code; `Err` is the code Kafka answers (TOPIC_, GROUP_ or
    /// CLUSTER_AUTHORIZATION_FAILED). Unknown resource types pass: the handler refuses them.
    pub fn config_resource(
        &self,
        operation: AclOperation,
        resource_type: i8,
        name: &str,
    ) -> Result<(), i16> {
        let (allowed, code) = match resource_type {
            CONFIG_RESOURCE_TOPIC => (self.topic(operation, name), TOPIC_AUTHORIZATION_FAILED),
            CONFIG_RESOURCE_GROUP => (self.group(operation, name), GROUP_AUTHORIZATION_FAILED),
            CONFIG_RESOURCE_BROKER
            | CONFIG_RESOURCE_BROKER_LOGGER
            | CONFIG_RESOURCE_CLIENT_METRICS => {
                (self.cluster(operation), CLUSTER_AUTHORIZATION_FAILED)
            }
            _ => (true, 0),
        };
        if allowed {
            Ok(())
        } else {
            Err(code)
        }
    }

    /// The `authorized_operations` bit field for a resource; `None` without an authorizer (the
    /// field keeps its "not computed" value).
    pub fn operations(&self, resource_type: ResourceType, name: &str) -> Option<i32> {
        self.active.as_ref().map(|a| {
            a.authorizer
                .authorized_operations(&a.acls, &a.principal, &a.host, resource_type, name)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::java_host_address;

    #[test]
    fn hosts_are_written_as_java_writes_them() {
        let host = |s: &str| java_host_address(s.parse().expect("address"));
        assert_eq!(host("10.0.0.5"), "10.0.0.5");
        assert_eq!(host("::ffff:10.0.0.5"), "10.0.0.5");
        assert_eq!(host("::1"), "0:0:0:0:0:0:0:1");
        assert_eq!(host("fe80::1:abcd"), "fe80:0:0:0:0:0:1:abcd");
    }
}
