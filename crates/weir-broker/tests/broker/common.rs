//! The harness: a broker started in-process on an ephemeral port over a chosen disk, and raw
//! Kafka requests sent to it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse, ProduceRequest,
    ProduceResponse, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;
use weir_broker::{
    connection_limits, BoundListener, Broker, BrokerConfig, BrokerIdentity, PartitionRegistry,
};
use weir_controller::{Controller, ControllerSettings, LocalControl, QuorumConfig, RaftQuorum};
use weir_log::SystemClock;
use weir_storage::{FileCache, Storage};

/// Inactive-segment files the test brokers keep open.
pub const CACHED_FILES: usize = 16;

pub struct TestBroker {
    pub broker: Arc<Broker>,
    /// The controller the broker reaches through `LocalControl`, for changes made behind the
    /// broker's back (as another broker's admin request would).
    pub controller: Arc<Controller>,
    /// The metadata quorum (of one) under the controller.
    pub quorum: Arc<RaftQuorum>,
    pub addr: SocketAddr,
    pub stop: watch::Sender<bool>,
    pub files: Arc<FileCache>,
    _dir: Option<tempfile::TempDir>,
}

impl TestBroker {
    /// Signals shutdown, waits (bounded) until the listener has stopped, and stops the quorum.
    pub async fn shutdown(self) {
        self.stop.send_replace(true);
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.quorum.shutdown().await;
    }
}

/// Where a test broker keeps its data.
pub fn paths(root: &Path) -> (PathBuf, PathBuf) {
    (root.join("logs"), root.join("metadata").join("quorum"))
}

/// Starts a broker whose logs and metadata live under `root` on `storage`, with broker
/// properties `properties` over the defaults.
pub async fn start_on(
    storage: Arc<dyn Storage>,
    root: &Path,
    properties: &[(&str, &str)],
) -> TestBroker {
    start_inner(storage, root, properties, None).await
}

/// Starts a broker on a fresh directory of the real file system.
pub async fn start_fs(properties: &[(&str, &str)]) -> TestBroker {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    start_inner(
        Arc::new(weir_storage::FsStorage),
        &root,
        properties,
        Some(dir),
    )
    .await
}

async fn start_inner(
    storage: Arc<dyn Storage>,
    root: &Path,
    properties: &[(&str, &str)],
    dir: Option<tempfile::TempDir>,
) -> TestBroker {
    let properties: BTreeMap<String, String> = properties
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = BrokerConfig::from_properties(&properties).expect("broker config");
    let (logs_dir, quorum_dir) = paths(root);
    let quorum_config = QuorumConfig {
        node_id: 1,
        voters: BTreeMap::from([(1, "127.0.0.1:1".to_string())]),
        dir: quorum_dir,
        tls: None,
    };
    let quorum = Arc::new(
        RaftQuorum::open(storage.clone(), quorum_config, None)
            .await
            .expect("metadata quorum"),
    );
    // The controller takes the broker's lease setting, as `weir server` gives it.
    let settings = ControllerSettings {
        session_timeout: Duration::from_millis(config.broker_session_timeout_ms),
        ..ControllerSettings::default()
    };
    let controller = Arc::new(Controller::new(quorum.clone(), settings));
    let files = FileCache::new(storage, CACHED_FILES);
    let registry = PartitionRegistry::new(
        logs_dir,
        files.clone(),
        Arc::new(SystemClock),
        config.clone(),
        1,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let identity = BrokerIdentity::plaintext(1, "test-cluster", "127.0.0.1", addr.port());
    let (stop, stopped) = watch::channel(false);
    let limits = connection_limits(&config).await.expect("limits");
    let control = Arc::new(LocalControl::new(controller.clone()));
    let broker =
        tokio::task::block_in_place(|| Broker::new(config, identity, control, registry, stopped));
    broker.join_cluster().await.expect("registered");
    tokio::spawn(weir_broker::serve(
        broker.clone(),
        vec![BoundListener::plaintext(listener)],
        limits,
    ));
    tokio::spawn(broker.clone().run_coordinators());
    TestBroker {
        broker,
        controller,
        quorum,
        addr,
        stop,
        files,
        _dir: dir,
    }
}

/// A connection to `addr` from the local address `from` (another loopback address, to act as
/// a different client host).
pub async fn connect_from(from: &str, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().expect("address"))?;
    socket.connect(addr).await
}

/// One request frame: length, header, body.
pub fn encode_frame<Req: Encodable>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    request: &Req,
) -> BytesMut {
    let mut header = RequestHeader::default();
    header.request_api_key = key as i16;
    header.request_api_version = version;
    header.correlation_id = correlation_id;
    header.client_id = Some(StrBytes::from_static_str("test"));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, key.request_header_version(version))
        .expect("header");
    request.encode(&mut body, version).expect("body");
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.extend_from_slice(&body);
    frame
}

