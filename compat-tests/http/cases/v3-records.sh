# REST v3 produce as Confluent's v3 reference sends it: single records (BINARY, JSON, STRING keys
# and values, headers, partition_id, timestamp) and the streaming form (records back to back with
# Transfer-Encoding: chunked, one delivery report per record); a Kafka client reads the records
# with their headers, partitions and offsets.
topic="v3-records-$RANDOM$RANDOM"
"$PY" "$HERE/kafka_side.py" create-topic "$BOOTSTRAP" "$topic" 2
cluster="$(curl -sS --max-time 10 "$BASE/v3/clusters" | jq -r '.data[0].cluster_id // empty' 2>/dev/null)"
if [[ -z "$cluster" ]]; then
  # Without the v3 cluster paths, the ready line of the broker names the cluster.
  cluster="$(grep -o 'cluster [A-Za-z0-9_-]*' "$MILLRACE_WORKDIR/broker.stdout" 2>/dev/null | head -1 | cut -d' ' -f2)"
fi
check "the cluster id is known" test -n "$cluster"
path="/v3/clusters/$cluster/topics/$topic/records"

req POST "$path" application/json \
  '{"partition_id":1,"headers":[{"name":"Header-1","value":"SGVhZGVyLTE="},{"name":"Header-2","value":"SGVhZGVyLTI="}],"key":{"type":"BINARY","data":"Zm9vYmFy"},"value":{"type":"JSON","data":{"foo":"bar"}},"timestamp":"2021-02-05T19:14:42Z"}'
expect_status "v3 produce (Confluent's binary_and_json example)" 200
expect_jq "v3 delivery report" ".error_code == 200 and .cluster_id == \"$cluster\" and .topic_name == \"$topic\" and .partition_id == 1 and .offset == 0"
expect_jq "v3 report: types and sizes" '.key.type == "BINARY" and .key.size == 6 and .value.type == "JSON" and .value.size == 13'
expect_jq "v3 report: timestamp" '.timestamp | startswith("2021-02-05T19:14:42")'

req POST "$path" application/json '{"value":{"type":"STRING","data":"My message"}}'
expect_status "v3 produce (string example)" 200
req POST "$path" application/json '{"value":{"type":"BINARY","data":1}}'
expect_status "v3 bad binary data is 400" 400
expect_jq "v3 bad binary names the data" '.error_code == 400 and (.message | contains("is not a base64 string"))'
req POST "$path" application/json '{"key":{"subject_name_strategy":"TOPIC_NAME","schema_id":1,"data":1000},"value":{"schema_version":1,"data":{"foo":"bar"}}}'
expect_status "v3 schema records without a schema registry are 422" 422
expect_jq "v3 schema: 42207" '.error_code == 42207'
req POST "/v3/clusters/no-such-cluster/topics/$topic/records" application/json '{"value":{"type":"STRING","data":"x"}}'
expect_status "v3 unknown cluster is 404" 404
req POST "/v3/clusters/$cluster/topics/no-such-topic-here/records" application/json '{"value":{"type":"STRING","data":"x"}}'
expect_status "v3 unknown topic is 404" 404

# Streaming, as Confluent's streaming example sends it: concatenated JSON over a chunked body.
printf '%s\n%s\n%s\n' \
  '{"partition_id":0,"value":{"type":"STRING","data":"s1"}}' \
  '{"partition_id":0,"value":{"type":"BINARY","data":"@@"}}' \
  '{"partition_id":0,"value":{"type":"STRING","data":"s3"}}' >"$CASE_WORK/stream.json"
STATUS="$(curl -sS -o "$CASE_WORK/stream.out" -w '%{http_code}' --max-time 30 -X POST \
  -H "Content-Type: application/json" -H "Transfer-Encoding: chunked" \
  --data-binary @"$CASE_WORK/stream.json" "$BASE$path")"
BODY_OUT="$(jq -s -c . "$CASE_WORK/stream.out" 2>/dev/null || cat "$CASE_WORK/stream.out")"
expect_status "v3 streaming produce" 200
expect_jq "v3 streaming: one report per record, in order" 'length == 3 and .[0].error_code == 200 and .[1].error_code == 400 and .[2].error_code == 200 and .[2].offset == .[0].offset + 1'
check "v3 streaming: each report on its own line" test "$(grep -c . "$CASE_WORK/stream.out")" == 3

"$PY" "$HERE/kafka_side.py" consume "$BOOTSTRAP" "$topic" 4 >"$CASE_WORK/kafka-read.json"
BODY_OUT="$(cat "$CASE_WORK/kafka-read.json")"
expect_jq "Kafka reads the v3 record with its headers" 'any(.[]; .partition == 1 and .offset == 0 and .key == "Zm9vYmFy" and .value == ("{\"foo\":\"bar\"}" | @base64) and .headers == [["Header-1","SGVhZGVyLTE="],["Header-2","SGVhZGVyLTI="]])'
expect_jq "Kafka reads the streamed records" '[.[] | select(.partition == 0) | .value | @base64d | select(startswith("s"))] == ["s1", "s3"]'
