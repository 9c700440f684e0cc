//! Replicas, leaders and brokers as the metadata has them: a broker serves only the partitions
//! it leads and tells clients where the others are led.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DescribeClusterRequest, DescribeClusterResponse, FetchResponse,
    ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse,
};
use tokio::net::TcpStream;
use weir_broker::partition::Partition;
use weir_log::batch::{build_batch, ProducerFields};
use weir_metadata::BrokerListener;

use crate::common::*;

const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;

/// Registers broker `node_id` at the controller, as that broker would at its start, and waits
/// until the test broker has applied it.
async fn register_other_broker(test: &TestBroker, node_id: i32) {
    let controller = test.controller.clone();
    let listener = BrokerListener {
        name: "PLAINTEXT".into(),
        host: format!("broker-{node_id}.example"),
        port: 9092,
    };
    controller
        .register_broker(node_id, vec![listener], Some("rack-b".into()))
        .await
        .expect("registered");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while test.broker.image().broker(node_id).is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "registration never applied"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

async fn create(c: &mut TcpStream, topic: CreatableTopic) -> (i16, Option<String>) {
    let mut request = CreateTopicsRequest::default();
    request.topics = vec![topic];
    request.timeout_ms = 5000;
    let response: CreateTopicsResponse = call(c, ApiKey::CreateTopics, 7, &request).await;
    let topic = &response.topics[0];
    (
        topic.error_code,
        topic.error_message.as_ref().map(|m| m.to_string()),
    )
}

async fn metadata(c: &mut TcpStream) -> MetadataResponse {
    let mut request = MetadataRequest::default();
    request.topics = None;
    call(c, ApiKey::Metadata, 12, &request).await
}

/// (leader, replicas) of each partition of `topic`, by index.
fn placement(response: &MetadataResponse, topic: &str) -> Vec<(i32, Vec<i32>)> {
    let topic = response
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .expect("topic listed");
    topic
        .partitions
        .iter()
        .map(|p| {
            assert_eq!(p.error_code, 0, "partition {}", p.partition_index);
            assert_eq!(
                p.isr_nodes, p.replica_nodes,
                "every replica of a new partition is in sync"
            );
            (p.leader_id.0, p.replica_nodes.iter().map(|b| b.0).collect())
        })
        .collect()
}

async fn fetch_error(c: &mut TcpStream, topic: &str, partition: i32) -> i16 {
    let request = fetch_request(topic, partition, 0, 1 << 20);
    let response: FetchResponse = call(c, ApiKey::Fetch, 12, &request).await;
    response.responses[0].partitions[0].error_code
}

async fn list_offsets_error(c: &mut TcpStream, topic: &str, partition: i32) -> i16 {
    let mut p = ListOffsetsPartition::default();
    p.partition_index = partition;
    p.timestamp = -1;
    let mut t = ListOffsetsTopic::default();
    t.name = topic_name(topic);
    t.partitions = vec![p];
    let mut request = ListOffsetsRequest::default();
    request.replica_id = BrokerId(-1);
    request.topics = vec![t];
    let response: ListOffsetsResponse = call(c, ApiKey::ListOffsets, 7, &request).await;
    response.topics[0].partitions[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_are_placed_over_registered_brokers_and_served_by_their_leader() {
    let test = start_fs(&[]).await;
    register_other_broker(&test, 2).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");

    let cluster: DescribeClusterResponse = call(
        &mut c,
        ApiKey::DescribeCluster,
        1,
        &DescribeClusterRequest::default(),
    )
    .await;
    let brokers: Vec<(i32, String, Option<String>)> = cluster
        .brokers
        .iter()
        .map(|b| {
            (
                b.broker_id.0,
                b.host.to_string(),
                b.rack.as_ref().map(|r| r.to_string()),
            )
        })
        .collect();
    assert_eq!(
        brokers,
        vec![
            (1, "127.0.0.1".to_string(), None),
            (
                2,
                "broker-2.example".to_string(),
                Some("rack-b".to_string())
            ),
        ]
    );

    let mut topic = CreatableTopic::default();
    topic.name = topic_name("spread");
    topic.num_partitions = 4;
    topic.replication_factor = 2;
    assert_eq!(create(&mut c, topic).await, (0, None));
    let response = metadata(&mut c).await;
    let listed: Vec<i32> = response.brokers.iter().map(|b| b.node_id.0).collect();
    assert_eq!(listed, vec![1, 2]);
    let placed = placement(&response, "spread");
    let mut leaders = BTreeMap::<i32, usize>::new();
    for (leader, replicas) in &placed {
        assert_eq!(replicas.len(), 2);
        assert_eq!(*leader, replicas[0], "the preferred replica leads");
        *leaders.entry(*leader).or_default() += 1;
    }
    assert_eq!(leaders, BTreeMap::from([(1, 2), (2, 2)]), "{placed:?}");

    // This broker holds every replica (two brokers, two replicas) but leads only half.
    for (index, (leader, _)) in (0i32..).zip(&placed) {
        let hosted: std::sync::Arc<Partition> = test
            .broker
            .partitions()
            .get("spread", index)
            .expect("hosted");
        assert_eq!(hosted.is_leader(), *leader == 1);
        let batch = build_batch(&[b"x"], 0, ProducerFields::NONE);
        let (produced, _) = produce(&mut c, "spread", index, 1, batch).await;
        let expected = if *leader == 1 {
            0
        } else {
            NOT_LEADER_OR_FOLLOWER
        };
        assert_eq!(produced, expected, "produce to partition {index}");
        assert_eq!(fetch_error(&mut c, "spread", index).await, expected);
        assert_eq!(list_offsets_error(&mut c, "spread", index).await, expected);
    }

    // A manual assignment is honoured, and checked as Kafka checks it.
    let assignment = |index: i32, brokers: &[i32]| {
        let mut a = CreatableReplicaAssignment::default();
        a.partition_index = index;
        a.broker_ids = brokers.iter().copied().map(BrokerId).collect();
        a
    };
    let mut manual = CreatableTopic::default();
    manual.name = topic_name("manual");
    manual.num_partitions = -1;
    manual.replication_factor = -1;
    manual.assignments = vec![assignment(1, &[1]), assignment(0, &[2])];
    assert_eq!(create(&mut c, manual).await, (0, None));
    assert_eq!(
        placement(&metadata(&mut c).await, "manual"),
        vec![(2, vec![2]), (1, vec![1])]
    );
    assert!(
        test.broker.partitions().get("manual", 0).is_none(),
        "not hosted here"
    );
    let batch = build_batch(&[b"x"], 0, ProducerFields::NONE);
    assert_eq!(
        produce(&mut c, "manual", 0, 1, batch).await.0,
        NOT_LEADER_OR_FOLLOWER
    );
    let mut unknown = CreatableTopic::default();
    unknown.name = topic_name("nowhere");
    unknown.num_partitions = -1;
    unknown.replication_factor = -1;
    unknown.assignments = vec![assignment(0, &[1, 3])];
    let (code, message) = create(&mut c, unknown).await;
    assert_eq!(code, INVALID_REPLICA_ASSIGNMENT);
    assert_eq!(
        message.as_deref(),
        Some(
            "The manual partition assignment includes broker 3, but no such broker is registered."
        )
    );

    let grow = |assignments: Vec<Vec<i32>>| {
        let mut topic = CreatePartitionsTopic::default();
        topic.name = topic_name("spread");
        topic.count = 5;
        topic.assignments = Some(
            assignments
                .into_iter()
                .map(|replicas| {
                    let mut a = CreatePartitionsAssignment::default();
                    a.broker_ids = replicas.into_iter().map(BrokerId).collect();
                    a
                })
                .collect(),
        );
        let mut request = CreatePartitionsRequest::default();
        request.topics = vec![topic];
        request.timeout_ms = 5000;
        request
    };
    let refused: CreatePartitionsResponse =
        call(&mut c, ApiKey::CreatePartitions, 3, &grow(vec![vec![2]])).await;
    assert_eq!(refused.results[0].error_code, INVALID_REPLICA_ASSIGNMENT);
    let grown: CreatePartitionsResponse =
        call(&mut c, ApiKey::CreatePartitions, 3, &grow(vec![vec![2, 1]])).await;
    assert_eq!(grown.results[0].error_code, 0);
    assert_eq!(
        placement(&metadata(&mut c).await, "spread")[4],
        (2, vec![2, 1])
    );
    test.shutdown().await;
}
