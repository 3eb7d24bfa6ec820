//! Reading what a `file-sink` committed and comparing it with what a bounded `datagen` must produce: one
//! count per key (`keyed-count` with `emit: end`), or every running count `key,1` … `key,n` once
//! (`emit: updates`).

use crate::job::{CountJob, KeyedCountEmit};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use weir_common::job::datagen::expected_counts;

/// How many examples a difference report names.
const EXAMPLES: usize = 5;

/// Reads every committed file under `dir` (recursively; dot-prefixed files and directories are in-progress
/// and skipped) as `key,count` lines. A key seen twice is an error naming both places: exactly-once output
/// has each key once.
pub fn read_sink_output(dir: &Path) -> Result<HashMap<u64, u64>> {
    let mut files = Vec::new();
    collect_files(dir, &mut files).with_context(|| format!("cannot list sink output {}", dir.display()))?;
    files.sort();
    let mut counts = HashMap::new();
    let mut seen_in: HashMap<u64, (PathBuf, usize)> = HashMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (key, count) = parse_line(line)
                .with_context(|| format!("{}:{}: not a `key,count` line: {line:?}", file.display(), n + 1))?;
            if let Some((first, first_line)) = seen_in.get(&key) {
                bail!(
                    "key {key} written twice: {}:{} and {}:{} (exactly-once output has each key once)",
                    first.display(),
                    first_line,
                    file.display(),
                    n + 1
                );
            }
            seen_in.insert(key, (file.clone(), n + 1));
            counts.insert(key, count);
        }
    }
    Ok(counts)
}

fn parse_line(line: &str) -> Option<(u64, u64)> {
    let (k, v) = line.trim().split_once(',')?;
    Some((k.trim().parse().ok()?, v.trim().parse().ok()?))
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let ty = entry.file_type()?;
        if ty.is_dir() {
            collect_files(&entry.path(), out)?;
        } else if ty.is_file() {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// The position (next record index) of every split of a `datagen` source with uid `uid`, read from the
/// operator state of a savepoint in the local directory `dir` (each subtask's `<uid>/<subtask>/opstate`:
/// elements of a `u32` little-endian length and 12 bytes, the split id and its next index).
pub fn datagen_positions(dir: &Path, uid: &str) -> Result<std::collections::BTreeMap<u32, u64>> {
    let mut positions = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir.join(uid)).with_context(|| format!("no {uid} state in {}", dir.display()))? {
        let blob = std::fs::read(entry?.path().join("opstate"))?;
        let mut rest = blob.as_slice();
        while !rest.is_empty() {
            let (len, tail) = rest.split_at_checked(4).context("a truncated element length")?;
            let len = u32::from_le_bytes(len.try_into()?) as usize;
            if len != 12 {
                bail!("a split element of {len} bytes, not 12");
            }
            let (e, tail) = tail.split_at_checked(len).context("a truncated split element")?;
            let id = u32::from_le_bytes(e[..4].try_into()?);
            let next = u64::from_le_bytes(e[4..].try_into()?);
            if positions.insert(id, next).is_some() {
                bail!("split {id} twice");
            }
            rest = tail;
        }
    }
    Ok(positions)
}

/// The per-key counts of the records of a bounded datagen (`count` records over `keys` keys from `seed`, in
/// `splits` splits) that come after the split `positions`: what a counter restored without its state but with
/// the source's positions counts from there on.
pub fn counts_after(
    seed: u64,
    count: u64,
    keys: u64,
    splits: u32,
    positions: &std::collections::BTreeMap<u32, u64>,
) -> HashMap<u64, u64> {
    let mut counts = HashMap::new();
    for j in 0..splits {
        let (start, end) = weir_common::job::datagen::split_range(j, splits, Some(count));
        let from = positions.get(&j).copied().unwrap_or(start);
        for i in from..end {
            *counts.entry(weir_common::job::datagen::key_of(seed, i, keys)).or_insert(0) += 1;
        }
    }
    counts
}

/// Compares sink output with the counts of a bounded datagen (`count` records over `keys` keys from `seed`).
/// Keys that no record has must be absent. The error says exactly what differs, with the first examples.
pub fn verify_counts(output: &HashMap<u64, u64>, seed: u64, count: u64, keys: u64) -> Result<(), String> {
    let expected = expected_counts(seed, count, keys);
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    for (key, &want) in expected.iter().enumerate() {
        let key = key as u64;
        match output.get(&key) {
            None if want > 0 => missing.push((key, want)),
            Some(&got) if got != want => wrong.push((key, want, got)),
            _ => {}
        }
    }
    let mut extra: Vec<(u64, u64)> =
        output.iter().filter(|(&k, _)| k >= keys || expected[k as usize] == 0).map(|(&k, &v)| (k, v)).collect();
    if missing.is_empty() && wrong.is_empty() && extra.is_empty() {
        return Ok(());
    }
    missing.sort_unstable();
    wrong.sort_unstable();
    extra.sort_unstable();
    let total: u64 = output.values().sum();
    let expected_keys = expected.iter().filter(|&&c| c > 0).count();
    let mut report = format!(
        "output differs from datagen(seed {seed}, count {count}, keys {keys}): {} keys and {total} records in the \
         output, {expected_keys} keys and {count} records expected",
        output.len()
    );
    if !missing.is_empty() {
        let ex: Vec<String> = missing.iter().take(EXAMPLES).map(|(k, c)| format!("{k} (count {c})")).collect();
        report.push_str(&format!("\n  {} keys missing, e.g. {}", missing.len(), ex.join(", ")));
    }
    if !extra.is_empty() {
        let ex: Vec<String> = extra.iter().take(EXAMPLES).map(|(k, c)| format!("{k} (count {c})")).collect();
        report.push_str(&format!("\n  {} unexpected keys, e.g. {}", extra.len(), ex.join(", ")));
    }
    if !wrong.is_empty() {
        let over = wrong.iter().filter(|(_, want, got)| got > want).count();
        let ex: Vec<String> =
            wrong.iter().take(EXAMPLES).map(|(k, want, got)| format!("{k}: {got} instead of {want}")).collect();
        report.push_str(&format!(
            "\n  {} keys with wrong counts ({over} too high, {} too low), e.g. {}",
            wrong.len(),
            wrong.len() - over,
            ex.join(", ")
        ));
    }
    Err(report)
}

/// Every committed `key,value` line under a sink's directory, in file order, with where it is.
#[derive(Clone, Debug, Default)]
pub struct SinkLines {
    /// The committed files, sorted.
    pub files: Vec<PathBuf>,
    /// `(key, value, index into files, 1-based line number)`.
    pub lines: Vec<(u64, u64, u32, u32)>,
}

impl SinkLines {
    fn place(&self, file: u32, line: u32) -> String {
        let name = self.files.get(file as usize).map(|f| f.display().to_string()).unwrap_or_default();
        format!("{name}:{line}")
    }
}

/// Reads every committed file under `dir` (as [`read_sink_output`] does) as `key,value` lines, repeats
/// allowed: the output of `keyed-count` with `emit: updates`.
pub fn read_sink_lines(dir: &Path) -> Result<SinkLines> {
    let mut out = SinkLines::default();
    collect_files(dir, &mut out.files).with_context(|| format!("cannot list sink output {}", dir.display()))?;
    out.files.sort();
    for (f, file) in out.files.iter().enumerate() {
        let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (key, value) = parse_line(line)
                .with_context(|| format!("{}:{}: not a `key,count` line: {line:?}", file.display(), n + 1))?;
            out.lines.push((key, value, f as u32, n as u32 + 1));
        }
    }
    Ok(out)
}

