//! Incremental checkpoints stay correct after subsumption: every retained checkpoint of a finished job is
//! restorable from the files left in the store, and its state is consistent — the counts in the keyed state
//! add up to exactly the records the sources had emitted before the barrier. Shared files that no retained
//! checkpoint references are gone, also those of uploads no acknowledgement named (swept when the job ends).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use weir_common::checkpoint::CheckpointMetadata;
use weir_common::job::datagen::split_range;
use weir_common::job::spec::StateBackend;
use weir_common::service::store::{Store, StoreOptions};
use weir_integration_tests::{
    wait_for_no_orphaned_shared_files, wait_until, Cluster, ClusterOptions, CountJob, JobState,
};
use weir_state::{open_keyed_backend, OperatorStateStore, ValueState};

const RECORDS: u64 = 2_000_000;
const SPLITS: u32 = 128;

/// (sum of the counts in keyed state, records the sources had emitted) of one checkpoint.
fn totals(
    rt: &tokio::runtime::Runtime,
    store: &Store,
    meta: &CheckpointMetadata,
    scratch: &Path,
) -> anyhow::Result<(u64, u64)> {
    let mut counted = 0;
    for st in &meta.operators["counts"].subtasks {
        let h = st.keyed.as_ref().ok_or_else(|| anyhow::anyhow!("keyed-count subtask without keyed state"))?;
        let dir = scratch.join(format!("chk-{}-{}", meta.checkpoint_id, st.subtask));
        rt.block_on(weir_state::snapshot::download_keyed(store, h, &dir.join("dl")))?;
        let mut b = open_keyed_backend(
            StateBackend::Rocksdb,
            &dir.join("work"),
            meta.max_parallelism,
            h.key_group_range,
            Some(&dir.join("dl")),
            &Default::default(),
        )?;
        let s = ValueState::<u64>::register(b.as_mut(), "count")?;
        s.for_each(b.as_mut(), |_, n| {
            counted += n;
            Ok(())
        })?;
    }
    let mut emitted = 0;
    for st in &meta.operators["events"].subtasks {
        let h = st.operator_state.as_ref().ok_or_else(|| anyhow::anyhow!("datagen subtask without its splits"))?;
        let blob = rt.block_on(store.get(&h.file.path))?;
        let mut ops = OperatorStateStore::restore(&blob, &h.states)?;
        for e in ops.list_state("splits")?.iter() {
            let id = u32::from_le_bytes(e[0..4].try_into()?);
            let next = u64::from_le_bytes(e[4..12].try_into()?);
            emitted += next - split_range(id, SPLITS, Some(RECORDS)).0;
        }
    }
    Ok((counted, emitted))
}

#[test]
fn retained_incremental_checkpoints_stay_restorable_and_consistent() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let job = CountJob::bounded("incremental", RECORDS, 50_000, 3)
        .rate(250_000)
        .checkpoint_every_ms(250)
        .retain_checkpoints(3)
        .into_blackhole();
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(120))?;
    let checkpoints = cluster.checkpoints(&id)?;
    assert!(checkpoints.len() >= 6, "enough checkpoints for subsumption: {}", checkpoints.len());

    let root = cluster.checkpoint_dir().ok_or_else(|| anyhow::anyhow!("local store expected"))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let store = Store::open(&format!("file://{}", root.display()), &StoreOptions::default())?;
    // Subsumed checkpoints' cleanup runs in the background: wait until exactly the retained ones are left.
    let mut listing = Vec::new();
    let settled = wait_until("for the subsumed checkpoints to be deleted", Duration::from_secs(20), || {
        listing = rt.block_on(store.list(&id))?;
        Ok((listing.iter().filter(|p| p.ends_with("/_metadata")).count() <= 3).then_some(()))
    });
    if let Err(e) = settled {
        anyhow::bail!("{e:#}; left: {listing:#?}");
    }
    let metas: Vec<CheckpointMetadata> = listing
        .iter()
        .filter(|p| p.ends_with("/_metadata"))
        .map(|p| CheckpointMetadata::from_bytes(&rt.block_on(store.get(p))?).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<_>>()?;
    assert_eq!(metas.len(), 3, "exactly the retained checkpoints are left: {listing:#?}");

    let scratch = tempfile::tempdir()?;
    let mut uses: HashMap<String, usize> = HashMap::new();
    for meta in &metas {
        let (counted, emitted) = totals(&rt, &store, meta, scratch.path())?;
        assert_eq!(counted, emitted, "checkpoint {}: counts vs records emitted before its barrier", meta.checkpoint_id);
        if meta.is_final {
            assert_eq!(counted, RECORDS);
        }
        for op in meta.operators.values() {
            for st in &op.subtasks {
                for f in st.keyed.iter().flat_map(|k| k.files.iter()) {
                    *uses.entry(f.path.clone()).or_default() += 1;
                }
            }
        }
    }
    assert!(uses.values().any(|&n| n > 1), "some SST file is shared by two retained checkpoints");
    // Files only subsumed checkpoints referenced go in the same background cleanup.
    wait_for_no_orphaned_shared_files(&root, &id, Duration::from_secs(20))?;
    cluster.stop();
    Ok(())
}

#[test]
fn shared_files_no_acknowledgement_named_are_swept_when_the_job_ends() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let job = CountJob::unbounded("sweep", 10_000, 7).rate(50_000).checkpoint_every_ms(200).into_blackhole();
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    cluster.wait_for_checkpoint_after(&id, 1, Duration::from_secs(60))?;
    let root = cluster.checkpoint_dir().ok_or_else(|| anyhow::anyhow!("local store expected"))?;
    // What a task that died while uploading leaves behind: a file in its instance folder that no
    // acknowledgement (so no cleanup of the failed checkpoint) ever named.
    let stray = root.join(&id).join("shared/counts/0/0123456789ab/000042.sst");
    std::fs::create_dir_all(stray.parent().unwrap_or(&root))?;
    std::fs::write(&stray, b"half an upload")?;
    cluster.cancel(&id)?;
    cluster.wait_for_state(&id, &[JobState::Canceled], Duration::from_secs(30))?;

    wait_for_no_orphaned_shared_files(&root, &id, Duration::from_secs(20))?;
    assert!(!stray.exists(), "the stray upload was swept");
    cluster.stop();
    Ok(())
}
