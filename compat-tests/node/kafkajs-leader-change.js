#!/usr/bin/env node
// Goal: kafkajs 2.2.4 produces and consumes across a forced leader change: on a 3-node cluster
// (started by run.sh with lib/millrace.sh millrace_cluster_start and passed in
// MILLRACE_CLUSTER_NODES="1=127.0.0.1:K1=PID1,...") an idempotent acks=all producer keeps sending
// to a 1-partition RF 3 topic while the partition's leader is killed with kill -9; every send
// resolves, the records sit at consecutive offsets, a consumer group reads each exactly once in
// order, and kafkajs logged only retriable errors.
//
// Last line printed: "kafkajs-leader-change: N passed, M failed".
'use strict'

const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const { Kafka, logLevel } = require('kafkajs')

const RECORDS = 3000
const BATCH = 20
const KILL_AFTER = 1000 // acknowledged records before the leader is killed
const DEADLINE_MS = Number(process.env.KAFKAJS_SCENARIO_TIMEOUT_MS || 90000)
const NAME = 'kafkajs-leader-change'

function parseNodes(spec) {
  const nodes = new Map()
  for (const part of (spec || '').split(',').filter(Boolean)) {
    const [id, addr, pid] = part.split('=')
    if (!addr || !(Number(pid) > 0)) throw new Error(`MILLRACE_CLUSTER_NODES entry ${part}: want ID=HOST:PORT=PID`)
    nodes.set(Number(id), { id: Number(id), addr, pid: Number(pid) })
  }
  return nodes
}

