//! Reading what a `file-sink` committed and comparing it with what a bounded `datagen` must produce.

use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use weir_common::datagen::expected_counts;

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

/// Compares sink output with the counts of a bounded datagen (`count` records over `keys` keys from `seed`).
/// Keys that no record has must be absent. The error says exactly what differs, with the first examples.
pub fn verify_counts(output: &HashMap<u64, u64>, seed: u64, count: u64, keys: u64) -> Result<(), String> {
    const EXAMPLES: usize = 5;
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

#[cfg(test)]
mod tests {
    use super::*;
    use weir_common::datagen::key_of;

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
