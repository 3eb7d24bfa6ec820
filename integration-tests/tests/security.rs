//! Nobody uninvited gets in. Without TLS: the client API wants the bearer token (`UNAUTHENTICATED`
//! otherwise, and nothing changes), the internal services and the data plane want the cluster secret. With
//! TLS: members present certificates of the cluster CA (mutual TLS on gRPC and the data plane), a task manager
//! with a certificate of another CA is refused, a plaintext client gets a clear message, a job runs end to end.
//! No log holds the token, the secret or a key. A key that does not fit its certificate is a start-up error.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;
use weir_integration_tests::ha::{HaCluster, HaOptions};
use weir_integration_tests::process::run_with_timeout;
use weir_integration_tests::{binary, verify_job_output, CountJob};

const TOKEN: &str = "tok-3f9a1c7e5b2d4e60";
const SECRET: &str = "sec-8c2b7e1f0a9d3c55";

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<String> {
    let p = dir.join(name);
    std::fs::write(&p, text)?;
    Ok(p.display().to_string())
}

/// Sends a data-plane frame to `addr` and reports whether the connection is closed on us within 5 s.
fn data_peer_is_dropped(addr: &str, first: &[u8]) -> anyhow::Result<bool> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let _ = s.write_all(first);
    // A TLS server may answer with an alert before it closes: what counts is that the connection ends.
    let mut buf = [0u8; 512];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(true),
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Ok(false)
            }
            Err(_) => return Ok(true),
        }
    }
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = ((payload.len() + 1) as u32).to_le_bytes().to_vec();
    f.push(kind);
    f.extend_from_slice(payload);
    f
}

