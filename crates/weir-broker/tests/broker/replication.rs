//! Replication between brokers in one process, over loopback, sharing one controller: each
//! broker reaches the controller through a link the test can cut, as a network partition
//! would. Followers copy the leader, a crashed leader is replaced by an in-sync replica without
//! losing an acknowledged write, a divergent old leader truncates to the new leader's log, and
//! a leader cut off from the controller stops acknowledging `acks=all` writes once it is
//! replaced, and a write whose ISR shrinks below `min.insync.replicas` is not acknowledged,
//! nor one its leader truncated on losing its place, whatever high watermark it then follows.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::BrokerId;
use tokio::net::TcpStream;
use tokio::sync::watch;
use weir_broker::{
    connection_limits, BoundListener, Broker, BrokerConfig, BrokerIdentity, PartitionRegistry,
};
use weir_controller::{Controller, LocalControl};
use weir_log::batch::{build_batch, ProducerFields};
use weir_log::SystemClock;
use weir_metadata::requests::{
    AlterPartitionReassignments, ControlRequest, ElectLeaders, EncodedAnswer,
};
use weir_metadata::{
    ControllerError, ElectionType, MetadataControl, MetadataImage, PartitionImage, Pending,
    Reassignment,
};
use weir_storage::FileCache;

use crate::common::*;

/// A short lease (`broker.session.timeout.ms`, which the test controller grants too), so
/// failovers take a second or two.
const BROKER_PROPERTIES: &[(&str, &str)] = &[
    ("broker.heartbeat.interval.ms", "100"),
    ("broker.session.timeout.ms", "1500"),
    ("replica.lag.time.max.ms", "2000"),
];

/// The controller as one broker reaches it, through a link that can be cut: while cut, every
/// request fails as if the controller were unreachable and no new image arrives.
struct Link {
    inner: LocalControl,
    cut: Arc<AtomicBool>,
    images: watch::Receiver<Arc<MetadataImage>>,
}

impl Link {
    fn new(controller: Arc<Controller>) -> (Link, Arc<AtomicBool>) {
        let inner = LocalControl::new(controller);
        let cut = Arc::new(AtomicBool::new(false));
        let mut upstream = inner.images();
        let (sender, images) = watch::channel(upstream.borrow().clone());
        let cut_flag = cut.clone();
        tokio::spawn(async move {
            while upstream.changed().await.is_ok() {
                while cut_flag.load(Ordering::Acquire) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                let image = upstream.borrow_and_update().clone();
                if sender.send(image).is_err() {
                    return;
                }
            }
        });
        let link = Link {
            inner,
            cut: cut.clone(),
            images,
        };
        (link, cut)
    }

    fn pass<T: Send + 'static>(&self, pending: Pending<T>) -> Pending<T> {
        match self.cut.load(Ordering::Acquire) {
            true => Box::pin(async { Err(ControllerError::NotController("link cut".into())) }),
            false => pending,
        }
    }
}

impl MetadataControl for Link {
    fn decide(&self, request: ControlRequest) -> Pending<EncodedAnswer> {
        self.pass(self.inner.decide(request))
    }
    fn images(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.images.clone()
    }
}

/// One broker of the test cluster.
struct Member {
    broker: Arc<Broker>,
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    cut: Arc<AtomicBool>,
}

