//! Nobody uninvited gets in. Without TLS: the client API wants the bearer token (`UNAUTHENTICATED`
//! otherwise, and nothing changes), the internal services and the data plane want the cluster secret. With
//! TLS: members present certificates of the cluster CA (mutual TLS on gRPC and the data plane). A peer that
//! trusts the cluster's CA but presents a certificate of another CA, or none at all, is refused by the job
//! manager, by the task manager's own gRPC service and by the data plane, and both sides log who was refused
//! and why; a valid client token opens none of the internal RPCs; with TLS on, the cluster secret opens no
//! client API; a plaintext client gets a clear message; a job runs end to end. No log holds the token, the
//! secret or a key. A key that does not fit its certificate is a start-up error, and so is a client token
//! without any member authentication (unless `--insecure-members` says so on purpose).

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use weir_common::service::security::{Secret, Security, TlsFiles};
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

/// A data-plane handshake frame naming a consumer task.
fn handshake() -> Vec<u8> {
    frame(0, br#"{"to":{"job_id":"x","attempt":1,"vertex":0,"subtask":0},"from_vertex":0,"from_subtask":0}"#)
}

/// What a peer that is not a member presents over TLS.
enum Stranger<'a> {
    /// A certificate of another CA, while trusting the cluster's CA (so that it accepts the server).
    OtherCa { cert: &'a str, key: &'a str, cluster_ca: &'a str },
    /// No certificate at all, trusting the cluster's CA.
    NoCertificate { cluster_ca: &'a str },
}

impl Stranger<'_> {
    fn security(&self, token: Option<&str>) -> anyhow::Result<Security> {
        let tls = match self {
            Stranger::OtherCa { cert, key, cluster_ca } => {
                TlsFiles::load(Path::new(cert), Path::new(key), Path::new(cluster_ca))?
            }
            Stranger::NoCertificate { cluster_ca } => TlsFiles::trusting(Path::new(cluster_ca))?,
        };
        let token = token.map(|t| Secret::new("token", t)).transpose()?;
        Ok(Security { tls: Some(tls), secret: None, token })
    }

    fn rustls_client(&self) -> anyhow::Result<Arc<rustls::ClientConfig>> {
        match self {
            Stranger::OtherCa { .. } => Ok(self.security(None)?.tls.expect("tls").rustls_client()?),
            Stranger::NoCertificate { cluster_ca } => {
                use rustls::pki_types::pem::PemObject;
                let mut roots = rustls::RootCertStore::empty();
                for c in rustls::pki_types::CertificateDer::pem_file_iter(cluster_ca)? {
                    roots.add(c?)?;
                }
                let config =
                    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                        .with_safe_default_protocol_versions()?
                        .with_root_certificates(roots)
                        .with_no_client_auth();
                Ok(Arc::new(config))
            }
        }
    }
}

/// Every RPC of the job manager's internal service and of a task manager's service, called through
/// `security` (a stranger, or a client with a valid token): the error of each, `None` where one succeeded.
fn internal_calls(
    security: &Security,
    jm: &str,
    tm: &str,
) -> anyhow::Result<Vec<(&'static str, Option<tonic::Status>)>> {
    use weir_proto as pb;
    use weir_proto::job_manager_internal_client::JobManagerInternalClient;
    use weir_proto::task_manager_api_client::TaskManagerApiClient;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let timeout = Duration::from_secs(5);
        let jm = JobManagerInternalClient::new(security.channel(jm, timeout).map_err(anyhow::Error::msg)?);
        let tm = TaskManagerApiClient::new(security.channel(tm, timeout).map_err(anyhow::Error::msg)?);
        let register = pb::RegisterTaskManagerRequest {
            tm_id: "intruder".into(),
            rpc_address: "http://127.0.0.1:1".into(),
            data_address: "127.0.0.1:1".into(),
            slots: 1000,
            operator_kinds: vec![],
        };
        let err = |r: Result<(), tonic::Status>| r.err();
        Ok(vec![
            ("RegisterTaskManager", err(jm.clone().register_task_manager(register).await.map(drop))),
            ("Heartbeat", err(jm.clone().heartbeat(pb::HeartbeatRequest::default()).await.map(drop))),
            (
                "UpdateTaskState",
                err(jm.clone().update_task_state(pb::UpdateTaskStateRequest::default()).await.map(drop)),
            ),
            (
                "AcknowledgeCheckpoint",
                err(jm.clone().acknowledge_checkpoint(pb::AcknowledgeCheckpointRequest::default()).await.map(drop)),
            ),
            (
                "DeclineCheckpoint",
                err(jm.clone().decline_checkpoint(pb::DeclineCheckpointRequest::default()).await.map(drop)),
            ),
            ("DeployTask", err(tm.clone().deploy_task(pb::DeployTaskRequest::default()).await.map(drop))),
            (
                "TriggerCheckpoint",
                err(tm.clone().trigger_checkpoint(pb::TriggerCheckpointRequest::default()).await.map(drop)),
            ),
            (
                "NotifyCheckpoint",
                err(tm.clone().notify_checkpoint(pb::NotifyCheckpointRequest::default()).await.map(drop)),
            ),
            ("CancelJob", err(tm.clone().cancel_job(pb::CancelTasksRequest::default()).await.map(drop))),
            ("EndInput", err(tm.clone().end_input(pb::EndInputRequest::default()).await.map(drop))),
        ])
    })
}

