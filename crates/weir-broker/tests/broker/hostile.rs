//! Clients that lie, flood or never read: each gets an error or a closed connection, and
//! nothing else is affected.

use std::time::Duration;

use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchResponse};
use kafka_protocol::protocol::StrBytes;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use weir_log::batch::{batch_crc, build_batch, ProducerFields};

use crate::common::*;

const CORRUPT_MESSAGE: i16 = 2;
const INVALID_CONFIG: i16 = 40;
const INVALID_RECORD: i16 = 87;

fn with_crc(mut batch: Vec<u8>) -> Vec<u8> {
    let crc = batch_crc(&batch);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    batch
}

/// ApiVersions answered on a fresh connection: the broker serves.
async fn serves(test: &TestBroker) -> bool {
    let Ok(Ok(mut stream)) =
        tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(test.addr)).await
    else {
        return false;
    };
    answers(&mut stream).await
}

/// ApiVersions answered on `stream` within 5 s.
async fn answers(stream: &mut TcpStream) -> bool {
    let mut request = ApiVersionsRequest::default();
    request.client_software_name = StrBytes::from_static_str("t");
    request.client_software_version = StrBytes::from_static_str("1");
    let frame = encode_frame(ApiKey::ApiVersions, 3, 9, &request);
    if stream.write_all(&frame).await.is_err() {
        return false;
    }
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        read_response::<ApiVersionsResponse>(stream, ApiKey::ApiVersions, 3),
    )
    .await;
    matches!(answer, Ok(Some((9, r))) if r.error_code == 0)
}

/// Batches claiming 2^31 - 1 records with none inside (the 8 KB that once bricked a
/// partition), lying record lengths, counts and deltas, an unknown codec and a gzip flag on
/// plain bytes: each is refused with its code, nothing is stored, and the partition goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lying_batches_are_refused_and_the_partition_goes_on() {
    let test = start_fs(&[]).await;
    let mut client = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut client, "target", 1, &[]).await, 0);
    let good = || build_batch(&[b"good"], 0, ProducerFields::NONE);
    assert_eq!(produce(&mut client, "target", 0, -1, good()).await, (0, 0));

    let mut span = build_batch(&[], 0, ProducerFields::NONE);
    span[23..27].copy_from_slice(&(i32::MAX - 1).to_be_bytes());
    span[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
    let span = with_crc(span);
    for _ in 0..150 {
        assert_eq!(
            produce(&mut client, "target", 0, -1, span.clone()).await.0,
            INVALID_RECORD
        );
    }
    let mut cases: Vec<(&str, Vec<u8>, i16)> = Vec::new();
    let mut lying_length = good();
    lying_length[61] = 0x7e; // record length varint 63, far more than the record holds
    cases.push(("record length", with_crc(lying_length), INVALID_RECORD));
    let mut more_counted = build_batch(&[b"a", b"b"], 0, ProducerFields::NONE);
    more_counted[57..61].copy_from_slice(&3i32.to_be_bytes());
    more_counted[23..27].copy_from_slice(&2i32.to_be_bytes());
    cases.push(("record count", with_crc(more_counted), INVALID_RECORD));
    let mut codec = good();
    codec[22] = 7;
    cases.push(("codec 7", with_crc(codec), INVALID_RECORD));
    let mut gzip = good();
    gzip[22] = 1;
    cases.push(("gzip flag on plain bytes", with_crc(gzip), CORRUPT_MESSAGE));
    for (what, batch, code) in cases {
        assert_eq!(
            produce(&mut client, "target", 0, -1, batch).await.0,
            code,
            "{what}"
        );
    }
    assert_eq!(produce(&mut client, "target", 0, -1, good()).await, (0, 1));
    let (error, records) = fetch_all(&mut client, "target", 0).await;
    assert_eq!(error, 0);
    let stored = whole_batches(&records);
    assert_eq!(stored.len(), 2, "only the good batches were stored");
    assert_eq!(
        test.broker
            .partitions()
            .get("target", 0)
            .expect("hosted")
            .log()
            .log_end_offset(),
        2
    );
    test.shutdown().await;
}