/// Reads one response frame and decodes it; `None` when the connection closed instead.
pub async fn read_response<Resp: Decodable>(
    stream: &mut TcpStream,
    key: ApiKey,
    version: i16,
) -> Option<(i32, Resp)> {
    let length = stream.read_i32().await.ok()?;
    let mut response = vec![0u8; length as usize];
    stream.read_exact(&mut response).await.ok()?;
    let mut response = Bytes::from(response);
    let correlation = i32::from_be_bytes([response[0], response[1], response[2], response[3]]);
    let _ = kafka_protocol::messages::ResponseHeader::decode(
        &mut response,
        key.response_header_version(version),
    )
    .expect("response header");
    Some((
        correlation,
        Resp::decode(&mut response, version).expect("response body"),
    ))
}

/// Sends one request and reads its response.
pub async fn call<Req: Encodable, Resp: Decodable>(
    stream: &mut TcpStream,
    key: ApiKey,
    version: i16,
    request: &Req,
) -> Resp {
    let frame = encode_frame(key, version, 7, request);
    stream.write_all(&frame).await.expect("write");
    let (correlation, response) = read_response(stream, key, version)
        .await
        .unwrap_or_else(|| panic!("a response to {key:?} v{version}, not a closed connection"));
    assert_eq!(correlation, 7);
    response
}

/// An AlterClientQuotas entry: the entity's components (type, name or `None` for the
/// default) and the quotas to set.
pub fn quota_entry(
    entity: &[(&str, Option<&str>)],
    quotas: &[(&str, f64)],
) -> kafka_protocol::messages::alter_client_quotas_request::EntryData {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    let mut entry = EntryData::default();
    entry.entity = entity
        .iter()
        .map(|(kind, name)| {
            let mut component = EntityData::default();
            component.entity_type = StrBytes::from_string(kind.to_string());
            component.entity_name = name.map(|n| StrBytes::from_string(n.to_string()));
            component
        })
        .collect();
    entry.ops = quotas
        .iter()
        .map(|(key, value)| {
            let mut op = OpData::default();
            op.key = StrBytes::from_string(key.to_string());
            op.value = *value;
            op
        })
        .collect();
    entry
}

/// Sets `quotas` for `entity` with AlterClientQuotas, which must succeed.
pub async fn set_quotas(
    stream: &mut TcpStream,
    entity: &[(&str, Option<&str>)],
    quotas: &[(&str, f64)],
) {
    use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};
    let mut request = AlterClientQuotasRequest::default();
    request.entries = vec![quota_entry(entity, quotas)];
    let r: AlterClientQuotasResponse = call(stream, ApiKey::AlterClientQuotas, 1, &request).await;
    assert_eq!(
        r.entries[0].error_code, 0,
        "quotas {quotas:?} of {entity:?}"
    );
}

pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

