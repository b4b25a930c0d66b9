//! Replica placement for new partitions (CreateTopics, CreatePartitions): which brokers hold each
//! partition's replicas, the first one being the preferred leader.
//!
//! Rack-unaware, like Kafka's round robin but balanced against what already exists: the first
//! replica of each new partition goes to the usable broker that is preferred leader of the fewest
//! partitions so far (ties: lowest id), and the followers are the next brokers around the ring of
//! usable brokers, shifted per partition so that follower sets vary too (Kafka's
//! `nextReplicaShift`). Deterministic, so tests and the simulator can predict it.
//!
//! Pure: reads the image, returns assignments.

use std::collections::BTreeMap;

use millrace_cluster::image::MetadataImage;

use crate::messages::ControllerError;

/// Places `count` new partitions of `replication_factor` replicas on the active brokers.
pub fn place(
    image: &MetadataImage,
    count: i32,
    replication_factor: i16,
) -> Result<Vec<Vec<i32>>, ControllerError> {
    let brokers: Vec<i32> = image.active_brokers().map(|b| b.node_id).collect();
    let rf = usize::try_from(replication_factor).unwrap_or(0);
    if rf == 0 {
        return Err(ControllerError::InvalidReplicationFactor(
            "Replication factor must be larger than 0, or -1 to use the default value.".into(),
        ));
    }
    if rf > brokers.len() {
        return Err(ControllerError::InvalidReplicationFactor(format!(
            "Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {} broker(s) are registered.",
            brokers.len()
        )));
    }
    let n = brokers.len();
    // Preferred-leader counts so far, over the brokers that can take new replicas.
    let mut leaders: BTreeMap<i32, usize> = brokers.iter().map(|&b| (b, 0)).collect();
    for topic in image.topics.values() {
        for p in &topic.partitions {
            if let Some(c) = leaders.get_mut(&p.preferred_leader()) {
                *c += 1;
            }
        }
    }
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for p in 0..count.max(0) {
        let first = brokers
            .iter()
            .enumerate()
            .min_by_key(|(_, b)| (leaders.get(b).copied().unwrap_or(0), **b))
            .map(|(i, _)| i)
            .unwrap_or(0);
        let mut replicas = Vec::with_capacity(rf);
        replicas.push(brokers[first]);
        // Followers: a per-partition shift around the ring, skipping the leader.
        let shift = if n > 1 {
            usize::try_from(p).unwrap_or(0) / n % (n - 1)
        } else {
            0
        };
        for j in 0..rf.saturating_sub(1) {
            let step = 1 + (shift + j) % (n - 1).max(1);
            replicas.push(brokers[(first + step) % n]);
        }
        if let Some(c) = leaders.get_mut(&brokers[first]) {
            *c += 1;
        }
        out.push(replicas);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use millrace_cluster::records::{MetadataBatch, MetadataRecord};
    use std::collections::BTreeSet;
    use uuid::Uuid;

    fn image(active: &[i32]) -> MetadataImage {
        let mut image = MetadataImage::default();
        for (i, &b) in active.iter().enumerate() {
            let offset = i as u64 + 1;
            image.apply_batch(
                offset,
                &MetadataBatch::new(vec![MetadataRecord::RegisterBroker {
                    node_id: b,
                    incarnation_id: Uuid::from_u128(b as u128),
                    host: "h".into(),
                    port: 1,
                    rack: None,
                    listeners: Vec::new(),
                    clean_shutdown: true,
                }]),
            );
            image.apply_batch(
                offset + 100,
                &MetadataBatch::new(vec![MetadataRecord::UnfenceBroker {
                    node_id: b,
                    broker_epoch: offset as i64,
                }]),
            );
        }
        image
    }

    #[test]
    fn six_partitions_rf3_on_three_brokers_spread_leaders_evenly() {
        let placed = place(&image(&[1, 2, 3]), 6, 3).expect("place");
        let mut leaders: BTreeMap<i32, usize> = BTreeMap::new();
        for r in &placed {
            assert_eq!(r.iter().copied().collect::<BTreeSet<_>>().len(), 3, "{r:?}");
            *leaders.entry(r[0]).or_default() += 1;
        }
        assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
    }

    #[test]
    fn replicas_are_distinct_for_every_size() {
        for n in 1..=7 {
            let brokers: Vec<i32> = (1..=n).collect();
            for rf in 1..=n {
                let placed = place(&image(&brokers), 20, rf as i16).expect("place");
                for r in placed {
                    let set: BTreeSet<i32> = r.iter().copied().collect();
                    assert_eq!(set.len(), rf as usize, "n={n} rf={rf} {r:?}");
                }
            }
        }
    }

    #[test]
    fn rf_above_the_active_brokers_is_refused() {
        assert!(matches!(
            place(&image(&[1, 2]), 1, 3),
            Err(ControllerError::InvalidReplicationFactor(_))
        ));
    }

    #[test]
    fn fenced_brokers_get_nothing() {
        let mut img = image(&[1, 2, 3]);
        img.apply_batch(
            500,
            &MetadataBatch::new(vec![MetadataRecord::FenceBroker {
                node_id: 2,
                broker_epoch: 2,
            }]),
        );
        for r in place(&img, 10, 2).expect("place") {
            assert!(!r.contains(&2), "{r:?}");
        }
    }
}