/// Compares sink output with the running counts of a bounded datagen: for a key with n records, exactly the
/// lines `key,1` … `key,n`, each once, and nothing else. The error says which lines are missing, which are
/// there more than once (with where, for the first), and which should not be there at all.
pub fn verify_running_counts(output: &SinkLines, seed: u64, count: u64, keys: u64) -> Result<(), String> {
    let expected = expected_counts(seed, count, keys);
    // One slot per expected line: key k's line `k,c` is slot offsets[k] + c - 1.
    let mut offsets = Vec::with_capacity(expected.len() + 1);
    let mut total = 0usize;
    for &n in &expected {
        offsets.push(total);
        total += n as usize;
    }
    offsets.push(total);
    let mut seen = vec![0u32; total];
    let mut unexpected: Vec<(u64, u64, u32, u32)> = Vec::new();
    for &(key, value, file, line) in &output.lines {
        let n = expected.get(key as usize).copied().unwrap_or(0);
        if value == 0 || value > n {
            unexpected.push((key, value, file, line));
            continue;
        }
        seen[offsets[key as usize] + value as usize - 1] += 1;
    }

    // Per key: the counts missing and the counts seen more than once (with how often).
    let mut missing: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut duplicated: Vec<(u64, Vec<(u64, u32)>)> = Vec::new();
    let (mut missing_lines, mut extra_copies) = (0usize, 0u64);
    for (key, &n) in expected.iter().enumerate() {
        let slots = &seen[offsets[key]..offsets[key] + n as usize];
        let gone: Vec<u64> = (1..=n).filter(|c| slots[*c as usize - 1] == 0).collect();
        let twice: Vec<(u64, u32)> =
            (1..=n).map(|c| (c, slots[c as usize - 1])).filter(|&(_, times)| times > 1).collect();
        missing_lines += gone.len();
        extra_copies += twice.iter().map(|&(_, t)| u64::from(t) - 1).sum::<u64>();
        if !gone.is_empty() {
            missing.push((key as u64, gone));
        }
        if !twice.is_empty() {
            duplicated.push((key as u64, twice));
        }
    }
    if missing.is_empty() && duplicated.is_empty() && unexpected.is_empty() {
        return Ok(());
    }

    let mut report = format!(
        "output differs from the running counts of datagen(seed {seed}, count {count}, keys {keys}): {} lines in \
         {} committed files, {count} expected (`key,1` … `key,n` once for a key with n records)",
        output.lines.len(),
        output.files.len()
    );
    if !missing.is_empty() {
        let ex: Vec<String> = missing
            .iter()
            .take(EXAMPLES)
            .map(|(k, gone)| format!("key {k} lacks {} of 1..={}", ranges(gone), expected[*k as usize]))
            .collect();
        report.push_str(&format!(
            "\n  {missing_lines} lines missing over {} keys, e.g. {}",
            missing.len(),
            ex.join("; ")
        ));
    }
    if !duplicated.is_empty() {
        let ex: Vec<String> = duplicated
            .iter()
            .take(EXAMPLES)
            .map(|(k, twice)| {
                let shown: Vec<String> = twice.iter().take(8).map(|(c, t)| format!("{c} ×{t}")).collect();
                let more = if twice.len() > 8 { format!(" and {} more", twice.len() - 8) } else { String::new() };
                format!("key {k} has {}{more} of 1..={}", shown.join(", "), expected[*k as usize])
            })
            .collect();
        report.push_str(&format!(
            "\n  {extra_copies} extra copies of {} distinct lines over {} keys, e.g. {}",
            duplicated.iter().map(|(_, t)| t.len()).sum::<usize>(),
            duplicated.len(),
            ex.join("; ")
        ));
        // Where the first duplicated line is, to tell which commits repeated it.
        let (k, twice) = &duplicated[0];
        let c = twice[0].0;
        let places: Vec<String> = output
            .lines
            .iter()
            .filter(|&&(key, value, _, _)| key == *k && value == c)
            .map(|&(_, _, f, l)| output.place(f, l))
            .collect();
        report.push_str(&format!("\n  `{k},{c}` is at {}", places.join(" and ")));
    }
    if !unexpected.is_empty() {
        let ex: Vec<String> = unexpected
            .iter()
            .take(EXAMPLES)
            .map(|&(k, v, f, l)| {
                let n = expected.get(k as usize).copied().unwrap_or(0);
                format!("`{k},{v}` at {} (key {k} has {n} records)", output.place(f, l))
            })
            .collect();
        report.push_str(&format!("\n  {} unexpected lines, e.g. {}", unexpected.len(), ex.join("; ")));
    }
    Err(report)
}

