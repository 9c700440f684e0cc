//! The client against a real broker started in-process on an ephemeral port.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use weir_broker::{
    connection_limits, BoundListener, Broker, BrokerConfig, BrokerIdentity, PartitionRegistry,
};
use weir_client::{
    Admin, ClientConfig, ClientError, Compression, Consumer, ConsumerConfig, GroupConsumer,
    GroupConsumerConfig, OffsetReset, OffsetSpec, Producer, ProducerConfig, ProducerRecord,
    RebalanceEvent,
};
use weir_controller::{Controller, ControllerSettings, LocalControl, QuorumConfig, RaftQuorum};
use weir_log::SystemClock;
use weir_storage::{FileCache, FsStorage};

struct TestServer {
    address: String,
    stop: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

async fn start() -> TestServer {
    start_with(&[]).await
}

/// A server with broker properties over the defaults.
async fn start_with(properties: &[(&str, &str)]) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let properties: BTreeMap<String, String> = properties
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = BrokerConfig::from_properties(&properties).expect("config");
    let quorum_config = QuorumConfig {
        node_id: 1,
        voters: BTreeMap::from([(1, "127.0.0.1:1".to_string())]),
        dir: dir.path().join("quorum"),
        tls: None,
    };
    let quorum = RaftQuorum::open(Arc::new(FsStorage), quorum_config, None)
        .await
        .expect("metadata quorum");
    let controller = Arc::new(Controller::new(
        Arc::new(quorum),
        ControllerSettings::default(),
    ));
    let registry = PartitionRegistry::new(
        dir.path().join("logs"),
        FileCache::new(Arc::new(FsStorage), 64),
        Arc::new(SystemClock),
        config.clone(),
        1,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let identity = BrokerIdentity::plaintext(1, "client-test", "127.0.0.1", port);
    let (stop, stopped) = watch::channel(false);
    let limits = connection_limits(&config).await.expect("limits");
    let control = Arc::new(LocalControl::new(controller));
    let broker = Broker::new(config, identity, control, registry, stopped);
    broker.join_cluster().await.expect("registered");
    tokio::spawn(weir_broker::serve(
        broker.clone(),
        vec![BoundListener::plaintext(listener)],
        limits,
    ));
    tokio::spawn(broker.run_coordinators());
    TestServer {
        address: format!("127.0.0.1:{port}"),
        stop,
        _dir: dir,
    }
}

async fn read_all(
    address: &str,
    topic: &str,
    partitions: i32,
    expected: usize,
) -> Vec<weir_client::ConsumerRecord> {
    let mut consumer = Consumer::new(ConsumerConfig::new(address));
    for p in 0..partitions {
        consumer
            .assign(topic, p, OffsetSpec::Earliest)
            .await
            .expect("assign");
    }
    let mut records = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while records.len() < expected && tokio::time::Instant::now() < deadline {
        records.extend(
            consumer
                .poll(Duration::from_millis(500))
                .await
                .expect("poll"),
        );
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_with_every_codec() {
    let server = start().await;
    let admin = Admin::new(ClientConfig::new(&server.address));
    for (i, codec) in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ]
    .into_iter()
    .enumerate()
    {
        let topic = format!("codec-{i}");
        admin.create_topic(&topic, 3, 1, &[]).await.expect("create");
        let mut config = ProducerConfig::new(&server.address);
        config.compression = codec;
        let producer = Producer::new(config);
        let mut deliveries = Vec::new();
        for n in 0..500 {
            let record = ProducerRecord::new(topic.clone(), format!("value-{n}"))
                .key(format!("key-{}", n % 17))
                .header("n", n.to_string());
            deliveries.push(producer.send(record).await.expect("send"));
        }
        let mut landed = Vec::new();
        for delivery in deliveries {
            landed.push(delivery.await.expect("delivered"));
        }
        producer.close().await.expect("close");
        let records = read_all(&server.address, &topic, 3, 500).await;
        assert_eq!(records.len(), 500, "{codec:?}");
        for (n, meta) in landed.iter().enumerate() {
            let key = format!("key-{}", n % 17);
            assert_eq!(
                meta.partition,
                weir_client::partitioner::partition_for_key(key.as_bytes(), 3),
                "murmur2 placement"
            );
            let record = records
                .iter()
                .find(|r| r.partition == meta.partition && r.offset == meta.offset)
                .expect("record at its acknowledged offset");
            assert_eq!(
                record.value.as_deref(),
                Some(format!("value-{n}").as_bytes()),
                "{codec:?}"
            );
            assert_eq!(record.key.as_deref(), Some(key.as_bytes()));
            assert_eq!(
                record.headers,
                vec![("n".to_string(), Some(bytes::Bytes::from(n.to_string())))]
            );
        }
    }
    server.stop.send_replace(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_offsets_and_errors() {
    let server = start().await;
    let admin = Admin::new(ClientConfig::new(&server.address));
    admin
        .create_topic("adm", 2, 1, &[("retention.ms", "3600000")])
        .await
        .expect("create");
    let duplicate = admin
        .create_topic("adm", 2, 1, &[])
        .await
        .expect_err("duplicate");
    assert_eq!(duplicate.code(), Some(36));
    assert!(admin
        .list_topics()
        .await
        .expect("list")
        .contains(&"adm".to_string()));
    admin.add_partitions("adm", 4).await.expect("grow");
    assert_eq!(
        admin
            .describe_topic("adm")
            .await
            .expect("describe")
            .info
            .partitions
            .len(),
        4
    );
    let set = BTreeMap::from([("retention.bytes".to_string(), "1000000".to_string())]);
    admin
        .alter_configs("adm", &set, &["retention.ms".to_string()])
        .await
        .expect("alter");
    let configs = admin.describe_configs("adm").await.expect("configs");
    let get = |name: &str| {
        configs
            .iter()
            .find(|c| c.name == name)
            .cloned()
            .expect("listed")
    };
    assert_eq!(
        (
            get("retention.bytes").value.as_deref(),
            get("retention.bytes").source
        ),
        (Some("1000000"), "TOPIC_CONFIG")
    );
    assert_eq!(get("retention.ms").source, "DEFAULT_CONFIG");

    let producer = Producer::new(ProducerConfig::new(&server.address));
    for (n, timestamp) in [1000i64, 2000, 3000].into_iter().enumerate() {
        let mut record = ProducerRecord::new("adm", format!("t{n}"));
        record.partition = Some(0);
        record.timestamp = Some(timestamp);
        let landed = producer
            .send(record)
            .await
            .expect("send")
            .await
            .expect("delivered");
        assert_eq!(
            landed.offset, n as i64,
            "each send is a new record, not a duplicate"
        );
    }
    assert_eq!(
        admin
            .list_offset("adm", 0, OffsetSpec::Timestamp(1500))
            .await
            .expect("by time"),
        Some(1)
    );
    assert_eq!(
        admin
            .list_offset("adm", 0, OffsetSpec::Latest)
            .await
            .expect("latest"),
        Some(3)
    );
    assert_eq!(
        admin
            .list_offset("adm", 0, OffsetSpec::Timestamp(9999))
            .await
            .expect("after all"),
        None
    );
    let mut consumer = Consumer::new(ConsumerConfig::new(&server.address));
    assert_eq!(
        consumer
            .assign("adm", 0, OffsetSpec::Timestamp(2000))
            .await
            .expect("assign"),
        1
    );
    let status = admin.cluster_status().await.expect("status");
    assert_eq!(
        (
            status.cluster_id.as_str(),
            status.brokers.len(),
            status.partitions
        ),
        ("client-test", 1, 4)
    );

    assert!(matches!(
        admin.delete_topic("nosuch").await,
        Err(ClientError::UnknownTopic(_))
    ));
    admin.delete_topic("adm").await.expect("delete");
    let unreachable = Admin::new(ClientConfig::new("127.0.0.1:1"))
        .list_topics()
        .await
        .expect_err("nobody there");
    assert!(
        matches!(unreachable, ClientError::Unreachable(_)),
        "{unreachable}"
    );
    server.stop.send_replace(true);
}

/// What one group member saw: records read and its assignment after each rebalance.
#[derive(Default)]
struct MemberLog {
    records: Vec<(i32, i64)>,
    assignments: Vec<Vec<(String, i32)>>,
}

/// Runs a group member until `stop`, polling and recording what it reads and owns.
fn run_member(
    config: GroupConsumerConfig,
    topic: &'static str,
    log: Arc<std::sync::Mutex<MemberLog>>,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let events = log.clone();
        let listener = Box::new(move |event: &RebalanceEvent| {
            if let RebalanceEvent::Assigned(_) | RebalanceEvent::Revoked(_) = event {
                events.lock().expect("log").assignments.push(Vec::new());
            }
        });
        let mut consumer = GroupConsumer::subscribe_with(config, &[topic], Some(listener))
            .await
            .expect("subscribe");
        while !*stop.borrow() {
            let records = consumer
                .poll(Duration::from_millis(100))
                .await
                .expect("poll");
            let mut log = log.lock().expect("log");
            log.records
                .extend(records.iter().map(|r| (r.partition, r.offset)));
            let now = consumer.assignment();
            if log.assignments.last() != Some(&now) {
                log.assignments.push(now);
            }
        }
        consumer.commit().await.expect("final commit");
        consumer.close().await.expect("close");
    })
}

fn owned(log: &std::sync::Mutex<MemberLog>) -> Vec<(String, i32)> {
    log.lock()
        .expect("log")
        .assignments
        .last()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_members_share_partitions_incrementally_and_resume_from_commits() {
    let server = start_with(&[
        ("group.initial.rebalance.delay.ms", "0"),
        ("group.min.session.timeout.ms", "1000"),
        ("offsets.topic.num.partitions", "3"),
    ])
    .await;
    let admin = Admin::new(ClientConfig::new(&server.address));
    admin
        .create_topic("shared", 6, 1, &[])
        .await
        .expect("create");
    let producer = Producer::new(ProducerConfig::new(&server.address));
    let mut deliveries = Vec::new();
    for n in 0..600 {
        let record = ProducerRecord::new("shared", format!("v{n}")).key(format!("k{n}"));
        deliveries.push(producer.send(record).await.expect("send"));
    }
    for delivery in deliveries {
        delivery.await.expect("delivered");
    }
    let member_config = || {
        let mut config = GroupConsumerConfig::new(&server.address, "sharing");
        config.auto_offset_reset = OffsetSpec::Earliest;
        config.heartbeat_interval = Duration::from_millis(100);
        config.session_timeout = Duration::from_secs(3);
        config.rebalance_timeout = Duration::from_secs(10);
        config
    };
    let balanced = |logs: &[&Arc<std::sync::Mutex<MemberLog>>]| {
        let owned: Vec<Vec<(String, i32)>> = logs.iter().map(|l| owned(l)).collect();
        let mut all: Vec<(String, i32)> = owned.iter().flatten().cloned().collect();
        all.sort();
        let each = 6 / logs.len();
        all == (0..6)
            .map(|p| ("shared".to_string(), p))
            .collect::<Vec<_>>()
            && owned.iter().all(|o| o.len() == each)
    };
    let wait_for = |what: &'static str, ok: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let (stop_a, stopped_a) = watch::channel(false);
    let (stop_b, stopped_b) = watch::channel(false);
    let a = Arc::new(std::sync::Mutex::new(MemberLog::default()));
    let b = Arc::new(std::sync::Mutex::new(MemberLog::default()));
    let task_a = run_member(member_config(), "shared", a.clone(), stopped_a);
    tokio::task::block_in_place(|| wait_for("a to own all six", &|| balanced(&[&a])));
    let task_b = run_member(member_config(), "shared", b.clone(), stopped_b);
    tokio::task::block_in_place(|| wait_for("a and b to own three each", &|| balanced(&[&a, &b])));
    let a_then = owned(&a);
    // Cooperative: a never gave up the partitions it kept.
    for assignment in a
        .lock()
        .expect("log")
        .assignments
        .iter()
        .filter(|x| !x.is_empty())
    {
        assert!(
            a_then.iter().all(|tp| assignment.contains(tp)),
            "a lost {assignment:?} mid-way"
        );
    }
    tokio::task::block_in_place(|| {
        wait_for("all 600 records read", &|| {
            a.lock().expect("log").records.len() + b.lock().expect("log").records.len() >= 600
        })
    });
    stop_b.send_replace(true);
    task_b.await.expect("b");
    tokio::task::block_in_place(|| wait_for("a to own all six again", &|| balanced(&[&a])));
    stop_a.send_replace(true);
    task_a.await.expect("a");
    let mut read: Vec<(i32, i64)> = a.lock().expect("log").records.clone();
    read.extend(b.lock().expect("log").records.iter());
    read.sort();
    read.dedup();
    assert_eq!(read.len(), 600, "every record read");

    let described = admin.describe_group("sharing").await.expect("describe");
    assert_eq!(described.state, "Empty");
    assert_eq!(
        described
            .partitions
            .iter()
            .map(|p| p.lag)
            .collect::<Vec<_>>(),
        vec![Some(0); 6]
    );
    // A new member starts at the committed offsets: nothing is read again.
    let mut again = GroupConsumer::subscribe(member_config(), &["shared"])
        .await
        .expect("subscribe");
    assert!(again
        .poll(Duration::from_millis(500))
        .await
        .expect("poll")
        .is_empty());
    again.close().await.expect("close");
    let changes = admin
        .reset_offsets("sharing", "shared", OffsetReset::ShiftBy(-10), false)
        .await
        .expect("reset");
    assert!(changes
        .iter()
        .all(|c| c.current.map(|o| o - 10).map(|o| o.max(0)) == Some(c.new)));
    let described = admin.describe_group("sharing").await.expect("describe");
    let lag: i64 = described.partitions.iter().filter_map(|p| p.lag).sum();
    assert_eq!(
        lag,
        changes
            .iter()
            .map(|c| c.current.unwrap_or(0) - c.new)
            .sum::<i64>()
    );
    admin.delete_group("sharing").await.expect("delete");
    assert!(admin
        .list_groups()
        .await
        .expect("list")
        .iter()
        .all(|g| g.group_id != "sharing"));
    server.stop.send_replace(true);
}
