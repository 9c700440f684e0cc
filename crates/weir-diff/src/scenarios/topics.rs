//! Topics: CreateTopics, Metadata, DeleteTopics, CreatePartitions, the refusals included.

use anyhow::Result;
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, MetadataRequest,
    MetadataResponse, TopicName,
};

use super::{scenarios, Expect};
use crate::session::Ctx;
use crate::setup::{compared_config, creatable, create_request, create_topic, s};

scenarios! { "topics";
    create_answer_v7: Expect::Same,
        "CreateTopics v7: partitions, replication factor and every config in the answer";
    create_answer_old_versions: Expect::Same,
        "CreateTopics v2 and v4: the answer without configs";
    create_validate_only: Expect::Same,
        "CreateTopics validate_only: answered as if created, nothing created";
    create_existing: Expect::Same,
        "CreateTopics for a topic that exists";
    create_bad_names: Expect::Same,
        "CreateTopics with names Kafka refuses: empty, '.', '..', 250 characters, bad characters";
    create_bad_counts: Expect::Same,
        "CreateTopics with 0 or -2 partitions, replication factor 0 or 2 on one node";
    create_bad_assignments: Expect::Same,
        "CreateTopics with manual assignments: with a partition count, unknown broker, gaps";
    create_bad_configs: Expect::Same,
        "CreateTopics with unknown config keys and values out of range";
    create_duplicate_in_request: Expect::Same,
        "CreateTopics naming one topic twice";
    create_default_counts: Expect::Same,
        "CreateTopics with -1 partitions and replication factor (the broker's defaults)";
    metadata_known_and_unknown: Expect::Same,
        "Metadata v12 for a topic, an unknown topic and an invalid name";
    metadata_old_versions: Expect::Same,
        "Metadata v1, v4 and v9 for one topic";
    metadata_authorized_operations: Expect::Same,
        "Metadata v9 and v12 asking for cluster and topic authorized operations";
    metadata_by_unknown_id: Expect::Same,
        "Metadata v12 for an unknown topic id";
    metadata_auto_create: Expect::Deliberate("an auto-created topic is answered at once"),
        "Metadata v12 for unknown topics, allowing auto-creation and not";
    delete_topics: Expect::Same,
        "DeleteTopics v5 by name and v6 by id, unknown names and ids, then Metadata";
    internal_topic_admin: Expect::Deliberate("__consumer_offsets does not grow: its partition count places the groups"),
        "CreateTopics and CreatePartitions (validate only) naming __consumer_offsets, Metadata of it";
    delete_duplicates: Expect::Same,
        "DeleteTopics naming one topic twice, by name and by id";
    create_partitions_grow: Expect::Same,
        "CreatePartitions v3: grow, validate only, then Metadata";
    create_partitions_refused: Expect::Same,
        "CreatePartitions: same count, fewer, unknown topic, bad assignments, duplicates";
}

fn metadata_for(names: &[TopicName]) -> MetadataRequest {
    let mut request = MetadataRequest::default();
    request.allow_auto_topic_creation = false;
    request.topics = Some(
        names
            .iter()
            .map(|name| {
                let mut topic = MetadataRequestTopic::default();
                topic.name = Some(name.clone());
                topic
            })
            .collect(),
    );
    request
}

/// Sends a Metadata request and records the answer with topics in name order (clients look
/// topics up by name; Kafka lists refused names in an order of its own).
async fn metadata_request(cx: &mut Ctx, version: i16, request: &MetadataRequest) -> Result<()> {
    let mut response: MetadataResponse = cx.quietly(ApiKey::Metadata, version, request).await?;
    response.topics.sort_by(|a, b| a.name.cmp(&b.name));
    cx.record(&format!("Metadata v{version} (topics by name)"), &response);
    Ok(())
}

async fn metadata(cx: &mut Ctx, version: i16, names: &[TopicName]) -> Result<()> {
    metadata_request(cx, version, &metadata_for(names)).await
}

/// Sends a CreateTopics request and records the answer; the configs it lists (v5+) are
/// recorded in name order, those [`compared_config`] leaves out left out.
async fn create(cx: &mut Ctx, version: i16, topics: Vec<CreatableTopic>) -> Result<()> {
    create_with(cx, version, &create_request(topics)).await
}

async fn create_with(cx: &mut Ctx, version: i16, request: &CreateTopicsRequest) -> Result<()> {
    let mut response: CreateTopicsResponse =
        cx.quietly(ApiKey::CreateTopics, version, request).await?;
    for topic in &mut response.topics {
        if let Some(configs) = &mut topic.configs {
            configs.retain(|c| compared_config(c.name.as_str()));
            configs.sort_by(|a, b| a.name.cmp(&b.name));
        }
    }
    cx.record(&format!("CreateTopics v{version}"), &response);
    Ok(())
}