/// Topic configs a client may set cannot stop the broker: `segment.bytes` below Kafka's minimum
/// is refused, and a topic rolling a segment per append keeps open files bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configs_a_client_sets_cannot_exhaust_the_broker() {
    let test = start_fs(&[]).await;
    let mut client = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(
        create_topic(&mut client, "tiny", 1, &[("segment.bytes", "1024")]).await,
        INVALID_CONFIG
    );
    assert_eq!(
        create_topic(&mut client, "rolling", 1, &[("segment.ms", "1")]).await,
        0
    );
    for i in 0..400 {
        let batch = build_batch(&[format!("v{i}").as_bytes()], 0, ProducerFields::NONE);
        assert_eq!(produce(&mut client, "rolling", 0, 1, batch).await.0, 0);
        // Older than segment.ms by the next append, which then rolls.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let partition = test.broker.partitions().get("rolling", 0).expect("hosted");
    let segments = partition.log().segment_count();
    assert!(
        segments > 300,
        "segment.ms=1 rolls on every append: {segments} segments"
    );
    let (error, records) = fetch_all(&mut client, "rolling", 0).await;
    assert_eq!((error, whole_batches(&records).len()), (0, 400));
    assert!(
        test.files.open_count() <= CACHED_FILES,
        "{} inactive-segment files open",
        test.files.open_count()
    );
    test.shutdown().await;
}

