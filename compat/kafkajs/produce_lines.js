#!/usr/bin/env node
// Produce each line of stdin as one record's value to TOPIC with an idempotent KafkaJS
// producer (acks -1), as the lines arrive: whatever has been read since the last send goes
// out as the next send, line i to partition i % PARTITIONS. Retries are generous, so that a
// send outlives a leader failover instead of failing.
//
// Usage: node produce_lines.js BROKERS TOPIC PARTITIONS < lines
//
// Prints one JSON document on stdout once stdin ends and every send is acknowledged:
//   { acked: [ [partition, offset, value], ... ] }   (value as the line's text)
// KafkaJS's own log goes to stderr. Exits 1 if a send fails.
'use strict'

const readline = require('readline')
const { Kafka, Partitioners, logLevel } = require('kafkajs')
const { stderrLogger } = require('./stderr_logger')

const [brokersArg, topic, partitionsArg] = process.argv.slice(2)
if (!brokersArg || !topic || !partitionsArg) {
  process.stderr.write('usage: node produce_lines.js BROKERS TOPIC PARTITIONS < lines\n')
  process.exit(2)
}
const partitions = parseInt(partitionsArg, 10)

async function main () {
  const kafka = new Kafka({
    clientId: 'weir-compat-kafkajs-lines',
    brokers: brokersArg.split(','),
    logLevel: logLevel.WARN,
    logCreator: stderrLogger,
    connectionTimeout: 5000,
    requestTimeout: 30000,
    retry: { retries: 12, initialRetryTime: 300, maxRetryTime: 5000 }
  })
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    createPartitioner: Partitioners.DefaultPartitioner,
    allowAutoTopicCreation: false
  })
  await producer.connect()

  const queued = []
  let ended = false
  let wake = null
  const input = readline.createInterface({ input: process.stdin })
  input.on('line', line => { if (line !== '') { queued.push(line); if (wake) wake() } })
  input.on('close', () => { ended = true; if (wake) wake() })

  const acked = []
  let sent = 0
  while (!ended || queued.length > 0) {
    if (queued.length === 0) {
      await new Promise(resolve => { wake = resolve })
      wake = null
      continue
    }
    const lines = queued.splice(0, queued.length)
    const messages = lines.map((value, i) => ({ value, partition: (sent + i) % partitions }))
    const results = await producer.send({ topic, acks: -1, messages })
    const base = new Map(results.map(r => [Number(r.partition), Number(r.baseOffset)]))
    const next = new Map()
    for (const m of messages) {
      const offset = (next.get(m.partition) ?? base.get(m.partition))
      next.set(m.partition, offset + 1)
      acked.push([m.partition, offset, m.value])
    }
    sent += lines.length
  }
  await producer.disconnect()
  process.stdout.write(JSON.stringify({ acked }) + '\n')
}

main().catch(err => {
  process.stderr.write(`produce_lines.js failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
