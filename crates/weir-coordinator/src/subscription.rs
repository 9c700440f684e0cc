//! The topics in a Kafka consumer's subscription (`ConsumerProtocolSubscription`, versions
//! 0–3: a version, then an array of topic names, then fields the coordinator does not need).

/// The subscribed topics, or none when the bytes are not a consumer subscription.
pub fn topics(metadata: &[u8]) -> Vec<String> {
    parse(metadata).unwrap_or_default()
}

fn parse(bytes: &[u8]) -> Option<Vec<String>> {
    let version = i16::from_be_bytes(bytes.get(0..2)?.try_into().ok()?);
    if !(0..=3).contains(&version) {
        return None;
    }
    let count = i32::from_be_bytes(bytes.get(2..6)?.try_into().ok()?);
    let mut position = 6;
    let mut topics = Vec::new();
    for _ in 0..count.max(0) {
        let length = i16::from_be_bytes(bytes.get(position..position + 2)?.try_into().ok()?);
        position += 2;
        let length = usize::try_from(length).ok()?;
        let name = bytes.get(position..position + length)?;
        position += length;
        topics.push(String::from_utf8(name.to_vec()).ok()?);
    }
    Some(topics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_topics_of_a_v1_subscription() {
        let mut bytes = vec![0, 1, 0, 0, 0, 2, 0, 1, b'a', 0, 2, b'b', b'c'];
        bytes.extend_from_slice(&(-1i32).to_be_bytes()); // null user data
        bytes.extend_from_slice(&0i32.to_be_bytes()); // owned partitions
        assert_eq!(topics(&bytes), ["a", "bc"]);
        assert!(topics(&bytes[..9]).is_empty());
        assert!(topics(&[0, 9, 0, 0, 0, 0]).is_empty());
    }
}
