//! Deterministic simulation of replication and leader election. Three brokers each hold a real
//! [`Partition`] (its log on disk, its `Replication` state, high watermark, truncation), and a
//! controller makes the real decisions (`isr_change`, `fence`, `unfence`, `Leases`) over a real
//! `MetadataImage`; everything between them and an `acks=all` producer is a message through a
//! simulated network that delays, loses and cuts, on a virtual clock, in an order drawn from
//! one seed. Faults strike at seeded times: leader and follower crashes (the log stays as the
//! process left it), a follower cut off past `replica.lag.time.max.ms`, a leader isolated from
//! the controller and its followers while clients still reach it, a divergent old leader
//! returning, controlled shutdowns. At the end the network heals and every node restarts; the
//! checker then requires every acknowledged write at its acknowledged offset in the leader's
//! log and every replica's log identical (offsets, values, leader epochs).
//!
//! A failure names its scenario and seed; `WEIR_SIM_SEED=N` replays that seed alone and
//! `WEIR_SIM_RUNS=N` runs more seeds per scenario. The metadata quorum itself (Raft elections,
//! a controller's death) is proven by the quorum tests and the process-level fault harness.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_broker::config::{BrokerConfig, DynamicConfigs, TopicSettings};
use weir_broker::partition::Partition;
use weir_broker::replication::{check_replica, divergence, refusal_is_final, IsrRequest};
use weir_controller::election::UncleanDefaults;
use weir_controller::fencing::{fence, unfence};
use weir_controller::leases::Leases;
use weir_controller::liveness::isr_change;
use weir_log::batch::{build_batch, ProducerFields};
use weir_log::{validate, BatchHeader, Log, ManualClock, ValidationLimits};
use weir_metadata::{
    AlterPartition, BrokerListener, ControllerError, MetadataCommand, MetadataImage,
    PartitionImage, Uuid, NO_LEADER,
};
use weir_storage::{FileCache, FsStorage};

const NODES: [i32; 3] = [1, 2, 3];
const TOPIC: &str = "sim";
const TOPIC_ID: Uuid = Uuid::from_u128(0x5133);
/// Timings in virtual milliseconds.
const HEARTBEAT_MS: u64 = 300;
const SESSION_TIMEOUT_MS: u64 = 2_000;
const LAG_MAX_MS: u64 = 3_000;
const ISR_CHECK_MS: u64 = LAG_MAX_MS / 4;
const LEASE_CHECK_MS: u64 = 250;
const NODE_TICK_MS: u64 = 50;
const FETCH_TIMEOUT_MS: u64 = 2_000;
const ISR_ASK_TIMEOUT_MS: u64 = 2_000;
const PRODUCE_EVERY_MS: u64 = 20;
const PRODUCE_TIMEOUT_MS: u64 = 3_000;
const PRODUCES_IN_FLIGHT_MAX: usize = 4;
/// Faults stop and every node is back this long before the end; writes stop a little later.
const QUIET_MS: u64 = 15_000;
const WRITES_STOP_BEFORE_END_MS: u64 = 8_000;

/// SplitMix64: small, fast, and the same sequence for the same seed everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next() % items.len() as u64) as usize]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Endpoint {
    Controller,
    Node(i32),
    Client,
}

/// Who a fault strikes, resolved when it fires.
#[derive(Debug, Clone, Copy)]
enum Target {
    Leader,
    Follower,
    /// The leader an `Isolate` cut off last.
    Isolated,
    /// The follower a `CutFollower` cut off last.
    Cut,
    Node(i32),
}

#[derive(Debug, Clone)]
enum Fault {
    /// kill -9: the process stops; its log stays as written.
    Crash(Target),
    /// kill -9 of every node but the target, at once.
    CrashOthers(Target),
    /// SIGTERM: controlled shutdown first, then the process stops.
    Stop(Target),
    /// Every stopped node starts again.
    RestartAll,
    /// The links between the node and each of the others (and the controller) are cut.
    Isolate(Target, bool),
    /// The link between a follower and its leader is cut.
    CutFollower,
    /// When the follower cut last is next added back to the ISR, its leader is cut off from
    /// the controller and from that follower at the moment the change commits, so the leader
    /// never hears that it did.
    LoseTheNextExpansion,
    /// A client starts posing as the follower `CutFollower` cut last, fetching as that replica
    /// from the leader's log end (to move the high watermark past writes that follower lacks),
    /// with no broker epoch or a guessed one.
    ForgeReplicaFetches,
    HealAll,
}

#[derive(Debug)]
enum Message {
    Register,
    Registered(u64, Arc<MetadataImage>),
    Heartbeat(u64),
    HeartbeatAnswer(Option<Arc<MetadataImage>>),
    ControlledShutdown(u64),
    AlterIsr(AlterPartition),
    AlterIsrAnswer(IsrRequest, Result<(), ControllerError>, Arc<MetadataImage>),
    Image(Arc<MetadataImage>),
    Fetch {
        id: u64,
        /// The replica the fetch names, and the broker epoch it proves that with (KIP-903;
        /// `None` as in a Fetch before v15).
        replica: i32,
        replica_epoch: Option<i64>,
        fetch_offset: i64,
        last_fetched_epoch: i32,
        leader_epoch: i32,
    },
    FetchAnswer {
        id: u64,
        outcome: FetchOutcome,
    },
    WhoLeads,
    Leads(i32),
    Produce {
        id: u64,
        value: u64,
    },
    ProduceAnswer {
        id: u64,
        acked: Option<Ack>,
    },
}

#[derive(Debug, Clone)]
enum FetchOutcome {
    Refused,
    Diverging(i32, i64),
    Records(Bytes, i64),
}

/// An acknowledged write: where it is, who acknowledged it and when that leader appended it.
#[derive(Debug, Clone, Copy)]
struct Ack {
    offset: i64,
    by: i32,
    appended_at: u64,
}

#[derive(Debug)]
enum Event {
    Deliver {
        from: Endpoint,
        to: Endpoint,
        incarnation: u32,
        message: Message,
    },
    NodeTick(i32),
    ControllerTick,
    ProducerTick,
    ForgerTick,
    Fault(Fault),
}

/// A produce waiting for the high watermark.
struct Waiting {
    id: u64,
    end: i64,
    offset: i64,
    appended_at: u64,
    deadline: u64,
}

