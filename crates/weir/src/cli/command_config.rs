//! `--command-config FILE`: Kafka client properties for the CLI's connections, as Kafka's own
//! tools take them (`kafka-topics.sh --command-config`). Read: `security.protocol`
//! (`PLAINTEXT`, `SASL_PLAINTEXT`, `SSL`, `SASL_SSL`); for SASL `sasl.mechanism` (`PLAIN`,
//! `SCRAM-SHA-256`, `SCRAM-SHA-512`) and the user and password from `sasl.jaas.config`
//! (Java's `... required username="..." password="...";`) or from `sasl.username` and
//! `sasl.password` (librdkafka's names); for TLS the CA certificates in the PEM file
//! `ssl.truststore.location` (librdkafka: `ssl.ca.location`) and, for a listener that asks for
//! a client certificate, the key and chain in the PEM file `ssl.keystore.location`. Other
//! properties are named on stderr and not used.

use std::path::Path;
use std::sync::Arc;

use weir_client::{Mechanism, SaslLogin, Security};
use weir_sasl::jaas_option;

/// What a command config file says about the CLI's connections.
#[derive(Debug, Clone, Default)]
pub struct CommandConfig {
    /// TLS for every connection when `security.protocol` is `SSL` or `SASL_SSL`, a login
    /// when it is `SASL_PLAINTEXT` or `SASL_SSL`.
    pub security: Security,
}

/// Reads and checks the command config file at `path` (clap's value parser of
/// `--command-config`): a clear error for an unreadable file, a property the CLI cannot
/// honour or a missing one.
pub fn load(path: &str) -> Result<CommandConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let properties = parse_properties(&text);
    let (config, unused) = from_properties(&properties).map_err(|e| format!("{path}: {e}"))?;
    for name in unused {
        eprintln!("warning: {path}: {name} is not used by weir's commands");
    }
    Ok(config)
}

/// The `key=value` (or `key: value`) pairs of a Java properties text, in order: `#` and `!`
/// start comments, a line ending in a backslash goes on on the next, and a backslash takes
/// the next character as it is (`\t`, `\n`, `\r` as the control characters).
fn parse_properties(text: &str) -> Vec<(String, String)> {
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim_start();
        if current.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
        {
            continue;
        }
        let trailing = line.len() - line.trim_end_matches('\\').len();
        if trailing % 2 == 1 {
            current.push_str(&line[..line.len() - 1]);
            continue;
        }
        current.push_str(line);
        logical.push(std::mem::take(&mut current));
    }
    if !current.is_empty() {
        logical.push(current);
    }
    logical
        .iter()
        .map(|line| {
            let split = line
                .char_indices()
                .scan(false, |escaped, (at, c)| {
                    let here = (!*escaped && matches!(c, '=' | ':' | ' ' | '\t')).then_some(at);
                    *escaped = !*escaped && c == '\\';
                    Some(here)
                })
                .flatten()
                .next();
            let (key, value) = match split {
                Some(at) => {
                    let rest = line[at..].trim_start_matches([' ', '\t']);
                    let rest = rest.strip_prefix(['=', ':']).unwrap_or(rest);
                    (&line[..at], rest.trim_start_matches([' ', '\t']))
                }
                None => (line.as_str(), ""),
            };
            (unescape(key), unescape(value))
        })
        .collect()
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// The config the properties describe, and the names of those not used.
fn from_properties(
    properties: &[(String, String)],
) -> Result<(CommandConfig, Vec<String>), String> {
    let get = |name: &str| {
        properties
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim().to_string())
    };
    const USED: &[&str] = &[
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.jaas.config",
        "sasl.username",
        "sasl.password",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.ca.location",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.endpoint.identification.algorithm",
    ];
    let mut unused: Vec<String> = properties
        .iter()
        .map(|(k, _)| k.clone())
        .filter(|k| !USED.contains(&k.as_str()))
        .collect();
    unused.dedup();
    let protocol = get("security.protocol").unwrap_or_else(|| "PLAINTEXT".into());
    let (tls, sasl) = match protocol.to_ascii_uppercase().as_str() {
        "PLAINTEXT" => (false, false),
        "SASL_PLAINTEXT" => (false, true),
        "SSL" => (true, false),
        "SASL_SSL" => (true, true),
        _ => {
            return Err(format!(
                "security.protocol={protocol}: expected PLAINTEXT, SASL_PLAINTEXT, SSL or SASL_SSL"
            ))
        }
    };
    let security = Security {
        tls: if tls {
            Some(tls_config(&protocol, &get)?)
        } else {
            None
        },
        sasl: if sasl {
            Some(sasl_login(&protocol, &get)?)
        } else {
            None
        },
    };
    Ok((CommandConfig { security }, unused))
}

