//! The job every scenario runs, written as a spec file: `datagen` → `keyed-count` → a sink.

use std::path::{Path, PathBuf};
pub use weir_taskmanager::builtins::keyed_count::KeyedCountEmit;

/// Where the counts go.
#[derive(Clone, Debug)]
pub enum Sink {
    /// A `file-sink` committing `key,count` files under this directory.
    Files(PathBuf),
    /// A `blackhole` sink.
    Blackhole,
}

/// `datagen` → `keyed-count` → sink, with the knobs the scenarios turn.
#[derive(Clone, Debug)]
pub struct CountJob {
    /// Job name.
    pub name: String,
    /// Records of the source; `None` = unbounded.
    pub records: Option<u64>,
    /// Distinct keys.
    pub keys: u64,
    /// Seed of the key formula.
    pub seed: u64,
    /// Records per second for the whole source; 0 = as fast as possible.
    pub rate_per_sec: u64,
    /// Parallelism of source and counter.
    pub parallelism: u32,
    /// Parallelism of the sink (1 unless set: several sink subtasks are several writers to crash).
    pub sink_parallelism: u32,
    /// Checkpoint interval; `None` = no periodic checkpoints.
    pub checkpoint_interval_ms: Option<u64>,
    /// Checkpoint timeout.
    pub checkpoint_timeout_ms: Option<u64>,
    /// Completed checkpoints retained.
    pub retained: Option<u32>,
    /// Delay before each restart.
    pub restart_delay_ms: u64,
    /// Restarts allowed.
    pub restart_attempts: u32,
    /// `rocksdb` or `heap`.
    pub state_backend: String,
    /// When `keyed-count` emits: one count per key at end of input, or every running count.
    pub emit: KeyedCountEmit,
    /// The sink.
    pub sink: Sink,
}

impl CountJob {
    /// A bounded job of `records` records over `keys` keys.
    pub fn bounded(name: &str, records: u64, keys: u64, seed: u64) -> CountJob {
        CountJob {
            name: name.to_string(),
            records: Some(records),
            keys,
            seed,
            rate_per_sec: 0,
            parallelism: 2,
            sink_parallelism: 1,
            checkpoint_interval_ms: Some(500),
            checkpoint_timeout_ms: None,
            retained: None,
            restart_delay_ms: 500,
            restart_attempts: 100,
            state_backend: "rocksdb".to_string(),
            emit: KeyedCountEmit::End,
            sink: Sink::Blackhole,
        }
    }

    /// A job whose source never ends.
    pub fn unbounded(name: &str, keys: u64, seed: u64) -> CountJob {
        CountJob { records: None, ..CountJob::bounded(name, 0, keys, seed) }
    }

    /// Limits the source to `rate` records per second in total.
    pub fn rate(mut self, rate: u64) -> Self {
        self.rate_per_sec = rate;
        self
    }

    /// Parallelism of source and counter.
    pub fn parallelism(mut self, p: u32) -> Self {
        self.parallelism = p;
        self
    }

    /// Parallelism of the sink.
    pub fn sink_parallelism(mut self, p: u32) -> Self {
        self.sink_parallelism = p;
        self
    }

    /// Keyed state on the heap backend instead of RocksDB.
    pub fn heap(mut self) -> Self {
        self.state_backend = "heap".to_string();
        self
    }

    /// Checkpoint interval.
    pub fn checkpoint_every_ms(mut self, ms: u64) -> Self {
        self.checkpoint_interval_ms = Some(ms);
        self
    }

    /// Checkpoint timeout.
    pub fn checkpoint_timeout_ms(mut self, ms: u64) -> Self {
        self.checkpoint_timeout_ms = Some(ms);
        self
    }

    /// Completed checkpoints retained.
    pub fn retain_checkpoints(mut self, n: u32) -> Self {
        self.retained = Some(n);
        self
    }

    /// Delay before each restart.
    pub fn restart_delay_ms(mut self, ms: u64) -> Self {
        self.restart_delay_ms = ms;
        self
    }

    /// `keyed-count` emits `(key, new count)` after every record (`emit: updates`), so the sink writes all
    /// the time, not only at end of input.
    pub fn emit_updates(mut self) -> Self {
        self.emit = KeyedCountEmit::Updates;
        self
    }

