# REST Proxy v2 consumer instances, request by request as Confluent's API reference shows them
# (binary instance, subscribe, records, commit, committed, seeks, assignments, delete) and as
# Redpanda's documentation does (json instance with string settings, `partitions` in a commit).
topic="v2-consumer-$RANDOM$RANDOM"
group="v2-group-$RANDOM$RANDOM"
"$PY" "$HERE/kafka_side.py" create-topic "$BOOTSTRAP" "$topic" 2
V2=application/vnd.kafka.v2+json

req POST "/topics/$topic/partitions/0" application/vnd.kafka.binary.v2+json \
  '{"records":[{"key":"a2V5","value":"Y29uZmx1ZW50"},{"value":"a2Fma2E="},{"value":"bG9ncw=="}]}'
expect_status "produce three records" 200

req POST "/consumers/$group/" "$V2" \
  '{"name":"my_consumer","format":"binary","auto.offset.reset":"earliest","auto.commit.enable":"false"}'
expect_status "create an instance (Confluent's example, trailing slash)" 200
expect_jq "create: instance_id" '.instance_id == "my_consumer"'
expect_jq "create: base_uri" ".base_uri | endswith(\"/consumers/$group/instances/my_consumer\")"
inst="/consumers/$group/instances/my_consumer"

req POST "/consumers/$group" "$V2" '{"name":"my_consumer","format":"binary"}'
expect_status "the same name again is 409" 409
expect_jq "409 is 40902" '.error_code == 40902'

req POST "$inst/subscription" "$V2" "{\"topics\":[\"$topic\"]}"
expect_status "subscribe" 204
req GET "$inst/subscription" -H "Accept: $V2"
expect_jq "subscription lists the topic" ".topics == [\"$topic\"]"

got=0
for _ in $(seq 1 20); do
  req GET "$inst/records?timeout=3000&max_bytes=300000" -H "Accept: application/vnd.kafka.binary.v2+json"
  [[ "$STATUS" == 200 ]] || break
  got=$((got + $(jq 'length' <<<"$BODY_OUT")))
  ((got >= 3)) && break
done
check "records: all three read" test "$got" -ge 3
expect_status "records answer 200" 200
req GET "$inst/records" -H "Accept: application/vnd.kafka.json.v2+json"
expect_status "records in another format is 406" 406
expect_jq "406 is 40601" '.error_code == 40601'

req GET "$inst/assignments" -H "Accept: $V2"
expect_jq "the group assigned both partitions" '.partitions | length == 2'

req POST "$inst/offsets" "$V2" "{\"offsets\":[{\"topic\":\"$topic\",\"partition\":0,\"offset\":1}]}"
expect_status "commit offsets" 200
req GET "$inst/offsets" "$V2" "{\"partitions\":[{\"topic\":\"$topic\",\"partition\":0},{\"topic\":\"$topic\",\"partition\":1}]}"
expect_status "committed offsets" 200
expect_jq "committed: offset + 1, as Confluent commits" ".offsets == [{\"topic\":\"$topic\",\"partition\":0,\"offset\":2,\"metadata\":\"\"}]"

req POST "$inst/positions/beginning" "$V2" "{\"partitions\":[{\"topic\":\"$topic\",\"partition\":0}]}"
expect_status "seek to beginning" 204
req GET "$inst/records?timeout=3000" -H "Accept: application/vnd.kafka.binary.v2+json"
expect_jq "after seek to beginning: offset 0 again" '.[0].offset == 0 and .[0].key == "a2V5" and .[0].value == "Y29uZmx1ZW50"'
req POST "$inst/positions" "$V2" "{\"offsets\":[{\"topic\":\"$topic\",\"partition\":0,\"offset\":2}]}"
expect_status "seek to an offset" 204
req GET "$inst/records?timeout=3000" -H "Accept: application/vnd.kafka.binary.v2+json"
expect_jq "after seek: offset 2" '.[0].offset == 2 and .[0].value == "bG9ncw=="'
req POST "$inst/positions/end" "$V2" "{\"partitions\":[{\"topic\":\"$topic\",\"partition\":0}]}"
expect_status "seek to end" 204
req POST "$inst/positions" "$V2" "{\"offsets\":[{\"topic\":\"other\",\"partition\":0,\"offset\":2}]}"
expect_status "seek on a partition not assigned is 409" 409
expect_jq "409 is 40903" '.error_code == 40903'
req POST "$inst/assignments" "$V2" "{\"partitions\":[{\"topic\":\"$topic\",\"partition\":0}]}"
expect_status "assign while subscribed is 409" 409

req DELETE "$inst/subscription" -H "Content-Type: $V2"
expect_status "unsubscribe" 204
req POST "$inst/assignments" "$V2" "{\"partitions\":[{\"topic\":\"$topic\",\"partition\":0},{\"topic\":\"$topic\",\"partition\":1}]}"
expect_status "assign partitions" 204
req GET "$inst/assignments" -H "Accept: $V2"
expect_jq "assignments" ".partitions == [{\"topic\":\"$topic\",\"partition\":0},{\"topic\":\"$topic\",\"partition\":1}]"

req DELETE "$inst" -H "Content-Type: $V2"
expect_status "delete the instance" 204
req GET "$inst/records" -H "Accept: application/vnd.kafka.binary.v2+json"
expect_status "a deleted instance is 404" 404
expect_jq "a deleted instance is 40403" '.error_code == 40403'

# Redpanda's flow: settings as strings, a json instance, `partitions` in the commit (a topic of
# JSON values: a json instance cannot read the binary records above).
topic="v2-consumer-json-$RANDOM$RANDOM"
"$PY" "$HERE/kafka_side.py" create-topic "$BOOTSTRAP" "$topic" 2
req POST "/topics/$topic/partitions/1" application/vnd.kafka.json.v2+json \
  '{"records":[{"value":"Redpanda"},{"value":{"HTTP":"proxy"}}]}'
req POST "/consumers/rp-$group" "$V2" \
  '{"format":"json","name":"test_consumer","auto.offset.reset":"earliest","auto.commit.enable":"false","fetch.min.bytes":"1","consumer.request.timeout.ms":"10000"}'
expect_status "create a json instance (Redpanda's example)" 200
rp="/consumers/rp-$group/instances/test_consumer"
req POST "$rp/subscription" "$V2" "{\"topics\":[\"$topic\"]}"
expect_status "Redpanda: subscribe" 204
json_values=""
for _ in $(seq 1 20); do
  req GET "$rp/records?timeout=1000&max_bytes=100000" -H "Accept: application/vnd.kafka.json.v2+json"
  json_values+="$(jq -c '.[] | select(.partition == 1) | .value' <<<"$BODY_OUT" 2>/dev/null | tr -d '\n')"
  [[ "$json_values" == *proxy* ]] && break
done
check "Redpanda: json values read back as JSON" test "$json_values" == '"Redpanda"{"HTTP":"proxy"}'
req POST "$rp/offsets" "$V2" "{\"partitions\":[{\"topic\":\"$topic\",\"partition\":1,\"offset\":1}]}"
expect_status "Redpanda: commit with partitions" 200
req DELETE "$rp" -H "Content-Type: $V2"
expect_status "Redpanda: delete" 204
