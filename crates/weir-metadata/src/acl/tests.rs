use super::*;

const HOST: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 7));

fn acl(
    (resource_type, pattern_type, name): (ResourceType, PatternType, &str),
    principal: &str,
    operation: AclOperation,
    permission: AclPermission,
) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern {
            resource_type,
            pattern_type,
            name: name.into(),
        },
        entry: AclEntry {
            principal: principal.into(),
            host: WILDCARD.into(),
            operation,
            permission,
        },
    }
}

fn topic(name: &str) -> (ResourceType, PatternType, &str) {
    (ResourceType::Topic, PatternType::Literal, name)
}

fn table(acls: &[AclBinding]) -> AclTable {
    AclTable::from(acls.to_vec())
}

use AclDecision::*;
use AclOperation::*;
use AclPermission::*;

#[test]
fn a_resource_without_acls_is_left_to_the_default() {
    let acls = table(&[acl(topic("orders"), "User:alice", Read, Allow)]);
    assert_eq!(
        acls.decide(("User:bob", HOST), Read, (ResourceType::Topic, "payments")),
        NoAcls
    );
    assert_eq!(
        acls.decide(("User:bob", HOST), Read, (ResourceType::Topic, "orders")),
        Denied
    );
    assert_eq!(
        acls.decide(("User:alice", HOST), Read, (ResourceType::Topic, "orders")),
        Allowed
    );
    assert_eq!(
        acls.decide(("User:alice", HOST), Write, (ResourceType::Topic, "orders")),
        Denied
    );
}

#[test]
fn read_write_delete_and_alter_imply_describe_and_all_implies_everything() {
    for op in [Read, Write, Delete, Alter] {
        let acls = table(&[acl(topic("t"), "User:a", op, Allow)]);
        assert_eq!(
            acls.decide(("User:a", HOST), Describe, (ResourceType::Topic, "t")),
            Allowed,
            "{op}"
        );
    }
    let acls = table(&[acl(topic("t"), "User:a", AlterConfigs, Allow)]);
    assert_eq!(
        acls.decide(
            ("User:a", HOST),
            DescribeConfigs,
            (ResourceType::Topic, "t")
        ),
        Allowed
    );
    assert_eq!(
        acls.decide(("User:a", HOST), Describe, (ResourceType::Topic, "t")),
        Denied
    );
    let acls = table(&[acl(topic("t"), "User:a", All, Allow)]);
    for op in AclOperation::of(ResourceType::Topic) {
        assert_eq!(
            acls.decide(("User:a", HOST), *op, (ResourceType::Topic, "t")),
            Allowed
        );
    }
}

#[test]
fn a_deny_wins_over_any_allow_and_covers_only_its_operation() {
    let acls = table(&[
        acl(topic("*"), "User:*", All, Allow),
        acl(
            (ResourceType::Topic, PatternType::Prefixed, "secret-"),
            "User:eve",
            Read,
            Deny,
        ),
    ]);
    let eve = ("User:eve", HOST);
    assert_eq!(
        acls.decide(eve, Read, (ResourceType::Topic, "secret-plans")),
        Denied
    );
    assert_eq!(
        acls.decide(eve, Describe, (ResourceType::Topic, "secret-plans")),
        Allowed
    );
    assert_eq!(
        acls.decide(eve, Read, (ResourceType::Topic, "public")),
        Allowed
    );
    assert_eq!(
        acls.decide(
            ("User:bob", HOST),
            Read,
            (ResourceType::Topic, "secret-plans")
        ),
        Allowed
    );
}

#[test]
fn prefixes_match_by_characters_and_hosts_by_address() {
    let mut binding = acl(
        (ResourceType::Group, PatternType::Prefixed, "grüppe-"),
        "User:a",
        Read,
        Allow,
    );
    binding.entry.host = "10.0.0.7".into();
    let acls = table(&[binding]);
    let group = |name| (ResourceType::Group, name);
    assert_eq!(
        acls.decide(("User:a", HOST), Read, group("grüppe-1")),
        Allowed
    );
    assert_eq!(acls.decide(("User:a", HOST), Read, group("grüppe")), NoAcls);
    let elsewhere: IpAddr = "10.0.0.8".parse().expect("valid");
    assert_eq!(
        acls.decide(("User:a", elsewhere), Read, group("grüppe-1")),
        Denied
    );
}

