# REST v3: consumer groups, their consumers and assignments, lags and the lag summary, against a
# group a Kafka client (confluent-kafka) is a live member of, with offsets it committed.

req GET /v3/clusters
CLUSTER="$(jq -r '.data[0].cluster_id' <<<"$BODY_OUT")"
C="/v3/clusters/$CLUSTER"
T="v3-lag-$$"
G="v3-group-$$"
S="v3-simple-$$"
ENV_FILE="$CASE_WORK/member.env"

req POST "$C/topics" application/json '{"topic_name":"'"$T"'","partitions_count":2}'
expect_status "v3 groups: topic created" 201

# 10 records in partition 0, 6 in partition 1; group G commits 4 and 1 and stays a member until
# the stop file appears (60 s at most); group S only commits (no member: a "simple" group).
"$PY" - "$BOOTSTRAP" "$T" "$G" "$S" "$ENV_FILE" >"$CASE_WORK/member.log" 2>&1 <<'PY' &
import os, sys, time
from confluent_kafka import Consumer, Producer, TopicPartition
bootstrap, topic, group, simple, env_file = sys.argv[1:]
producer = Producer({"bootstrap.servers": bootstrap})
for i in range(16):
    producer.produce(topic, value=b"r%d" % i, partition=0 if i < 10 else 1)
assert producer.flush(30) == 0
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "v3-client",
              "auto.offset.reset": "earliest", "enable.auto.commit": False})
c.subscribe([topic])
deadline = time.monotonic() + 30
while not c.assignment() and time.monotonic() < deadline:
    c.poll(0.2)
assert c.assignment(), "no assignment"
c.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 1)], asynchronous=False)
s = Consumer({"bootstrap.servers": bootstrap, "group.id": simple, "enable.auto.commit": False})
s.commit(offsets=[TopicPartition(topic, 0, 9)], asynchronous=False)
s.close()
with open(env_file + ".tmp", "w") as out:
    out.write(c.memberid() + "\n")
os.replace(env_file + ".tmp", env_file)
end = time.monotonic() + 60
while time.monotonic() < end and not os.path.exists(env_file + ".stop"):
    c.poll(0.2)
c.close()
PY
MEMBER_PID=$!
for _ in $(seq 1 400); do
  [[ -f "$ENV_FILE" ]] && break
  kill -0 "$MEMBER_PID" 2>/dev/null || break
  sleep 0.1
done
check "v3 groups: the Kafka client joined and committed" test -s "$ENV_FILE"
MEMBER="$(cat "$ENV_FILE" 2>/dev/null || true)"

req GET "$C/consumer-groups"
expect_status "v3 list consumer groups: 200" 200
expect_jq "v3 list consumer groups: both groups" \
  '.kind == "KafkaConsumerGroupList" and any(.data[]; .consumer_group_id == "'"$G"'" and .state == "STABLE" and .type == "CLASSIC" and .is_simple == false) and any(.data[]; .consumer_group_id == "'"$S"'" and .is_simple == true and .state == "EMPTY")'

req GET "$C/consumer-groups/$G"
expect_status "v3 get consumer group: 200" 200
expect_jq "v3 get consumer group: assignor, coordinator and links" \
  '.kind == "KafkaConsumerGroup" and .partition_assignor != "" and (.coordinator.related | test("/brokers/[0-9]+$")) and (.consumers.related | endswith("/consumer-groups/'"$G"'/consumers")) and (.lag_summary.related | endswith("/lag-summary"))'

req GET "$C/consumer-groups/$G/consumers"
expect_status "v3 list consumers: 200" 200
expect_jq "v3 list consumers: the Kafka client's member" \
  '.kind == "KafkaConsumerList" and (.data | length) == 1 and .data[0].consumer_id == "'"$MEMBER"'" and .data[0].client_id == "v3-client" and .data[0].instance_id == null'

req GET "$C/consumer-groups/$G/consumers/$MEMBER"
expect_status "v3 get consumer: 200" 200
req GET "$C/consumer-groups/$G/consumers/no-such-member"
expect_status "v3 get unknown consumer: 404" 404

req GET "$C/consumer-groups/$G/consumers/$MEMBER/assignments"
expect_status "v3 list assignments: 200" 200
expect_jq "v3 list assignments: both partitions" \
  '[.data[] | [.topic_name, .partition_id]] == [["'"$T"'",0],["'"$T"'",1]] and (.data[0].lag.related | endswith("/lags/'"$T"'/partitions/0"))'
req GET "$C/consumer-groups/$G/consumers/$MEMBER/assignments/$T/partitions/1"
expect_status "v3 get assignment: 200" 200
req GET "$C/consumer-groups/$G/consumers/$MEMBER/assignments/$T/partitions/7"
expect_status "v3 get unknown assignment: 404" 404

req GET "$C/consumer-groups/$G/lags"
expect_status "v3 list lags: 200" 200
expect_jq "v3 list lags: committed offset, log end offset and lag, largest first" \
  '[.data[] | [.partition_id, .current_offset, .log_end_offset, .lag]] == [[0,4,10,6],[1,1,6,5]] and all(.data[]; .consumer_id == "'"$MEMBER"'" and .client_id == "v3-client")'

req GET "$C/consumer-groups/$G/lags/$T/partitions/1"
expect_status "v3 get lag: 200" 200
expect_jq "v3 get lag: partition 1" '.kind == "KafkaConsumerLag" and .lag == 5 and .current_offset == 1'
req GET "$C/consumer-groups/$G/lags/$T/partitions/5"
expect_status "v3 get lag of a partition not committed: 404" 404

req GET "$C/consumer-groups/$G/lag-summary"
expect_status "v3 lag summary: 200" 200
expect_jq "v3 lag summary: max and total" \
  '.kind == "KafkaConsumerGroupLagSummary" and .max_lag == 6 and .total_lag == 11 and .max_lag_partition_id == 0 and .max_lag_topic_name == "'"$T"'" and .max_lag_consumer_id == "'"$MEMBER"'" and .max_lag_client_id == "v3-client" and (.max_lag_partition.related | endswith("/topics/'"$T"'/partitions/0"))'

req GET "$C/consumer-groups/$S/lag-summary"
expect_status "v3 lag summary of a simple group: 200" 200
expect_jq "v3 lag summary of a simple group: no consumer" '.max_lag == 1 and .total_lag == 1 and .max_lag_consumer_id == ""'

req GET "$C/consumer-groups/no-such-group-$$"
expect_status "v3 unknown consumer group: 404" 404
expect_jq "v3 unknown consumer group: error_code 404" '.error_code == 404'
req GET "$C/consumer-groups/no-such-group-$$/lags"
expect_status "v3 lags of an unknown group: 404" 404

touch "$ENV_FILE.stop"
wait "$MEMBER_PID" 2>/dev/null || true
req GET "$C/consumer-groups/$G"
expect_jq "v3 consumer group after the member left: EMPTY" '.state == "EMPTY"'
req DELETE "$C/topics/$T"
