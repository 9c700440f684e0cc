package weir.compat;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * TransactionalProduce BOOTSTRAP TOPIC TRANSACTIONAL_ID COMMITS ABORTS RECORDS: with one
 * transactional producer, COMMITS transactions of RECORDS records each ("c{t}-{r}") that it
 * commits, then ABORTS transactions ("a{t}-{r}", sent and flushed first) that it aborts; then
 * a second producer of the same transactional id fences the first while it has a transaction
 * open ("z-{r}", flushed), and the first's commit must fail. Prints {"version", "committed",
 * "aborted", "fenced"}.
 */
public final class TransactionalProduce {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String transactionalId = args[2];
        int commits = Integer.parseInt(args[3]);
        int aborts = Integer.parseInt(args[4]);
        int records = Integer.parseInt(args[5]);

        int committed = 0;
        int aborted = 0;
        boolean fenced = false;
        try (KafkaProducer<String, String> producer = producer(bootstrap, transactionalId)) {
            producer.initTransactions();
            for (int t = 0; t < commits; t++) {
                producer.beginTransaction();
                for (int r = 0; r < records; r++) {
                    producer.send(new ProducerRecord<>(topic, "k" + r, "c" + t + "-" + r));
                }
                producer.commitTransaction();
                committed++;
            }
            for (int t = 0; t < aborts; t++) {
                producer.beginTransaction();
                for (int r = 0; r < records; r++) {
                    producer.send(new ProducerRecord<>(topic, "k" + r, "a" + t + "-" + r));
                }
                producer.flush();
                producer.abortTransaction();
                aborted++;
            }
            producer.beginTransaction();
            for (int r = 0; r < records; r++) {
                producer.send(new ProducerRecord<>(topic, "k" + r, "z-" + r));
            }
            producer.flush();
            try (KafkaProducer<String, String> successor = producer(bootstrap, transactionalId)) {
                successor.initTransactions();
            }
            try {
                producer.commitTransaction();
            } catch (ProducerFencedException expected) {
                fenced = true;
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("version", Json.kafkaVersion());
        out.put("committed", committed);
        out.put("aborted", aborted);
        out.put("fenced", fenced);
        System.out.println(Json.write(out));
    }

    private static KafkaProducer<String, String> producer(String bootstrap, String transactionalId) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "weir-compat-java-transactional");
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        return new KafkaProducer<>(props, new StringSerializer(), new StringSerializer());
    }
}