pub async fn create_topic(
    stream: &mut TcpStream,
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> i16 {
    let mut topic = CreatableTopic::default();
    topic.name = topic_name(name);
    topic.num_partitions = partitions;
    topic.replication_factor = 1;
    topic.configs = configs
        .iter()
        .map(|(k, v)| {
            let mut c = CreatableTopicConfig::default();
            c.name = StrBytes::from_string(k.to_string());
            c.value = Some(StrBytes::from_string(v.to_string()));
            c
        })
        .collect();
    let mut request = CreateTopicsRequest::default();
    request.topics = vec![topic];
    request.timeout_ms = 5000;
    let response: CreateTopicsResponse = call(stream, ApiKey::CreateTopics, 7, &request).await;
    response.topics[0].error_code
}

pub fn produce_request(topic: &str, partition: i32, acks: i16, batch: Vec<u8>) -> ProduceRequest {
    let mut data = PartitionProduceData::default();
    data.index = partition;
    data.records = Some(Bytes::from(batch));
    let mut topic_data = TopicProduceData::default();
    topic_data.name = topic_name(topic);
    topic_data.partition_data = vec![data];
    let mut request = ProduceRequest::default();
    request.acks = acks;
    request.timeout_ms = 5000;
    request.topic_data = vec![topic_data];
    request
}

/// (error code, base offset) of the single partition in a produce response.
pub async fn produce(
    stream: &mut TcpStream,
    topic: &str,
    partition: i32,
    acks: i16,
    batch: Vec<u8>,
) -> (i16, i64) {
    let response: ProduceResponse = call(
        stream,
        ApiKey::Produce,
        9,
        &produce_request(topic, partition, acks, batch),
    )
    .await;
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

pub fn fetch_request(topic: &str, partition: i32, offset: i64, max_bytes: i32) -> FetchRequest {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    let mut p = FetchPartition::default();
    p.partition = partition;
    p.fetch_offset = offset;
    p.partition_max_bytes = max_bytes;
    p.current_leader_epoch = -1;
    let mut t = FetchTopic::default();
    t.topic = topic_name(topic);
    t.partitions = vec![p];
    let mut request = FetchRequest::default();
    request.max_wait_ms = 0;
    request.min_bytes = 0;
    request.max_bytes = max_bytes;
    request.topics = vec![t];
    request
}

/// Every record batch stored in a partition, read with as many fetches as it takes.
pub async fn fetch_all(stream: &mut TcpStream, topic: &str, partition: i32) -> (i16, Bytes) {
    let mut all = BytesMut::new();
    let mut offset = 0;
    loop {
        let request = fetch_request(topic, partition, offset, 1 << 24);
        let response: FetchResponse = call(stream, ApiKey::Fetch, 11, &request).await;
        let data = &response.responses[0].partitions[0];
        if data.error_code != 0 {
            return (data.error_code, all.freeze());
        }
        let records = data.records.clone().expect("records are never null");
        let whole = whole_batches(&records);
        if whole.is_empty() {
            return (0, all.freeze());
        }
        for (base, length) in whole {
            let start = all.len();
            all.extend_from_slice(&records[length.0..length.1]);
            let header = weir_log::BatchHeader::parse(&all[start..]).expect("header");
            offset = base + i64::from(header.last_offset_delta) + 1;
        }
    }
}

/// (base offset, byte range) of each whole batch in a fetch's records; a trailing partial
/// batch is left out, as clients do.
pub fn whole_batches(records: &[u8]) -> Vec<(i64, (usize, usize))> {
    let mut out = Vec::new();
    let mut position = 0;
    while let Some(header) = weir_log::BatchHeader::parse(&records[position..]) {
        let end = position + header.total_bytes() as usize;
        if end > records.len() {
            break;
        }
        out.push((header.base_offset, (position, end)));
        position = end;
    }
    out
}

/// The bytes of the stored batch whose base offset is `offset`.
pub fn find_batch(records: &Bytes, offset: i64) -> Option<Bytes> {
    whole_batches(records)
        .into_iter()
        .find(|(base, _)| *base == offset)
        .map(|(_, (start, end))| records.slice(start..end))
}

/// True once `stream` is closed by the broker (EOF or reset) within `within`.
pub async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut sink = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// Joins `group` as a new member at JoinGroup `version`, answering MEMBER_ID_REQUIRED (v4+)
/// with the id it hands out; returns the final response.
pub async fn join_group(
    stream: &mut TcpStream,
    group: &str,
    version: i16,
) -> kafka_protocol::messages::JoinGroupResponse {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::{GroupId, JoinGroupRequest, JoinGroupResponse};
    let mut protocol = JoinGroupRequestProtocol::default();
    protocol.name = StrBytes::from_static_str("range");
    protocol.metadata = Bytes::from_static(b"subscription");
    let mut request = JoinGroupRequest::default();
    request.group_id = GroupId(StrBytes::from_string(group.to_string()));
    request.session_timeout_ms = 10_000;
    request.rebalance_timeout_ms = 10_000;
    request.protocol_type = StrBytes::from_static_str("consumer");
    request.protocols = vec![protocol];
    let first: JoinGroupResponse = call(stream, ApiKey::JoinGroup, version, &request).await;
    if first.error_code != 79 {
        return first;
    }
    request.member_id = first.member_id;
    call(stream, ApiKey::JoinGroup, version, &request).await
}

/// Commits `offset` for `topic`-0 in `group` as a non-member (generation -1), at OffsetCommit
/// `version`; returns the partition's error code.
pub async fn commit_offset(
    stream: &mut TcpStream,
    group: &str,
    topic: &str,
    offset: i64,
    version: i16,
) -> i16 {
    commit_offset_as(stream, group, -1, topic, offset, version).await
}

/// Commits `offset` for `topic`-0 in `group` at `generation` (as member `m` when it is not
/// -1), at OffsetCommit `version`; returns the partition's error code.
pub async fn commit_offset_as(
    stream: &mut TcpStream,
    group: &str,
    generation: i32,
    topic: &str,
    offset: i64,
    version: i16,
) -> i16 {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, OffsetCommitRequest, OffsetCommitResponse};
    let mut partition = OffsetCommitRequestPartition::default();
    partition.committed_offset = offset;
    let mut t = OffsetCommitRequestTopic::default();
    t.name = topic_name(topic);
    t.partitions = vec![partition];
    let mut request = OffsetCommitRequest::default();
    request.group_id = GroupId(StrBytes::from_string(group.to_string()));
    request.generation_id_or_member_epoch = generation;
    if generation >= 0 {
        request.member_id = StrBytes::from_static_str("m");
    }
    request.topics = vec![t];
    let response: OffsetCommitResponse =
        call(stream, ApiKey::OffsetCommit, version, &request).await;
    response.topics[0].partitions[0].error_code
}

/// The producer id and epoch of a new producer of `transactional_id`, once its coordinator
/// (the broker `c` reaches) serves its partition of `__transaction_state`.
pub async fn transactional_producer(c: &mut TcpStream, transactional_id: &str) -> (i64, i16) {
    use kafka_protocol::messages::*;
    for _ in 0..100 {
        let mut find = FindCoordinatorRequest::default();
        find.key = StrBytes::from_string(transactional_id.to_string());
        find.key_type = 1;
        let found: FindCoordinatorResponse = call(c, ApiKey::FindCoordinator, 3, &find).await;
        if found.error_code == 0 {
            let mut init = InitProducerIdRequest::default();
            init.transactional_id = Some(TransactionalId(StrBytes::from_string(
                transactional_id.to_string(),
            )));
            init.transaction_timeout_ms = 60_000;
            init.producer_id = ProducerId(-1);
            init.producer_epoch = -1;
            let r: InitProducerIdResponse = call(c, ApiKey::InitProducerId, 4, &init).await;
            // COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR: a broker that
            // has not applied the newest leadership yet; a client asks again.
            if ![14, 15, 16].contains(&r.error_code) {
                assert_eq!(r.error_code, 0, "InitProducerId of {transactional_id}");
                return (r.producer_id.0, r.producer_epoch);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no transaction coordinator for {transactional_id}");
}

/// AddOffsetsToTxn of the group named `transactional_id` at `version`.
pub async fn add_offsets_to_txn(
    c: &mut TcpStream,
    version: i16,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
) -> kafka_protocol::messages::AddOffsetsToTxnResponse {
    use kafka_protocol::messages::*;
    let id = StrBytes::from_string(transactional_id.to_string());
    let mut req = AddOffsetsToTxnRequest::default();
    req.transactional_id = TransactionalId(id.clone());
    req.producer_id = ProducerId(producer_id);
    req.producer_epoch = epoch;
    req.group_id = GroupId(id);
    call(c, ApiKey::AddOffsetsToTxn, version, &req).await
}

/// AddPartitionsToTxn of `good`-0 at `version` (from 4 on, one transaction, not only
/// verified).
pub async fn add_partition_to_txn(
    c: &mut TcpStream,
    version: i16,
    transactional_id: &str,
    producer_id: i64,
    epoch: i16,
) -> kafka_protocol::messages::AddPartitionsToTxnResponse {
    add_partitions_to_txn(
        c,
        version,
        (transactional_id, producer_id, epoch),
        &[("good", 0)],
        false,
    )
    .await
}

/// AddPartitionsToTxn of `partitions` to the transaction of `(transactional_id, producer id,
/// epoch)` at `version`; from 4 on, `verify_only` asks only whether it holds them.
pub async fn add_partitions_to_txn(
    c: &mut TcpStream,
    version: i16,
    (transactional_id, producer_id, epoch): (&str, i64, i16),
    partitions: &[(&str, i32)],
    verify_only: bool,
) -> kafka_protocol::messages::AddPartitionsToTxnResponse {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::*;
    let topics: Vec<AddPartitionsToTxnTopic> = partitions
        .iter()
        .map(|(name, index)| {
            let mut topic = AddPartitionsToTxnTopic::default();
            topic.name = topic_name(name);
            topic.partitions = vec![*index];
            topic
        })
        .collect();
    let id = TransactionalId(StrBytes::from_string(transactional_id.to_string()));
    let mut req = AddPartitionsToTxnRequest::default();
    if version <= 3 {
        req.v3_and_below_transactional_id = id;
        req.v3_and_below_producer_id = ProducerId(producer_id);
        req.v3_and_below_producer_epoch = epoch;
        req.v3_and_below_topics = topics;
    } else {
        let mut txn = AddPartitionsToTxnTransaction::default();
        txn.transactional_id = id;
        txn.producer_id = ProducerId(producer_id);
        txn.producer_epoch = epoch;
        txn.verify_only = verify_only;
        txn.topics = topics;
        req.transactions = vec![txn];
    }
    call(c, ApiKey::AddPartitionsToTxn, version, &req).await
}
