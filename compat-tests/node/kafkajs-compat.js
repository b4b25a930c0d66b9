#!/usr/bin/env node
// kafkajs 2.2.4 against one Millrace broker (MILLRACE_ADDR=127.0.0.1:PORT),
// the same scenarios as compat-tests/go: metadata, round trip (keys, headers,
// timestamps), gzip/snappy/lz4/zstd, consumer group commit + resume, admin
// create/describe/delete topics, idempotent produce.
//
// Each scenario ends as PASS, FAIL (with the cause) or NOT EXPRESSIBLE (the
// client cannot do it; never counted as passed). Last line printed:
// "N passed, M failed". Usage: node kafkajs-compat.js [name-substring ...]
'use strict'

const assert = require('node:assert/strict')
const crypto = require('node:crypto')
const { Kafka, CompressionTypes, CompressionCodecs, ConfigResourceTypes, logLevel } = require('kafkajs')

const ADDR = process.env.MILLRACE_ADDR
if (!ADDR) {
  console.error('MILLRACE_ADDR is not set (run compat-tests/node/run.sh)')
  console.log('kafkajs: 0 passed, 1 failed')
  process.exit(1)
}
const PORT = Number(ADDR.split(':').pop())
const SCENARIO_TIMEOUT_MS = Number(process.env.KAFKAJS_SCENARIO_TIMEOUT_MS || 90000)
const OP_TIMEOUT_MS = 60000

// ---- codecs: count compress/decompress calls, to prove that batches went
// out compressed and came back compressed (stored as sent) ----------------
const codecCalls = {}
function countingCodec(name, factory) {
  codecCalls[name] = { compress: 0, decompress: 0 }
  return () => {
    const impl = factory()
    return {
      async compress(encoder) { codecCalls[name].compress++; return impl.compress(encoder) },
      async decompress(buffer) { codecCalls[name].decompress++; return impl.decompress(buffer) },
    }
  }
}
const builtinGzip = CompressionCodecs[CompressionTypes.GZIP]
CompressionCodecs[CompressionTypes.GZIP] = countingCodec('gzip', builtinGzip)
// kafkajs 2.2.4 has only gzip built in; snappy, lz4 and zstd come from the
// codec plugins its documentation names (lz4 and zstd are native addons that
// run.sh builds). A plugin that cannot be loaded makes its scenario
// NOT EXPRESSIBLE, with the reason.
const pluginError = {}
function plugin(name, type, load) {
  try {
    CompressionCodecs[type] = countingCodec(name, load())
  } catch (e) {
    pluginError[name] = `${e.message.split('\n')[0]}`
  }
}
plugin('snappy', CompressionTypes.Snappy, () => require('kafkajs-snappy'))
plugin('lz4', CompressionTypes.LZ4, () => { const LZ4 = require('kafkajs-lz4'); return new LZ4().codec })
plugin('zstd', CompressionTypes.ZSTD, () => require('@kafkajs/zstd')())

// ---- helpers -------------------------------------------------------------
const kafka = new Kafka({
  clientId: 'millrace-compat-kafkajs',
  brokers: [ADDR],
  connectionTimeout: 10000,
  requestTimeout: 30000,
  logLevel: { debug: logLevel.DEBUG, error: logLevel.ERROR }[process.env.KAFKAJS_LOG] ?? logLevel.NOTHING,
  retry: { retries: 5, initialRetryTime: 200, maxRetryTime: 2000 },
})

const uniqueTopic = prefix => `${prefix}-${crypto.randomBytes(6).toString('hex')}`
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))
const cleanups = []
const onCleanup = fn => cleanups.push(fn)

function withTimeout(promise, ms, what) {
  let timer
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms)
    }),
  ]).finally(() => clearTimeout(timer))
}

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

async function newAdmin() {
  const admin = kafka.admin()
  await admin.connect()
  onCleanup(() => admin.disconnect())
  return admin
}

