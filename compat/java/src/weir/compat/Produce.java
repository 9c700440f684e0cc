package weir.compat;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Produce BOOTSTRAP TOPIC: sends the records read from stdin, one a line
 * ({@code key<TAB>value[<TAB>headerName<TAB>headerValue]...}, each field base64, "~" for null),
 * with an idempotent acks=all lz4 producer, in order, each as soon as its line is read (so a
 * caller can pace them), and prints what each RecordMetadata
 * reported: {"version", "delivered": [[partition, offset, timestamp], ...]}.
 */
public final class Produce {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];

        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "60000");
        props.put(ProducerConfig.CLIENT_ID_CONFIG, "weir-compat-java-producer");

        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer =
                 new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
            for (String line; (line = in.readLine()) != null; ) {
                if (line.isEmpty()) continue;
                String[] f = line.split("\t", -1);
                ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(topic, Json.unb64(f[0]), Json.unb64(f[1]));
                for (int i = 2; i + 1 < f.length; i += 2) {
                    rec.headers().add(new RecordHeader(
                        new String(Json.unb64(f[i]), StandardCharsets.UTF_8), Json.unb64(f[i + 1])));
                }
                sent.add(producer.send(rec));
            }
            producer.flush();
            List<Object> delivered = new ArrayList<>();
            for (Future<RecordMetadata> f : sent) {
                RecordMetadata md = f.get(60, TimeUnit.SECONDS);
                delivered.add(List.of(md.partition(), md.offset(), md.timestamp()));
            }
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("version", Json.kafkaVersion());
            out.put("delivered", delivered);
            System.out.println(Json.write(out));
        }
    }
}
