//! What survives: acknowledged writes and metadata across a power cut, a full disk that refuses
//! writes and recovers, and directories the metadata does not know.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use weir_log::batch::{build_batch, ProducerFields};
use weir_storage::{MemoryStorage, Storage};

use crate::common::*;

const KAFKA_STORAGE_ERROR: i16 = 56;

/// Writes acknowledged under acks=all, and the topics they went to, survive a power cut that
/// drops every unsynced byte, data and metadata alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_writes_and_metadata_survive_power_loss() {
    for policy in ["acks-all", "always"] {
        let storage = MemoryStorage::new();
        let root = Path::new("/data");
        let test = start_on(Arc::new(storage.clone()), root, &[]).await;
        let mut admin = TcpStream::connect(test.addr).await.expect("connect");
        assert_eq!(
            create_topic(&mut admin, "durable", 2, &[("flush.policy", policy)]).await,
            0
        );
        let acks = if policy == "always" { 1 } else { -1 };
        let mut producers = Vec::new();
        for producer in 0..4i32 {
            let addr = test.addr;
            producers.push(tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.expect("connect");
                let mut acked = Vec::new();
                for i in 0..40 {
                    let value = format!("p{producer}-{i}");
                    let (error, offset) = produce(
                        &mut stream,
                        "durable",
                        producer % 2,
                        acks,
                        build_batch(&[value.as_bytes()], 0, ProducerFields::NONE),
                    )
                    .await;
                    assert_eq!(error, 0);
                    acked.push((producer % 2, offset, value));
                }
                acked
            }));
        }
        let mut acked = Vec::new();
        for p in producers {
            acked.extend(p.await.expect("producer"));
        }
        // Unacknowledged writes on top: acks=0 under acks-all is never fsynced before answering.
        for i in 0..20 {
            let batch = build_batch(
                &[format!("unsynced-{i}").as_bytes()],
                0,
                ProducerFields::NONE,
            );
            let frame = encode_frame(
                ApiKey::Produce,
                9,
                1,
                &produce_request("durable", 0, 0, batch),
            );
            admin.write_all(&frame).await.expect("write");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        if policy == "acks-all" {
            assert!(
                storage.unsynced_bytes() > 0,
                "the test must leave unsynced bytes to lose"
            );
        }
        test.shutdown().await;
        storage.power_loss();

        let restarted = start_on(Arc::new(storage.clone()), root, &[]).await;
        assert!(
            restarted.broker.image().topic("durable").is_some(),
            "{policy}: the topic survives in the metadata log"
        );
        let mut client = TcpStream::connect(restarted.addr).await.expect("connect");
        for partition in 0..2 {
            let (error, records) = fetch_all(&mut client, "durable", partition).await;
            assert_eq!(error, 0);
            let mine: Vec<_> = acked.iter().filter(|(p, _, _)| *p == partition).collect();
            assert_eq!(mine.len(), 80);
            for (p, offset, value) in mine {
                let found = find_batch(&records, *offset).unwrap_or_else(|| {
                    panic!("{policy}: acknowledged offset {offset} of partition {p} lost")
                });
                assert!(
                    found.windows(value.len()).any(|w| w == value.as_bytes()),
                    "{policy}: offset {offset} holds the wrong record"
                );
            }
        }
        restarted.shutdown().await;
    }
}

/// A full disk refuses writes with KAFKA_STORAGE_ERROR, keeps serving reads, cuts any partial
/// write back, writes metadata changes into the space reserved for them and, with that spent,
/// refuses them without applying them, and takes writes again once space returns; nothing
/// before or after is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_and_recovers() {
    let storage = MemoryStorage::new();
    let root = Path::new("/data");
    let test = start_on(Arc::new(storage.clone()), root, &[]).await;
    let mut client = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut client, "full", 2, &[]).await, 0);
    let batch = |value: String| build_batch(&[value.as_bytes()], 0, ProducerFields::NONE);
    for i in 0..10 {
        assert_eq!(
            produce(&mut client, "full", 0, -1, batch(format!("before-{i}")))
                .await
                .0,
            0
        );
    }
    // Room for part of one batch only: the partial write must be undone.
    storage.set_capacity(Some(storage.used_bytes() + 40));
    let big = "x".repeat(200);
    for partition in 0..2 {
        let (error, _) = produce(&mut client, "full", partition, -1, batch(big.clone())).await;
        assert_eq!(
            error, KAFKA_STORAGE_ERROR,
            "partition {partition} refuses the write"
        );
    }
    let (error, records) = fetch_all(&mut client, "full", 0).await;
    assert_eq!(error, 0, "reads go on");
    assert_eq!(whole_batches(&records).len(), 10);
    // The space reserved for the metadata log is given up for a metadata change (the
    // operator's way out: delete a topic, lower its retention), so it is written.
    assert_eq!(
        create_topic(&mut client, "from-the-reserve", 1, &[]).await,
        0,
        "a metadata change on a full disk is written into the reserve"
    );
    // With the reserve spent too, a metadata change that cannot be written is refused.
    storage.set_capacity(Some(storage.used_bytes() + 40));
    assert_eq!(
        create_topic(&mut client, "refused", 1, &[]).await,
        KAFKA_STORAGE_ERROR,
        "a metadata change that cannot be written is refused"
    );
    assert!(test.broker.image().topic("refused").is_none());

    storage.set_capacity(None);
    assert_eq!(
        produce(&mut client, "full", 0, -1, batch("after".into())).await,
        (0, 10)
    );
    assert_eq!(create_topic(&mut client, "later", 1, &[]).await, 0);
    test.shutdown().await;
    storage.power_loss();
    let restarted = start_on(Arc::new(storage), root, &[]).await;
    let image = restarted.broker.image();
    assert!(image.topic("later").is_some() && image.topic("refused").is_none());
    assert!(image.topic("from-the-reserve").is_some());
    let mut client = TcpStream::connect(restarted.addr).await.expect("connect");
    let (_, records) = fetch_all(&mut client, "full", 0).await;
    assert_eq!(whole_batches(&records).len(), 11, "no torn or lost batch");
    restarted.shutdown().await;
}

/// A partition directory the metadata does not know is moved aside, never deleted; an
/// interrupted delete is finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_directories_are_moved_aside() {
    let storage = MemoryStorage::new();
    let root = Path::new("/data");
    let (logs, _) = paths(root);
    let stray_segment = logs.join("ghost-0").join("00000000000000000000.log");
    storage.plant(
        &stray_segment,
        &build_batch(&[b"precious"], 0, ProducerFields::NONE),
    );
    storage.plant(&logs.join("old-1.abc-delete").join("x.log"), b"doomed");
    let test = start_on(Arc::new(storage.clone()), root, &[]).await;
    let names = storage.list(&logs).expect("list");
    assert!(
        !names
            .iter()
            .any(|n| n == "ghost-0" || n.ends_with("-delete")),
        "{names:?}"
    );
    let stray = names
        .iter()
        .find(|n| n.starts_with("ghost-0.") && n.ends_with("-stray"))
        .unwrap_or_else(|| panic!("no stray directory in {names:?}"));
    let kept = storage
        .read(&logs.join(stray).join("00000000000000000000.log"))
        .expect("the stray data is kept");
    assert!(kept.windows(8).any(|w| w == b"precious"));
    test.shutdown().await;
}
