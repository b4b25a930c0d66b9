# REST v3: a topic's configs — list, get, update (PUT), reset (DELETE) and the batch
# `configs:alter` — with the requests of Confluent's v3 documentation; what is set is what a
# Kafka client's DescribeConfigs reads.

JSON=application/json
req GET /v3/clusters
CLUSTER="$(jq -r '.data[0].cluster_id' <<<"$BODY_OUT")"
C="/v3/clusters/$CLUSTER"
T="v3-configs-$$"

req POST "$C/topics" "$JSON" '{"topic_name":"'"$T"'","partitions_count":1}'
expect_status "v3 configs: topic created" 201

req GET "$C/topics/$T/configs"
expect_status "v3 list topic configs: 200" 200
expect_jq "v3 list topic configs: every config, sorted" \
  '.kind == "KafkaTopicConfigList" and (.data | length) > 10 and ([.data[].name] == ([.data[].name] | sort)) and all(.data[]; .kind == "KafkaTopicConfig" and .topic_name == "'"$T"'")'

req GET "$C/topics/$T/configs/retention.ms"
expect_status "v3 get topic config: 200" 200
expect_jq "v3 get topic config: a default" \
  '.name == "retention.ms" and .is_default == true and .source == "DEFAULT_CONFIG" and .metadata.resource_name == "crn:///kafka='"$CLUSTER"'/topic='"$T"'/config=retention.ms"'

req PUT "$C/topics/$T/configs/retention.ms" "$JSON" '{"value":"86400000"}'
expect_status "v3 update topic config: 204" 204
req GET "$C/topics/$T/configs/retention.ms"
expect_jq "v3 update topic config: read back as a topic override" \
  '.value == "86400000" and .is_default == false and .source == "DYNAMIC_TOPIC_CONFIG" and any(.synonyms[]; .source == "DYNAMIC_TOPIC_CONFIG" and .value == "86400000")'
check "v3 update topic config: seen by DescribeConfigs" "$PY" - "$BOOTSTRAP" "$T" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, ConfigResource
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
res = ConfigResource(ConfigResource.Type.TOPIC, sys.argv[2])
configs = admin.describe_configs([res])[res].result(timeout=10)
assert configs["retention.ms"].value == "86400000", configs["retention.ms"]
PY

req PUT "$C/topics/$T/configs/retention.ms" "$JSON" '{"value":"soon"}'
expect_status "v3 update with an invalid value: 400" 400
expect_jq "v3 update with an invalid value: 40002" '.error_code == 40002'

req PUT "$C/topics/$T/configs/no.such.config" "$JSON" '{"value":"1"}'
expect_status "v3 update an unknown config: 404" 404

req PUT "$C/topics/$T/configs/retention.ms" "$JSON" '{"value":5}'
expect_status "v3 update with a number for a string: 400" 400
expect_jq "v3 update with a number for a string: the field is named" '.message | contains("value")'

req DELETE "$C/topics/$T/configs/retention.ms"
expect_status "v3 reset topic config: 204" 204
req GET "$C/topics/$T/configs/retention.ms"
expect_jq "v3 reset topic config: default again" '.is_default == true and .value == "604800000"'

req POST "$C/topics/$T/configs:alter" "$JSON" \
  '{"data":[{"name":"cleanup.policy","value":"compact"},{"name":"compression.type","value":"gzip"}]}'
expect_status "v3 batch alter: 204" 204
req GET "$C/topics/$T/configs"
expect_jq "v3 batch alter: both set" \
  'any(.data[]; .name == "cleanup.policy" and .value == "compact") and any(.data[]; .name == "compression.type" and .value == "gzip")'

req POST "$C/topics/$T/configs:alter" "$JSON" \
  '{"data":[{"name":"cleanup.policy","operation":"DELETE"},{"name":"compression.type","value":"lz4"}],"validate_only":true}'
expect_status "v3 batch alter, validate_only: 204" 204
req GET "$C/topics/$T/configs/compression.type"
expect_jq "v3 batch alter, validate_only: nothing changed" '.value == "gzip"'

req POST "$C/topics/$T/configs:alter" "$JSON" \
  '{"data":[{"name":"cleanup.policy","operation":"DELETE"},{"name":"compression.type","value":"lz4"}]}'
expect_status "v3 batch alter with a DELETE: 204" 204
req GET "$C/topics/$T/configs"
expect_jq "v3 batch alter with a DELETE: reset and set" \
  'any(.data[]; .name == "cleanup.policy" and .value == "delete" and .is_default) and any(.data[]; .name == "compression.type" and .value == "lz4")'

req POST "$C/topics/$T/configs:alter" "$JSON" '{"data":[{"name":"no.such.config","value":"1"},{"name":"retention.ms","value":"1000"}]}'
expect_status "v3 batch alter with an unknown config: 404" 404
req GET "$C/topics/$T/configs/retention.ms"
expect_jq "v3 batch alter with an unknown config: nothing applied" '.is_default == true'

req POST "$C/topics/$T/configs:alter" "$JSON" '{"data":[{"name":"retention.ms","operation":"APPEND"}]}'
expect_status "v3 batch alter with an unknown operation: 400" 400

req POST "$C/topics/$T/configs:alter" "$JSON" '{"validate_only":true}'
expect_status "v3 batch alter without data: 400" 400

req GET "$C/topics/no-such-topic-$$/configs"
expect_status "v3 configs of an unknown topic: 404" 404
expect_jq "v3 configs of an unknown topic: 40403" '.error_code == 40403'

req DELETE "$C/topics/$T"
expect_status "v3 configs: topic deleted" 204
