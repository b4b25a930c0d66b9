# REST Proxy v2 metadata: topics, partitions, offsets, brokers — the requests of Confluent's API
# reference (Accept as it writes it) and Redpanda's pandaproxy documentation.
topic="v2-topics-$RANDOM$RANDOM"
"$PY" "$HERE/kafka_side.py" create-topic "$BOOTSTRAP" "$topic" 2

ACCEPT=(-H "Accept: application/vnd.kafka.v2+json")

req GET /topics "${ACCEPT[@]}"
expect_status "GET /topics" 200
expect_jq "GET /topics lists the topic" "index(\"$topic\") != null"
expect_jq "GET /topics leaves out internal topics" 'all(.[]; startswith("__") | not)'

req GET "/topics/$topic" "${ACCEPT[@]}"
expect_status "GET /topics/{t}" 200
expect_jq "GET /topics/{t} name" ".name == \"$topic\""
expect_jq "GET /topics/{t} configs" '.configs["cleanup.policy"] == "delete" and (.configs | has("retention.ms"))'
expect_jq "GET /topics/{t} partitions" '(.partitions | length) == 2 and (.partitions[0] | .partition == 0 and .leader >= 0)'
expect_jq "GET /topics/{t} replicas" '.partitions[0].replicas[0] | has("broker") and .leader == true and .in_sync == true'

req GET "/topics/$topic/partitions" "${ACCEPT[@]}"
expect_status "GET /topics/{t}/partitions" 200
expect_jq "GET /topics/{t}/partitions lists both" 'map(.partition) == [0, 1]'

req GET "/topics/$topic/partitions/1" "${ACCEPT[@]}"
expect_status "GET /topics/{t}/partitions/{p}" 200
expect_jq "GET /topics/{t}/partitions/{p} shape" '.partition == 1 and (.replicas | length) == 1'

req POST "/topics/$topic/partitions/1" application/vnd.kafka.binary.v2+json \
  '{"records":[{"key":"a2V5","value":"Y29uZmx1ZW50"},{"value":"a2Fma2E="}]}'
expect_status "POST /topics/{t}/partitions/{p} (Confluent's example)" 200

req GET "/topics/$topic/partitions/1/offsets" "${ACCEPT[@]}"
expect_status "GET /topics/{t}/partitions/{p}/offsets" 200
expect_jq "offsets: beginning and end" '.beginning_offset == 0 and .end_offset == 2'

# Redpanda's direct partition read.
req GET "/topics/$topic/partitions/1/records?offset=0&timeout=1000&max_bytes=100000" \
  -H "Accept: application/vnd.kafka.binary.v2+json"
expect_status "GET /topics/{t}/partitions/{p}/records (Redpanda)" 200
expect_jq "partition records" 'length == 2 and .[0].key == "a2V5" and .[0].value == "Y29uZmx1ZW50" and .[1].offset == 1'

req GET /brokers "${ACCEPT[@]}"
expect_status "GET /brokers" 200
expect_jq "GET /brokers ids" '.brokers | length >= 1 and all(.[]; type == "number")'

req GET /topics/no-such-topic-here "${ACCEPT[@]}"
expect_status "unknown topic is 404" 404
expect_jq "unknown topic is 40401" '.error_code == 40401'
req GET "/topics/$topic/partitions/7" "${ACCEPT[@]}"
expect_status "unknown partition is 404" 404
expect_jq "unknown partition is 40402" '.error_code == 40402'
req GET "/topics/$topic/partitions/7/offsets" "${ACCEPT[@]}"
expect_jq "unknown partition offsets is 40402" '.error_code == 40402'
