//! Kafka's listeners as a broker is configured with them: `listeners` names each endpoint
//! (`NAME://HOST:PORT`), `listener.security.protocol.map` gives each name its security
//! protocol, `advertised.listeners` what clients are told, `inter.broker.listener.name` the
//! one brokers reach each other on (see `inter_broker`), and `controller.listener.names` the
//! ones that belong to the metadata quorum rather than to clients. TLS settings (`ssl.*`)
//! apply to every SSL listener, and `listener.name.<name>.ssl.*` to one alone, as in Kafka;
//! `sasl.enabled.mechanisms` (or `listener.name.<name>.sasl.enabled.mechanisms`) gives a SASL
//! listener its mechanisms.

use std::collections::BTreeMap;

use weir_sasl::Mechanism;
use weir_tls::{ClientAuth, TlsSettings, TlsVersion};

use crate::config_error::ConfigError;
use crate::inter_broker::{self, InterBrokerSettings};
pub use crate::listener::{ListenerConfig, SecurityProtocol};

/// The TLS settings a listener reads, each also settable for one listener alone under
/// `listener.name.<name>.`.
pub const PER_LISTENER_SETTINGS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "sasl.enabled.mechanisms",
];

/// The listeners of a node: those that serve Kafka clients and brokers, and those of the
/// metadata quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listeners {
    /// Listeners that serve the Kafka API, in the order `listeners` gives them.
    pub kafka: Vec<ListenerConfig>,
    /// Listeners named in `controller.listener.names`.
    pub controller: Vec<ListenerConfig>,
    /// The listener brokers reach each other on (`inter.broker.listener.name`), and the TLS
    /// and login this broker connects to it with.
    pub inter_broker: InterBrokerSettings,
}

/// Splits `NAME://HOST:PORT` (Kafka's form; `[v6]` hosts allowed) into its parts.
fn parse_endpoint(setting: &str, entry: &str) -> Result<(String, String, u16), ConfigError> {
    let bad = |why: &str| ConfigError(format!("{setting}: {entry:?} {why}"));
    let (name, address) = entry
        .split_once("://")
        .ok_or_else(|| bad("is not NAME://HOST:PORT"))?;
    let name = name.trim().to_ascii_uppercase();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(bad("has no listener name of letters, digits, '_' or '-'"));
    }
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| bad("has no :PORT"))?;
    let port: u16 = port.parse().map_err(|_| bad("has no valid port"))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok((name, host, port))
}

fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|e| !e.is_empty())
}

/// The security protocol of each listener name (`NAME:PROTOCOL,…`).
fn protocol_map(text: &str) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
    let mut map = BTreeMap::new();
    for entry in entries(text) {
        let (name, protocol) = entry
            .split_once(':')
            .and_then(|(n, p)| Some((n.trim().to_ascii_uppercase(), SecurityProtocol::parse(p)?)))
            .ok_or_else(|| ConfigError(format!("listener.security.protocol.map: {entry:?} is not NAME:PROTOCOL with PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")))?;
        map.insert(name, protocol);
    }
    Ok(map)
}

/// Listener `name`'s value of `setting`: `listener.name.<name>.<setting>`, else `setting`.
fn listener_setting(
    name: &str,
    setting: &str,
    value: &dyn Fn(&str) -> Option<String>,
) -> Option<String> {
    let prefix = format!("listener.name.{}.", name.to_ascii_lowercase());
    value(&format!("{prefix}{setting}"))
        .or_else(|| value(setting))
        .filter(|v| !v.trim().is_empty())
}

