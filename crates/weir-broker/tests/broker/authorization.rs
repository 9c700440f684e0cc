//! The authorizer over real connections: a client without rights is refused by every API Weir
//! advertises, each with Kafka's error and nothing changed; an ACL added lets exactly its
//! operation through, and deleting it takes it away at once.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;
use weir_log::batch::{build_batch, ProducerFields};
use weir_metadata::acl::{
    AclBinding, AclEntry, AclFilter, AclOperation, AclPermission, PatternFilter, PatternType,
    ResourcePattern, ResourceType,
};
use weir_metadata::MetadataImage;
use weir_storage::MemoryStorage;

use crate::common::*;

const TOPIC_DENIED: i16 = 29;
const GROUP_DENIED: i16 = 30;
const CLUSTER_DENIED: i16 = 31;
const TXN_ID_DENIED: i16 = 53;

/// A broker with the authorizer on and `properties`.
async fn authorized(properties: &[(&str, &str)]) -> TestBroker {
    let mut all = vec![("authorizer.class.name", "StandardAuthorizer")];
    all.extend_from_slice(properties);
    start_on(Arc::new(MemoryStorage::new()), Path::new("/"), &all).await
}

/// A broker with the authorizer on, no super users, and no resource open without an ACL: a
/// plaintext client (User:ANONYMOUS) may do nothing until an ACL lets it.
async fn secured() -> TestBroker {
    authorized(&[
        ("group.initial.rebalance.delay.ms", "0"),
        ("offsets.topic.num.partitions", "1"),
        ("transaction.state.log.num.partitions", "1"),
    ])
    .await
}

fn acl(
    (resource_type, pattern_type, name): (ResourceType, PatternType, &str),
    operation: AclOperation,
    permission: AclPermission,
) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern {
            resource_type,
            pattern_type,
            name: name.to_string(),
        },
        entry: AclEntry {
            principal: "User:ANONYMOUS".to_string(),
            host: "*".to_string(),
            operation,
            permission,
        },
    }
}

fn literal(resource_type: ResourceType, name: &str) -> (ResourceType, PatternType, &str) {
    (resource_type, PatternType::Literal, name)
}

