# REST Proxy v2 produce as Confluent's API reference and Redpanda's documentation send it: binary
# (base64) and json embedded formats, to a topic and to a partition, per-record answers, and the
# errors (415, 422 with the field, 42207 without a schema registry, 40401, 40402).
topic="v2-produce-$RANDOM$RANDOM"
"$PY" "$HERE/kafka_side.py" create-topic "$BOOTSTRAP" "$topic" 3
ACCEPT=(-H "Accept: application/vnd.kafka.v2+json, application/vnd.kafka+json, application/json")

req POST "/topics/$topic" application/vnd.kafka.binary.v2+json \
  '{"records":[{"key":"a2V5","value":"Y29uZmx1ZW50"},{"value":"a2Fma2E=","partition":1},{"value":"bG9ncw=="}]}' \
  "${ACCEPT[@]}"
expect_status "binary produce (Confluent's example)" 200
expect_jq "binary produce: one offset per record" '(.offsets | length) == 3 and all(.offsets[]; .error_code == null and .error == null and .offset >= 0)'
expect_jq "binary produce: the explicit partition" '.offsets[1].partition == 1'
expect_jq "binary produce: schema ids null" '.key_schema_id == null and .value_schema_id == null'

req POST "/topics/$topic" application/vnd.kafka.json.v2+json \
  '{"records":[{"key":"somekey","value":{"foo":"bar"}},{"value":["foo","bar"],"partition":1},{"value":53.5}]}' \
  "${ACCEPT[@]}"
expect_status "json produce (Confluent's example)" 200
expect_jq "json produce offsets" '(.offsets | length) == 3 and .offsets[1].partition == 1'

# Redpanda's example: json values to explicit partitions.
req POST "/topics/$topic" application/vnd.kafka.json.v2+json \
  '{"records":[{"value":"Redpanda","partition":0},{"value":"HTTP proxy","partition":1},{"value":"Test event","partition":2}]}'
expect_status "json produce (Redpanda's example)" 200
expect_jq "Redpanda example partitions" '[.offsets[].partition] == [0, 1, 2]'

req POST "/topics/$topic/partitions/2" application/vnd.kafka.binary.v2+json \
  '{"records":[{"key":"a2V5","value":"Y29uZmx1ZW50"},{"value":"a2Fma2E="}]}'
expect_status "produce to a partition" 200
expect_jq "produce to a partition: both there, in order" '[.offsets[].partition] == [2, 2] and .offsets[1].offset == .offsets[0].offset + 1'

# The same key twice: the same partition.
req POST "/topics/$topic" application/vnd.kafka.binary.v2+json \
  '{"records":[{"key":"c2FtZQ==","value":"MQ=="},{"key":"c2FtZQ==","value":"Mg=="}]}'
expect_jq "one key, one partition" '.offsets[0].partition == .offsets[1].partition'

req POST "/topics/$topic" text/plain '{"records":[{"value":"a2Fma2E="}]}'
expect_status "text/plain is 415" 415
expect_jq "415 body" '.error_code == 415'
req POST "/topics/$topic" application/vnd.kafka.binary.v2+json '{"records":[{"value":"%%%"}]}'
expect_status "bad base64 is 422" 422
expect_jq "bad base64 names the field" '.message | contains("records[0].value")'
req POST "/topics/$topic" application/vnd.kafka.binary.v2+json '{"records":[{"value":"a2Fma2E=","partition":"one"}]}'
expect_status "a string partition is 422" 422
expect_jq "422 names the field" '.message | contains("records[0].partition")'
req POST "/topics/$topic" application/vnd.kafka.binary.v2+json '{"records":['
expect_status "cut JSON is 422" 422
req POST "/topics/$topic" application/vnd.kafka.avro.v2+json \
  '{"value_schema":"{\"type\":\"string\"}","records":[{"value":"x"}]}'
expect_status "avro without a schema registry is 422" 422
expect_jq "avro: 42207" '.error_code == 42207'
req POST /topics/no-such-topic-here application/vnd.kafka.binary.v2+json '{"records":[{"value":"a2Fma2E="}]}'
expect_status "unknown topic is 404" 404
expect_jq "unknown topic is 40401" '.error_code == 40401'
req POST "/topics/$topic/partitions/9" application/vnd.kafka.binary.v2+json '{"records":[{"value":"a2Fma2E="}]}'
expect_status "unknown partition is 404" 404
expect_jq "unknown partition is 40402" '.error_code == 40402'
