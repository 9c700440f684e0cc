//! What fencing a broker, or its return, changes in the partitions: pure decisions over an
//! image, which the controller commits.

use weir_metadata::{MetadataImage, PartitionChange, PartitionImage, TopicImage, NO_LEADER};

use crate::election::{partition_change, UncleanDefaults};

fn change(topic: &TopicImage, index: usize, leader: i32, isr: Vec<i32>) -> PartitionChange {
    partition_change(topic.topic_id, index as i32, leader, isr, None)
}

/// Every partition of `image` with its topic and index.
fn partitions(
    image: &MetadataImage,
) -> impl Iterator<Item = (&TopicImage, usize, &PartitionImage)> {
    image.topics().flat_map(|topic| {
        topic
            .partitions
            .iter()
            .enumerate()
            .map(move |(index, partition)| (topic, index, partition))
    })
}

/// What fencing `node_id` changes: it leaves every ISR, and each partition it led gets the
/// first other in-sync replica (in replica order) that is alive. Without one, an unclean
/// election (when the topic allows it) picks the first live replica; otherwise the partition
/// has no leader and keeps `node_id` as its last in-sync replica, so that replica leads again
/// when it returns and nothing acknowledged is lost.
pub fn fence(
    image: &MetadataImage,
    node_id: i32,
    unclean: UncleanDefaults,
) -> Vec<PartitionChange> {
    let alive = |id: i32| id != node_id && image.is_alive(id);
    partitions(image)
        .filter(|(_, _, p)| p.leader == node_id || p.isr.contains(&node_id))
        .map(|(topic, index, p)| {
            let mut isr: Vec<i32> = p.isr.iter().copied().filter(|id| *id != node_id).collect();
            if p.leader != node_id {
                return change(topic, index, p.leader, isr);
            }
            let in_sync = p
                .replicas
                .iter()
                .copied()
                .find(|id| isr.contains(id) && alive(*id));
            let leader = match in_sync {
                Some(leader) => leader,
                None => match p.replicas.iter().copied().find(|id| alive(*id)) {
                    Some(id) if unclean.allow(image, topic) => {
                        isr = vec![id];
                        id
                    }
                    _ => {
                        if isr.is_empty() {
                            isr = vec![node_id];
                        }
                        NO_LEADER
                    }
                },
            };
            change(topic, index, leader, isr)
        })
        .filter(|c| {
            let p =
                &image.topic_by_id(c.topic_id).expect("listed").partitions[c.partition as usize];
            c.leader != p.leader || c.isr != p.isr
        })
        .collect()
}

/// What the return of fenced broker `node_id` changes: each leaderless partition whose ISR
/// holds it gets it as leader, as does one that allows an unclean election and has it as a
/// replica (with it alone in sync).
pub fn unfence(
    image: &MetadataImage,
    node_id: i32,
    unclean: UncleanDefaults,
) -> Vec<PartitionChange> {
    partitions(image)
        .filter(|(_, _, p)| p.leader == NO_LEADER && p.replicas.contains(&node_id))
        .filter_map(|(topic, index, p)| {
            if p.isr.contains(&node_id) {
                Some(change(topic, index, node_id, p.isr.clone()))
            } else if unclean.allow(image, topic) {
                Some(change(topic, index, node_id, vec![node_id]))
            } else {
                None
            }
        })
        .collect()
}