    /// Commit counts as files under `dir`.
    pub fn into_files(mut self, dir: &Path) -> Self {
        self.sink = Sink::Files(dir.to_path_buf());
        self
    }

    /// Discard the counts.
    pub fn into_blackhole(mut self) -> Self {
        self.sink = Sink::Blackhole;
        self
    }

    /// Seconds the source needs at its rate limit (none when unbounded or unlimited).
    pub fn nominal_seconds(&self) -> Option<f64> {
        match (self.records, self.rate_per_sec) {
            (Some(n), r) if r > 0 => Some(n as f64 / r as f64),
            _ => None,
        }
    }

    /// The spec file (YAML) of this job.
    pub fn yaml(&self) -> String {
        let mut source = vec![format!("keys: {}", self.keys), format!("seed: {}", self.seed)];
        if let Some(n) = self.records {
            source.insert(0, format!("count: {n}"));
        }
        if self.rate_per_sec > 0 {
            source.push(format!("rate_per_sec: {}", self.rate_per_sec));
        }
        let mut checkpointing = Vec::new();
        if let Some(ms) = self.checkpoint_interval_ms {
            checkpointing.push(format!("interval_ms: {ms}"));
        }
        if let Some(ms) = self.checkpoint_timeout_ms {
            checkpointing.push(format!("timeout_ms: {ms}"));
        }
        if let Some(n) = self.retained {
            checkpointing.push(format!("retained: {n}"));
        }
        let sp = self.sink_parallelism;
        let sink = match &self.sink {
            Sink::Files(dir) => {
                format!(
                    "{{ uid: out, kind: file-sink, input: counts, parallelism: {sp}, config: {{ path: {dir:?} }} }}"
                )
            }
            Sink::Blackhole => format!("{{ uid: out, kind: blackhole, input: counts, parallelism: {sp} }}"),
        };
        let counter = match self.emit {
            KeyedCountEmit::End => "{ uid: counts, kind: keyed-count, input: events }",
            KeyedCountEmit::Updates => "{ uid: counts, kind: keyed-count, input: events, config: { emit: updates } }",
        };
        format!(
            "name: {name}\n\
             parallelism: {p}\n\
             state_backend: {backend}\n\
             checkpointing: {{ {checkpointing} }}\n\
             restart: {{ strategy: fixed-delay, attempts: {attempts}, delay_ms: {delay} }}\n\
             operators:\n  \
               - {{ uid: events, kind: datagen, config: {{ {source} }} }}\n  \
               - {counter}\n  \
               - {sink}\n",
            name = self.name,
            p = self.parallelism,
            backend = self.state_backend,
            checkpointing = checkpointing.join(", "),
            attempts = self.restart_attempts,
            delay = self.restart_delay_ms,
            source = source.join(", "),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_common::job::spec::{parse_spec_text, resolve};
    use weir_taskmanager::builtins::registry;

    #[test]
    fn specs_parse_and_resolve() {
        let bounded =
            CountJob::bounded("b", 1000, 10, 1).rate(100).retain_checkpoints(3).into_files(Path::new("/tmp/o"));
        let job = resolve(&parse_spec_text(&bounded.yaml()).unwrap(), &registry()).unwrap();
        assert_eq!(job.operators[0].config["count"], 1000);
        assert_eq!(job.operators[0].config["rate_per_sec"], 100);
        assert_eq!(job.operators[2].config["path"], "/tmp/o");
        assert_eq!(job.checkpointing.retained, 3);
        let unbounded = CountJob::unbounded("u", 10, 1).checkpoint_timeout_ms(3000).into_blackhole();
        let job = resolve(&parse_spec_text(&unbounded.yaml()).unwrap(), &registry()).unwrap();
        assert!(!job.operators[0].config.contains_key("count"));
        assert_eq!(job.checkpointing.timeout_ms, 3000);
        assert_eq!(job.operators[2].kind, "blackhole");
        assert!(job.operators[1].config.is_empty(), "emit: end is the default and not written");
        let updates = CountJob::bounded("u", 10, 1, 1).emit_updates();
        let job = resolve(&parse_spec_text(&updates.yaml()).unwrap(), &registry()).unwrap();
        assert_eq!(job.operators[1].config["emit"], "updates");
    }
}
