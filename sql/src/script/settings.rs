//! `SET 'key' = 'value'`: Flink's job settings, as a spec's fields. A decision on text alone (no I/O), so each key
//! and value form has a unit test.

use super::error::SqlError;
use weir_common::job::spec::{CheckpointingFile, JobSpecFile};

/// What the `SET` statements of a script set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// `pipeline.name`.
    pub name: Option<String>,
    /// `parallelism.default`.
    pub parallelism: Option<u32>,
    /// `execution.checkpointing.interval`, in ms.
    pub checkpoint_interval_ms: Option<i64>,
    /// `state.backend.type`: `rocksdb` or `heap` (Flink's `hashmap`).
    pub state_backend: Option<String>,
    /// `table.exec.state.ttl`, in ms (0: none).
    pub state_ttl_ms: Option<i64>,
    /// Keys Weir does not act on (Flink's tuning knobs), said back as warnings.
    pub ignored: Vec<String>,
}

/// Flink keys that tune Flink's own runtime and mean nothing to Weir's: accepted, and named in a warning.
const FLINK_ONLY: &[&str] = &[
    "table.exec.mini-batch.enabled",
    "table.exec.mini-batch.allow-latency",
    "table.exec.mini-batch.size",
    "table.optimizer.agg-phase-strategy",
    "table.optimizer.distinct-agg.split.enabled",
    "table.exec.sink.not-null-enforcer",
    "table.exec.source.idle-timeout",
    "execution.runtime-mode",
    "table.local-time-zone",
    "sql-client.execution.result-mode",
    "table.dml-sync",
];

/// A Flink duration (`10 s`, `500ms`, `2 min`, `1 h`, `1 d`, a bare number of ms) in milliseconds.
pub fn duration_ms(text: &str) -> Option<i64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: i64 = n.parse().ok()?;
    let factor = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "min" | "m" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(factor)
}

impl Settings {
    /// Applies one `SET`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), SqlError> {
        let bad = |what: &str| SqlError::plain(format!("SET '{key}' = '{value}': {what}"));
        match key {
            "pipeline.name" => self.name = Some(value.to_string()),
            "parallelism.default" => {
                let p: u32 = value.trim().parse().map_err(|_| bad("a parallelism is a whole number"))?;
                if p == 0 {
                    return Err(bad("a parallelism is at least 1"));
                }
                self.parallelism = Some(p);
            }
            "execution.checkpointing.interval" => {
                let ms = duration_ms(value).ok_or_else(|| bad("expected a duration such as '10 s' or '500 ms'"))?;
                self.checkpoint_interval_ms = Some(ms);
            }
            "state.backend.type" | "state.backend" => {
                self.state_backend = Some(match value.trim().to_ascii_lowercase().as_str() {
                    "rocksdb" => "rocksdb".into(),
                    "hashmap" | "heap" => "heap".into(),
                    _ => return Err(bad("the state backend is 'rocksdb' or 'hashmap' (Weir's heap)")),
                })
            }
            "table.exec.state.ttl" => {
                self.state_ttl_ms = Some(duration_ms(value).ok_or_else(|| bad("expected a duration such as '1 h'"))?)
            }
            k if FLINK_ONLY.contains(&k) => self.ignored.push(k.to_string()),
            _ => {
                return Err(SqlError::plain(format!(
                    "SET '{key}': not a setting Weir knows (it reads pipeline.name, parallelism.default, \
                     execution.checkpointing.interval, state.backend.type and table.exec.state.ttl)"
                )))
            }
        }
        Ok(())
    }

    /// The spec's job-wide fields these settings give.
    pub fn apply(&self, spec: &mut JobSpecFile) {
        if let Some(n) = &self.name {
            spec.name = n.clone();
        }
        spec.parallelism = self.parallelism.or(spec.parallelism);
        if let Some(ms) = self.checkpoint_interval_ms {
            spec.checkpointing.get_or_insert_with(CheckpointingFile::default).interval_ms = Some(ms);
        }
        if let Some(b) = &self.state_backend {
            spec.state_backend = Some(b.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_flink_writes_them() {
        assert_eq!(duration_ms("10 s"), Some(10_000));
        assert_eq!(duration_ms("500ms"), Some(500));
        assert_eq!(duration_ms("2 min"), Some(120_000));
        assert_eq!(duration_ms("1 h"), Some(3_600_000));
        assert_eq!(duration_ms("250"), Some(250));
        assert_eq!(duration_ms("ten s"), None);
        assert_eq!(duration_ms("1 fortnight"), None);
        assert_eq!(duration_ms("99999999999999999 d"), None);
    }

    #[test]
    fn settings_name_the_key_they_refuse() {
        let mut s = Settings::default();
        s.set("parallelism.default", "2").unwrap();
        s.set("execution.checkpointing.interval", "2 s").unwrap();
        s.set("state.backend.type", "hashmap").unwrap();
        s.set("table.exec.mini-batch.enabled", "true").unwrap();
        assert_eq!(
            (s.parallelism, s.checkpoint_interval_ms, s.state_backend.as_deref()),
            (Some(2), Some(2000), Some("heap"))
        );
        assert_eq!(s.ignored, ["table.exec.mini-batch.enabled"]);
        assert!(s.set("parallelism.default", "0").unwrap_err().to_string().contains("at least 1"));
        assert!(s.set("state.backend.type", "memory").unwrap_err().to_string().contains("rocksdb"));
        assert!(s.set("no.such.key", "1").unwrap_err().to_string().contains("no.such.key"));
    }
}
