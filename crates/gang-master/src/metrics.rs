//! Prometheus metrics: what the master counts, and their names and help texts. Served as
//! text on `/metrics` by `connections/metrics_port.rs`.
//!
//! Renamed (the old name is still emitted, with the same value, for one release):
//! `gang_master_batch_seconds` is `gang_master_round_seconds`, and
//! `gang_master_batch_max_microseconds` is `gang_master_round_max_microseconds` (a round:
//! the commands the reactor applies together and saves in one transaction).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::job::State;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

/// A listener ("socket", "clients", "agents") and why a connection was refused or closed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnLabel {
    pub listener: String,
    pub reason: String,
}

/// What an order carried (relayed or direct): "launch", "signal", "tables".
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkLabel {
    pub work: String,
}

/// A method of the agent port (`connections::call_count`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabel {
    pub method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabel {
    pub listener: String,
}

pub struct Metrics {
    pub registry: Registry,
    /// Connections open now, per listener (`connections/`).
    pub connections_open: Family<ListenerLabel, Gauge>,
    /// Connections closed at accept: a limit reached (`peer_limit`, `pool_full`) or no
    /// descriptor to accept with (`accept_failed`).
    pub connections_refused: Family<ConnLabel, Counter>,
    /// Connections closed by a deadline (`handshake`, `idle`).
    pub connections_expired: Family<ConnLabel, Counter>,
    /// Attach streams refused by `max_attaches_per_user`.
    pub attaches_refused: Counter,
    pub jobs_submitted: Counter,
    /// Jobs found deadlocked (every rank blocked in a receive, nothing in flight).
    pub jobs_deadlocked: Counter,
    /// Switch-outs of messaging-library ranks that had flushed for the boundary.
    pub msg_switch_outs_flushed: Counter,
    /// Those that had not (stopped anyway; their messages stay in socket buffers).
    pub msg_switch_outs_unflushed: Counter,
    pub jobs_finished: Family<StateLabel, Counter>,
    pub jobs_queued: Gauge,
    pub jobs_running: Gauge,
    pub slices: Gauge,
    pub nodes_up: Gauge,
    /// From placement to every rank running.
    pub launch_seconds: Histogram,
    /// How long each round of the state task took (reactor, commit, carrying out).
    pub round_seconds: Histogram,
    /// The longest round since the master started, in microseconds.
    pub round_max_us: Gauge,
    /// Per slot boundary: spread of the agents' last-signal times.
    pub switch_skew_seconds: Histogram,
    /// Per agent and switch: last signal minus the deadline.
    pub switch_latency_seconds: Histogram,
    /// Per agent and switch: last signal minus first signal.
    pub switch_cost_seconds: Histogram,
    pub switches_dropped: Counter,
    pub table_version: Gauge,
    /// Orders sent down the order tree, by what they carried.
    pub relayed: Family<WorkLabel, Counter>,
    /// Calls to one agent each, by what they carried (orders too small for the tree, a
    /// table sent again to one agent).
    pub direct_calls: Family<WorkLabel, Counter>,
    /// Calls on the agent port by method (`connections::call_count`).
    pub agent_calls: Family<MethodLabel, Counter>,
    /// Nodes a relayed order did not reach (routed around, or their head answered
    /// nothing for them).
    pub relay_unreached: Counter,
    /// Fences gathered among their jobs' agents that completed (the master hears one
    /// message of each).
    pub fences_done: Counter,
    /// Bytes of fence messages through the master, by path: "master" (ranks' puts in,
    /// spaces out) or "agents" (the completion records).
    pub fence_bytes: Family<PathLabel, Counter>,
    /// Exit-report calls agents made, by how: "single" (ReportExit, one rank) or "batch"
    /// (ReportExits, a subtree gathered up the job's tree).
    pub exit_reports: Family<HowLabel, Counter>,
    /// Ranks those calls reported, by the same label.
    pub exit_report_ranks: Family<HowLabel, Counter>,
    /// Heartbeat calls the master answered, by how they came: "direct" (an agent's own)
    /// or "batch" (a liveness head's, for its group).
    pub heartbeats: Family<ViaLabel, Counter>,
}

/// How exits reached the master: "single" or "batch".
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HowLabel {
    pub how: String,
}

