//! How a broker reaches the other brokers, as Kafka configures it: the listener named by
//! `inter.broker.listener.name` (or by its protocol, `security.inter.broker.protocol`), and, as
//! that listener asks of any client, TLS (its `ssl.truststore.location` vouches for the other
//! brokers, its keystore is this broker's client certificate) and a SASL login
//! (`sasl.mechanism.inter.broker.protocol`, the user and password in
//! `listener.name.<listener>.<mechanism>.sasl.jaas.config`). Replication, transaction markers,
//! transaction verification and the HTTP gateway's client all connect this way, so a cluster
//! needs no PLAINTEXT listener and no anonymous super user.

use std::path::PathBuf;
use std::sync::Arc;

use weir_client::{SaslLogin, Security};
use weir_sasl::{jaas_option, Mechanism};
use weir_tls::ClientTls;

use crate::config_error::ConfigError;
use crate::listener::{ListenerConfig, SecurityProtocol};

/// The settings of the way to the other brokers, checked (files not read yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterBrokerSettings {
    /// The listener's name.
    pub listener: String,
    /// TLS when the listener speaks SSL or SASL_SSL.
    pub tls: Option<InterBrokerTls>,
    /// The login when it speaks SASL_PLAINTEXT or SASL_SSL.
    pub sasl: Option<SaslLogin>,
}

/// The PEM files of TLS to the other brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterBrokerTls {
    /// CA certificates that vouch for the other brokers' certificates.
    pub truststore: PathBuf,
    /// This broker's key and certificate chain, shown to a listener that asks for one.
    pub keystore: PathBuf,
}

/// How this broker connects to the others: their listener, and what it asks of connections.
#[derive(Debug, Clone)]
pub struct InterBroker {
    /// The name of the other brokers' listener this one connects to.
    pub listener: String,
    /// TLS and the login of each connection.
    pub security: Security,
    /// The TLS files behind `security`'s config, to reload when they are renewed
    /// ([`ClientTls::watch`]).
    pub tls_files: Option<Arc<ClientTls>>,
}

impl InterBroker {
    /// Over the other brokers' PLAINTEXT listener named `listener`.
    pub fn plaintext(listener: &str) -> InterBroker {
        InterBroker {
            listener: listener.to_string(),
            security: Security::default(),
            tls_files: None,
        }
    }
}

impl InterBrokerSettings {
    /// Loads the TLS files: a truststore or keystore that cannot serve is an error naming it.
    pub fn load(&self) -> Result<InterBroker, ConfigError> {
        let tls_files = match &self.tls {
            Some(files) => Some(
                ClientTls::load(&files.truststore, Some(&files.keystore)).map_err(|e| {
                    ConfigError(format!("inter-broker listener {}: {e}", self.listener))
                })?,
            ),
            None => None,
        };
        Ok(InterBroker {
            listener: self.listener.clone(),
            security: Security {
                tls: tls_files.as_ref().map(|files| files.config()),
                sasl: self.sasl.clone(),
            },
            tls_files,
        })
    }
}

/// Whether `setting` (after `listener.name.<listener>.`) is a listener's login for one
/// mechanism, `<mechanism>.sasl.jaas.config`.
pub(crate) fn is_login_setting(setting: &str) -> bool {
    setting
        .strip_suffix(".sasl.jaas.config")
        .is_some_and(|mechanism| Mechanism::parse(mechanism).is_some())
}

/// The name of the listener the brokers reach each other on: `inter.broker.listener.name`,
/// else the listener named as `security.inter.broker.protocol`, else the first PLAINTEXT one.
pub(crate) fn listener_name(
    kafka: &[ListenerConfig],
    value: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let set = |name: &str| value(name).filter(|v| !v.trim().is_empty());
    match (
        set("inter.broker.listener.name"),
        set("security.inter.broker.protocol"),
    ) {
        (Some(_), Some(_)) => Err(ConfigError(
            "set inter.broker.listener.name or security.inter.broker.protocol, not both".into(),
        )),
        (Some(name), None) => Ok(name.trim().to_ascii_uppercase()),
        (None, Some(protocol)) => {
            let name = protocol.trim().to_ascii_uppercase();
            match kafka.iter().any(|l| l.name == name) {
                true => Ok(name),
                false => Err(ConfigError(format!("security.inter.broker.protocol {name}: no listener is named {name}; name the listener the brokers reach each other on in inter.broker.listener.name instead"))),
            }
        }
        (None, None) => kafka
            .iter()
            .find(|l| l.protocol == SecurityProtocol::Plaintext)
            .map(|l| l.name.clone())
            .ok_or_else(|| ConfigError("no listener for the brokers to reach each other and the HTTP gateway to reach the broker: set inter.broker.listener.name (an SSL or SASL listener takes this broker's login from listener.name.<name>.<mechanism>.sasl.jaas.config), or add a PLAINTEXT listener on a private address".into())),
    }
}