/// The SASL mechanisms of listener `name` (`sasl.enabled.mechanisms`).
fn sasl_mechanisms(
    name: &str,
    value: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Mechanism>, ConfigError> {
    let listed = listener_setting(name, "sasl.enabled.mechanisms", value).unwrap_or_default();
    let mut mechanisms = Vec::new();
    for entry in entries(&listed) {
        let mechanism = Mechanism::parse(entry).ok_or_else(|| ConfigError(format!("listener {name}: sasl.enabled.mechanisms names {entry:?}; Weir offers SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN")))?;
        if !mechanisms.contains(&mechanism) {
            mechanisms.push(mechanism);
        }
    }
    if mechanisms.is_empty() {
        return Err(ConfigError(format!(
            "listener {name} speaks SASL but sasl.enabled.mechanisms names no mechanism"
        )));
    }
    Ok(mechanisms)
}

/// The TLS settings of listener `name`: `listener.name.<name>.ssl.*`, else `ssl.*`.
fn tls_settings(
    name: &str,
    value: &dyn Fn(&str) -> Option<String>,
) -> Result<TlsSettings, ConfigError> {
    let get = |setting: &str| listener_setting(name, setting, value);
    let tls_error = |e: weir_tls::TlsError| ConfigError(format!("listener {name}: {e}"));
    for store in ["ssl.keystore.type", "ssl.truststore.type"] {
        if let Some(kind) = get(store).filter(|k| !k.eq_ignore_ascii_case("PEM")) {
            return Err(ConfigError(format!("listener {name}: {store} {kind:?} is not supported: Weir reads PEM files (convert a JKS or PKCS12 store with keytool and openssl)")));
        }
    }
    let keystore = get("ssl.keystore.location").ok_or_else(|| {
        ConfigError(format!("listener {name} speaks SSL: set ssl.keystore.location (or listener.name.{}.ssl.keystore.location) to a PEM file holding its private key and certificate chain", name.to_ascii_lowercase()))
    })?;
    Ok(TlsSettings {
        keystore: keystore.into(),
        truststore: get("ssl.truststore.location").map(Into::into),
        client_auth: ClientAuth::parse(&get("ssl.client.auth").unwrap_or_default())
            .map_err(tls_error)?,
        versions: TlsVersion::parse_list(
            &get("ssl.enabled.protocols").unwrap_or_else(|| "TLSv1.2,TLSv1.3".into()),
        )
        .map_err(tls_error)?,
    })
}

/// `config` as a listener of the metadata quorum: PLAINTEXT, or SSL with mutual TLS, where
/// both sides show a certificate the other's truststore vouches for (the controllers' own
/// CA: any certificate it signed is a member).
fn controller_listener(mut config: ListenerConfig) -> Result<ListenerConfig, ConfigError> {
    let name = &config.name;
    let prefix = format!("listener.name.{}.", name.to_ascii_lowercase());
    match (config.protocol, &mut config.tls) {
        (SecurityProtocol::Plaintext, _) => {}
        (SecurityProtocol::Ssl, Some(tls)) => {
            if tls.truststore.is_none() {
                return Err(ConfigError(format!("controller listener {name} speaks SSL: set {prefix}ssl.truststore.location to the CA certificates that vouch for the controllers and brokers (each side of the controller port shows its keystore)")));
            }
            if tls.client_auth == ClientAuth::Requested {
                return Err(ConfigError(format!("controller listener {name}: ssl.client.auth is required on the controller port (leave it unset or set {prefix}ssl.client.auth=required)")));
            }
            tls.client_auth = ClientAuth::Required;
        }
        _ => {
            return Err(ConfigError(format!(
                "controller listener {name}: the metadata quorum speaks PLAINTEXT or SSL"
            )))
        }
    }
    Ok(config)
}

/// Whether `name` is a per-listener setting (`listener.name.<listener>.<setting>`).
pub fn is_per_listener_setting(name: &str) -> bool {
    name.strip_prefix("listener.name.")
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(listener, setting)| {
            !listener.is_empty()
                && (PER_LISTENER_SETTINGS.contains(&setting)
                    || inter_broker::is_login_setting(setting))
        })
}

