//! Client quotas as Kafka keeps them (KIP-546): a quota's entity names a user, a client id,
//! both, or an IP address, each by name or as the default of its type; its keys are Kafka's
//! (`producer_byte_rate`, `consumer_byte_rate`, `request_percentage`,
//! `controller_mutation_rate`, and `connection_creation_rate` for IPs). Here are the checks
//! AlterClientQuotas applies, the table the image holds, and the filter
//! DescribeClientQuotas selects with.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// What a quota entity's component names (Kafka's entity types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntityType {
    /// An authenticated user (`user`).
    User,
    /// A client id (`client-id`).
    ClientId,
    /// A client's IP address (`ip`).
    Ip,
}

impl EntityType {
    /// Every entity type.
    pub const ALL: [EntityType; 3] = [EntityType::User, EntityType::ClientId, EntityType::Ip];

    /// Kafka's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            EntityType::User => "user",
            EntityType::ClientId => "client-id",
            EntityType::Ip => "ip",
        }
    }

    /// The type Kafka calls `name`.
    pub fn parse(name: &str) -> Option<EntityType> {
        EntityType::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// Who a quota applies to: one name, or the default (`None`), for each type it has.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity(BTreeMap<EntityType, Option<String>>);

impl QuotaEntity {
    /// The entity of `components` (type and name, `None` for the type's default), checked as
    /// Kafka does: known types, each once, no empty name, and one of the combinations quotas
    /// exist for (a user, a client id, both, or an IP address alone, given as an address).
    pub fn new<'a>(
        components: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<QuotaEntity, String> {
        let mut entity = BTreeMap::new();
        for (kind, name) in components {
            let kind = EntityType::parse(kind)
                .ok_or_else(|| format!("Unhandled client quota entity type: {kind}"))?;
            if entity.contains_key(&kind) {
                return Err(format!(
                    "Invalid client quota entity, duplicate entity entry {}",
                    kind.name()
                ));
            }
            if name == Some("") {
                return Err(format!("Empty {} not supported", kind.name()));
            }
            entity.insert(kind, name.map(str::to_string));
        }
        if entity.is_empty() {
            return Err("Invalid empty client quota entity".into());
        }
        let entity = QuotaEntity(entity);
        if let Some(Some(ip)) = entity.0.get(&EntityType::Ip) {
            if entity.0.len() > 1 {
                return Err(
                    "An ip quota entity cannot be combined with a user or client-id".into(),
                );
            }
            if ip.parse::<IpAddr>().is_err() {
                return Err(format!("{ip} is not a valid IP address"));
            }
        }
        Ok(entity)
    }

    /// The entity's components: each type it names, with its name or `None` for the default.
    pub fn components(&self) -> impl Iterator<Item = (EntityType, Option<&str>)> {
        self.0.iter().map(|(kind, name)| (*kind, name.as_deref()))
    }

    /// Whether the entity is an IP address (or the IP default).
    pub fn is_ip(&self) -> bool {
        self.0.contains_key(&EntityType::Ip)
    }

    /// Its component of type `kind`: `Some(None)` for that type's default.
    pub fn get(&self, kind: EntityType) -> Option<Option<&str>> {
        self.0.get(&kind).map(Option::as_deref)
    }
}

/// `user=alice,client-id=<default>`, as Kafka's tools print an entity.
impl fmt::Display for QuotaEntity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (kind, name)) in self.components().enumerate() {
            let separator = if i == 0 { "" } else { "," };
            write!(
                f,
                "{separator}{}={}",
                kind.name(),
                name.unwrap_or("<default>")
            )?;
        }
        Ok(())
    }
}

/// A quota's key, with Kafka's name and type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaKey {
    /// Bytes per second a producer may append (a whole number).
    ProducerByteRate,
    /// Bytes per second a consumer may fetch (a whole number).
    ConsumerByteRate,
    /// Percentage of one request handler's time the client may take.
    RequestPercentage,
    /// Partitions per second the client may create or delete.
    ControllerMutationRate,
    /// Connections per second an IP address may open (a whole number, IP entities only).
    ConnectionCreationRate,
}