async fn create_answer_v7(cx: &mut Ctx) -> Result<()> {
    let name = cx.topic("created");
    create(
        cx,
        7,
        vec![creatable(name, 3, &[("retention.ms", "3600000")])],
    )
    .await
}

async fn create_answer_old_versions(cx: &mut Ctx) -> Result<()> {
    for version in [2, 4] {
        let name = cx.topic(&format!("created-v{version}"));
        create(cx, version, vec![creatable(name, 2, &[])]).await?;
    }
    Ok(())
}

async fn create_validate_only(cx: &mut Ctx) -> Result<()> {
    let name = cx.topic("validated");
    let mut request = create_request(vec![creatable(
        name.clone(),
        2,
        &[("cleanup.policy", "compact")],
    )]);
    request.validate_only = true;
    create_with(cx, 7, &request).await?;
    metadata(cx, 12, &[name]).await
}

async fn create_existing(cx: &mut Ctx) -> Result<()> {
    let name = create_topic(cx, "existing", 1, &[]).await?;
    create(cx, 7, vec![creatable(name.clone(), 1, &[])]).await?;
    let mut request = create_request(vec![creatable(name, 1, &[])]);
    request.validate_only = true;
    create_with(cx, 7, &request).await
}

async fn create_bad_names(cx: &mut Ctx) -> Result<()> {
    let long = cx.name(&"x".repeat(250));
    for name in [
        "",
        ".",
        "..",
        "has space",
        "bad/slash",
        "ünïcode",
        long.as_str(),
    ] {
        let topic = TopicName(s(name));
        create(cx, 7, vec![creatable(topic, 1, &[])]).await?;
    }
    Ok(())
}

async fn create_bad_counts(cx: &mut Ctx) -> Result<()> {
    let mut topics = Vec::new();
    for (base, partitions, replicas) in [
        ("p0", 0, 1),
        ("pm2", -2, 1),
        ("r0", 1, 0),
        ("r2", 1, 2),
        ("rm2", 1, -2),
    ] {
        let mut topic = creatable(cx.topic(base), partitions, &[]);
        topic.replication_factor = replicas;
        topics.push(topic);
    }
    for topic in topics {
        create(cx, 7, vec![topic]).await?;
    }
    Ok(())
}

fn assignment(partition: i32, brokers: &[i32]) -> CreatableReplicaAssignment {
    let mut a = CreatableReplicaAssignment::default();
    a.partition_index = partition;
    a.broker_ids = brokers.iter().map(|b| BrokerId(*b)).collect();
    a
}

async fn create_bad_assignments(cx: &mut Ctx) -> Result<()> {
    let cases: Vec<(&str, i32, i16, Vec<CreatableReplicaAssignment>)> = vec![
        ("with-count", 2, -1, vec![assignment(0, &[1])]),
        ("unknown-broker", -1, -1, vec![assignment(0, &[7])]),
        (
            "gap",
            -1,
            -1,
            vec![assignment(0, &[1]), assignment(2, &[1])],
        ),
        ("twice", -1, -1, vec![assignment(0, &[1, 1])]),
        ("empty", -1, -1, vec![assignment(0, &[])]),
        (
            "good",
            -1,
            -1,
            vec![assignment(0, &[1]), assignment(1, &[1])],
        ),
    ];
    for (base, partitions, replicas, assignments) in cases {
        let mut topic = creatable(cx.topic(base), partitions, &[]);
        topic.replication_factor = replicas;
        topic.assignments = assignments;
        create(cx, 7, vec![topic]).await?;
    }
    Ok(())
}

