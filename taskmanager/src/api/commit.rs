//! Files made visible exactly once, for sinks that write files: a file is written hidden
//! (`.<name>.inprogress`), becomes *pending* for the checkpoint whose barrier follows it, and is committed — an
//! idempotent rename to `<name>` — when that checkpoint completes. Pending files are kept in operator list
//! state (`<checkpoint id>\t<name>\t<directory>` per element), so a restored sink commits what the checkpoint
//! it restores from still listed (the completion notification may have been lost) and can delete the hidden
//! files of attempts that never completed a checkpoint. A pending file is committed in the directory it was
//! written to, as Flink's committables carry their full paths: a job restored with another sink path still
//! commits the files the savepoint's job left pending. (Elements without a directory, written before it was
//! recorded, mean the sink's own directory.) Used by `file-sink` and by the user sinks in `examples/`.

use crate::api::operator::OperatorError;
use std::path::{Path, PathBuf};
use weir_common::ids::CheckpointId;

/// The hidden name of a file while it is written and pending.
pub fn hidden_name(name: &str) -> String {
    format!(".{name}.inprogress")
}

/// `<attempt>-<n>`, the end of a file name `<prefix><attempt>-<n>` after the subtask's prefix, as numbers.
pub fn attempt_and_number(rest: &str) -> Option<(u32, u64)> {
    let (a, n) = rest.split_once('-')?;
    Some((a.parse().ok()?, n.parse().ok()?))
}

/// The pending files of one sink subtask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingFiles {
    dir: PathBuf,
    pending: Vec<Pending>,
}

/// A file waiting for its checkpoint to complete.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    checkpoint: CheckpointId,
    dir: PathBuf,
    name: String,
}

