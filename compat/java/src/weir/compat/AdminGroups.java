package weir.compat;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListConsumerGroupsOptions;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;

/**
 * AdminGroups BOOTSTRAP GROUP: the Java AdminClient's view of the broker's groups. Prints
 * {"version", "listConsumerGroups": [...], "listConsumerGroupsStable": [...],
 *  "listGroups": [...], "describe": {...}, "offsets": {"topic": {"partition": offset}}}.
 *
 * <p>listConsumerGroups is deprecated for removal in 4.x (listGroups replaces it) but is still
 * what most applications call, so both are exercised.
 */
@SuppressWarnings({"removal", "deprecation"})
public final class AdminGroups {
    static final long TIMEOUT_S = 30;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String group = args[1];
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "weir-compat-java-admin");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");

        Map<String, Object> out = new LinkedHashMap<>();
        out.put("version", Json.kafkaVersion());
        try (Admin admin = Admin.create(props)) {
            out.put("listConsumerGroups",
                consumerListings(admin.listConsumerGroups().all().get(TIMEOUT_S, TimeUnit.SECONDS)));
            out.put("listConsumerGroupsStable", consumerListings(admin.listConsumerGroups(
                new ListConsumerGroupsOptions().inGroupStates(Set.of(GroupState.STABLE)))
                .all().get(TIMEOUT_S, TimeUnit.SECONDS)));

            List<Object> groups = new ArrayList<>();
            List<GroupListing> listed = new ArrayList<>(
                admin.listGroups(ListGroupsOptions.forConsumerGroups()).all().get(TIMEOUT_S, TimeUnit.SECONDS));
            listed.sort(Comparator.comparing(GroupListing::groupId));
            for (GroupListing g : listed) {
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("groupId", g.groupId());
                row.put("type", g.type().map(Object::toString).orElse(null));
                row.put("protocol", g.protocol());
                row.put("state", g.groupState().map(Object::toString).orElse(null));
                row.put("simple", g.isSimpleConsumerGroup());
                groups.add(row);
            }
            out.put("listGroups", groups);

            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                .describedGroups().get(group).get(TIMEOUT_S, TimeUnit.SECONDS);
            Map<String, Object> desc = new LinkedHashMap<>();
            desc.put("groupId", d.groupId());
            desc.put("state", d.groupState().toString());
            desc.put("type", d.type().toString());
            desc.put("simple", d.isSimpleConsumerGroup());
            desc.put("assignor", d.partitionAssignor());
            Node c = d.coordinator();
            desc.put("coordinator", c == null ? null : List.of(c.id(), c.host(), c.port()));
            List<Object> members = new ArrayList<>();
            for (MemberDescription m : d.members()) {
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("memberId", m.consumerId());
                row.put("clientId", m.clientId());
                row.put("host", m.host());
                row.put("groupInstanceId", m.groupInstanceId().orElse(null));
                List<Object> assigned = new ArrayList<>();
                m.assignment().topicPartitions().stream()
                    .sorted(Comparator.comparing(TopicPartition::topic).thenComparing(TopicPartition::partition))
                    .forEach(tp -> assigned.add(List.of(tp.topic(), tp.partition())));
                row.put("assignment", assigned);
                members.add(row);
            }
            desc.put("members", members);
            out.put("describe", desc);

            Map<String, Map<String, Object>> offsets = new TreeMap<>();
            admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(TIMEOUT_S, TimeUnit.SECONDS)
                .forEach((tp, om) -> offsets.computeIfAbsent(tp.topic(), t -> new TreeMap<>())
                    .put(String.valueOf(tp.partition()), om == null ? null : om.offset()));
            out.put("offsets", offsets);
        }
        System.out.println(Json.write(out));
    }

    static List<Object> consumerListings(java.util.Collection<ConsumerGroupListing> listings) {
        List<ConsumerGroupListing> sorted = new ArrayList<>(listings);
        sorted.sort(Comparator.comparing(ConsumerGroupListing::groupId));
        List<Object> out = new ArrayList<>();
        for (ConsumerGroupListing g : sorted) {
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("groupId", g.groupId());
            row.put("state", g.groupState().map(Object::toString).orElse(null));
            row.put("type", g.type().map(Object::toString).orElse(null));
            row.put("simple", g.isSimpleConsumerGroup());
            out.add(row);
        }
        return out;
    }
}