/// How a heartbeat reached the master: "direct" or "batch".
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ViaLabel {
    pub via: String,
}

/// How fences travel: "master" or "agents".
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    pub path: String,
}

impl Metrics {
    pub fn fence_bytes(&self, path: &str, n: u64) {
        self.fence_bytes
            .get_or_create(&PathLabel {
                path: path.to_owned(),
            })
            .inc_by(n);
    }

    /// One exit-report call of `ranks` ranks.
    pub fn exit_report(&self, how: &str, ranks: usize) {
        let l = HowLabel {
            how: how.to_owned(),
        };
        self.exit_reports.get_or_create(&l).inc();
        self.exit_report_ranks
            .get_or_create(&l)
            .inc_by(ranks as u64);
    }

    pub fn heartbeat(&self, via: &str) {
        self.heartbeats
            .get_or_create(&ViaLabel {
                via: via.to_owned(),
            })
            .inc();
    }

    pub fn relayed(&self, work: &str) {
        by_work(&self.relayed, work, 1);
    }

    pub fn direct_calls(&self, work: &str, calls: usize) {
        by_work(&self.direct_calls, work, calls);
    }
}

fn by_work(family: &Family<WorkLabel, Counter>, work: &str, n: usize) {
    family
        .get_or_create(&WorkLabel {
            work: work.to_owned(),
        })
        .inc_by(n as u64);
}

impl Default for Metrics {
    fn default() -> Self {
        // 1 us .. about 1 s.
        let switch = || Histogram::new(exponential_buckets(1e-6, 2.0, 21));
        let mut m = Metrics {
            registry: Registry::default(),
            connections_open: Family::default(),
            connections_refused: Family::default(),
            connections_expired: Family::default(),
            attaches_refused: Counter::default(),
            jobs_submitted: Counter::default(),
            jobs_deadlocked: Counter::default(),
            msg_switch_outs_flushed: Counter::default(),
            msg_switch_outs_unflushed: Counter::default(),
            jobs_finished: Family::default(),
            jobs_queued: Gauge::default(),
            jobs_running: Gauge::default(),
            slices: Gauge::default(),
            nodes_up: Gauge::default(),
            launch_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            // 10 us .. about 20 s.
            round_seconds: Histogram::new(exponential_buckets(1e-5, 2.0, 22)),
            round_max_us: Gauge::default(),
            switch_skew_seconds: switch(),
            switch_latency_seconds: switch(),
            switch_cost_seconds: switch(),
            switches_dropped: Counter::default(),
            table_version: Gauge::default(),
            relayed: Family::default(),
            direct_calls: Family::default(),
            agent_calls: Family::default(),
            relay_unreached: Counter::default(),
            fences_done: Counter::default(),
            fence_bytes: Family::default(),
            exit_reports: Family::default(),
            exit_report_ranks: Family::default(),
            heartbeats: Family::default(),
        };
        let mut registry = Registry::with_prefix("gang");
        m.register_counters(&mut registry);
        m.register_gauges(&mut registry);
        m.register_histograms(&mut registry);
        m.register_families(&mut registry);
        m.registry = registry;
        m
    }
}

impl Metrics {
    fn register_counters(&self, r: &mut Registry) {
        let counters = [
            (
                "msg_switch_outs_flushed",
                "Switch-outs of messaging-library ranks that had quiesced (flushed) for the boundary",
                &self.msg_switch_outs_flushed,
            ),
            (
                "msg_switch_outs_unflushed",
                "Switch-outs of messaging-library ranks that had not quiesced in time (stopped anyway)",
                &self.msg_switch_outs_unflushed,
            ),
            (
                "switches_dropped",
                "Switch records agents dropped (report buffer full)",
                &self.switches_dropped,
            ),
            ("jobs_submitted", "Jobs accepted", &self.jobs_submitted),
            (
                "jobs_deadlocked",
                "Jobs found deadlocked: every rank blocked in a receive with nothing in flight, at two consecutive checks",
                &self.jobs_deadlocked,
            ),
            (
                "attaches_refused",
                "Attach streams refused: the user held max_attaches_per_user already",
                &self.attaches_refused,
            ),
            (
                "relay_unreached",
                "Nodes a relayed order did not reach (their agent routed around)",
                &self.relay_unreached,
            ),
            (
                "fences_done",
                "Fences gathered among their jobs' agents that completed",
                &self.fences_done,
            ),
        ];
        for (name, help, c) in counters {
            r.register(name, help, c.clone());
        }
    }

