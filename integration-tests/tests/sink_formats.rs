//! `file-sink`'s formats on a real cluster: the same keyed count written as CSV (a header per file), JSON lines
//! and Parquet, each read back and checked exactly against the counts datagen's formula gives.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use weir_integration_tests::output::verify_counts;
use weir_integration_tests::{Cluster, ClusterOptions, JobState};

const COUNT: u64 = 5_000;
const KEYS: u64 = 37;
const SEED: u64 = 7;

fn spec(name: &str, format: &str, out: &Path) -> String {
    format!(
        "name: {name}\nparallelism: 2\ncheckpointing: {{ interval_ms: 200 }}\noperators:\n  \
         - {{ uid: events, kind: datagen, config: {{ count: {COUNT}, keys: {KEYS}, seed: {SEED} }} }}\n  \
         - {{ uid: counts, kind: keyed-count, input: events }}\n  \
         - {{ uid: out, kind: file-sink, input: counts, parallelism: 1, config: {{ path: {}, format: {format} }} }}\n",
        out.display()
    )
}

/// The committed (visible) files of a sink directory.
fn committed(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if !e.file_name().to_string_lossy().starts_with('.') {
            files.push(e.path());
        }
    }
    anyhow::ensure!(!files.is_empty(), "no committed file in {}", dir.display());
    Ok(files)
}

fn add(counts: &mut HashMap<u64, u64>, key: u64, count: u64) -> anyhow::Result<()> {
    anyhow::ensure!(counts.insert(key, count).is_none(), "key {key} written twice");
    Ok(())
}

fn read_csv(dir: &Path) -> anyhow::Result<HashMap<u64, u64>> {
    let mut counts = HashMap::new();
    for f in committed(dir)? {
        let text = std::fs::read_to_string(&f)?;
        let mut lines = text.lines();
        anyhow::ensure!(lines.next() == Some("key,value"), "{} does not start with its header", f.display());
        for line in lines {
            let (k, v) = line.split_once(',').ok_or_else(|| anyhow::anyhow!("bad line {line:?}"))?;
            add(&mut counts, k.parse()?, v.parse()?)?;
        }
    }
    Ok(counts)
}

fn read_json(dir: &Path) -> anyhow::Result<HashMap<u64, u64>> {
    let mut counts = HashMap::new();
    for f in committed(dir)? {
        for line in std::fs::read_to_string(&f)?.lines() {
            let row: serde_json::Value = serde_json::from_str(line)?;
            let field = |name: &str| row.get(name).and_then(|v| v.as_u64());
            let (Some(k), Some(v)) = (field("key"), field("value")) else { anyhow::bail!("bad row {line}") };
            add(&mut counts, k, v)?;
        }
    }
    Ok(counts)
}

fn read_parquet(dir: &Path) -> anyhow::Result<HashMap<u64, u64>> {
    use arrow_array::{Array, BinaryArray, Int64Array};
    let mut counts = HashMap::new();
    for f in committed(dir)? {
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&f)?)?
            .build()?;
        for batch in reader {
            let batch = batch?;
            let names: Vec<&str> = batch.schema_ref().fields().iter().map(|f| f.name().as_str()).collect();
            anyhow::ensure!(names == ["key", "value"], "columns {names:?}");
            let keys = batch.column(0).as_any().downcast_ref::<BinaryArray>().ok_or(anyhow::anyhow!("key type"))?;
            let values = batch.column(1).as_any().downcast_ref::<Int64Array>().ok_or(anyhow::anyhow!("value type"))?;
            for i in 0..batch.num_rows() {
                let key = u64::from_be_bytes(keys.value(i).try_into()?);
                add(&mut counts, key, values.value(i) as u64)?;
            }
        }
    }
    Ok(counts)
}

#[test]
fn csv_json_and_parquet_hold_the_exact_counts() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 4))?;
    type Reader = fn(&Path) -> anyhow::Result<HashMap<u64, u64>>;
    let formats: [(&str, Reader); 3] = [("csv", read_csv), ("json", read_json), ("parquet", read_parquet)];
    for (format, read) in formats {
        let out = cluster.output_dir(format)?;
        let id = cluster.submit(&spec(&format!("sink-{format}"), format, &out))?;
        cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(60))?;
        let counts = read(&out)?;
        verify_counts(&counts, SEED, COUNT, KEYS).map_err(|e| anyhow::anyhow!("{format}: {e}"))?;
    }
    cluster.stop();
    Ok(())
}
