//! A simulated broker's life with the controller: registration with a fresh incarnation id,
//! heartbeats (fast while fenced or shutting down), registering again on STALE_BROKER_EPOCH,
//! controlled shutdown, and its controller calls (timeouts, following the active controller) —
//! including the `AlterPartitions` requests the replication driver's ISR sender asks for.

use millrace_controller::limits::ISR_CHANGES_PER_REQUEST_MAX;
use millrace_controller::{ControllerError, ControllerRequest, ControllerResponse};

use crate::limits::{CONTROLLER_REQUEST_TIMEOUT_MS, REGISTER_RETRY_MS};
use crate::net::Body;
use crate::world::{Ev, World};

use millrace_controller::limits::{CONTROLLER_RETRY_MS, FAST_HEARTBEAT_MS};

use super::*;

impl World {
    pub(crate) fn register(&mut self, id: i32) {
        let Some(b) = self.brokers.get(&id) else {
            return;
        };
        if b.registration.is_some() || b.calls.values().any(|c| c.kind == CallKind::Register) {
            return;
        }
        let req = ControllerRequest::RegisterBroker {
            node_id: id,
            incarnation_id: b.incarnation_id,
            host: "127.0.0.1".into(),
            port: u16::try_from(9090 + id).unwrap_or(9090),
            rack: None,
            listeners: Vec::new(),
            clean_shutdown: b.clean_shutdown,
        };
        self.controller_call(id, CallKind::Register, req);
    }

    pub(crate) fn schedule_heartbeat(&mut self, id: i32, delay_ms: i64) {
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        b.heartbeat_generation += 1;
        let generation = b.heartbeat_generation;
        self.btimer(id, delay_ms, BrokerTimer::Heartbeat { generation });
    }

    pub(crate) fn heartbeat(&mut self, id: i32) {
        let Some(b) = self.brokers.get(&id) else {
            return;
        };
        let Some(reg) = b.registration else {
            return;
        };
        if b.calls
            .values()
            .any(|c| matches!(c.kind, CallKind::Heartbeat { .. }))
        {
            return;
        }
        let want_shutdown = b.shutting_down;
        let offline_replicas = match b.image.topic(TOPIC) {
            Some(t) => b.offline.iter().map(|&p| (t.topic_id, p)).collect(),
            None => Vec::new(),
        };
        let req = ControllerRequest::BrokerHeartbeat {
            node_id: id,
            broker_epoch: reg.broker_epoch,
            metadata_offset: b.image.offset,
            want_fence: false,
            want_shutdown,
            offline_replicas,
        };
        self.controller_call(id, CallKind::Heartbeat { want_shutdown }, req);
    }

    /// Asks for a controlled shutdown (the broker stops once the controller lets it go).
    pub fn begin_controlled_shutdown(&mut self, id: i32) {
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        if !b.alive || b.shutting_down {
            return;
        }
        b.shutting_down = true;
        self.trace(|| format!("broker {id}: controlled shutdown requested"));
        self.schedule_heartbeat(id, 0);
    }

    pub(crate) fn controller_call(&mut self, id: i32, kind: CallKind, req: ControllerRequest) {
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        let req_id = b.next_id();
        b.calls.insert(req_id, ControllerCall { kind, req });
        self.btimer(
            id,
            CONTROLLER_REQUEST_TIMEOUT_MS,
            BrokerTimer::ControllerDeadline { req_id },
        );
        self.send_call(id, req_id);
    }

    /// (Re)sends an outstanding controller call to the active controller, or waits for one.
    pub(crate) fn send_call(&mut self, id: i32, req_id: u64) {
        let Some(call) = self.brokers.get(&id).and_then(|b| b.calls.get(&req_id)) else {
            return;
        };
        let req = call.req.clone();
        match self.quorum.host {
            Some(h) => self.send(id, h, Body::ControllerRequest { req_id, req }),
            None => self.btimer(
                id,
                CONTROLLER_RETRY_MS as i64,
                BrokerTimer::ControllerRetry { req_id },
            ),
        }
    }

