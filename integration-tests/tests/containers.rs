//! Weir in containers, on podman (installed by `scripts/setup.sh`; every test here says it skips, and passes,
//! where podman is absent):
//!
//! - The image: built by `scripts/image.sh`, runs as the unprivileged user, and started without a job manager
//!   address or with an unreadable secret exits non-zero with a message naming what is wrong.
//! - The compose cluster (`scripts/cluster-up.sh`: etcd ×3, two HA job managers, three task managers, an S3
//!   store, mutual TLS, a token): a keyed count through a SIGKILL of the leading job manager's container, of a
//!   task manager's container, and a task manager cut off the network and reconnected: output exact. Then a
//!   rolling upgrade: stop with a savepoint, every Weir container recreated on a rebuilt image, restore: exact.
//! - The Kubernetes manifests: every overlay passes `kubernetes-validate --strict`; one with a wrong field
//!   fails it; the task-manager Deployment runs under `podman kube play` and registers with a job manager.

use anyhow::{bail, Context, Result};
use std::time::{Duration, Instant};
use weir_integration_tests::containers::{
    build_images, podman, podman_available, podman_ok, repo_root, ComposeCluster,
};
use weir_integration_tests::{verify_job_output, CountJob};

fn skip() -> bool {
    if podman_available() {
        return false;
    }
    eprintln!("SKIPPED: podman is not installed here (scripts/setup.sh installs it on Debian)");
    true
}

#[test]
fn the_image_runs_as_weir_and_refuses_a_missing_jobmanager_or_an_unreadable_secret() -> Result<()> {
    if skip() {
        return Ok(());
    }
    let size = build_images()?;
    eprintln!("{size}");
    let user = podman_ok(
        &["image", "inspect", "localhost/weir:dev", "--format", "{{.Config.User}}"],
        Duration::from_secs(30),
    )?;
    assert_eq!(user.trim(), "10001:10001");

    let run = |args: &[&str]| -> Result<weir_integration_tests::CommandOutput> {
        let mut all = vec!["run", "--rm", "--network", "none"];
        all.extend_from_slice(args);
        podman(&all, Duration::from_secs(60))
    };
    let out = run(&["localhost/weir:dev", "/usr/local/bin/weir-taskmanager"])?;
    assert!(!out.status.success(), "{out}");
    assert!(out.stderr.contains("jobmanager"), "the message names the missing setting: {out}");

    // A secret the container's user cannot read (root's, mode 0600).
    let dir = tempfile::tempdir()?;
    let token = dir.path().join("client-token");
    std::fs::write(&token, "t0ken")?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600))?;
    let mount = format!("{}:/etc/weir/secrets/client-token:ro", token.display());
    let out = run(&[
        "-v",
        &mount,
        "-e",
        "WEIR_AUTH_TOKEN_FILE=/etc/weir/secrets/client-token",
        "-e",
        "WEIR_INSECURE_MEMBERS=true",
        "-e",
        "WEIR_BIND=0.0.0.0:6123",
        "-e",
        "WEIR_DATA_DIR=/var/lib/weir/jm",
        "localhost/weir:dev",
        "/usr/local/bin/weir-jobmanager",
    ])?;
    assert!(!out.status.success(), "{out}");
    assert!(
        out.stderr.contains("/etc/weir/secrets/client-token")
            && out.stderr.to_lowercase().contains("permission denied"),
        "the message names the file and why: {out}"
    );
    Ok(())
}

