# Stateless consumers (/v1/consumer/…): register, poll (NDJSON), commit, goodbye — the requests
# PolarStreams' documentation shows, against Millrace's paths; records come from a Kafka producer
# (confluent-kafka) and the group's committed offsets are read back with a Kafka consumer.

TOPIC="http-stateless-$$"
GROUP="$TOPIC-group"

if "$PY" - "$BOOTSTRAP" "$TOPIC" <<'PY' >"$CASE_WORK/produce.out" 2>&1
import sys
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, topic = sys.argv[1], sys.argv[2]
admin = AdminClient({"bootstrap.servers": bootstrap})
for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
    f.result(30)
p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
for i in range(20):
    p.produce(topic, key=f"k{i}", value=f"v{i}", partition=i % 2, headers=[("h", b"x")])
assert p.flush(30) == 0
PY
then
  pass "stateless: 20 records produced with a Kafka client"
else
  fail "stateless: 20 records produced with a Kafka client" "$(tail -n 3 "$CASE_WORK/produce.out")"
fi

req POST /v1/consumer/register application/json "{\"group\":\"$GROUP\",\"topics\":[\"$TOPIC\"],\"start\":\"earliest\"}"
expect_status "stateless: register" 200
expect_jq "stateless: register answers a consumer id" '.consumer_id | type == "string" and length > 10'
ID="$(jq -r .consumer_id <<<"$BODY_OUT")"

got=0
for _ in $(seq 1 20); do
  req POST "/v1/consumer/poll?consumer_id=$ID&format=string&timeout_ms=300"
  [[ "$STATUS" == 200 ]] || break
  got=$((got + $(grep -c . <<<"$BODY_OUT" || true)))
  ((got >= 20)) && break
done
if ((got == 20)); then pass "stateless: polls return the 20 records"; else fail "stateless: polls return the 20 records" "got $got (last status $STATUS)"; fi
req POST "/v1/consumer/poll?consumer_id=$ID&format=string&timeout_ms=100"
expect_status "stateless: an empty poll" 200
check "stateless: the empty poll has no records" test -z "$BODY_OUT"

committed() {
  "$PY" - "$BOOTSTRAP" "$TOPIC" "$GROUP" <<'PY'
import sys
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, group = sys.argv[1:4]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
got = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
print(sum(tp.offset for tp in got if tp.offset >= 0))
c.close()
PY
}
check "stateless: the previous poll's delivery is committed (20 across partitions)" test "$(committed)" = 20

req POST "/v1/consumer/commit?consumer_id=$ID"
expect_status "stateless: commit" 204
req POST "/v1/consumer/goodbye?consumer_id=$ID"
expect_status "stateless: goodbye" 204
req POST "/v1/consumer/poll?consumer_id=$ID"
expect_status "stateless: poll after goodbye" 404
expect_jq "stateless: 40403 after goodbye" '.error_code == 40403'
req POST "/v1/consumer/poll?consumer_id=not-a-token"
expect_status "stateless: a made-up consumer id" 422
req POST /v1/consumer/register application/json '{"group":"g","topics":["no-such-topic-here"]}'
expect_status "stateless: register for a missing topic" 404
expect_jq "stateless: 40401 for a missing topic" '.error_code == 40401'