struct Node {
    id: i32,
    dir: PathBuf,
    up: bool,
    incarnation: u32,
    partition: Option<Arc<Partition>>,
    image: Arc<MetadataImage>,
    broker_epoch: Option<u64>,
    next_heartbeat: u64,
    next_isr_check: u64,
    /// The fetch in flight: (id, deadline, leader, leader epoch).
    fetch: Option<(u64, u64, i32, i32)>,
    isr_asks: Vec<(IsrRequest, u64)>,
    waiting: Vec<Waiting>,
}

struct Controller {
    image: MetadataImage,
    leases: Leases,
}

/// What a run observed, for the scenarios' own assertions.
#[derive(Default)]
struct Observed {
    smallest_isr: usize,
    leaders: BTreeSet<i32>,
    /// (node, since, until): a leader cut off from the controller and its followers.
    isolated: Option<(i32, u64, u64)>,
    acks_after_isolation: Vec<Ack>,
    /// The follower `CutFollower` cut last.
    cut_follower: Option<i32>,
    /// The follower whose return to the ISR `LoseTheNextExpansion` waits for.
    trap: Option<i32>,
    /// An expansion was committed unknown to its leader.
    expansion_lost: bool,
    /// The first offset acknowledged for two different writes (the first was lost).
    acknowledged_twice: Option<String>,
    /// Writes the isolated leader appended while cut off (a divergent tail).
    appended_while_isolated: usize,
    truncations: usize,
    /// The replica a client posed as, and its forged fetches sent and taken as that replica's.
    forged_as: Option<i32>,
    forged_fetches: usize,
    forged_fetches_taken: usize,
}

struct Sim {
    rng: Rng,
    now: u64,
    end: u64,
    base: Instant,
    clock: ManualClock,
    settings: TopicSettings,
    queue: BTreeMap<(u64, u64), Event>,
    sequence: u64,
    cut: BTreeSet<(Endpoint, Endpoint)>,
    loss_percent: u64,
    nodes: Vec<Node>,
    controller: Controller,
    leader_known: Option<i32>,
    in_flight: BTreeMap<u64, (u64, u64)>,
    next_id: u64,
    acked: BTreeMap<i64, u64>,
    observed: Observed,
    trace: VecDeque<String>,
    _dir: tempfile::TempDir,
}