/// Asserts that every internal RPC was refused, and (with `unauthenticated`) refused as `UNAUTHENTICATED`
/// by the member check rather than failing some other way.
fn assert_all_refused(who: &str, calls: &[(&str, Option<tonic::Status>)], unauthenticated: bool) {
    for (rpc, status) in calls {
        let Some(status) = status else { panic!("{who}: {rpc} was accepted") };
        if unauthenticated {
            assert_eq!(status.code(), tonic::Code::Unauthenticated, "{who}: {rpc}: {status:?}");
        }
    }
}

/// Opens a TLS data connection as `stranger` and reports whether it is dropped (the handshake refused, or
/// the connection closed before the handshake frame gets anywhere).
fn data_peer_over_tls_is_dropped(addr: &str, stranger: &Stranger) -> anyhow::Result<bool> {
    let config = stranger.rustls_client()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
        let mut tls = match tokio_rustls::TlsConnector::from(config).connect(name, tcp).await {
            Ok(s) => s,
            Err(_) => return Ok(true),
        };
        let _ = tls.write_all(&handshake()).await;
        let mut buf = [0u8; 64];
        match tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf)).await {
            Err(_) => Ok(false),
            Ok(Ok(0)) | Ok(Err(_)) => Ok(true),
            Ok(Ok(_)) => Ok(false),
        }
    })
}

/// Waits for the line in which a task manager (`who`, its log at `log`) says its registration was refused.
fn refusal_line(log: &std::path::Path, who: &str) -> anyhow::Result<String> {
    weir_integration_tests::wait_until(&format!("for {who} to say it was refused"), Duration::from_secs(20), || {
        let text = std::fs::read_to_string(log)?;
        Ok(text.lines().find(|l| l.contains("did not accept this task manager's registration")).map(str::to_string))
    })
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
    // Its refusal is waited for (a fixed sleep would pass a registration that is merely slow).
    let outsider = c.start_taskmanager(&[])?;
    let outsider_log = c.dir().join("logs").join(format!("taskmanager-{outsider}.log"));
    let refused = refusal_line(&outsider_log, "the task manager without the secret")?;
    assert!(refused.contains("cluster secret"), "why: {refused}");
    let tms = c.cli_json(&["cluster"])?["task_managers"].as_array().map_or(0, |a| a.len());
    assert_eq!(tms, 2, "the task manager without the secret registered");
    let log = std::fs::read_to_string(&outsider_log)?;
    assert!(!log.contains("registered with job manager"), "{log}");

    // A valid client token opens none of the internal RPCs, of the job manager or of a task manager.
    let client = Security { token: Some(Secret::new("token", TOKEN)?), ..Default::default() };
    let jm = c.addresses().split(',').next().unwrap_or_default().to_string();
    let calls = internal_calls(&client, &jm, &c.rpc_addresses[0])?;
    assert_all_refused("a client token", &calls, true);
    assert!(calls.iter().all(|(_, s)| s.as_ref().is_some_and(|s| s.message().contains("cluster secret"))), "{calls:?}");
    assert_eq!(c.cli_json(&["cluster"])?["task_managers"].as_array().map_or(0, |a| a.len()), 2, "nobody joined");

    // The data plane: a peer that does not send the secret first is dropped.
    assert!(data_peer_is_dropped(&c.data_addresses[0], &handshake())?, "a data peer without the secret was kept");

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
    let secret = write(files.path(), "secret", SECRET)?;
    let mut jm_args = tls(&cert, &key, &ca);
    // A cluster secret too: with TLS on it is no credential, and must open nothing.
    jm_args.extend(["--auth-token-file".to_string(), token.clone(), "--cluster-secret-file".into(), secret.clone()]);
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

    // With TLS on, the cluster secret is no client credential: `weir` does not even send it then, so a client
    // of our own sends it over TLS, without a token.
    let jm = c.addresses().split(',').next().unwrap_or_default().to_string();
    let refused = {
        use weir_proto::client_api_client::ClientApiClient;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async {
            let plain = Security { tls: Some(TlsFiles::trusting(Path::new(&ca))?), ..Default::default() };
            let mut client =
                ClientApiClient::new(plain.channel(&jm, Duration::from_secs(5)).map_err(anyhow::Error::msg)?);
            let mut req = tonic::Request::new(weir_proto::ListJobsRequest::default());
            req.metadata_mut().insert(weir_common::service::security::SECRET_METADATA, SECRET.parse()?);
            anyhow::Ok(client.list_jobs(req).await.err())
        })?
    };
    let refused = refused.expect("the cluster secret opened the client API with TLS on");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    let _ = secret;

    // A task manager with a certificate of another CA, trusting the cluster's CA (so that it accepts the job
    // manager, and the job manager's own check is what refuses it): refused, and both sides say so.
    let rogue = c.start_taskmanager(&tls(&rogue_cert, &rogue_key, &ca))?;
    let rogue_log = c.dir().join("logs").join(format!("taskmanager-{rogue}.log"));
    let refused = refusal_line(&rogue_log, "the rogue task manager")?;
    let tms = c.cli_json(&["cluster"])?["task_managers"].as_array().map_or(0, |a| a.len());
    assert_eq!(tms, 2, "the rogue task manager registered");
    let log = std::fs::read_to_string(&rogue_log)?;
    assert!(!log.contains("registered with job manager"), "{log}");
    assert!(refused.contains("WARN") && refused.contains("certificate"), "why, at warning level: {refused}");
    // The job manager names the peer and the reason (the plaintext client above failed its handshake too, for
    // another reason: look for the certificate's).
    let jm_refused =
        weir_integration_tests::wait_until("for the job manager's warning", Duration::from_secs(20), || {
            Ok(c.jobmanager_log(0)
                .lines()
                .find(|l| l.contains("refused a connection: its TLS handshake failed") && l.contains("certificate"))
                .map(str::to_string))
        })?;
    assert!(
        jm_refused.contains("WARN") && jm_refused.contains("peer=127.0.0.1:"),
        "the job manager says whom: {jm_refused}"
    );

    // The same strangers, by hand, against every internal RPC of the job manager and of a task manager, and
    // against the data plane: a certificate of another CA, and no certificate at all.
    let tm = c.rpc_addresses[0].clone();
    let other_ca = Stranger::OtherCa { cert: &rogue_cert, key: &rogue_key, cluster_ca: &ca };
    let no_cert = Stranger::NoCertificate { cluster_ca: &ca };
    assert_all_refused("a certificate of another CA", &internal_calls(&other_ca.security(None)?, &jm, &tm)?, false);
    assert_all_refused("no certificate", &internal_calls(&no_cert.security(None)?, &jm, &tm)?, true);
    // A valid client token, over TLS with the cluster's CA but no member certificate, opens no internal RPC.
    assert_all_refused("a client token", &internal_calls(&no_cert.security(Some(TOKEN))?, &jm, &tm)?, true);
    assert_eq!(c.cli_json(&["cluster"])?["task_managers"].as_array().map_or(0, |a| a.len()), 2, "nobody joined");
    for (who, stranger) in [("another CA", &other_ca), ("no certificate", &no_cert)] {
        assert!(data_peer_over_tls_is_dropped(&c.data_addresses[0], stranger)?, "a data peer with {who} was kept");
    }
    // A data-plane peer without TLS at all (plain TCP) is refused too.
    assert!(data_peer_is_dropped(&c.data_addresses[0], &handshake())?, "a plaintext data peer was kept");
    let _ = rogue_ca;

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