impl QuotaKey {
    /// Every key.
    pub const ALL: [QuotaKey; 5] = [
        QuotaKey::ProducerByteRate,
        QuotaKey::ConsumerByteRate,
        QuotaKey::RequestPercentage,
        QuotaKey::ControllerMutationRate,
        QuotaKey::ConnectionCreationRate,
    ];

    /// Kafka's name of the key.
    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::RequestPercentage => "request_percentage",
            QuotaKey::ControllerMutationRate => "controller_mutation_rate",
            QuotaKey::ConnectionCreationRate => "connection_creation_rate",
        }
    }

    /// The key Kafka calls `name`.
    pub fn parse(name: &str) -> Option<QuotaKey> {
        QuotaKey::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether Kafka defines the key as a whole number (LONG or INT) rather than a DOUBLE.
    fn is_whole(self) -> bool {
        matches!(
            self,
            QuotaKey::ProducerByteRate
                | QuotaKey::ConsumerByteRate
                | QuotaKey::ConnectionCreationRate
        )
    }

    /// Whether quotas of `entity` may have this key: connection_creation_rate for IPs, the
    /// others for users and client ids.
    fn applies_to(self, entity: &QuotaEntity) -> bool {
        (self == QuotaKey::ConnectionCreationRate) == entity.is_ip()
    }
}

/// A quota's value: finite and not negative (so equal to itself: the `Eq` below holds).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QuotaValue(f64);

impl Eq for QuotaValue {}

impl QuotaValue {
    /// The value as Kafka's clients send it.
    pub fn get(self) -> f64 {
        self.0
    }
}

/// The key Kafka calls `key`, if quotas of `entity` have it (what a removal is checked for).
pub fn quota_key(entity: &QuotaEntity, key: &str) -> Result<QuotaKey, String> {
    QuotaKey::parse(key)
        .filter(|k| k.applies_to(entity))
        .ok_or_else(|| format!("Invalid configuration key {key}"))
}

/// Checks `value` for key `key` of `entity`: a key quotas of the entity have, a finite value
/// not below zero, and a whole number where Kafka's type is LONG or INT (within Kafka's
/// tolerance of 1e-6).
pub fn check_quota(
    entity: &QuotaEntity,
    key: &str,
    value: f64,
) -> Result<(QuotaKey, QuotaValue), String> {
    let quota = quota_key(entity, key)?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!(
            "Configuration {key} must be a number of at least 0, not {value}"
        ));
    }
    if quota.is_whole() && (value.round() - value).abs() > 1e-6 {
        return Err(format!("Configuration {key} must be a Long value"));
    }
    if quota == QuotaKey::ConnectionCreationRate && value > f64::from(i32::MAX) {
        return Err(format!("Configuration {key} must be at most {}", i32::MAX));
    }
    Ok((quota, QuotaValue(value)))
}

/// One entity's quota changes (AlterClientQuotas), checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaAlteration {
    /// Whose quotas.
    pub entity: QuotaEntity,
    /// Quotas set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<QuotaKey, QuotaValue>,
    /// Quotas removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<QuotaKey>,
}

/// Every client quota, by entity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<EntityQuotas>", into = "Vec<EntityQuotas>")]
pub struct QuotaTable {
    by_entity: BTreeMap<QuotaEntity, BTreeMap<QuotaKey, QuotaValue>>,
    /// The `connection_creation_rate` of each address that has its own, by the address as
    /// it parses (canonical, so `::ffff:10.0.0.9` is `10.0.0.9`; where two entities name one
    /// address, the first in entity order): kept from `by_entity`, so that a new connection
    /// costs one lookup.
    ip_rates: HashMap<IpAddr, QuotaValue>,
    /// The IP default's `connection_creation_rate`, kept the same way.
    ip_default_rate: Option<QuotaValue>,
}

/// One entity's quotas, as snapshots store them (JSON has no keys but strings).
#[derive(Serialize, Deserialize)]
struct EntityQuotas {
    entity: QuotaEntity,
    quotas: BTreeMap<QuotaKey, QuotaValue>,
}

