//! A simulated broker answering clients: `acks=all` produces (appended as leader, answered by the
//! driver's `AckWaits`), metadata requests, and replies only to the incarnation that asked.

use crate::limits::PRODUCE_TIMEOUT_MS;
use crate::net::{Body, PartitionErrorCode};
use crate::world::World;

use super::*;

impl World {
    /// An `acks=all` produce at (what the client thinks is) the leader.
    pub fn leader_produce(&mut self, id: i32, client: i32, req_id: u64, p: i32, values: Vec<u64>) {
        let now = self.now;
        self.stats.produce_requests += 1;
        let offline = self
            .brokers
            .get(&id)
            .is_some_and(|b| b.offline.contains(&p));
        let result = match self.hosted_mut(id, p) {
            None => Err(PartitionErrorCode::NotLeaderOrFollower),
            Some(_) if offline => Err(PartitionErrorCode::Storage),
            Some(h) => match h.partition.check_append(true) {
                Err(e) => Err(error_code(e, 0)),
                Ok(epoch) => {
                    let (base, end) = h.partition.log.append_as_leader(epoch, &values);
                    let waiter = Waiter {
                        req_id,
                        client,
                        base,
                    };
                    h.acks.add(waiter, epoch, end, now + PRODUCE_TIMEOUT_MS);
                    Ok((epoch, base, end))
                }
            },
        };
        match result {
            Err(code) => {
                self.stats.produce_refused += 1;
                self.send(
                    id,
                    client,
                    Body::ProduceResponse {
                        req_id,
                        result: Err(code),
                    },
                );
            }
            Ok((epoch, base, end)) => {
                self.trace(|| format!("broker {id}: p{p} appended {values:?} at {base}..{end} (leader epoch {epoch})"));
                self.schedule_flush(id);
                self.wake_parked(id, p);
            }
        }
    }

    pub fn broker_metadata_request(&mut self, id: i32, client: i32, req_id: u64) {
        let partitions = self.cfg.partitions;
        let Some(b) = self.brokers.get(&id) else {
            return;
        };
        let leaders = (0..partitions)
            .map(|p| b.image.partition(TOPIC, p).map_or(-1, |r| r.leader))
            .collect();
        self.send(id, client, Body::MetadataResponse { req_id, leaders });
    }

    /// Sends an answer to the incarnation that asked.
    pub fn reply(&mut self, from: i32, to: i32, to_incarnation: u64, body: Body) {
        if self.incarnation(to) != to_incarnation {
            return;
        }
        self.send(from, to, body);
    }
}
