//! Every advertised API and version, bad input on the wire, and concurrent topic creation.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_log::batch::{build_batch, ProducerFields};
use weir_storage::MemoryStorage;

use crate::common::*;

/// Hostile and broken input gets a Kafka error or a closed connection, and nothing else changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_contained() {
    let test = start_on(Arc::new(MemoryStorage::new()), Path::new("/"), &[]).await;
    let mut client = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut client, "good", 1, &[]).await, 0);
    assert_eq!(
        produce(
            &mut client,
            "good",
            0,
            -1,
            build_batch(&[b"kept"], 0, ProducerFields::NONE)
        )
        .await,
        (0, 0)
    );

    // Topic-level errors, each with its Kafka code.
    assert_eq!(
        create_topic(&mut client, "bad/name", 1, &[]).await,
        17,
        "INVALID_TOPIC_EXCEPTION"
    );
    assert_eq!(
        create_topic(&mut client, "good", 1, &[]).await,
        36,
        "TOPIC_ALREADY_EXISTS"
    );
    assert_eq!(
        create_topic(&mut client, "cfg", 1, &[("cleanup.policy", "shred")]).await,
        40,
        "INVALID_CONFIG"
    );
    assert_eq!(
        produce(
            &mut client,
            "missing",
            0,
            -1,
            build_batch(&[b"x"], 0, ProducerFields::NONE)
        )
        .await
        .0,
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    let mut corrupt = build_batch(&[b"evil"], 0, ProducerFields::NONE);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x55;
    assert_eq!(
        produce(&mut client, "good", 0, -1, corrupt).await.0,
        2,
        "CORRUPT_MESSAGE"
    );
    assert_eq!(
        produce(
            &mut client,
            "good",
            0,
            5,
            build_batch(&[b"x"], 0, ProducerFields::NONE)
        )
        .await
        .0,
        21,
        "INVALID_REQUIRED_ACKS"
    );

    // Connection-level garbage: the broker closes that connection only.
    let hostile: Vec<Vec<u8>> = vec![
        vec![0x7f, 0xff, 0xff, 0xff],                     // oversized length
        vec![0xff, 0xff, 0xff, 0xf0, 1, 2, 3],            // negative length
        [&12i32.to_be_bytes()[..], &[0xde; 12]].concat(), // unknown API key
        [&100i32.to_be_bytes()[..], &[0, 3, 0, 12][..]].concat(), // truncated, then closed
        [
            &14i32.to_be_bytes()[..],
            &[0, 3, 0, 12, 0, 0, 0, 1, 0x7f, 0xff, 0, 0, 0, 0][..],
        ]
        .concat(), // body past the end
    ];
    for bytes in hostile {
        let mut stream = TcpStream::connect(test.addr).await.expect("connect");
        stream.write_all(&bytes).await.expect("write");
        let _ = stream.shutdown().await;
        let mut sink = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut sink)).await;
        assert!(
            read.is_ok(),
            "the broker must close a hostile connection, not hang"
        );
    }

    // ApiVersions at an unsupported version: UNSUPPORTED_VERSION in the v0 layout.
    let mut stream = TcpStream::connect(test.addr).await.expect("connect");
    let request = [&[0u8, 18, 0, 99][..], &42i32.to_be_bytes()[..], &[0, 0][..]].concat();
    stream
        .write_all(&[&(request.len() as i32).to_be_bytes()[..], &request[..]].concat())
        .await
        .expect("write");
    let length = stream.read_i32().await.expect("length");
    let mut body = vec![0u8; length as usize];
    stream.read_exact(&mut body).await.expect("body");
    assert_eq!(
        i32::from_be_bytes(body[0..4].try_into().expect("4 bytes")),
        42
    );
    assert_eq!(
        i16::from_be_bytes([body[4], body[5]]),
        35,
        "UNSUPPORTED_VERSION"
    );
    assert!(
        i32::from_be_bytes(body[6..10].try_into().expect("4 bytes")) > 5,
        "the supported ranges are listed"
    );

    // Nothing else changed: the good record is intact and the broker still serves.
    let mut client = TcpStream::connect(test.addr).await.expect("connect");
    let (error, records) = fetch_all(&mut client, "good", 0).await;
    assert_eq!(error, 0);
    assert!(find_batch(&records, 0).is_some_and(|b| b.windows(4).any(|w| w == b"kept")));
    assert!(
        find_batch(&records, 1).is_none(),
        "no refused batch was stored"
    );
    assert_eq!(
        produce(
            &mut client,
            "good",
            0,
            1,
            build_batch(&[b"after"], 0, ProducerFields::NONE)
        )
        .await,
        (0, 1)
    );
    test.stop.send_replace(true);
}

