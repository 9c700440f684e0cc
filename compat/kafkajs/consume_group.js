#!/usr/bin/env node
// Consume COUNT records of TOPIC as a member of consumer group GROUP with KafkaJS
// (consumer.run with eachMessage and KafkaJS's default auto-commit), then describe the
// group with KafkaJS's admin client while still a member, disconnect (leaving the group)
// and fetch the group's committed offsets with the admin client.
//
// Usage: node consume_group.js BROKERS TOPIC GROUP COUNT
//
// Prints one JSON document on stdout:
//   { records: [ { partition, offset, key, value } ],   (key/value base64, null kept)
//     joins: [ { memberId, isLeader, groupProtocol, memberAssignment } ],
//     described: <admin.describeGroups result while consuming>,
//     committed: <admin.fetchOffsets result after disconnecting> }
// KafkaJS's own log goes to stderr. Exits 1 if COUNT records do not arrive within 60 s.
'use strict'

const { Kafka, logLevel } = require('kafkajs')
const { stderrLogger } = require('./stderr_logger')

const [brokersArg, topic, groupId, countArg] = process.argv.slice(2)
if (!brokersArg || !topic || !groupId || !countArg) {
  process.stderr.write('usage: node consume_group.js BROKERS TOPIC GROUP COUNT\n')
  process.exit(2)
}
const count = parseInt(countArg, 10)
const DEADLINE_MS = 60000

const b64 = buf => (buf === null || buf === undefined ? null : buf.toString('base64'))

async function main () {
  const kafka = new Kafka({
    clientId: 'weir-compat-kafkajs-group',
    brokers: brokersArg.split(','),
    logLevel: logLevel.WARN,
    logCreator: stderrLogger,
    connectionTimeout: 10000,
    requestTimeout: 30000,
    retry: { retries: 5 }
  })
  const admin = kafka.admin()
  await admin.connect()

  const consumer = kafka.consumer({ groupId, heartbeatInterval: 500, maxWaitTimeInMs: 100 })
  const joins = []
  consumer.on(consumer.events.GROUP_JOIN, e => {
    const { memberId, isLeader, groupProtocol, memberAssignment } = e.payload
    joins.push({ memberId, isLeader, groupProtocol, memberAssignment })
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })

  const records = []
  let allReceived
  const received = new Promise(resolve => { allReceived = resolve })
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      records.push({ partition, offset: Number(message.offset), key: b64(message.key), value: b64(message.value) })
      if (records.length >= count) allReceived()
    }
  })
  let timer
  const timedOut = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`only ${records.length} of ${count} records within ${DEADLINE_MS} ms`)), DEADLINE_MS)
  })
  await Promise.race([received, timedOut])
  clearTimeout(timer)

  const described = await admin.describeGroups([groupId])
  await consumer.disconnect()
  const committed = await admin.fetchOffsets({ groupId, topics: [topic] })
  await admin.disconnect()

  process.stdout.write(JSON.stringify({ records, joins, described, committed }) + '\n')
}

main().catch(err => {
  process.stderr.write(`consume_group.js failed: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