async function createTopic(admin, topic, numPartitions, configEntries) {
  const created = await admin.createTopics({
    topics: [{ topic, numPartitions, replicationFactor: 1, configEntries }],
    waitForLeaders: true,
    timeout: 30000,
  })
  assert.equal(created, true, `createTopics(${topic}) returned ${created}`)
  await waitFor(`${topic} with leaders`, 30000, async () => {
    const md = await admin.fetchTopicMetadata({ topics: [topic] })
    const t = md.topics[0]
    return t.partitions.length === numPartitions && t.partitions.every(p => p.leader >= 0)
  })
}

async function newProducer(opts = {}) {
  const producer = kafka.producer({ allowAutoTopicCreation: false, ...opts })
  await producer.connect()
  onCleanup(() => producer.disconnect())
  return producer
}

// consumeGroup: a kafkajs consumer in `groupId` (kafkajs has no group-less
// assign(); every consume goes through JoinGroup/SyncGroup) that collects
// `want` messages, then optionally commits, then leaves the group.
async function consumeGroup({ groupId, topic, want, commit, fromBeginning = true, whileRunning }) {
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: 10000,
    rebalanceTimeout: 20000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 500,
    retry: { retries: 3 },
  })
  const got = []
  let crashed = null
  consumer.on(consumer.events.CRASH, e => { crashed = e.payload.error })
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning })
    let resolveDone
    const done = new Promise(resolve => { resolveDone = resolve })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        got.push({ partition, ...message })
        if (got.length >= want) resolveDone()
      },
    })
    await withTimeout(
      Promise.race([done, waitFor('no consumer crash', OP_TIMEOUT_MS + 1000, async () => crashed).then(e => { throw e })]),
      OP_TIMEOUT_MS,
      `group ${groupId}: ${want} messages (got ${got.length})`,
    )
    if (commit) await consumer.commitOffsets(commit)
    if (whileRunning) await whileRunning()
  } finally {
    await consumer.disconnect() // LeaveGroup
  }
  return got
}

// Everything in a fresh topic, read back through a throw-away group.
async function consumeAll(topic, want) {
  return consumeGroup({ groupId: uniqueTopic('kafkajs-read'), topic, want })
}

function sameNullable(got, want, what) {
  if (want === null) {
    assert.equal(got, null, `${what}: got ${got === null ? 'null' : `${got.length} bytes`}, want null`)
  } else {
    assert.ok(got !== null, `${what}: got null, want ${want.length} bytes`)
    assert.ok(Buffer.from(want).equals(got), `${what}: bytes differ (got ${got.length} bytes, want ${Buffer.from(want).length})`)
  }
}

const codecValue = (codec, i) => `${String(i).padStart(6, '0')} ${`millrace compression test ${codec} `.repeat(12)}`
const CODEC_RECORDS = 2000

// ---- scenarios -------------------------------------------------------------
const scenarios = []
const scenario = (name, fn) => scenarios.push({ name, fn })
class NotExpressible extends Error {}

scenario('metadata', async () => {
  const admin = await newAdmin()
  const topic = uniqueTopic('kafkajs-meta')
  await createTopic(admin, topic, 3)
  const cluster = await admin.describeCluster()
  assert.equal(cluster.brokers.length, 1, `brokers ${JSON.stringify(cluster.brokers)}`)
  const b = cluster.brokers[0]
  assert.equal(b.host, '127.0.0.1')
  assert.equal(b.port, PORT)
  assert.equal(cluster.controller, b.nodeId, `controller ${cluster.controller}, broker ${b.nodeId}`)
  assert.ok(cluster.clusterId, 'cluster id is empty')
  const md = await admin.fetchTopicMetadata({ topics: [topic] })
  assert.equal(md.topics[0].partitions.length, 3)
  for (const p of md.topics[0].partitions) {
    assert.equal(p.partitionErrorCode, 0, `partition ${p.partitionId} error ${p.partitionErrorCode}`)
    assert.equal(p.leader, b.nodeId, `partition ${p.partitionId} leader`)
    assert.deepEqual(p.replicas, [b.nodeId], `partition ${p.partitionId} replicas`)
    assert.deepEqual(p.isr, [b.nodeId], `partition ${p.partitionId} isr`)
  }
  const topics = await admin.listTopics()
  assert.ok(topics.includes(topic), 'listTopics lacks the new topic')
})