// kafkajs log lines at warn/error level: what the client saw go wrong.
const clientLog = []
const logCreator = () => ({ level, log }) => {
  if (level <= logLevel.WARN) {
    const { message, error, retriable, type } = log
    clientLog.push({ message, error, retriable, type })
  }
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))
async function waitFor(what, timeoutMs, cond) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    try {
      const v = await cond()
      if (v) return v
      last = 'condition false'
    } catch (e) {
      last = e
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}: ${last && last.message ? last.message : last}`)
    await sleep(100)
  }
}

// Errors a producer must never meet across a leader change (not retriable, or a broken sequence).
const NON_RETRIABLE = /OUT_OF_ORDER_SEQUENCE|INVALID_PRODUCER_EPOCH|UNKNOWN_PRODUCER_ID|INVALID_TXN_STATE|CORRUPT_MESSAGE|DUPLICATE_SEQUENCE|KafkaJSNonRetriableError|KafkaJSNumberOfRetriesExceeded/

async function scenario(nodes) {
  const t0 = Date.now()
  const brokers = [...nodes.values()].map(n => n.addr)
  const kafka = new Kafka({
    clientId: 'millrace-compat-kafkajs-leader',
    brokers,
    connectionTimeout: 5000,
    requestTimeout: 30000,
    logCreator,
    logLevel: logLevel.WARN,
    // The leader's leaderships move when the controller fences it (broker.session.timeout.ms,
    // 9 s): retry for longer than that (~20 s in all).
    retry: { retries: 10, initialRetryTime: 200, maxRetryTime: 3000 },
  })
  const cleanups = []
  try {
    const admin = kafka.admin()
    await admin.connect()
    cleanups.push(() => admin.disconnect())
    const topic = `kafkajs-leader-${crypto.randomBytes(6).toString('hex')}`
    const groupId = `${topic}-group`
    assert.equal(await admin.createTopics({
      topics: [{ topic, numPartitions: 1, replicationFactor: 3, configEntries: [{ name: 'min.insync.replicas', value: '2' }] }],
      waitForLeaders: true,
      timeout: 30000,
    }), true, 'createTopics')
    const partition0 = async () => (await admin.fetchTopicMetadata({ topics: [topic] })).topics[0].partitions.find(p => p.partitionId === 0)
    const oldLeader = (await waitFor('a leader with a full ISR', 30000, async () => {
      const p = await partition0()
      return p && p.leader >= 0 && p.isr.length === 3 ? p : null
    })).leader
    const victim = nodes.get(oldLeader)
    assert.ok(victim, `leader ${oldLeader} is not one of the cluster's nodes`)
    // The group's coordinator needs __consumer_offsets, created on the first FindCoordinator only
    // while all three brokers are alive (offsets.topic.replication.factor 3): ask now, until the
    // coordinator answers (COORDINATOR_LOAD_IN_PROGRESS meanwhile, as on Kafka).
    await waitFor('the group coordinator', 30000, async () => {
      await admin.fetchOffsets({ groupId, topics: [topic] })
      return true
    })

    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false })
    await producer.connect()
    cleanups.push(() => producer.disconnect())
    let acked = 0
    let killedAt = 0
    const offsets = []
    for (let i = 0; i < RECORDS; i += BATCH) {
      const messages = []
      for (let j = i; j < i + BATCH; j++) messages.push({ value: String(j) })
      // One send at a time (idempotent kafkajs); the kill lands between or inside sends.
      const meta = await producer.send({ topic, acks: -1, messages: messages.map(m => ({ ...m, partition: 0 })) })
      offsets.push(Number(meta[0].baseOffset))
      acked += BATCH
      if (!killedAt && acked >= KILL_AFTER) {
        killedAt = Date.now()
        process.kill(victim.pid, 'SIGKILL')
      }
    }
    const allAcked = Date.now()
    offsets.forEach((o, k) => assert.equal(o, k * BATCH, `send ${k} acknowledged at base offset ${o} (duplicated or reordered)`))
    const newLeader = (await waitFor('a new leader', 30000, async () => {
      const p = await partition0()
      return p && p.leader >= 0 && p.leader !== oldLeader ? p : null
    })).leader

    const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000, maxWaitTimeInMs: 500 })
    await consumer.connect()
    cleanups.push(() => consumer.disconnect())
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    const got = []
    await consumer.run({ eachMessage: async ({ message }) => { got.push([Number(message.offset), message.value.toString()]) } })
    await waitFor(`${RECORDS} records consumed`, 45000, async () => got.length >= RECORDS)
    await sleep(500) // anything extra (a duplicate) would arrive now
    await consumer.stop()
    assert.equal(got.length, RECORDS, `consumed ${got.length} records, want ${RECORDS}`)
    got.forEach(([o, v], k) => {
      assert.equal(o, k, `record ${k}: offset ${o}`)
      assert.equal(v, String(k), `record ${k}: value ${v} (lost, duplicated or reordered)`)
    })

    const errors = clientLog.filter(l => l.error)
    const distinct = [...new Set(errors.map(l => `${l.message}: ${l.error}`))]
    console.log(`${NAME}: leader ${oldLeader} (pid ${victim.pid}) killed after ${KILL_AFTER} acknowledged records; ` +
      `all ${RECORDS} acknowledged ${((allAcked - killedAt) / 1000).toFixed(1)}s after the kill; new leader ${newLeader}; ` +
      `${errors.length} logged errors, distinct: ${JSON.stringify(distinct.slice(0, 6))}`)
    const bad = errors.filter(l => NON_RETRIABLE.test(`${l.error} ${l.type}`) || l.retriable === false)
    assert.equal(bad.length, 0, `non-retriable errors: ${JSON.stringify(bad.slice(0, 3))}`)
    console.log(`${NAME}: ${RECORDS} records read back exactly once, in order (${((Date.now() - t0) / 1000).toFixed(1)}s)`)
  } finally {
    while (cleanups.length) {
      try { await cleanups.pop()() } catch (_) { /* ignore */ }
    }
  }
}

async function main() {
  let passed = 0
  let failed = 0
  let timer
  try {
    const nodes = parseNodes(process.env.MILLRACE_CLUSTER_NODES)
    if (nodes.size < 3) throw new Error('MILLRACE_CLUSTER_NODES names fewer than 3 nodes (run compat-tests/node/run.sh)')
    await Promise.race([
      scenario(nodes),
      new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timed out after ${DEADLINE_MS} ms`)), DEADLINE_MS) }),
    ])
    console.log(`PASS            ${NAME}: produce/consume round trip across a kill -9 of the leader`)
    passed++
  } catch (e) {
    console.log(`FAIL            ${NAME}: ${(e && (e.stack || e.message)) || e}`)
    failed++
  } finally {
    clearTimeout(timer)
  }
  console.log(`${NAME}: ${passed} passed, ${failed} failed`)
  process.exit(failed ? 1 : 0)
}
main()