/// Every API at every advertised version gets a well-formed answer: no version-gated field is
/// set where that version cannot carry it (which would leave the client without a response).
/// The authorizer is on and the client a super user, so every check lets it through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_advertised_version_answers() {
    use kafka_protocol::messages::*;
    let groups = [
        ("group.initial.rebalance.delay.ms", "0"),
        ("offsets.topic.num.partitions", "3"),
        ("transaction.state.log.num.partitions", "3"),
        ("authorizer.class.name", "StandardAuthorizer"),
        ("super.users", "User:ANONYMOUS"),
    ];
    let test = start_on(Arc::new(MemoryStorage::new()), Path::new("/"), &groups).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "good", 1, &[]).await, 0);
    assert_eq!(
        produce(
            &mut c,
            "good",
            0,
            -1,
            build_batch(&[b"v"], 1000, ProducerFields::NONE)
        )
        .await,
        (0, 0)
    );
    let topic_id = test.broker.image().topic("good").expect("topic").topic_id;
    for api in weir_proto::SUPPORTED_APIS {
        for v in api.min..=api.max {
            let what = format!("{:?} v{v}", api.key);
            match api.key {
                ApiKey::Produce => {
                    let r: ProduceResponse = call(
                        &mut c,
                        api.key,
                        v,
                        &produce_request(
                            "good",
                            0,
                            1,
                            build_batch(&[b"x"], 2000, ProducerFields::NONE),
                        ),
                    )
                    .await;
                    assert_eq!(
                        r.responses[0].partition_responses[0].error_code, 0,
                        "{what}"
                    );
                }
                ApiKey::Fetch => {
                    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
                    let mut p = FetchPartition::default();
                    p.partition_max_bytes = 1 << 20;
                    p.current_leader_epoch = -1;
                    let mut t = FetchTopic::default();
                    if v >= 13 {
                        t.topic_id = topic_id
                    } else {
                        t.topic = topic_name("good")
                    }
                    t.partitions = vec![p];
                    let mut req = FetchRequest::default();
                    req.max_bytes = 1 << 20;
                    req.topics = vec![t];
                    let r: FetchResponse = call(&mut c, api.key, v, &req).await;
                    let data = &r.responses[0].partitions[0];
                    assert_eq!(data.error_code, 0, "{what}");
                    assert!(
                        data.records.as_ref().is_some_and(|b| !b.is_empty()),
                        "{what}"
                    );
                }
                ApiKey::ListOffsets => {
                    use kafka_protocol::messages::list_offsets_request::{
                        ListOffsetsPartition, ListOffsetsTopic,
                    };
                    for timestamp in [-1, -2, 1500] {
                        let mut p = ListOffsetsPartition::default();
                        p.timestamp = timestamp;
                        p.current_leader_epoch = -1;
                        let mut t = ListOffsetsTopic::default();
                        t.name = topic_name("good");
                        t.partitions = vec![p];
                        let mut req = ListOffsetsRequest::default();
                        req.topics = vec![t];
                        let r: ListOffsetsResponse = call(&mut c, api.key, v, &req).await;
                        assert_eq!(
                            r.topics[0].partitions[0].error_code, 0,
                            "{what} at {timestamp}"
                        );
                    }
                }
                ApiKey::Metadata => {
                    let mut t =
                        kafka_protocol::messages::metadata_request::MetadataRequestTopic::default();
                    t.name = Some(topic_name("good"));
                    let mut req = MetadataRequest::default();
                    req.topics = Some(vec![t]);
                    let r: MetadataResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.topics[0].error_code, 0, "{what}");
                    assert_eq!(r.brokers.len(), 1, "{what}");
                }
                ApiKey::ApiVersions => {
                    let mut req = ApiVersionsRequest::default();
                    req.client_software_name = StrBytes::from_static_str("test");
                    req.client_software_version = StrBytes::from_static_str("1");
                    let r: ApiVersionsResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(
                        (r.error_code, r.api_keys.len()),
                        (0, weir_proto::SUPPORTED_APIS.len()),
                        "{what}"
                    );
                }
                ApiKey::CreateTopics => assert_eq!(
                    create_topic(&mut c, &format!("created-{v}"), 1, &[]).await,
                    0,
                    "{what}"
                ),
                ApiKey::DeleteTopics => {
                    let name = format!("deleted-{v}");
                    assert_eq!(create_topic(&mut c, &name, 1, &[]).await, 0);
                    let mut req = DeleteTopicsRequest::default();
                    if v >= 6 {
                        let mut t = kafka_protocol::messages::delete_topics_request::DeleteTopicState::default();
                        t.name = Some(topic_name(&name));
                        req.topics = vec![t];
                    } else {
                        req.topic_names = vec![topic_name(&name)];
                    }
                    let r: DeleteTopicsResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.responses[0].error_code, 0, "{what}");
                }
                ApiKey::DeleteRecords => {
                    use kafka_protocol::messages::delete_records_request::{
                        DeleteRecordsPartition, DeleteRecordsTopic,
                    };
                    let name = format!("trimmed-{v}");
                    assert_eq!(create_topic(&mut c, &name, 1, &[]).await, 0);
                    for _ in 0..3 {
                        let batch = build_batch(&[b"r"], 0, ProducerFields::NONE);
                        assert_eq!(produce(&mut c, &name, 0, -1, batch).await.0, 0);
                    }
                    let mut p = DeleteRecordsPartition::default();
                    p.offset = 2;
                    let mut t = DeleteRecordsTopic::default();
                    t.name = topic_name(&name);
                    t.partitions = vec![p];
                    let mut req = DeleteRecordsRequest::default();
                    req.topics = vec![t];
                    req.timeout_ms = 5000;
                    let r: DeleteRecordsResponse = call(&mut c, api.key, v, &req).await;
                    let p = &r.topics[0].partitions[0];
                    assert_eq!((p.error_code, p.low_watermark), (0, 2), "{what}");
                }
                ApiKey::CreatePartitions => {
                    let name = format!("grown-{v}");
                    assert_eq!(create_topic(&mut c, &name, 1, &[]).await, 0);
                    let mut t = kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic::default();
                    t.name = topic_name(&name);
                    t.count = 3;
                    t.assignments = None; // as clients send it: an empty list means none fit
                    let mut req = CreatePartitionsRequest::default();
                    req.topics = vec![t];
                    let r: CreatePartitionsResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.results[0].error_code, 0, "{what}");
                }
                ApiKey::DescribeConfigs => {
                    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
                    let mut topic = DescribeConfigsResource::default();
                    topic.resource_type = 2;
                    topic.resource_name = StrBytes::from_static_str("good");
                    let mut node = DescribeConfigsResource::default();
                    node.resource_type = 4;
                    node.resource_name = StrBytes::from_static_str("1");
                    let mut req = DescribeConfigsRequest::default();
                    req.resources = vec![topic, node];
                    let r: DescribeConfigsResponse = call(&mut c, api.key, v, &req).await;
                    for result in &r.results {
                        assert_eq!(result.error_code, 0, "{what}");
                        assert!(result.configs.len() > 5, "{what}");
                    }
                }
                ApiKey::AlterConfigs => {
                    use kafka_protocol::messages::alter_configs_request::{
                        AlterConfigsResource, AlterableConfig,
                    };
                    let mut config = AlterableConfig::default();
                    config.name = StrBytes::from_static_str("retention.ms");
                    config.value = Some(StrBytes::from_static_str("86400000"));
                    let mut resource = AlterConfigsResource::default();
                    resource.resource_type = 2;
                    resource.resource_name = StrBytes::from_static_str("good");
                    resource.configs = vec![config];
                    let mut req = AlterConfigsRequest::default();
                    req.resources = vec![resource];
                    let r: AlterConfigsResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.responses[0].error_code, 0, "{what}");
                }
                ApiKey::IncrementalAlterConfigs => {
                    use kafka_protocol::messages::incremental_alter_configs_request::{
                        AlterConfigsResource, AlterableConfig,
                    };
                    let mut config = AlterableConfig::default();
                    config.name = StrBytes::from_static_str("retention.bytes");
                    config.value = Some(StrBytes::from_static_str("1000000"));
                    let mut resource = AlterConfigsResource::default();
                    resource.resource_type = 2;
                    resource.resource_name = StrBytes::from_static_str("good");
                    resource.configs = vec![config];
                    let mut req = IncrementalAlterConfigsRequest::default();
                    req.resources = vec![resource];
                    let r: IncrementalAlterConfigsResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.responses[0].error_code, 0, "{what}");
                }
                ApiKey::InitProducerId => {
                    let mut req = InitProducerIdRequest::default();
                    req.transactional_id = None;
                    let r: InitProducerIdResponse = call(&mut c, api.key, v, &req).await;
                    assert!(r.error_code == 0 && r.producer_id.0 >= 0, "{what}");
                }
                ApiKey::OffsetForLeaderEpoch => {
                    use kafka_protocol::messages::offset_for_leader_epoch_request::{
                        OffsetForLeaderPartition, OffsetForLeaderTopic,
                    };
                    let mut p = OffsetForLeaderPartition::default();
                    p.current_leader_epoch = -1;
                    p.leader_epoch = 0;
                    let mut t = OffsetForLeaderTopic::default();
                    t.topic = topic_name("good");
                    t.partitions = vec![p];
                    let mut req = OffsetForLeaderEpochRequest::default();
                    req.topics = vec![t];
                    let r: OffsetForLeaderEpochResponse = call(&mut c, api.key, v, &req).await;
                    let end = &r.topics[0].partitions[0];
                    assert_eq!((end.error_code, end.leader_epoch), (0, 0), "{what}");
                    assert!(
                        end.end_offset >= 2,
                        "{what}: the end of epoch 0 is the log end"
                    );
                }
                ApiKey::DescribeCluster => {
                    let r: DescribeClusterResponse =
                        call(&mut c, api.key, v, &DescribeClusterRequest::default()).await;
                    assert_eq!((r.error_code, r.brokers.len()), (0, 1), "{what}");
                }
                ApiKey::DescribeQuorum => {
                    use kafka_protocol::messages::describe_quorum_request::{
                        PartitionData, TopicData,
                    };
                    use kafka_protocol::messages::{DescribeQuorumRequest, DescribeQuorumResponse};
                    let ask = |topic: &str| {
                        let mut p = PartitionData::default();
                        p.partition_index = 0;
                        let mut t = TopicData::default();
                        t.topic_name = topic_name(topic);
                        t.partitions = vec![p];
                        let mut req = DescribeQuorumRequest::default();
                        req.topics = vec![t];
                        req
                    };
                    let r: DescribeQuorumResponse =
                        call(&mut c, api.key, v, &ask("__cluster_metadata")).await;
                    let p = &r.topics[0].partitions[0];
                    assert_eq!(
                        (r.error_code, p.error_code, p.leader_id.0),
                        (0, 0, 1),
                        "{what}"
                    );
                    assert!(p.high_watermark > 0, "{what}: commands were committed");
                    assert_eq!(p.current_voters.len(), 1, "{what}: a quorum of one");
                    assert_eq!(
                        p.current_voters[0].log_end_offset, p.high_watermark,
                        "{what}"
                    );
                    let r: DescribeQuorumResponse = call(&mut c, api.key, v, &ask("other")).await;
                    assert_eq!(
                        r.topics[0].partitions[0].error_code, 3,
                        "{what}: not the metadata log"
                    );
                }
                ApiKey::FindCoordinator => {
                    let mut req = FindCoordinatorRequest::default();
                    let key = StrBytes::from_string(format!("find-{v}"));
                    if v >= 4 {
                        req.coordinator_keys = vec![key];
                    } else {
                        req.key = key;
                    }
                    let r: FindCoordinatorResponse = call(&mut c, api.key, v, &req).await;
                    let (code, node) = match v {
                        4.. => (r.coordinators[0].error_code, r.coordinators[0].node_id.0),
                        _ => (r.error_code, r.node_id.0),
                    };
                    assert_eq!((code, node), (0, 1), "{what}");
                }
                ApiKey::JoinGroup => {
                    let r = join_group(&mut c, &format!("join-{v}"), v).await;
                    assert_eq!((r.error_code, r.generation_id), (0, 1), "{what}");
                    assert_eq!(r.leader, r.member_id, "{what}: the only member leads");
                    assert_eq!(r.members.len(), 1, "{what}");
                }
                ApiKey::SyncGroup => {
                    let joined = join_group(&mut c, &format!("sync-{v}"), 5).await;
                    let mut assignment = sync_group_request::SyncGroupRequestAssignment::default();
                    assignment.member_id = joined.member_id.clone();
                    assignment.assignment = bytes::Bytes::from_static(b"mine");
                    let mut req = SyncGroupRequest::default();
                    req.group_id = GroupId(StrBytes::from_string(format!("sync-{v}")));
                    req.generation_id = joined.generation_id;
                    req.member_id = joined.member_id;
                    req.protocol_type = Some(StrBytes::from_static_str("consumer"));
                    req.protocol_name = joined.protocol_name;
                    req.assignments = vec![assignment];
                    let r: SyncGroupResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(
                        (r.error_code, &r.assignment[..]),
                        (0, &b"mine"[..]),
                        "{what}"
                    );
                }
                ApiKey::Heartbeat => {
                    let joined = join_group(&mut c, &format!("beat-{v}"), 5).await;
                    let mut req = HeartbeatRequest::default();
                    req.group_id = GroupId(StrBytes::from_string(format!("beat-{v}")));
                    req.generation_id = joined.generation_id;
                    req.member_id = joined.member_id.clone();
                    let r: HeartbeatResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(
                        r.error_code, 0,
                        "{what}: waiting for the assignment is fine"
                    );
                    req.generation_id += 1;
                    let r: HeartbeatResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.error_code, 22, "{what}: ILLEGAL_GENERATION");
                }
                ApiKey::LeaveGroup => {
                    let joined = join_group(&mut c, &format!("leave-{v}"), 5).await;
                    let mut req = LeaveGroupRequest::default();
                    req.group_id = GroupId(StrBytes::from_string(format!("leave-{v}")));
                    if v >= 3 {
                        let mut member = leave_group_request::MemberIdentity::default();
                        member.member_id = joined.member_id;
                        req.members = vec![member];
                    } else {
                        req.member_id = joined.member_id;
                    }
                    let r: LeaveGroupResponse = call(&mut c, api.key, v, &req).await;
                    let code = match v {
                        3.. => r.members[0].error_code,
                        _ => r.error_code,
                    };
                    assert_eq!((r.error_code, code), (0, 0), "{what}");
                }
                ApiKey::OffsetCommit => {
                    let code = commit_offset(&mut c, &format!("commit-{v}"), "good", 1, v).await;
                    assert_eq!(code, 0, "{what}");
                    let unknown =
                        commit_offset(&mut c, &format!("commit-{v}"), "absent", 1, v).await;
                    assert_eq!(unknown, 3, "{what}: UNKNOWN_TOPIC_OR_PARTITION");
                }
                ApiKey::OffsetFetch => {
                    let group = format!("fetch-{v}");
                    assert_eq!(commit_offset(&mut c, &group, "good", 7, 8).await, 0);
                    let mut req = OffsetFetchRequest::default();
                    let committed = if v >= 8 {
                        let mut t = offset_fetch_request::OffsetFetchRequestTopics::default();
                        t.name = topic_name("good");
                        t.partition_indexes = vec![0];
                        let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
                        g.group_id = GroupId(StrBytes::from_string(group));
                        g.topics = Some(vec![t]);
                        req.groups = vec![g];
                        let r: OffsetFetchResponse = call(&mut c, api.key, v, &req).await;
                        r.groups[0].topics[0].partitions[0].committed_offset
                    } else {
                        let mut t = offset_fetch_request::OffsetFetchRequestTopic::default();
                        t.name = topic_name("good");
                        t.partition_indexes = vec![0];
                        req.group_id = GroupId(StrBytes::from_string(group));
                        req.topics = Some(vec![t]);
                        let r: OffsetFetchResponse = call(&mut c, api.key, v, &req).await;
                        r.topics[0].partitions[0].committed_offset
                    };
                    assert_eq!(committed, 7, "{what}");
                }
                ApiKey::ListGroups => {
                    let r: ListGroupsResponse =
                        call(&mut c, api.key, v, &ListGroupsRequest::default()).await;
                    assert_eq!(r.error_code, 0, "{what}");
                    assert!(
                        r.groups.iter().any(|g| g.group_id.as_str() == "commit-2"),
                        "{what}"
                    );
                }
                ApiKey::DescribeGroups => {
                    let mut req = DescribeGroupsRequest::default();
                    req.groups = vec![GroupId(StrBytes::from_static_str("commit-2"))];
                    let r: DescribeGroupsResponse = call(&mut c, api.key, v, &req).await;
                    let g = &r.groups[0];
                    assert_eq!(
                        (g.error_code, g.group_state.as_str()),
                        (0, "Empty"),
                        "{what}"
                    );
                }
                ApiKey::DeleteGroups => {
                    let group = format!("delete-{v}");
                    assert_eq!(commit_offset(&mut c, &group, "good", 1, 8).await, 0);
                    let mut req = DeleteGroupsRequest::default();
                    req.groups_names = vec![GroupId(StrBytes::from_string(group.clone()))];
                    let r: DeleteGroupsResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.results[0].error_code, 0, "{what}");
                    let again: DeleteGroupsResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(
                        again.results[0].error_code, 69,
                        "{what}: GROUP_ID_NOT_FOUND"
                    );
                }
                ApiKey::OffsetDelete => {
                    assert_eq!(
                        commit_offset(&mut c, "offset-delete", "good", 1, 8).await,
                        0
                    );
                    let mut p = offset_delete_request::OffsetDeleteRequestPartition::default();
                    p.partition_index = 0;
                    let mut t = offset_delete_request::OffsetDeleteRequestTopic::default();
                    t.name = topic_name("good");
                    t.partitions = vec![p];
                    let mut req = OffsetDeleteRequest::default();
                    req.group_id = GroupId(StrBytes::from_static_str("offset-delete"));
                    req.topics = vec![t];
                    let r: OffsetDeleteResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(
                        (r.error_code, r.topics[0].partitions[0].error_code),
                        (0, 0),
                        "{what}"
                    );
                }
                ApiKey::ConsumerGroupHeartbeat => {
                    let mut req = ConsumerGroupHeartbeatRequest::default();
                    req.group_id = GroupId(StrBytes::from_string(format!("kip848-{v}")));
                    req.member_id = StrBytes::from_static_str("member");
                    req.rebalance_timeout_ms = 10_000;
                    req.subscribed_topic_names = Some(vec![topic_name("good")]);
                    req.topic_partitions = Some(Vec::new());
                    let r: ConsumerGroupHeartbeatResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!((r.error_code, r.member_epoch), (0, 1), "{what}");
                    let assigned = r.assignment.expect("assignment").topic_partitions;
                    assert_eq!(assigned[0].topic_id, topic_id, "{what}");
                }
                ApiKey::ConsumerGroupDescribe => {
                    let mut req = ConsumerGroupDescribeRequest::default();
                    req.group_ids = vec![GroupId(StrBytes::from_static_str("kip848-1"))];
                    let r: ConsumerGroupDescribeResponse = call(&mut c, api.key, v, &req).await;
                    let g = &r.groups[0];
                    assert_eq!(
                        (g.error_code, g.group_state.as_str()),
                        (0, "Stable"),
                        "{what}"
                    );
                    assert_eq!(g.members[0].member_id.as_str(), "member", "{what}");
                }
                ApiKey::ShareGroupHeartbeat => {
                    let mut req = ShareGroupHeartbeatRequest::default();
                    req.group_id = GroupId(StrBytes::from_string(format!("kip932-{v}")));
                    req.member_id = StrBytes::from_static_str("member");
                    req.subscribed_topic_names = Some(vec![topic_name("good")]);
                    let r: ShareGroupHeartbeatResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!((r.error_code, r.member_epoch), (0, 1), "{what}");
                    let assigned = r.assignment.expect("assignment").topic_partitions;
                    assert_eq!(assigned[0].topic_id, topic_id, "{what}");
                }
                ApiKey::ShareGroupDescribe => {
                    let mut req = ShareGroupDescribeRequest::default();
                    req.group_ids = vec![GroupId(StrBytes::from_static_str("kip932-1"))];
                    let r: ShareGroupDescribeResponse = call(&mut c, api.key, v, &req).await;
                    let g = &r.groups[0];
                    assert_eq!(
                        (g.error_code, g.group_state.as_str()),
                        (0, "Stable"),
                        "{what}"
                    );
                    assert_eq!(g.members[0].member_id.as_str(), "member", "{what}");
                }
                ApiKey::ShareFetch => {
                    let mut partition = share_fetch_request::FetchPartition::default();
                    partition.partition_index = 0;
                    let mut topic = share_fetch_request::FetchTopic::default();
                    topic.topic_id = topic_id;
                    topic.partitions = vec![partition];
                    let mut req = ShareFetchRequest::default();
                    req.group_id = Some(GroupId(StrBytes::from_static_str("kip932-1")));
                    req.member_id = Some(StrBytes::from_static_str("member"));
                    req.max_records = 10;
                    req.max_bytes = 1 << 20;
                    req.topics = vec![topic];
                    let r: ShareFetchResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "{what}");
                    assert_eq!(r.acquisition_lock_timeout_ms, 30_000, "{what}");
                }
                ApiKey::ShareAcknowledge => {
                    let mut req = ShareAcknowledgeRequest::default();
                    req.group_id = Some(GroupId(StrBytes::from_static_str("kip932-1")));
                    req.member_id = Some(StrBytes::from_static_str("member"));
                    req.share_session_epoch = 1;
                    let r: ShareAcknowledgeResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "{what}");
                }
                ApiKey::DescribeShareGroupOffsets => {
                    // The share group that fetched above: every partition holding state.
                    let mut group = describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default();
                    group.group_id = GroupId(StrBytes::from_static_str("kip932-1"));
                    group.topics = None;
                    let mut req = DescribeShareGroupOffsetsRequest::default();
                    req.groups = vec![group];
                    let r: DescribeShareGroupOffsetsResponse = call(&mut c, api.key, v, &req).await;
                    let g = &r.groups[0];
                    assert_eq!((g.error_code, g.topics.len()), (0, 1), "{what}: {r:?}");
                    assert_eq!(g.topics[0].topic_name.0.as_str(), "good", "{what}");
                    let p = &g.topics[0].partitions[0];
                    assert_eq!((p.partition_index, p.error_code), (0, 0), "{what}");
                    assert!(p.start_offset >= 0, "{what}");
                    assert_eq!(p.lag >= 0, v >= 1, "{what}: lag from v1");
                }
                ApiKey::InitializeShareGroupState => {
                    let mut partition =
                        initialize_share_group_state_request::PartitionData::default();
                    partition.state_epoch = 1;
                    partition.start_offset = 5;
                    let mut topic =
                        initialize_share_group_state_request::InitializeStateData::default();
                    topic.topic_id = topic_id;
                    topic.partitions = vec![partition];
                    let mut req = InitializeShareGroupStateRequest::default();
                    req.group_id = StrBytes::from_static_str("state-1");
                    req.topics = vec![topic];
                    let r: InitializeShareGroupStateResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.results[0].partitions[0].error_code, 0, "{what}");
                }
                ApiKey::ReadShareGroupState => {
                    let mut topic = read_share_group_state_request::ReadStateData::default();
                    topic.topic_id = topic_id;
                    topic.partitions = vec![Default::default()];
                    let mut req = ReadShareGroupStateRequest::default();
                    req.group_id = StrBytes::from_static_str("state-1");
                    req.topics = vec![topic];
                    let r: ReadShareGroupStateResponse = call(&mut c, api.key, v, &req).await;
                    let p = &r.results[0].partitions[0];
                    assert_eq!(
                        (p.error_code, p.state_epoch, p.start_offset),
                        (0, 1, 5),
                        "{what}"
                    );
                }
                ApiKey::WriteShareGroupState => {
                    let mut batch = write_share_group_state_request::StateBatch::default();
                    (batch.first_offset, batch.last_offset) = (6, 7);
                    (batch.delivery_state, batch.delivery_count) = (2, 1);
                    let mut partition = write_share_group_state_request::PartitionData::default();
                    partition.state_epoch = 1;
                    partition.start_offset = 6;
                    partition.state_batches = vec![batch];
                    let mut topic = write_share_group_state_request::WriteStateData::default();
                    topic.topic_id = topic_id;
                    topic.partitions = vec![partition];
                    let mut req = WriteShareGroupStateRequest::default();
                    req.group_id = StrBytes::from_static_str("state-1");
                    req.topics = vec![topic];
                    let r: WriteShareGroupStateResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.results[0].partitions[0].error_code, 0, "{what}");
                }
                ApiKey::DeleteShareGroupState => {
                    let mut topic = delete_share_group_state_request::DeleteStateData::default();
                    topic.topic_id = topic_id;
                    topic.partitions = vec![Default::default()];
                    let mut req = DeleteShareGroupStateRequest::default();
                    req.group_id = StrBytes::from_static_str("state-1");
                    req.topics = vec![topic];
                    let r: DeleteShareGroupStateResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.results[0].partitions[0].error_code, 0, "{what}");
                }
                ApiKey::ReadShareGroupStateSummary => {
                    // The share group that fetched above: its leader stored its state.
                    let mut topic =
                        read_share_group_state_summary_request::ReadStateSummaryData::default();
                    topic.topic_id = topic_id;
                    topic.partitions = vec![Default::default()];
                    let mut req = ReadShareGroupStateSummaryRequest::default();
                    req.group_id = StrBytes::from_static_str("kip932-1");
                    req.topics = vec![topic];
                    let r: ReadShareGroupStateSummaryResponse =
                        call(&mut c, api.key, v, &req).await;
                    let p = &r.results[0].partitions[0];
                    assert_eq!((p.error_code, p.state_epoch), (0, 0), "{what}");
                    assert!(p.start_offset >= 0, "{what}: initialized by the fetch");
                    let mut read_deleted = ReadShareGroupStateSummaryRequest::default();
                    read_deleted.group_id = StrBytes::from_static_str("state-1");
                    read_deleted.topics = req.topics.clone();
                    let r: ReadShareGroupStateSummaryResponse =
                        call(&mut c, api.key, v, &read_deleted).await;
                    let p = &r.results[0].partitions[0];
                    assert_eq!((p.error_code, p.start_offset), (0, -1), "{what}: deleted");
                }
                ApiKey::DescribeLogDirs => {
                    let mut req = DescribeLogDirsRequest::default();
                    req.topics = None;
                    let r: DescribeLogDirsResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!((r.error_code, r.results.len()), (0, 1), "{what}");
                    let good = r.results[0]
                        .topics
                        .iter()
                        .find(|t| t.name.0.as_str() == "good")
                        .expect("good is hosted");
                    assert_eq!(good.partitions[0].partition_index, 0, "{what}");
                    assert!(good.partitions[0].partition_size > 0, "{what}");
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
                        (0, 84),
                        "{what}: ELECTION_NOT_NEEDED"
                    );
                }
                ApiKey::AlterPartitionReassignments => {
                    let mut p =
                        alter_partition_reassignments_request::ReassignablePartition::default();
                    p.partition_index = 0;
                    p.replicas = None;
                    let mut t = alter_partition_reassignments_request::ReassignableTopic::default();
                    t.name = topic_name("good");
                    t.partitions = vec![p];
                    let mut req = AlterPartitionReassignmentsRequest::default();
                    req.topics = vec![t];
                    let r: AlterPartitionReassignmentsResponse =
                        call(&mut c, api.key, v, &req).await;
                    let code = r.responses[0].partitions[0].error_code;
                    assert_eq!(
                        (r.error_code, code),
                        (0, 85),
                        "{what}: NO_REASSIGNMENT_IN_PROGRESS"
                    );
                }
                ApiKey::ListPartitionReassignments => {
                    let r: ListPartitionReassignmentsResponse = call(
                        &mut c,
                        api.key,
                        v,
                        &ListPartitionReassignmentsRequest::default(),
                    )
                    .await;
                    assert_eq!((r.error_code, r.topics.len()), (0, 0), "{what}");
                }
                ApiKey::AddPartitionsToTxn => {
                    let id = format!("add-{v}");
                    let (producer_id, epoch) = transactional_producer(&mut c, &id).await;
                    let r = add_partition_to_txn(&mut c, v, &id, producer_id, epoch).await;
                    let topics = match v {
                        0..=3 => &r.results_by_topic_v3_and_below,
                        _ => &r.results_by_transaction[0].topic_results,
                    };
                    let code = topics[0].results_by_partition[0].partition_error_code;
                    assert_eq!(code, 0, "{what}");
                }
                ApiKey::AddOffsetsToTxn => {
                    let id = format!("add-offsets-{v}");
                    let (producer_id, epoch) = transactional_producer(&mut c, &id).await;
                    let r = add_offsets_to_txn(&mut c, v, &id, producer_id, epoch).await;
                    assert_eq!(r.error_code, 0, "{what}");
                }
                ApiKey::TxnOffsetCommit => {
                    use kafka_protocol::messages::txn_offset_commit_request::{
                        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
                    };
                    let id = format!("txn-offsets-{v}");
                    let (producer_id, epoch) = transactional_producer(&mut c, &id).await;
                    add_offsets_to_txn(&mut c, 4, &id, producer_id, epoch).await;
                    let mut partition = TxnOffsetCommitRequestPartition::default();
                    partition.committed_offset = 1;
                    let mut topic = TxnOffsetCommitRequestTopic::default();
                    topic.name = topic_name("good");
                    topic.partitions = vec![partition];
                    let mut req = TxnOffsetCommitRequest::default();
                    req.transactional_id = TransactionalId(StrBytes::from_string(id.clone()));
                    req.group_id = GroupId(StrBytes::from_string(id));
                    req.producer_id = ProducerId(producer_id);
                    req.producer_epoch = epoch;
                    req.generation_id = -1;
                    req.topics = vec![topic];
                    let r: TxnOffsetCommitResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.topics[0].partitions[0].error_code, 0, "{what}");
                }
                ApiKey::EndTxn => {
                    let id = format!("end-{v}");
                    let (producer_id, epoch) = transactional_producer(&mut c, &id).await;
                    add_partition_to_txn(&mut c, 3, &id, producer_id, epoch).await;
                    let mut req = EndTxnRequest::default();
                    req.transactional_id = TransactionalId(StrBytes::from_string(id));
                    req.producer_id = ProducerId(producer_id);
                    req.producer_epoch = epoch;
                    req.committed = true;
                    let r: EndTxnResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "{what}");
                }
                ApiKey::WriteTxnMarkers => {
                    use kafka_protocol::messages::write_txn_markers_request::{
                        WritableTxnMarker, WritableTxnMarkerTopic,
                    };
                    let mut topic = WritableTxnMarkerTopic::default();
                    topic.name = topic_name("good");
                    topic.partition_indexes = vec![0];
                    let mut marker = WritableTxnMarker::default();
                    marker.producer_id = ProducerId(1_000_000);
                    marker.producer_epoch = 0;
                    marker.transaction_result = false;
                    marker.topics = vec![topic];
                    let mut req = WriteTxnMarkersRequest::default();
                    req.markers = vec![marker];
                    let r: WriteTxnMarkersResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.markers[0].topics[0].partitions[0].error_code, 0, "{what}");
                }
                ApiKey::DescribeTransactions => {
                    let id = format!("describe-{v}");
                    let (producer_id, epoch) = transactional_producer(&mut c, &id).await;
                    let mut req = DescribeTransactionsRequest::default();
                    req.transactional_ids = vec![
                        TransactionalId(StrBytes::from_string(id)),
                        TransactionalId(StrBytes::from_static_str("unknown")),
                    ];
                    let r: DescribeTransactionsResponse = call(&mut c, api.key, v, &req).await;
                    let known = &r.transaction_states[0];
                    assert_eq!(
                        (
                            known.error_code,
                            known.transaction_state.as_str(),
                            known.producer_id.0,
                            known.producer_epoch
                        ),
                        (0, "Empty", producer_id, epoch),
                        "{what}"
                    );
                    assert_eq!(
                        r.transaction_states[1].error_code, 105,
                        "{what}: TRANSACTIONAL_ID_NOT_FOUND"
                    );
                }
                ApiKey::ListTransactions => {
                    let id = format!("list-{v}");
                    transactional_producer(&mut c, &id).await;
                    let mut req = ListTransactionsRequest::default();
                    req.state_filters = vec![
                        StrBytes::from_static_str("Empty"),
                        StrBytes::from_static_str("Nonsense"),
                    ];
                    req.duration_filter = -1;
                    let r: ListTransactionsResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "{what}");
                    assert!(
                        r.transaction_states
                            .iter()
                            .any(|t| t.transactional_id.as_str() == id),
                        "{what}"
                    );
                    assert_eq!(r.unknown_state_filters.len(), 1, "{what}");
                }
                ApiKey::DescribeProducers => {
                    use kafka_protocol::messages::describe_producers_request::TopicRequest;
                    let mut topic = TopicRequest::default();
                    topic.name = topic_name("good");
                    topic.partition_indexes = vec![0, 7];
                    let mut req = DescribeProducersRequest::default();
                    req.topics = vec![topic];
                    let r: DescribeProducersResponse = call(&mut c, api.key, v, &req).await;
                    let partitions = &r.topics[0].partitions;
                    assert_eq!(partitions[0].error_code, 0, "{what}");
                    assert!(
                        partitions[0]
                            .active_producers
                            .iter()
                            .any(|p| p.producer_id.0 == 1_000_000),
                        "{what}: the producer of the marker WriteTxnMarkers wrote"
                    );
                    assert_eq!(partitions[1].error_code, 3, "{what}: no partition 7");
                }
                ApiKey::SaslHandshake => {
                    use kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};
                    let mut req = SaslHandshakeRequest::default();
                    req.mechanism = StrBytes::from_static_str("PLAIN");
                    let r: SaslHandshakeResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(
                        r.error_code, 34,
                        "{what}: ILLEGAL_SASL_STATE off a SASL listener"
                    );
                }
                ApiKey::SaslAuthenticate => {
                    use kafka_protocol::messages::{
                        SaslAuthenticateRequest, SaslAuthenticateResponse,
                    };
                    let mut req = SaslAuthenticateRequest::default();
                    req.auth_bytes = bytes::Bytes::from_static(b"\0user\0password");
                    let r: SaslAuthenticateResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(
                        r.error_code, 34,
                        "{what}: ILLEGAL_SASL_STATE off a SASL listener"
                    );
                }
                ApiKey::AlterUserScramCredentials => {
                    use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
                    use kafka_protocol::messages::{
                        AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
                    };
                    let mut upsertion = ScramCredentialUpsertion::default();
                    upsertion.name = StrBytes::from_string(format!("user-{v}"));
                    upsertion.mechanism = 1;
                    upsertion.iterations = 4096;
                    upsertion.salt = bytes::Bytes::from_static(b"salt");
                    upsertion.salted_password = bytes::Bytes::from(vec![7u8; 32]);
                    let mut req = AlterUserScramCredentialsRequest::default();
                    req.upsertions = vec![upsertion];
                    let r: AlterUserScramCredentialsResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.results[0].error_code, 0, "{what}");
                }
                ApiKey::DescribeUserScramCredentials => {
                    use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
                    use kafka_protocol::messages::{
                        DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
                    };
                    let mut user = UserName::default();
                    user.name = StrBytes::from_static_str("nobody");
                    let mut req = DescribeUserScramCredentialsRequest::default();
                    req.users = Some(vec![user]);
                    let r: DescribeUserScramCredentialsResponse =
                        call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "{what}");
                    assert_eq!(r.results[0].error_code, 91, "{what}: RESOURCE_NOT_FOUND");
                }
                ApiKey::AlterClientQuotas => {
                    let user = format!("quota-{v}");
                    let entry = quota_entry(
                        &[("user", Some(user.as_str()))],
                        &[("producer_byte_rate", 1024.0)],
                    );
                    let mut req = AlterClientQuotasRequest::default();
                    req.entries = vec![entry];
                    let r: AlterClientQuotasResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.entries[0].error_code, 0, "{what}");
                }
                ApiKey::DescribeClientQuotas => {
                    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
                    let mut component = ComponentData::default();
                    component.entity_type = StrBytes::from_static_str("user");
                    component.match_type = 0;
                    component._match = Some(StrBytes::from_static_str("quota-0"));
                    let mut req = DescribeClientQuotasRequest::default();
                    req.components = vec![component];
                    let r: DescribeClientQuotasResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "{what}");
                    let entries = r.entries.expect("entries");
                    assert_eq!(
                        entries.len(),
                        1,
                        "{what}: the quota AlterClientQuotas v0 set"
                    );
                    assert_eq!(
                        (
                            entries[0].values[0].key.as_str(),
                            entries[0].values[0].value
                        ),
                        ("producer_byte_rate", 1024.0),
                        "{what}"
                    );
                }
                ApiKey::CreateAcls => {
                    let mut creation = create_acls_request::AclCreation::default();
                    creation.resource_type = 2;
                    creation.resource_name = StrBytes::from_string(format!("acl-{v}"));
                    creation.resource_pattern_type = 3;
                    creation.principal = StrBytes::from_static_str("User:alice");
                    creation.host = StrBytes::from_static_str("*");
                    creation.operation = 3;
                    creation.permission_type = 3;
                    let mut req = CreateAclsRequest::default();
                    req.creations = vec![creation];
                    let r: CreateAclsResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!(r.results[0].error_code, 0, "{what}");
                }
                ApiKey::DescribeAcls => {
                    let mut req = DescribeAclsRequest::default();
                    req.resource_type_filter = 2;
                    req.resource_name_filter = Some(StrBytes::from_static_str("acl-1"));
                    req.pattern_type_filter = 3;
                    req.principal_filter = None;
                    req.host_filter = None;
                    req.operation = 1;
                    req.permission_type = 1;
                    let r: DescribeAclsResponse = call(&mut c, api.key, v, &req).await;
                    assert_eq!((r.error_code, r.resources.len()), (0, 1), "{what}");
                    let acl = &r.resources[0].acls[0];
                    assert_eq!(
                        (acl.principal.as_str(), acl.operation, acl.permission_type),
                        ("User:alice", 3, 3),
                        "{what}"
                    );
                }
                ApiKey::DeleteAcls => {
                    let mut filter = delete_acls_request::DeleteAclsFilter::default();
                    filter.resource_type_filter = 2;
                    filter.resource_name_filter = Some(StrBytes::from_string(format!("acl-{v}")));
                    filter.pattern_type_filter = 1;
                    filter.principal_filter = None;
                    filter.host_filter = None;
                    filter.operation = 1;
                    filter.permission_type = 1;
                    let mut req = DeleteAclsRequest::default();
                    req.filters = vec![filter];
                    let r: DeleteAclsResponse = call(&mut c, api.key, v, &req).await;
                    let result = &r.filter_results[0];
                    assert_eq!(
                        (result.error_code, result.matching_acls.len()),
                        (0, 1),
                        "{what}"
                    );
                }
                other => panic!("{other:?} is advertised but this test does not cover it"),
            }
        }
    }
    test.stop.send_replace(true);
}

