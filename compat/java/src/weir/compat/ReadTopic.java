package weir.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * ReadTopic BOOTSTRAP TOPIC ISOLATION: a KafkaConsumer of ISOLATION (read_committed or
 * read_uncommitted), assigned every partition of TOPIC without a group, reads each from its
 * start to its end offset as that isolation level sees it (the last stable offset for
 * read_committed). Prints {"version", "records": [[partition, offset, value], ...]} in
 * partition, then offset order.
 */
public final class ReadTopic {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String isolation = args[2];
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, "weir-compat-java-reader");
        List<List<Object>> records = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(props, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
                partitions.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions, Duration.ofSeconds(30));
            long deadline = System.currentTimeMillis() + 60_000;
            while (behind(consumer, ends)) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("read incomplete after 60 s; ends " + ends);
                }
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofMillis(200))) {
                    List<Object> row = new ArrayList<>();
                    row.add(record.partition());
                    row.add(record.offset());
                    row.add(record.value());
                    records.add(row);
                }
            }
        }
        records.sort((a, b) -> {
            int byPartition = Integer.compare((Integer) a.get(0), (Integer) b.get(0));
            return byPartition != 0 ? byPartition : Long.compare((Long) a.get(1), (Long) b.get(1));
        });
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("version", Json.kafkaVersion());
        out.put("records", records);
        System.out.println(Json.write(out));
    }

    private static boolean behind(KafkaConsumer<String, String> consumer, Map<TopicPartition, Long> ends) {
        for (Map.Entry<TopicPartition, Long> end : ends.entrySet()) {
            if (consumer.position(end.getKey(), Duration.ofSeconds(30)) < end.getValue()) {
                return true;
            }
        }
        return false;
    }
}
