//! Offsets committed in transactions (TxnOffsetCommit): held until the transaction's marker,
//! then counted or dropped, across reloads; fencing of zombie producers and members.

use std::sync::Arc;

use super::tests_support::*;
use super::*;
use crate::partition_for;
use crate::runtime::ProducerIdAndEpoch;

const PRODUCER: ProducerIdAndEpoch = ProducerIdAndEpoch {
    producer_id: 7,
    epoch: 0,
};

/// A TxnOffsetCommit of `group` by [`PRODUCER`] from outside the group (versions 0–2).
fn outsider(group_id: &str) -> TxnCommit<'_> {
    TxnCommit {
        group_id,
        producer: PRODUCER,
        generation: -1,
        member_id: "",
        instance_id: None,
        verification: None,
    }
}

/// The offset committed for `t`-0 in `group`, with or without `require_stable`.
fn committed(
    coordinator: &GroupCoordinator,
    group: &str,
    stable: bool,
) -> Result<Option<i64>, GroupError> {
    let topics = [("t".to_string(), vec![0])];
    let fetched = coordinator
        .fetch_offsets(group, Some(&topics), None, stable)
        .expect("served");
    fetched[0].2.clone().map(|value| value.map(|v| v.offset))
}

/// `offset` for `t`-0 of `g`, committed by [`PRODUCER`] in its transaction from outside the
/// group.
async fn commit_in_transaction(coordinator: &GroupCoordinator, offset: i64) {
    let results = coordinator
        .commit_transactional_offsets(outsider("g"), &[entry("t", 0, offset, "")])
        .await
        .expect("written");
    assert_eq!(results, vec![Ok(())]);
}

/// `offset` for `t`-0 of `g`, committed outside any transaction.
async fn commit_plainly(coordinator: &GroupCoordinator, offset: i64) {
    coordinator
        .commit_offsets("g", -1, "", None, &[entry("t", 0, offset, "")], 9)
        .await
        .expect("commit");
}

async fn end(
    coordinator: &GroupCoordinator,
    group: &str,
    producer: ProducerIdAndEpoch,
    commit: bool,
) {
    coordinator
        .complete_transaction(partition_for(group, PARTITIONS), producer, commit, 0)
        .await
        .expect("marker written");
}

#[tokio::test]
async fn transactional_offsets_count_only_once_their_transaction_commits() {
    let log = Arc::new(MemoryLog::default());
    let first = coordinator(log.clone());
    let results = first
        .commit_transactional_offsets(outsider("g"), &[entry("t", 0, 9, "")])
        .await
        .expect("written");
    assert_eq!(results, vec![Ok(())]);
    assert_eq!(
        committed(&first, "g", false),
        Ok(None),
        "not before the commit"
    );
    assert_eq!(
        committed(&first, "g", true),
        Err(GroupError::UnstableOffsetCommit),
        "a fetch requiring stable offsets waits"
    );

    // A coordinator loading the log before the marker holds the offset as pending too.
    let second = coordinator(log.clone());
    assert_eq!(
        committed(&second, "g", true),
        Err(GroupError::UnstableOffsetCommit)
    );
    end(&second, "g", PRODUCER, true).await;
    assert_eq!(committed(&second, "g", true), Ok(Some(9)));
    assert_eq!(
        committed(&coordinator(log), "g", true),
        Ok(Some(9)),
        "after a reload"
    );
}

#[tokio::test]
async fn aborted_transactional_offsets_never_count() {
    let log = Arc::new(MemoryLog::default());
    let first = coordinator(log.clone());
    commit_plainly(&first, 5).await;
    commit_in_transaction(&first, 9).await;
    assert_eq!(committed(&first, "g", false), Ok(Some(5)));
    end(&first, "g", PRODUCER, false).await;
    assert_eq!(committed(&first, "g", true), Ok(Some(5)));
    assert_eq!(
        committed(&coordinator(log), "g", true),
        Ok(Some(5)),
        "after a reload"
    );
}

#[tokio::test]
async fn a_newer_plain_commit_wins_over_an_older_transactional_one() {
    let log = Arc::new(MemoryLog::default());
    let first = coordinator(log.clone());
    commit_in_transaction(&first, 9).await;
    commit_plainly(&first, 12).await;
    end(&first, "g", PRODUCER, true).await;
    assert_eq!(committed(&first, "g", true), Ok(Some(12)));
    assert_eq!(
        committed(&coordinator(log), "g", true),
        Ok(Some(12)),
        "after a reload"
    );
}

#[tokio::test]
async fn a_fenced_producer_epoch_commits_nothing() {
    let log = Arc::new(MemoryLog::default());
    let first = coordinator(log.clone());
    let newer = ProducerIdAndEpoch {
        producer_id: PRODUCER.producer_id,
        epoch: 1,
    };
    // The transaction of epoch 1 aborted on the partition (fencing the older producer).
    end(&first, "g", newer, false).await;
    let results = first
        .commit_transactional_offsets(outsider("g"), &[entry("t", 0, 9, "")])
        .await
        .expect("answered");
    assert_eq!(results, vec![Err(GroupError::InvalidProducerEpoch)]);
    assert_eq!(committed(&first, "g", true), Ok(None));
    assert_eq!(
        first
            .complete_transaction(partition_for("g", PARTITIONS), PRODUCER, true, 0)
            .await,
        Err(GroupError::InvalidProducerEpoch),
        "nor does its marker"
    );
}

#[tokio::test]
async fn zombie_members_are_fenced() {
    let log = Arc::new(MemoryLog::default());
    let first = coordinator(log.clone());
    let member_id = first.join_and_sync("g").await;
    let member = |generation, member_id| TxnCommit {
        generation,
        member_id,
        ..outsider("g")
    };
    let commit = |request: TxnCommit<'static>| {
        let first = &first;
        async move {
            first
                .commit_transactional_offsets(request, &[entry("t", 0, 3, "")])
                .await
        }
    };
    assert_eq!(
        commit(member(0, "")).await,
        Err(GroupError::UnknownMemberId)
    );
    let id: &'static str = Box::leak(member_id.into_boxed_str());
    assert_eq!(
        commit(member(0, id)).await,
        Err(GroupError::IllegalGeneration),
        "an older generation"
    );
    assert_eq!(
        commit(member(1, id)).await,
        Ok(vec![Ok(())]),
        "the current one"
    );
    assert_eq!(
        commit(member(-1, "")).await,
        Ok(vec![Ok(())]),
        "naming no member (TxnOffsetCommit before version 3)"
    );
    assert_eq!(
        first
            .commit_transactional_offsets(member(1, id), &[entry("t", 0, 3, "too long metadata")])
            .await,
        Ok(vec![Err(GroupError::OffsetMetadataTooLarge)])
    );
}

#[tokio::test]
async fn deleting_a_group_tombstones_what_open_transactions_committed() {
    let log = Arc::new(MemoryLog::default());
    let first = coordinator(log.clone());
    commit_in_transaction(&first, 9).await;
    first.delete_group("g").await.expect("deleted");
    end(&first, "g", PRODUCER, true).await;
    assert_eq!(committed(&first, "g", true), Ok(None));
    assert_eq!(
        committed(&coordinator(log), "g", true),
        Ok(None),
        "after a reload"
    );
}
