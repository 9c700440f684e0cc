package weir.compat;

import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.Stores;

/**
 * StreamsWordCount BOOTSTRAP INPUT OUTPUT APPLICATION_ID STATE_DIR REPLICATION: Kafka Streams'
 * word count with processing.guarantee=exactly_once_v2. Lines of INPUT are split into words,
 * re-keyed by word (through a repartition topic), counted in an in-memory store (with its
 * changelog topic), and every new count goes to OUTPUT as (word, count as a decimal string),
 * unbuffered, so a read_committed reader sees each word's counts 1, 2, 3, ... exactly once.
 * Streams' internal topics are created with REPLICATION replicas. Runs until it is stopped
 * (SIGTERM closes it cleanly); prints "RUNNING" once it processes. The repartition topic is
 * trimmed (DeleteRecords) every second.
 */
public final class StreamsWordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String input = args[1];
        String output = args[2];
        String applicationId = args[3];
        String stateDir = args[4];
        int replication = Integer.parseInt(args[5]);

        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, replication);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 1000);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input)
                .flatMap((key, line) -> Arrays.stream(line.toLowerCase(Locale.ROOT).split("\\s+"))
                        .filter(word -> !word.isEmpty())
                        .map(word -> KeyValue.pair(word, word))
                        .toList())
                .groupByKey(Grouped.as("words"))
                .count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts")))
                .toStream()
                .mapValues(Object::toString)
                .to(output, Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(20));
            stopped.countDown();
        }));
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                System.out.println("RUNNING");
                System.out.flush();
            }
        });
        streams.start();
        stopped.await();
    }
}