impl Listeners {
    /// Reads and checks the listener settings; `value` gives a property as set (or its
    /// default). Every listener needs a protocol, names and ports are distinct, advertised
    /// entries name listeners, SSL listeners have a keystore, and the inter-broker listener
    /// has what this broker needs to connect to it (a truststore for TLS, a login for SASL).
    pub fn resolve(value: &dyn Fn(&str) -> Option<String>) -> Result<Listeners, ConfigError> {
        let setting = |name: &str| value(name).unwrap_or_default();
        let protocols = protocol_map(&setting("listener.security.protocol.map"))?;
        let controller_names: Vec<String> = entries(&setting("controller.listener.names"))
            .map(str::to_ascii_uppercase)
            .collect();
        let mut advertised = BTreeMap::new();
        let listed = setting("listeners");
        for entry in entries(&setting("advertised.listeners")) {
            let (name, host, port) = parse_endpoint("advertised.listeners", entry)?;
            if host.is_empty()
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_unspecified())
            {
                return Err(ConfigError(format!(
                    "advertised.listeners: {entry:?} names no host clients can connect to"
                )));
            }
            if advertised.insert(name.clone(), (host, port)).is_some() {
                return Err(ConfigError(format!(
                    "advertised.listeners names {name} twice"
                )));
            }
        }
        let mut listeners = Listeners {
            kafka: Vec::new(),
            controller: Vec::new(),
            inter_broker: InterBrokerSettings {
                listener: String::new(),
                tls: None,
                sasl: None,
            },
        };
        let mut ports = BTreeMap::new();
        for entry in entries(&listed) {
            let (name, host, port) = parse_endpoint("listeners", entry)?;
            let protocol = *protocols.get(&name).ok_or_else(|| ConfigError(format!("listener {name} has no security protocol: add {name}:PLAINTEXT or {name}:SSL to listener.security.protocol.map")))?;
            if port != 0 && ports.insert(port, name.clone()).is_some() {
                return Err(ConfigError(format!(
                    "listeners: port {port} is given to both {} and {name}",
                    ports[&port]
                )));
            }
            let tls = match protocol {
                SecurityProtocol::Ssl | SecurityProtocol::SaslSsl => {
                    Some(tls_settings(&name, value)?)
                }
                _ => None,
            };
            let sasl = match protocol {
                SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl => {
                    Some(sasl_mechanisms(&name, value)?)
                }
                _ => None,
            };
            let config = ListenerConfig {
                sasl,
                advertised: advertised.remove(&name),
                name: name.clone(),
                protocol,
                host,
                port,
                tls,
            };
            let all = listeners.kafka.iter().chain(&listeners.controller);
            if all.clone().any(|l| l.name == name) {
                return Err(ConfigError(format!("listeners names {name} twice")));
            }
            if controller_names.contains(&name) {
                listeners.controller.push(controller_listener(config)?);
            } else {
                listeners.kafka.push(config);
            }
        }
        if let Some(name) = advertised.keys().next() {
            return Err(ConfigError(format!(
                "advertised.listeners names {name}, which listeners does not list"
            )));
        }
        if listeners.kafka.is_empty() {
            return Err(ConfigError(format!(
                "listeners {listed:?} names no listener for Kafka clients"
            )));
        }
        let inter_broker = inter_broker::listener_name(&listeners.kafka, value)?;
        let inter_broker = listeners
            .kafka
            .iter()
            .find(|l| l.name == inter_broker)
            .ok_or_else(|| {
                ConfigError(format!(
                    "inter.broker.listener.name {inter_broker} is not a Kafka listener in listeners"
                ))
            })?;
        listeners.inter_broker = inter_broker::resolve(inter_broker, value)?;
        for listener in &listeners.kafka {
            if listener.binds_wildcard() && listener.advertised.is_none() {
                return Err(ConfigError(format!("listener {} binds every interface ({}): give it an address clients can reach in advertised.listeners (or --advertise {}://HOST:PORT)", listener.name, listener.bind_address(), listener.name)));
            }
        }
        Ok(listeners)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const KAFKA_MAP: &str =
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

    fn resolve(pairs: &[(&str, &str)]) -> Result<Listeners, String> {
        resolve_given(pairs, &[("listener.security.protocol.map", KAFKA_MAP)])
    }

    /// The listeners of the settings `pairs`, with `defaults` for those it does not set.
    pub(crate) fn resolve_given(
        pairs: &[(&str, &str)],
        defaults: &[(&str, &str)],
    ) -> Result<Listeners, String> {
        let given: BTreeMap<String, String> = defaults
            .iter()
            .chain(pairs)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Listeners::resolve(&|name| given.get(name).cloned()).map_err(|e| e.0)
    }

