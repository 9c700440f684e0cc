package weir.compat;

import java.time.Duration;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * ReadProcessWrite BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID EXPECTED ABORT_EVERY: the
 * exactly-once loop of the Java client. A consumer of GROUP (read_committed, no auto commit)
 * reads INPUT; each poll's records go to OUTPUT as "out-" + value in one transaction with the
 * consumed offsets (sendOffsetsToTransaction with the consumer's group metadata). Every
 * ABORT_EVERY-th transaction is aborted instead, and the consumer goes back to the group's
 * committed offsets (a fetch that requires stable offsets) to process those records again.
 * A transaction that fails (a node killed under it) is aborted and its records processed
 * again the same way. Stops once EXPECTED records were committed, or after 90 s. Prints
 * {"version", "transactions", "aborted", "processed", "failed"}.
 */
public final class ReadProcessWrite {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String input = args[1];
        String output = args[2];
        String group = args[3];
        String transactionalId = args[4];
        int expected = Integer.parseInt(args[5]);
        int abortEvery = Integer.parseInt(args[6]);

        int transactions = 0;
        int aborted = 0;
        int processed = 0;
        int failed = 0;
        long deadline = System.nanoTime() + Duration.ofSeconds(90).toNanos();
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, group);
                KafkaProducer<String, String> producer = producer(bootstrap, transactionalId)) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            while (processed < expected && System.nanoTime() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> record : records) {
                    producer.send(new ProducerRecord<>(output, record.key(), "out-" + record.value()));
                    offsets.put(new TopicPartition(record.topic(), record.partition()),
                            new OffsetAndMetadata(record.offset() + 1));
                }
                transactions++;
                try {
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    if (transactions % abortEvery == 0) {
                        producer.flush();
                        producer.abortTransaction();
                        aborted++;
                        rewind(consumer);
                    } else {
                        producer.commitTransaction();
                        processed += records.count();
                    }
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException fatal) {
                    throw fatal;
                } catch (KafkaException abortable) {
                    // A node failed mid-transaction (or the group moved on): abort it and
                    // process its records again, as an exactly-once application does.
                    System.err.println("transaction " + transactions + " failed; aborting it: " + abortable);
                    producer.abortTransaction();
                    failed++;
                    rewind(consumer);
                }
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("version", Json.kafkaVersion());
        out.put("transactions", transactions);
        out.put("aborted", aborted);
        out.put("processed", processed);
        out.put("failed", failed);
        System.out.println(Json.write(out));
    }

    /** Moves each assigned partition back to the group's committed offset (or its start). */
    private static void rewind(KafkaConsumer<String, String> consumer) {
        Set<TopicPartition> assigned = consumer.assignment();
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned, Duration.ofSeconds(30));
        for (TopicPartition partition : assigned) {
            OffsetAndMetadata offset = committed.get(partition);
            if (offset == null) {
                consumer.seekToBeginning(List.of(partition));
            } else {
                consumer.seek(partition, offset.offset());
            }
        }
    }

    private static KafkaConsumer<String, String> consumer(String bootstrap, String group) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "weir-compat-java-read-process-write");
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "25");
        return new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer());
    }

    private static KafkaProducer<String, String> producer(String bootstrap, String transactionalId) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "weir-compat-java-read-process-write");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        return new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
    }
}