impl Sim {
    fn new(seed: u64, duration_ms: u64) -> Sim {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = BrokerConfig::from_properties(&BTreeMap::new()).expect("config");
        let overrides = BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]);
        let settings = config.topic_settings(DynamicConfigs::none(), &overrides);
        let mut leases = Leases::default();
        let base = Instant::now();
        leases.set_leading(true, base);
        let nodes = NODES
            .iter()
            .map(|&id| Node {
                id,
                dir: dir.path().join(format!("node-{id}")),
                up: false,
                incarnation: 0,
                partition: None,
                image: Arc::new(MetadataImage::default()),
                broker_epoch: None,
                next_heartbeat: 0,
                next_isr_check: 0,
                fetch: None,
                isr_asks: Vec::new(),
                waiting: Vec::new(),
            })
            .collect();
        let mut sim = Sim {
            rng: Rng(seed),
            now: 0,
            end: duration_ms * 1000,
            base,
            clock: ManualClock::new(1_700_000_000_000),
            settings,
            queue: BTreeMap::new(),
            sequence: 0,
            cut: BTreeSet::new(),
            loss_percent: 0,
            nodes,
            controller: Controller {
                image: MetadataImage::default(),
                leases,
            },
            leader_known: None,
            in_flight: BTreeMap::new(),
            next_id: 0,
            acked: BTreeMap::new(),
            observed: Observed {
                smallest_isr: NODES.len(),
                ..Observed::default()
            },
            trace: VecDeque::new(),
            _dir: dir,
        };
        for id in NODES {
            sim.start_node(id);
        }
        sim.at(0, Event::ControllerTick);
        sim.at(100_000, Event::ProducerTick);
        sim
    }

    fn instant(&self) -> Instant {
        self.base + Duration::from_micros(self.now)
    }

    fn at(&mut self, time: u64, event: Event) {
        self.sequence += 1;
        self.queue.insert((time, self.sequence), event);
    }

    fn after_ms(&mut self, ms: u64, event: Event) {
        self.at(self.now + ms * 1000, event);
    }

    fn fault_at_ms(&mut self, ms: u64, fault: Fault) {
        self.at(ms * 1000, Event::Fault(fault));
    }

    fn note(&mut self, what: String) {
        if self.trace.len() == 200 {
            self.trace.pop_front();
        }
        self.trace
            .push_back(format!("{:>9.3}s {what}", self.now as f64 / 1e6));
    }

    fn node(&mut self, id: i32) -> &mut Node {
        &mut self.nodes[(id - 1) as usize]
    }

    /// Sends `message`: delivered after a seeded delay unless the link is cut (at sending or
    /// at delivery), the loss draw drops it, or the receiving process restarted meanwhile.
    fn send(&mut self, from: Endpoint, to: Endpoint, message: Message) {
        if self.is_cut(from, to) || self.rng.chance(self.loss_percent) {
            return;
        }
        let incarnation = match to {
            Endpoint::Node(id) => self.node(id).incarnation,
            _ => 0,
        };
        let delay = self.rng.between(200, 15_000);
        self.at(
            self.now + delay,
            Event::Deliver {
                from,
                to,
                incarnation,
                message,
            },
        );
    }

    fn is_cut(&self, a: Endpoint, b: Endpoint) -> bool {
        self.cut.contains(&(a, b)) || self.cut.contains(&(b, a))
    }

    fn partition_image(image: &MetadataImage) -> Option<PartitionImage> {
        image.topic(TOPIC).map(|t| t.partitions[0].clone())
    }

    fn current_leader(&self) -> i32 {
        Self::partition_image(&self.controller.image).map_or(NO_LEADER, |p| p.leader)
    }

    fn resolve(&mut self, target: Target) -> Option<i32> {
        let leader = self.current_leader();
        match target {
            Target::Node(id) => Some(id),
            Target::Isolated => self.observed.isolated.map(|(id, _, _)| id),
            Target::Cut => self.observed.cut_follower,
            Target::Leader => (leader != NO_LEADER).then_some(leader),
            Target::Follower => {
                let followers: Vec<i32> = NODES
                    .iter()
                    .copied()
                    .filter(|id| *id != leader && self.nodes[(*id - 1) as usize].up)
                    .collect();
                (!followers.is_empty()).then(|| self.rng.pick(&followers))
            }
        }
    }

    /// Runs every event until the end.
    fn run(&mut self) {
        while let Some(((time, _), event)) = self.queue.pop_first() {
            if time > self.end {
                break;
            }
            let advanced_ms = (time / 1000).saturating_sub(self.now / 1000);
            self.clock.advance(Duration::from_millis(advanced_ms));
            self.now = time;
            self.handle(event);
            self.answer_waiting_produces();
            self.observe();
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver {
                from,
                to,
                incarnation,
                message,
            } => {
                if self.is_cut(from, to) {
                    return;
                }
                match to {
                    Endpoint::Controller => self.controller_receives(from, message),
                    Endpoint::Node(id) => {
                        let node = self.node(id);
                        if node.up && node.incarnation == incarnation {
                            self.node_receives(id, from, message);
                        }
                    }
                    Endpoint::Client => self.client_receives(message),
                }
            }
            Event::NodeTick(id) => self.node_tick(id),
            Event::ControllerTick => self.controller_tick(),
            Event::ProducerTick => self.producer_tick(),
            Event::ForgerTick => self.forger_tick(),
            Event::Fault(fault) => self.inject(fault),
        }
    }

    fn observe(&mut self) {
        if let Some(p) = Self::partition_image(&self.controller.image) {
            self.observed.smallest_isr = self.observed.smallest_isr.min(p.isr.len());
            if p.leader != NO_LEADER {
                self.observed.leaders.insert(p.leader);
            }
        }
    }

    // ---- faults ----

    fn inject(&mut self, fault: Fault) {
        match fault {
            Fault::Crash(target) => {
                if let Some(id) = self.resolve(target) {
                    self.crash(id, "crashed (kill -9)");
                }
            }
            Fault::CrashOthers(target) => {
                if let Some(spared) = self.resolve(target) {
                    for id in NODES.into_iter().filter(|id| *id != spared) {
                        self.crash(id, "crashed (kill -9)");
                    }
                }
            }
            Fault::Stop(target) => {
                if let Some(id) = self.resolve(target) {
                    if let Some(epoch) = self.node(id).broker_epoch {
                        let message = Message::ControlledShutdown(epoch);
                        self.send(Endpoint::Node(id), Endpoint::Controller, message);
                    }
                    self.note(format!("node {id} shutting down (SIGTERM)"));
                    self.after_ms(500, Event::Fault(Fault::Crash(Target::Node(id))));
                }
            }
            Fault::RestartAll => {
                for id in NODES {
                    if !self.node(id).up {
                        self.start_node(id);
                    }
                }
            }
            Fault::Isolate(target, from_clients) => {
                let Some(id) = self.resolve(target) else {
                    return;
                };
                let mut others = vec![Endpoint::Controller];
                others.extend(
                    NODES
                        .iter()
                        .filter(|n| **n != id)
                        .map(|n| Endpoint::Node(*n)),
                );
                if from_clients {
                    others.push(Endpoint::Client);
                } else if self.current_leader() == id {
                    self.observed.isolated = Some((id, self.now, u64::MAX));
                }
                for other in others {
                    self.cut.insert((Endpoint::Node(id), other));
                }
                self.note(format!(
                    "node {id} isolated (clients cut too: {from_clients})"
                ));
            }
            Fault::CutFollower => {
                let leader = self.current_leader();
                if let (Some(follower), true) =
                    (self.resolve(Target::Follower), leader != NO_LEADER)
                {
                    self.cut
                        .insert((Endpoint::Node(follower), Endpoint::Node(leader)));
                    self.observed.cut_follower = Some(follower);
                    self.note(format!("link {follower}-{leader} (follower-leader) cut"));
                }
            }
            Fault::LoseTheNextExpansion => self.observed.trap = self.observed.cut_follower,
            Fault::ForgeReplicaFetches => {
                if let Some(follower) = self.observed.cut_follower {
                    self.observed.forged_as = Some(follower);
                    self.note(format!("a client poses as replica {follower}"));
                    self.after_ms(0, Event::ForgerTick);
                }
            }
            Fault::HealAll => {
                if let Some((_, _, until)) = &mut self.observed.isolated {
                    *until = (*until).min(self.now);
                }
                self.cut.clear();
                self.loss_percent = 0;
                self.note("network healed".into());
            }
        }
    }

    fn crash(&mut self, id: i32, why: &str) {
        let node = self.node(id);
        if !node.up {
            return;
        }
        node.up = false;
        node.partition = None;
        node.waiting.clear();
        node.isr_asks.clear();
        node.fetch = None;
        node.incarnation += 1;
        self.note(format!("node {id} {why}"));
    }

    /// Starts node `id` over what its previous process left in its directory.
    fn start_node(&mut self, id: i32) {
        let settings = self.settings;
        let clock = Arc::new(self.clock.clone());
        let now = self.now;
        let node = self.node(id);
        let dir = node.dir.join(format!("{TOPIC}-0"));
        std::fs::create_dir_all(&dir).expect("partition dir");
        let files = FileCache::new(Arc::new(FsStorage), 64);
        let (log, _) = Log::open(&dir, files, clock, settings.log).expect("open log");
        node.partition = Some(Arc::new(Partition::new(
            TOPIC.into(),
            TOPIC_ID,
            0,
            dir,
            log,
            settings,
        )));
        node.up = true;
        node.incarnation += 1;
        node.image = Arc::new(MetadataImage::default());
        node.broker_epoch = None;
        node.next_heartbeat = now;
        node.next_isr_check = now;
        self.note(format!("node {id} started"));
        self.after_ms(0, Event::NodeTick(id));
    }

    // ---- controller ----

    fn commit(&mut self, command: MetadataCommand) {
        self.controller.image.apply(&command);
        let image = Arc::new(self.controller.image.clone());
        if let Some(p) = Self::partition_image(&image) {
            let line = format!(
                "controller: leader {} epoch {} isr {:?} ({})",
                p.leader,
                p.leader_epoch,
                p.isr,
                command_name(&command)
            );
            self.note(line);
        }
        for id in NODES {
            self.send(
                Endpoint::Controller,
                Endpoint::Node(id),
                Message::Image(image.clone()),
            );
        }
    }

    fn controller_tick(&mut self) {
        self.after_ms(LEASE_CHECK_MS, Event::ControllerTick);
        let timeout = Duration::from_millis(SESSION_TIMEOUT_MS);
        let now = self.instant();
        let mut expired = self
            .controller
            .leases
            .expired(&self.controller.image, timeout, now);
        expired.sort_unstable();
        for node_id in expired {
            let changes = fence(&self.controller.image, node_id, UncleanDefaults::default());
            self.commit(MetadataCommand::FenceBroker { node_id, changes });
        }
        let registered = NODES
            .iter()
            .all(|id| self.controller.image.broker(*id).is_some());
        if registered && self.controller.image.topic(TOPIC).is_none() {
            self.commit(MetadataCommand::CreateTopic {
                name: TOPIC.into(),
                topic_id: TOPIC_ID,
                partitions: 1,
                replication_factor: NODES.len() as i16,
                configs: BTreeMap::from([("min.insync.replicas".into(), "2".into())]),
                assignments: vec![NODES.to_vec()],
            });
        }
    }

    fn controller_receives(&mut self, from: Endpoint, message: Message) {
        let Endpoint::Node(node_id) = from else {
            return;
        };
        let epoch_current = |image: &MetadataImage, epoch: u64| {
            image.broker(node_id).is_some_and(|b| b.epoch == epoch)
        };
        match message {
            Message::Register => {
                if self
                    .controller
                    .image
                    .broker(node_id)
                    .is_some_and(|b| !b.fenced)
                {
                    let changes =
                        fence(&self.controller.image, node_id, UncleanDefaults::default());
                    self.commit(MetadataCommand::FenceBroker { node_id, changes });
                }
                let incarnation_id = Uuid::from_u128(u128::from(self.rng.next()));
                self.commit(MetadataCommand::RegisterBroker {
                    node_id,
                    incarnation_id,
                    listeners: vec![BrokerListener {
                        name: "PLAINTEXT".into(),
                        host: "sim".into(),
                        port: 9092,
                    }],
                    rack: None,
                });
                let epoch = self
                    .controller
                    .image
                    .broker(node_id)
                    .expect("registered")
                    .epoch;
                self.controller.leases.renew(node_id, self.instant());
                let image = Arc::new(self.controller.image.clone());
                self.send(
                    from,
                    Endpoint::Node(node_id),
                    Message::Registered(epoch, image),
                );
            }
            Message::Heartbeat(epoch) => {
                if !epoch_current(&self.controller.image, epoch) {
                    self.send(Endpoint::Controller, from, Message::HeartbeatAnswer(None));
                    return;
                }
                self.controller.leases.renew(node_id, self.instant());
                if self
                    .controller
                    .image
                    .broker(node_id)
                    .is_some_and(|b| b.fenced)
                {
                    let changes =
                        unfence(&self.controller.image, node_id, UncleanDefaults::default());
                    self.commit(MetadataCommand::UnfenceBroker { node_id, changes });
                }
                let image = Arc::new(self.controller.image.clone());
                self.send(
                    Endpoint::Controller,
                    from,
                    Message::HeartbeatAnswer(Some(image)),
                );
            }
            Message::ControlledShutdown(epoch)
                if epoch_current(&self.controller.image, epoch)
                    && self
                        .controller
                        .image
                        .broker(node_id)
                        .is_some_and(|b| !b.fenced) =>
            {
                let changes = fence(&self.controller.image, node_id, UncleanDefaults::default());
                self.commit(MetadataCommand::FenceBroker { node_id, changes });
                self.controller.leases.forget(node_id);
            }
            Message::AlterIsr(request) => {
                let asked = IsrRequest {
                    isr: request.isr.clone(),
                    leader_epoch: request.leader_epoch,
                    partition_epoch: request.partition_epoch,
                };
                let answer = isr_change(&self.controller.image, &request).map(|change| {
                    if let Some(change) = change {
                        self.spring_trap(&request, &change.isr);
                        self.commit(MetadataCommand::ChangePartitions {
                            changes: vec![change],
                        });
                    }
                });
                let image = Arc::new(self.controller.image.clone());
                self.send(
                    Endpoint::Controller,
                    from,
                    Message::AlterIsrAnswer(asked, answer, image),
                );
            }
            _ => {}
        }
    }

    /// Cuts the leader off as `LoseTheNextExpansion` asks, when `isr` adds its follower.
    fn spring_trap(&mut self, request: &AlterPartition, isr: &[i32]) {
        let Some(follower) = self.observed.trap else {
            return;
        };
        let before = Self::partition_image(&self.controller.image).map(|p| p.isr);
        if !isr.contains(&follower) || before.is_some_and(|isr| isr.contains(&follower)) {
            return;
        }
        let leader = Endpoint::Node(request.leader);
        self.cut.insert((Endpoint::Controller, leader));
        self.cut.insert((Endpoint::Node(follower), leader));
        self.observed.trap = None;
        self.observed.expansion_lost = true;
        self.note(format!(
            "follower {follower} back in the ISR; leader {} cut off before it hears so",
            request.leader
        ));
    }

    // ---- brokers ----

    fn apply_image(&mut self, id: i32, image: Arc<MetadataImage>) {
        let now = self.instant();
        let node = self.node(id);
        if image.applied_count <= node.image.applied_count {
            return;
        }
        node.image = image.clone();
        if let (Some(partition), Some(state)) = (&node.partition, Self::partition_image(&image)) {
            partition.follow(&state, id, now);
        }
    }

    fn node_tick(&mut self, id: i32) {
        if !self.node(id).up {
            return;
        }
        self.after_ms(NODE_TICK_MS, Event::NodeTick(id));
        let now = self.now;
        let me = Endpoint::Node(id);
        let node = self.node(id);
        if now >= node.next_heartbeat {
            node.next_heartbeat = now + HEARTBEAT_MS * 1000;
            let message = match node.broker_epoch {
                Some(epoch) => Message::Heartbeat(epoch),
                None => Message::Register,
            };
            self.send(me, Endpoint::Controller, message);
        }
        let node = self.node(id);
        let Some(partition) = node.partition.clone() else {
            return;
        };
        // An ask not answered in time is sent again while it is still pending, as the broker
        // does: the controller may have made the change.
        let (expired, kept): (Vec<_>, Vec<_>) = node
            .isr_asks
            .drain(..)
            .partition(|(_, deadline)| *deadline <= now);
        node.isr_asks = kept;
        for (request, _) in expired {
            if partition.isr_request_pending(&request) {
                self.ask_isr_change(id, request);
            }
        }
        let node = self.node(id);
        if now >= node.next_isr_check {
            node.next_isr_check = now + ISR_CHECK_MS * 1000;
            if partition.is_leader() {
                let lag = Duration::from_millis(LAG_MAX_MS);
                if let Some(request) = partition.lagging_followers(lag, self.instant()) {
                    self.ask_isr_change(id, request);
                }
            }
        }
        if self
            .node(id)
            .fetch
            .is_some_and(|(_, deadline, _, _)| deadline <= now)
        {
            self.node(id).fetch = None;
        }
        if self.node(id).fetch.is_none() {
            self.fetch_from_leader(id);
        }
    }

    fn ask_isr_change(&mut self, id: i32, request: IsrRequest) {
        let node = self.node(id);
        let (Some(broker_epoch), Some(partition)) = (node.broker_epoch, &node.partition) else {
            return;
        };
        let change = AlterPartition {
            topic_id: partition.topic_id,
            partition: 0,
            leader: id,
            broker_epoch,
            leader_epoch: request.leader_epoch,
            partition_epoch: request.partition_epoch,
            isr: request.isr.clone(),
        };
        let deadline = self.now + ISR_ASK_TIMEOUT_MS * 1000;
        self.node(id).isr_asks.push((request, deadline));
        self.send(
            Endpoint::Node(id),
            Endpoint::Controller,
            Message::AlterIsr(change),
        );
    }

    /// A follower fetches from the leader its image names, from its log end.
    fn fetch_from_leader(&mut self, id: i32) {
        let node = self.node(id);
        let Some(partition) = node.partition.clone() else {
            return;
        };
        let state = partition.state();
        if state.leader == id || state.leader == NO_LEADER || !state.replicas.contains(&id) {
            return;
        }
        let (fetch_offset, last_fetched_epoch) = {
            let log = partition.log();
            (log.log_end_offset(), log.last_fetched_epoch())
        };
        self.next_id += 1;
        let fetch_id = self.next_id;
        let deadline = self.now + FETCH_TIMEOUT_MS * 1000;
        self.node(id).fetch = Some((fetch_id, deadline, state.leader, state.leader_epoch));
        let message = Message::Fetch {
            id: fetch_id,
            replica: id,
            replica_epoch: self
                .node(id)
                .broker_epoch
                .and_then(|e| i64::try_from(e).ok()),
            fetch_offset,
            last_fetched_epoch,
            leader_epoch: state.leader_epoch,
        };
        self.send(Endpoint::Node(id), Endpoint::Node(state.leader), message);
    }

    /// The client posing as a replica: every few milliseconds, while faults go on, a fetch as
    /// that replica at the leader's log end and last epoch, as if it had everything. Its
    /// broker epoch is missing (an old Fetch version) or guessed: the registration's
    /// position in the log, its neighbours, or anything.
    fn forger_tick(&mut self) {
        let Some(posing_as) = self.observed.forged_as else {
            return;
        };
        if self.now + QUIET_MS * 1000 >= self.end {
            return;
        }
        self.after_ms(10, Event::ForgerTick);
        let leader = self.current_leader();
        if leader == NO_LEADER || leader == posing_as {
            return;
        }
        let Some(partition) = self.node(leader).partition.clone() else {
            return;
        };
        let (fetch_offset, last_fetched_epoch, leader_epoch) = {
            let log = partition.log();
            (
                log.log_end_offset(),
                log.last_fetched_epoch(),
                log.leader_epoch(),
            )
        };
        let position = self.controller.image.applied_count as i64;
        let replica_epoch = match self.rng.between(0, 3) {
            0 => None,
            1 => Some(position << 31),
            2 => Some(position - i64::try_from(self.rng.between(0, 8)).unwrap_or(0)),
            _ => Some(i64::try_from(self.rng.next() >> 1).unwrap_or(1)),
        };
        self.next_id += 1;
        let message = Message::Fetch {
            id: self.next_id,
            replica: posing_as,
            replica_epoch,
            fetch_offset,
            last_fetched_epoch,
            leader_epoch,
        };
        self.observed.forged_fetches += 1;
        self.send(Endpoint::Client, Endpoint::Node(leader), message);
    }

    /// The leader's side of a follower's fetch, in the order the Fetch handler takes it: a
    /// fetch that does not prove it is the replica it names is refused before anything else.
    #[allow(clippy::too_many_arguments)]
    fn answer_fetch(
        &mut self,
        leader: i32,
        partition: &Partition,
        follower: i32,
        replica_epoch: Option<i64>,
        fetch_offset: i64,
        last_fetched_epoch: i32,
        leader_epoch: i32,
    ) -> FetchOutcome {
        if check_replica(&self.node(leader).image, follower, replica_epoch).is_err() {
            return FetchOutcome::Refused;
        }
        if !partition.is_leader() {
            return FetchOutcome::Refused;
        }
        let diverged = divergence(&partition.log(), last_fetched_epoch, fetch_offset);
        if diverged.is_none() {
            match partition.replica_fetched(follower, (fetch_offset, -1), self.instant()) {
                Err(_) => return FetchOutcome::Refused,
                Ok(Some(expansion)) => self.ask_isr_change(leader, expansion),
                Ok(None) => {}
            }
        }
        let log = partition.log();
        if leader_epoch != log.leader_epoch() {
            return FetchOutcome::Refused;
        }
        if let Some((epoch, end)) = diverged {
            return FetchOutcome::Diverging(epoch, end);
        }
        let high_watermark = log.high_watermark();
        let view = match log.read_view(fetch_offset, log.log_end_offset()) {
            Ok(view) => view,
            Err(_) => return FetchOutcome::Refused,
        };
        drop(log);
        let records = view
            .and_then(|v| v.slice(64 * 1024, true).expect("read"))
            .map(|slice| slice.read().expect("read"))
            .unwrap_or_default();
        FetchOutcome::Records(records, high_watermark)
    }

    fn node_receives(&mut self, id: i32, from: Endpoint, message: Message) {
        let me = Endpoint::Node(id);
        let Some(partition) = self.node(id).partition.clone() else {
            return;
        };
        match message {
            Message::Registered(epoch, image) => {
                self.node(id).broker_epoch = Some(epoch);
                self.apply_image(id, image);
            }
            Message::HeartbeatAnswer(Some(image)) | Message::Image(image) => {
                self.apply_image(id, image)
            }
            Message::HeartbeatAnswer(None) => self.node(id).broker_epoch = None,
            Message::AlterIsrAnswer(request, answer, image) => {
                self.node(id).isr_asks.retain(|(r, _)| *r != request);
                self.apply_image(id, image);
                if answer.is_err_and(|error| refusal_is_final(&error)) {
                    partition.isr_request_settled(&request);
                }
            }
            Message::Fetch {
                id: fetch_id,
                replica,
                replica_epoch,
                fetch_offset,
                last_fetched_epoch,
                leader_epoch,
            } => {
                let outcome = self.answer_fetch(
                    id,
                    &partition,
                    replica,
                    replica_epoch,
                    fetch_offset,
                    last_fetched_epoch,
                    leader_epoch,
                );
                if from == Endpoint::Client && !matches!(outcome, FetchOutcome::Refused) {
                    self.observed.forged_fetches_taken += 1;
                }
                let answer = Message::FetchAnswer {
                    id: fetch_id,
                    outcome,
                };
                self.send(me, from, answer);
            }
            Message::FetchAnswer {
                id: fetch_id,
                outcome,
            } => {
                let Some((current, _, leader, leader_epoch)) = self.node(id).fetch else {
                    return;
                };
                if current != fetch_id {
                    return;
                }
                self.node(id).fetch = None;
                // A fetcher drops what its old leader sent once the leadership moved.
                let state = partition.state();
                if (state.leader, state.leader_epoch) != (leader, leader_epoch) {
                    return;
                }
                let progressed = match outcome {
                    FetchOutcome::Refused => false,
                    FetchOutcome::Diverging(epoch, end) => {
                        let before = partition.log().log_end_offset();
                        partition.truncate_diverging(epoch, end).expect("truncate");
                        let after = partition.log().log_end_offset();
                        if after < before {
                            self.observed.truncations += 1;
                            self.note(format!("node {id} truncated {before} -> {after}"));
                        }
                        true
                    }
                    FetchOutcome::Records(records, high_watermark) => {
                        match partition.append_replicated(&records, (high_watermark, -1)) {
                            Ok(_) => !records.is_empty(),
                            Err(error) => panic!("node {id} could not append: {error}"),
                        }
                    }
                };
                if progressed {
                    self.fetch_from_leader(id);
                }
            }
            Message::WhoLeads => {
                let leader = partition.state().leader;
                self.send(me, from, Message::Leads(leader));
            }
            Message::Produce { id: request, value } => {
                let acked = self.append(id, &partition, request, value);
                if let Err(()) = acked {
                    let answer = Message::ProduceAnswer {
                        id: request,
                        acked: None,
                    };
                    self.send(me, Endpoint::Client, answer);
                }
            }
            _ => {}
        }
    }

    /// A leader's side of an `acks=all` produce: refused when not leading or with fewer in
    /// sync than `min.insync.replicas`, else appended and answered once replicated.
    fn append(
        &mut self,
        id: i32,
        partition: &Arc<Partition>,
        request: u64,
        value: u64,
    ) -> Result<(), ()> {
        let in_sync = partition.isr_count();
        if !partition.is_leader() || in_sync < self.settings.min_insync_replicas as usize {
            return Err(());
        }
        let bytes = build_batch(&[&value.to_be_bytes()], 0, ProducerFields::NONE);
        let batch = validate(
            Bytes::from(bytes),
            &ValidationLimits::unbounded_time(1 << 20),
        )
        .expect("valid batch");
        let info = partition.append(&batch).map_err(|_| ())?;
        let waiting = Waiting {
            id: request,
            end: info.last_offset + 1,
            offset: info.base_offset,
            appended_at: self.now,
            deadline: self.now + PRODUCE_TIMEOUT_MS * 1000,
        };
        self.node(id).waiting.push(waiting);
        if let Some((node, since, until)) = self.observed.isolated {
            if node == id && (since..until).contains(&self.now) {
                self.observed.appended_while_isolated += 1;
            }
        }
        Ok(())
    }

    /// Answers every produce whose write the high watermark passed (acknowledged while
    /// `min.insync.replicas` are in sync), or whose leader stopped leading, or whose time ran
    /// out.
    fn answer_waiting_produces(&mut self) {
        for index in 0..self.nodes.len() {
            let node = &mut self.nodes[index];
            let Some(partition) = node.partition.clone() else {
                continue;
            };
            if node.waiting.is_empty() {
                continue;
            }
            let id = node.id;
            let high_watermark = partition.log().high_watermark();
            let leading = partition.is_leader();
            // As the Produce handler: a write the high watermark passed because the ISR
            // shrank below min.insync.replicas is answered, but not acknowledged.
            let enough_in_sync =
                partition.isr_count() >= self.settings.min_insync_replicas as usize;
            let now = self.now;
            let (done, waiting): (Vec<_>, Vec<_>) = node
                .waiting
                .drain(..)
                .partition(|w| high_watermark >= w.end || !leading || now >= w.deadline);
            node.waiting = waiting;
            for w in done {
                let acked = (leading && enough_in_sync && high_watermark >= w.end).then_some(Ack {
                    offset: w.offset,
                    by: id,
                    appended_at: w.appended_at,
                });
                let answer = Message::ProduceAnswer { id: w.id, acked };
                self.send(Endpoint::Node(id), Endpoint::Client, answer);
            }
        }
    }

    // ---- the producer ----

    fn producer_tick(&mut self) {
        self.after_ms(PRODUCE_EVERY_MS, Event::ProducerTick);
        let now = self.now;
        let before = self.in_flight.len();
        self.in_flight
            .retain(|_, (_, sent)| now < *sent + PRODUCE_TIMEOUT_MS * 1000 + 100_000);
        if self.in_flight.len() < before {
            // Unanswered: the leader may be gone.
            self.leader_known = None;
        }
        if now + WRITES_STOP_BEFORE_END_MS * 1000 >= self.end {
            return;
        }
        let Some(leader) = self.leader_known else {
            let asked = self.rng.pick(&NODES);
            self.send(Endpoint::Client, Endpoint::Node(asked), Message::WhoLeads);
            return;
        };
        if self.in_flight.len() >= PRODUCES_IN_FLIGHT_MAX {
            return;
        }
        self.next_id += 1;
        let (request, value) = (self.next_id, self.next_id);
        self.in_flight.insert(request, (value, now));
        let message = Message::Produce { id: request, value };
        self.send(Endpoint::Client, Endpoint::Node(leader), message);
    }

    fn client_receives(&mut self, message: Message) {
        match message {
            Message::Leads(leader) => {
                self.leader_known = (leader != NO_LEADER).then_some(leader);
            }
            Message::ProduceAnswer { id, acked } => {
                let Some((value, _)) = self.in_flight.remove(&id) else {
                    return;
                };
                let Some(ack) = acked else {
                    self.leader_known = None;
                    return;
                };
                if let Some(other) = self.acked.insert(ack.offset, value) {
                    let lost = format!(
                        "offset {} acknowledged for write {other}, then again for {value}",
                        ack.offset
                    );
                    self.note(lost.clone());
                    self.observed.acknowledged_twice.get_or_insert(lost);
                }
                if let Some((node, since, until)) = self.observed.isolated {
                    if ack.by == node && (since..until).contains(&ack.appended_at) {
                        self.observed.acks_after_isolation.push(ack);
                    }
                }
            }
            _ => {}
        }
    }

    // ---- the checker ----

    /// (offset, leader epoch, value) of every record in node `id`'s log.
    fn contents(&mut self, id: i32) -> Vec<(i64, i32, u64)> {
        let partition = self.node(id).partition.clone().expect("running");
        let log = partition.log();
        let view = log
            .read_view(log.log_start_offset(), log.log_end_offset())
            .expect("view");
        drop(log);
        let bytes = view
            .and_then(|v| v.slice(u64::MAX, true).expect("slice"))
            .map(|s| s.read().expect("read"))
            .unwrap_or_default();
        let mut records = Vec::new();
        let mut position = 0;
        while let Some(header) = BatchHeader::parse(&bytes[position..]) {
            let end = position + header.total_bytes() as usize;
            weir_log::records::for_each_stored_record(
                &bytes[position..end],
                1 << 20,
                &mut |offset, record| {
                    let value = record.value.expect("value");
                    let value = u64::from_be_bytes(value.try_into().expect("8 bytes"));
                    records.push((offset, header.partition_leader_epoch, value));
                },
            )
            .expect("stored batch");
            position = end;
        }
        records
    }

    /// Every acknowledged write is where it was acknowledged, every replica holds the same
    /// log, and the partition ends fully in sync.
    fn check(&mut self) -> Result<(), String> {
        if let Some(lost) = &self.observed.acknowledged_twice {
            return Err(lost.clone());
        }
        let state = Self::partition_image(&self.controller.image).ok_or("no topic")?;
        if state.leader == NO_LEADER || state.isr.len() != NODES.len() {
            return Err(format!("did not recover: {state:?}"));
        }
        let leader_contents = self.contents(state.leader);
        let by_offset: BTreeMap<i64, u64> =
            leader_contents.iter().map(|(o, _, v)| (*o, *v)).collect();
        for (offset, value) in &self.acked {
            match by_offset.get(offset) {
                Some(found) if found == value => {}
                found => {
                    return Err(format!(
                        "acknowledged write {value} at offset {offset} lost: found {found:?}"
                    ))
                }
            }
        }
        for id in NODES {
            let contents = self.contents(id);
            if contents != leader_contents {
                let first = contents
                    .iter()
                    .zip(&leader_contents)
                    .position(|(a, b)| a != b)
                    .unwrap_or(contents.len().min(leader_contents.len()));
                return Err(format!(
                    "node {id}'s log differs from leader {}'s from record {first}: {} against {} records",
                    state.leader,
                    contents.len(),
                    leader_contents.len()
                ));
            }
        }
        if self.acked.len() < 100 {
            return Err(format!("only {} writes acknowledged", self.acked.len()));
        }
        Ok(())
    }
}

