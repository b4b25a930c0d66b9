# REST v3: topics and partitions — create, list, get, grow, delete — with the requests of
# Confluent's v3 documentation, and the answers for bad ones (400/415/422 naming the field, 404).

JSON=application/json
req GET /v3/clusters
CLUSTER="$(jq -r '.data[0].cluster_id' <<<"$BODY_OUT")"
C="/v3/clusters/$CLUSTER"
T="v3-topic-$$"

req POST "$C/topics" "$JSON" \
  '{"topic_name":"'"$T"'","partitions_count":3,"replication_factor":1,"configs":[{"name":"cleanup.policy","value":"compact"},{"name":"compression.type","value":"gzip"}]}' \
  -D "$CASE_WORK/headers"
expect_status "v3 create topic: 201" 201
expect_jq "v3 create topic: the topic" \
  '.kind == "KafkaTopic" and .topic_name == "'"$T"'" and .partitions_count == 3 and .replication_factor == 1 and .is_internal == false and (.metadata.self | endswith("/topics/'"$T"'")) and .metadata.resource_name == "crn:///kafka='"$CLUSTER"'/topic='"$T"'"'
check "v3 create topic: Location header" grep -qi "^location: .*/v3/clusters/$CLUSTER/topics/$T" "$CASE_WORK/headers"

# A Kafka client sees the topic with its partitions and configs.
check "v3 create topic: seen by a Kafka client" "$PY" - "$BOOTSTRAP" "$T" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, ConfigResource
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
topic = admin.list_topics(timeout=10).topics[sys.argv[2]]
assert len(topic.partitions) == 3, topic.partitions
res = ConfigResource(ConfigResource.Type.TOPIC, sys.argv[2])
configs = admin.describe_configs([res])[res].result(timeout=10)
assert configs["cleanup.policy"].value == "compact", configs["cleanup.policy"]
assert configs["compression.type"].value == "gzip", configs["compression.type"]
PY

req POST "$C/topics" "$JSON" '{"topic_name":"'"$T"'","partitions_count":3}'
expect_status "v3 create an existing topic: 400" 400
expect_jq "v3 create an existing topic: 40002" '.error_code == 40002 and (.message | contains("already exists"))'

req POST "$C/topics" "$JSON" '{"topic_name":"'"$T"'-dry","partitions_count":2,"validate_only":true}'
expect_status "v3 create with validate_only: 200" 200
expect_jq "v3 create with validate_only: the topic it would be" '.topic_name == "'"$T"'-dry" and .partitions_count == 2'
req GET "$C/topics/$T-dry"
expect_status "v3 create with validate_only: nothing created" 404

req POST "$C/topics" "$JSON" '{"topic_name":"bad/name"}'
expect_status "v3 create with an invalid name: 422" 422
expect_jq "v3 create with an invalid name: 42206" '.error_code == 42206'

req POST "$C/topics" "$JSON" '{"topic_name":"'"$T"'-x","partitions_count":"six"}'
expect_status "v3 create with a wrong type: 400" 400
expect_jq "v3 create with a wrong type: the field is named" '.error_code == 400 and (.message | contains("partitions_count"))'

req POST "$C/topics" "$JSON" '{"partitions_count":1}'
expect_status "v3 create without topic_name: 400" 400
expect_jq "v3 create without topic_name: the field is named" '.message | contains("topic_name")'

req POST "$C/topics" "$JSON" '{"topic_name":'
expect_status "v3 create with malformed JSON: 400" 400

req POST "$C/topics" "$JSON" ''
expect_status "v3 create with an empty body: 422" 422

req POST "$C/topics" "text/plain" '{"topic_name":"'"$T"'-y"}'
expect_status "v3 create with text/plain: 415" 415
expect_jq "v3 create with text/plain: 415 body" '.error_code == 415'

req POST "$C/topics" "$JSON" '{"topic_name":"'"$T"'-z","configs":[{"name":"no.such.config","value":"1"}]}'
expect_status "v3 create with an unknown config: 400" 400

req POST "$C/topics" "$JSON" '{"topic_name":"'"$T"'-rf","replication_factor":3}'
expect_status "v3 create with too large a replication factor: 400" 400

req GET "$C/topics"
expect_status "v3 list topics: 200" 200
expect_jq "v3 list topics: sorted, with the new topic" \
  '.kind == "KafkaTopicList" and any(.data[]; .topic_name == "'"$T"'" and .partitions_count == 3) and ([.data[].topic_name] == ([.data[].topic_name] | sort))'

req GET "$C/topics/$T?include_authorized_operations=true"
expect_status "v3 get topic: 200" 200
expect_jq "v3 get topic: links and operations" \
  '(.partitions.related | endswith("/topics/'"$T"'/partitions")) and (.configs.related | endswith("/topics/'"$T"'/configs")) and (.authorized_operations | index("DESCRIBE") != null)'

req GET "$C/topics/$T?include_authorized_operations=perhaps"
expect_status "v3 get topic with a bad boolean: 400" 400

req GET "$C/topics/no-such-topic-$$"
expect_status "v3 get unknown topic: 404" 404
expect_jq "v3 get unknown topic: 40403" '.error_code == 40403'

req GET "$C/topics/$T/partitions"
expect_status "v3 list partitions: 200" 200
expect_jq "v3 list partitions: 0, 1, 2 with leaders" \
  '.kind == "KafkaPartitionList" and [.data[].partition_id] == [0,1,2] and all(.data[]; (.leader.related | test("/partitions/[0-9]+/replicas/[0-9]+$")))'

req GET "$C/topics/$T/partitions/2"
expect_status "v3 get partition: 200" 200
expect_jq "v3 get partition: the partition" '.partition_id == 2 and .topic_name == "'"$T"'" and .metadata.resource_name == "crn:///kafka='"$CLUSTER"'/topic='"$T"'/partition=2"'
req GET "$C/topics/$T/partitions/3"
expect_status "v3 get unknown partition: 404" 404

req PATCH "$C/topics/$T" "$JSON" '{"partitions_count":5}'
expect_status "v3 grow a topic: 200" 200
expect_jq "v3 grow a topic: 5 partitions" '.partitions_count == 5'
req PATCH "$C/topics/$T" "$JSON" '{"partitions_count":2}'
expect_status "v3 shrink a topic: 400" 400

req DELETE "$C/topics/$T"
expect_status "v3 delete topic: 204" 204
check "v3 delete topic: no body" test -z "$BODY_OUT"
req GET "$C/topics/$T"
expect_status "v3 deleted topic: 404" 404
req DELETE "$C/topics/$T"
expect_status "v3 delete it again: 404" 404
expect_jq "v3 delete it again: 40403" '.error_code == 40403'