/// The TLS config of `ssl.*` properties (`get` reads one).
fn tls_config(
    protocol: &str,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    for setting in ["ssl.truststore.type", "ssl.keystore.type"] {
        if let Some(kind) = get(setting).filter(|k| !k.eq_ignore_ascii_case("PEM")) {
            return Err(format!("{setting}={kind}: weir reads PEM files only"));
        }
    }
    if get("ssl.endpoint.identification.algorithm").is_some_and(|a| a.is_empty()) {
        return Err("ssl.endpoint.identification.algorithm is empty: weir always checks that the broker's certificate names the host it connects to".into());
    }
    let truststore = get("ssl.truststore.location")
        .or_else(|| get("ssl.ca.location"))
        .ok_or_else(|| format!("security.protocol={protocol} needs ssl.truststore.location: a PEM file of the CA certificates that vouch for the brokers"))?;
    let keystore = get("ssl.keystore.location");
    weir_tls::client_config(Path::new(&truststore), keystore.as_deref().map(Path::new))
        .map_err(|e| e.to_string())
}

/// The SASL login of `sasl.*` properties (`get` reads one).
fn sasl_login(protocol: &str, get: &dyn Fn(&str) -> Option<String>) -> Result<SaslLogin, String> {
    let named = get("sasl.mechanism")
        .or_else(|| get("sasl.mechanisms"))
        .ok_or_else(|| format!("security.protocol={protocol} needs sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"))?;
    let mechanism = Mechanism::parse(&named).ok_or_else(|| {
        format!("sasl.mechanism={named}: expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    })?;
    let jaas = get("sasl.jaas.config");
    let from_jaas = |option| jaas.as_deref().and_then(|j| jaas_option(j, option));
    let username = get("sasl.username")
        .or_else(|| from_jaas("username"))
        .ok_or(
        "no user name: set sasl.jaas.config (username=\"...\" password=\"...\") or sasl.username",
    )?;
    let password = get("sasl.password")
        .or_else(|| from_jaas("password"))
        .ok_or(
        "no password: set sasl.jaas.config (username=\"...\" password=\"...\") or sasl.password",
    )?;
    Ok(SaslLogin {
        mechanism,
        username,
        password,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Result<CommandConfig, String> {
        from_properties(&parse_properties(text)).map(|(config, _)| config)
    }

    fn login(text: &str) -> Result<Option<SaslLogin>, String> {
        config(text).map(|c| c.security.sasl)
    }

    #[test]
    fn java_and_librdkafka_spellings_give_the_same_login() {
        let java = login(
            "# the admin's login\n\
             security.protocol=SASL_PLAINTEXT\n\
             sasl.mechanism = SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n\
             \x20   username=\"admin\" password=\"p=w q\";\n",
        );
        let librdkafka = login(
            "security.protocol: sasl_plaintext\n\
             sasl.mechanisms SCRAM-SHA-512\n\
             sasl.username=admin\n\
             sasl.password=p=w q\n",
        );
        let expected = Some(SaslLogin {
            mechanism: Mechanism::ScramSha512,
            username: "admin".into(),
            password: "p=w q".into(),
        });
        assert_eq!(java, Ok(expected.clone()));
        assert_eq!(librdkafka, Ok(expected));
        for plaintext in ["", "security.protocol=PLAINTEXT\n"] {
            let config = config(plaintext).expect("plaintext");
            assert!(config.security.sasl.is_none() && config.security.tls.is_none());
        }
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let refusals = [
            (
                "security.protocol=SASL_SSL\n",
                "needs ssl.truststore.location",
            ),
            (
                "security.protocol=SSL\nssl.truststore.location=/nonexistent\n",
                "cannot read /nonexistent",
            ),
            (
                "security.protocol=SSL\nssl.truststore.type=JKS\n",
                "PEM files only",
            ),
            (
                "security.protocol=SSL\nssl.endpoint.identification.algorithm=\n",
                "names the host",
            ),
            ("security.protocol=KERBEROS\n", "expected PLAINTEXT"),
            ("security.protocol=SASL_PLAINTEXT\n", "needs sasl.mechanism"),
            (
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n",
                "GSSAPI",
            ),
            (
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.password=x\n",
                "no user name",
            ),
            (
                "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=x\n",
                "no password",
            ),
        ];
        for (text, says) in refusals {
            let error = config(text).expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
        }
        let (_, unused) = from_properties(&parse_properties(
            "client.id=x\nsecurity.protocol=PLAINTEXT\n",
        ))
        .expect("valid");
        assert_eq!(unused, vec!["client.id".to_string()]);
    }
}
