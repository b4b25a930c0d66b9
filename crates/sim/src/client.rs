//! The clients: one `acks=all` producer per partition and the admin client.
//!
//! A producer asks a random broker for metadata (a crashed one refuses the connection at once),
//! sends its next request (1 to
//! `PRODUCE_RECORDS_MAX` records, each with a value no other record has) to the leader that
//! broker named, and on any error or timeout forgets the leader and asks again. An answer with a
//! base offset is an acknowledgement: the checker records (partition, offset, value) for each
//! record and holds the cluster to it from then on. A timeout is an unknown outcome (Jepsen's
//! `info`): never counted as acknowledged.
//!
//! The admin client creates the topic (CreateTopics through the active controller, retried until
//! it exists) and, as a fault, asks for preferred-leader elections (ElectLeaders).

use std::collections::BTreeMap;

use millrace_controller::messages::{ElectionType, TopicSpec};
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};

use crate::broker::TOPIC;
use crate::limits::{
    ADMIN_NODE, CLIENT_BACKOFF_MS, CLIENT_REQUEST_TIMEOUT_MS, PRODUCER_NODE_BASE,
    PRODUCE_RECORDS_MAX,
};
use crate::net::Body;
use crate::world::{Ev, World};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProducerTimer {
    Send,
    Timeout { req_id: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum InFlight {
    Metadata,
    Produce { values: Vec<u64> },
}

/// The producer of one partition.
#[derive(Debug)]
pub(crate) struct Producer {
    node: i32,
    partition: i32,
    leader: Option<i32>,
    in_flight: Option<(u64, InFlight)>,
    next_req: u64,
    pub stopped: bool,
}

impl Producer {
    pub fn new(node: i32, partition: i32) -> Self {
        Self {
            node,
            partition,
            leader: None,
            in_flight: None,
            next_req: 1,
            stopped: true,
        }
    }

    pub fn idle(&self) -> bool {
        self.in_flight.is_none()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdminTimer {
    CreateTopic,
    CreateTimeout { req_id: u64 },
}

/// The admin client.
#[derive(Debug, Default)]
pub(crate) struct Admin {
    pub topic_created: bool,
    create_in_flight: Option<u64>,
    next_req: u64,
}

impl World {
    pub fn producer_timer(&mut self, p: i32, timer: ProducerTimer) {
        match timer {
            ProducerTimer::Send => self.producer_send(p),
            ProducerTimer::Timeout { req_id } => {
                let Some(pr) = self.producers.get_mut(&p) else {
                    return;
                };
                if pr.in_flight.as_ref().is_some_and(|(r, _)| *r == req_id) {
                    pr.in_flight = None;
                    pr.leader = None;
                    self.after(
                        CLIENT_BACKOFF_MS,
                        Ev::Producer {
                            partition: p,
                            timer: ProducerTimer::Send,
                        },
                    );
                }
            }
        }
    }

    fn producer_send(&mut self, p: i32) {
        let brokers: Vec<i32> = self.brokers.keys().copied().collect();
        let target = self.rng.pick(&brokers).unwrap_or(1);
        let count = self.rng.range(1, PRODUCE_RECORDS_MAX);
        let Some(pr) = self.producers.get(&p) else {
            return;
        };
        if pr.stopped || pr.in_flight.is_some() {
            return;
        }
        let leader = pr.leader;
        let values: Vec<u64> = match leader {
            Some(_) => (0..count).map(|_| self.new_value()).collect(),
            None => Vec::new(),
        };
        let to = leader.unwrap_or(target);
        if !self.brokers.get(&to).is_some_and(|b| b.alive) {
            // Nothing listens there: the connection is refused at once.
            if let Some(pr) = self.producers.get_mut(&p) {
                pr.leader = None;
            }
            self.after(
                CLIENT_BACKOFF_MS,
                Ev::Producer {
                    partition: p,
                    timer: ProducerTimer::Send,
                },
            );
            return;
        }
        let Some(pr) = self.producers.get_mut(&p) else {
            return;
        };
        let req_id = pr.next_req;
        pr.next_req += 1;
        let node = pr.node;
        let partition = pr.partition;
        match leader {
            Some(l) => {
                pr.in_flight = Some((
                    req_id,
                    InFlight::Produce {
                        values: values.clone(),
                    },
                ));
                self.send(
                    node,
                    l,
                    Body::Produce {
                        req_id,
                        partition,
                        values,
                    },
                );
            }
            None => {
                pr.in_flight = Some((req_id, InFlight::Metadata));
                self.send(node, target, Body::MetadataRequest { req_id });
            }
        }
        self.after(
            CLIENT_REQUEST_TIMEOUT_MS,
            Ev::Producer {
                partition: p,
                timer: ProducerTimer::Timeout { req_id },
            },
        );
    }

    /// A message for a client node.
    pub fn client_message(&mut self, to: i32, from: i32, body: Body) {
        if to == ADMIN_NODE {
            self.admin_message(body);
            return;
        }
        let p = to - PRODUCER_NODE_BASE;
        let think = self.rng.range(
            self.cfg.produce_interval_ms.0,
            self.cfg.produce_interval_ms.1,
        );
        let Some(pr) = self.producers.get_mut(&p) else {
            return;
        };
        match body {
            Body::ProduceResponse { req_id, result } => {
                let values = match &pr.in_flight {
                    Some((r, InFlight::Produce { values })) if *r == req_id => values.clone(),
                    _ => return,
                };
                pr.in_flight = None;
                match result {
                    Ok(base) => {
                        self.trace(|| {
                            format!("producer p{p}: acked {values:?} at {base} by {from}")
                        });
                        for (i, v) in values.iter().enumerate() {
                            self.on_ack(p, base + i as i64, *v);
                        }
                        self.stats.acked_records += values.len() as u64;
                        self.after(
                            think,
                            Ev::Producer {
                                partition: p,
                                timer: ProducerTimer::Send,
                            },
                        );
                    }
                    Err(code) => {
                        self.trace(|| {
                            format!("producer p{p}: {values:?} refused by {from}: {code:?}")
                        });
                        if let Some(pr) = self.producers.get_mut(&p) {
                            pr.leader = None;
                        }
                        self.after(
                            CLIENT_BACKOFF_MS,
                            Ev::Producer {
                                partition: p,
                                timer: ProducerTimer::Send,
                            },
                        );
                    }
                }
            }
            Body::MetadataResponse { req_id, leaders } => {
                if !matches!(&pr.in_flight, Some((r, InFlight::Metadata)) if *r == req_id) {
                    return;
                }
                pr.in_flight = None;
                let leader = usize::try_from(p)
                    .ok()
                    .and_then(|i| leaders.get(i))
                    .copied()
                    .filter(|l| *l >= 0);
                pr.leader = leader;
                let delay = if leader.is_some() {
                    0
                } else {
                    CLIENT_BACKOFF_MS
                };
                self.after(
                    delay,
                    Ev::Producer {
                        partition: p,
                        timer: ProducerTimer::Send,
                    },
                );
            }
            _ => {}
        }
    }

    fn start_producers(&mut self) {
        let ps: Vec<i32> = self.producers.keys().copied().collect();
        for p in ps {
            if let Some(pr) = self.producers.get_mut(&p) {
                pr.stopped = false;
            }
            let delay = self.rng.range(0, 100);
            self.after(
                delay,
                Ev::Producer {
                    partition: p,
                    timer: ProducerTimer::Send,
                },
            );
        }
    }

    pub fn stop_producers(&mut self) {
        for pr in self.producers.values_mut() {
            pr.stopped = true;
        }
    }

    pub fn admin_timer(&mut self, timer: AdminTimer) {
        match timer {
            AdminTimer::CreateTopic => self.admin_create_topic(),
            AdminTimer::CreateTimeout { req_id } => {
                if self.admin.create_in_flight == Some(req_id) {
                    self.admin.create_in_flight = None;
                    self.admin_create_topic();
                }
            }
        }
    }

    fn admin_create_topic(&mut self) {
        if self.admin.topic_created || self.admin.create_in_flight.is_some() {
            return;
        }
        let Some(host) = self.quorum.host else {
            self.after(100, Ev::Admin(AdminTimer::CreateTopic));
            return;
        };
        let mut configs = BTreeMap::new();
        configs.insert(
            "min.insync.replicas".to_string(),
            self.cfg.min_insync_replicas.to_string(),
        );
        configs.insert(
            "unclean.leader.election.enable".to_string(),
            self.cfg.unclean_election().to_string(),
        );
        let req = ControllerRequest::CreateTopics {
            topics: vec![TopicSpec {
                name: TOPIC.into(),
                partitions: Some(self.cfg.partitions),
                replication_factor: Some(self.cfg.replication_factor),
                assignments: BTreeMap::new(),
                configs,
            }],
            validate_only: false,
        };
        self.admin.next_req += 1;
        let req_id = self.admin.next_req;
        self.admin.create_in_flight = Some(req_id);
        self.send(ADMIN_NODE, host, Body::ControllerRequest { req_id, req });
        self.after(1_000, Ev::Admin(AdminTimer::CreateTimeout { req_id }));
    }

    /// A preferred-leader election for every partition (fire and forget).
    pub fn admin_preferred_election(&mut self) {
        let Some(host) = self.quorum.host else {
            return;
        };
        self.admin.next_req += 1;
        let req_id = self.admin.next_req;
        let req = ControllerRequest::ElectLeaders {
            election: ElectionType::Preferred,
            partitions: None,
        };
        self.send(ADMIN_NODE, host, Body::ControllerRequest { req_id, req });
    }

    fn admin_message(&mut self, body: Body) {
        let Body::ControllerResponse { req_id, resp } = body else {
            return;
        };
        if self.admin.create_in_flight != Some(req_id) {
            return;
        }
        self.admin.create_in_flight = None;
        let created = match &resp {
            ControllerResponse::CreateTopics { results } => results
                .iter()
                .all(|(_, r)| matches!(r, Ok(_) | Err(ControllerError::TopicAlreadyExists(_)))),
            _ => false,
        };
        if created {
            self.trace(|| "admin: topic created".to_string());
            self.admin.topic_created = true;
            if matches!(self.phase, crate::world::Phase::Faults) {
                self.start_producers();
            }
        } else {
            self.trace(|| format!("admin: CreateTopics answered {resp:?}; retrying"));
            self.after(300, Ev::Admin(AdminTimer::CreateTopic));
        }
    }
}