/// `1-3, 7, 9-10` for sorted numbers.
fn ranges(sorted: &[u64]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        parts.push(if sorted[i] == start { start.to_string() } else { format!("{start}-{}", sorted[i]) });
        i += 1;
    }
    if parts.len() > 6 {
        let n = parts.len();
        parts.truncate(6);
        parts.push(format!("… ({n} runs)"));
    }
    parts.join(", ")
}

/// Reads what the `file-sink` under `dir` committed for `job` (bounded) and checks it against the datagen
/// formula: one count per key for `emit: end`, every running count once for `emit: updates`.
pub fn verify_job_output(job: &CountJob, dir: &Path) -> Result<()> {
    let records = job.records.context("only a bounded job's output can be verified")?;
    let diff = match job.emit {
        KeyedCountEmit::End => verify_counts(&read_sink_output(dir)?, job.seed, records, job.keys),
        KeyedCountEmit::Updates => verify_running_counts(&read_sink_lines(dir)?, job.seed, records, job.keys),
    };
    diff.map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_common::job::datagen::key_of;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn exact(seed: u64, count: u64, keys: u64) -> HashMap<u64, u64> {
        let mut m = HashMap::new();
        for i in 0..count {
            *m.entry(key_of(seed, i, keys)).or_insert(0) += 1;
        }
        m
    }

    #[test]
    fn reads_committed_files_and_skips_in_progress_ones() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "part-0-1", "1,5\n2,7\n");
        write(dir.path(), ".part-0-2.inprogress", "1,5\n");
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        write(&dir.path().join("sub"), "part-1-1", "3,1\n\n");
        std::fs::create_dir(dir.path().join(".staging")).unwrap();
        write(&dir.path().join(".staging"), "x", "9,9\n");
        let out = read_sink_output(dir.path()).unwrap();
        assert_eq!(out, HashMap::from([(1, 5), (2, 7), (3, 1)]));
    }

    #[test]
    fn a_key_written_twice_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a", "1,5\n");
        write(dir.path(), "b", "2,1\n1,5\n");
        let err = read_sink_output(dir.path()).unwrap_err().to_string();
        assert!(err.contains("key 1 written twice"), "{err}");
        assert!(err.contains("b:2"), "{err}");
    }

    #[test]
    fn garbage_lines_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a", "1;5\n");
        assert!(format!("{:#}", read_sink_output(dir.path()).unwrap_err()).contains("not a `key,count` line"));
    }

    #[test]
    fn exact_output_verifies() {
        let out = exact(7, 10_000, 500);
        verify_counts(&out, 7, 10_000, 500).unwrap();
    }

    /// The lines a job with `emit: updates` commits, in record order.
    fn running(seed: u64, count: u64, keys: u64) -> SinkLines {
        let mut n: HashMap<u64, u64> = HashMap::new();
        let mut out = SinkLines { files: vec![PathBuf::from("part-0")], lines: Vec::new() };
        for i in 0..count {
            let key = key_of(seed, i, keys);
            let c = n.entry(key).or_insert(0);
            *c += 1;
            out.lines.push((key, *c, 0, i as u32 + 1));
        }
        out
    }

    #[test]
    fn exact_running_counts_verify() {
        verify_running_counts(&running(7, 10_000, 500), 7, 10_000, 500).unwrap();
        let mut shuffled = running(7, 10_000, 500);
        shuffled.lines.reverse();
        verify_running_counts(&shuffled, 7, 10_000, 500).unwrap();
    }

    #[test]
    fn running_count_differences_are_described() {
        let exact = running(7, 10_000, 500);
        let (key, _, _, _) = exact.lines[0];
        let n = exact.lines.iter().filter(|l| l.0 == key).count() as u64;
        assert!(n >= 4, "the first key has {n} records");
        let mut out = exact.clone();
        // Lose key,2 and key,3; commit key,1 a second time (a replayed file); add a count beyond n.
        out.lines.retain(|&(k, c, _, _)| !(k == key && (c == 2 || c == 3)));
        out.files.push(PathBuf::from("part-0-replayed"));
        out.lines.push((key, 1, 1, 4));
        out.lines.push((key, n + 1, 1, 5));
        let err = verify_running_counts(&out, 7, 10_000, 500).unwrap_err();
        assert!(err.contains(&format!("2 lines missing over 1 keys, e.g. key {key} lacks 2-3 of 1..={n}")), "{err}");
        assert!(
            err.contains(&format!("1 extra copies of 1 distinct lines over 1 keys, e.g. key {key} has 1 ×2")),
            "{err}"
        );
        assert!(err.contains(&format!("`{key},1` is at part-0:1 and part-0-replayed:4")), "{err}");
        assert!(err.contains(&format!("1 unexpected lines, e.g. `{key},{}` at part-0-replayed:5", n + 1)), "{err}");
        // A key no record has, and a count of 0.
        let mut out = exact;
        out.lines.push((10_000, 1, 0, 99));
        out.lines.push((key, 0, 0, 100));
        let err = verify_running_counts(&out, 7, 10_000, 500).unwrap_err();
        assert!(err.contains("2 unexpected lines, e.g. `10000,1` at part-0:99 (key 10000 has 0 records)"), "{err}");
    }

    #[test]
    fn ranges_are_compact() {
        assert_eq!(ranges(&[1, 2, 3, 7, 9, 10]), "1-3, 7, 9-10");
        assert_eq!(ranges(&[5]), "5");
        assert_eq!(ranges(&[1, 3, 5, 7, 9, 11, 13, 15]), "1, 3, 5, 7, 9, 11, … (8 runs)");
    }

    #[test]
    fn reads_lines_with_repeats() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a", "1,1\n1,2\n");
        write(dir.path(), "b", "1,2\n");
        write(dir.path(), ".b.inprogress", "1,3\n");
        let lines = read_sink_lines(dir.path()).unwrap();
        assert_eq!(lines.lines, vec![(1, 1, 0, 1), (1, 2, 0, 2), (1, 2, 1, 1)]);
        assert!(lines.place(1, 1).ends_with("b:1"));
    }

    #[test]
    fn differences_are_described() {
        let mut out = exact(7, 10_000, 500);
        let some_key = *out.keys().min().unwrap();
        out.remove(&some_key);
        *out.get_mut(&(some_key + 1)).unwrap() += 1;
        out.insert(10_000, 3);
        let err = verify_counts(&out, 7, 10_000, 500).unwrap_err();
        assert!(err.contains(&format!("1 keys missing, e.g. {some_key} (count")), "{err}");
        assert!(err.contains("1 unexpected keys, e.g. 10000 (count 3)"), "{err}");
        assert!(err.contains("1 keys with wrong counts (1 too high, 0 too low)"), "{err}");
    }
}
