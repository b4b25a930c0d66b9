# REST v3: clusters, brokers and broker configs, as Confluent's v3 documentation shows the requests
# (curl -X GET -H "Content-Type: application/json" http://localhost:8082/v3/clusters …).

JSON=application/json

req GET /v3/clusters -H "Content-Type: $JSON"
expect_status "v3 list clusters: 200" 200
expect_jq "v3 list clusters: one KafkaCluster" \
  '.kind == "KafkaClusterList" and (.data | length) == 1 and .data[0].kind == "KafkaCluster"'
expect_jq "v3 list clusters: self link and CRN" \
  '(.metadata.self | endswith("/v3/clusters")) and (.data[0].metadata.resource_name == "crn:///kafka=" + .data[0].cluster_id)'
CLUSTER="$(jq -r '.data[0].cluster_id' <<<"$BODY_OUT")"

req GET "/v3/clusters/$CLUSTER"
expect_status "v3 get cluster: 200" 200
expect_jq "v3 get cluster: related links" \
  '.cluster_id == "'"$CLUSTER"'" and (.brokers.related | endswith("/v3/clusters/'"$CLUSTER"'/brokers")) and (.topics.related | endswith("/topics")) and (.consumer_groups.related | endswith("/consumer-groups")) and (.controller.related | test("/brokers/[0-9]+$"))'

req GET /v3/clusters/no-such-cluster
expect_status "v3 unknown cluster: 404" 404
expect_jq "v3 unknown cluster: error_code 404 naming it" \
  '.error_code == 404 and (.message | contains("no-such-cluster"))'

req GET /v3/clusters/no-such-cluster/topics
expect_status "v3 unknown cluster under a sub-path: 404" 404

req GET "/v3/clusters/$CLUSTER/brokers"
expect_status "v3 list brokers: 200" 200
expect_jq "v3 list brokers: the broker with its Kafka listener" \
  '.kind == "KafkaBrokerList" and (.data | length) == 1 and .data[0].kind == "KafkaBroker" and .data[0].host == "127.0.0.1" and (.data[0].port | tostring) == "'"${BOOTSTRAP##*:}"'"'
BROKER="$(jq -r '.data[0].broker_id' <<<"$BODY_OUT")"

req GET "/v3/clusters/$CLUSTER/brokers/$BROKER"
expect_status "v3 get broker: 200" 200
expect_jq "v3 get broker: links to its configs" \
  '.broker_id == '"$BROKER"' and (.configs.related | endswith("/brokers/'"$BROKER"'/configs"))'

req GET "/v3/clusters/$CLUSTER/brokers/9999"
expect_status "v3 unknown broker: 404" 404
req GET "/v3/clusters/$CLUSTER/brokers/not-a-number"
expect_status "v3 broker id not a number: 404" 404

req GET "/v3/clusters/$CLUSTER/brokers/$BROKER/configs"
expect_status "v3 list broker configs: 200" 200
expect_jq "v3 list broker configs: Kafka's names, sources and synonyms" \
  '.kind == "KafkaBrokerConfigList" and (.data | length) > 10 and all(.data[]; .kind == "KafkaBrokerConfig" and .broker_id == '"$BROKER"' and (.synonyms | type) == "array") and any(.data[]; .name == "num.partitions")'

req GET "/v3/clusters/$CLUSTER/brokers/$BROKER/configs/log.retention.hours"
expect_status "v3 get broker config: 200" 200
expect_jq "v3 get broker config: value and flags" \
  '.name == "log.retention.hours" and .value == "168" and .is_default == true and .source == "DEFAULT_CONFIG" and .is_sensitive == false'

req GET "/v3/clusters/$CLUSTER/brokers/$BROKER/configs/no.such.config"
expect_status "v3 unknown broker config: 404" 404

req PUT "/v3/clusters/$CLUSTER/brokers/$BROKER/configs/log.retention.hours" "$JSON" '{"value":"1"}'
expect_status "v3 broker configs are read only: 405" 405
expect_jq "v3 405 body" '.error_code == 405'

req GET "/v3/clusters/$CLUSTER/acls"
expect_status "v3 ACL paths are not served: 404" 404