scenario('round-trip keys/headers/timestamps', async () => {
  const admin = await newAdmin()
  const topic = uniqueTopic('kafkajs-rt')
  await createTopic(admin, topic, 1)
  const base = Date.now() - 3600 * 1000
  const bin = Buffer.from(Array.from({ length: 256 }, (_, i) => i))
  const big = Buffer.alloc(200 * 1024, '0123456789abcdef')
  // kafkajs headers are an object: duplicate keys are expressed as an array
  // (sent in order, decoded back into an array); key order is insertion order.
  const want = [
    { key: Buffer.from('k0'), value: Buffer.from('plain value'), ts: base },
    { key: null, value: Buffer.from('null key'), ts: base + 5000 },
    { key: Buffer.alloc(0), value: Buffer.from('empty key'), ts: base - 3000 },
    { key: Buffer.from('null-value'), value: null, ts: base + 1000 },
    { key: Buffer.from('empty-value'), value: Buffer.alloc(0), ts: base + 2000 },
    { key: bin.subarray(0, 17), value: bin, ts: base - 600000 },
    { key: Buffer.from('utf8'), value: Buffer.from('grüße — 日本語 — 🚀'), ts: base + 7000 },
    { key: Buffer.from('headers'), value: Buffer.from('with headers'), ts: base + 8000,
      headers: { h1: Buffer.from('v1'), dup: [Buffer.from('first'), Buffer.from('second')], h2: bin.subarray(0, 5), empty: Buffer.alloc(0) } },
    { key: Buffer.from('big'), value: big, ts: base + 9000, headers: { size: Buffer.from('200KB') } },
    { key: Buffer.from('last'), value: Buffer.from('last'), ts: base - 1 },
  ]
  const producer = await newProducer()
  await producer.send({
    topic,
    acks: -1,
    messages: want.map(r => ({ partition: 0, key: r.key, value: r.value, timestamp: String(r.ts), headers: r.headers })),
  })
  const got = await consumeAll(topic, want.length)
  assert.equal(got.length, want.length)
  got.sort((a, b) => Number(a.offset) - Number(b.offset))
  got.forEach((g, i) => {
    const w = want[i]
    assert.equal(g.offset, String(i), `record ${i} offset`)
    sameNullable(g.key, w.key, `record ${i} key`)
    sameNullable(g.value, w.value, `record ${i} value`)
    assert.equal(g.timestamp, String(w.ts), `record ${i} timestamp`)
    const wantHeaders = w.headers || {}
    assert.deepEqual(Object.keys(g.headers), Object.keys(wantHeaders), `record ${i} header keys`)
    for (const [k, v] of Object.entries(wantHeaders)) {
      const gv = g.headers[k]
      if (Array.isArray(v)) {
        assert.ok(Array.isArray(gv) && gv.length === v.length, `record ${i} header ${k}: want ${v.length} values`)
        v.forEach((x, j) => assert.ok(Buffer.from(x).equals(gv[j]), `record ${i} header ${k}[${j}]`))
      } else {
        assert.ok(Buffer.isBuffer(gv) && Buffer.from(v).equals(gv), `record ${i} header ${k}`)
      }
    }
  })
})

