#!/usr/bin/env node
// Produce each line of stdin as one record's value to TOPIC with an idempotent KafkaJS
// producer (acks -1), as the lines arrive: whatever has been read since the last round goes
// out in the next round, line i to partition i % PARTITIONS. Retries are generous, so that a
// send outlives a leader failover instead of failing.
//
// A round is one send per partition, side by side, never one send over several partitions:
// KafkaJS keeps a send's answers by broker across its retries, so when a partition's leader
// dies and the partition moves to a broker that already answered for another partition of
// the same send, the retry sends nothing for it and the send resolves without it. Its
// records are then never written (and its next batch reuses their sequence numbers, which
// the new leader refuses as out of order when the lost batch had reached it by replication).
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
    const perPartition = new Map()
    lines.forEach((value, i) => {
      const partition = (sent + i) % partitions
      if (!perPartition.has(partition)) perPartition.set(partition, [])
      perPartition.get(partition).push({ value, partition })
    })
    const rounds = Array.from(perPartition.entries()).map(async ([partition, messages]) => {
      const results = await producer.send({ topic, acks: -1, messages })
      const answer = results.find(r => Number(r.partition) === partition)
      if (!answer) throw new Error(`send to partition ${partition} answered without it`)
      return messages.map((m, i) => [partition, Number(answer.baseOffset) + i, m.value])
    })
    for (const rows of await Promise.all(rounds)) acked.push(...rows)
    sent += lines.length
  }
  await producer.disconnect()
  process.stdout.write(JSON.stringify({ acked }) + '\n')
}

main().catch(err => {
  process.stderr.write(`produce_lines.js failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
