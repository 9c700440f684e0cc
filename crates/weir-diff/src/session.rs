//! What one scenario sees of one broker: its connection, the names it may use, and the
//! transcript of answers it records, normalised so that two brokers' transcripts compare.

use std::fmt::Debug;

use anyhow::{bail, Result};
use kafka_protocol::messages::{ApiKey, GroupId, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::wire::{Outcome, Wire};

/// Fields whose values legitimately differ between two brokers (ids a broker makes up,
/// ports, times it stamps). A value is masked only when it is set: 0, -1, empty and null stay
/// as they are, since a broker answering "none" where the other names one is a difference.
const MASKED_FIELDS: &[&str] = &[
    "topic_id",
    "cluster_id",
    "producer_id",
    "member_id",
    "port",
    "log_append_time_ms",
];

/// Values a masked field keeps, because they mean "not set".
const UNSET_VALUES: &[&str] = &[
    "0",
    "-1",
    "\"\"",
    "None",
    "Some(\"\")",
    "00000000-0000-0000-0000-000000000000",
];

/// Constants both brokers' runs of a scenario share.
#[derive(Clone)]
pub struct RunConstants {
    /// Prefix of every topic and group name of this run, so that runs never collide.
    pub prefix: String,
    /// A record timestamp (a minute before the run started) both runs write.
    pub timestamp_ms: i64,
}

/// One scenario's view of one broker.
pub struct Ctx {
    wire: Wire,
    run: RunConstants,
    masks: Vec<&'static str>,
    ignored: Vec<&'static str>,
    lines: Vec<String>,
}

impl Ctx {
    /// A context on a fresh connection to `addr`.
    pub fn new(addr: &str, run: RunConstants) -> Self {
        Self {
            wire: Wire::new(addr),
            run,
            masks: Vec::new(),
            ignored: Vec::new(),
            lines: Vec::new(),
        }
    }

    /// The run's name for `base` (a topic or a group).
    pub fn name(&self, base: &str) -> String {
        format!("{}{base}", self.run.prefix)
    }

    /// The run's topic `base`.
    pub fn topic(&self, base: &str) -> TopicName {
        TopicName(StrBytes::from_string(self.name(base)))
    }

    /// The run's group `base`.
    pub fn group(&self, base: &str) -> GroupId {
        GroupId(StrBytes::from_string(self.name(base)))
    }

    /// The record timestamp both brokers' runs write.
    pub fn timestamp_ms(&self) -> i64 {
        self.run.timestamp_ms
    }

    /// Masks `field` too in this scenario's transcript (a value Kafka documents as opaque).
    pub fn mask(&mut self, field: &'static str) {
        self.masks.push(field);
    }

    /// Leaves `field` out of this scenario's transcript on both sides (a difference another
    /// scenario shows, kept from hiding everything else this one compares).
    pub fn ignore(&mut self, field: &'static str) {
        self.ignored.push(field);
    }

    /// The connection, for scenarios that send what no well-formed request would.
    pub fn wire(&mut self) -> &mut Wire {
        &mut self.wire
    }

    /// Sends `request` and records the answer (or the closed connection) in the transcript;
    /// returns the answer.
    pub async fn ask<Req: Encodable, Resp: Decodable + Debug>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Option<Resp>> {
        let outcome = self.wire.call(key, version, request).await?;
        match outcome {
            Outcome::Answer(response) => {
                self.record(&format!("{key:?} v{version}"), &response);
                Ok(Some(response))
            }
            Outcome::Closed => {
                self.note(&format!("{key:?} v{version}: connection closed"));
                Ok(None)
            }
        }
    }

    /// Like [`Ctx::ask`], for a request that must be answered: a closed connection fails
    /// the scenario.
    pub async fn answer<Req: Encodable, Resp: Decodable + Debug>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp> {
        match self.ask(key, version, request).await? {
            Some(response) => Ok(response),
            None => bail!("{key:?} v{version}: the broker closed the connection"),
        }
    }

    /// Sends `request` without recording anything (setting a scenario up).
    pub async fn quietly<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp> {
        match self.wire.call(key, version, request).await? {
            Outcome::Answer(response) => Ok(response),
            Outcome::Closed => bail!("{key:?} v{version}: the broker closed the connection"),
        }
    }

    /// Records `value` (pretty-printed) under `label`.
    pub fn record(&mut self, label: &str, value: &dyn Debug) {
        self.lines.push(format!("{label}:"));
        let text = format!("{value:#?}");
        for line in text.lines() {
            self.lines.push(format!("  {line}"));
        }
    }

    /// Records one line of text.
    pub fn note(&mut self, text: &str) {
        self.lines.push(text.to_string());
    }

    /// The transcript, normalised: the run's prefix replaced, set ids masked (also when
    /// pretty-printed over several lines, as `Some(` and the value on the next), ignored
    /// fields dropped with everything nested in them.
    pub fn transcript(&self) -> String {
        let mut out = String::new();
        let mut mask_next = false;
        let mut skip_deeper_than: Option<usize> = None;
        for line in &self.lines {
            let line = line.replace(&self.run.prefix, "<run>-");
            let trimmed = line.trim_start();
            let indent = line.len() - trimmed.len();
            if let Some(depth) = skip_deeper_than {
                let closes = indent == depth && trimmed.starts_with([')', ']', '}']);
                if indent > depth || closes {
                    continue;
                }
                skip_deeper_than = None;
            }
            if trimmed == "unknown_tagged_fields: {}," {
                continue;
            }
            if std::mem::take(&mut mask_next) && trimmed != "\"\"," {
                out.push_str(&format!("{}<set>,\n", &line[..indent]));
                continue;
            }
            let Some((field, value)) = trimmed.split_once(": ") else {
                out.push_str(&line);
                out.push('\n');
                continue;
            };
            if self.ignored.contains(&field) {
                if value.ends_with(['(', '[', '{']) {
                    skip_deeper_than = Some(indent);
                }
                continue;
            }
            let masked = MASKED_FIELDS.contains(&field) || self.masks.contains(&field);
            let value = value.trim_end_matches(',');
            if masked && value == "Some(" {
                mask_next = true;
            } else if masked && !UNSET_VALUES.contains(&value) && !value.ends_with(['{', '[', '('])
            {
                out.push_str(&format!("{}{field}: <set>,\n", &line[..indent]));
                continue;
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Ctx {
        Ctx::new(
            "127.0.0.1:1",
            RunConstants {
                prefix: "d1a2b3-".into(),
                timestamp_ms: 0,
            },
        )
    }

    #[test]
    fn masks_set_ids_and_keeps_unset_ones() {
        let mut cx = ctx();
        cx.note("    topic_id: 67e55044-10b1-426f-9247-bb680e5fe0c8,");
        cx.note("    topic_id: 00000000-0000-0000-0000-000000000000,");
        cx.note("    member_id: \"\",");
        cx.note("    member_id: \"rdkafka-1\",");
        cx.note("    producer_id: -1,");
        cx.note("    name: TopicName(\"d1a2b3-orders\"),");
        cx.note("    error_code: 3,");
        assert_eq!(
            cx.transcript(),
            "    topic_id: <set>,\n\
             \x20   topic_id: 00000000-0000-0000-0000-000000000000,\n\
             \x20   member_id: \"\",\n\
             \x20   member_id: <set>,\n\
             \x20   producer_id: -1,\n\
             \x20   name: TopicName(\"<run>-orders\"),\n\
             \x20   error_code: 3,\n"
        );
    }

    #[test]
    fn scenario_masks_add_to_the_defaults() {
        let mut cx = ctx();
        cx.mask("member_epoch");
        cx.note("  member_epoch: 2,");
        cx.note("  member_epoch: -1,");
        assert_eq!(
            cx.transcript(),
            "  member_epoch: <set>,\n  member_epoch: -1,\n"
        );
    }

    #[test]
    fn masks_values_printed_over_lines_and_drops_ignored_fields() {
        let mut cx = ctx();
        cx.ignore("error_message");
        for line in [
            "  cluster_id: Some(",
            "      \"TcLvOKiZTESMVQVwxfceIw\",",
            "  ),",
            "  error_message: Some(",
            "      \"why\",",
            "  ),",
            "  error_message: None,",
            "  error_code: 0,",
        ] {
            cx.note(line);
        }
        assert_eq!(
            cx.transcript(),
            "  cluster_id: Some(\n      <set>,\n  ),\n  error_code: 0,\n"
        );
    }
}