impl PendingFiles {
    /// No pending files, in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        PendingFiles { dir: dir.into(), pending: Vec::new() }
    }

    /// The directory the files live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `name` (written hidden) becomes pending for checkpoint `checkpoint`.
    pub fn add(&mut self, checkpoint: CheckpointId, name: String) {
        self.pending.push(Pending { checkpoint, dir: self.dir.clone(), name });
    }

    /// Commits every file pending for a checkpoint up to `id` (renames are idempotent: a file an earlier
    /// notification or restore committed is skipped).
    pub fn commit_up_to(&mut self, id: CheckpointId) -> Result<(), OperatorError> {
        // A file leaves the pending list only once it is committed: after a failed commit the rest is still
        // pending, for the next notification or the restore to commit.
        while let Some(i) = self.pending.iter().position(|p| p.checkpoint <= id) {
            let Pending { checkpoint, dir, name } = &self.pending[i];
            weir_common::service::fault::hit_blocking("sink-commit")
                .map_err(|f| OperatorError::External(f.to_string()))?;
            let from = dir.join(hidden_name(name));
            let to = dir.join(name);
            match std::fs::rename(&from, &to) {
                Ok(()) => tracing::debug!(file = %to.display(), checkpoint_id = checkpoint.0, "committed file"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && to.exists() => {}
                Err(e) => return Err(OperatorError::io(format!("commit {}", to.display()), e)),
            }
            self.pending.remove(i);
        }
        Ok(())
    }

    /// The pending files as operator-state elements.
    pub fn to_state(&self) -> Vec<Vec<u8>> {
        self.pending.iter().map(|p| format!("{}\t{}\t{}", p.checkpoint, p.name, p.dir.display()).into_bytes()).collect()
    }

    /// Takes the pending files of restored state, then commits them all: the checkpoint restored from
    /// completed, so everything it lists is due. `who` names the sink in errors.
    pub fn restore_and_commit(&mut self, elements: &[Vec<u8>], who: &str) -> Result<(), OperatorError> {
        let corrupt = || OperatorError::UnreadableState(format!("{who}: corrupt pending file in restored state"));
        for e in elements {
            let text = std::str::from_utf8(e).map_err(|_| corrupt())?;
            let mut fields = text.splitn(3, '\t');
            let (Some(ckpt), Some(name)) = (fields.next(), fields.next()) else { return Err(corrupt()) };
            let checkpoint = CheckpointId(ckpt.parse().map_err(|_| corrupt())?);
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                return Err(OperatorError::UnreadableState(format!(
                    "{who}: unsafe file name {name:?} in restored state"
                )));
            }
            let dir = match fields.next() {
                Some("") => return Err(corrupt()),
                Some(d) => PathBuf::from(d),
                None => self.dir.clone(),
            };
            self.pending.push(Pending { checkpoint, dir, name: name.to_string() });
        }
        self.commit_up_to(CheckpointId(u64::MAX))
    }

    /// Deletes the hidden files named `<prefix><attempt>-<n>` (one subtask's files of one job) of attempts
    /// before `attempt`: after a restore they belong to attempts that never completed a checkpoint. Files of
    /// this or a later attempt are left alone — an older attempt still starting up somewhere (its task manager
    /// was given up for lost but lives) must not delete what a newer one is writing.
    pub fn remove_uncommitted(&self, prefix: &str, attempt: u32) -> Result<(), OperatorError> {
        let hidden_prefix = format!(".{prefix}");
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| OperatorError::io(format!("list {}", self.dir.display()), e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(&hidden_prefix).and_then(|r| r.strip_suffix(".inprogress")) else {
                continue;
            };
            if attempt_and_number(rest).is_some_and(|(a, _)| a < attempt) {
                let _ = std::fs::remove_file(entry.path());
                tracing::debug!(file = %name, "removed an uncommitted file of an earlier attempt");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_once_and_survives_restore() -> Result<(), OperatorError> {
        let tmp = tempfile::tempdir().unwrap();
        let mut p = PendingFiles::new(tmp.path());
        for (ckpt, name) in [(1, "a"), (2, "b")] {
            std::fs::write(tmp.path().join(hidden_name(name)), name).unwrap();
            p.add(CheckpointId(ckpt), name.to_string());
        }
        p.commit_up_to(CheckpointId(1))?;
        assert!(tmp.path().join("a").exists() && !tmp.path().join("b").exists());
        let state = p.to_state();
        assert_eq!(state, vec![format!("2\tb\t{}", tmp.path().display()).into_bytes()]);
        // A restored subtask commits what its state lists, also when a late notification did it already.
        let mut r = PendingFiles::new(tmp.path());
        r.restore_and_commit(&[b"1\ta".to_vec(), b"2\tb".to_vec()], "test")?;
        assert!(tmp.path().join("b").exists());
        assert!(r.restore_and_commit(&[b"3\t../x".to_vec()], "test").is_err());
        assert!(r.restore_and_commit(&[b"3\tx\t".to_vec()], "test").is_err());
        for name in ["p-1-0", "p-2-0", "p-3-0", "q-1-0"] {
            std::fs::write(tmp.path().join(hidden_name(name)), "x").unwrap();
        }
        // Attempt 2 starts: attempt 1's file goes; its own and a newer attempt's stay, and so do other prefixes.
        r.remove_uncommitted("p-", 2)?;
        let left = |n: &str| tmp.path().join(hidden_name(n)).exists();
        assert!(!left("p-1-0") && left("p-2-0") && left("p-3-0") && left("q-1-0"));
        Ok(())
    }

    #[test]
    fn files_are_committed_where_they_were_written() -> Result<(), OperatorError> {
        let (old, new) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut p = PendingFiles::new(old.path());
        std::fs::write(old.path().join(hidden_name("a")), "a").unwrap();
        p.add(CheckpointId(1), "a".to_string());
        let state = p.to_state();
        // Restored by a sink that writes elsewhere now: the old directory's file is committed, there.
        let mut r = PendingFiles::new(new.path());
        r.restore_and_commit(&state, "test")?;
        assert!(old.path().join("a").exists());
        assert_eq!(std::fs::read_dir(new.path()).unwrap().count(), 0);
        // An element of the old format (no directory) means the sink's own directory.
        std::fs::write(new.path().join(hidden_name("b")), "b").unwrap();
        r.restore_and_commit(&[b"2\tb".to_vec()], "test")?;
        assert!(new.path().join("b").exists());
        Ok(())
    }
}