fn command_name(command: &MetadataCommand) -> &'static str {
    match command {
        MetadataCommand::FenceBroker { .. } => "fence",
        MetadataCommand::UnfenceBroker { .. } => "unfence",
        MetadataCommand::RegisterBroker { .. } => "register",
        MetadataCommand::ChangePartitions { .. } => "isr change",
        MetadataCommand::CreateTopic { .. } => "create",
        _ => "other",
    }
}

/// Runs `scenario` for each seed (or `WEIR_SIM_SEED` alone): its faults are scheduled, the run
/// ends with the network healed and every node up, then the checker and `expect` judge it.
/// Answers with what each run observed.
fn simulate(
    name: &str,
    duration_ms: u64,
    scenario: impl Fn(&mut Sim),
    expect: impl Fn(&Sim) -> Result<(), String>,
) -> Vec<Observed> {
    let runs: u64 = std::env::var("WEIR_SIM_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let seeds: Vec<u64> = match std::env::var("WEIR_SIM_SEED") {
        Ok(seed) => vec![seed.parse().expect("WEIR_SIM_SEED is a number")],
        Err(_) => (0..runs).map(|i| 1000 + i).collect(),
    };
    let mut observed = Vec::new();
    for seed in seeds {
        let mut sim = Sim::new(seed, duration_ms);
        scenario(&mut sim);
        let quiet = duration_ms - QUIET_MS;
        sim.fault_at_ms(quiet, Fault::HealAll);
        sim.fault_at_ms(quiet, Fault::RestartAll);
        sim.run();
        let verdict = sim.check().and_then(|()| expect(&sim));
        if let Err(why) = verdict {
            let trace: Vec<&str> = sim.trace.iter().map(String::as_str).collect();
            panic!(
                "simulation {name} failed with seed {seed} (replay: WEIR_SIM_SEED={seed}): {why}\n{}",
                trace.join("\n")
            );
        }
        observed.push(std::mem::take(&mut sim.observed));
    }
    observed
}