impl Member {
    /// Starts broker `node_id` over `root`, reaching `controller` through its own link.
    async fn start(controller: Arc<Controller>, node_id: i32, root: &Path) -> Member {
        let properties: BTreeMap<String, String> = BROKER_PROPERTIES
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let config = BrokerConfig::from_properties(&properties).expect("config");
        let registry = PartitionRegistry::new(
            root.join("logs"),
            FileCache::new(Arc::new(weir_storage::FsStorage), CACHED_FILES),
            Arc::new(SystemClock),
            config.clone(),
            node_id,
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let identity = BrokerIdentity::plaintext(node_id, "test-cluster", "127.0.0.1", addr.port());
        let (stop, stopped) = watch::channel(false);
        let limits = connection_limits(&config).await.expect("limits");
        let (link, cut) = Link::new(controller);
        let broker = tokio::task::block_in_place(|| {
            Broker::new(config, identity, Arc::new(link), registry, stopped)
        });
        broker.join_cluster().await.expect("joined");
        tokio::spawn(weir_broker::serve(
            broker.clone(),
            vec![BoundListener::plaintext(listener)],
            limits,
        ));
        tokio::spawn(broker.clone().run_isr_checks());
        Member {
            broker,
            addr,
            stop,
            cut,
        }
    }

    /// Stops serving, heartbeating and fetching at once, as a crash would (the logs stay as
    /// they are; nothing is closed cleanly).
    fn crash(&self) {
        self.stop.send_replace(true);
    }

    fn leads(&self, topic: &str) -> bool {
        self.broker
            .partitions()
            .get(topic, 0)
            .is_some_and(|p| p.is_leader())
    }

    fn log_end(&self, topic: &str) -> i64 {
        self.broker
            .partitions()
            .get(topic, 0)
            .map_or(-1, |p| p.log().log_end_offset())
    }
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn partition(controller: &Controller, topic: &str) -> PartitionImage {
    controller.image().topic(topic).expect("topic").partitions[0].clone()
}

/// A three-broker cluster: broker 1 owns the controller, 2 and 3 join it.
async fn cluster() -> (TestBroker, Vec<Member>, Vec<tempfile::TempDir>) {
    // The controller grants the lease of BROKER_PROPERTIES' broker.session.timeout.ms.
    let first = start_fs(BROKER_PROPERTIES).await;
    let _leases = first.controller.watch_leases();
    let mut members = Vec::new();
    let mut dirs = Vec::new();
    for node_id in [2, 3] {
        let dir = tempfile::tempdir().expect("tempdir");
        members.push(Member::start(first.controller.clone(), node_id, dir.path()).await);
        dirs.push(dir);
    }
    (first, members, dirs)
}

/// A one-partition topic on `replicas` (the first leads), min.insync.replicas 2.
async fn create_replicated(first: &TestBroker, topic: &str, replicas: &[i32]) {
    let mut assignment = CreatableReplicaAssignment::default();
    assignment.partition_index = 0;
    assignment.broker_ids = replicas.iter().copied().map(BrokerId).collect();
    let mut creatable = CreatableTopic::default();
    creatable.name = topic_name(topic);
    creatable.num_partitions = -1;
    creatable.replication_factor = -1;
    creatable.assignments = vec![assignment];
    let mut config =
        kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default();
    config.name = "min.insync.replicas".into();
    config.value = Some("2".into());
    creatable.configs = vec![config];
    let mut request = kafka_protocol::messages::CreateTopicsRequest::default();
    request.topics = vec![creatable];
    request.timeout_ms = 5000;
    let mut c = TcpStream::connect(first.addr).await.expect("connect");
    let response: kafka_protocol::messages::CreateTopicsResponse = call(
        &mut c,
        kafka_protocol::messages::ApiKey::CreateTopics,
        7,
        &request,
    )
    .await;
    assert_eq!(response.topics[0].error_code, 0, "{response:?}");
}

fn batch(value: &[u8]) -> Vec<u8> {
    build_batch(&[value], 0, ProducerFields::NONE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_is_replaced_and_its_divergent_tail_truncated() {
    let (first, mut members, dirs) = cluster().await;
    let controller = first.controller.clone();
    create_replicated(&first, "r", &[2, 3, 1]).await;
    eventually("a full ISR", || partition(&controller, "r").isr.len() == 3).await;
    eventually("broker 2 leads", || members[0].leads("r")).await;

    // acks=all: answered once all three have it.
    let mut to_leader = TcpStream::connect(members[0].addr).await.expect("connect");
    for i in 0..5u8 {
        let (error, offset) = produce(&mut to_leader, "r", 0, -1, batch(&[i])).await;
        assert_eq!((error, offset), (0, i64::from(i)));
    }
    let follower_end = |first: &TestBroker| {
        first
            .broker
            .partitions()
            .get("r", 0)
            .map_or(-1, |p| p.log().log_end_offset())
    };
    eventually("followers caught up", || {
        follower_end(&first) == 5 && members[1].log_end("r") == 5
    })
    .await;

    // The leader crashes. Still believing it leads at epoch 0 (it applies no image any more),
    // it takes a write after the others have moved on: a tail no other replica has.
    members[0].crash();
    eventually("a new leader from the ISR", || {
        let p = partition(&controller, "r");
        p.leader == 3 && p.leader_epoch == 1 && !p.isr.contains(&2)
    })
    .await;
    eventually("the others follow the new leader", || {
        [&first.broker, &members[1].broker]
            .iter()
            .all(|b| b.image().topic("r").expect("topic").partitions[0].leader == 3)
    })
    .await;
    let stale = members[0].broker.partitions().get("r", 0).expect("hosted");
    let valid = weir_log::validate(batch(b"lost").into(), &limits()).expect("valid");
    stale.append(&valid).expect("appended");
    assert_eq!(stale.log().log_end_offset(), 6);
    let mut to_new = TcpStream::connect(members[1].addr).await.expect("connect");
    let mut produced = (0, -1);
    for _ in 0..100 {
        produced = produce(&mut to_new, "r", 0, -1, batch(b"after")).await;
        if produced.0 == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        produced,
        (0, 5),
        "the first write after the failover follows the acknowledged ones"
    );

    // The old leader comes back: it truncates its unreplicated tail, copies the new leader
    // and rejoins the ISR.
    stale.close();
    drop(stale);
    let old = members.remove(0);
    drop(old);
    members.insert(
        0,
        Member::start(controller.clone(), 2, dirs[0].path()).await,
    );
    eventually("the old leader back in sync", || {
        partition(&controller, "r").isr.len() == 3 && members[0].log_end("r") == 6
    })
    .await;
    let back = members[0].broker.partitions().get("r", 0).expect("hosted");
    let leader = members[1].broker.partitions().get("r", 0).expect("hosted");
    assert_eq!(
        back.log().end_offset_for_epoch(0),
        Some((0, 5)),
        "epoch 0 ends where the new leader's began"
    );
    assert_eq!(back.log().last_fetched_epoch(), 1);
    assert_eq!(leader.log().end_offset_for_epoch(0), Some((0, 5)));
    for m in &members {
        m.crash();
    }
    first.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_controller_stops_acknowledging_acks_all() {
    let (first, members, _dirs) = cluster().await;
    let controller = first.controller.clone();
    create_replicated(&first, "cut", &[2, 3, 1]).await;
    eventually("a full ISR", || {
        partition(&controller, "cut").isr.len() == 3
    })
    .await;
    eventually("broker 2 leads", || members[0].leads("cut")).await;
    let mut to_leader = TcpStream::connect(members[0].addr).await.expect("connect");
    assert_eq!(
        produce(&mut to_leader, "cut", 0, -1, batch(b"a")).await,
        (0, 0)
    );

    // Cut off from the controller, the leader keeps its clients but loses its lease: the
    // controller elects another leader, the followers go there, and the old one, still
    // believing it leads, can no longer get a write acknowledged by the ISR.
    members[0].cut.store(true, Ordering::Release);
    eventually("another leader", || {
        partition(&controller, "cut").leader != 2
    })
    .await;
    let new_leader = partition(&controller, "cut").leader;
    let hosted = |node_id: i32| {
        let broker = members
            .iter()
            .find(|m| m.broker.node_id() == node_id)
            .map_or(&first.broker, |m| &m.broker);
        broker.partitions().get("cut", 0).expect("hosted")
    };
    eventually("the new leader leads", || hosted(new_leader).is_leader()).await;
    let (error, _) = produce(&mut to_leader, "cut", 0, -1, batch(b"b")).await;
    assert_ne!(
        error, 0,
        "an isolated leader acknowledged an acks=all write"
    );
    let member = members.iter().find(|m| m.broker.node_id() == new_leader);
    let addr = member.map_or(first.addr, |m| m.addr);
    let mut to_new = TcpStream::connect(addr).await.expect("connect");
    let mut produced = (0, -1);
    for _ in 0..100 {
        produced = produce(&mut to_new, "cut", 0, -1, batch(b"c")).await;
        if produced.0 == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        produced,
        (0, 1),
        "the new leader continues after the acknowledged write"
    );

    // Healed, the old leader learns it was replaced and follows.
    members[0].cut.store(false, Ordering::Release);
    eventually("the old leader follows", || {
        !members[0]
            .broker
            .partitions()
            .get("cut", 0)
            .expect("hosted")
            .is_leader()
    })
    .await;
    for m in &members {
        m.crash();
    }
    first.shutdown().await;
}

/// An `acks=all` write waiting for a follower that crashes is not acknowledged once the ISR
/// shrinks below `min.insync.replicas`: the high watermark passes it, but it is on one replica
/// of the two the producer asked for, so it is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND, as in
/// Kafka (it was answered as written), and the next write is refused before it is appended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_isr_shrinks_below_min_isr_is_not_acknowledged() {
    const NOT_ENOUGH_REPLICAS: i16 = 19;
    const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
    let (first, members, _dirs) = cluster().await;
    let controller = first.controller.clone();
    create_replicated(&first, "shrinks", &[1, 2]).await;
    eventually("a full ISR", || {
        partition(&controller, "shrinks").isr.len() == 2
    })
    .await;
    let leader = first.broker.partitions().get("shrinks", 0).expect("hosted");
    eventually("broker 1 leads", || leader.is_leader()).await;
    let mut client = TcpStream::connect(first.addr).await.expect("connect");
    assert_eq!(
        produce(&mut client, "shrinks", 0, -1, batch(b"on-both")).await,
        (0, 0)
    );

    // The follower stops (its fetch in flight dropped) well before its session ends, so the
    // write waits for it until the controller fences it and takes it out of the ISR.
    members[0].crash();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        produce(&mut client, "shrinks", 0, -1, batch(b"on-one")).await,
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND, -1),
        "a write on fewer replicas than min.insync.replicas was acknowledged"
    );
    assert_eq!(partition(&controller, "shrinks").isr, vec![1]);
    assert_eq!(leader.log().log_end_offset(), 2, "the write is in the log");
    assert_eq!(
        produce(&mut client, "shrinks", 0, -1, batch(b"refused"))
            .await
            .0,
        NOT_ENOUGH_REPLICAS
    );
    for m in &members {
        m.crash();
    }
    first.shutdown().await;
}

/// An offset commit is held to `min.insync.replicas` as an `acks=all` write is: a commit
/// waiting for a follower that crashes is answered COORDINATOR_NOT_AVAILABLE once the ISR of
/// its `__consumer_offsets` partition shrinks below it (the client retries it), not as
/// committed, and the next commit is refused before it is appended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_commit_whose_isr_shrinks_below_min_isr_is_not_acknowledged() {
    const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    let (first, members, _dirs) = cluster().await;
    let controller = first.controller.clone();
    // One partition, so every group lives on it, led by broker 1 with broker 2 in sync.
    create_replicated(&first, "__consumer_offsets", &[1, 2]).await;
    create_replicated(&first, "t", &[1, 2]).await;
    eventually("a full ISR", || {
        partition(&controller, "__consumer_offsets").isr.len() == 2
    })
    .await;
    let offsets = first
        .broker
        .partitions()
        .get("__consumer_offsets", 0)
        .expect("hosted");
    eventually("broker 1 leads", || offsets.is_leader()).await;
    let mut client = TcpStream::connect(first.addr).await.expect("connect");
    assert_eq!(commit_offset(&mut client, "g", "t", 1, 8).await, 0);
    let written = offsets.log().log_end_offset();

    members[0].crash();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        commit_offset(&mut client, "g", "t", 2, 8).await,
        COORDINATOR_NOT_AVAILABLE,
        "a commit on fewer replicas than min.insync.replicas was acknowledged"
    );
    assert_eq!(partition(&controller, "__consumer_offsets").isr, vec![1]);
    let after_refusal = offsets.log().log_end_offset();
    assert!(after_refusal > written, "the refused commit is in the log");
    assert_eq!(
        commit_offset(&mut client, "g", "t", 3, 8).await,
        COORDINATOR_NOT_AVAILABLE
    );
    assert_eq!(
        offsets.log().log_end_offset(),
        after_refusal,
        "a commit was appended with too few replicas in sync"
    );
    for m in &members {
        m.crash();
    }
    first.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reassignment_copies_then_switches_and_the_old_replica_is_deleted() {
    let (first, members, _dirs) = cluster().await;
    let controller = first.controller.clone();
    // On brokers 1 and 2, led by 2; then moved to 2 and 3 while acks=all writes go on.
    create_replicated(&first, "move", &[2, 1]).await;
    eventually("a full ISR", || {
        partition(&controller, "move").isr.len() == 2
    })
    .await;
    eventually("broker 2 leads", || members[0].leads("move")).await;
    let mut to_leader = TcpStream::connect(members[0].addr).await.expect("connect");
    for i in 0..20u8 {
        assert_eq!(
            produce(&mut to_leader, "move", 0, -1, batch(&[i])).await,
            (0, i64::from(i))
        );
    }
    let old_dir = first
        .broker
        .partitions()
        .get("move", 0)
        .expect("hosted")
        .dir
        .clone();
    let outcomes = first
        .broker
        .change_metadata(first.broker.controller().ask(AlterPartitionReassignments {
            reassignments: vec![Reassignment {
                topic: "move".into(),
                partition: 0,
                target: Some(vec![3, 2]),
            }],
            allow_replication_factor_change: false,
        }))
        .await
        .expect("accepted");
    assert_eq!(outcomes[0].refusal, None);
    for i in 20..40u8 {
        // A slow machine can have the ISR shrink for a moment (NOT_ENOUGH_REPLICAS: nothing
        // was appended), as a producer would see; the write is retried then.
        let mut written = (19, -1);
        for _ in 0..100 {
            written = produce(&mut to_leader, "move", 0, -1, batch(&[i])).await;
            if written.0 != 19 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            written,
            (0, i64::from(i)),
            "writes go on while the replica is copied"
        );
    }
    eventually("the move completes", || {
        let p = partition(&controller, "move");
        p.replicas == vec![3, 2] && !p.reassigning() && p.isr.len() == 2
    })
    .await;
    eventually("broker 3 holds every record", || {
        members[1].log_end("move") == 40
    })
    .await;
    eventually("broker 1 deleted its replica", || {
        first.broker.partitions().get("move", 0).is_none() && !old_dir.exists()
    })
    .await;
    // The preferred replica (3) is in sync: a preferred election moves leadership to it.
    let elected = first
        .broker
        .change_metadata(first.broker.controller().ask(ElectLeaders {
            election: ElectionType::Preferred,
            partitions: Some(vec![("move".into(), 0)]),
        }))
        .await
        .expect("decided");
    assert_eq!(elected[0].refusal, None);
    eventually("broker 3 leads", || members[1].leads("move")).await;
    let mut to_new = TcpStream::connect(members[1].addr).await.expect("connect");
    assert_eq!(
        produce(&mut to_new, "move", 0, -1, batch(b"next")).await,
        (0, 40)
    );
    for m in &members {
        m.crash();
    }
    first.shutdown().await;
}

/// The broker coordinating `transactional_id`, asked through `c`: its node id and address.
async fn transaction_coordinator(c: &mut TcpStream, transactional_id: &str) -> (i32, SocketAddr) {
    use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
    for _ in 0..200 {
        let mut find = FindCoordinatorRequest::default();
        find.key = transactional_id.to_string().into();
        find.key_type = 1;
        let found: FindCoordinatorResponse = call(
            c,
            kafka_protocol::messages::ApiKey::FindCoordinator,
            3,
            &find,
        )
        .await;
        if found.error_code == 0 {
            let address = format!("{}:{}", found.host.as_str(), found.port);
            return (found.node_id.0, address.parse().expect("address"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no coordinator for {transactional_id}");
}

/// Moves the leadership of `topic`-`partition` to `order[0]`: its replicas put in `order`,
/// then a preferred election.
async fn lead_from(first: &TestBroker, topic: &str, partition: i32, order: Vec<i32>) {
    let leader = order[0];
    let outcomes = first
        .broker
        .change_metadata(first.broker.controller().ask(AlterPartitionReassignments {
            reassignments: vec![Reassignment {
                topic: topic.into(),
                partition,
                target: Some(order),
            }],
            allow_replication_factor_change: false,
        }))
        .await
        .expect("reordered");
    assert_eq!(outcomes[0].refusal, None);
    let elected = first
        .broker
        .change_metadata(first.broker.controller().ask(ElectLeaders {
            election: ElectionType::Preferred,
            partitions: Some(vec![(topic.into(), partition)]),
        }))
        .await
        .expect("decided");
    assert_eq!(elected[0].refusal, None);
    let controller = first.controller.clone();
    eventually("the new leader", || {
        controller
            .image()
            .topic(topic)
            .and_then(|t| t.partition(partition))
            .is_some_and(|p| p.leader == leader)
    })
    .await;
}

/// Adds `good`-0 to the transaction of `z`'s `producer` at its coordinator, then writes the
/// record of `sequence` there through the partition's leader.
async fn write_in_transaction(
    to_coordinator: &mut TcpStream,
    to_leader: &mut TcpStream,
    (producer_id, epoch): (i64, i16),
    sequence: i32,
) {
    use crate::transactions::produce_txn;
    let added = add_partition_to_txn(to_coordinator, 3, "z", producer_id, epoch).await;
    assert_eq!(
        added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );
    let written = produce_txn(to_leader, 9, Some("z"), (producer_id, epoch, sequence), 0).await;
    assert_eq!(written, 0);
}

/// Commits the transaction of `z`'s `producer` and waits until its markers are written.
async fn commit_transaction(to_coordinator: &mut TcpStream, (producer_id, epoch): (i64, i16)) {
    use crate::transactions::{await_state, id};
    use kafka_protocol::messages::{ApiKey, EndTxnRequest, EndTxnResponse, ProducerId};
    let mut end = EndTxnRequest::default();
    end.transactional_id = id("z");
    end.producer_id = ProducerId(producer_id);
    end.producer_epoch = epoch;
    end.committed = true;
    let ended: EndTxnResponse = call(to_coordinator, ApiKey::EndTxn, 3, &end).await;
    assert_eq!(ended.error_code, 0);
    await_state(to_coordinator, "z", "CompleteCommit").await;
}

/// A transaction coordinator's markers carry its coordinator epoch, the leader epoch of its
/// `__transaction_state` partition when it took the partition over: after the partition's
/// leadership went to another broker and came back, the marker of a committed transaction
/// carries the new epoch (DescribeProducers shows it), and a marker of an older coordinator
/// epoch, as a coordinator that lost the partition would send, is refused with
/// TRANSACTION_COORDINATOR_FENCED without ending the producer's next transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_carry_the_coordinator_epoch_and_an_older_coordinators_are_fenced() {
    use crate::transactions::stable_and_high;
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::write_txn_markers_request::{
        WritableTxnMarker, WritableTxnMarkerTopic,
    };
    use kafka_protocol::messages::*;
    const TRANSACTION_COORDINATOR_FENCED: i16 = 52;
    let (first, members, _dirs) = cluster().await;
    let controller = first.controller.clone();
    create_replicated(&first, "good", &[1, 2, 3]).await;
    eventually("a full ISR", || {
        partition(&controller, "good").isr.len() == 3
    })
    .await;
    let mut to_leader = TcpStream::connect(first.addr).await.expect("connect");
    let (coordinator, _) = transaction_coordinator(&mut to_leader, "z").await;
    let index = weir_coordinator::partition_for("z", 50);
    let replicas = |node: i32| {
        let mut order = vec![node];
        order.extend([1, 2, 3].into_iter().filter(|n| *n != node));
        order
    };
    let other = if coordinator == 2 { 3 } else { 2 };
    lead_from(&first, "__transaction_state", index, replicas(other)).await;
    lead_from(&first, "__transaction_state", index, replicas(coordinator)).await;
    let epoch = controller
        .image()
        .topic("__transaction_state")
        .and_then(|t| t.partition(index))
        .expect("partition")
        .leader_epoch;
    assert!(
        epoch >= 2,
        "led by two more brokers since its creation: {epoch}"
    );

    let (node, address) = transaction_coordinator(&mut to_leader, "z").await;
    assert_eq!(node, coordinator);
    let mut to_coordinator = TcpStream::connect(address).await.expect("connect");
    let (producer_id, producer_epoch) = transactional_producer(&mut to_coordinator, "z").await;
    let producer = (producer_id, producer_epoch);
    write_in_transaction(&mut to_coordinator, &mut to_leader, producer, 0).await;
    commit_transaction(&mut to_coordinator, producer).await;
    write_in_transaction(&mut to_coordinator, &mut to_leader, producer, 1).await;
    let mut topic = TopicRequest::default();
    topic.name = topic_name("good");
    topic.partition_indexes = vec![0];
    let mut describe = DescribeProducersRequest::default();
    describe.topics = vec![topic];
    let described: DescribeProducersResponse =
        call(&mut to_leader, ApiKey::DescribeProducers, 0, &describe).await;
    let state = described.topics[0].partitions[0]
        .active_producers
        .iter()
        .find(|p| p.producer_id.0 == producer_id)
        .expect("the producer")
        .clone();
    assert_eq!(
        (state.coordinator_epoch, state.current_txn_start_offset),
        (epoch, 2),
        "the commit marker's coordinator epoch; the next transaction open"
    );

    let mut marker = WritableTxnMarker::default();
    marker.producer_id = ProducerId(producer_id);
    marker.producer_epoch = producer_epoch;
    marker.transaction_result = false;
    marker.coordinator_epoch = epoch - 1;
    let mut marked = WritableTxnMarkerTopic::default();
    marked.name = topic_name("good");
    marked.partition_indexes = vec![0];
    marker.topics = vec![marked];
    let mut zombie = WriteTxnMarkersRequest::default();
    zombie.markers = vec![marker];
    let refused: WriteTxnMarkersResponse =
        call(&mut to_leader, ApiKey::WriteTxnMarkers, 1, &zombie).await;
    assert_eq!(
        refused.markers[0].topics[0].partitions[0].error_code,
        TRANSACTION_COORDINATOR_FENCED
    );
    assert_eq!(
        stable_and_high(&mut to_leader, 0).await,
        (2, 3),
        "still open"
    );
    commit_transaction(&mut to_coordinator, producer).await;
    assert_eq!(
        stable_and_high(&mut to_leader, 0).await,
        (4, 4),
        "committed"
    );
    for m in &members {
        m.crash();
    }
    first.shutdown().await;
}

fn limits() -> weir_log::ValidationLimits {
    weir_log::ValidationLimits {
        decompressed_bytes_max: 1 << 20,
        now_ms: 0,
        timestamp_before_max_ms: i64::MAX,
        timestamp_after_max_ms: i64::MAX,
        keys_required: false,
        log_append_time: false,
    }
}

/// A partition of its own on `node`, opened in `root`.
fn lone_partition(root: &Path, node: i32) -> Arc<weir_broker::partition::Partition> {
    let config = BrokerConfig::from_properties(&BTreeMap::new()).expect("config");
    let settings = config.topic_settings(
        weir_broker::config::DynamicConfigs::none(),
        &BTreeMap::new(),
    );
    let dir = root.join(format!("node-{node}")).join("moved-0");
    std::fs::create_dir_all(&dir).expect("partition dir");
    let files = FileCache::new(Arc::new(weir_storage::FsStorage), 64);
    let (log, _) =
        weir_log::Log::open(&dir, files, Arc::new(SystemClock), settings.log).expect("open log");
    Arc::new(weir_broker::partition::Partition::new(
        "moved".into(),
        uuid::Uuid::from_u128(7),
        0,
        dir,
        log,
        settings,
    ))
}

fn led_by(leader: i32, leader_epoch: i32) -> PartitionImage {
    let mut image = PartitionImage::new(vec![1, 2], |_| true);
    image.leader = leader;
    image.leader_epoch = leader_epoch;
    image
}

fn append(
    partition: &Arc<weir_broker::partition::Partition>,
    value: &[u8],
) -> weir_log::AppendInfo {
    let batch = weir_log::validate(bytes::Bytes::from(batch(value)), &limits()).expect("valid");
    partition.append(&batch).expect("appended")
}

/// `partition`'s records from `offset` to its log end, as a follower would fetch them.
fn records_from(partition: &weir_broker::partition::Partition, offset: i64) -> bytes::Bytes {
    let log = partition.log();
    let view = log
        .read_view(offset, log.log_end_offset())
        .expect("view")
        .expect("records");
    drop(log);
    view.slice(1 << 20, true)
        .expect("slice")
        .expect("records")
        .read()
        .expect("read")
}

/// A leader paused past its lease (SIGSTOP) takes a produce from its socket when it resumes,
/// appends it and waits for the in-sync replicas. The metadata it then applies makes it a
/// follower of the leader elected meanwhile: it truncates the write and takes that leader's
/// records and high watermark, which passes the write's offset with other records there. The
/// write must be answered NOT_LEADER_OR_FOLLOWER, never acknowledged (it was, and a
/// transaction's committed record vanished in a fault run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_truncated_when_its_leader_lost_its_place_is_never_acknowledged() {
    let root = tempfile::tempdir().expect("tempdir");
    let stale = lone_partition(root.path(), 1);
    let elected = lone_partition(root.path(), 2);
    let now = std::time::Instant::now();
    stale.follow(&led_by(1, 1), 1, now);
    let lost = append(&stale, b"appended by the stale leader");
    let waiting = {
        let stale = stale.clone();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            stale.wait_replicated(&lost, 1, deadline).await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !waiting.is_finished(),
        "acknowledged before any replica had it"
    );

    elected.follow(&led_by(2, 2), 2, now);
    append(&elected, b"the new leader's first");
    append(&elected, b"the new leader's second");
    stale.follow(&led_by(2, 2), 1, now);
    stale.truncate_to(0).expect("truncated");
    let records = records_from(&elected, 0);
    stale
        .append_replicated(&records, (2, 0))
        .expect("replicated");
    assert_eq!(stale.log().high_watermark(), 2);

    let answer = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("answered")
        .expect("joined");
    assert_eq!(answer, weir_broker::partition::ReplicationWait::NotLeader);
}

/// A produce checks its leadership before it awaits the transaction coordinator's
/// verification; if its broker meanwhile follows a new leader and copies that leader's
/// records, the write must be refused, not appended: it would take an offset of the new
/// leader's epoch, stamped with that epoch, where the leader holds another record, which the
/// follower's epoch-based truncation can never find. Once that follower led, an acknowledged
/// record was gone (a fault run lost a committed transactional write so, a retried batch
/// duplicated in its place). The other way round, records of the old leader that a fetch
/// brings after this broker's election are dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_appends_only_as_its_role_allows() {
    let root = tempfile::tempdir().expect("tempdir");
    let follower = lone_partition(root.path(), 1);
    let leader = lone_partition(root.path(), 2);
    let now = std::time::Instant::now();
    follower.follow(&led_by(1, 0), 1, now);
    append(&follower, b"written while it led");
    leader.follow(&led_by(2, 1), 2, now);
    append(&leader, b"written while it led");
    append(&leader, b"the new leader's");
    follower.follow(&led_by(2, 1), 1, now);
    let records = records_from(&leader, 1);
    follower
        .append_replicated(&records, (2, 0))
        .expect("replicated");
    let late = weir_log::validate(bytes::Bytes::from(batch(b"late")), &limits()).expect("valid");
    assert!(matches!(
        follower.append(&late),
        Err(weir_log::LogError::NotLeader)
    ));
    assert_eq!(follower.log().log_end_offset(), 2, "nothing appended");

    // The other way round: a fetch the old leader answers after this broker's election.
    append(&leader, b"the old leader's last");
    follower.follow(&led_by(1, 3), 1, now);
    let answered_late = records_from(&leader, 2);
    assert_eq!(
        follower
            .append_replicated(&answered_late, (3, 0))
            .expect("dropped"),
        0
    );
    assert_eq!(follower.log().log_end_offset(), 2, "nothing appended");
}

/// Appends and followers' fetches that move the high watermark race: each read the log's
/// values under its lock and published them after, so one that published last could put an
/// older watermark over a newer one, and a produce waiting for the watermark waited for a move
/// that had already happened, until its deadline (30 s, then REQUEST_TIMED_OUT: transactions'
/// commits timed out so in the compat suite, and writes of the group coordinator). Watchers
/// must see the watermark and the log end only move forward (nothing truncates here) and end
/// where the log does.
#[test]
fn watchers_never_see_the_high_watermark_or_log_end_move_back() {
    const APPENDS: i64 = 20_000;
    let root = tempfile::tempdir().expect("tempdir");
    let leader = lone_partition(root.path(), 1);
    leader.follow(&led_by(1, 1), 1, std::time::Instant::now());
    let done = Arc::new(AtomicBool::new(false));
    let follower = {
        let (leader, done) = (leader.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                let end = leader.log().log_end_offset();
                leader
                    .replica_fetched(2, (end, -1), std::time::Instant::now())
                    .expect("a replica");
            }
        })
    };
    let watcher = {
        let (leader, done) = (leader.clone(), done.clone());
        std::thread::spawn(move || {
            let (high_watermark, log_end) = (leader.watch_high_watermark(), leader.watch_log_end());
            let (mut seen_high_watermark, mut seen_log_end) = (0, 0);
            let mut backwards = 0;
            while !done.load(Ordering::Acquire) {
                let (now_high_watermark, now_log_end) =
                    (*high_watermark.borrow(), *log_end.borrow());
                backwards += usize::from(
                    now_high_watermark < seen_high_watermark || now_log_end < seen_log_end,
                );
                (seen_high_watermark, seen_log_end) = (
                    now_high_watermark.max(seen_high_watermark),
                    now_log_end.max(seen_log_end),
                );
            }
            backwards
        })
    };
    for _ in 0..APPENDS {
        append(&leader, b"raced");
    }
    while leader.log().high_watermark() < APPENDS {
        std::thread::yield_now();
    }
    done.store(true, Ordering::Release);
    follower.join().expect("follower");
    assert_eq!(
        watcher.join().expect("watcher"),
        0,
        "times the watermark or the log end was seen moving back"
    );
    assert_eq!(
        (
            *leader.watch_high_watermark().borrow(),
            *leader.watch_log_end().borrow()
        ),
        (APPENDS, APPENDS)
    );
}