/// Many clients creating the same topic at once (auto-creation races, duplicate CreateTopics,
/// CreatePartitions to the same total) leave one topic with its partitions opened once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creation_of_one_topic() {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    let test = start_fs(&[]).await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let addr = test.addr;
        tasks.push(tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.expect("connect");
            if i % 2 == 0 {
                let mut t = MetadataRequestTopic::default();
                t.name = Some(topic_name("raced"));
                let mut req = MetadataRequest::default();
                req.topics = Some(vec![t]);
                req.allow_auto_topic_creation = true;
                let r: MetadataResponse = call(&mut c, ApiKey::Metadata, 12, &req).await;
                r.topics[0].error_code
            } else {
                match create_topic(&mut c, "raced", 1, &[]).await {
                    36 => 0,
                    code => code,
                }
            }
        }));
    }
    for task in tasks {
        assert_eq!(task.await.expect("task"), 0);
    }
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(
        produce(
            &mut c,
            "raced",
            0,
            -1,
            build_batch(&[b"one"], 0, ProducerFields::NONE)
        )
        .await,
        (0, 0)
    );
    assert_eq!(test.broker.partitions().count(), 1);
    test.stop.send_replace(true);
}

/// A partition named twice: ListOffsets refuses both entries with INVALID_REQUEST, Fetch
/// answers it once — as Kafka does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_named_twice() {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{FetchResponse, ListOffsetsRequest, ListOffsetsResponse};
    let test = start_fs(&[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "twice", 2, &[]).await, 0);
    assert_eq!(
        produce(
            &mut c,
            "twice",
            0,
            1,
            build_batch(&[b"v"], 0, ProducerFields::NONE)
        )
        .await,
        (0, 0)
    );
    let partition = |index| {
        let mut p = ListOffsetsPartition::default();
        p.partition_index = index;
        p.timestamp = -1;
        p.current_leader_epoch = -1;
        p
    };
    let mut t = ListOffsetsTopic::default();
    t.name = topic_name("twice");
    t.partitions = vec![partition(0), partition(1), partition(0)];
    let mut request = ListOffsetsRequest::default();
    request.topics = vec![t];
    let r: ListOffsetsResponse = call(&mut c, ApiKey::ListOffsets, 7, &request).await;
    let codes: Vec<i16> = r.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect();
    assert_eq!(
        codes,
        vec![42, 0, 42],
        "INVALID_REQUEST for the duplicates only"
    );
    let mut fetch = fetch_request("twice", 0, 0, 1 << 20);
    let again = fetch.topics[0].partitions[0].clone();
    fetch.topics[0].partitions.push(again);
    let r: FetchResponse = call(&mut c, ApiKey::Fetch, 11, &fetch).await;
    assert_eq!(r.responses[0].partitions.len(), 1);
    test.shutdown().await;
}