/// Asserts that most runs exercised what the scenario is about (seeded timing can miss it).
fn mostly(observed: &[Observed], what: &str, exercised: impl Fn(&Observed) -> bool) {
    let count = observed.iter().filter(|o| exercised(o)).count();
    assert!(
        count * 2 >= observed.len(),
        "only {count} of {} runs {what}",
        observed.len()
    );
}

fn nothing(_: &Sim) -> Result<(), String> {
    Ok(())
}

#[test]
fn simulated_leader_crash_elects_an_in_sync_replica_and_loses_nothing() {
    simulate(
        "leader-crash",
        40_000,
        |sim| {
            let at = sim.rng.between(4_000, 10_000);
            sim.fault_at_ms(at, Fault::Crash(Target::Leader));
            let back = at + sim.rng.between(1_000, 10_000);
            sim.fault_at_ms(back, Fault::RestartAll);
        },
        |sim| match sim.observed.leaders.len() {
            1 => Err("leadership never moved".into()),
            _ => Ok(()),
        },
    );
}

#[test]
fn simulated_follower_crash_shrinks_the_isr_and_the_follower_returns() {
    simulate(
        "follower-crash",
        40_000,
        |sim| {
            let at = sim.rng.between(4_000, 10_000);
            sim.fault_at_ms(at, Fault::Crash(Target::Follower));
            let back = at + sim.rng.between(4_000, 10_000);
            sim.fault_at_ms(back, Fault::RestartAll);
        },
        |sim| match sim.observed.smallest_isr {
            3 => Err("the ISR never shrank".into()),
            _ => Ok(()),
        },
    );
}

