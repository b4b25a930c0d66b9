//! The controller's decisions on tiered partitions' remote logs (decision 0073): a leader's
//! upload is committed only if it comes from the partition's current leader in its current leader
//! epoch and starts exactly where the remote log ends, so two brokers that both believe they lead
//! never both own a segment; a retention deletion is fenced the same way. Pure: reads the image,
//! returns records.

use millrace_cluster::image::MetadataImage;
use millrace_cluster::records::MetadataRecord;
use uuid::Uuid;

use crate::messages::{ControllerError, RemoteLogChange};

/// Whether `change` is a commit of a segment the remote log already holds (same segment id):
/// a retry whose first attempt was committed, which must be answered as the success it was. A
/// refusal tells the uploader the commit is not in the log, and it deletes the segment's objects.
pub fn already_committed(image: &MetadataImage, change: &RemoteLogChange) -> bool {
    let RemoteLogChange::Commit {
        topic_id,
        partition,
        segment,
        ..
    } = change
    else {
        return false;
    };
    image.remote_log(*topic_id, *partition).is_some_and(|log| {
        log.segments
            .iter()
            .any(|s| s.segment_id == segment.segment_id)
    })
}

/// The records that carry out `change` for broker `node_id`, or why it is refused. The broker
/// epoch is checked by the caller.
pub fn decide(
    image: &MetadataImage,
    node_id: i32,
    change: RemoteLogChange,
) -> Result<Vec<MetadataRecord>, ControllerError> {
    match change {
        RemoteLogChange::Commit {
            topic_id,
            partition,
            leader_epoch,
            segment,
        } => {
            check_leader(image, node_id, topic_id, partition, leader_epoch)?;
            let current = image
                .remote_log(topic_id, partition)
                .map(|l| (**l).clone())
                .unwrap_or_default();
            current
                .check_commit(&segment)
                .map_err(|e| ControllerError::InvalidRequest(e.to_string()))?;
            Ok(vec![MetadataRecord::RemoteSegmentCommitted {
                topic_id,
                partition,
                segment,
            }])
        }
        RemoteLogChange::Delete {
            topic_id,
            partition,
            leader_epoch,
            through_end_offset,
            log_start_offset,
        } => {
            check_leader(image, node_id, topic_id, partition, leader_epoch)?;
            Ok(vec![MetadataRecord::RemoteSegmentsDeleted {
                topic_id,
                partition,
                through_end_offset,
                log_start_offset,
            }])
        }
        RemoteLogChange::Purged { topic_id } => {
            if !image.remote_purges.contains_key(&topic_id) {
                return Ok(Vec::new());
            }
            Ok(vec![MetadataRecord::RemoteTopicPurged { topic_id }])
        }
    }
}

fn check_leader(
    image: &MetadataImage,
    node_id: i32,
    topic_id: Uuid,
    partition: i32,
    leader_epoch: i32,
) -> Result<(), ControllerError> {
    let p = image
        .topic_by_id(topic_id)
        .and_then(|t| t.partition(partition))
        .ok_or_else(|| {
            ControllerError::UnknownTopicOrPartition(format!("{topic_id}-{partition}"))
        })?;
    if p.leader != node_id {
        return Err(ControllerError::NotLeaderOrFollower);
    }
    if p.leader_epoch != leader_epoch {
        return Err(ControllerError::FencedLeaderEpoch);
    }
    Ok(())
}
