package weir.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * GroupMembers BOOTSTRAP TOPIC PARTITIONS GROUP: KafkaConsumers with group.protocol=consumer
 * (KIP-848, the broker assigns) go through three phases on TOPIC: members a, b and c join and
 * split the partitions; c closes and a and b take its share; d joins and takes its share.
 * Each phase ends when the members' assignments are disjoint, cover every partition and are as
 * even as they can be. Every rebalance callback is recorded, and a partition assigned while
 * another member still holds it is a violation.
 *
 * <p>Prints {"version", "phases": [{"name", "owned": {member: [partitions]}, "seq": the last
 * event's sequence when the phase settled}], "events":
 * {member: [[sequence, "assign"|"revoke"|"lost", [partitions]]]}, "memberIds", "violations"}.
 * Exits 1 (the state on stderr) when a phase does not settle within 60 s.
 */
public final class GroupMembers {
    static final AtomicLong sequence = new AtomicLong();
    static final Map<Integer, String> owners = new TreeMap<>();
    static final List<String> violations = new ArrayList<>();

    static final class Member implements Runnable, ConsumerRebalanceListener {
        final String name;
        final KafkaConsumer<byte[], byte[]> consumer;
        final List<Object> events = new ArrayList<>();
        final Set<Integer> owned = new TreeSet<>();
        volatile boolean stop = false;
        volatile String memberId = "";
        volatile Throwable failure;
        final Thread thread;

        Member(String bootstrap, String topic, String group, String name) {
            this.name = name;
            Properties props = new Properties();
            props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            props.put(ConsumerConfig.CLIENT_ID_CONFIG, "weir-compat-java-" + name);
            props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
            consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
            consumer.subscribe(List.of(topic), this);
            thread = new Thread(this, "member-" + name);
            thread.start();
        }

        void record(String kind, Collection<TopicPartition> partitions) {
            List<Integer> ps = new ArrayList<>();
            for (TopicPartition tp : partitions) ps.add(tp.partition());
            ps.sort(null);
            synchronized (owners) {
                events.add(List.of(sequence.incrementAndGet(), kind, ps));
                for (int p : ps) {
                    if (kind.equals("assign")) {
                        String other = owners.get(p);
                        if (other != null && !other.equals(name)) {
                            violations.add("partition " + p + " assigned to " + name + " while " + other + " holds it");
                        }
                        owners.put(p, name);
                        owned.add(p);
                    } else {
                        owners.remove(p, name);
                        owned.remove(p);
                    }
                }
            }
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            record("assign", partitions);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            record("revoke", partitions);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            record("lost", partitions);
        }

        @Override
        public void run() {
            try {
                while (!stop) {
                    consumer.poll(Duration.ofMillis(50));
                    memberId = consumer.groupMetadata().memberId();
                }
            } catch (Throwable t) {
                failure = t;
            } finally {
                consumer.close(); // revokes through onPartitionsRevoked, then leaves the group
            }
        }

        void close() throws InterruptedException {
            stop = true;
            thread.join(TimeUnit.SECONDS.toMillis(30));
        }
    }

    static boolean settled(List<Member> members, int partitions) {
        synchronized (owners) {
            Set<Integer> union = new TreeSet<>();
            int min = Integer.MAX_VALUE;
            int max = 0;
            for (Member m : members) {
                union.addAll(m.owned);
                min = Math.min(min, m.owned.size());
                max = Math.max(max, m.owned.size());
            }
            return union.size() == partitions && owners.size() == partitions && max - min <= 1;
        }
    }

    static void phase(String name, List<Member> members, int partitions, List<Object> phases) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!settled(members, partitions)) {
            boolean failed = members.stream().anyMatch(m -> m.failure != null);
            if (failed || System.nanoTime() > deadline) {
                System.err.printf("GroupMembers: phase %s %s; owners %s%n", name, failed ? "failed" : "timed out", owners);
                for (Member m : members) {
                    System.err.printf("  %s %s events %s%n", m.name, m.owned, m.events);
                    if (m.failure != null) m.failure.printStackTrace();
                }
                System.exit(1);
            }
            Thread.sleep(20);
        }
        Map<String, Object> owned = new LinkedHashMap<>();
        long settledAt;
        synchronized (owners) {
            for (Member m : members) owned.put(m.name, new ArrayList<>(m.owned));
            settledAt = sequence.get();
        }
        Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("name", name);
        entry.put("owned", owned);
        entry.put("seq", settledAt);
        phases.add(entry);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        String group = args[3];

        List<Object> phases = new ArrayList<>();
        Map<String, Member> all = new LinkedHashMap<>();
        List<Member> live = new ArrayList<>();
        for (String name : List.of("a", "b", "c")) {
            Member m = new Member(bootstrap, topic, group, name);
            all.put(name, m);
            live.add(m);
        }
        phase("three", live, partitions, phases);
        Member c = all.get("c");
        c.close();
        live.remove(c);
        phase("c-left", live, partitions, phases);
        Member d = new Member(bootstrap, topic, group, "d");
        all.put("d", d);
        live.add(d);
        phase("d-joined", live, partitions, phases);

        Map<String, Object> memberIds = new LinkedHashMap<>();
        for (Member m : live) memberIds.put(m.name, m.memberId);
        for (Member m : live) m.close();
        Map<String, Object> events = new LinkedHashMap<>();
        for (Member m : all.values()) {
            if (m.failure != null) {
                System.err.println("GroupMembers: " + m.name + " failed");
                m.failure.printStackTrace();
                System.exit(1);
            }
            events.put(m.name, m.events);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("version", Json.kafkaVersion());
        out.put("phases", phases);
        out.put("events", events);
        out.put("memberIds", memberIds);
        synchronized (owners) {
            out.put("violations", new ArrayList<>(violations));
        }
        System.out.println(Json.write(out));
    }
}