async fn create_bad_configs(cx: &mut Ctx) -> Result<()> {
    let cases: [(&str, &str); 11] = [
        ("no.such.config", "1"),
        ("retention.ms", "forever"),
        ("retention.ms", "-7"),
        ("segment.bytes", "10"),
        ("cleanup.policy", "sometimes"),
        ("cleanup.policy", "compact,delete"),
        ("min.insync.replicas", "0"),
        ("max.message.bytes", "-1"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("cleanup.policy", ""),
        ("message.timestamp.type", "Sometimes"),
    ];
    for (i, (key, value)) in cases.into_iter().enumerate() {
        let topic = creatable(cx.topic(&format!("config-{i}")), 1, &[(key, value)]);
        create(cx, 7, vec![topic]).await?;
    }
    Ok(())
}

async fn create_duplicate_in_request(cx: &mut Ctx) -> Result<()> {
    let name = cx.topic("twice");
    create(
        cx,
        7,
        vec![
            creatable(name.clone(), 1, &[]),
            creatable(name.clone(), 2, &[]),
        ],
    )
    .await?;
    metadata(cx, 12, &[name]).await
}

async fn create_default_counts(cx: &mut Ctx) -> Result<()> {
    let mut topic = creatable(cx.topic("defaults"), -1, &[]);
    topic.replication_factor = -1;
    create(cx, 7, vec![topic]).await
}

async fn metadata_known_and_unknown(cx: &mut Ctx) -> Result<()> {
    let known = create_topic(cx, "known", 2, &[]).await?;
    metadata(
        cx,
        12,
        &[known, cx.topic("unknown"), TopicName(s("bad name"))],
    )
    .await
}

async fn metadata_old_versions(cx: &mut Ctx) -> Result<()> {
    let known = create_topic(cx, "known-old", 1, &[]).await?;
    for version in [1, 4, 9] {
        metadata(cx, version, std::slice::from_ref(&known)).await?;
    }
    Ok(())
}

async fn metadata_authorized_operations(cx: &mut Ctx) -> Result<()> {
    let known = create_topic(cx, "operations", 1, &[]).await?;
    let mut request = metadata_for(&[known, cx.topic("nowhere")]);
    request.include_topic_authorized_operations = true;
    request.include_cluster_authorized_operations = true;
    metadata_request(cx, 9, &request).await?;
    // Cluster operations moved to DescribeCluster in v11.
    request.include_cluster_authorized_operations = false;
    metadata_request(cx, 12, &request).await
}

async fn metadata_by_unknown_id(cx: &mut Ctx) -> Result<()> {
    let mut topic = MetadataRequestTopic::default();
    topic.topic_id = uuid::Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0);
    let mut request = MetadataRequest::default();
    request.topics = Some(vec![topic]);
    let _: MetadataResponse = cx.answer(ApiKey::Metadata, 12, &request).await?;
    Ok(())
}

async fn metadata_auto_create(cx: &mut Ctx) -> Result<()> {
    let not_created = metadata_for(&[cx.topic("not-auto-created")]);
    let _: MetadataResponse = cx.answer(ApiKey::Metadata, 12, &not_created).await?;
    let name = cx.topic("auto-created");
    let mut request = metadata_for(std::slice::from_ref(&name));
    request.allow_auto_topic_creation = true;
    let _: MetadataResponse = cx.answer(ApiKey::Metadata, 12, &request).await?;
    crate::setup::wait_for_leaders(cx, &name, 1).await?;
    metadata(cx, 12, &[name]).await
}

async fn topic_id(cx: &mut Ctx, name: &TopicName) -> Result<uuid::Uuid> {
    let response: MetadataResponse = cx
        .quietly(
            ApiKey::Metadata,
            12,
            &metadata_for(std::slice::from_ref(name)),
        )
        .await?;
    Ok(response
        .topics
        .first()
        .map(|t| t.topic_id)
        .unwrap_or_default())
}

/// Sends a DeleteTopics and records the answer in name order (clients match answers by
/// name; Kafka lists refusals first).
async fn delete(cx: &mut Ctx, version: i16, request: &DeleteTopicsRequest) -> Result<()> {
    let mut response: DeleteTopicsResponse =
        cx.quietly(ApiKey::DeleteTopics, version, request).await?;
    response
        .responses
        .sort_by(|a, b| (&a.name, a.topic_id).cmp(&(&b.name, b.topic_id)));
    cx.record(&format!("DeleteTopics v{version} (by name)"), &response);
    Ok(())
}

async fn delete_topics(cx: &mut Ctx) -> Result<()> {
    let by_name = create_topic(cx, "delete-by-name", 1, &[]).await?;
    let by_id = create_topic(cx, "delete-by-id", 1, &[]).await?;
    let id = topic_id(cx, &by_id).await?;
    let mut request = DeleteTopicsRequest::default();
    request.timeout_ms = 10_000;
    request.topic_names = vec![by_name.clone(), cx.topic("never-was")];
    delete(cx, 5, &request).await?;
    let state = |name: Option<TopicName>, topic_id: uuid::Uuid| {
        let mut s = DeleteTopicState::default();
        s.name = name;
        s.topic_id = topic_id;
        s
    };
    let mut request = DeleteTopicsRequest::default();
    request.timeout_ms = 10_000;
    request.topics = vec![
        state(None, id),
        state(None, uuid::Uuid::from_u128(42)),
        state(Some(cx.topic("never-was")), uuid::Uuid::nil()),
    ];
    delete(cx, 6, &request).await?;
    gone(cx, &[by_name.clone(), by_id.clone()]).await?;
    metadata(cx, 12, &[by_name, by_id]).await
}