#[test]
fn simulated_follower_falling_behind_leaves_the_isr_and_rejoins() {
    simulate(
        "follower-behind",
        40_000,
        |sim| {
            let at = sim.rng.between(4_000, 8_000);
            sim.fault_at_ms(at, Fault::CutFollower);
            let heal = at + LAG_MAX_MS + sim.rng.between(2_000, 8_000);
            sim.fault_at_ms(heal, Fault::HealAll);
        },
        |sim| match sim.observed.smallest_isr {
            3 => Err("the lagging follower never left the ISR".into()),
            _ => Ok(()),
        },
    );
}

#[test]
fn simulated_stale_leader_isolated_from_the_quorum_acknowledges_nothing_new() {
    let observed = simulate(
        "stale-leader",
        45_000,
        |sim| {
            let at = sim.rng.between(4_000, 8_000);
            sim.fault_at_ms(at, Fault::Isolate(Target::Leader, false));
            let heal = at + SESSION_TIMEOUT_MS + sim.rng.between(2_000, 10_000);
            sim.fault_at_ms(heal, Fault::HealAll);
        },
        |sim| {
            let Some((node, _, _)) = sim.observed.isolated else {
                return Err("no leader was isolated".into());
            };
            if !sim.observed.acks_after_isolation.is_empty() {
                return Err(format!(
                    "isolated leader {node} acknowledged writes it took after the cut: {:?}",
                    sim.observed.acks_after_isolation
                ));
            }
            match sim.observed.leaders.len() {
                1 => Err("no new leader was elected".into()),
                _ => Ok(()),
            }
        },
    );
    mostly(&observed, "sent the isolated leader writes", |o| {
        o.appended_while_isolated > 0
    });
}

