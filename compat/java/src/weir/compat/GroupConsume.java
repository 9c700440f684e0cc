package weir.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * GroupConsume BOOTSTRAP TOPIC PARTITIONS GROUP COUNT MEMBERS [PROTOCOL]: MEMBERS KafkaConsumers
 * (one thread each; PROTOCOL classic, the default, with cooperative-sticky, or consumer for
 * KIP-848, where the broker assigns) subscribe to TOPIC in GROUP and poll
 * until COUNT records arrived between them and their assignments are disjoint, non-empty and
 * cover all PARTITIONS. A member commits the positions of partitions taken from it in
 * onPartitionsRevoked, so that the next owner starts where it stopped.
 *
 * <p>With more than one member the hand-over happens mid-stream: the first member starts
 * alone, reads at least a quarter of COUNT, pauses its partitions, and only then do the
 * others start; it resumes what it keeps once partitions were revoked from it.
 *
 * <p>Then every member commits synchronously, reads its committed offsets back, and closes. Prints
 * {"version", "members": [{"clientId", "memberId", "generation", "assignment", "committed",
 * "events", "records": [[partition, offset, key, value, headers, timestamp, timestampType]]}]}.
 * Exits 1 (the state on stderr) if that does not happen within 60 s.
 */
public final class GroupConsume {
    static final AtomicInteger consumed = new AtomicInteger();
    static final AtomicLong sequence = new AtomicLong();
    static volatile boolean stop = false;

    static final class Member implements Runnable, ConsumerRebalanceListener {
        final String clientId;
        final String topic;
        final KafkaConsumer<byte[], byte[]> consumer;
        final CyclicBarrier committedByAll;
        final int pauseAt; // > 0: pause after this many records until a revocation
        final CountDownLatch paused = new CountDownLatch(1);
        volatile boolean revoked = false;
        volatile Set<Integer> assignment = Set.of();
        volatile Throwable failure;
        final List<Object> records = new ArrayList<>();
        final List<Object> events = new ArrayList<>();
        final Map<String, Object> report = new LinkedHashMap<>();

        Member(String bootstrap, String topic, String group, String protocol, String clientId, CyclicBarrier committedByAll, int pauseAt) {
            this.clientId = clientId;
            this.pauseAt = pauseAt;
            this.topic = topic;
            this.committedByAll = committedByAll;
            Properties props = new Properties();
            props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
            if (protocol.equals("classic")) {
                props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, CooperativeStickyAssignor.class.getName());
                props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
            }
            props.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
            props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
            props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "100");
            consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        }

        @Override
        public void run() {
            try {
                consumer.subscribe(List.of(topic), this);
                while (!stop) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                        List<Object> headers = new ArrayList<>(); // Arrays.asList: values may be null
                        for (Header h : r.headers()) {
                            headers.add(Arrays.asList(h.key(), Json.b64(h.value())));
                        }
                        records.add(Arrays.asList(r.partition(), r.offset(), Json.b64(r.key()),
                            Json.b64(r.value()), headers, r.timestamp(), r.timestampType().name));
                        consumed.incrementAndGet();
                    }
                    assignment = partitions(consumer.assignment());
                    if (pauseAt > 0 && paused.getCount() > 0 && records.size() >= pauseAt) {
                        consumer.pause(consumer.assignment());
                        paused.countDown();
                    } else if (paused.getCount() == 0 && revoked && !consumer.paused().isEmpty()) {
                        consumer.resume(consumer.paused());
                    }
                }
                Set<TopicPartition> owned = consumer.assignment();
                consumer.commitSync(Duration.ofSeconds(30));
                Map<String, Object> committed = new TreeMap<>();
                consumer.committed(owned, Duration.ofSeconds(30)).forEach((tp, om) ->
                    committed.put(String.valueOf(tp.partition()), om == null ? null : om.offset()));
                report.put("clientId", clientId);
                report.put("memberId", consumer.groupMetadata().memberId());
                report.put("generation", consumer.groupMetadata().generationId());
                report.put("assignment", new ArrayList<>(partitions(owned)));
                report.put("committed", committed);
                report.put("events", events);
                report.put("records", records);
                // Nobody leaves (which would start a rebalance) before everyone has committed.
                committedByAll.await(60, TimeUnit.SECONDS);
                consumer.close();
            } catch (Throwable t) {
                failure = t;
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
            events.add(List.of(sequence.incrementAndGet(), "assign", new ArrayList<>(partitions(parts))));
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
            events.add(List.of(sequence.incrementAndGet(), "revoke", new ArrayList<>(partitions(parts))));
            revoked = true;
            Map<TopicPartition, OffsetAndMetadata> positions = new HashMap<>();
            for (TopicPartition tp : parts) {
                positions.put(tp, new OffsetAndMetadata(consumer.position(tp)));
            }
            if (!positions.isEmpty()) {
                consumer.commitSync(positions, Duration.ofSeconds(30));
            }
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> parts) {
            events.add(List.of(sequence.incrementAndGet(), "lost", new ArrayList<>(partitions(parts))));
        }
    }

    static Set<Integer> partitions(Collection<TopicPartition> parts) {
        Set<Integer> out = new TreeSet<>();
        for (TopicPartition tp : parts) out.add(tp.partition());
        return out;
    }

    static boolean settled(List<Member> members, int partitions) {
        Set<Integer> union = new HashSet<>();
        int total = 0;
        for (Member m : members) {
            Set<Integer> a = m.assignment;
            if (a.isEmpty()) return false;
            union.addAll(a);
            total += a.size();
        }
        return total == partitions && union.size() == partitions;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        String group = args[3];
        int count = Integer.parseInt(args[4]);
        int size = Integer.parseInt(args[5]);
        String protocol = args.length > 6 ? args[6] : "classic";

        CyclicBarrier committedByAll = new CyclicBarrier(size);
        List<Member> members = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        for (int i = 0; i < size; i++) {
            int pauseAt = i == 0 && size > 1 ? Math.max(1, count / 4) : 0;
            Member m = new Member(bootstrap, topic, group, protocol, "weir-compat-java-" + i, committedByAll, pauseAt);
            members.add(m);
            Thread t = new Thread(m, "member-" + i);
            threads.add(t);
            t.start();
            if (pauseAt > 0 && !m.paused.await(30, TimeUnit.SECONDS)) {
                System.err.printf("GroupConsume: the first member read only %d of %d records in 30 s (failure: %s)%n",
                    consumed.get(), pauseAt, m.failure);
                System.exit(1);
            }
        }

        while (!(consumed.get() >= count && settled(members, partitions))) {
            boolean failed = members.stream().anyMatch(m -> m.failure != null);
            if (failed || System.nanoTime() > deadline) {
                System.err.printf("GroupConsume: %s after %d records of %d; assignments:%n",
                    failed ? "a member failed" : "timed out", consumed.get(), count);
                for (Member m : members) {
                    System.err.printf("  %s %s events %s%n", m.clientId, m.assignment, m.events);
                    if (m.failure != null) m.failure.printStackTrace();
                }
                System.exit(1);
            }
            Thread.sleep(20);
        }
        stop = true;
        for (Thread t : threads) {
            t.join(TimeUnit.SECONDS.toMillis(90));
        }
        List<Object> reports = new ArrayList<>();
        for (Member m : members) {
            if (m.failure != null) {
                System.err.println("GroupConsume: " + m.clientId + " failed while committing or closing");
                m.failure.printStackTrace();
                System.exit(1);
            }
            reports.add(m.report);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("version", Json.kafkaVersion());
        out.put("members", reports);
        System.out.println(Json.write(out));
    }
}
