//! Configs: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on topics and brokers.

use std::time::Duration;

use anyhow::Result;
use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request as incremental;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, ApiKey, DescribeConfigsRequest,
    DescribeConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};

use super::{scenarios, Expect};
use crate::session::Ctx;
use crate::setup::{compared_config, create_topic, s, KAFKA_DYNAMIC_DEFAULT, WEIR_OWN_CONFIG};

/// ConfigResource types.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;

scenarios! { "configs";
    describe_topic_all: Expect::Same,
        "DescribeConfigs v4: every config of a topic with one set";
    describe_topic_documentation: Expect::Deliberate("the documentation is Weir's own words"),
        "DescribeConfigs v4 with documentation for named keys";
    weir_flush_policy: Expect::Deliberate("flush.policy is Weir's own topic config (when to fsync)"),
        "DescribeConfigs v4 for flush.policy";
    min_insync_replicas_source: Expect::Pending("Kafka 4 keeps the cluster's min.insync.replicas as a dynamic broker default, for eligible leader replicas (KIP-966), which Weir does not have"),
        "min.insync.replicas on a topic and the cluster default's set";
    describe_topic_synonyms: Expect::Same,
        "DescribeConfigs v4 with synonyms: the topic and broker levels behind each value";
    describe_topic_keys: Expect::Same,
        "DescribeConfigs v1 and v4 for named keys, one unknown, and for an unknown topic";
    describe_broker_all: Expect::Deliberate("the broker resource lists the configs Weir has, not Kafka's 350"),
        "DescribeConfigs v4: every config of the broker";
    describe_broker_keys: Expect::Same,
        "DescribeConfigs v4 for named broker keys, an unknown broker id and an empty one";
    alter_configs_topic: Expect::Same,
        "AlterConfigs v2: replace a topic's configs, bad values, unknown keys, unknown topic";
    alter_configs_broker: Expect::Same,
        "AlterConfigs v2 on the broker resource: dynamic, static, unknown and bad keys, other brokers";
    incremental_set_delete: Expect::Same,
        "IncrementalAlterConfigs v1: SET and DELETE, then DescribeConfigs";
    incremental_refusals: Expect::Same,
        "IncrementalAlterConfigs v1: bad values, unknown keys, null values, SET and DELETE of one key";
    incremental_unknown_operation: Expect::Deliberate("an operation that does not exist is INVALID_CONFIG, not UNKNOWN_SERVER_ERROR"),
        "IncrementalAlterConfigs v1 with operation 4";
    incremental_lists: Expect::Same,
        "IncrementalAlterConfigs v1: APPEND and SUBTRACT on cleanup.policy and a non-list key";
    incremental_broker: Expect::Same,
        "IncrementalAlterConfigs v1: cluster-wide and per-broker defaults, and what topics show of them";
    broker_unknown_key: Expect::Deliberate("an unknown broker config is refused, not stored and ignored"),
        "AlterConfigs and IncrementalAlterConfigs v2/v1 of an unknown broker key";
    cleaner_threads_beyond_double: Expect::Deliberate("log.cleaner.threads may change to any value in range, not only to half or double the current one"),
        "IncrementalAlterConfigs v1 of log.cleaner.threads to four times its value";
    broker_settings_at_runtime: Expect::Same,
        "IncrementalAlterConfigs v1 of broker settings that change at runtime: the cleaner's, the connection limits, producer expiry";
    value_spellings: Expect::Same,
        "IncrementalAlterConfigs v1 of a boolean, an integer and a list each spelled three ways, each then described";
}

fn resource(kind: i8, name: &str, keys: Option<&[&str]>) -> DescribeConfigsResource {
    let mut r = DescribeConfigsResource::default();
    r.resource_type = kind;
    r.resource_name = s(name);
    r.configuration_keys = keys.map(|keys| keys.iter().map(|k| s(k)).collect());
    r
}

async fn describe(
    cx: &mut Ctx,
    version: i16,
    resources: Vec<DescribeConfigsResource>,
    synonyms: bool,
    documentation: bool,
) -> Result<()> {
    describe_keeping(
        cx,
        version,
        resources,
        synonyms,
        documentation,
        compared_config,
    )
    .await
}