function codecScenario(name, type) {
  scenario(`compression ${name}`, async () => {
    if (pluginError[name]) {
      throw new NotExpressible(`kafkajs 2.2.4 has no built-in ${name} codec and its plugin did not load: ${pluginError[name]}`)
    }
    const admin = await newAdmin()
    const topic = uniqueTopic(`kafkajs-${name}`)
    await createTopic(admin, topic, 1)
    const producer = await newProducer()
    const before = { ...codecCalls[name] }
    // 10 sends of 200: 10 batches of this codec.
    for (let s = 0; s < 10; s++) {
      const messages = []
      for (let i = s * 200; i < (s + 1) * 200; i++) messages.push({ key: String(i), value: codecValue(name, i) })
      await producer.send({ topic, acks: -1, compression: type, messages })
    }
    assert.equal(codecCalls[name].compress - before.compress, 10, `${name}.compress calls`)
    const got = await consumeAll(topic, CODEC_RECORDS)
    got.sort((a, b) => Number(a.offset) - Number(b.offset))
    got.forEach((g, i) => {
      assert.equal(g.offset, String(i))
      assert.equal(g.key.toString(), String(i))
      assert.equal(g.value.toString(), codecValue(name, i), `record ${i} value`)
    })
    // Stored as sent: the fetched batches had to be decompressed by this codec.
    const decompressed = codecCalls[name].decompress - before.decompress
    assert.ok(decompressed >= 10, `only ${decompressed} fetched batches were ${name}-compressed, want >= 10`)
  })
}
codecScenario('gzip', CompressionTypes.GZIP)
codecScenario('snappy', CompressionTypes.Snappy)
codecScenario('lz4', CompressionTypes.LZ4)
codecScenario('zstd', CompressionTypes.ZSTD)

scenario('consumer group commit and resume', async () => {
  const admin = await newAdmin()
  const topic = uniqueTopic('kafkajs-group')
  const groupId = uniqueTopic('kafkajs-g')
  await createTopic(admin, topic, 2)
  const producer = await newProducer()
  for (const p of [0, 1]) {
    await producer.send({ topic, acks: -1, messages: Array.from({ length: 10 }, (_, i) => ({ partition: p, value: `p${p}-${i}` })) })
  }
  const commit = { 0: 4, 1: 7 }
  const firstOffsets = got => {
    const first = {}
    const count = {}
    for (const m of got) {
      if (!(m.partition in first) || Number(m.offset) < first[m.partition]) first[m.partition] = Number(m.offset)
      count[m.partition] = (count[m.partition] || 0) + 1
    }
    return { first, count }
  }
  const got1 = await consumeGroup({
    groupId,
    topic,
    want: 20,
    commit: Object.entries(commit).map(([p, o]) => ({ topic, partition: Number(p), offset: String(o) })),
  })
  assert.deepEqual(firstOffsets(got1).first, { 0: 0, 1: 0 }, 'first member must start at 0 on both partitions')

  const fetched = await admin.fetchOffsets({ groupId, topics: [topic] })
  const byPart = {}
  for (const p of fetched[0].partitions) byPart[p.partition] = p.offset
  assert.deepEqual(byPart, { 0: '4', 1: '7' }, 'OffsetFetch after commit')

  let described
  const got2 = await consumeGroup({
    groupId,
    topic,
    want: 20 - commit[0] - commit[1],
    whileRunning: async () => { described = await admin.describeGroups([groupId]) },
  })
  const { first, count } = firstOffsets(got2)
  assert.deepEqual(first, { 0: 4, 1: 7 }, 'second member must resume at the committed offsets')
  await sleep(1000) // nothing beyond the end arrives
  assert.deepEqual(count, { 0: 6, 1: 3 }, 'records read by the second member per partition')
  const g = described.groups[0]
  assert.equal(g.errorCode, 0)
  assert.equal(g.state, 'Stable', `DescribeGroups state while a member is running`)
  assert.equal(g.protocolType, 'consumer')
  assert.equal(g.members.length, 1)
})

scenario('admin create/describe/delete topics', async () => {
  const admin = await newAdmin()
  const topic = uniqueTopic('kafkajs-admin')
  await createTopic(admin, topic, 3, [{ name: 'retention.ms', value: '123456789' }])
  const md = await admin.fetchTopicMetadata({ topics: [topic] })
  assert.equal(md.topics[0].partitions.length, 3)
  const cfg = await admin.describeConfigs({
    resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms'] }],
    includeSynonyms: false,
  })
  const r = cfg.resources[0]
  assert.equal(r.errorCode, 0, `DescribeConfigs error ${r.errorCode} ${r.errorMessage}`)
  const e = r.configEntries.find(c => c.configName === 'retention.ms')
  assert.ok(e, 'DescribeConfigs has no retention.ms')
  assert.equal(e.configValue, '123456789')
  assert.equal(e.isDefault, false, 'retention.ms was set on the topic, isDefault must be false')
  // kafkajs turns TOPIC_ALREADY_EXISTS (36) into `false`.
  const again = await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: 1 }], timeout: 30000 })
  assert.equal(again, false, 'second createTopics must report TOPIC_ALREADY_EXISTS (false)')
  await admin.deleteTopics({ topics: [topic], timeout: 30000 })
  await waitFor('topic gone from listTopics', 30000, async () => !(await admin.listTopics()).includes(topic))
})