impl From<Vec<EntityQuotas>> for QuotaTable {
    fn from(entries: Vec<EntityQuotas>) -> QuotaTable {
        let mut table = QuotaTable {
            by_entity: entries
                .into_iter()
                .filter(|e| !e.quotas.is_empty())
                .map(|e| (e.entity, e.quotas))
                .collect(),
            ip_rates: HashMap::new(),
            ip_default_rate: None,
        };
        table.index_ips();
        table
    }
}

impl From<QuotaTable> for Vec<EntityQuotas> {
    fn from(table: QuotaTable) -> Vec<EntityQuotas> {
        table
            .by_entity
            .into_iter()
            .map(|(entity, quotas)| EntityQuotas { entity, quotas })
            .collect()
    }
}

impl QuotaTable {
    /// Whether no quota is set.
    pub fn is_empty(&self) -> bool {
        self.by_entity.is_empty()
    }

    /// The quotas of `entity`.
    pub fn quotas(&self, entity: &QuotaEntity) -> Option<&BTreeMap<QuotaKey, QuotaValue>> {
        self.by_entity.get(entity)
    }

    /// Every entity with quotas, with them.
    pub fn iter(&self) -> impl Iterator<Item = (&QuotaEntity, &BTreeMap<QuotaKey, QuotaValue>)> {
        self.by_entity.iter()
    }

    /// Applies `alteration`: removes, then sets; an entity left with no quota is dropped.
    pub fn apply(&mut self, alteration: &QuotaAlteration) {
        let quotas = self.by_entity.entry(alteration.entity.clone()).or_default();
        for key in &alteration.remove {
            quotas.remove(key);
        }
        quotas.extend(alteration.set.iter().map(|(k, v)| (*k, *v)));
        if quotas.is_empty() {
            self.by_entity.remove(&alteration.entity);
        }
        if alteration.entity.is_ip() {
            self.index_ips();
        }
    }

    /// Rebuilds `ip_rates` and `ip_default_rate` from the entities.
    fn index_ips(&mut self) {
        self.ip_rates.clear();
        self.ip_default_rate = None;
        for (entity, quotas) in &self.by_entity {
            let (Some(ip), Some(rate)) = (
                entity.get(EntityType::Ip),
                quotas.get(&QuotaKey::ConnectionCreationRate),
            ) else {
                continue;
            };
            match ip.map(str::parse::<IpAddr>) {
                None => self.ip_default_rate = Some(*rate),
                Some(Ok(address)) => {
                    self.ip_rates.entry(address.to_canonical()).or_insert(*rate);
                }
                Some(Err(_)) => {}
            }
        }
    }

    /// `alteration` without what would change nothing here (a removal of a quota not set, a
    /// value set again); `None` when nothing is left.
    pub fn effective(&self, alteration: &QuotaAlteration) -> Option<QuotaAlteration> {
        let current = self.quotas(&alteration.entity);
        let held = |key: &QuotaKey| current.and_then(|q| q.get(key)).copied();
        let effective = QuotaAlteration {
            entity: alteration.entity.clone(),
            set: alteration
                .set
                .iter()
                .filter(|(k, v)| held(k) != Some(**v))
                .map(|(k, v)| (*k, *v))
                .collect(),
            remove: alteration
                .remove
                .iter()
                .filter(|k| held(k).is_some())
                .copied()
                .collect(),
        };
        (!effective.set.is_empty() || !effective.remove.is_empty()).then_some(effective)
    }