#[test]
fn some_topic_write_delegates_idempotent_write_unless_denied_everywhere() {
    let acls = table(&[acl(
        (ResourceType::Topic, PatternType::Prefixed, "app-"),
        "User:a",
        Write,
        Allow,
    )]);
    assert!(acls.allows_some(("User:a", HOST), Write, ResourceType::Topic));
    assert!(!acls.allows_some(("User:b", HOST), Write, ResourceType::Topic));
    let mut denied = acls.clone();
    denied.insert(acl(topic("*"), "User:a", Write, Deny));
    assert!(!denied.allows_some(("User:a", HOST), Write, ResourceType::Topic));
}

#[test]
fn filters_select_as_kafka_does() {
    let literal = acl(topic("orders"), "User:a", Read, Allow);
    let wildcard = acl(topic("*"), "User:b", Write, Allow);
    let prefixed = acl(
        (ResourceType::Topic, PatternType::Prefixed, "ord"),
        "User:c",
        Read,
        Deny,
    );
    let group = acl(
        (ResourceType::Group, PatternType::Literal, "orders"),
        "User:a",
        Read,
        Allow,
    );
    let all = [&literal, &wildcard, &prefixed, &group];
    let selected = |filter: AclFilter| {
        all.iter()
            .filter(|b| filter.matches(b))
            .map(|b| (*b).clone())
            .collect::<Vec<_>>()
    };
    let filter = |rt: i8, name: Option<&str>, pt: i8| {
        AclFilter::from_wire((rt, name, pt), (None, None, 1, 1)).expect("valid")
    };
    assert_eq!(selected(filter(1, None, 1)).len(), 4);
    assert_eq!(
        selected(filter(2, Some("orders"), 2)),
        vec![literal.clone(), wildcard.clone(), prefixed.clone()]
    );
    assert_eq!(
        selected(filter(1, Some("orders"), 1)),
        vec![literal.clone(), group.clone()]
    );
    assert_eq!(selected(filter(2, Some("ord"), 4)), vec![prefixed.clone()]);
    assert_eq!(
        selected(filter(2, None, 3)),
        vec![literal.clone(), wildcard.clone()]
    );
    let by_principal =
        AclFilter::from_wire((1, None, 1), (Some("User:a"), Some("*"), 3, 3)).expect("valid");
    assert_eq!(selected(by_principal), vec![literal, group]);
}

#[test]
fn bad_bindings_and_filters_are_refused_with_kafkas_messages() {
    let ok = ((2, "t", 3), ("User:a", "*", 3, 3));
    assert!(AclBinding::from_wire(ok.0, ok.1).is_ok());
    let refused = [
        (
            (1, "t", 3),
            ("User:a", "*", 3, 3),
            "Invalid resourceType ANY",
        ),
        (
            (0, "t", 3),
            ("User:a", "*", 3, 3),
            "Invalid resourceType UNKNOWN",
        ),
        (
            (2, "t", 2),
            ("User:a", "*", 3, 3),
            "Invalid patternType MATCH",
        ),
        ((2, "t", 3), ("User:a", "*", 1, 3), "Invalid operation ANY"),
        (
            (2, "t", 3),
            ("User:a", "*", 3, 1),
            "Invalid permissionType ANY",
        ),
        (
            (2, "", 3),
            ("User:a", "*", 3, 3),
            "Resource name should not be empty",
        ),
        (
            (4, "c", 3),
            ("User:a", "*", 3, 3),
            "The only valid name for the CLUSTER resource is kafka-cluster",
        ),
        (
            (2, "t", 3),
            ("alice", "*", 3, 3),
            "Could not parse principal from `alice`",
        ),
    ];
    for (pattern, entry, message) in refused {
        let error = AclBinding::from_wire(pattern, entry).expect_err("refused");
        assert!(error.starts_with(message), "{error}");
    }
    assert!(AclFilter::from_wire((0, None, 1), (None, None, 1, 1)).is_err());
    assert!(AclFilter::from_wire((1, None, 0), (None, None, 1, 1)).is_err());
}

#[test]
fn the_table_serializes_as_a_list_of_bindings() {
    let acls = table(&[
        acl(topic("b"), "User:a", Read, Allow),
        acl(topic("a"), "User:a", Read, Allow),
        acl(topic("a"), "User:a", Read, Allow),
    ]);
    assert_eq!(acls.len(), 2);
    let json = serde_json::to_string(&acls).expect("valid");
    assert!(json.starts_with('['), "{json}");
    let back: AclTable = serde_json::from_str(&json).expect("valid");
    assert_eq!(back, acls);
}