    pub fn broker_controller_response(&mut self, id: i32, req_id: u64, resp: ControllerResponse) {
        if matches!(
            resp,
            ControllerResponse::Error {
                error: ControllerError::NotController { .. }
            }
        ) {
            // Follow the controller (the client retries until its deadline).
            self.btimer(
                id,
                CONTROLLER_RETRY_MS as i64,
                BrokerTimer::ControllerRetry { req_id },
            );
            return;
        }
        let call = self
            .brokers
            .get_mut(&id)
            .and_then(|b| b.calls.remove(&req_id));
        if let Some(call) = call {
            self.call_done(id, call.kind, resp);
        }
    }

    pub(crate) fn call_done(&mut self, id: i32, kind: CallKind, resp: ControllerResponse) {
        match kind {
            CallKind::Register => match resp {
                ControllerResponse::Registered { broker_epoch } => {
                    if let Some(b) = self.brokers.get_mut(&id) {
                        b.registration = Some(Registration {
                            broker_epoch,
                            fenced: true,
                        });
                    }
                    self.trace(|| format!("broker {id}: registered, broker epoch {broker_epoch}"));
                    self.schedule_heartbeat(id, FAST_HEARTBEAT_MS as i64);
                }
                other => {
                    self.trace(|| format!("broker {id}: registration failed: {other:?}"));
                    self.btimer(id, REGISTER_RETRY_MS, BrokerTimer::Register);
                }
            },
            CallKind::Heartbeat { want_shutdown } => {
                match resp {
                    ControllerResponse::Heartbeat {
                        is_fenced,
                        should_shut_down,
                        ..
                    } => {
                        let changed = match self
                            .brokers
                            .get_mut(&id)
                            .and_then(|b| b.registration.as_mut())
                        {
                            Some(r) => {
                                let changed = r.fenced != is_fenced;
                                r.fenced = is_fenced;
                                changed
                            }
                            None => false,
                        };
                        if changed {
                            self.trace(|| format!("broker {id}: fenced={is_fenced}"));
                        }
                        if should_shut_down && want_shutdown {
                            self.finish_controlled_shutdown(id);
                            return;
                        }
                    }
                    ControllerResponse::Error {
                        error: ControllerError::StaleBrokerEpoch,
                    } => {
                        self.trace(|| {
                            format!("broker {id}: stale broker epoch; registering again")
                        });
                        if let Some(b) = self.brokers.get_mut(&id) {
                            b.registration = None;
                        }
                        self.btimer(id, 0, BrokerTimer::Register);
                        return;
                    }
                    _ => {}
                }
                let fast = self
                    .brokers
                    .get(&id)
                    .is_some_and(|b| b.shutting_down || b.registration.is_none_or(|r| r.fenced));
                let delay = if fast {
                    FAST_HEARTBEAT_MS as i64
                } else {
                    self.cfg.heartbeat_interval_ms
                };
                self.schedule_heartbeat(id, delay);
            }
            CallKind::AlterPartitions => {
                let now = self.now;
                let answered = match self.brokers.get_mut(&id) {
                    Some(b) => b.isr_changes.on_response(resp),
                    None => Vec::new(),
                };
                for (partition, (result, _)) in answered {
                    self.trace(|| {
                        format!("broker {id}: p{partition} AlterPartition answered {result:?}")
                    });
                    let actions = match self.hosted_mut(id, partition) {
                        Some(h) => h.partition.on_alter_partition(result, now),
                        None => Vec::new(),
                    };
                    self.handle_actions(id, partition, actions);
                }
                self.send_isr_changes(id);
            }
        }
    }

    /// Sends the driver's next `AlterPartitions` request, unless one is out.
    pub(crate) fn send_isr_changes(&mut self, id: i32) {
        let Some(b) = self.brokers.get_mut(&id) else {
            return;
        };
        if let Some(req) = b.isr_changes.next_request(id, ISR_CHANGES_PER_REQUEST_MAX) {
            self.controller_call(id, CallKind::AlterPartitions, req);
        }
    }

    pub(crate) fn finish_controlled_shutdown(&mut self, id: i32) {
        self.trace(|| format!("broker {id}: controlled shutdown complete"));
        self.stop_broker(id, None);
        let down = if matches!(self.phase, crate::world::Phase::Faults) {
            self.rng.range(500, 5_000)
        } else {
            self.rng.range(10, 500)
        };
        if let Some(b) = self.brokers.get_mut(&id) {
            b.restart_scheduled = true;
        }
        self.after(
            down,
            Ev::Fault(crate::faults::Fault::Restart { broker: id }),
        );
    }
}
