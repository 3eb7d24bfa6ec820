//! The `weir-jobmanager` binary: bad configuration exits 2 with a one-line reason, a good one prints the
//! listening line with the real port, and SIGTERM stops it with status 0.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_weir-jobmanager");

#[test]
fn bad_config_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["--heartbeat-interval-ms", "1000", "--heartbeat-timeout-ms", "10", "--data-dir"])
        .arg(dir.path())
        .env_remove("WEIR_BIND")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("heartbeat_timeout_ms"), "{stderr}");

    let config = dir.path().join("jm.toml");
    std::fs::write(&config, "bindd = \"127.0.0.1:0\"\n").unwrap();
    let out = Command::new(BIN).arg("--config").arg(&config).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bindd"));
}

#[test]
fn prints_address_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args(["--bind", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("jm"))
        .env("WEIR_HEARTBEAT_INTERVAL_MS", "200")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("weir-jobmanager listening on http://127.0.0.1:").unwrap_or_else(|| {
        let _ = child.kill();
        panic!("unexpected first line {line:?}")
    });
    assert_ne!(addr, "0", "the real port is printed");
    assert!(dir.path().join("jm").join("jobs").is_dir());

    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the job manager did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
