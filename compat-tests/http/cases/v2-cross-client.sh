# Records cross between the HTTP API and a Kafka client (confluent-kafka, murmur2 partitioner):
# produced over HTTP and read by Kafka, produced by Kafka and read by an HTTP consumer instance,
# with keys, values, partitions and offsets equal.
topic="v2-cross-$RANDOM$RANDOM"
"$PY" "$HERE/kafka_side.py" create-topic "$BOOTSTRAP" "$topic" 3

body='{"records":[{"key":"YWxwaGE=","value":"MQ=="},{"key":"YmV0YQ==","value":"Mg=="},{"value":"Mw==","partition":2},{"key":"Z2FtbWE=","value":null}]}'
req POST "/topics/$topic" application/vnd.kafka.binary.v2+json "$body"
expect_status "HTTP produce" 200
jq -c '[.offsets[] | {partition, offset}]' <<<"$BODY_OUT" >"$CASE_WORK/http-offsets.json"
jq -c '[.records[] | {key, value}]' <<<"$body" >"$CASE_WORK/http-records.json"

"$PY" "$HERE/kafka_side.py" consume "$BOOTSTRAP" "$topic" 4 >"$CASE_WORK/kafka-read.json"
check "Kafka reads what HTTP produced, where HTTP said" jq -e -n \
  --slurpfile o "$CASE_WORK/http-offsets.json" --slurpfile r "$CASE_WORK/http-records.json" \
  --slurpfile k "$CASE_WORK/kafka-read.json" '
  [range(0; 4) as $i | ($o[0][$i]) as $at | ($r[0][$i]) as $rec
   | any($k[0][]; .partition == $at.partition and .offset == $at.offset
                  and .key == $rec.key and .value == $rec.value)] | all'

# The Kafka client's murmur2 partitioner agrees with the HTTP API on keyed records.
echo '[{"key":"YWxwaGE=","value":"NA=="},{"key":"YmV0YQ==","value":"NQ=="}]' |
  "$PY" "$HERE/kafka_side.py" produce "$BOOTSTRAP" "$topic" >"$CASE_WORK/kafka-offsets.json"
check "keyed records: the same partitions from Kafka and from HTTP" jq -e -n \
  --slurpfile o "$CASE_WORK/http-offsets.json" --slurpfile k "$CASE_WORK/kafka-offsets.json" \
  '$o[0][0].partition == $k[0][0].partition and $o[0][1].partition == $k[0][1].partition'

# Kafka → HTTP.
topic2="v2-cross-back-$RANDOM$RANDOM"
"$PY" "$HERE/kafka_side.py" create-topic "$BOOTSTRAP" "$topic2" 2
echo '[{"key":"azE=","value":"djE="},{"key":"azI=","value":"djI="},{"value":"djM=","partition":1},{"key":"azQ=","value":null}]' |
  "$PY" "$HERE/kafka_side.py" produce "$BOOTSTRAP" "$topic2" >"$CASE_WORK/kafka-offsets2.json"
group="v2-cross-group-$RANDOM"
req POST "/consumers/$group" application/vnd.kafka.v2+json '{"name":"c","format":"binary","auto.offset.reset":"earliest"}'
req POST "/consumers/$group/instances/c/subscription" application/vnd.kafka.v2+json "{\"topics\":[\"$topic2\"]}"
: >"$CASE_WORK/http-read.jsonl"
for _ in $(seq 1 20); do
  req GET "/consumers/$group/instances/c/records?timeout=1000" -H "Accept: application/vnd.kafka.binary.v2+json"
  jq -c '.[]' <<<"$BODY_OUT" >>"$CASE_WORK/http-read.jsonl" 2>/dev/null
  (($(wc -l <"$CASE_WORK/http-read.jsonl") >= 4)) && break
done
check "HTTP reads what Kafka produced, where Kafka said" jq -e -n -s \
  --slurpfile k "$CASE_WORK/kafka-offsets2.json" \
  --argjson sent '[{"key":"azE=","value":"djE="},{"key":"azI=","value":"djI="},{"key":null,"value":"djM="},{"key":"azQ=","value":null}]' \
  --slurpfile h "$CASE_WORK/http-read.jsonl" '
  [range(0; 4) as $i | ($k[0][$i]) as $at | ($sent[$i]) as $rec
   | any($h[]; .partition == $at.partition and .offset == $at.offset
               and .key == $rec.key and .value == $rec.value and .topic == "'"$topic2"'")] | all'
req DELETE "/consumers/$group/instances/c"
expect_status "delete the instance" 204
