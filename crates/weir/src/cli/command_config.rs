//! `--command-config FILE`: Kafka client properties for the CLI's connections, as Kafka's own
//! tools take them (`kafka-topics.sh --command-config`). Read: `security.protocol`
//! (`PLAINTEXT` or `SASL_PLAINTEXT`), `sasl.mechanism` (`PLAIN`, `SCRAM-SHA-256`,
//! `SCRAM-SHA-512`), and the user and password from `sasl.jaas.config` (Java's
//! `... required username="..." password="...";`) or from `sasl.username` and
//! `sasl.password` (librdkafka's names). Other properties are named on stderr and not used.

use weir_client::{Mechanism, SaslLogin};

/// What a command config file says about the CLI's connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandConfig {
    /// The login of every connection, when `security.protocol` is `SASL_PLAINTEXT`.
    pub sasl: Option<SaslLogin>,
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

/// The quoted value of `option` in a JAAS login module line (`username="alice"`).
fn jaas_option(jaas: &str, option: &str) -> Option<String> {
    let mut rest = jaas;
    while let Some(at) = rest.find(option) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + option.len()..].trim_start();
        rest = &rest[at + option.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        let Some(value) = after.strip_prefix('=').map(str::trim_start) else {
            continue;
        };
        let quoted = value.strip_prefix('"')?;
        let mut out = String::new();
        let mut chars = quoted.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Some(out),
                '\\' => out.push(chars.next()?),
                c => out.push(c),
            }
        }
        return None;
    }
    None
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
    ];
    let mut unused: Vec<String> = properties
        .iter()
        .map(|(k, _)| k.clone())
        .filter(|k| !USED.contains(&k.as_str()))
        .collect();
    unused.dedup();
    let protocol = get("security.protocol").unwrap_or_else(|| "PLAINTEXT".into());
    match protocol.to_ascii_uppercase().as_str() {
        "PLAINTEXT" => return Ok((CommandConfig::default(), unused)),
        "SASL_PLAINTEXT" => {}
        "SSL" | "SASL_SSL" => {
            return Err(format!(
                "security.protocol={protocol}: weir's commands connect to PLAINTEXT and SASL_PLAINTEXT listeners only (TLS is not supported by them yet)"
            ))
        }
        _ => {
            return Err(format!(
                "security.protocol={protocol}: expected PLAINTEXT or SASL_PLAINTEXT"
            ))
        }
    }
    let named = get("sasl.mechanism")
        .or_else(|| get("sasl.mechanisms"))
        .ok_or("security.protocol=SASL_PLAINTEXT needs sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")?;
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
    let sasl = SaslLogin {
        mechanism,
        username,
        password,
    };
    Ok((CommandConfig { sasl: Some(sasl) }, unused))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Result<CommandConfig, String> {
        from_properties(&parse_properties(text)).map(|(config, _)| config)
    }

    #[test]
    fn java_and_librdkafka_spellings_give_the_same_login() {
        let java = config(
            "# the admin's login\n\
             security.protocol=SASL_PLAINTEXT\n\
             sasl.mechanism = SCRAM-SHA-512\n\
             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n\
             \x20   username=\"admin\" password=\"p=w q\";\n",
        );
        let librdkafka = config(
            "security.protocol: sasl_plaintext\n\
             sasl.mechanisms SCRAM-SHA-512\n\
             sasl.username=admin\n\
             sasl.password=p=w q\n",
        );
        let expected = CommandConfig {
            sasl: Some(SaslLogin {
                mechanism: Mechanism::ScramSha512,
                username: "admin".into(),
                password: "p=w q".into(),
            }),
        };
        assert_eq!(java, Ok(expected.clone()));
        assert_eq!(librdkafka, Ok(expected));
        assert_eq!(config(""), Ok(CommandConfig::default()));
        assert_eq!(
            config("security.protocol=PLAINTEXT\n"),
            Ok(CommandConfig::default())
        );
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let refusals = [
            ("security.protocol=SASL_SSL\n", "TLS"),
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