/// Like [`describe`], recording only the configs `keep` names.
async fn describe_keeping(
    cx: &mut Ctx,
    version: i16,
    resources: Vec<DescribeConfigsResource>,
    synonyms: bool,
    documentation: bool,
    keep: impl Fn(&str) -> bool,
) -> Result<()> {
    let mut request = DescribeConfigsRequest::default();
    request.resources = resources;
    request.include_synonyms = synonyms;
    request.include_documentation = documentation;
    // Kafka answers an alteration before its broker has applied it: read until the answer
    // holds still (the same three times over 100 ms, within 5 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut response: DescribeConfigsResponse = cx
        .quietly(ApiKey::DescribeConfigs, version, &request)
        .await?;
    let mut unchanged = 0;
    while unchanged < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let again: DescribeConfigsResponse = cx
            .quietly(ApiKey::DescribeConfigs, version, &request)
            .await?;
        unchanged = if again == response { unchanged + 1 } else { 0 };
        response = again;
    }
    // Clients look configs up by name; Kafka answers named keys in an order of its own.
    for result in &mut response.results {
        result.configs.retain(|c| keep(c.name.as_str()));
        result.configs.sort_by(|a, b| a.name.cmp(&b.name));
    }
    cx.record(
        &format!("DescribeConfigs v{version} (configs by name)"),
        &response,
    );
    Ok(())
}

async fn describe_topic_all(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "described", 1, &[("retention.ms", "3600000")]).await?;
    describe(cx, 4, vec![resource(TOPIC, &topic.0, None)], false, false).await
}

async fn describe_topic_documentation(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "documented", 1, &[]).await?;
    let keys = ["retention.ms", "cleanup.policy"];
    describe(
        cx,
        4,
        vec![resource(TOPIC, &topic.0, Some(&keys))],
        false,
        true,
    )
    .await
}

async fn weir_flush_policy(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "flush-policy", 1, &[]).await?;
    let keys = [WEIR_OWN_CONFIG];
    let resources = vec![resource(TOPIC, &topic.0, Some(&keys))];
    describe_keeping(cx, 4, resources, true, false, |_| true).await
}

async fn min_insync_replicas_source(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "min-insync", 1, &[]).await?;
    let keys = [KAFKA_DYNAMIC_DEFAULT];
    let resources = vec![resource(TOPIC, &topic.0, Some(&keys))];
    describe_keeping(cx, 4, resources, true, false, |_| true).await?;
    // The cluster default's whole set, and replacing it (which would remove that key).
    describe(cx, 4, vec![resource(BROKER, "", None)], true, false).await?;
    let replace = [("log.retention.ms", Some("7200000"))];
    alter(cx, BROKER, "", &replace, true).await
}

async fn describe_topic_synonyms(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "synonyms", 1, &[("retention.ms", "3600000")]).await?;
    describe(cx, 4, vec![resource(TOPIC, &topic.0, None)], true, false).await
}

async fn describe_topic_keys(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "keys", 1, &[("cleanup.policy", "compact")]).await?;
    let keys = [
        "cleanup.policy",
        "retention.ms",
        "max.message.bytes",
        "no.such.key",
    ];
    for version in [1, 4] {
        describe(
            cx,
            version,
            vec![resource(TOPIC, &topic.0, Some(&keys))],
            false,
            false,
        )
        .await?;
    }
    let unknown = cx.name("not-a-topic");
    describe(
        cx,
        4,
        vec![resource(TOPIC, &unknown, None), resource(TOPIC, "", None)],
        false,
        false,
    )
    .await
}

async fn describe_broker_all(cx: &mut Ctx) -> Result<()> {
    describe(cx, 4, vec![resource(BROKER, "1", None)], false, false).await
}

async fn describe_broker_keys(cx: &mut Ctx) -> Result<()> {
    let keys = [
        "num.partitions",
        "log.retention.ms",
        "log.segment.bytes",
        "auto.create.topics.enable",
        "message.max.bytes",
        "no.such.key",
    ];
    describe(cx, 4, vec![resource(BROKER, "1", Some(&keys))], true, false).await?;
    // Another broker's id, the cluster default (nothing set), and not a number.
    for broker in ["7", "", "x"] {
        let resources = vec![resource(BROKER, broker, Some(&keys[..1]))];
        describe(cx, 4, resources, false, false).await?;
    }
    Ok(())
}