/// A share group loses no acknowledgement when its partition's leader crashes: the new leader
/// reads the share-partition's state from its share coordinator (another broker, reached over
/// the share-group state APIs) and delivers only what was not acknowledged, once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_group_goes_on_at_the_new_leader_after_a_crash() {
    use crate::share_groups::{
        described_offsets, first_delivery, heartbeat, join, share_acknowledged, share_fetch,
        share_fetched, ten_records,
    };
    use weir_coordinator::share_coordinator::records::SharePartitionKey;
    let (first, members, _dirs) = cluster().await;
    let controller = first.controller.clone();
    create_replicated(&first, "sq", &[2, 3, 1]).await;
    eventually("a full ISR", || partition(&controller, "sq").isr.len() == 3).await;
    eventually("broker 2 leads", || members[0].leads("sq")).await;
    let topic_id = controller.image().topic("sq").expect("topic").topic_id;

    // The share coordinator of the share-partition is broker 1, which stays up.
    let key = SharePartitionKey {
        group: "queue".to_string(),
        topic_id,
        partition: 0,
    };
    let mut c1 = TcpStream::connect(first.addr).await.expect("connect");
    let mut find = kafka_protocol::messages::FindCoordinatorRequest::default();
    find.key_type = 2;
    find.coordinator_keys = vec![key.coordinator_key().into()];
    let _: kafka_protocol::messages::FindCoordinatorResponse = call(
        &mut c1,
        kafka_protocol::messages::ApiKey::FindCoordinator,
        6,
        &find,
    )
    .await;
    eventually("__share_group_state exists", || {
        controller.image().topic("__share_group_state").is_some()
    })
    .await;
    let state_partition = weir_coordinator::partition_for(&key.coordinator_key(), 50);
    let state_leader = controller
        .image()
        .topic("__share_group_state")
        .and_then(|t| t.partition(state_partition))
        .map(|p| p.leader);
    if state_leader != Some(1) {
        lead_from(
            &first,
            "__share_group_state",
            state_partition,
            vec![1, 2, 3],
        )
        .await;
    }

    let mut to_leader = TcpStream::connect(members[0].addr).await.expect("connect");
    let mut opened = (-1, None);
    for _ in 0..100 {
        opened = share_fetched(&mut to_leader, &share_fetch("a", 0, topic_id, 20, &[])).await;
        if opened == (0, None) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        opened,
        (0, None),
        "the share-partition starts at the log end"
    );
    assert_eq!(
        produce(&mut to_leader, "sq", 0, -1, ten_records()).await.0,
        0
    );
    let a = share_fetched(&mut to_leader, &share_fetch("a", 1, topic_id, 20, &[])).await;
    assert_eq!(a, (0, Some((0, 0, vec![(0, 9, 1)], true))));
    let acks = [(0, 3, 1), (4, 5, 2), (6, 6, 3)];
    assert_eq!(
        share_acknowledged(&mut to_leader, "a", 2, topic_id, &acks).await,
        0
    );

    members[0].crash();
    eventually("broker 3 leads", || {
        let p = partition(&controller, "sq");
        p.leader == 3 && !p.isr.contains(&2)
    })
    .await;
    let mut to_new = TcpStream::connect(members[1].addr).await.expect("connect");
    assert_eq!(
        first_delivery(&mut to_new, "b", topic_id).await,
        Some((0, 0, vec![(4, 5, 2), (7, 9, 2)], true)),
        "only what was not acknowledged, delivered once more"
    );
    let summary = first
        .broker
        .share_coordinator()
        .read_summary(&key)
        .expect("broker 1 coordinates it");
    assert_eq!(
        (summary.start_offset, summary.leader_epoch),
        (4, 1),
        "the new leader's epoch fences the old one"
    );

    // Its group coordinator describes it from the share coordinator's summary and the new
    // leader's high watermark, wherever they are: 4 done before the start, 6 rejected.
    let mut find = kafka_protocol::messages::FindCoordinatorRequest::default();
    find.key = "queue".into();
    let mut found = kafka_protocol::messages::FindCoordinatorResponse::default();
    for _ in 0..100 {
        found = call(
            &mut c1,
            kafka_protocol::messages::ApiKey::FindCoordinator,
            3,
            &find,
        )
        .await;
        if found.error_code == 0 && found.node_id.0 != 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let address = format!("{}:{}", found.host.as_str(), found.port);
    let mut to_group = TcpStream::connect(address).await.expect("connect");
    let joined = heartbeat(&mut to_group, &join("queue", "b", "sq")).await;
    assert_eq!(joined.error_code, 0);
    assert_eq!(
        described_offsets(&mut to_group, "queue").await,
        Ok(vec![("sq".to_string(), 0, 4, 5)])
    );
    for m in &members {
        m.crash();
    }
    first.shutdown().await;
}