scenario('idempotent produce', async () => {
  // kafkajs is not idempotent by default: ask for it (InitProducerId, acks
  // -1, one request in flight, as kafkajs requires).
  const admin = await newAdmin()
  const topic = uniqueTopic('kafkajs-idem')
  await createTopic(admin, topic, 1)
  const producer = await newProducer({ idempotent: true, maxInFlightRequests: 1 })
  const N = 3000
  for (let s = 0; s < N / 100; s++) {
    await producer.send({ topic, acks: -1, messages: Array.from({ length: 100 }, (_, i) => ({ value: String(s * 100 + i) })) })
  }
  const got = await consumeAll(topic, N)
  got.sort((a, b) => Number(a.offset) - Number(b.offset))
  assert.equal(got.length, N)
  let pid = null
  let seq = 0
  let lastBatch = null
  got.forEach((g, i) => {
    assert.equal(g.offset, String(i), `record ${i} offset`)
    assert.equal(g.value.toString(), String(i), `record ${i} (duplicate or reordered)`)
    const bc = g.batchContext
    assert.ok(BigInt(bc.producerId) >= 0n, `record ${i} stored with producer id ${bc.producerId}, want an id from InitProducerId`)
    if (pid === null) pid = bc.producerId
    assert.equal(bc.producerId, pid, `record ${i} producer id`)
    if (bc.firstOffset !== lastBatch) {
      assert.equal(bc.firstSequence, seq, `batch at ${bc.firstOffset}: first sequence`)
      lastBatch = bc.firstOffset
    }
    seq++
  })
  const offs = await admin.fetchTopicOffsets(topic)
  assert.equal(offs[0].high, String(N), 'high watermark (duplicates appended?)')
})

// ---- runner ----------------------------------------------------------------
async function main() {
  const filters = process.argv.slice(2)
  let passed = 0
  let failed = 0
  const results = []
  for (const s of scenarios) {
    if (filters.length && !filters.some(f => s.name.includes(f))) continue
    const t0 = Date.now()
    let status
    let detail = ''
    try {
      await withTimeout(s.fn(), SCENARIO_TIMEOUT_MS, s.name)
      status = 'PASS'
      passed++
    } catch (e) {
      if (e instanceof NotExpressible) {
        status = 'NOT EXPRESSIBLE'
        detail = e.message
      } else {
        status = 'FAIL'
        failed++
        detail = (e && (e.stack || e.message)) || String(e)
        if (e && e.type) detail = `[${e.type}] ${detail}`
      }
    }
    while (cleanups.length) {
      try { await withTimeout(Promise.resolve(cleanups.pop()()), 15000, 'cleanup') } catch (_) { /* ignore */ }
    }
    const secs = ((Date.now() - t0) / 1000).toFixed(1)
    console.log(`${status.padEnd(15)} kafkajs: ${s.name} (${secs}s)${detail ? `\n    ${detail.split('\n').slice(0, 6).join('\n    ')}` : ''}`)
    results.push({ name: s.name, status })
  }
  console.log('\n=== kafkajs ===')
  for (const r of results) console.log(`${r.status.padEnd(15)} ${r.name}`)
  console.log(`kafkajs: ${passed} passed, ${failed} failed, ${results.filter(r => r.status === 'NOT EXPRESSIBLE').length} not expressible`)
  process.exit(failed ? 1 : 0)
}
main().catch(e => {
  console.error(e)
  console.log('kafkajs: 0 passed, 1 failed')
  process.exit(1)
})