/// DeleteTopics of `__consumer_offsets` is refused (TOPIC_DELETION_DISABLED; Kafka would delete
/// it and every group's committed offsets with it), so is CreatePartitions of it (groups are
/// placed by its partition count), and the groups and their offsets stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offsets_topic_is_not_deleted() {
    use kafka_protocol::messages::*;
    let groups = [("offsets.topic.num.partitions", "2")];
    let test = start_on(Arc::new(MemoryStorage::new()), Path::new("/"), &groups).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "t", 1, &[]).await, 0);
    let mut find = FindCoordinatorRequest::default();
    find.key = StrBytes::from_static_str("g");
    let found: FindCoordinatorResponse = call(&mut c, ApiKey::FindCoordinator, 3, &find).await;
    assert_eq!(found.error_code, 0);
    assert_eq!(commit_offset(&mut c, "g", "t", 5, 8).await, 0);
    let mut delete = DeleteTopicsRequest::default();
    delete.topic_names = vec![topic_name("__consumer_offsets"), topic_name("t")];
    let deleted: DeleteTopicsResponse = call(&mut c, ApiKey::DeleteTopics, 4, &delete).await;
    let code = |name: &str| {
        deleted
            .responses
            .iter()
            .find(|r| r.name.as_ref().is_some_and(|n| n.0.as_str() == name))
            .map(|r| r.error_code)
    };
    assert_eq!(
        code("__consumer_offsets"),
        Some(73),
        "TOPIC_DELETION_DISABLED"
    );
    assert_eq!(
        code("t"),
        Some(0),
        "the other topic in the request is deleted"
    );
    let mut grow = CreatePartitionsRequest::default();
    let mut offsets = create_partitions_request::CreatePartitionsTopic::default();
    offsets.name = topic_name("__consumer_offsets");
    offsets.count = 4;
    grow.topics = vec![offsets];
    let grown: CreatePartitionsResponse = call(&mut c, ApiKey::CreatePartitions, 3, &grow).await;
    assert_eq!(grown.results[0].error_code, 37, "INVALID_PARTITIONS");
    assert_eq!(
        test.broker
            .image()
            .topic("__consumer_offsets")
            .map(|t| t.partition_count()),
        Some(2)
    );
    let mut list = ListGroupsRequest::default();
    list.states_filter = Vec::new();
    let listed: ListGroupsResponse = call(&mut c, ApiKey::ListGroups, 4, &list).await;
    assert_eq!(listed.groups.len(), 1, "the group is still there");
    assert_eq!(
        commit_offset(&mut c, "g", "t", 6, 8).await,
        3,
        "its topic is gone, but the coordinator answers"
    );
    test.stop.send_replace(true);
}

