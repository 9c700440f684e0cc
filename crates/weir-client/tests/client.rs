//! The client against a real broker started in-process on an ephemeral port.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use weir_broker::{Broker, BrokerConfig, BrokerIdentity, ConnectionLimits, PartitionRegistry};
use weir_client::{
    Admin, ClientConfig, ClientError, Compression, Consumer, ConsumerConfig, OffsetSpec, Producer,
    ProducerConfig, ProducerRecord,
};
use weir_controller::{Controller, FileMetadataLog};
use weir_log::SystemClock;
use weir_storage::{FileCache, FsStorage};

struct TestServer {
    address: String,
    stop: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

async fn start() -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = BrokerConfig::from_properties(&BTreeMap::new()).expect("defaults");
    let log = FileMetadataLog::open(Arc::new(FsStorage), &dir.path().join("metadata.log"))
        .expect("metadata log");
    let controller = Arc::new(Controller::open(Box::new(log)).expect("controller"));
    let registry = PartitionRegistry::new(
        dir.path().join("logs"),
        FileCache::new(Arc::new(FsStorage), 64),
        Arc::new(SystemClock),
        config.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let identity = BrokerIdentity {
        node_id: 1,
        cluster_id: "client-test".into(),
        advertised_host: "127.0.0.1".into(),
        advertised_port: port,
    };
    let (stop, stopped) = watch::channel(false);
    let limits = ConnectionLimits::from_config(&config)
        .await
        .expect("limits");
    let broker = Arc::new(Broker::new(config, identity, controller, registry, stopped));
    tokio::spawn(weir_broker::serve(broker, listener, limits));
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