    /// The quota of `key` that applies to a client of `user` (the principal's name, `alice`
    /// for `User:alice`) and `client_id`, in Kafka's order of precedence: user and client id,
    /// user and default client id, user, default user and client id, default user and default
    /// client id, default user, client id, default client id. Answered with the limit and whose
    /// usage it bounds: the user and the client id when the quota's entity names that kind (by
    /// name or as default), so a quota set for a user is shared by all its clients.
    pub fn quota_for(&self, key: QuotaKey, user: &str, client_id: &str) -> Option<AppliedQuota> {
        if self.by_entity.is_empty() {
            return None;
        }
        let levels: [(Component<'_>, Component<'_>); 8] = [
            (Some(Some(user)), Some(Some(client_id))),
            (Some(Some(user)), Some(None)),
            (Some(Some(user)), None),
            (Some(None), Some(Some(client_id))),
            (Some(None), Some(None)),
            (Some(None), None),
            (None, Some(Some(client_id))),
            (None, Some(None)),
        ];
        levels.into_iter().find_map(|(user_part, client_part)| {
            let mut entity = BTreeMap::new();
            if let Some(name) = user_part {
                entity.insert(EntityType::User, name.map(str::to_string));
            }
            if let Some(name) = client_part {
                entity.insert(EntityType::ClientId, name.map(str::to_string));
            }
            let limit = self.by_entity.get(&QuotaEntity(entity))?.get(&key)?;
            Some(AppliedQuota {
                user: user_part.map(|_| user.to_string()),
                client_id: client_part.map(|_| client_id.to_string()),
                limit: limit.get(),
            })
        })
    }

    /// The `connection_creation_rate` (connections a second) that applies to clients at
    /// `ip`: its address's own (however the address was written), else the IP default's.
    pub fn ip_connection_rate(&self, ip: IpAddr) -> Option<f64> {
        let own = self.ip_rates.get(&ip.to_canonical());
        own.or(self.ip_default_rate.as_ref()).map(|rate| rate.get())
    }

    /// The entities `filter` selects, with their quotas.
    pub fn select<'a>(
        &'a self,
        filter: &'a QuotaFilter,
    ) -> impl Iterator<Item = (&'a QuotaEntity, &'a BTreeMap<QuotaKey, QuotaValue>)> {
        self.by_entity
            .iter()
            .filter(move |(entity, _)| filter.matches(entity))
    }
}

/// One kind's part of an entity: absent (`None`), the default (`Some(None)`) or a name.
type Component<'a> = Option<Option<&'a str>>;

/// The quota that applies to one client, and whose usage it bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedQuota {
    /// The user whose usage counts, when the quota is a user's (or the default user's).
    pub user: Option<String>,
    /// The client id whose usage counts, when the quota is a client id's (or the default's).
    pub client_id: Option<String>,
    /// The limit (bytes per second, or a percentage, as the key says).
    pub limit: f64,
}

/// How a DescribeClientQuotas filter component matches an entity's name of its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameMatch {
    /// This name (`Some`) or the type's default (`None`).
    Exactly(Option<String>),
    /// Any name, or the default.
    Any,
}

/// A DescribeClientQuotas filter: components each entity must have, and with `strict`, no
/// others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaFilter {
    components: BTreeMap<EntityType, NameMatch>,
    strict: bool,
}

/// Why a DescribeClientQuotas filter is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterError {
    /// An entity type Weir does not know (Kafka: UNSUPPORTED_VERSION).
    UnknownType(String),
    /// Anything else wrong with it (Kafka: INVALID_REQUEST).
    Invalid(String),
}

