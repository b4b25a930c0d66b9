//! Stateless consumers, PolarStreams' style: `POST /v1/consumer/register`, `…/poll` (which first
//! commits what the previous poll delivered), `…/commit`, `…/goodbye`. Any broker of a cluster
//! serves any of them, so a load balancer may send each request anywhere: nothing is kept in a
//! broker's memory.
//!
//! Where the state lives:
//! - The consumer is a KIP-848 member of its group on the group coordinator ([`membership`]); the
//!   coordinator assigns it partitions and holds its epoch. A poll on any broker reads the member's
//!   epoch and assignment back (ConsumerGroupDescribe) and heartbeats with them.
//! - The consumer id the client gets is a token naming the group, the member id and where to
//!   start without a committed offset (base64url of a small JSON object): the client carries it,
//!   the broker decodes it. It grants nothing: every call is still checked against the caller's
//!   ACLs on the group and topics.
//! - What a poll delivered is recorded with the group's committed offsets: each partition's
//!   commit metadata holds `millrace-delivered:<offset>`. The next poll commits that offset (the
//!   previous poll's records are then consumed) and records its own delivery the same way, in one
//!   OffsetCommit. A consumer that stops polling leaves the previous delivery uncommitted: those
//!   records come again (at least once).
//!
//! A member that does not poll within the group's session timeout
//! (`group.consumer.session.timeout.ms`, 45 s) leaves the group: its next poll answers 40403 and
//! it registers again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use bytes::Bytes;
use millrace_cluster::acl::AclOperation;
use millrace_frontend::error_codes;
use serde::{Deserialize, Serialize};

use crate::consume::{self, FetchLimits, FetchPosition, OffsetSpec};
use crate::error::RestError;
use crate::gateway::{Caller, Gateway};
use crate::membership::{self, Committed, Member, TopicPartition};
use crate::RestApi;

/// The commit-metadata prefix that records a poll's delivery.
const DELIVERED_PREFIX: &str = "millrace-delivered:";
/// A poll waits at most this long for records (`timeout_ms` above it is lowered).
const POLL_WAIT_MAX: Duration = Duration::from_secs(30);
/// A poll's default wait.
const POLL_WAIT_DEFAULT: Duration = Duration::from_millis(500);
/// A poll's default and largest size in record bytes.
const POLL_BYTES_DEFAULT: i32 = 1024 * 1024;
const POLL_BYTES_MAX: i32 = 64 * 1024 * 1024;
/// Topics one consumer subscribes to at most.
const TOPICS_MAX: usize = 1000;
/// The NDJSON content type of a poll's answer.
const NDJSON: &str = "application/x-ndjson";

/// The stateless consumer's routes.
pub fn routes() -> Router<Arc<RestApi>> {
    Router::new()
        .route("/v1/consumer/register", post(register))
        .route("/v1/consumer/poll", post(poll))
        .route("/v1/consumer/commit", post(commit))
        .route("/v1/consumer/goodbye", post(goodbye))
}

/// `POST /v1/consumer/register` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegisterRequest {
    group: String,
    topics: Vec<String>,
    /// `earliest` or `latest` (the default, as the Kafka consumer's `auto.offset.reset`).
    #[serde(default)]
    start: Option<String>,
}

/// What the consumer id token carries.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Token {
    /// The group.
    g: String,
    /// The member id.
    m: String,
    /// Start without a committed offset: true for earliest.
    e: bool,
}

impl Token {
    fn encode(&self) -> Result<String, RestError> {
        let json = serde_json::to_vec(self).map_err(|e| RestError::internal(e.to_string()))?;
        Ok(URL_SAFE_NO_PAD.encode(json))
    }

    fn decode(text: &str) -> Result<Self, RestError> {
        URL_SAFE_NO_PAD
            .decode(text.as_bytes())
            .ok()
            .and_then(|json| serde_json::from_slice(&json).ok())
            .ok_or_else(|| RestError::unprocessable("consumer_id: not a consumer id from register"))
    }

    fn start(&self) -> OffsetSpec {
        if self.e {
            OffsetSpec::Earliest
        } else {
            OffsetSpec::Latest
        }
    }
}

/// The query of poll, commit and goodbye.
#[derive(Debug, Deserialize)]
struct ConsumerQuery {
    consumer_id: String,
    #[serde(default)]
    timeout_ms: Option<u64>,
    #[serde(default)]
    max_bytes: Option<i32>,
    /// `binary` (base64, the default) or `string` (UTF-8).
    #[serde(default)]
    format: Option<String>,
}