/// Answers checked request by request against Apache Kafka 4.4.0: a topic named twice in
/// DeleteTopics, one config key twice in IncrementalAlterConfigs, an epoch above the current
/// one in OffsetForLeaderEpoch, the max-timestamp lookup below ListOffsets v7, and an acks=0
/// produce to a topic that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_match_kafka_for_duplicates_future_epochs_and_old_versions() {
    use kafka_protocol::messages::*;
    let settings = [("auto.create.topics.enable", "false")];
    let test = start_on(Arc::new(MemoryStorage::new()), Path::new("/"), &settings).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "t", 2, &[]).await, 0);
    let topic_id = test.broker.image().topic("t").expect("t").topic_id;

    // DeleteTopics naming one topic twice: one INVALID_REQUEST, and the topic stays.
    let mut by_name = DeleteTopicsRequest::default();
    by_name.topic_names = vec![topic_name("t"), topic_name("t")];
    let mut by_state = DeleteTopicsRequest::default();
    let mut state = delete_topics_request::DeleteTopicState::default();
    state.name = Some(topic_name("t"));
    by_state.topics = vec![state.clone(), state];
    let mut by_id = DeleteTopicsRequest::default();
    let mut state = delete_topics_request::DeleteTopicState::default();
    state.topic_id = topic_id;
    by_id.topics = vec![state.clone(), state];
    for (version, request, message) in [
        (5, &by_name, "Duplicate topic name."),
        (6, &by_state, "Duplicate topic name."),
        (6, &by_id, "Duplicate topic id."),
    ] {
        let r: DeleteTopicsResponse = call(&mut c, ApiKey::DeleteTopics, version, request).await;
        let answers: Vec<(i16, Option<&str>)> = r
            .responses
            .iter()
            .map(|x| (x.error_code, x.error_message.as_ref().map(|m| m.as_str())))
            .collect();
        assert_eq!(answers, vec![(42, Some(message))], "v{version}");
        assert!(
            test.broker.image().topic("t").is_some(),
            "v{version}: not deleted"
        );
    }

    // IncrementalAlterConfigs with SET and DELETE of one key: INVALID_REQUEST, nothing set.
    let mut resource = incremental_alter_configs_request::AlterConfigsResource::default();
    resource.resource_type = 2;
    resource.resource_name = StrBytes::from_static_str("t");
    let mut set = incremental_alter_configs_request::AlterableConfig::default();
    set.name = StrBytes::from_static_str("retention.ms");
    set.value = Some(StrBytes::from_static_str("1000"));
    let mut delete = set.clone();
    delete.config_operation = 1;
    delete.value = None;
    resource.configs = vec![set, delete];
    let mut alter = IncrementalAlterConfigsRequest::default();
    alter.resources = vec![resource];
    let r: IncrementalAlterConfigsResponse =
        call(&mut c, ApiKey::IncrementalAlterConfigs, 1, &alter).await;
    assert_eq!(
        (
            r.responses[0].error_code,
            r.responses[0].error_message.as_ref().map(|m| m.as_str())
        ),
        (42, Some("Error due to duplicate config keys"))
    );
    let image = test.broker.image();
    assert!(!image
        .topic("t")
        .expect("t")
        .configs
        .contains_key("retention.ms"));

    // OffsetForLeaderEpoch above the current epoch: undefined epoch and offset.
    let mut p = offset_for_leader_epoch_request::OffsetForLeaderPartition::default();
    p.leader_epoch = 7;
    p.current_leader_epoch = -1;
    let mut t = offset_for_leader_epoch_request::OffsetForLeaderTopic::default();
    t.topic = topic_name("t");
    t.partitions = vec![p];
    let mut request = OffsetForLeaderEpochRequest::default();
    request.topics = vec![t];
    request.replica_id = BrokerId(-1);
    for v in [3, 4] {
        let r: OffsetForLeaderEpochResponse =
            call(&mut c, ApiKey::OffsetForLeaderEpoch, v, &request).await;
        let end = &r.topics[0].partitions[0];
        assert_eq!(
            (end.error_code, end.leader_epoch, end.end_offset),
            (0, -1, -1),
            "v{v}"
        );
    }

    // ListOffsets -3 (max timestamp) exists from v7.
    for (v, error) in [(6, 35), (7, 0)] {
        let mut lp = list_offsets_request::ListOffsetsPartition::default();
        lp.timestamp = -3;
        let mut lt = list_offsets_request::ListOffsetsTopic::default();
        lt.name = topic_name("t");
        lt.partitions = vec![lp];
        let mut request = ListOffsetsRequest::default();
        request.topics = vec![lt];
        request.replica_id = BrokerId(-1);
        let r: ListOffsetsResponse = call(&mut c, ApiKey::ListOffsets, v, &request).await;
        let x = &r.topics[0].partitions[0];
        assert_eq!(
            (x.error_code, x.offset, x.timestamp),
            (error, -1, -1),
            "v{v}"
        );
    }

    // acks=0 to a topic that does not exist: the connection closes, which is how such a
    // client learns of it.
    let batch = build_batch(&[b"v"], 1000, ProducerFields::NONE);
    let frame = encode_frame(
        ApiKey::Produce,
        9,
        11,
        &produce_request("absent", 0, 0, batch),
    );
    c.write_all(&frame).await.expect("write");
    assert!(closed_within(&mut c, Duration::from_secs(5)).await);
    test.stop.send_replace(true);
}

