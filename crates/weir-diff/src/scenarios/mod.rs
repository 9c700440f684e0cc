//! The scenarios, by API area. Each sends the same requests to a broker and records what it
//! answers; the runner compares Kafka's transcript with Weir's.

use std::future::Future;
use std::pin::Pin;

use anyhow::Result;

use crate::session::Ctx;

mod cluster;
mod configs;
mod consumer_groups;
mod groups;
mod offsets;
mod produce_fetch;
mod share_groups;
mod topics;
mod transactions;

/// What the runner expects of a scenario's two transcripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The brokers answer alike.
    Same,
    /// Weir answers differently on purpose; the reason is listed in
    /// `docs/kafka-differences.md`.
    Deliberate(&'static str),
    /// A difference not closed yet; listed in `docs/kafka-differences.md` with what is missing.
    Pending(&'static str),
}

/// A scenario's body: runs against one broker, recording into its context.
pub type Body = for<'a> fn(&'a mut Ctx) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;

/// One scenario.
pub struct Scenario {
    /// A stable name (`area::what`), used to select it and in the differences list.
    pub name: String,
    /// What it asks, in a line.
    pub about: &'static str,
    /// What the runner expects of the comparison.
    pub expect: Expect,
    /// The requests.
    pub body: Body,
}

/// Declares an area's scenarios: `name: expect, "about";` for each `async fn name(&mut Ctx)`.
macro_rules! scenarios {
    ($area:literal; $($name:ident: $expect:expr, $about:literal;)*) => {
        /// This area's scenarios.
        pub fn scenarios() -> Vec<$crate::scenarios::Scenario> {
            vec![$($crate::scenarios::Scenario {
                name: format!("{}::{}", $area, stringify!($name)),
                about: $about,
                expect: $expect,
                body: |cx| Box::pin($name(cx)),
            }),*]
        }
    };
}
pub(crate) use scenarios;

/// Every scenario, in the order they run.
pub fn all() -> Vec<Scenario> {
    [
        cluster::scenarios(),
        topics::scenarios(),
        configs::scenarios(),
        produce_fetch::scenarios(),
        offsets::scenarios(),
        transactions::scenarios(),
        groups::scenarios(),
        consumer_groups::scenarios(),
        share_groups::scenarios(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_difference_is_documented() {
        let doc = include_str!("../../../../docs/kafka-differences.md");
        let scenarios = all();
        let mut names: Vec<&str> = scenarios.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count, "two scenarios share a name");
        for scenario in &scenarios {
            if scenario.expect != Expect::Same {
                assert!(
                    doc.contains(&format!("`{}`", scenario.name)),
                    "{} is expected to differ but docs/kafka-differences.md does not list it",
                    scenario.name
                );
            }
        }
    }
}
