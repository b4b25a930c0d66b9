//! What one group obeys on this broker: its dynamic configs (GROUP resources, in the metadata
//! image every broker holds) over the broker's `group.consumer.*` / `group.share.*` values, as
//! `millrace_cluster::config_group` resolves them (Kafka's `GroupConfigManager` with
//! `GroupConfig.evaluate`).
//!
//! Read at each use, as Kafka reads its group config provider: a change committed by the
//! controller applies to the next heartbeat, the next acquisition, the next lock expiry and the
//! next share partition initialized, with no restart and no notification.

use std::sync::Arc;

use millrace_cluster::{Cluster, GroupSettings};
use millrace_groups::GroupTimeouts;

use crate::share_partitions::ShareGroupConfigProvider;
use crate::BrokerContext;

/// The share partitions' view of every group's settings: this broker's image and config.
pub struct ImageGroupConfigs(pub Arc<Cluster>);

impl std::fmt::Debug for ImageGroupConfigs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ImageGroupConfigs")
    }
}

impl ShareGroupConfigProvider for ImageGroupConfigs {
    fn settings(&self, group_id: &str) -> GroupSettings {
        let image = self.0.image();
        self.0.config.group_settings(image.group_configs(group_id))
    }
}

/// The settings of `group_id` now.
pub fn of(ctx: &BrokerContext, group_id: &str) -> GroupSettings {
    let image = ctx.cluster.image();
    ctx.cluster
        .config
        .group_settings(image.group_configs(group_id))
}

/// A consumer group's own session timeout and heartbeat interval; `None` where it has no
/// configs (the coordinator uses its broker settings).
pub fn consumer_timeouts(ctx: &BrokerContext, group_id: &str) -> GroupTimeouts {
    timeouts(ctx, group_id, |s| {
        (
            s.consumer_session_timeout_ms,
            s.consumer_heartbeat_interval_ms,
        )
    })
}

/// A share group's own session timeout and heartbeat interval, as [`consumer_timeouts`].
pub fn share_timeouts(ctx: &BrokerContext, group_id: &str) -> GroupTimeouts {
    timeouts(ctx, group_id, |s| {
        (s.share_session_timeout_ms, s.share_heartbeat_interval_ms)
    })
}

fn timeouts(
    ctx: &BrokerContext,
    group_id: &str,
    pick: impl Fn(&GroupSettings) -> (i32, i32),
) -> GroupTimeouts {
    let image = ctx.cluster.image();
    let Some(configs) = image.group_configs(group_id) else {
        return GroupTimeouts::default();
    };
    let (session, interval) = pick(&ctx.cluster.config.group_settings(Some(configs)));
    GroupTimeouts {
        session_timeout_ms: Some(session),
        heartbeat_interval_ms: Some(interval),
    }
}
