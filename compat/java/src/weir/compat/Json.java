package weir.compat;

import java.io.IOException;
import java.io.InputStream;
import java.util.Base64;
import java.util.Collection;
import java.util.Map;
import java.util.Properties;

/** Just enough JSON for the programs' reports on stdout: maps, lists, strings, numbers,
 *  booleans, null, and byte arrays as base64 strings. */
final class Json {
    private Json() {}

    /** The version of the kafka-clients jar on the classpath (from its kafka-version.properties). */
    static String kafkaVersion() throws IOException {
        Properties props = new Properties();
        try (InputStream in = Json.class.getResourceAsStream("/kafka/kafka-version.properties")) {
            if (in == null) return null;
            props.load(in);
        }
        return props.getProperty("version");
    }

    static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value);
        return out.toString();
    }

    static String b64(byte[] bytes) {
        return bytes == null ? null : Base64.getEncoder().encodeToString(bytes);
    }

    /** Decodes a base64 field of the programs' input, where "~" stands for null. */
    static byte[] unb64(String field) {
        return field.equals("~") ? null : Base64.getDecoder().decode(field);
    }

    private static void write(StringBuilder out, Object value) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof byte[] bytes) {
            string(out, b64(bytes));
        } else if (value instanceof String s) {
            string(out, s);
        } else if (value instanceof Number || value instanceof Boolean) {
            out.append(value);
        } else if (value instanceof Map<?, ?> map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : map.entrySet()) {
                if (!first) out.append(',');
                first = false;
                string(out, String.valueOf(e.getKey()));
                out.append(':');
                write(out, e.getValue());
            }
            out.append('}');
        } else if (value instanceof Collection<?> list) {
            out.append('[');
            boolean first = true;
            for (Object item : list) {
                if (!first) out.append(',');
                first = false;
                write(out, item);
            }
            out.append(']');
        } else {
            string(out, value.toString());
        }
    }

    private static void string(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
                    else out.append(c);
                }
            }
        }
        out.append('"');
    }
}