fn alterable(pairs: &[(&str, Option<&str>)]) -> Vec<AlterableConfig> {
    pairs
        .iter()
        .map(|(k, v)| {
            let mut c = AlterableConfig::default();
            c.name = s(k);
            c.value = v.map(s);
            c
        })
        .collect()
}

async fn alter(
    cx: &mut Ctx,
    kind: i8,
    name: &str,
    pairs: &[(&str, Option<&str>)],
    validate_only: bool,
) -> Result<()> {
    let mut r = AlterConfigsResource::default();
    r.resource_type = kind;
    r.resource_name = s(name);
    r.configs = alterable(pairs);
    let mut request = AlterConfigsRequest::default();
    request.resources = vec![r];
    request.validate_only = validate_only;
    let _: AlterConfigsResponse = cx.answer(ApiKey::AlterConfigs, 2, &request).await?;
    Ok(())
}

const CHECKED_KEYS: [&str; 4] = [
    "retention.ms",
    "segment.ms",
    "cleanup.policy",
    "max.message.bytes",
];

/// Records the topic's [`CHECKED_KEYS`] (what the alterations change).
async fn checked(cx: &mut Ctx, topic: &str) -> Result<()> {
    let resources = vec![resource(TOPIC, topic, Some(&CHECKED_KEYS))];
    describe(cx, 4, resources, false, false).await
}

/// One AlterConfigs change (pairs of key and value) after another, to `topic`.
type Replacement<'a> = &'a [(&'a str, Option<&'a str>)];

async fn alter_configs_topic(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "altered", 1, &[("segment.ms", "100000")]).await?;
    let name = topic.0.to_string();
    alter(cx, TOPIC, &name, &[("retention.ms", Some("7200000"))], true).await?;
    let replace: Replacement = &[
        ("retention.ms", Some("7200000")),
        ("cleanup.policy", Some("compact")),
    ];
    alter(cx, TOPIC, &name, replace, false).await?;
    checked(cx, &name).await?;
    let refused: [Replacement; 4] = [
        &[("retention.ms", Some("soon"))],
        &[("no.such.key", Some("1"))],
        &[("retention.ms", None)],
        &[("retention.ms", Some("1")), ("retention.ms", Some("2"))],
    ];
    for pairs in refused {
        alter(cx, TOPIC, &name, pairs, false).await?;
    }
    alter(
        cx,
        TOPIC,
        &cx.name("nowhere"),
        &[("retention.ms", Some("1"))],
        false,
    )
    .await?;
    checked(cx, &name).await
}

async fn alter_configs_broker(cx: &mut Ctx) -> Result<()> {
    let checks: [(&str, &str, &str); 5] = [
        ("1", "log.retention.ms", "7200000"),
        ("1", "num.partitions", "2"),
        ("1", "log.retention.ms", "soon"),
        ("7", "log.retention.ms", "7200000"),
        ("x", "log.retention.ms", "7200000"),
    ];
    for (broker, key, value) in checks {
        alter(cx, BROKER, broker, &[(key, Some(value))], true).await?;
    }
    // A real change of this broker's configs, then AlterConfigs with none, which removes it.
    let keys = ["message.max.bytes", "log.segment.bytes"];
    alter(
        cx,
        BROKER,
        "1",
        &[("message.max.bytes", Some("2000000"))],
        false,
    )
    .await?;
    describe(cx, 4, vec![resource(BROKER, "1", Some(&keys))], true, false).await?;
    alter(cx, BROKER, "1", &[], false).await?;
    describe(cx, 4, vec![resource(BROKER, "1", Some(&keys))], true, false).await
}

/// One IncrementalAlterConfigs change: (key, operation, value) each.
type Operations<'a> = &'a [(&'a str, i8, Option<&'a str>)];