/// Per-address connection limits: an address over its limit has new connections closed at
/// once, while clients from another address are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_from_one_address_locks_nobody_else_out() {
    let test = start_fs(&[("max.connections.per.ip", "20"), ("max.connections", "30")]).await;
    let mut flood = Vec::new();
    for _ in 0..20 {
        flood.push(connect_from("127.0.0.2", test.addr).await.expect("connect"));
    }
    let mut over = connect_from("127.0.0.2", test.addr).await.expect("connect");
    assert!(
        closed_within(&mut over, Duration::from_secs(5)).await,
        "a connection over the per-address limit is closed at once"
    );
    assert!(serves(&test).await, "another address is served");
    // The broker-wide limit: 10 more from a third address fill it to 30.
    let mut third = Vec::new();
    for _ in 0..10 {
        third.push(connect_from("127.0.0.3", test.addr).await.expect("connect"));
    }
    let mut beyond = connect_from("127.0.0.4", test.addr).await.expect("connect");
    assert!(
        closed_within(&mut beyond, Duration::from_secs(5)).await,
        "max.connections holds"
    );
    drop(flood);
    assert!(
        tokio::time::timeout(Duration::from_secs(5), async {
            while !serves(&test).await {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .is_ok(),
        "closed connections free their places"
    );
    test.shutdown().await;
}

/// `connection_creation_rate` for an address (Kafka's KIP-612): once it has opened its
/// window's worth, a new connection from it is held unserved for the pause (at most a
/// second) and closed, while other addresses are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_above_its_connection_rate_has_new_connections_closed() {
    let test = start_fs(&[]).await;
    let mut admin = TcpStream::connect(test.addr).await.expect("connect");
    set_quotas(
        &mut admin,
        &[("ip", Some("127.0.0.2"))],
        &[("connection_creation_rate", 2.0)],
    )
    .await;
    // 2 a second over the 10 s a new address is measured over at least: 20 at once.
    let mut served = Vec::new();
    let mut refused = None;
    // (More while the broker's image may not have the quota yet.)
    for _ in 0..200 {
        let mut stream = connect_from("127.0.0.2", test.addr).await.expect("connect");
        let started = tokio::time::Instant::now();
        if !answers(&mut stream).await {
            refused = Some((served.len(), started.elapsed()));
            break;
        }
        served.push(stream);
    }
    let (opened, held) = refused.expect("a connection past the rate is closed unserved");
    assert!((20..200).contains(&opened), "{opened} served first");
    assert!(
        held <= Duration::from_millis(1500),
        "closed after at most a second: {held:?}"
    );
    assert!(
        answers(&mut admin).await,
        "connections already open are served"
    );
    assert!(serves(&test).await, "another address is served");
    let throttled = &test.broker.metrics().connections_throttled;
    assert!(throttled.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    test.shutdown().await;
}

/// `connections.max.idle.ms`: a connection on which nothing moves is closed; one in use is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed() {
    let test = start_fs(&[("connections.max.idle.ms", "300")]).await;
    let mut idle = TcpStream::connect(test.addr).await.expect("connect");
    let mut busy = TcpStream::connect(test.addr).await.expect("connect");
    let started = tokio::time::Instant::now();
    let mut request = ApiVersionsRequest::default();
    request.client_software_name = StrBytes::from_static_str("t");
    request.client_software_version = StrBytes::from_static_str("1");
    while started.elapsed() < Duration::from_millis(900) {
        let _: ApiVersionsResponse = call(&mut busy, ApiKey::ApiVersions, 3, &request).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        closed_within(&mut idle, Duration::from_secs(5)).await,
        "the idle one is closed"
    );
    let _: ApiVersionsResponse = call(&mut busy, ApiKey::ApiVersions, 3, &request).await;
    test.shutdown().await;
}

/// A client that pipelines many large fetches and never reads its socket holds no record bytes
/// in memory (fetches stream from the files), stops being read, and blocks nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_blocks_nobody() {
    let test = start_fs(&[]).await;
    let mut client = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut client, "big", 1, &[]).await, 0);
    let value = vec![0x42u8; 512 * 1024];
    for _ in 0..16 {
        let batch = build_batch(&[&value], 0, ProducerFields::NONE);
        assert_eq!(produce(&mut client, "big", 0, 1, batch).await.0, 0);
    }
    let mut greedy = TcpStream::connect(test.addr).await.expect("connect");
    let request = fetch_request("big", 0, 0, 64 << 20);
    let mut pipelined = Vec::new();
    for i in 0..64 {
        pipelined.extend_from_slice(&encode_frame(ApiKey::Fetch, 11, i, &request));
    }
    // The broker stops reading this socket at some point: write without waiting for it.
    let writer = tokio::spawn(async move {
        let _ = greedy.write_all(&pipelined).await;
        greedy
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(serves(&test).await, "other clients are served");
    let (error, records) = fetch_all(&mut client, "big", 0).await;
    assert_eq!((error, whole_batches(&records).len()), (0, 16));
    // The large fetch responses stream from the segment files rather than sit in memory.
    let mut streamed = TcpStream::connect(test.addr).await.expect("connect");
    let response: FetchResponse = call(&mut streamed, ApiKey::Fetch, 12, &request).await;
    let records = response.responses[0].partitions[0]
        .records
        .clone()
        .expect("records");
    assert_eq!(
        whole_batches(&records).len(),
        16,
        "a streamed response decodes whole"
    );
    writer.abort();
    test.shutdown().await;
}

/// Idempotent producers are bounded per partition; the one idle longest is forgotten first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_state_is_bounded() {
    let test = start_fs(&[("producer.id.max.per.partition", "3")]).await;
    let mut client = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut client, "ids", 1, &[]).await, 0);
    for producer_id in 0..50i64 {
        let fields = ProducerFields {
            producer_id: 1_000_000 + producer_id,
            producer_epoch: 0,
            base_sequence: 0,
        };
        let batch = build_batch(&[b"x"], 0, fields);
        assert_eq!(produce(&mut client, "ids", 0, 1, batch).await.0, 0);
    }
    let partition = test.broker.partitions().get("ids", 0).expect("hosted");
    assert_eq!(partition.log().producer_count(), 3);
    assert_eq!(partition.log().producers_evicted(), 47);
    test.shutdown().await;
}

/// With acks=0 a failed write closes the connection, as in Kafka: the client has no other way
/// to learn of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_acks_zero_produce_closes_the_connection() {
    let test = start_fs(&[("auto.create.topics.enable", "false")]).await;
    let mut client = TcpStream::connect(test.addr).await.expect("connect");
    let batch = build_batch(&[b"x"], 0, ProducerFields::NONE);
    let frame = encode_frame(
        ApiKey::Produce,
        9,
        1,
        &produce_request("missing", 0, 0, batch),
    );
    client.write_all(&frame).await.expect("write");
    assert!(closed_within(&mut client, Duration::from_secs(5)).await);
    assert!(serves(&test).await);
    test.shutdown().await;
}