/// CreatePartitions with manual assignments that do not fit, or naming a topic twice, is
/// refused with Kafka 4.4.0's codes and messages and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_partitions_refuses_what_kafka_refuses() {
    use kafka_protocol::messages::*;
    let test = start_on(Arc::new(MemoryStorage::new()), Path::new("/"), &[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "t", 2, &[]).await, 0);
    let node = test.broker.node_id();
    let grow = |count: i32, assignments: Option<Vec<Vec<i32>>>| {
        let mut topic = create_partitions_request::CreatePartitionsTopic::default();
        topic.name = topic_name("t");
        topic.count = count;
        topic.assignments = assignments.map(|lists| {
            lists
                .into_iter()
                .map(|brokers| {
                    let mut a = create_partitions_request::CreatePartitionsAssignment::default();
                    a.broker_ids = brokers.into_iter().map(BrokerId).collect();
                    a
                })
                .collect()
        });
        topic
    };
    let cases = [
        (
            grow(4, Some(vec![vec![node]])),
            39,
            "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."
                .to_string(),
        ),
        (
            grow(3, Some(vec![vec![node], vec![node]])),
            39,
            "Attempted to add 1 additional partition(s), but only 2 assignment(s) were specified."
                .to_string(),
        ),
        (
            grow(3, Some(vec![vec![node, node]])),
            39,
            format!("The manual partition assignment includes the broker {node} more than once."),
        ),
        (
            grow(3, Some(vec![vec![]])),
            39,
            "The manual partition assignment includes an empty replica list.".to_string(),
        ),
        (
            grow(3, Some(vec![vec![99]])),
            39,
            "The manual partition assignment includes broker 99, but no such broker is registered."
                .to_string(),
        ),
    ];
    for (topic, code, message) in cases {
        let mut request = CreatePartitionsRequest::default();
        request.topics = vec![topic];
        let r: CreatePartitionsResponse = call(&mut c, ApiKey::CreatePartitions, 3, &request).await;
        let result = &r.results[0];
        assert_eq!(
            (
                result.error_code,
                result.error_message.as_ref().map(|m| m.to_string())
            ),
            (code, Some(message))
        );
    }
    let mut twice = CreatePartitionsRequest::default();
    twice.topics = vec![grow(3, None), grow(3, None)];
    let r: CreatePartitionsResponse = call(&mut c, ApiKey::CreatePartitions, 3, &twice).await;
    let answers: Vec<(i16, Option<&str>)> = r
        .results
        .iter()
        .map(|x| (x.error_code, x.error_message.as_ref().map(|m| m.as_str())))
        .collect();
    assert_eq!(answers, vec![(42, Some("Duplicate topic name."))]);
    assert_eq!(
        test.broker.image().topic("t").expect("t").partition_count(),
        2,
        "nothing grew"
    );
    let mut good = CreatePartitionsRequest::default();
    good.topics = vec![grow(3, Some(vec![vec![node]]))];
    let r: CreatePartitionsResponse = call(&mut c, ApiKey::CreatePartitions, 3, &good).await;
    assert_eq!(r.results[0].error_code, 0);
    assert_eq!(
        test.broker.image().topic("t").expect("t").partition_count(),
        3
    );
    test.stop.send_replace(true);
}

/// IncrementalAlterConfigs APPEND and SUBTRACT change a list config (`cleanup.policy`) item by
/// item from its current value, and are refused for other configs, with Kafka 4.4.0's codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_configs_take_append_and_subtract() {
    use kafka_protocol::messages::*;
    let test = start_on(Arc::new(MemoryStorage::new()), Path::new("/"), &[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "t", 1, &[]).await, 0);
    // (config, operation, value, error code, cleanup.policy afterwards)
    type Case = (
        &'static str,
        i8,
        Option<&'static str>,
        i16,
        Option<&'static str>,
    );
    let cases: [Case; 6] = [
        (
            "cleanup.policy",
            2,
            Some("compact"),
            0,
            Some("delete,compact"),
        ),
        (
            "cleanup.policy",
            2,
            Some("compact"),
            0,
            Some("delete,compact"),
        ),
        ("cleanup.policy", 3, Some("delete"), 0, Some("compact")),
        ("retention.ms", 2, Some("5"), 40, None),
        ("cleanup.policy", 2, None, 42, None),
        ("cleanup.policy", 2, Some("bogus"), 40, None),
    ];
    for (name, op, value, code, after) in cases {
        let mut config = incremental_alter_configs_request::AlterableConfig::default();
        config.name = StrBytes::from_static_str(name);
        config.config_operation = op;
        config.value = value.map(StrBytes::from_static_str);
        let mut resource = incremental_alter_configs_request::AlterConfigsResource::default();
        resource.resource_type = 2;
        resource.resource_name = StrBytes::from_static_str("t");
        resource.configs = vec![config];
        let mut request = IncrementalAlterConfigsRequest::default();
        request.resources = vec![resource];
        let r: IncrementalAlterConfigsResponse =
            call(&mut c, ApiKey::IncrementalAlterConfigs, 1, &request).await;
        let result = &r.responses[0];
        assert_eq!(
            result.error_code, code,
            "{name} op {op} {value:?}: {:?}",
            result.error_message
        );
        if code == 0 {
            assert!(result.error_message.is_none());
        }
        if name == "retention.ms" {
            assert_eq!(
                result.error_message.as_ref().map(|m| m.as_str()),
                Some("Can't APPEND to key retention.ms because its type is not LIST.")
            );
        }
        if let Some(after) = after {
            let image = test.broker.image();
            let policy = image
                .topic("t")
                .expect("t")
                .configs
                .get("cleanup.policy")
                .cloned();
            assert_eq!(policy.as_deref(), Some(after));
        }
    }
    test.stop.send_replace(true);
}

/// One IncrementalAlterConfigs change of broker configs: (key, operation, value).
async fn alter_broker_configs(
    stream: &mut TcpStream,
    broker: &str,
    changes: &[(&str, i8, Option<&str>)],
) -> i16 {
    incremental_alter_configs(stream, 4, broker, changes).await
}