async fn incremental(
    cx: &mut Ctx,
    kind: i8,
    name: &str,
    ops: Operations<'_>,
    validate_only: bool,
) -> Result<()> {
    let mut r = incremental::AlterConfigsResource::default();
    r.resource_type = kind;
    r.resource_name = s(name);
    r.configs = ops
        .iter()
        .map(|(k, op, v)| {
            let mut c = incremental::AlterableConfig::default();
            c.name = s(k);
            c.config_operation = *op;
            c.value = v.map(s);
            c
        })
        .collect();
    let mut request = IncrementalAlterConfigsRequest::default();
    request.resources = vec![r];
    request.validate_only = validate_only;
    let _: IncrementalAlterConfigsResponse = cx
        .answer(ApiKey::IncrementalAlterConfigs, 1, &request)
        .await?;
    Ok(())
}

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

async fn incremental_set_delete(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "incremental", 1, &[("segment.ms", "100000")]).await?;
    let name = topic.0.to_string();
    incremental(
        cx,
        TOPIC,
        &name,
        &[("retention.ms", SET, Some("7200000"))],
        true,
    )
    .await?;
    let change: Operations = &[
        ("retention.ms", SET, Some("7200000")),
        ("segment.ms", DELETE, None),
    ];
    incremental(cx, TOPIC, &name, change, false).await?;
    checked(cx, &name).await?;
    let deletes: Operations = &[
        ("cleanup.policy", DELETE, None),
        ("max.message.bytes", DELETE, Some("5")),
    ];
    incremental(cx, TOPIC, &name, deletes, false).await?;
    checked(cx, &name).await
}

async fn incremental_refusals(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "incremental-refusals", 1, &[]).await?;
    let name = topic.0.to_string();
    let refused: [Operations; 5] = [
        &[("retention.ms", SET, Some("soon"))],
        &[("no.such.key", SET, Some("1"))],
        &[("no.such.key", DELETE, None)],
        &[("retention.ms", SET, None)],
        &[
            ("retention.ms", SET, Some("1")),
            ("retention.ms", DELETE, None),
        ],
    ];
    for ops in refused {
        incremental(cx, TOPIC, &name, ops, false).await?;
    }
    incremental(
        cx,
        TOPIC,
        &cx.name("nowhere"),
        &[("retention.ms", SET, Some("1"))],
        false,
    )
    .await?;
    incremental(cx, 9, "x", &[("retention.ms", SET, Some("1"))], false).await?;
    checked(cx, &name).await
}

async fn incremental_unknown_operation(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "incremental-op4", 1, &[]).await?;
    incremental(
        cx,
        TOPIC,
        &topic.0,
        &[("retention.ms", 4, Some("1"))],
        false,
    )
    .await
}

async fn incremental_lists(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "incremental-lists", 1, &[]).await?;
    let name = topic.0.to_string();
    let policy = ["cleanup.policy"];
    for (op, value) in [
        (APPEND, "compact"),
        (SUBTRACT, "delete"),
        (SUBTRACT, "compact"),
    ] {
        incremental(
            cx,
            TOPIC,
            &name,
            &[("cleanup.policy", op, Some(value))],
            false,
        )
        .await?;
        describe(
            cx,
            4,
            vec![resource(TOPIC, &name, Some(&policy))],
            false,
            false,
        )
        .await?;
    }
    let refused: [Operations; 3] = [
        &[("cleanup.policy", APPEND, None)],
        &[("retention.ms", APPEND, Some("5"))],
        &[("retention.ms", SUBTRACT, Some("5"))],
    ];
    for ops in refused {
        incremental(cx, TOPIC, &name, ops, false).await?;
    }
    Ok(())
}

/// Records what a topic, the cluster default and this broker show of the retention and cleanup
/// settings, with synonyms.
async fn show_broker_defaults(cx: &mut Ctx, topic: &str) -> Result<()> {
    let resources = vec![
        resource(TOPIC, topic, Some(&["retention.ms", "cleanup.policy"])),
        resource(
            BROKER,
            "",
            Some(&["log.retention.ms", "log.cleanup.policy"]),
        ),
        resource(
            BROKER,
            "1",
            Some(&["log.retention.ms", "log.cleanup.policy"]),
        ),
    ];
    describe(cx, 4, resources, true, false).await
}