/// Waits until this broker's image satisfies `ready` (the controller commits first).
async fn applied(test: &TestBroker, ready: impl Fn(&MetadataImage) -> bool) {
    for _ in 0..500 {
        if ready(&test.broker.image()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the broker never applied the ACL change");
}

async fn grant(test: &TestBroker, acls: Vec<AclBinding>) {
    test.controller
        .create_acls(acls.clone())
        .await
        .expect("ACLs created");
    applied(test, |image| acls.iter().all(|a| image.acls().contains(a))).await;
}

async fn revoke_all(test: &TestBroker) {
    let any = AclFilter {
        resource_type: None,
        name: None,
        pattern: PatternFilter::Any,
        principal: None,
        host: None,
        operation: None,
        permission: None,
    };
    test.controller
        .delete_acls(vec![any])
        .await
        .expect("ACLs deleted");
    applied(test, |image| image.acls().is_empty()).await;
}

fn name(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

/// Every API Weir advertises, at its newest version, asked by a client with no rights: each is
/// refused with the error Kafka answers, nothing changes, and no API is left unchecked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_refuses_a_client_without_rights() {
    let test = secured().await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    // Something to be refused: a topic with a record, a group with an offset, a transactional id.
    grant(
        &test,
        vec![
            acl(
                literal(ResourceType::Cluster, "kafka-cluster"),
                AclOperation::All,
                AclPermission::Allow,
            ),
            acl(
                literal(ResourceType::Topic, "*"),
                AclOperation::All,
                AclPermission::Allow,
            ),
            acl(
                literal(ResourceType::Group, "*"),
                AclOperation::All,
                AclPermission::Allow,
            ),
            acl(
                literal(ResourceType::TransactionalId, "*"),
                AclOperation::All,
                AclPermission::Allow,
            ),
        ],
    )
    .await;
    assert_eq!(create_topic(&mut c, "good", 1, &[]).await, 0);
    let batch = build_batch(&[b"v"], 1000, ProducerFields::NONE);
    assert_eq!(produce(&mut c, "good", 0, -1, batch).await, (0, 0));
    // FindCoordinator creates __consumer_offsets; its partition is led once loaded.
    let mut find = FindCoordinatorRequest::default();
    find.coordinator_keys = vec![name("g")];
    let found: FindCoordinatorResponse = call(&mut c, ApiKey::FindCoordinator, 4, &find).await;
    assert_eq!(found.coordinators[0].error_code, 0);
    let mut committed = commit_offset(&mut c, "g", "good", 1, 8).await;
    for _ in 0..100 {
        if committed == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        committed = commit_offset(&mut c, "g", "good", 1, 8).await;
    }
    assert_eq!(committed, 0);
    let (producer_id, epoch) = transactional_producer(&mut c, "t").await;
    revoke_all(&test).await;

    let topic_id = test.broker.image().topic("good").expect("topic").topic_id;
    for api in weir_proto::SUPPORTED_APIS {
        let v = api.max;
        let what = format!("{:?} v{v}", api.key);
        match api.key {
            ApiKey::Produce => {
                let batch = build_batch(&[b"x"], 2000, ProducerFields::NONE);
                let r: ProduceResponse =
                    call(&mut c, api.key, v, &produce_request("good", 0, 1, batch)).await;
                assert_eq!(
                    r.responses[0].partition_responses[0].error_code, TOPIC_DENIED,
                    "{what}"
                );
            }
            ApiKey::Fetch => {
                let r: FetchResponse =
                    call(&mut c, api.key, 12, &fetch_request("good", 0, 0, 1 << 20)).await;
                let data = &r.responses[0].partitions[0];
                assert_eq!(data.error_code, TOPIC_DENIED, "{what}");
                assert!(data.records.as_ref().is_none_or(|r| r.is_empty()), "{what}");
                // By topic id too, and as a follower (CLUSTER_ACTION).
                use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
                let mut p = FetchPartition::default();
                p.partition_max_bytes = 1 << 20;
                p.current_leader_epoch = -1;
                let mut t = FetchTopic::default();
                t.topic_id = topic_id;
                t.partitions = vec![p];
                let mut req = FetchRequest::default();
                req.max_bytes = 1 << 20;
                req.topics = vec![t];
                let r: FetchResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(
                    r.responses[0].partitions[0].error_code, TOPIC_DENIED,
                    "{what}"
                );
                // Posing as broker 1 with a guessed broker epoch: refused for want of
                // CLUSTER_ACTION before the epoch is looked at, the connection kept.
                req.replica_state.replica_id = kafka_protocol::messages::BrokerId(1);
                req.replica_state.replica_epoch = 1;
                let r: FetchResponse = call(&mut c, api.key, v.max(15), &req).await;
                assert_eq!(
                    r.responses[0].partitions[0].error_code, TOPIC_DENIED,
                    "{what} as a replica"
                );
            }
            ApiKey::ListOffsets => {
                use kafka_protocol::messages::list_offsets_request::{
                    ListOffsetsPartition, ListOffsetsTopic,
                };
                let mut p = ListOffsetsPartition::default();
                p.timestamp = -1;
                p.current_leader_epoch = -1;
                let mut t = ListOffsetsTopic::default();
                t.name = topic_name("good");
                t.partitions = vec![p];
                let mut req = ListOffsetsRequest::default();
                req.topics = vec![t];
                let r: ListOffsetsResponse = call(&mut c, api.key, v, &req).await;
                let p = &r.topics[0].partitions[0];
                assert_eq!((p.error_code, p.offset), (TOPIC_DENIED, -1), "{what}");
            }
            ApiKey::Metadata => {
                // All topics: none it may describe. Named: refused, existing or not, and an
                // unknown one not created.
                let mut req = MetadataRequest::default();
                req.topics = None;
                req.include_cluster_authorized_operations = false;
                let r: MetadataResponse = call(&mut c, api.key, v, &req).await;
                assert!(r.topics.is_empty(), "{what}: {:?}", r.topics);
                assert_eq!(r.brokers.len(), 1, "{what}");
                let ask = |topic: &str| {
                    let mut t = metadata_request::MetadataRequestTopic::default();
                    t.name = Some(topic_name(topic));
                    t
                };
                req.topics = Some(vec![ask("good"), ask("created-by-metadata")]);
                req.allow_auto_topic_creation = true;
                req.include_topic_authorized_operations = true;
                let r: MetadataResponse = call(&mut c, api.key, v, &req).await;
                for topic in &r.topics {
                    assert_eq!(topic.error_code, TOPIC_DENIED, "{what}");
                    assert_eq!(topic.topic_authorized_operations, 0, "{what}");
                }
                assert!(
                    test.broker.image().topic("created-by-metadata").is_none(),
                    "{what}"
                );
            }
            ApiKey::ApiVersions => {
                // Not authorized in Kafka either: a client must learn the versions to log in.
                let mut req = ApiVersionsRequest::default();
                req.client_software_name = name("test");
                req.client_software_version = name("1");
                let r: ApiVersionsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.error_code, 0, "{what}");
            }
            ApiKey::CreateTopics => {
                assert_eq!(
                    create_topic(&mut c, "created", 1, &[]).await,
                    TOPIC_DENIED,
                    "{what}"
                );
                assert!(test.broker.image().topic("created").is_none(), "{what}");
            }
            ApiKey::DeleteTopics => {
                let mut t = delete_topics_request::DeleteTopicState::default();
                t.name = Some(topic_name("good"));
                let mut by_id = delete_topics_request::DeleteTopicState::default();
                by_id.topic_id = topic_id;
                let mut req = DeleteTopicsRequest::default();
                req.topics = vec![t, by_id];
                let r: DeleteTopicsResponse = call(&mut c, api.key, v, &req).await;
                for result in &r.responses {
                    assert_eq!(result.error_code, TOPIC_DENIED, "{what}");
                }
                assert!(test.broker.image().topic("good").is_some(), "{what}");
            }
            ApiKey::DeleteRecords => {
                use kafka_protocol::messages::delete_records_request::{
                    DeleteRecordsPartition, DeleteRecordsTopic,
                };
                let mut p = DeleteRecordsPartition::default();
                p.offset = 1;
                let mut t = DeleteRecordsTopic::default();
                t.name = topic_name("good");
                t.partitions = vec![p];
                let mut req = DeleteRecordsRequest::default();
                req.topics = vec![t];
                req.timeout_ms = 5000;
                let r: DeleteRecordsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.topics[0].partitions[0].error_code, TOPIC_DENIED, "{what}");
                let log = test.broker.partitions().get("good", 0).expect("partition");
                assert_eq!(log.log().log_start_offset(), 0, "{what}");
            }
            ApiKey::CreatePartitions => {
                let mut t = create_partitions_request::CreatePartitionsTopic::default();
                t.name = topic_name("good");
                t.count = 3;
                t.assignments = None;
                let mut req = CreatePartitionsRequest::default();
                req.topics = vec![t];
                let r: CreatePartitionsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.results[0].error_code, TOPIC_DENIED, "{what}");
                let image = test.broker.image();
                assert_eq!(image.topic("good").expect("topic").partition_count(), 1);
            }
            ApiKey::DescribeConfigs => {
                use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
                let mut topic = DescribeConfigsResource::default();
                topic.resource_type = 2;
                topic.resource_name = name("good");
                let mut node = DescribeConfigsResource::default();
                node.resource_type = 4;
                node.resource_name = name("1");
                let mut req = DescribeConfigsRequest::default();
                req.resources = vec![topic, node];
                let r: DescribeConfigsResponse = call(&mut c, api.key, v, &req).await;
                let codes: Vec<(i16, usize)> = r
                    .results
                    .iter()
                    .map(|r| (r.error_code, r.configs.len()))
                    .collect();
                assert_eq!(codes, [(TOPIC_DENIED, 0), (CLUSTER_DENIED, 0)], "{what}");
            }
            ApiKey::AlterConfigs => {
                use kafka_protocol::messages::alter_configs_request::{
                    AlterConfigsResource, AlterableConfig,
                };
                let mut config = AlterableConfig::default();
                config.name = name("retention.ms");
                config.value = Some(name("1000"));
                let mut topic = AlterConfigsResource::default();
                topic.resource_type = 2;
                topic.resource_name = name("good");
                topic.configs = vec![config.clone()];
                let mut cluster = AlterConfigsResource::default();
                cluster.resource_type = 4;
                cluster.configs = vec![config];
                let mut req = AlterConfigsRequest::default();
                req.resources = vec![topic, cluster];
                let r: AlterConfigsResponse = call(&mut c, api.key, v, &req).await;
                let codes: Vec<i16> = r.responses.iter().map(|r| r.error_code).collect();
                assert_eq!(codes, [TOPIC_DENIED, CLUSTER_DENIED], "{what}");
            }
            ApiKey::IncrementalAlterConfigs => {
                use kafka_protocol::messages::incremental_alter_configs_request::{
                    AlterConfigsResource, AlterableConfig,
                };
                let mut config = AlterableConfig::default();
                config.name = name("retention.ms");
                config.value = Some(name("1000"));
                let mut topic = AlterConfigsResource::default();
                topic.resource_type = 2;
                topic.resource_name = name("good");
                topic.configs = vec![config];
                let mut req = IncrementalAlterConfigsRequest::default();
                req.resources = vec![topic];
                let r: IncrementalAlterConfigsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.responses[0].error_code, TOPIC_DENIED, "{what}");
                let image = test.broker.image();
                assert!(
                    image.topic("good").expect("topic").configs.is_empty(),
                    "{what}"
                );
            }
            ApiKey::InitProducerId => {
                let mut req = InitProducerIdRequest::default();
                req.transactional_id = None;
                req.producer_id = ProducerId(-1);
                req.producer_epoch = -1;
                let r: InitProducerIdResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(
                    (r.error_code, r.producer_id.0),
                    (CLUSTER_DENIED, -1),
                    "{what}"
                );
                req.transactional_id = Some(TransactionalId(name("t")));
                let r: InitProducerIdResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(
                    (r.error_code, r.producer_id.0),
                    (TXN_ID_DENIED, -1),
                    "{what}"
                );
            }
            ApiKey::OffsetForLeaderEpoch => {
                use kafka_protocol::messages::offset_for_leader_epoch_request::{
                    OffsetForLeaderPartition, OffsetForLeaderTopic,
                };
                let mut p = OffsetForLeaderPartition::default();
                p.current_leader_epoch = -1;
                let mut t = OffsetForLeaderTopic::default();
                t.topic = topic_name("good");
                t.partitions = vec![p];
                let mut req = OffsetForLeaderEpochRequest::default();
                req.topics = vec![t];
                let r: OffsetForLeaderEpochResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.topics[0].partitions[0].error_code, TOPIC_DENIED, "{what}");
            }
            ApiKey::DescribeCluster => {
                // Open to all, as in Kafka; the operations are told to who may describe it.
                let mut req = DescribeClusterRequest::default();
                req.include_cluster_authorized_operations = true;
                let r: DescribeClusterResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(
                    (r.error_code, r.cluster_authorized_operations),
                    (0, 0),
                    "{what}"
                );
            }
            ApiKey::DescribeQuorum => {
                let r: DescribeQuorumResponse =
                    call(&mut c, api.key, v, &DescribeQuorumRequest::default()).await;
                assert_eq!(r.error_code, CLUSTER_DENIED, "{what}");
            }
            ApiKey::FindCoordinator => {
                let mut req = FindCoordinatorRequest::default();
                req.coordinator_keys = vec![name("g")];
                let r: FindCoordinatorResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.coordinators[0].error_code, GROUP_DENIED, "{what}");
                req.key_type = 1;
                req.coordinator_keys = vec![name("t")];
                let r: FindCoordinatorResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.coordinators[0].error_code, TXN_ID_DENIED, "{what}");
            }
            ApiKey::JoinGroup => {
                let r = join_group(&mut c, "g", v).await;
                assert_eq!(
                    (r.error_code, r.generation_id),
                    (GROUP_DENIED, -1),
                    "{what}"
                );
            }
            ApiKey::SyncGroup => {
                let mut req = SyncGroupRequest::default();
                req.group_id = GroupId(name("g"));
                req.member_id = name("m");
                let r: SyncGroupResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.error_code, GROUP_DENIED, "{what}");
            }
            ApiKey::Heartbeat => {
                let mut req = HeartbeatRequest::default();
                req.group_id = GroupId(name("g"));
                let r: HeartbeatResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.error_code, GROUP_DENIED, "{what}");
            }
            ApiKey::LeaveGroup => {
                let mut member = leave_group_request::MemberIdentity::default();
                member.member_id = name("m");
                let mut req = LeaveGroupRequest::default();
                req.group_id = GroupId(name("g"));
                req.members = vec![member];
                let r: LeaveGroupResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.error_code, GROUP_DENIED, "{what}");
            }
            ApiKey::OffsetCommit => {
                assert_eq!(
                    commit_offset(&mut c, "g", "good", 5, v).await,
                    GROUP_DENIED,
                    "{what}"
                );
            }
            ApiKey::OffsetFetch => {
                let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
                g.group_id = GroupId(name("g"));
                g.topics = None;
                let mut req = OffsetFetchRequest::default();
                req.groups = vec![g];
                let r: OffsetFetchResponse = call(&mut c, api.key, v, &req).await;
                let group = &r.groups[0];
                assert_eq!(
                    (group.error_code, group.topics.len()),
                    (GROUP_DENIED, 0),
                    "{what}"
                );
            }
            ApiKey::ListGroups => {
                let r: ListGroupsResponse =
                    call(&mut c, api.key, v, &ListGroupsRequest::default()).await;
                assert_eq!(
                    (r.error_code, r.groups.len()),
                    (0, 0),
                    "{what}: none it may describe"
                );
            }
            ApiKey::DescribeGroups => {
                let mut req = DescribeGroupsRequest::default();
                req.groups = vec![GroupId(name("g"))];
                req.include_authorized_operations = true;
                let r: DescribeGroupsResponse = call(&mut c, api.key, v, &req).await;
                let g = &r.groups[0];
                assert_eq!(
                    (g.error_code, g.authorized_operations),
                    (GROUP_DENIED, 0),
                    "{what}"
                );
            }
            ApiKey::DeleteGroups => {
                let mut req = DeleteGroupsRequest::default();
                req.groups_names = vec![GroupId(name("g"))];
                let r: DeleteGroupsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.results[0].error_code, GROUP_DENIED, "{what}");
            }
            ApiKey::OffsetDelete => {
                let mut p = offset_delete_request::OffsetDeleteRequestPartition::default();
                p.partition_index = 0;
                let mut t = offset_delete_request::OffsetDeleteRequestTopic::default();
                t.name = topic_name("good");
                t.partitions = vec![p];
                let mut req = OffsetDeleteRequest::default();
                req.group_id = GroupId(name("g"));
                req.topics = vec![t];
                let r: OffsetDeleteResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.error_code, GROUP_DENIED, "{what}");
            }
            ApiKey::ConsumerGroupHeartbeat => {
                let mut req = ConsumerGroupHeartbeatRequest::default();
                req.group_id = GroupId(name("g848"));
                req.member_id = name("member");
                req.rebalance_timeout_ms = 10_000;
                req.subscribed_topic_names = Some(vec![topic_name("good")]);
                req.topic_partitions = Some(Vec::new());
                let r: ConsumerGroupHeartbeatResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.error_code, GROUP_DENIED, "{what}");
            }
            ApiKey::ConsumerGroupDescribe => {
                let mut req = ConsumerGroupDescribeRequest::default();
                req.group_ids = vec![GroupId(name("g"))];
                let r: ConsumerGroupDescribeResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.groups[0].error_code, GROUP_DENIED, "{what}");
            }
            ApiKey::ShareGroupHeartbeat => {
                let mut req = ShareGroupHeartbeatRequest::default();
                req.group_id = GroupId(name("g932"));
                req.member_id = name("member");
                req.subscribed_topic_names = Some(vec![topic_name("good")]);
                let r: ShareGroupHeartbeatResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.error_code, GROUP_DENIED, "{what}");
            }
            ApiKey::ShareGroupDescribe => {
                let mut req = ShareGroupDescribeRequest::default();
                req.group_ids = vec![GroupId(name("g932"))];
                let r: ShareGroupDescribeResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.groups[0].error_code, GROUP_DENIED, "{what}");
            }
            ApiKey::ShareFetch => {
                let mut req = ShareFetchRequest::default();
                req.group_id = Some(GroupId(name("g932")));
                req.member_id = Some(name("member"));
                let r: ShareFetchResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.error_code, GROUP_DENIED, "{what}");
            }
            ApiKey::ShareAcknowledge => {
                let mut req = ShareAcknowledgeRequest::default();
                req.group_id = Some(GroupId(name("g932")));
                req.member_id = Some(name("member"));
                req.share_session_epoch = 1;
                let r: ShareAcknowledgeResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.error_code, GROUP_DENIED, "{what}");
            }
            ApiKey::DescribeShareGroupOffsets => {
                let mut group = describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default();
                group.group_id = GroupId(name("g932"));
                let mut req = DescribeShareGroupOffsetsRequest::default();
                req.groups = vec![group];
                let r: DescribeShareGroupOffsetsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.groups[0].error_code, GROUP_DENIED, "{what}");
                assert!(r.groups[0].topics.is_empty(), "{what}");
            }
            ApiKey::InitializeShareGroupState => {
                let mut partition = initialize_share_group_state_request::PartitionData::default();
                partition.start_offset = 0;
                let mut topic =
                    initialize_share_group_state_request::InitializeStateData::default();
                topic.topic_id = topic_id;
                topic.partitions = vec![partition];
                let mut req = InitializeShareGroupStateRequest::default();
                req.group_id = name("g932");
                req.topics = vec![topic];
                let r: InitializeShareGroupStateResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(
                    r.results[0].partitions[0].error_code, CLUSTER_DENIED,
                    "{what}"
                );
            }
            ApiKey::ReadShareGroupState => {
                let mut topic = read_share_group_state_request::ReadStateData::default();
                topic.topic_id = topic_id;
                topic.partitions = vec![Default::default()];
                let mut req = ReadShareGroupStateRequest::default();
                req.group_id = name("g932");
                req.topics = vec![topic];
                let r: ReadShareGroupStateResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(
                    r.results[0].partitions[0].error_code, CLUSTER_DENIED,
                    "{what}"
                );
            }
            ApiKey::WriteShareGroupState => {
                let mut topic = write_share_group_state_request::WriteStateData::default();
                topic.topic_id = topic_id;
                topic.partitions = vec![Default::default()];
                let mut req = WriteShareGroupStateRequest::default();
                req.group_id = name("g932");
                req.topics = vec![topic];
                let r: WriteShareGroupStateResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(
                    r.results[0].partitions[0].error_code, CLUSTER_DENIED,
                    "{what}"
                );
            }
            ApiKey::DeleteShareGroupState => {
                let mut topic = delete_share_group_state_request::DeleteStateData::default();
                topic.topic_id = topic_id;
                topic.partitions = vec![Default::default()];
                let mut req = DeleteShareGroupStateRequest::default();
                req.group_id = name("g932");
                req.topics = vec![topic];
                let r: DeleteShareGroupStateResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(
                    r.results[0].partitions[0].error_code, CLUSTER_DENIED,
                    "{what}"
                );
            }
            ApiKey::ReadShareGroupStateSummary => {
                let mut topic =
                    read_share_group_state_summary_request::ReadStateSummaryData::default();
                topic.topic_id = topic_id;
                topic.partitions = vec![Default::default()];
                let mut req = ReadShareGroupStateSummaryRequest::default();
                req.group_id = name("g932");
                req.topics = vec![topic];
                let r: ReadShareGroupStateSummaryResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(
                    r.results[0].partitions[0].error_code, CLUSTER_DENIED,
                    "{what}"
                );
            }
            ApiKey::DescribeLogDirs => {
                let r: DescribeLogDirsResponse =
                    call(&mut c, api.key, v, &DescribeLogDirsRequest::default()).await;
                assert_eq!(
                    (r.error_code, r.results.len()),
                    (CLUSTER_DENIED, 0),
                    "{what}"
                );
            }
            ApiKey::ElectLeaders => {
                let mut t = elect_leaders_request::TopicPartitions::default();
                t.topic = topic_name("good");
                t.partitions = vec![0];
                let mut req = ElectLeadersRequest::default();
                req.topic_partitions = Some(vec![t]);
                let r: ElectLeadersResponse = call(&mut c, api.key, v, &req).await;
                let p = &r.replica_election_results[0].partition_result[0];
                assert_eq!(
                    (r.error_code, p.error_code),
                    (CLUSTER_DENIED, CLUSTER_DENIED),
                    "{what}"
                );
            }
            ApiKey::AlterPartitionReassignments => {
                let mut p = alter_partition_reassignments_request::ReassignablePartition::default();
                p.replicas = Some(vec![BrokerId(1)]);
                let mut t = alter_partition_reassignments_request::ReassignableTopic::default();
                t.name = topic_name("good");
                t.partitions = vec![p];
                let mut req = AlterPartitionReassignmentsRequest::default();
                req.topics = vec![t];
                let r: AlterPartitionReassignmentsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.error_code, CLUSTER_DENIED, "{what}");
            }
            ApiKey::ListPartitionReassignments => {
                let r: ListPartitionReassignmentsResponse = call(
                    &mut c,
                    api.key,
                    v,
                    &ListPartitionReassignmentsRequest::default(),
                )
                .await;
                assert_eq!(r.error_code, CLUSTER_DENIED, "{what}");
            }
            ApiKey::AddPartitionsToTxn => {
                // From a producer (v3): its transactional id; from a broker (v4+): the cluster.
                let r = add_partition_to_txn(&mut c, 3, "t", producer_id, epoch).await;
                let code =
                    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
                assert_eq!(code, TXN_ID_DENIED, "{what}");
                let r = add_partition_to_txn(&mut c, v, "t", producer_id, epoch).await;
                assert_eq!(r.error_code, CLUSTER_DENIED, "{what}");
            }
            ApiKey::AddOffsetsToTxn => {
                let r = add_offsets_to_txn(&mut c, v, "t", producer_id, epoch).await;
                assert_eq!(r.error_code, TXN_ID_DENIED, "{what}");
            }
            ApiKey::TxnOffsetCommit => {
                use kafka_protocol::messages::txn_offset_commit_request::{
                    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
                };
                let mut topic = TxnOffsetCommitRequestTopic::default();
                topic.name = topic_name("good");
                topic.partitions = vec![TxnOffsetCommitRequestPartition::default()];
                let mut req = TxnOffsetCommitRequest::default();
                req.transactional_id = TransactionalId(name("t"));
                req.group_id = GroupId(name("g"));
                req.producer_id = ProducerId(producer_id);
                req.producer_epoch = epoch;
                req.topics = vec![topic];
                let r: TxnOffsetCommitResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(
                    r.topics[0].partitions[0].error_code, TXN_ID_DENIED,
                    "{what}"
                );
            }
            ApiKey::EndTxn => {
                let mut req = EndTxnRequest::default();
                req.transactional_id = TransactionalId(name("t"));
                req.producer_id = ProducerId(producer_id);
                req.producer_epoch = epoch;
                let r: EndTxnResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.error_code, TXN_ID_DENIED, "{what}");
            }
            ApiKey::WriteTxnMarkers => {
                use kafka_protocol::messages::write_txn_markers_request::{
                    WritableTxnMarker, WritableTxnMarkerTopic,
                };
                let mut topic = WritableTxnMarkerTopic::default();
                topic.name = topic_name("good");
                topic.partition_indexes = vec![0];
                let mut marker = WritableTxnMarker::default();
                marker.producer_id = ProducerId(producer_id);
                marker.topics = vec![topic];
                let mut req = WriteTxnMarkersRequest::default();
                req.markers = vec![marker];
                let r: WriteTxnMarkersResponse = call(&mut c, api.key, v, &req).await;
                let code = r.markers[0].topics[0].partitions[0].error_code;
                assert_eq!(code, CLUSTER_DENIED, "{what}");
                let log = test.broker.partitions().get("good", 0).expect("partition");
                assert_eq!(log.log().log_end_offset(), 1, "{what}: no marker written");
            }
            ApiKey::DescribeTransactions => {
                let mut req = DescribeTransactionsRequest::default();
                req.transactional_ids = vec![TransactionalId(name("t"))];
                let r: DescribeTransactionsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.transaction_states[0].error_code, TXN_ID_DENIED, "{what}");
            }
            ApiKey::ListTransactions => {
                let mut req = ListTransactionsRequest::default();
                req.duration_filter = -1;
                let r: ListTransactionsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!((r.error_code, r.transaction_states.len()), (0, 0), "{what}");
            }
            ApiKey::DescribeProducers => {
                use kafka_protocol::messages::describe_producers_request::TopicRequest;
                let mut topic = TopicRequest::default();
                topic.name = topic_name("good");
                topic.partition_indexes = vec![0];
                let mut req = DescribeProducersRequest::default();
                req.topics = vec![topic];
                let r: DescribeProducersResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.topics[0].partitions[0].error_code, TOPIC_DENIED, "{what}");
            }
            ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => {
                // Authentication itself: what SASL listeners serve before any principal is
                // known (test_sasl.py); off them, ILLEGAL_SASL_STATE.
            }
            ApiKey::AlterUserScramCredentials => {
                use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialDeletion;
                let mut deletion = ScramCredentialDeletion::default();
                deletion.name = name("admin");
                deletion.mechanism = 1;
                let mut req = AlterUserScramCredentialsRequest::default();
                req.deletions = vec![deletion];
                let r: AlterUserScramCredentialsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.results[0].error_code, CLUSTER_DENIED, "{what}");
            }
            ApiKey::DescribeUserScramCredentials => {
                let r: DescribeUserScramCredentialsResponse = call(
                    &mut c,
                    api.key,
                    v,
                    &DescribeUserScramCredentialsRequest::default(),
                )
                .await;
                assert_eq!(
                    (r.error_code, r.results.len()),
                    (CLUSTER_DENIED, 0),
                    "{what}"
                );
            }
            ApiKey::AlterClientQuotas => {
                let entry = quota_entry(
                    &[("user", Some("ANONYMOUS"))],
                    &[("producer_byte_rate", 1.0e9)],
                );
                let mut req = AlterClientQuotasRequest::default();
                req.entries = vec![entry];
                let r: AlterClientQuotasResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.entries[0].error_code, CLUSTER_DENIED, "{what}");
                assert!(
                    test.broker.image().client_quotas().is_empty(),
                    "{what}: it cannot raise its own quota"
                );
            }
            ApiKey::DescribeClientQuotas => {
                let r: DescribeClientQuotasResponse =
                    call(&mut c, api.key, v, &DescribeClientQuotasRequest::default()).await;
                assert_eq!((r.error_code, r.entries), (CLUSTER_DENIED, None), "{what}");
            }
            ApiKey::CreateAcls => {
                let mut creation = create_acls_request::AclCreation::default();
                creation.resource_type = 2;
                creation.resource_name = name("good");
                creation.resource_pattern_type = 3;
                creation.principal = name("User:ANONYMOUS");
                creation.host = name("*");
                creation.operation = 2;
                creation.permission_type = 3;
                let mut req = CreateAclsRequest::default();
                req.creations = vec![creation];
                let r: CreateAclsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.results[0].error_code, CLUSTER_DENIED, "{what}");
                assert!(
                    test.broker.image().acls().is_empty(),
                    "{what}: it cannot grant itself"
                );
            }
            ApiKey::DescribeAcls => {
                let mut req = DescribeAclsRequest::default();
                req.resource_type_filter = 1;
                req.pattern_type_filter = 1;
                req.operation = 1;
                req.permission_type = 1;
                let r: DescribeAclsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.error_code, CLUSTER_DENIED, "{what}");
            }
            ApiKey::DeleteAcls => {
                let mut filter = delete_acls_request::DeleteAclsFilter::default();
                filter.resource_type_filter = 1;
                filter.pattern_type_filter = 1;
                filter.operation = 1;
                filter.permission_type = 1;
                let mut req = DeleteAclsRequest::default();
                req.filters = vec![filter];
                let r: DeleteAclsResponse = call(&mut c, api.key, v, &req).await;
                assert_eq!(r.filter_results[0].error_code, CLUSTER_DENIED, "{what}");
            }
            other => panic!("{other:?} is advertised but not checked here for authorization"),
        }
    }
    // The records and the group's offset are as they were.
    assert_eq!(fetch_all_granted(&test, &mut c).await, 1);
    test.stop.send_replace(true);
}