/// One IncrementalAlterConfigs change of the configs of a resource (2 a topic, 4 a broker).
async fn incremental_alter_configs(
    stream: &mut TcpStream,
    resource_type: i8,
    name: &str,
    changes: &[(&str, i8, Option<&str>)],
) -> i16 {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::{
        IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    };
    let mut resource = AlterConfigsResource::default();
    resource.resource_type = resource_type;
    resource.resource_name = StrBytes::from_string(name.to_string());
    resource.configs = changes
        .iter()
        .map(|(name, op, value)| {
            let mut config = AlterableConfig::default();
            config.name = StrBytes::from_string(name.to_string());
            config.config_operation = *op;
            config.value = value.map(|v| StrBytes::from_string(v.to_string()));
            config
        })
        .collect();
    let mut request = IncrementalAlterConfigsRequest::default();
    request.resources = vec![resource];
    let response: IncrementalAlterConfigsResponse =
        call(stream, ApiKey::IncrementalAlterConfigs, 1, &request).await;
    response.responses[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_broker_configs_apply_at_once_and_survive_a_restart() {
    const SET: i8 = 0;
    const DELETE: i8 = 1;
    const MESSAGE_TOO_LARGE: i16 = 10;
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn weir_storage::Storage> = Arc::new(weir_storage::FsStorage);
    let test = start_on(storage.clone(), dir.path(), &[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "bounded", 1, &[]).await, 0);
    let value = vec![b'v'; 4000];
    let big = || build_batch(&[&value], 0, ProducerFields::NONE);
    assert_eq!(produce(&mut c, "bounded", 0, 1, big()).await.0, 0);

    // The cluster-wide default applies to every topic without an override, at once.
    let small = [("message.max.bytes", SET, Some("2000"))];
    assert_eq!(alter_broker_configs(&mut c, "", &small).await, 0);
    assert_eq!(
        produce(&mut c, "bounded", 0, 1, big()).await.0,
        MESSAGE_TOO_LARGE
    );
    // This broker's own value comes first.
    let large = [("message.max.bytes", SET, Some("100000"))];
    assert_eq!(alter_broker_configs(&mut c, "1", &large).await, 0);
    assert_eq!(produce(&mut c, "bounded", 0, 1, big()).await.0, 0);
    // Static settings and bad values are refused and change nothing.
    let refused = [("num.partitions", SET, Some("3"))];
    assert_eq!(alter_broker_configs(&mut c, "1", &refused).await, 42);
    let refused = [("message.max.bytes", SET, Some("large"))];
    assert_eq!(alter_broker_configs(&mut c, "1", &refused).await, 42);
    assert_eq!(produce(&mut c, "bounded", 0, 1, big()).await.0, 0);
    // The topic's own override comes before both, set and deleted while the levels stay.
    let topic_small = [("max.message.bytes", SET, Some("2000"))];
    assert_eq!(
        incremental_alter_configs(&mut c, 2, "bounded", &topic_small).await,
        0
    );
    assert_eq!(
        produce(&mut c, "bounded", 0, 1, big()).await.0,
        MESSAGE_TOO_LARGE
    );
    let topic_default = [("max.message.bytes", DELETE, None)];
    assert_eq!(
        incremental_alter_configs(&mut c, 2, "bounded", &topic_default).await,
        0
    );
    assert_eq!(produce(&mut c, "bounded", 0, 1, big()).await.0, 0);
    drop(c);
    test.shutdown().await;

    // Both levels are metadata: after a restart they still hold.
    let restarted = start_on(storage, dir.path(), &[]).await;
    let mut c = TcpStream::connect(restarted.addr).await.expect("connect");
    assert_eq!(produce(&mut c, "bounded", 0, 1, big()).await.0, 0);
    let delete = [("message.max.bytes", DELETE, None)];
    assert_eq!(alter_broker_configs(&mut c, "1", &delete).await, 0);
    assert_eq!(
        produce(&mut c, "bounded", 0, 1, big()).await.0,
        MESSAGE_TOO_LARGE
    );
    assert_eq!(alter_broker_configs(&mut c, "", &delete).await, 0);
    assert_eq!(produce(&mut c, "bounded", 0, 1, big()).await.0, 0);
    restarted.shutdown().await;
}

/// Metadata the broker did not ask for (a change another broker's request made) reaches it
/// through the controller's committed images: it opens, serves and deletes the partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_follows_changes_it_did_not_ask_for() {
    let test = start_fs(&[]).await;
    let controller = test.controller.clone();
    let topic = weir_metadata::NewTopic {
        name: "elsewhere".into(),
        partitions: 2,
        replication_factor: 1,
        ..Default::default()
    };
    controller
        .create_topic(topic, false, None)
        .await
        .expect("created at the controller");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // The image is published as applied once its partitions are open.
    while test.broker.image().topic("elsewhere").is_none() {
        assert!(tokio::time::Instant::now() < deadline, "never applied");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(test.broker.partitions().get("elsewhere", 1).is_some());
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    let batch = build_batch(&[b"seen"], 0, ProducerFields::NONE);
    assert_eq!(produce(&mut c, "elsewhere", 1, 1, batch).await, (0, 0));
    let controller = test.controller.clone();
    controller
        .delete_topic("elsewhere", None)
        .await
        .expect("deleted at the controller");
    while test.broker.image().topic("elsewhere").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "deletion never applied"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(test.broker.partitions().get("elsewhere", 0).is_none());
    test.shutdown().await;
}

/// The connection limits are dynamic broker configs: lowering `max.connections.per.ip` closes
/// new connections beyond it at once (open ones stay), and deleting it lets them in again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limits_change_at_runtime() {
    const SET: i8 = 0;
    const DELETE: i8 = 1;
    let test = start_fs(&[]).await;
    let mut admin = TcpStream::connect(test.addr).await.expect("connect");
    let _second = TcpStream::connect(test.addr).await.expect("connect");
    let two = [("max.connections.per.ip", SET, Some("2"))];
    assert_eq!(alter_broker_configs(&mut admin, "1", &two).await, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut third = TcpStream::connect(test.addr).await.expect("connect");
        if closed_within(&mut third, Duration::from_millis(300)).await {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new limit never applied"
        );
    }
    // The connections already open are served as before.
    let versions = kafka_protocol::messages::ApiVersionsRequest::default();
    let answer: kafka_protocol::messages::ApiVersionsResponse =
        call(&mut admin, ApiKey::ApiVersions, 0, &versions).await;
    assert_eq!(answer.error_code, 0);
    let back = [("max.connections.per.ip", DELETE, None)];
    assert_eq!(alter_broker_configs(&mut admin, "1", &back).await, 0);
    loop {
        let mut third = TcpStream::connect(test.addr).await.expect("connect");
        if !closed_within(&mut third, Duration::from_millis(300)).await {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the default never came back"
        );
    }
    test.shutdown().await;
}

/// AlterClientQuotas answers each entity alone: a bad key, value or entity is INVALID_REQUEST
/// with Kafka's reason and none of that entity's changes, while the good entity beside it is
/// committed; validate_only commits nothing; DescribeClientQuotas refuses a bad filter whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_quotas_are_checked_per_entity() {
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
    use kafka_protocol::messages::{
        AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
    };
    let test = start_fs(&[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    let mut request = AlterClientQuotasRequest::default();
    request.entries = vec![
        quota_entry(&[("user", Some("good"))], &[("producer_byte_rate", 2048.0)]),
        quota_entry(
            &[("user", Some("half"))],
            &[("consumer_byte_rate", 1.0), ("producer_byte_rate", 0.5)],
        ),
        quota_entry(
            &[("client-id", Some("c"))],
            &[("connection_creation_rate", 1.0)],
        ),
        quota_entry(&[("group", Some("g"))], &[("producer_byte_rate", 1.0)]),
        quota_entry(&[("user", Some("good"))], &[("consumer_byte_rate", 1.0)]),
    ];
    let r: AlterClientQuotasResponse = call(&mut c, ApiKey::AlterClientQuotas, 1, &request).await;
    let answers: Vec<(i16, String)> = r
        .entries
        .iter()
        .map(|e| {
            let message = e.error_message.as_ref().map(|m| m.to_string());
            (e.error_code, message.unwrap_or_default())
        })
        .collect();
    assert_eq!(
        answers,
        vec![
            (0, String::new()),
            (
                42,
                "Configuration producer_byte_rate must be a Long value".into()
            ),
            (
                42,
                "Invalid configuration key connection_creation_rate".into()
            ),
            (42, "Unhandled client quota entity type: group".into()),
            (42, "Ignoring duplicate entity user=good".into()),
        ]
    );
    let quotas: Vec<String> = test
        .broker
        .image()
        .client_quotas()
        .iter()
        .map(|(entity, quotas)| format!("{entity} {quotas:?}"))
        .collect();
    assert_eq!(
        quotas,
        vec!["user=good {ProducerByteRate: QuotaValue(2048.0)}"],
        "the good entity alone"
    );

    request.entries = vec![quota_entry(
        &[("user", None)],
        &[("request_percentage", 10.0)],
    )];
    request.validate_only = true;
    let r: AlterClientQuotasResponse = call(&mut c, ApiKey::AlterClientQuotas, 0, &request).await;
    assert_eq!(r.entries[0].error_code, 0);
    assert_eq!(test.broker.image().client_quotas().iter().count(), 1);

    let component = |kind: &'static str, match_type: i8, name: Option<&'static str>| {
        let mut c = ComponentData::default();
        c.entity_type = StrBytes::from_static_str(kind);
        c.match_type = match_type;
        c._match = name.map(StrBytes::from_static_str);
        c
    };
    for (components, code) in [
        (vec![component("user", 0, None)], 42),
        (vec![component("topic", 2, None)], 35),
        (
            vec![component("ip", 2, None), component("user", 2, None)],
            42,
        ),
    ] {
        let mut describe = DescribeClientQuotasRequest::default();
        describe.components = components;
        let r: DescribeClientQuotasResponse =
            call(&mut c, ApiKey::DescribeClientQuotas, 1, &describe).await;
        assert_eq!((r.error_code, r.entries), (code, None));
    }
    let mut describe = DescribeClientQuotasRequest::default();
    describe.components = vec![component("user", 2, None)];
    let r: DescribeClientQuotasResponse =
        call(&mut c, ApiKey::DescribeClientQuotas, 1, &describe).await;
    let entries = r.entries.expect("entries");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].entity[0].entity_name.as_deref(), Some("good"));
    test.shutdown().await;
}