impl QuotaFilter {
    /// The filter of `components` (entity type, Kafka's match type: 0 this name, 1 the
    /// default, 2 any; the name), checked as Kafka checks them.
    pub fn new<'a>(
        components: impl IntoIterator<Item = (&'a str, i8, Option<&'a str>)>,
        strict: bool,
    ) -> Result<QuotaFilter, FilterError> {
        let invalid = |why: String| Err(FilterError::Invalid(why));
        let mut filter = QuotaFilter {
            components: BTreeMap::new(),
            strict,
        };
        for (kind_name, match_type, name) in components {
            if kind_name.is_empty() {
                return invalid("Invalid empty entity type.".into());
            }
            let Some(kind) = EntityType::parse(kind_name) else {
                return Err(FilterError::UnknownType(format!(
                    "Unsupported entity type {kind_name}"
                )));
            };
            if filter.components.contains_key(&kind) {
                return invalid(format!(
                    "Entity type {kind_name} cannot appear more than once in the filter."
                ));
            }
            let matching = match (match_type, name) {
                (0, Some(name)) => NameMatch::Exactly(Some(name.to_string())),
                (0, None) => {
                    return invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                    )
                }
                (1, None) => NameMatch::Exactly(None),
                (1, Some(_)) => {
                    return invalid(
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                            .into(),
                    )
                }
                (2, None) => NameMatch::Any,
                (2, Some(_)) => return invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                        .into(),
                ),
                (other, _) => return invalid(format!("Unknown match type {other}")),
            };
            filter.components.insert(kind, matching);
        }
        if filter.components.contains_key(&EntityType::Ip) && filter.components.len() > 1 {
            return invalid(
                "Invalid entity filter component combination. IP filter component should not be \
                 used with user or clientId filter component."
                    .into(),
            );
        }
        Ok(filter)
    }

    /// Whether `entity` has every component the filter names, each matching (and, strict,
    /// no other). An empty filter selects everything, or with `strict` nothing.
    pub fn matches(&self, entity: &QuotaEntity) -> bool {
        if self.components.is_empty() {
            return !self.strict;
        }
        let each =
            self.components
                .iter()
                .all(|(kind, matching)| match (entity.get(*kind), matching) {
                    (None, _) => false,
                    (Some(_), NameMatch::Any) => true,
                    (Some(name), NameMatch::Exactly(wanted)) => name == wanted.as_deref(),
                });
        each && (!self.strict || entity.0.len() == self.components.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(components: &[(&str, Option<&str>)]) -> QuotaEntity {
        QuotaEntity::new(components.iter().copied()).expect("valid entity")
    }

    #[test]
    fn entities_are_checked_as_kafka_checks_them() {
        assert_eq!(
            entity(&[("client-id", None), ("user", Some("alice"))]).to_string(),
            "user=alice,client-id=<default>"
        );
        for (components, why) in [
            (vec![], "Invalid empty client quota entity"),
            (
                vec![("group", Some("g"))],
                "Unhandled client quota entity type: group",
            ),
            (vec![("user", Some(""))], "Empty user not supported"),
            (
                vec![("user", Some("a")), ("user", Some("b"))],
                "Invalid client quota entity, duplicate entity entry user",
            ),
            (
                vec![("ip", Some("not-an-ip"))],
                "not-an-ip is not a valid IP address",
            ),
            (
                vec![("ip", Some("10.0.0.1")), ("user", Some("a"))],
                "An ip quota entity cannot be combined with a user or client-id",
            ),
        ] {
            assert_eq!(QuotaEntity::new(components).err().as_deref(), Some(why));
        }
        assert!(QuotaEntity::new([("ip", Some("::1"))]).is_ok());
        assert!(QuotaEntity::new([("ip", None)]).is_ok());
    }

    #[test]
    fn values_are_checked_by_key_and_entity() {
        let user = entity(&[("user", Some("alice"))]);
        let ip = entity(&[("ip", Some("127.0.0.1"))]);
        assert_eq!(
            check_quota(&user, "producer_byte_rate", 1024.0),
            Ok((QuotaKey::ProducerByteRate, QuotaValue(1024.0)))
        );
        assert!(check_quota(&user, "request_percentage", 12.5).is_ok());
        assert!(check_quota(&ip, "connection_creation_rate", 10.0).is_ok());
        for (entity, key, value, why) in [
            (&user, "producer_byte_rate", 1.5, "must be a Long value"),
            (&user, "consumer_byte_rate", -1.0, "at least 0"),
            (&user, "request_percentage", f64::NAN, "at least 0"),
            (
                &user,
                "connection_creation_rate",
                1.0,
                "Invalid configuration key",
            ),
            (&ip, "producer_byte_rate", 1.0, "Invalid configuration key"),
            (&user, "retention.ms", 1.0, "Invalid configuration key"),
            (&ip, "connection_creation_rate", 3e9, "at most"),
        ] {
            let error = check_quota(entity, key, value).expect_err("refused");
            assert!(error.contains(why), "{key}={value}: {error}");
        }
    }

    #[test]
    fn alterations_apply_and_drop_what_changes_nothing() {
        let alice = entity(&[("user", Some("alice"))]);
        let mut table = QuotaTable::default();
        let set = QuotaAlteration {
            entity: alice.clone(),
            set: BTreeMap::from([(QuotaKey::ProducerByteRate, QuotaValue(1024.0))]),
            remove: vec![QuotaKey::ConsumerByteRate],
        };
        let effective = table.effective(&set).expect("a change");
        assert!(effective.remove.is_empty(), "nothing to remove");
        table.apply(&effective);
        assert_eq!(table.effective(&set), None, "set again: no change");
        let json = serde_json::to_string(&table).expect("encodes");
        assert_eq!(
            serde_json::from_str::<QuotaTable>(&json).expect("decodes"),
            table
        );
        table.apply(&QuotaAlteration {
            entity: alice.clone(),
            set: BTreeMap::new(),
            remove: vec![QuotaKey::ProducerByteRate],
        });
        assert!(table.is_empty(), "an entity without quotas is dropped");
    }

    #[test]
    fn an_address_has_its_own_connection_rate_else_the_default() {
        let mut table = QuotaTable::default();
        let ip = |s: &str| s.parse::<IpAddr>().expect("address");
        assert_eq!(table.ip_connection_rate(ip("10.0.0.1")), None);
        let set = |table: &mut QuotaTable, name: Option<&str>, rate: f64| {
            table.apply(&QuotaAlteration {
                entity: entity(&[("ip", name)]),
                set: BTreeMap::from([(QuotaKey::ConnectionCreationRate, QuotaValue(rate))]),
                remove: Vec::new(),
            });
        };
        set(&mut table, Some("10.0.0.1"), 5.0);
        set(&mut table, Some("0:0:0:0:0:0:0:1"), 7.0);
        assert_eq!(table.ip_connection_rate(ip("10.0.0.1")), Some(5.0));
        assert_eq!(table.ip_connection_rate(ip("10.0.0.2")), None);
        assert_eq!(
            table.ip_connection_rate(ip("::1")),
            Some(7.0),
            "written otherwise"
        );
        assert_eq!(
            table.ip_connection_rate(ip("::ffff:10.0.0.1")),
            Some(5.0),
            "IPv4 mapped to IPv6"
        );
        set(&mut table, None, 2.0);
        assert_eq!(table.ip_connection_rate(ip("10.0.0.2")), Some(2.0));
        assert_eq!(table.ip_connection_rate(ip("10.0.0.1")), Some(5.0));
        // A snapshot read back finds the same; a removed quota is gone.
        let json = serde_json::to_string(&table).expect("encode");
        let mut table: QuotaTable = serde_json::from_str(&json).expect("decode");
        assert_eq!(table.ip_connection_rate(ip("::ffff:10.0.0.1")), Some(5.0));
        assert_eq!(table.ip_connection_rate(ip("10.0.0.3")), Some(2.0));
        table.apply(&QuotaAlteration {
            entity: entity(&[("ip", Some("10.0.0.1"))]),
            set: BTreeMap::new(),
            remove: vec![QuotaKey::ConnectionCreationRate],
        });
        assert_eq!(
            table.ip_connection_rate(ip("10.0.0.1")),
            Some(2.0),
            "the default's"
        );
    }

    #[test]
    fn the_most_specific_quota_applies() {
        let mut table = QuotaTable::default();
        let applied = |table: &QuotaTable, user: &str, client: &str| {
            table
                .quota_for(QuotaKey::ProducerByteRate, user, client)
                .map(|q| (q.user, q.client_id, q.limit))
        };
        assert_eq!(applied(&table, "alice", "app"), None);
        let mut set = |components: &[(&str, Option<&str>)], limit: f64| {
            table.apply(&QuotaAlteration {
                entity: entity(components),
                set: BTreeMap::from([(QuotaKey::ProducerByteRate, QuotaValue(limit))]),
                remove: Vec::new(),
            });
        };
        set(&[("client-id", None)], 8.0);
        set(&[("client-id", Some("app"))], 7.0);
        set(&[("user", None)], 6.0);
        set(&[("user", None), ("client-id", None)], 5.0);
        set(&[("user", None), ("client-id", Some("app"))], 4.0);
        set(&[("user", Some("alice"))], 3.0);
        set(&[("user", Some("alice")), ("client-id", None)], 2.0);
        set(&[("user", Some("alice")), ("client-id", Some("app"))], 1.0);
        let name = |s: &str| Some(s.to_string());
        assert_eq!(
            applied(&table, "alice", "app"),
            Some((name("alice"), name("app"), 1.0))
        );
        assert_eq!(
            applied(&table, "alice", "other"),
            Some((name("alice"), name("other"), 2.0))
        );
        assert_eq!(
            applied(&table, "bob", "app"),
            Some((name("bob"), name("app"), 4.0))
        );
        assert_eq!(
            applied(&table, "bob", "other"),
            Some((name("bob"), name("other"), 5.0))
        );
        let mut table = QuotaTable::default();
        table.apply(&QuotaAlteration {
            entity: entity(&[("user", Some("alice"))]),
            set: BTreeMap::from([(QuotaKey::ProducerByteRate, QuotaValue(3.0))]),
            remove: Vec::new(),
        });
        table.apply(&QuotaAlteration {
            entity: entity(&[("client-id", Some("app"))]),
            set: BTreeMap::from([(QuotaKey::ProducerByteRate, QuotaValue(7.0))]),
            remove: Vec::new(),
        });
        assert_eq!(
            applied(&table, "alice", "app"),
            Some((name("alice"), None, 3.0)),
            "a user's quota is shared by all its clients"
        );
        assert_eq!(
            applied(&table, "bob", "app"),
            Some((None, name("app"), 7.0))
        );
        assert_eq!(applied(&table, "bob", "other"), None);
        assert_eq!(
            table.quota_for(QuotaKey::ConsumerByteRate, "alice", "app"),
            None,
            "each key alone"
        );
    }

    #[test]
    fn filters_select_as_kafka_does() {
        let mut table = QuotaTable::default();
        let entities = [
            entity(&[("user", Some("alice"))]),
            entity(&[("user", Some("alice")), ("client-id", Some("app"))]),
            entity(&[("user", None)]),
            entity(&[("client-id", Some("app"))]),
            entity(&[("ip", Some("10.0.0.1"))]),
        ];
        for e in &entities {
            table.apply(&QuotaAlteration {
                entity: e.clone(),
                set: BTreeMap::from([(
                    if e.is_ip() {
                        QuotaKey::ConnectionCreationRate
                    } else {
                        QuotaKey::RequestPercentage
                    },
                    QuotaValue(5.0),
                )]),
                remove: Vec::new(),
            });
        }
        let selected = |components: &[(&str, i8, Option<&str>)], strict: bool| {
            let filter = QuotaFilter::new(components.iter().copied(), strict).expect("valid");
            table
                .select(&filter)
                .map(|(e, _)| e.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(selected(&[], false).len(), 5);
        assert!(selected(&[], true).is_empty());
        assert_eq!(
            selected(&[("user", 0, Some("alice"))], false),
            ["user=alice", "user=alice,client-id=app"]
        );
        assert_eq!(
            selected(&[("user", 0, Some("alice"))], true),
            ["user=alice"]
        );
        assert_eq!(selected(&[("user", 1, None)], false), ["user=<default>"]);
        assert_eq!(
            selected(&[("user", 2, None), ("client-id", 2, None)], false),
            ["user=alice,client-id=app"]
        );
        assert_eq!(selected(&[("ip", 2, None)], true), ["ip=10.0.0.1"]);
        for (components, refusal) in [
            (
                vec![("user", 0, None)],
                FilterError::Invalid(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                ),
            ),
            (
                vec![("user", 2, None), ("user", 1, None)],
                FilterError::Invalid(
                    "Entity type user cannot appear more than once in the filter.".into(),
                ),
            ),
            (
                vec![("group", 2, None)],
                FilterError::UnknownType("Unsupported entity type group".into()),
            ),
            (
                vec![("ip", 2, None), ("user", 2, None)],
                FilterError::Invalid(
                    "Invalid entity filter component combination. IP filter component should \
                     not be used with user or clientId filter component."
                        .into(),
                ),
            ),
            (
                vec![("user", 7, None)],
                FilterError::Invalid("Unknown match type 7".into()),
            ),
        ] {
            assert_eq!(QuotaFilter::new(components, false).err(), Some(refusal));
        }
    }
}