    fn register_gauges(&self, r: &mut Registry) {
        let gauges = [
            (
                "master_round_max_microseconds",
                "The longest round of the master's state task since it started",
                &self.round_max_us,
            ),
            (
                "master_batch_max_microseconds",
                "The old name of gang_master_round_max_microseconds, kept for one release",
                &self.round_max_us,
            ),
            (
                "table_version",
                "Newest slice table version published",
                &self.table_version,
            ),
            ("jobs_queued", "Jobs waiting for nodes", &self.jobs_queued),
            (
                "jobs_running",
                "Jobs placed on the mesh",
                &self.jobs_running,
            ),
            ("slices", "Slices in the matrix", &self.slices),
            (
                "nodes_up",
                "Nodes whose agent is registered",
                &self.nodes_up,
            ),
        ];
        for (name, help, g) in gauges {
            r.register(name, help, g.clone());
        }
    }

    fn register_histograms(&self, r: &mut Registry) {
        let histograms = [
            (
                "master_round_seconds",
                "Time each round of the master's state task took: commands, commit and what follows",
                &self.round_seconds,
            ),
            (
                "master_batch_seconds",
                "The old name of gang_master_round_seconds, kept for one release",
                &self.round_seconds,
            ),
            (
                "switch_skew_seconds",
                "Co-scheduling skew per slot boundary: spread of the agents' last-signal times, clock offsets corrected",
                &self.switch_skew_seconds,
            ),
            (
                "switch_latency_seconds",
                "Per agent and switch: last signal sent minus the slot boundary",
                &self.switch_latency_seconds,
            ),
            (
                "switch_cost_seconds",
                "Per agent and switch: last signal minus first signal",
                &self.switch_cost_seconds,
            ),
            (
                "launch_seconds",
                "Time from placing a job to all its ranks running",
                &self.launch_seconds,
            ),
        ];
        for (name, help, h) in histograms {
            r.register(name, help, h.clone());
        }
    }

    /// Metrics with labels, each family its own type.
    fn register_families(&self, r: &mut Registry) {
        r.register(
            "heartbeats",
            "Heartbeat calls answered, by how they came (direct: an agent's own; batch: a liveness head's for its group)",
            self.heartbeats.clone(),
        );
        r.register(
            "jobs_finished",
            "Jobs ended, by final state",
            self.jobs_finished.clone(),
        );
        r.register(
            "connections_open",
            "Connections open, per listener",
            self.connections_open.clone(),
        );
        r.register(
            "connections_refused",
            "Connections closed at accept, per listener and reason (peer_limit, pool_full, accept_failed)",
            self.connections_refused.clone(),
        );
        r.register(
            "connections_expired",
            "Connections closed by a deadline, per listener and deadline (handshake, idle)",
            self.connections_expired.clone(),
        );
        r.register(
            "relayed_orders",
            "Orders sent down the order tree of agents, by work (launch, signal, tables)",
            self.relayed.clone(),
        );
        r.register(
            "direct_calls",
            "Calls the master made to one agent each, by work (launch, signal, tables)",
            self.direct_calls.clone(),
        );
        r.register(
            "agent_calls",
            "Calls on the agent port by method (made-up methods count as other)",
            self.agent_calls.clone(),
        );
        r.register(
            "fence_bytes",
            "Bytes of fence messages through the master, by path (master: ranks' puts and the spaces answered; agents: completion records)",
            self.fence_bytes.clone(),
        );
        r.register(
            "exit_reports",
            "Exit-report calls of agents, by how (single: one rank; batch: a subtree gathered up the job's tree)",
            self.exit_reports.clone(),
        );
        r.register(
            "exit_report_ranks",
            "Ranks whose exits those calls reported, by how",
            self.exit_report_ranks.clone(),
        );
    }
}

impl Metrics {
    pub fn finished(&self, state: State) {
        let state = format!("{state:?}").to_lowercase();
        self.jobs_finished
            .get_or_create(&StateLabel { state })
            .inc();
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }
}