/// A consumer with a `consumer_byte_rate` is sent at most a window of its quota at once; a
/// fetch that would put it above its rate is answered, as Kafka answers it, with no
/// partitions and `throttle_time_ms` (a full fetch without a session, an incremental one in
/// its session), and its connection is not read for that time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_above_its_fetch_quota_gets_empty_answers_and_waits() {
    use kafka_protocol::messages::{FetchResponse, ProduceResponse};
    let test = start_fs(&[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "metered", 1, &[]).await, 0);
    for size in [60_000, 60_000, 2_000] {
        let batch = build_batch(&[&vec![b'v'; size]], 0, ProducerFields::NONE);
        let request = produce_request("metered", 0, 1, batch);
        let r: ProduceResponse = call(&mut c, ApiKey::Produce, 9, &request).await;
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    // 10,000 bytes a second for the harness's client id: at most 100,000 bytes at once.
    set_quotas(
        &mut c,
        &[("client-id", Some("test"))],
        &[("consumer_byte_rate", 10_000.0)],
    )
    .await;

    let mut opening = fetch_request("metered", 0, 0, 1 << 20);
    opening.session_epoch = 0;
    let first: FetchResponse = call(&mut c, ApiKey::Fetch, 12, &opening).await;
    assert_eq!(first.throttle_time_ms, 0);
    assert_ne!(first.session_id, 0, "a session is open");
    let records = first.responses[0].partitions[0]
        .records
        .clone()
        .expect("records");
    assert_eq!(
        records.len(),
        100_000,
        "a window's worth, the last batch cut"
    );
    assert_eq!(whole_batches(&records).len(), 1);

    // That was the quota's rate over the window: a sessionless fetch of 2,000 bytes more
    // would be above it.
    let full: FetchResponse = call(
        &mut c,
        ApiKey::Fetch,
        12,
        &fetch_request("metered", 0, 2, 1 << 20),
    )
    .await;
    assert!(full.throttle_time_ms > 0, "throttled: {full:?}");
    assert!(full.responses.is_empty(), "nothing sent: {full:?}");
    assert_eq!(full.session_id, 0);

    let mut incremental = fetch_request("metered", 0, 2, 1 << 20);
    incremental.session_id = first.session_id;
    incremental.session_epoch = 1;
    let sent = tokio::time::Instant::now();
    let next: FetchResponse = call(&mut c, ApiKey::Fetch, 12, &incremental).await;
    let waited = sent.elapsed();
    assert!(
        waited + Duration::from_millis(50) >= Duration::from_millis(full.throttle_time_ms as u64),
        "the connection was not read for the pause: {waited:?} of {} ms",
        full.throttle_time_ms
    );
    assert!(next.throttle_time_ms > 0, "still above the rate: {next:?}");
    assert!(next.responses.is_empty());
    assert_eq!(
        next.session_id, first.session_id,
        "the session is kept for an incremental fetch"
    );
    let throttling = &test.broker.metrics().fetch_throttling;
    assert_eq!(
        throttling
            .responses
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    test.shutdown().await;
}

/// A client with a `controller_mutation_rate` may create a burst of partitions (its quota for
/// the 11 s window); then a strict request (CreateTopics v6+) is refused with
/// THROTTLING_QUOTA_EXCEEDED and the time until its quota allows it, changing nothing, while an
/// older version's (DeleteTopics v4) is carried out and throttled for the debt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_above_its_controller_mutation_rate_is_refused_or_throttled() {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{
        CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    };
    let test = start_fs(&[]).await;
    let mut admin = TcpStream::connect(test.addr).await.expect("connect");
    set_quotas(
        &mut admin,
        &[("client-id", Some("test"))],
        &[("controller_mutation_rate", 2.0)],
    )
    .await;
    let create = |name: &str, partitions: i32| {
        let mut topic = CreatableTopic::default();
        topic.name = topic_name(name);
        topic.num_partitions = partitions;
        topic.replication_factor = 1;
        let mut request = CreateTopicsRequest::default();
        request.topics = vec![topic];
        request.timeout_ms = 5000;
        request
    };
    // 22 partitions in the bucket: 20, then 5 more (3 below zero, 1.5 s at 2 a second).
    let r: CreateTopicsResponse =
        call(&mut admin, ApiKey::CreateTopics, 7, &create("burst", 20)).await;
    assert_eq!((r.topics[0].error_code, r.throttle_time_ms), (0, 0));
    let r: CreateTopicsResponse =
        call(&mut admin, ApiKey::CreateTopics, 7, &create("over", 5)).await;
    assert_eq!(
        r.topics[0].error_code, 0,
        "the bucket was not below zero yet"
    );
    assert!(
        (1_400..=1_500).contains(&r.throttle_time_ms),
        "{}",
        r.throttle_time_ms
    );
    // The admin connection is muted for that time; another connection of the client is not.
    let mut other = TcpStream::connect(test.addr).await.expect("connect");
    let r: CreateTopicsResponse =
        call(&mut other, ApiKey::CreateTopics, 6, &create("refused", 1)).await;
    assert_eq!(r.topics[0].error_code, 89, "THROTTLING_QUOTA_EXCEEDED");
    assert_eq!(
        r.topics[0].error_message.as_ref().map(|m| m.to_string()),
        Some("The throttling quota has been exceeded.".to_string())
    );
    assert!(
        (1..=1_500).contains(&r.throttle_time_ms),
        "{}",
        r.throttle_time_ms
    );
    assert!(
        test.broker.image().topic("refused").is_none(),
        "nothing created"
    );
    // DeleteTopics v4 predates the strict quota: the 20 partitions go, and the client is told
    // to wait until its bucket is back to zero (about 11.5 s).
    let mut old = TcpStream::connect(test.addr).await.expect("connect");
    let mut delete = DeleteTopicsRequest::default();
    delete.topic_names = vec![topic_name("burst")];
    delete.timeout_ms = 5000;
    let r: DeleteTopicsResponse = call(&mut old, ApiKey::DeleteTopics, 4, &delete).await;
    assert_eq!(r.responses[0].error_code, 0);
    assert!(
        (10_000..=11_500).contains(&r.throttle_time_ms),
        "{}",
        r.throttle_time_ms
    );
    assert!(test.broker.image().topic("burst").is_none(), "deleted");
    let throttling = &test.broker.metrics().mutation_throttling;
    let responses = throttling
        .responses
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(responses, 3);
    test.shutdown().await;
}

/// A client with a `request_percentage` quota whose requests take more of the broker's time
/// than it allows is throttled: a response carries `throttle_time_ms` (at most a second) and
/// its connection is not read for that time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_above_its_request_quota_is_throttled() {
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    let test = start_fs(&[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    // A hundredth of a percent of one thread: 1 ms of request time in a 10 s window.
    set_quotas(
        &mut c,
        &[("client-id", Some("test"))],
        &[("request_percentage", 0.01)],
    )
    .await;
    let metadata = MetadataRequest::default();
    let mut throttle_ms = 0;
    for _ in 0..100_000 {
        let r: MetadataResponse = call(&mut c, ApiKey::Metadata, 12, &metadata).await;
        throttle_ms = r.throttle_time_ms;
        if throttle_ms > 0 {
            break;
        }
    }
    assert!(
        (1..=1000).contains(&throttle_ms),
        "throttled, for at most a second: {throttle_ms} ms"
    );
    let sent = tokio::time::Instant::now();
    let _: MetadataResponse = call(&mut c, ApiKey::Metadata, 12, &metadata).await;
    assert!(
        sent.elapsed() + Duration::from_millis(50) >= Duration::from_millis(throttle_ms as u64),
        "the connection was not read for the pause: {:?} of {throttle_ms} ms",
        sent.elapsed()
    );
    let throttling = &test.broker.metrics().request_throttling;
    assert!(
        throttling
            .responses
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    test.shutdown().await;
}

/// A partition taking most of what producers append is found hot at the next sample; its
/// appends then run in the bulk lane, in order and readable, while a quiet partition's do
/// not; once the flood stops it is hot no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooded_partition_is_hot_and_appended_in_the_bulk_lane() {
    use std::sync::atomic::Ordering::Relaxed;
    let test = start_fs(&[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "sale", 2, &[]).await, 0);
    // 15 records of 64 KiB: almost a MiB a batch (max.message.bytes is one).
    const RECORDS: i64 = 15;
    let value = vec![b'v'; 64 * 1024];
    let flood = build_batch(
        &[value.as_slice(); RECORDS as usize],
        0,
        ProducerFields::NONE,
    );
    let quiet = || build_batch(&[b"quiet"], 0, ProducerFields::NONE);
    let mut next = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while test.broker.hot_partitions().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the flooded partition was never found hot"
        );
        assert_eq!(
            produce(&mut c, "sale", 0, 1, flood.clone()).await,
            (0, next)
        );
        next += RECORDS;
        assert_eq!(produce(&mut c, "sale", 1, 1, quiet()).await.0, 0);
    }
    let hot = test.broker.hot_partitions();
    assert_eq!(hot.len(), 1, "only the flooded one: {hot:?}");
    assert_eq!((hot[0].topic.as_str(), hot[0].partition), ("sale", 0));
    assert!(hot[0].bytes_per_second >= 1024 * 1024, "{hot:?}");

    // Found hot at the sample just taken, it stays so for a second.
    let lane = &test.broker.metrics().bulk_lane_appends;
    let before = lane.load(Relaxed);
    assert_eq!(
        produce(&mut c, "sale", 0, 1, flood.clone()).await,
        (0, next)
    );
    assert_eq!(lane.load(Relaxed), before + 1, "appended in the bulk lane");
    assert_eq!(produce(&mut c, "sale", 1, 1, quiet()).await.0, 0);
    assert_eq!(
        lane.load(Relaxed),
        before + 1,
        "the quiet partition's was not"
    );
    let (error, records) = fetch_all(&mut c, "sale", 0).await;
    assert_eq!(error, 0);
    let batches = whole_batches(&records);
    assert_eq!(batches.len() as i64, next / RECORDS + 1, "every batch kept");
    assert_eq!(
        find_batch(&records, next).map(|b| b.len()),
        Some(flood.len()),
        "the bulk lane's append reads back whole"
    );

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !test.broker.hot_partitions().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still hot after the flood stopped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    test.shutdown().await;
}