async fn register(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, RestError> {
    let request: RegisterRequest = serde_json::from_slice(&body)
        .map_err(|e| RestError::unprocessable(format!("register: {e}")))?;
    if request.group.is_empty() {
        return Err(RestError::unprocessable("group: must not be empty"));
    }
    if request.topics.is_empty() || request.topics.len() > TOPICS_MAX {
        return Err(RestError::unprocessable(format!(
            "topics: between 1 and {TOPICS_MAX} topic names"
        )));
    }
    let earliest = match request.start.as_deref() {
        None | Some("latest") => false,
        Some("earliest") => true,
        Some(other) => {
            return Err(RestError::unprocessable(format!(
                "start: {other:?} is neither \"earliest\" nor \"latest\""
            )))
        }
    };
    let image = api.gateway.image()?;
    let authz = api.gateway.authz(&caller)?;
    for topic in &request.topics {
        if !authz.topic(AclOperation::Describe, topic) {
            return Err(RestError::kafka(
                error_codes::TOPIC_AUTHORIZATION_FAILED,
                &format!("topic {topic}"),
            ));
        }
        if image.topic(topic).is_none() {
            return Err(RestError::topic_not_found(topic));
        }
    }
    let token = Token {
        g: request.group.clone(),
        m: uuid::Uuid::new_v4().to_string(),
        e: earliest,
    };
    let mut member = Member::new(&token.g, &token.m, request.topics.clone());
    membership::heartbeat(&api.gateway, &caller, &mut member).await?;
    let body = serde_json::json!({
        "consumer_id": token.encode()?,
        "group": token.g,
        "member_id": token.m,
        "topics": request.topics,
    });
    Ok((StatusCode::OK, Json(body)).into_response())
}

/// The member as the coordinator has it, kept alive with one heartbeat (one retry after a fenced
/// epoch: another broker may have heartbeated in between).
async fn alive_member(
    gateway: &Gateway,
    caller: &Caller,
    token: &Token,
) -> Result<Member, RestError> {
    for _ in 0..2 {
        let Some(mut member) = membership::describe(gateway, caller, &token.g, &token.m).await?
        else {
            return Err(RestError::new(
                StatusCode::NOT_FOUND,
                crate::error::code::CONSUMER_INSTANCE_NOT_FOUND,
                "Consumer not registered: it said goodbye, or did not poll within the group's \
                 session timeout. Register again.",
            ));
        };
        match membership::heartbeat(gateway, caller, &mut member).await {
            Ok(()) => return Ok(member),
            Err(e) if e.is_kafka(&[error_codes::FENCED_MEMBER_EPOCH]) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(RestError::kafka(
        error_codes::FENCED_MEMBER_EPOCH,
        &format!("group {} member {}", token.g, token.m),
    ))
}

/// Where each assigned partition's reading stands: `(committed, delivered)` — the committed
/// offset (`None` when there is none) and where the previous poll's delivery ended.
async fn positions(
    gateway: &Gateway,
    caller: &Caller,
    token: &Token,
    assignment: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, (Option<i64>, i64)>, RestError> {
    let committed = membership::committed(gateway, caller, &token.g, Some(assignment)).await?;
    let mut out = BTreeMap::new();
    for tp in assignment {
        let (committed_offset, delivered) = match committed.get(tp) {
            Some(c) => (Some(c.offset), delivered(c).unwrap_or(c.offset)),
            None => {
                let start =
                    consume::resolve_offset(gateway, caller, &tp.0, tp.1, token.start()).await?;
                (None, start)
            }
        };
        out.insert(tp.clone(), (committed_offset, delivered));
    }
    Ok(out)
}

/// The delivery a commit's metadata records.
fn delivered(c: &Committed) -> Option<i64> {
    c.metadata
        .as_deref()
        .and_then(|m| m.strip_prefix(DELIVERED_PREFIX))
        .and_then(|n| n.parse().ok())
}

async fn poll(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ConsumerQuery>,
) -> Result<Response, RestError> {
    let token = Token::decode(&query.consumer_id)?;
    let binary = match query.format.as_deref() {
        None | Some("binary") => true,
        Some("string") => false,
        Some(other) => {
            return Err(RestError::unprocessable(format!(
                "format: {other:?} is neither \"binary\" nor \"string\""
            )))
        }
    };
    let gateway = &api.gateway;
    let member = alive_member(gateway, &caller, &token).await?;
    let mut at = positions(gateway, &caller, &token, &member.assignment).await?;
    let limits = FetchLimits {
        max_bytes: query
            .max_bytes
            .unwrap_or(POLL_BYTES_DEFAULT)
            .clamp(1, POLL_BYTES_MAX),
        partition_max_bytes: query
            .max_bytes
            .unwrap_or(POLL_BYTES_DEFAULT)
            .clamp(1, POLL_BYTES_MAX),
        max_wait: query
            .timeout_ms
            .map_or(POLL_WAIT_DEFAULT, Duration::from_millis)
            .min(POLL_WAIT_MAX),
    };
    let wanted: Vec<FetchPosition> = at
        .iter()
        .map(|((topic, partition), (_, delivered))| FetchPosition {
            topic: topic.clone(),
            partition: *partition,
            offset: *delivered,
        })
        .collect();
    let fetched = if wanted.is_empty() {
        tokio::time::sleep(limits.max_wait).await;
        Vec::new()
    } else {
        consume::fetch(gateway, &caller, &wanted, limits).await?
    };

    // One commit: the previous delivery becomes the committed offset, this one is recorded.
    let mut commits = BTreeMap::new();
    let mut lines = Vec::new();
    for part in &fetched {
        let tp = (part.topic.clone(), part.partition);
        let Some((_, previous)) = at.get(&tp).copied() else {
            continue;
        };
        let next = if part.error_code == error_codes::OFFSET_OUT_OF_RANGE {
            consume::resolve_offset(gateway, &caller, &tp.0, tp.1, token.start()).await?
        } else {
            part.next_offset
        };
        for record in &part.records {
            lines.push(record_line(&part.topic, part.partition, record, binary));
        }
        commits.insert(
            tp.clone(),
            Committed {
                offset: previous,
                metadata: Some(format!("{DELIVERED_PREFIX}{next}")),
            },
        );
        at.insert(tp, (Some(previous), next));
    }
    if !commits.is_empty() {
        let refused = membership::commit(
            gateway,
            &caller,
            &token.g,
            Some((&member.member_id, member.epoch)),
            &commits,
        )
        .await?;
        if let Some(((topic, partition), code)) = refused.first() {
            return Err(RestError::kafka(
                *code,
                &format!("commit of {topic}-{partition} for group {}", token.g),
            ));
        }
    }
    let mut body = String::new();
    for line in lines {
        body.push_str(&line.to_string());
        body.push('\n');
    }
    Ok(([(header::CONTENT_TYPE, NDJSON)], body).into_response())
}

/// One record as a line of a poll's answer.
fn record_line(
    topic: &str,
    partition: i32,
    record: &crate::records::FetchedRecord,
    binary: bool,
) -> serde_json::Value {
    let text = |b: &Option<Bytes>| match b {
        None => serde_json::Value::Null,
        Some(b) if binary => serde_json::Value::String(STANDARD.encode(b)),
        Some(b) => serde_json::Value::String(String::from_utf8_lossy(b).into_owned()),
    };
    serde_json::json!({
        "topic": topic,
        "partition": partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": text(&record.key),
        "value": text(&record.value),
        "headers": record
            .headers
            .iter()
            .map(|(k, v)| serde_json::json!({
                "key": String::from_utf8_lossy(k),
                "value": text(v),
            }))
            .collect::<Vec<_>>(),
    })
}

/// Commits what the last poll delivered, now.
async fn commit_delivered(
    gateway: &Gateway,
    caller: &Caller,
    token: &Token,
    member: &Member,
) -> Result<(), RestError> {
    let committed =
        membership::committed(gateway, caller, &token.g, Some(&member.assignment)).await?;
    let commits: BTreeMap<TopicPartition, Committed> = committed
        .iter()
        .filter_map(|(tp, c)| {
            let d = delivered(c)?;
            (d != c.offset).then(|| {
                (
                    tp.clone(),
                    Committed {
                        offset: d,
                        metadata: Some(format!("{DELIVERED_PREFIX}{d}")),
                    },
                )
            })
        })
        .collect();
    if commits.is_empty() {
        return Ok(());
    }
    let refused = membership::commit(
        gateway,
        caller,
        &token.g,
        Some((&member.member_id, member.epoch)),
        &commits,
    )
    .await?;
    match refused.first() {
        None => Ok(()),
        Some(((topic, partition), code)) => Err(RestError::kafka(
            *code,
            &format!("commit of {topic}-{partition} for group {}", token.g),
        )),
    }
}

async fn commit(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ConsumerQuery>,
) -> Result<StatusCode, RestError> {
    let token = Token::decode(&query.consumer_id)?;
    let member = alive_member(&api.gateway, &caller, &token).await?;
    commit_delivered(&api.gateway, &caller, &token, &member).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn goodbye(
    State(api): State<Arc<RestApi>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ConsumerQuery>,
) -> Result<StatusCode, RestError> {
    let token = Token::decode(&query.consumer_id)?;
    let member = alive_member(&api.gateway, &caller, &token).await?;
    commit_delivered(&api.gateway, &caller, &token, &member).await?;
    membership::leave(&api.gateway, &caller, &member).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_group_member_and_start() {
        let token = Token {
            g: "orders".into(),
            m: "m-1".into(),
            e: true,
        };
        let text = token.encode().expect("encode");
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(Token::decode(&text).expect("decode"), token);
        assert_eq!(
            Token::decode("not a token").expect_err("refused").status,
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }

    #[test]
    fn the_delivery_is_read_from_commit_metadata() {
        let c = |metadata: Option<&str>| Committed {
            offset: 5,
            metadata: metadata.map(str::to_string),
        };
        assert_eq!(delivered(&c(Some("millrace-delivered:9"))), Some(9));
        assert_eq!(delivered(&c(Some("something else"))), None);
        assert_eq!(delivered(&c(None)), None);
    }
}