/// The task managers (compose services) that run tasks, once some do (within 30 s: a job manager's view of its
/// task managers' slots lags their deployments by a heartbeat).
fn busy_taskmanagers(c: &ComposeCluster) -> Result<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let cluster = c.weir_json(&["cluster"])?;
        let tms = cluster["task_managers"].as_array().context("task_managers")?;
        let busy: Vec<String> = tms
            .iter()
            .filter(|tm| tm["free_slots"].as_u64() < tm["slots"].as_u64())
            .filter_map(|tm| tm["id"].as_str().map(str::to_string))
            .collect();
        if !busy.is_empty() {
            return Ok(busy);
        }
        if Instant::now() >= deadline {
            bail!("no task manager runs a task: {cluster}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn attempt(job: &serde_json::Value) -> u64 {
    job["attempt"].as_u64().unwrap_or(0)
}

/// Whether `job` runs a later attempt than `before` and has completed a checkpoint since: recovered, its tasks
/// deployed (a restored job is RUNNING, with its last checkpoint, before its tasks are placed).
fn checkpointed_since(job: &serde_json::Value, before: &serde_json::Value) -> bool {
    let last = |j: &serde_json::Value| j["last_completed_checkpoint"].as_u64();
    job["state"] == "RUNNING" && attempt(job) > attempt(before) && last(job).is_some() && last(job) > last(before)
}

#[test]
fn the_compose_cluster_keeps_output_exact_through_kills_a_split_and_a_rolling_upgrade() -> Result<()> {
    if skip() {
        return Ok(());
    }
    build_images()?;
    let c = ComposeCluster::up("weirtest")?;
    eprintln!("compose cluster ready in {:.1} s", c.startup.as_secs_f64());
    let long = Duration::from_secs(120);

    // 1. Kills and a split under one job.
    let out = std::path::Path::new("/var/lib/weir/out/kills");
    let job = CountJob::bounded("kills", 1_500_000, 5_000, 7).rate(40_000).checkpoint_every_ms(1000).into_files(out);
    let id = c.submit(&job.yaml(), None)?;
    let first = c.wait_job(&id, long, "a first checkpoint", |j| checkpointed_since(j, &serde_json::Value::Null))?;

    let leader = c.leader()?;
    podman_ok(&["kill", "--signal", "KILL", &c.container(&leader)], Duration::from_secs(30))?;
    let after_jm = c.wait_job(&id, long, "recovery from the leader's loss", |j| checkpointed_since(j, &first))?;
    podman_ok(&["start", &c.container(&leader)], Duration::from_secs(60))?;

    let busy = busy_taskmanagers(&c)?;
    let victim = busy.first().context("no task manager runs a task")?.clone();
    podman_ok(&["kill", "--signal", "KILL", &c.container(&victim)], Duration::from_secs(30))?;
    let after_tm =
        c.wait_job(&id, long, "recovery from a task manager's loss", |j| checkpointed_since(j, &after_jm))?;
    podman_ok(&["start", &c.container(&victim)], Duration::from_secs(60))?;

    let busy = busy_taskmanagers(&c)?;
    let cut = busy.first().context("no task manager runs a task")?.clone();
    let network = format!("{}_weir", c.project);
    podman_ok(&["network", "disconnect", &network, &c.container(&cut)], Duration::from_secs(30))?;
    c.wait_job(&id, long, "recovery from a split", |j| checkpointed_since(j, &after_tm))?;
    podman_ok(&["network", "connect", "--alias", &cut, &network, &c.container(&cut)], Duration::from_secs(30))?;

    c.wait_job(&id, Duration::from_secs(180), "the end of input", |j| j["state"] == "FINISHED")?;
    verify_job_output(&job, &c.out_dir.join("kills")).context("the output after kills and a split")?;

    // 2. A rolling upgrade: stop with a savepoint, recreate every Weir container on a rebuilt image, restore.
    let out = std::path::Path::new("/var/lib/weir/out/upgrade");
    let job = CountJob::bounded("upgrade", 600_000, 5_000, 11).rate(30_000).checkpoint_every_ms(1000).into_files(out);
    let id = c.submit(&job.yaml(), None)?;
    c.wait_job(&id, long, "a first checkpoint", |j| checkpointed_since(j, &serde_json::Value::Null))?;
    let stopped = c.weir_json(&["job", "stop", &id, "--savepoint"])?;
    let savepoint = stopped["savepoint"].as_str().context("no savepoint URL")?.to_string();
    c.wait_job(&id, long, "the stop", |j| j["state"] == "FINISHED")?;
    build_images()?;
    let weir_services = ["jobmanager1", "jobmanager2", "taskmanager1", "taskmanager2", "taskmanager3"];
    for s in weir_services {
        c.stop_container(s)?;
        podman_ok(&["rm", &c.container(s)], Duration::from_secs(60))?;
    }
    c.recreate()?;
    let id = c.submit(&job.yaml(), Some(&savepoint))?;
    c.wait_job(&id, Duration::from_secs(180), "the restored job's end", |j| j["state"] == "FINISHED")?;
    verify_job_output(&job, &c.out_dir.join("upgrade")).context("the output across the upgrade")?;
    c.down()
}

#[test]
fn the_kubernetes_manifests_pass_strict_offline_validation_and_a_wrong_field_fails_it() -> Result<()> {
    if skip() {
        return Ok(());
    }
    let validator = weir_integration_tests::containers::tools_bin("kubernetes-validate");
    let dir = tempfile::tempdir()?;
    for overlay in ["small", "production"] {
        let rendered = kustomize(&repo_root().join("deploy/kubernetes/overlays").join(overlay))?;
        let file = dir.path().join(format!("{overlay}.yaml"));
        std::fs::write(&file, &rendered)?;
        let out = validate(&validator, &file)?;
        assert!(out.status.success(), "{overlay}: {out}");
        for kind in ["StatefulSet", "Deployment", "PodDisruptionBudget", "ConfigMap", "Secret", "Service"] {
            assert!(rendered.contains(&format!("kind: {kind}")), "{overlay} renders a {kind}");
        }
    }
    // The validator does run: a misspelt field fails it, named.
    let base = std::fs::read_to_string(repo_root().join("deploy/kubernetes/base/taskmanager.yaml"))?;
    let broken = base.replacen("  replicas: 3", "  replica: 3", 1);
    assert_ne!(broken, base);
    let file = dir.path().join("broken.yaml");
    std::fs::write(&file, broken)?;
    let out = validate(&validator, &file)?;
    assert!(!out.status.success(), "a wrong field passed: {out}");
    assert!(format!("{}{}", out.stdout, out.stderr).contains("replica"), "{out}");
    Ok(())
}

fn kustomize(dir: &std::path::Path) -> Result<String> {
    let mut cmd = std::process::Command::new("kubectl");
    cmd.arg("kustomize").arg(dir);
    let out = weir_integration_tests::process::run_with_timeout(cmd, Duration::from_secs(60))?;
    if !out.status.success() {
        bail!("kubectl kustomize {}: {out}", dir.display());
    }
    Ok(out.stdout)
}

fn validate(validator: &std::path::Path, file: &std::path::Path) -> Result<weir_integration_tests::CommandOutput> {
    let mut cmd = std::process::Command::new(validator);
    cmd.arg("--strict").arg("--quiet").arg(file);
    weir_integration_tests::process::run_with_timeout(cmd, Duration::from_secs(120))
}

#[test]
fn the_taskmanager_deployment_runs_under_podman_kube_play_and_registers() -> Result<()> {
    if skip() {
        return Ok(());
    }
    build_images()?;
    // A job manager on the host's loopback; the pod shares the host's network to reach it.
    let cluster = weir_integration_tests::Cluster::start(weir_integration_tests::ClusterOptions::new(0, 1))?;
    let jm = cluster.jobmanager_url();
    // The Deployment as the manifests have it, its secrets and config replaced by a plain-text job manager.
    let text = std::fs::read_to_string(repo_root().join("deploy/kubernetes/base/taskmanager.yaml"))?;
    let mut deployment: serde_yaml::Value = serde_yaml::from_str(&text)?;
    let spec = &mut deployment["spec"]["template"]["spec"];
    spec["volumes"] = serde_yaml::from_str("[{ name: data, emptyDir: {} }]")?;
    let container = &mut spec["containers"][0];
    container["image"] = "localhost/weir:dev".into();
    container["envFrom"] = serde_yaml::Value::Sequence(vec![]);
    // Ports are published only on a pod network; this pod shares the host's.
    container["ports"] = serde_yaml::Value::Sequence(vec![]);
    container["volumeMounts"] = serde_yaml::from_str("[{ name: data, mountPath: /var/lib/weir }]")?;
    container["env"] = serde_yaml::from_str(&format!(
        "[{{ name: WEIR_JOBMANAGER, value: {jm:?} }}, {{ name: WEIR_BIND, value: '127.0.0.1:0' }}, \
          {{ name: WEIR_DATA_BIND, value: '127.0.0.1:0' }}, {{ name: WEIR_TM_ID, value: kube-tm }}, \
          {{ name: WEIR_HEALTH_BIND, value: '127.0.0.1:0' }}, {{ name: WEIR_DATA_DIR, value: /var/lib/weir/tm }}]"
    ))?;
    deployment["spec"]["replicas"] = 1.into();
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("taskmanager.yaml");
    std::fs::write(&file, serde_yaml::to_string(&deployment)?)?;
    let path = file.to_string_lossy().to_string();
    let played = podman(&["kube", "play", "--network", "host", &path], Duration::from_secs(120))?;
    let result = (|| -> Result<()> {
        if !played.status.success() {
            bail!("podman kube play failed: {played}");
        }
        weir_integration_tests::wait_until("the pod's task manager registers", Duration::from_secs(60), || {
            let registered = cluster.cli_json(&["cluster"])?["task_managers"]
                .as_array()
                .is_some_and(|t| t.iter().any(|tm| tm["id"] == "kube-tm"));
            Ok(registered.then_some(()))
        })
    })();
    let _ = podman(&["kube", "down", &path], Duration::from_secs(120));
    result?;
    cluster.stop();
    Ok(())
}