/// Waits (unrecorded) until Metadata no longer shows `names`: Kafka deletes a topic a moment
/// after it answers DeleteTopics.
async fn gone(cx: &mut Ctx, names: &[TopicName]) -> Result<()> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let response: MetadataResponse = cx
            .quietly(ApiKey::Metadata, 12, &metadata_for(names))
            .await?;
        if response.topics.iter().all(|t| t.error_code != 0) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("deleted topics still listed after 20 s");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn internal_topic_admin(cx: &mut Ctx) -> Result<()> {
    super::cluster::coordinator_ready(cx).await?;
    let offsets = TopicName(s("__consumer_offsets"));
    create(cx, 7, vec![creatable(offsets.clone(), 1, &[])]).await?;
    create_partitions(cx, vec![grow(&offsets, 60, None)], true).await?;
    // (Not DeleteTopics: both brokers delete it, and every group's offsets with it.)
    // Partition counts differ by configuration (50 in both by default); compare the rest.
    let mut response: MetadataResponse = cx
        .quietly(ApiKey::Metadata, 12, &metadata_for(&[offsets]))
        .await?;
    for topic in &mut response.topics {
        let count = topic.partitions.len();
        topic.partitions.clear();
        cx.note(&format!("__consumer_offsets partitions: {count}"));
    }
    cx.record("Metadata v12 (partitions counted)", &response);
    Ok(())
}

async fn delete_duplicates(cx: &mut Ctx) -> Result<()> {
    let name = create_topic(cx, "delete-twice", 1, &[]).await?;
    let id = topic_id(cx, &name).await?;
    let mut request = DeleteTopicsRequest::default();
    request.timeout_ms = 10_000;
    request.topic_names = vec![name.clone(), name.clone()];
    let _: DeleteTopicsResponse = cx.answer(ApiKey::DeleteTopics, 5, &request).await?;
    let mut state = DeleteTopicState::default();
    state.topic_id = id;
    let mut request = DeleteTopicsRequest::default();
    request.timeout_ms = 10_000;
    request.topics = vec![state.clone(), state];
    let _: DeleteTopicsResponse = cx.answer(ApiKey::DeleteTopics, 6, &request).await?;
    metadata(cx, 12, &[name]).await
}

fn grow(name: &TopicName, count: i32, assignments: Option<Vec<&[i32]>>) -> CreatePartitionsTopic {
    let mut topic = CreatePartitionsTopic::default();
    topic.name = name.clone();
    topic.count = count;
    topic.assignments = assignments.map(|list| {
        list.into_iter()
            .map(|brokers| {
                let mut a = CreatePartitionsAssignment::default();
                a.broker_ids = brokers.iter().map(|b| BrokerId(*b)).collect();
                a
            })
            .collect()
    });
    topic
}

async fn create_partitions(
    cx: &mut Ctx,
    topics: Vec<CreatePartitionsTopic>,
    validate_only: bool,
) -> Result<()> {
    let mut request = CreatePartitionsRequest::default();
    request.timeout_ms = 10_000;
    request.validate_only = validate_only;
    request.topics = topics;
    let _: CreatePartitionsResponse = cx.answer(ApiKey::CreatePartitions, 3, &request).await?;
    Ok(())
}

async fn create_partitions_grow(cx: &mut Ctx) -> Result<()> {
    let name = create_topic(cx, "grows", 1, &[]).await?;
    create_partitions(cx, vec![grow(&name, 4, None)], true).await?;
    create_partitions(cx, vec![grow(&name, 3, None)], false).await?;
    crate::setup::wait_for_leaders(cx, &name, 3).await?;
    metadata(cx, 12, std::slice::from_ref(&name)).await?;
    create_partitions(cx, vec![grow(&name, 4, Some(vec![&[1]]))], false).await?;
    crate::setup::wait_for_leaders(cx, &name, 4).await
}

async fn create_partitions_refused(cx: &mut Ctx) -> Result<()> {
    let name = create_topic(cx, "refuses", 2, &[]).await?;
    create_partitions(cx, vec![grow(&name, 2, None)], false).await?;
    create_partitions(cx, vec![grow(&name, 1, None)], false).await?;
    create_partitions(cx, vec![grow(&cx.topic("nowhere"), 3, None)], false).await?;
    for assignments in [
        vec![],
        vec![&[1][..], &[1][..]],
        vec![&[1, 1][..]],
        vec![&[][..]],
        vec![&[9][..]],
    ] {
        create_partitions(cx, vec![grow(&name, 3, Some(assignments))], false).await?;
    }
    create_partitions(cx, vec![grow(&name, 3, None), grow(&name, 4, None)], false).await?;
    metadata(cx, 12, &[name]).await
}
