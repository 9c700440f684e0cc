#!/usr/bin/env node
// Create a 3-partition topic with KafkaJS's admin client and produce COUNT keyed
// records with headers, half uncompressed and half gzip-compressed, in batches.
//
// Usage: node produce.js BROKERS TOPIC COUNT
//
// Prints one JSON document on stdout describing what was sent:
//   { topic, partitions, created, sends: [ { compression, records: [...], results: [...] } ] }
// where each record is { key, value, headers: [[name, value], ...], timestamp }
// (key/value/header values base64-encoded) and results are KafkaJS's
// RecordMetadata for that send ({ partition, baseOffset, errorCode, ... }).
// KafkaJS's own log goes to stderr.
'use strict'

const { Kafka, CompressionTypes, Partitioners, logLevel } = require('kafkajs')
const { stderrLogger } = require('./stderr_logger')

const [brokersArg, topic, countArg] = process.argv.slice(2)
if (!brokersArg || !topic || !countArg) {
  process.stderr.write('usage: node produce.js BROKERS TOPIC COUNT\n')
  process.exit(2)
}
const count = parseInt(countArg, 10)
const PARTITIONS = 3
const BATCH = 100
const BASE_TIMESTAMP = 1700000000000

// Deterministic pseudo-random bytes (xorshift32) so every run sends the same data.
function bytesFor (i, length) {
  let x = (i + 1) * 2654435761 >>> 0
  const out = Buffer.alloc(length)
  for (let j = 0; j < length; j++) {
    x ^= x << 13; x >>>= 0
    x ^= x >>> 17
    x ^= x << 5; x >>>= 0
    out[j] = x & 0xff
  }
  return out
}

function makeRecord (i) {
  const key = Buffer.from(`kafkajs-key-${i % 37}`)
  const value = i % 4 === 0
    ? Buffer.from(`kafkajs value ${i} `.repeat(1 + (i % 50)))
    : bytesFor(i, i % 300)
  // Header values are Buffers; an array value sends the same header name twice.
  const headers = { seq: Buffer.from(String(i)), bin: bytesFor(i + 7, i % 16) }
  if (i % 3 === 0) headers.dup = [Buffer.from('one'), Buffer.from('two')]
  return { key, value, headers, timestamp: String(BASE_TIMESTAMP + i) }
}

function headerPairs (headers) {
  const pairs = []
  for (const [name, value] of Object.entries(headers)) {
    for (const v of Array.isArray(value) ? value : [value]) pairs.push([name, v.toString('base64')])
  }
  return pairs
}

async function main () {
  const kafka = new Kafka({
    clientId: 'weir-compat-kafkajs',
    brokers: brokersArg.split(','),
    logLevel: logLevel.WARN,
    logCreator: stderrLogger,
    connectionTimeout: 10000,
    requestTimeout: 30000,
    retry: { retries: 5 }
  })

  const admin = kafka.admin()
  await admin.connect()
  const created = await admin.createTopics({
    topics: [{ topic, numPartitions: PARTITIONS, replicationFactor: 1 }],
    waitForLeaders: true,
    timeout: 30000
  })
  await admin.disconnect()

  const producer = kafka.producer({
    createPartitioner: Partitioners.DefaultPartitioner,
    allowAutoTopicCreation: false
  })
  await producer.connect()

  const sends = []
  for (let start = 0; start < count; start += BATCH) {
    const records = []
    for (let i = start; i < Math.min(count, start + BATCH); i++) records.push(makeRecord(i))
    const compression = (start / BATCH) % 2 === 0 ? CompressionTypes.None : CompressionTypes.GZIP
    const results = await producer.send({ topic, acks: -1, compression, messages: records })
    sends.push({
      compression: compression === CompressionTypes.GZIP ? 'gzip' : 'none',
      records: records.map(r => ({
        key: r.key.toString('base64'),
        value: r.value.toString('base64'),
        headers: headerPairs(r.headers),
        timestamp: Number(r.timestamp)
      })),
      results
    })
  }
  await producer.disconnect()

  process.stdout.write(JSON.stringify({ topic, partitions: PARTITIONS, created, sends }) + '\n')
}

main().catch(err => {
  process.stderr.write(`produce.js failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