/// Grants READ on `good` and reads it: the records there.
async fn fetch_all_granted(test: &TestBroker, c: &mut TcpStream) -> usize {
    grant(
        test,
        vec![acl(
            literal(ResourceType::Topic, "good"),
            AclOperation::Read,
            AclPermission::Allow,
        )],
    )
    .await;
    let (code, records) = fetch_all(c, "good", 0).await;
    assert_eq!(code, 0);
    whole_batches(&records).len()
}

/// Each ACL lets exactly its operation through: READ lets a client fetch but not produce,
/// WRITE lets it produce; a prefixed ACL covers the topics it prefixes; a deny beats an allow;
/// and deleting an ACL takes its operation away at the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_acl_enables_exactly_its_operation() {
    let test = secured().await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    grant(
        &test,
        vec![acl(
            literal(ResourceType::Cluster, "kafka-cluster"),
            AclOperation::Create,
            AclPermission::Allow,
        )],
    )
    .await;
    assert_eq!(create_topic(&mut c, "orders", 1, &[]).await, 0);
    assert_eq!(create_topic(&mut c, "orders-eu", 1, &[]).await, 0);
    let batch = || build_batch(&[b"v"], 1000, ProducerFields::NONE);
    assert_eq!(
        produce(&mut c, "orders", 0, -1, batch()).await.0,
        TOPIC_DENIED
    );
    assert_eq!(fetch_all(&mut c, "orders", 0).await.0, TOPIC_DENIED);

    grant(
        &test,
        vec![acl(
            literal(ResourceType::Topic, "orders"),
            AclOperation::Read,
            AclPermission::Allow,
        )],
    )
    .await;
    assert_eq!(
        fetch_all(&mut c, "orders", 0).await.0,
        0,
        "READ lets it fetch"
    );
    assert_eq!(
        produce(&mut c, "orders", 0, -1, batch()).await.0,
        TOPIC_DENIED,
        "but not produce"
    );
    assert_eq!(
        fetch_all(&mut c, "orders-eu", 0).await.0,
        TOPIC_DENIED,
        "nor read another topic"
    );

    let prefixed = acl(
        (ResourceType::Topic, PatternType::Prefixed, "orders"),
        AclOperation::Write,
        AclPermission::Allow,
    );
    grant(&test, vec![prefixed.clone()]).await;
    assert_eq!(produce(&mut c, "orders", 0, -1, batch()).await, (0, 0));
    assert_eq!(produce(&mut c, "orders-eu", 0, -1, batch()).await, (0, 0));

    let deny = acl(
        literal(ResourceType::Topic, "orders-eu"),
        AclOperation::Write,
        AclPermission::Deny,
    );
    grant(&test, vec![deny]).await;
    assert_eq!(
        produce(&mut c, "orders-eu", 0, -1, batch()).await.0,
        TOPIC_DENIED,
        "deny wins"
    );
    assert_eq!(produce(&mut c, "orders", 0, -1, batch()).await, (0, 1));

    let filter = AclFilter {
        resource_type: Some(ResourceType::Topic),
        name: Some("orders".into()),
        pattern: PatternFilter::Exactly(PatternType::Prefixed),
        principal: None,
        host: None,
        operation: None,
        permission: None,
    };
    let deleted = test
        .controller
        .delete_acls(vec![filter])
        .await
        .expect("deleted");
    assert_eq!(deleted, vec![vec![prefixed.clone()]]);
    applied(&test, |image| !image.acls().contains(&prefixed)).await;
    assert_eq!(
        produce(&mut c, "orders", 0, -1, batch()).await.0,
        TOPIC_DENIED,
        "taken away"
    );
    test.stop.send_replace(true);
}

/// A super user is let do everything with no ACL; `allow.everyone.if.no.acl.found` opens a
/// resource with no ACL to everyone, and closes it again once an ACL names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn super_users_and_resources_without_acls() {
    let open = authorized(&[("allow.everyone.if.no.acl.found", "true")]).await;
    let mut c = TcpStream::connect(open.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "free", 1, &[]).await, 0);
    let batch = || build_batch(&[b"v"], 1000, ProducerFields::NONE);
    assert_eq!(produce(&mut c, "free", 0, -1, batch()).await, (0, 0));
    let mut someone_else = acl(
        literal(ResourceType::Topic, "free"),
        AclOperation::Read,
        AclPermission::Allow,
    );
    someone_else.entry.principal = "User:alice".into();
    grant(&open, vec![someone_else]).await;
    assert_eq!(
        produce(&mut c, "free", 0, -1, batch()).await.0,
        TOPIC_DENIED
    );
    open.stop.send_replace(true);

    let root = authorized(&[("super.users", "User:admin;User:ANONYMOUS")]).await;
    let mut c = TcpStream::connect(root.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "mine", 1, &[]).await, 0);
    assert_eq!(produce(&mut c, "mine", 0, -1, batch()).await, (0, 0));
    root.stop.send_replace(true);
}