#[test]
fn tokens_and_the_cluster_secret_keep_strangers_out() -> anyhow::Result<()> {
    let files = tempfile::tempdir()?;
    let token = write(files.path(), "token", &format!("{TOKEN}\n"))?;
    let secret = write(files.path(), "secret", SECRET)?;
    let mut c = HaCluster::start(HaOptions {
        jobmanagers: 1,
        jm_args: vec!["--auth-token-file".into(), token.clone(), "--cluster-secret-file".into(), secret.clone()],
        tm_args: vec!["--cluster-secret-file".into(), secret.clone()],
        cli_env: vec![("WEIR_TOKEN".into(), TOKEN.into())],
        ..Default::default()
    })?;
    // No token, a wrong token: UNAUTHENTICATED, and nothing is submitted.
    let spec = write(c.dir(), "job.yaml", &CountJob::bounded("sec", 1000, 10, 1).yaml())?;
    for env in [vec![], vec![("WEIR_TOKEN", "nope")]] {
        let out = c.cli_bare(&["job", "submit", &spec], &env)?;
        assert_ne!(out.code(), Some(0));
        assert!(out.stderr.contains("UNAUTHENTICATED"), "{}", out.stderr);
    }
    assert_eq!(c.cli_json(&["job", "list"])?.as_array().map_or(0, |a| a.len()), 0, "nothing was submitted");
    // The right token from a file works, and so does the cluster secret (a member's credential).
    let out = c.cli_bare(&["job", "list", "--token-file", &token], &[])?;
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let out = c.cli_bare(&["job", "list", "--cluster-secret-file", &secret], &[])?;
    assert_eq!(out.code(), Some(0), "{}", out.stderr);

    // A task manager without the secret cannot register; one with a client token is no member either.
    let outsider = c.start_taskmanager(&[])?;
    std::thread::sleep(Duration::from_secs(3));
    let tms = c.cli_json(&["cluster"])?["task_managers"].as_array().map_or(0, |a| a.len());
    assert_eq!(tms, 2, "the task manager without the secret registered");
    let log = std::fs::read_to_string(c.dir().join("logs").join(format!("taskmanager-{outsider}.log")))?;
    assert!(!log.contains("registered with job manager"), "{log}");

    // The data plane: a peer that does not send the secret first is dropped.
    let handshake = frame(0, br#"{"to":{"job_id":"x","attempt":1,"vertex":0,"subtask":0},"from_subtask":0}"#);
    assert!(data_peer_is_dropped(&c.data_addresses[0], &handshake)?, "a data peer without the secret was kept");

    // A job runs across the secret-protected data plane.
    let out_dir = c.output_dir("counts")?;
    let job = CountJob::bounded("sec-job", 100_000, 1000, 7).into_files(&out_dir);
    let id = c.submit(&job)?;
    c.wait_for_state(&id, "FINISHED", Duration::from_secs(120))?;
    verify_job_output(&job, &out_dir)?;

    let logs = c.all_logs();
    assert!(logs.contains("refusing a data connection"), "the refusal is logged");
    assert!(!logs.contains(TOKEN) && !logs.contains(SECRET), "a secret reached a log");
    let mut help = std::process::Command::new(binary("weir")?);
    help.arg("--help").env("WEIR_TOKEN", TOKEN);
    let help = run_with_timeout(help, Duration::from_secs(10))?;
    assert!(!help.stdout.contains(TOKEN), "--help shows the token");
    c.stop();
    Ok(())
}

/// A CA named `name` and a member certificate signed by it; returns (cert, key, ca) paths.
fn member(dir: &Path, name: &str) -> anyhow::Result<(String, String, String)> {
    let f = weir_integration_tests::pki::member(dir, name)?;
    Ok((f.cert.display().to_string(), f.key.display().to_string(), f.ca.display().to_string()))
}

#[test]
fn mutual_tls_admits_members_only() -> anyhow::Result<()> {
    let files = tempfile::tempdir()?;
    let (cert, key, ca) = member(files.path(), "weir")?;
    let (rogue_cert, rogue_key, rogue_ca) = member(files.path(), "rogue")?;
    let token = write(files.path(), "token", TOKEN)?;
    let tls = |c: &str, k: &str, a: &str| {
        vec![
            "--tls-cert".to_string(),
            c.to_string(),
            "--tls-key".into(),
            k.to_string(),
            "--tls-ca".into(),
            a.to_string(),
        ]
    };
    let mut jm_args = tls(&cert, &key, &ca);
    jm_args.extend(["--auth-token-file".to_string(), token.clone()]);
    // etcd too is reached over mutual TLS, with the members' CA.
    let etcd_tls = weir_integration_tests::pki::MemberFiles {
        cert: cert.clone().into(),
        key: key.clone().into(),
        ca: ca.clone().into(),
    };
    let mut c = HaCluster::start(HaOptions {
        jobmanagers: 1,
        jm_args,
        etcd_tls: Some(etcd_tls),
        tm_args: tls(&cert, &key, &ca),
        cli_args: vec!["--tls-ca".into(), ca.clone()],
        cli_env: vec![("WEIR_TOKEN".into(), TOKEN.into())],
        ..Default::default()
    })?;
    // A plaintext client against the TLS server: a clear message, not a hang.
    let out = c.cli_bare(&["job", "list"], &[("WEIR_TOKEN", TOKEN)])?;
    assert_ne!(out.code(), Some(0));
    assert!(out.stderr.to_lowercase().contains("tls"), "no hint at TLS: {}", out.stderr);

    // A task manager with a certificate of another CA is refused.
    let rogue = c.start_taskmanager(&tls(&rogue_cert, &rogue_key, &rogue_ca))?;
    std::thread::sleep(Duration::from_secs(3));
    let tms = c.cli_json(&["cluster"])?["task_managers"].as_array().map_or(0, |a| a.len());
    assert_eq!(tms, 2, "the rogue task manager registered");
    let log = std::fs::read_to_string(c.dir().join("logs").join(format!("taskmanager-{rogue}.log")))?;
    assert!(!log.contains("registered with job manager"), "{log}");

    // A data-plane peer without a member certificate (plain TCP) is refused.
    let handshake = frame(0, b"{}");
    assert!(data_peer_is_dropped(&c.data_addresses[0], &handshake)?, "a plaintext data peer was kept");

    // A job runs with TLS on gRPC and the data plane.
    let out_dir = c.output_dir("counts")?;
    let job = CountJob::bounded("tls-job", 100_000, 1000, 9).into_files(&out_dir);
    let id = c.submit(&job)?;
    c.wait_for_state(&id, "FINISHED", Duration::from_secs(120))?;
    verify_job_output(&job, &out_dir)?;
    let logs = c.all_logs();
    assert!(logs.contains("refusing a data connection"), "the refusal is logged");
    let key_text = std::fs::read_to_string(&key)?;
    let key_body = key_text.lines().nth(1).unwrap_or("no key line");
    assert!(!logs.contains(TOKEN) && !logs.contains(key_body), "a secret reached a log");
    c.stop();

    // A key that does not fit its certificate: the job manager refuses to start, saying so.
    let mut cmd = std::process::Command::new(binary("weir-jobmanager")?);
    cmd.args(["--bind", "127.0.0.1:0", "--tls-cert", &cert, "--tls-key", &rogue_key, "--tls-ca", &ca])
        .arg("--data-dir")
        .arg(files.path().join("jm"));
    let out = run_with_timeout(cmd, Duration::from_secs(20))?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("does not fit the certificate"), "{}", out.stderr);
    assert!(!out.stderr.contains(key_body), "the key reached the error");
    Ok(())
}