async fn incremental_broker(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "broker-defaults", 1, &[]).await?;
    let steps: [(&str, Operations); 6] = [
        ("", &[("log.retention.ms", SET, Some("7200000"))]),
        ("1", &[("log.retention.ms", SET, Some("3600000"))]),
        ("", &[("log.cleanup.policy", APPEND, Some("compact"))]),
        ("", &[("log.cleanup.policy", SUBTRACT, Some("delete"))]),
        ("1", &[("log.retention.ms", DELETE, None)]),
        (
            "",
            &[
                ("log.retention.ms", DELETE, None),
                ("log.cleanup.policy", DELETE, None),
            ],
        ),
    ];
    for (broker, ops) in steps {
        incremental(cx, BROKER, broker, ops, false).await?;
        show_broker_defaults(cx, &topic.0).await?;
    }
    let refused: [(&str, Operations); 5] = [
        ("1", &[("num.partitions", SET, Some("2"))]),
        ("1", &[("num.partitions", DELETE, None)]),
        ("", &[("log.retention.ms", SET, Some("soon"))]),
        ("1", &[("log.retention.ms", APPEND, Some("5"))]),
        ("7", &[("log.retention.ms", SET, Some("1"))]),
    ];
    for (broker, ops) in refused {
        incremental(cx, BROKER, broker, ops, false).await?;
    }
    Ok(())
}

async fn broker_unknown_key(cx: &mut Ctx) -> Result<()> {
    alter(cx, BROKER, "1", &[("no.such.key", Some("1"))], true).await?;
    incremental(cx, BROKER, "", &[("no.such.key", SET, Some("1"))], true).await
}

async fn cleaner_threads_beyond_double(cx: &mut Ctx) -> Result<()> {
    let quadruple = [("log.cleaner.threads", SET, Some("4"))];
    incremental(cx, BROKER, "1", &quadruple, true).await
}

async fn broker_settings_at_runtime(cx: &mut Ctx) -> Result<()> {
    for (key, value) in [
        ("log.cleaner.threads", "2"),
        ("log.cleaner.io.max.bytes.per.second", "2000000.5"),
        ("log.cleaner.backoff.ms", "20000"),
        ("max.connections", "2000"),
        ("max.connections.per.ip", "500"),
        ("max.connections.per.ip.overrides", "127.0.0.9:7"),
        ("producer.id.expiration.ms", "3600000"),
    ] {
        incremental(cx, BROKER, "1", &[(key, SET, Some(value))], true).await?;
    }
    // A real change, what the broker then shows, and back.
    let keys = ["log.cleaner.backoff.ms", "producer.id.expiration.ms"];
    let set: Operations = &[
        ("log.cleaner.backoff.ms", SET, Some("20000")),
        ("producer.id.expiration.ms", SET, Some("3600000")),
    ];
    incremental(cx, BROKER, "", set, false).await?;
    describe(cx, 4, vec![resource(BROKER, "1", Some(&keys))], true, false).await?;
    let delete: Operations = &[
        ("log.cleaner.backoff.ms", DELETE, None),
        ("producer.id.expiration.ms", DELETE, None),
    ];
    incremental(cx, BROKER, "", delete, false).await?;
    describe(cx, 4, vec![resource(BROKER, "1", Some(&keys))], true, false).await
}

async fn value_spellings(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "spellings", 1, &[]).await?;
    let name = topic.0.to_string();
    let spellings: [(&str, &[&str]); 3] = [
        (
            "unclean.leader.election.enable",
            &["TRUE", " False ", "yes"],
        ),
        ("retention.ms", &[" 0007200000 ", "+5000", "1e3"]),
        (
            "cleanup.policy",
            &["compact , delete", " delete", "compact,,delete"],
        ),
    ];
    for (key, values) in spellings {
        for value in values {
            incremental(cx, TOPIC, &name, &[(key, SET, Some(value))], false).await?;
            describe(
                cx,
                4,
                vec![resource(TOPIC, &name, Some(&[key]))],
                true,
                false,
            )
            .await?;
        }
    }
    Ok(())
}