/// A client token with neither TLS nor a cluster secret would leave the internal services open: the job
/// manager refuses to start, saying what to add, unless `--insecure-members` says it is meant (and then it
/// warns at start).
#[test]
fn a_client_token_without_member_authentication_is_refused_at_start() -> anyhow::Result<()> {
    let files = tempfile::tempdir()?;
    let token = write(files.path(), "token", TOKEN)?;
    let jm = |extra: &[&str]| -> anyhow::Result<std::process::Command> {
        let mut cmd = std::process::Command::new(binary("weir-jobmanager")?);
        cmd.args(["--bind", "127.0.0.1:0", "--auth-token-file", &token])
            .args(extra)
            .arg("--data-dir")
            .arg(files.path().join("jm"));
        Ok(cmd)
    };
    let out = run_with_timeout(jm(&[])?, Duration::from_secs(20))?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("--cluster-secret-file")
            && out.stderr.contains("--tls-cert")
            && out.stderr.contains("--insecure-members"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.trim().lines().count(), 1, "one line: {}", out.stderr);
    // A token file it cannot read: it says so and exits before serving anything (it once served its health
    // service first, so a crash-looping job manager passed probes).
    let secret = write(files.path(), "secret", SECRET)?;
    let missing = files.path().join("no-such-token");
    let mut cmd = std::process::Command::new(binary("weir-jobmanager")?);
    cmd.args(["--bind", "127.0.0.1:0", "--health-bind", "127.0.0.1:0", "--cluster-secret-file", &secret])
        .arg("--auth-token-file")
        .arg(&missing)
        .arg("--data-dir")
        .arg(files.path().join("jm"));
    let out = run_with_timeout(cmd, Duration::from_secs(20))?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("no-such-token"), "{}", out.stderr);
    assert!(!out.stderr.contains("health") && !out.stdout.contains("listening"), "it served first: {out}");
    // On purpose: it starts, and says at warning level what it leaves open.
    let log = files.path().join("insecure.log");
    let mut p = weir_integration_tests::Process::spawn("insecure", jm(&["--insecure-members"])?, &log)?;
    p.wait_for_stdout(Duration::from_secs(20), |l| l.starts_with("weir-jobmanager listening").then_some(()))?;
    weir_integration_tests::wait_until("for the warning", Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&log)?;
        Ok(text.lines().any(|l| l.contains("WARN") && l.contains("--insecure-members")).then_some(()))
    })?;
    p.kill();
    Ok(())
}