#[test]
fn simulated_divergent_old_leader_truncates_to_the_new_leaders_log() {
    let observed = simulate(
        "divergent-leader",
        45_000,
        |sim| {
            // Cut off, the leader appends writes no follower copies; it then crashes and
            // returns after a new leader has written other records at those offsets.
            let at = sim.rng.between(4_000, 8_000);
            sim.fault_at_ms(at, Fault::Isolate(Target::Leader, false));
            let crash = at + sim.rng.between(3_500, 6_000);
            sim.fault_at_ms(crash, Fault::Crash(Target::Isolated));
            let heal = crash + SESSION_TIMEOUT_MS + sim.rng.between(2_000, 8_000);
            sim.fault_at_ms(heal, Fault::HealAll);
            let restart = heal + sim.rng.between(0, 3_000);
            sim.fault_at_ms(restart, Fault::RestartAll);
        },
        |sim| match (
            sim.observed.appended_while_isolated,
            sim.observed.truncations,
        ) {
            (1.., 0) => Err("the old leader's divergent tail was not truncated".into()),
            _ => Ok(()),
        },
    );
    mostly(&observed, "left the old leader a divergent tail", |o| {
        o.appended_while_isolated > 0
    });
}

#[test]
fn simulated_isr_expansion_whose_answer_is_lost_keeps_the_high_watermark_waiting() {
    // The leader adds a returning follower to the ISR and is cut off from the controller and
    // from that follower as the change commits. Had it given the change up, it would count
    // only the other follower, acknowledge writes the returned one lacks, and the controller,
    // fencing the leader, could elect that one.
    let observed = simulate(
        "lost-expansion",
        50_000,
        |sim| {
            let at = sim.rng.between(3_000, 5_000);
            sim.fault_at_ms(at, Fault::CutFollower);
            let heal = at + LAG_MAX_MS + sim.rng.between(1_500, 3_000);
            sim.fault_at_ms(heal, Fault::HealAll);
            sim.fault_at_ms(heal, Fault::LoseTheNextExpansion);
            let crash = heal + sim.rng.between(5_000, 12_000);
            sim.fault_at_ms(crash, Fault::Crash(Target::Node(1)));
        },
        nothing,
    );
    mostly(&observed, "lost an expansion", |o| o.expansion_lost);
}