/// Four large produce requests at once with room for two in `queued.max.request.bytes`: each
/// takes its whole length before reading, so two are read, two wait unread, and all four are
/// answered (taking the budget piece by piece as bytes arrive could leave all four stuck).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_requests_over_the_memory_budget_all_complete() {
    let test = start_fs(&[
        ("socket.request.max.bytes", "1048576"),
        ("queued.max.request.bytes", "2097152"),
        ("message.max.bytes", "1048576"),
    ])
    .await;
    let mut admin = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut admin, "big", 1, &[]).await, 0);
    let value = vec![7u8; 900 * 1024];
    let frame = encode_frame(
        ApiKey::Produce,
        9,
        1,
        &produce_request("big", 0, 1, build_batch(&[&value], 0, ProducerFields::NONE)),
    );
    let (first, second) = frame.split_at(frame.len() / 2);
    let mut streams = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(test.addr).await.expect("connect");
        stream.write_all(first).await.expect("first half");
        streams.push(stream);
    }
    let second = bytes::Bytes::copy_from_slice(second);
    let mut answers = Vec::new();
    for mut stream in streams {
        let rest = second.clone();
        answers.push(tokio::spawn(async move {
            stream.write_all(&rest).await.expect("second half");
            read_response::<kafka_protocol::messages::ProduceResponse>(
                &mut stream,
                ApiKey::Produce,
                9,
            )
            .await
            .map(|(_, r)| r.responses[0].partition_responses[0].error_code)
        }));
    }
    for answer in answers {
        let code = tokio::time::timeout(Duration::from_secs(20), answer)
            .await
            .expect("every large request is answered")
            .expect("task");
        assert_eq!(code, Some(0));
    }
    test.shutdown().await;
}

/// A topic deleted while its partition is in use (a produce, a checkpoint, a flush racing the
/// delete) does not stop the broker: writes to it are refused and maintenance skips it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_in_use_when_its_topic_is_deleted_stops_nothing() {
    use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse};
    let test = start_fs(&[]).await;
    let mut client = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut client, "doomed", 1, &[]).await, 0);
    let batch = || build_batch(&[b"v"], 0, ProducerFields::NONE);
    assert_eq!(produce(&mut client, "doomed", 0, -1, batch()).await.0, 0);
    let partition = test.broker.partitions().get("doomed", 0).expect("hosted");
    let mut request = DeleteTopicsRequest::default();
    request.topic_names = vec![topic_name("doomed")];
    let response: DeleteTopicsResponse = call(&mut client, ApiKey::DeleteTopics, 4, &request).await;
    assert_eq!(response.responses[0].error_code, 0);
    // The old partition object, still held as a request or maintenance would hold it.
    let valid = weir_log::validate(
        bytes::Bytes::from(batch()),
        &weir_log::ValidationLimits::unbounded_time(1 << 20),
    )
    .expect("valid");
    assert!(matches!(
        partition.append(&valid),
        Err(weir_log::LogError::Deleted)
    ));
    partition.write_checkpoint();
    partition.sync_now();
    partition.wait_durable(1).await;
    tokio::task::spawn_blocking({
        let broker = test.broker.clone();
        move || {
            broker.partitions().checkpoint();
            broker.partitions().run_retention(86_400_000);
        }
    })
    .await
    .expect("maintenance");
    // Recreated under the same name: a fresh, empty partition.
    assert_eq!(create_topic(&mut client, "doomed", 1, &[]).await, 0);
    assert_eq!(produce(&mut client, "doomed", 0, -1, batch()).await, (0, 0));
    test.shutdown().await;
}

/// A response ready behind a long poll is not held back by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_not_held_behind_a_long_poll() {
    let test = start_fs(&[]).await;
    let mut client = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut client, "quiet", 1, &[]).await, 0);
    let mut versions = ApiVersionsRequest::default();
    versions.client_software_name = StrBytes::from_static_str("t");
    versions.client_software_version = StrBytes::from_static_str("1");
    let mut poll = fetch_request("quiet", 0, 0, 1 << 20);
    poll.max_wait_ms = 5000;
    poll.min_bytes = 1;
    let mut frames = encode_frame(ApiKey::ApiVersions, 3, 1, &versions);
    frames.extend_from_slice(&encode_frame(ApiKey::Fetch, 11, 2, &poll));
    let started = tokio::time::Instant::now();
    client.write_all(&frames).await.expect("write");
    let (correlation, _) =
        read_response::<ApiVersionsResponse>(&mut client, ApiKey::ApiVersions, 3)
            .await
            .expect("answer");
    assert_eq!(correlation, 1);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "held behind the long poll"
    );
    test.shutdown().await;
}