/// The settings of the way to the other brokers over `listener`.
pub(crate) fn resolve(
    listener: &ListenerConfig,
    value: &dyn Fn(&str) -> Option<String>,
) -> Result<InterBrokerSettings, ConfigError> {
    let name = &listener.name;
    let prefix = format!("listener.name.{}.", name.to_ascii_lowercase());
    let tls = match &listener.tls {
        Some(settings) => Some(InterBrokerTls {
            truststore: settings.truststore.clone().ok_or_else(|| ConfigError(format!("inter-broker listener {name} speaks TLS: set ssl.truststore.location (or {prefix}ssl.truststore.location) to a PEM file of the CA certificates that vouch for the brokers' certificates")))?,
            keystore: settings.keystore.clone(),
        }),
        None => None,
    };
    let sasl = match &listener.sasl {
        Some(enabled) => Some(login(listener, enabled, &prefix, value)?),
        None => None,
    };
    Ok(InterBrokerSettings {
        listener: name.clone(),
        tls,
        sasl,
    })
}

/// This broker's login on the SASL listener `listener`, which offers `enabled`.
fn login(
    listener: &ListenerConfig,
    enabled: &[Mechanism],
    prefix: &str,
    value: &dyn Fn(&str) -> Option<String>,
) -> Result<SaslLogin, ConfigError> {
    let name = &listener.name;
    let chosen = value("sasl.mechanism.inter.broker.protocol").filter(|m| !m.trim().is_empty());
    let mechanism = match chosen {
        Some(chosen) => {
            let mechanism = Mechanism::parse(&chosen).ok_or_else(|| ConfigError(format!("sasl.mechanism.inter.broker.protocol {chosen:?}: Weir offers SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN")))?;
            if !enabled.contains(&mechanism) {
                return Err(ConfigError(format!("sasl.mechanism.inter.broker.protocol {}: the inter-broker listener {name} does not enable it (sasl.enabled.mechanisms)", mechanism.name())));
            }
            mechanism
        }
        None => enabled[0],
    };
    let setting = format!(
        "{prefix}{}.sasl.jaas.config",
        mechanism.name().to_ascii_lowercase()
    );
    let missing = || {
        ConfigError(format!("inter-broker listener {name} speaks SASL: set {setting} to this broker's login, e.g. org.apache.kafka.common.security.scram.ScramLoginModule required username=\"broker\" password=\"...\";"))
    };
    let jaas = value(&setting).ok_or_else(missing)?;
    if jaas
        .split_whitespace()
        .any(|option| option.starts_with("user_") && option.contains('='))
    {
        return Err(ConfigError(format!("{setting}: user_<name>=\"<password>\" entries are not read: Weir checks PLAIN logins against the SCRAM credentials in the metadata (weir server --add-scram, weir user create)")));
    }
    let option = |name| jaas_option(&jaas, name).ok_or_else(missing);
    Ok(SaslLogin {
        username: option("username")?,
        password: option("password")?,
        mechanism,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listeners::tests::resolve_given;

    const JAAS: &str = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="b\"s";"#;

    fn resolve(pairs: &[(&str, &str)]) -> Result<InterBrokerSettings, String> {
        let defaults = [
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT,BROKER:SASL_SSL,TLS:SSL",
            ),
            ("sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512"),
        ];
        resolve_given(pairs, &defaults).map(|l| l.inter_broker)
    }

    #[test]
    fn a_sasl_ssl_listener_takes_the_brokers_login_and_trust() {
        let settings = resolve(&[
            ("listeners", "CLIENT://a:9092,BROKER://a:9093"),
            ("inter.broker.listener.name", "broker"),
            ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-512"),
            ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
            ("ssl.keystore.location", "/etc/weir/broker.pem"),
            (
                "listener.name.broker.ssl.truststore.location",
                "/etc/weir/ca.pem",
            ),
            ("listener.name.broker.scram-sha-512.sasl.jaas.config", JAAS),
        ])
        .expect("resolves");
        assert_eq!(settings.listener, "BROKER");
        assert_eq!(
            settings.tls,
            Some(InterBrokerTls {
                truststore: "/etc/weir/ca.pem".into(),
                keystore: "/etc/weir/broker.pem".into(),
            })
        );
        let login = settings.sasl.expect("login");
        assert_eq!(
            (
                login.mechanism,
                login.username.as_str(),
                login.password.as_str()
            ),
            (Mechanism::ScramSha512, "broker", "b\"s")
        );
        assert!(!format!("{login:?}").contains("b\\\"s"), "{login:?}");
    }

    #[test]
    fn the_listener_is_named_by_name_by_protocol_or_as_the_first_plaintext_one() {
        let jaas = ("listener.name.client.scram-sha-256.sasl.jaas.config", JAAS);
        let by_protocol = resolve(&[
            ("listeners", "PLAINTEXT://a:9092,TLS://a:9094,SSL://a:9095"),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,TLS:SSL,SSL:SSL",
            ),
            ("ssl.keystore.location", "k"),
            ("ssl.truststore.location", "t"),
            ("security.inter.broker.protocol", "SSL"),
        ])
        .expect("by protocol");
        assert_eq!(
            (by_protocol.listener.as_str(), by_protocol.sasl),
            ("SSL", None)
        );
        let first_plaintext = resolve(&[("listeners", "CLIENT://a:9092,PLAINTEXT://a:9093"), jaas])
            .expect("first plaintext");
        assert_eq!(
            (first_plaintext.listener.as_str(), first_plaintext.tls),
            ("PLAINTEXT", None)
        );
        let by_name = resolve(&[
            ("listeners", "CLIENT://a:9092,PLAINTEXT://a:9093"),
            ("inter.broker.listener.name", "CLIENT"),
            jaas,
        ])
        .expect("by name");
        // No mechanism chosen: the listener's first.
        assert_eq!(
            by_name.sasl.map(|l| l.mechanism),
            Some(Mechanism::ScramSha256)
        );
    }

    #[test]
    fn what_the_broker_cannot_connect_with_is_refused_by_name() {
        let listeners = ("listeners", "CLIENT://a:9092,BROKER://a:9093");
        let broker = ("inter.broker.listener.name", "BROKER");
        let keystore = ("ssl.keystore.location", "k");
        let truststore = ("ssl.truststore.location", "t");
        let jaas = ("listener.name.broker.scram-sha-256.sasl.jaas.config", JAAS);
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[listeners, broker, keystore, jaas],
                "set ssl.truststore.location",
            ),
            (
                &[listeners, broker, keystore, truststore],
                "set listener.name.broker.scram-sha-256.sasl.jaas.config",
            ),
            (
                &[
                    listeners,
                    broker,
                    keystore,
                    truststore,
                    (
                        "listener.name.broker.scram-sha-256.sasl.jaas.config",
                        "x required;",
                    ),
                ],
                "this broker's login",
            ),
            (
                &[
                    listeners,
                    broker,
                    keystore,
                    truststore,
                    jaas,
                    ("sasl.mechanism.inter.broker.protocol", "PLAIN"),
                ],
                "does not enable it",
            ),
            (
                &[
                    listeners,
                    broker,
                    keystore,
                    truststore,
                    ("sasl.mechanism.inter.broker.protocol", "GSSAPI"),
                ],
                "GSSAPI",
            ),
            (
                &[
                    listeners,
                    broker,
                    keystore,
                    truststore,
                    ("sasl.enabled.mechanisms", "PLAIN"),
                    (
                        "listener.name.broker.plain.sasl.jaas.config",
                        r#"PlainLoginModule required username="b" password="p" user_b="p";"#,
                    ),
                ],
                "user_<name>",
            ),
            (
                &[
                    listeners,
                    broker,
                    keystore,
                    ("security.inter.broker.protocol", "SASL_SSL"),
                ],
                "not both",
            ),
            (
                &[
                    listeners,
                    keystore,
                    ("security.inter.broker.protocol", "SASL_SSL"),
                ],
                "no listener is named SASL_SSL",
            ),
            (&[listeners, keystore], "set inter.broker.listener.name"),
        ];
        for (pairs, expected) in cases {
            let error = resolve(pairs).expect_err(expected);
            assert!(
                error.contains(expected),
                "{pairs:?}: {error:?} lacks {expected:?}"
            );
            assert!(!error.contains("b\\\"s"), "{error}");
        }
    }

    #[test]
    fn a_listeners_login_is_a_setting_of_its_own() {
        assert!(crate::listeners::is_per_listener_setting(
            "listener.name.broker.scram-sha-512.sasl.jaas.config"
        ));
        assert!(crate::listeners::is_per_listener_setting(
            "listener.name.broker.plain.sasl.jaas.config"
        ));
        assert!(!crate::listeners::is_per_listener_setting(
            "listener.name.broker.gssapi.sasl.jaas.config"
        ));
        assert!(!crate::listeners::is_per_listener_setting(
            "listener.name.broker.sasl.jaas.config"
        ));
    }
}
