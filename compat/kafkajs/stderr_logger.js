// KafkaJS's log, one line per entry on stderr (stdout carries the programs' JSON).
'use strict'

module.exports.stderrLogger = () => ({ namespace, label, log }) => {
  const { message, ...extra } = log
  process.stderr.write(`[kafkajs ${label}] ${namespace}: ${message} ${JSON.stringify(extra)}\n`)
}