    #[test]
    fn kafka_style_listeners_resolve_with_their_protocols_and_tls() {
        let listeners = resolve(&[
            (
                "listeners",
                "SSL://127.0.0.1:9094, plaintext://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            ),
            ("advertised.listeners", "SSL://broker-1.example:9094"),
            (
                "listener.security.protocol.map",
                "SSL:SSL,PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            ),
            ("controller.listener.names", "CONTROLLER"),
            ("ssl.keystore.location", "/etc/weir/server.pem"),
            ("listener.name.ssl.ssl.client.auth", "required"),
            ("ssl.truststore.location", "/etc/weir/ca.pem"),
        ])
        .expect("resolves");
        assert_eq!(listeners.inter_broker.listener, "PLAINTEXT");
        assert_eq!(listeners.kafka.len(), 2);
        let ssl = &listeners.kafka[0];
        assert_eq!(
            (ssl.name.as_str(), ssl.protocol),
            ("SSL", SecurityProtocol::Ssl)
        );
        assert_eq!(ssl.advertised, Some(("broker-1.example".into(), 9094)));
        let tls = ssl.tls.as_ref().expect("tls");
        assert_eq!(tls.client_auth, ClientAuth::Required);
        assert_eq!(
            tls.keystore,
            std::path::PathBuf::from("/etc/weir/server.pem")
        );
        assert_eq!(tls.versions, vec![TlsVersion::Tls12, TlsVersion::Tls13]);
        assert_eq!(listeners.kafka[1].name, "PLAINTEXT");
        assert_eq!(listeners.kafka[1].tls, None);
        assert_eq!(listeners.controller[0].bind_address(), "127.0.0.1:9093");
        assert_eq!(listeners.inter_broker.listener, "PLAINTEXT");
    }

    #[test]
    fn mistakes_are_refused_with_what_to_change() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("listeners", "127.0.0.1:9092")],
                "is not NAME://HOST:PORT",
            ),
            (&[("listeners", "PLAINTEXT://127.0.0.1")], "has no :PORT"),
            (
                &[("listeners", "INTERNAL://127.0.0.1:9092")],
                "add INTERNAL:PLAINTEXT",
            ),
            (
                &[("listeners", "PLAINTEXT://a:9092,PLAINTEXT://b:9093")],
                "names PLAINTEXT twice",
            ),
            (
                &[
                    ("listeners", "PLAINTEXT://a:9092,SSL://b:9092"),
                    ("ssl.keystore.location", "k"),
                ],
                "port 9092",
            ),
            (
                &[("listeners", "PLAINTEXT://a:9092,SSL://b:9093")],
                "set ssl.keystore.location",
            ),
            (
                &[
                    ("listeners", "SSL://b:9093"),
                    ("ssl.keystore.location", "k"),
                ],
                "set inter.broker.listener.name",
            ),
            (
                &[("listeners", "SASL_SSL://b:9093,PLAINTEXT://a:9092")],
                "set ssl.keystore.location",
            ),
            (
                &[
                    ("listeners", "SASL_PLAINTEXT://b:9093,PLAINTEXT://a:9092"),
                    ("sasl.enabled.mechanisms", "GSSAPI"),
                ],
                "GSSAPI",
            ),
            (
                &[
                    ("listeners", "SASL_PLAINTEXT://b:9093,PLAINTEXT://a:9092"),
                    ("sasl.enabled.mechanisms", " "),
                ],
                "names no mechanism",
            ),
            (
                &[("listeners", "PLAINTEXT://0.0.0.0:9092")],
                "binds every interface",
            ),
            (
                &[("listeners", "PLAINTEXT://:9092")],
                "binds every interface",
            ),
            (
                &[
                    ("listeners", "PLAINTEXT://a:9092"),
                    ("advertised.listeners", "SSL://b:1"),
                ],
                "which listeners does not list",
            ),
            (
                &[
                    ("listeners", "PLAINTEXT://a:9092"),
                    ("advertised.listeners", "PLAINTEXT://0.0.0.0:1"),
                ],
                "no host",
            ),
            (
                &[
                    ("listeners", "PLAINTEXT://a:9092"),
                    ("inter.broker.listener.name", "SSL"),
                ],
                "not a Kafka listener",
            ),
            (
                &[
                    ("listeners", "PLAINTEXT://a:9092,SSL://b:1"),
                    ("ssl.keystore.location", "k"),
                    ("inter.broker.listener.name", "ssl"),
                ],
                "set ssl.truststore.location",
            ),
            (
                &[
                    ("listeners", "PLAINTEXT://a:9092,SSL://b:1"),
                    ("ssl.keystore.location", "k"),
                    ("ssl.keystore.type", "JKS"),
                ],
                "not supported",
            ),
            (
                &[
                    ("listeners", "PLAINTEXT://a:9092,SSL://b:1"),
                    ("ssl.keystore.location", "k"),
                    ("ssl.client.auth", "maybe"),
                ],
                "ssl.client.auth",
            ),
            (
                &[
                    ("listeners", "PLAINTEXT://a:9092,SSL://b:1"),
                    ("ssl.keystore.location", "k"),
                    ("ssl.enabled.protocols", "TLSv1.1"),
                ],
                "TLSv1.1",
            ),
            (
                &[
                    ("listeners", "C://a:9093"),
                    ("listener.security.protocol.map", "C:PLAINTEXT"),
                    ("controller.listener.names", "C"),
                ],
                "no listener for Kafka clients",
            ),
            (
                &[
                    ("listeners", "PLAINTEXT://a:9092"),
                    ("listener.security.protocol.map", "PLAINTEXT:TLS"),
                ],
                "NAME:PROTOCOL",
            ),
        ];
        for (pairs, expected) in cases {
            let error = resolve(pairs).expect_err(expected);
            assert!(
                error.contains(expected),
                "{pairs:?}: {error:?} lacks {expected:?}"
            );
        }
    }

    #[test]
    fn a_controller_listener_speaks_plaintext_or_mutual_tls() {
        let base = [
            ("listeners", "PLAINTEXT://a:9092,CONTROLLER://a:9093"),
            ("controller.listener.names", "CONTROLLER"),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
            ),
            (
                "listener.name.controller.ssl.keystore.location",
                "quorum.pem",
            ),
        ];
        let truststore = (
            "listener.name.controller.ssl.truststore.location",
            "quorum-ca.pem",
        );
        let listeners = resolve(&[&base[..], &[truststore]].concat()).expect("resolves");
        let tls = listeners.controller[0].tls.as_ref().expect("tls");
        assert_eq!(tls.client_auth, ClientAuth::Required);
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &base,
                "set listener.name.controller.ssl.truststore.location",
            ),
            (
                &[truststore, ("ssl.client.auth", "requested")],
                "ssl.client.auth is required on the controller port",
            ),
            (
                &[
                    (
                        "listener.security.protocol.map",
                        "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL",
                    ),
                    ("sasl.enabled.mechanisms", "PLAIN"),
                ],
                "speaks PLAINTEXT or SSL",
            ),
        ];
        for (extra, expected) in cases {
            let error = resolve(&[&base[..], extra].concat()).expect_err(expected);
            assert!(error.contains(expected), "{error:?} lacks {expected:?}");
        }
    }

    #[test]
    fn sasl_listeners_take_their_mechanisms() {
        let listeners = resolve(&[
            (
                "listeners",
                "PLAINTEXT://a:9092,SASL_SSL://a:9094,SASL_PLAINTEXT://a:9095",
            ),
            ("sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512"),
            (
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
                "plain",
            ),
            ("ssl.keystore.location", "k"),
        ])
        .expect("resolves");
        let sasl_ssl = &listeners.kafka[1];
        assert!(sasl_ssl.tls.is_some());
        assert_eq!(
            sasl_ssl.sasl,
            Some(vec![Mechanism::ScramSha256, Mechanism::ScramSha512])
        );
        assert_eq!(listeners.kafka[2].tls, None);
        assert_eq!(listeners.kafka[2].sasl, Some(vec![Mechanism::Plain]));
        assert_eq!(listeners.kafka[0].sasl, None);
    }

    #[test]
    fn wildcard_listeners_take_their_advertised_address() {
        let listeners = resolve(&[
            ("listeners", "PLAINTEXT://0.0.0.0:9092,EXTERNAL://[::]:9094"),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
            ),
            (
                "advertised.listeners",
                "PLAINTEXT://10.0.0.5:9092,EXTERNAL://[2001:db8::5]:9094",
            ),
        ])
        .expect("resolves");
        assert_eq!(listeners.kafka[1].bind_address(), "[::]:9094");
        assert_eq!(
            listeners.kafka[1].advertised,
            Some(("2001:db8::5".into(), 9094))
        );
    }

    #[test]
    fn per_listener_names_are_recognised() {
        assert!(is_per_listener_setting(
            "listener.name.ssl.ssl.keystore.location"
        ));
        assert!(is_per_listener_setting(
            "listener.name.external.ssl.client.auth"
        ));
        assert!(is_per_listener_setting(
            "listener.name.sasl_ssl.sasl.enabled.mechanisms"
        ));
        assert!(!is_per_listener_setting(
            "listener.name.ssl.sasl.jaas.config"
        ));
        assert!(!is_per_listener_setting("listener.name..ssl.client.auth"));
        assert!(!is_per_listener_setting("ssl.keystore.location"));
    }
}