#[test]
fn simulated_client_posing_as_a_replica_gets_no_write_acknowledged() {
    // A follower is cut off from its leader, and a client fetches as that follower at the
    // leader's log end with no broker epoch or a guessed one, which, believed, would move the
    // high watermark past writes the follower lacks. Then every node but that follower dies:
    // it is elected if still in the ISR, so anything acknowledged meanwhile would be lost.
    let observed = simulate(
        "forged-replica-fetch",
        45_000,
        |sim| {
            let at = sim.rng.between(3_000, 5_000);
            sim.fault_at_ms(at, Fault::CutFollower);
            sim.fault_at_ms(at, Fault::ForgeReplicaFetches);
            let crash = at + sim.rng.between(500, LAG_MAX_MS + 2_000);
            sim.fault_at_ms(crash, Fault::CrashOthers(Target::Cut));
        },
        |sim| match sim.observed.forged_fetches_taken {
            0 => Ok(()),
            taken => Err(format!("{taken} forged replica fetches were taken")),
        },
    );
    mostly(&observed, "sent forged replica fetches", |o| {
        o.forged_fetches > 50
    });
}

#[test]
fn simulated_random_faults_on_a_lossy_network_lose_no_acknowledged_write() {
    simulate(
        "random",
        60_000,
        |sim| {
            sim.loss_percent = sim.rng.between(0, 3);
            let mut at = sim.rng.between(2_000, 5_000);
            while at < 60_000 - QUIET_MS - 2_000 {
                let fault = match sim.rng.between(0, 6) {
                    0 => Fault::Crash(Target::Leader),
                    1 => Fault::Crash(Target::Follower),
                    2 => Fault::Stop(Target::Leader),
                    3 => Fault::Isolate(Target::Leader, sim.rng.chance(50)),
                    4 => Fault::CutFollower,
                    5 => Fault::HealAll,
                    _ => Fault::RestartAll,
                };
                sim.fault_at_ms(at, fault);
                at += sim.rng.between(1_000, 6_000);
            }
        },
        nothing,
    );
}

#[test]
fn a_simulated_run_is_reproduced_exactly_by_its_seed() {
    let run = || {
        let mut sim = Sim::new(77, 30_000);
        sim.loss_percent = 2;
        sim.fault_at_ms(5_000, Fault::Crash(Target::Leader));
        sim.fault_at_ms(9_000, Fault::Isolate(Target::Leader, false));
        sim.fault_at_ms(14_000, Fault::HealAll);
        sim.fault_at_ms(14_000, Fault::RestartAll);
        sim.run();
        let trace: Vec<String> = sim.trace.iter().cloned().collect();
        (trace, sim.acked.clone())
    };
    let (first_trace, first_acked) = run();
    let (second_trace, second_acked) = run();
    assert!(
        first_acked.len() > 100,
        "{} writes acknowledged",
        first_acked.len()
    );
    assert_eq!(first_trace, second_trace);
    assert_eq!(first_acked, second_acked);
}
