//! Weir in containers, on podman (installed by `scripts/setup.sh`). Under `scripts/test.sh`, which sets
//! `WEIR_REQUIRE_TOOLS=1`, a tool a test needs and does not find fails that test; a developer's plain
//! `cargo test` without it skips the test instead and says so on stderr.
//!
//! - The image: built by `scripts/image.sh`, runs as the unprivileged user, and started without a job manager
//!   address or with an unreadable secret exits non-zero with a message naming what is wrong.
//! - The compose cluster (`scripts/cluster-up.sh`: etcd ×3, two HA job managers, three task managers, an S3
//!   store, mutual TLS, a token): a keyed count through a SIGKILL of the leading job manager's container, of a
//!   task manager's container, and a task manager cut off the network and reconnected: output exact. Then an
//!   upgrade through stop-with-savepoint: the job stopped with a savepoint, every Weir container stopped (SIGTERM)
//!   and recreated on the image as rebuilt, the job restored from the savepoint (its status names it): exact.
//! - The Kubernetes manifests, offline (kubectl and the validator only): every overlay passes
//!   `kubernetes-validate --strict`; one with a wrong field fails it.
//! - The Kubernetes manifests, run: `overlays/small` as `kubectl kustomize` renders it — the etcd and job
//!   manager StatefulSets, the task manager Deployment, the ConfigMap and the Secrets wired in as they are —
//!   played with `podman kube play`, the test standing in only for what kube play cannot do (see
//!   [`KubeCluster`]); every container passes its startup, liveness and readiness probes as the manifests state
//!   them, and a keyed count runs on that cluster to completion with exact output and checkpoints in S3.
//!
//! The tests that start containers hold the cluster lock, so that they run one at a time under plain
//! `cargo test` too.

use anyhow::{anyhow, bail, Context, Result};
use serde_yaml::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weir_integration_tests::containers::{build_images, podman, podman_ok, repo_root, tools_bin, ComposeCluster};
use weir_integration_tests::lock::{lock_path, ClusterLock, LOCK_TIMEOUT};
use weir_integration_tests::process::run_with_timeout;
use weir_integration_tests::{bin_dir, binary, verify_job_output, CommandOutput, CountJob};

/// Whether `tool` runs here (`kubernetes-validate` is looked for in the tools venv `scripts/setup.sh` makes).
fn tool_present(tool: &str) -> bool {
    let (program, args): (PathBuf, &[&str]) = match tool {
        "kubernetes-validate" => (tools_bin(tool), &["--version"]),
        "kubectl" => (tool.into(), &["version", "--client"]),
        _ => (tool.into(), &["--version"]),
    };
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `test` is to be skipped for want of `tools`. Under `scripts/test.sh` (`WEIR_REQUIRE_TOOLS=1`) never:
/// a missing tool is an error there. Elsewhere a missing tool skips the test, with a line on stderr.
fn skip_without(test: &str, tools: &[&str]) -> Result<bool> {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !tool_present(t)).collect();
    if missing.is_empty() {
        return Ok(false);
    }
    let missing = missing.join(", ");
    if std::env::var("WEIR_REQUIRE_TOOLS").is_ok_and(|v| !v.is_empty() && v != "0") {
        bail!("{missing} not found, and WEIR_REQUIRE_TOOLS is set (scripts/test.sh): scripts/setup.sh installs what is missing");
    }
    eprintln!(
        "SKIPPED {test}: {missing} not found (scripts/setup.sh installs what is missing; under scripts/test.sh, which sets \
         WEIR_REQUIRE_TOOLS=1, this is a failure)"
    );
    Ok(true)
}

/// The lock every cluster test holds: one at a time, also under plain `cargo test`.
fn cluster_lock() -> Result<ClusterLock> {
    ClusterLock::acquire(&lock_path(&bin_dir()?), LOCK_TIMEOUT)
}

#[test]
fn the_image_runs_as_weir_and_refuses_a_missing_jobmanager_or_an_unreadable_secret() -> Result<()> {
    if skip_without("the image test", &["podman"])? {
        return Ok(());
    }
    let _lock = cluster_lock()?;
    let size = build_images()?;
    eprintln!("{size}");
    let user = podman_ok(
        &["image", "inspect", "localhost/weir:dev", "--format", "{{.Config.User}}"],
        Duration::from_secs(30),
    )?;
    assert_eq!(user.trim(), "10001:10001");

    let run = |args: &[&str]| -> Result<CommandOutput> {
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
fn the_compose_cluster_keeps_output_exact_through_kills_a_split_and_an_upgrade_through_stop_with_savepoint(
) -> Result<()> {
    if skip_without("the compose test", &["podman", "podman-compose"])? {
        return Ok(());
    }
    let _lock = cluster_lock()?;
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

    // 2. An upgrade through stop-with-savepoint (every job manager and task manager at once, not one at a time
    //    under a running job): stop with a savepoint, recreate every Weir container on the rebuilt image, restore.
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
    let done = c.wait_job(&id, Duration::from_secs(180), "the restored job's end", |j| j["state"] == "FINISHED")?;
    // Counts emitted at the end of input are exact also from a job that started over: its status must name the
    // savepoint, or nothing shows that the state crossed the upgrade.
    let restored = done["restored_from"].as_str().unwrap_or_default();
    assert!(restored.contains(savepoint.trim_end_matches('/')), "restored from {restored:?}, not {savepoint}: {done}");
    verify_job_output(&job, &c.out_dir.join("upgrade")).context("the output across the upgrade")?;
    c.down()
}

#[test]
fn the_kubernetes_manifests_pass_strict_offline_validation_and_a_wrong_field_fails_it() -> Result<()> {
    // Offline: kubectl renders, the validator checks; no container runs, so podman is not needed.
    if skip_without("the manifest validation test", &["kubectl", "kubernetes-validate"])? {
        return Ok(());
    }
    let validator = tools_bin("kubernetes-validate");
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

fn kustomize(dir: &Path) -> Result<String> {
    let mut cmd = Command::new("kubectl");
    cmd.arg("kustomize").arg(dir);
    let out = run_with_timeout(cmd, Duration::from_secs(60))?;
    if !out.status.success() {
        bail!("kubectl kustomize {}: {out}", dir.display());
    }
    Ok(out.stdout)
}

fn validate(validator: &Path, file: &Path) -> Result<CommandOutput> {
    let mut cmd = Command::new(validator);
    cmd.arg("--strict").arg("--quiet").arg(file);
    run_with_timeout(cmd, Duration::from_secs(120))
}

#[test]
fn the_kubernetes_manifests_run_under_podman_kube_play_pass_their_probes_and_count_exactly() -> Result<()> {
    if skip_without("the kube play test", &["podman", "kubectl"])? {
        return Ok(());
    }
    let _lock = cluster_lock()?;
    let started = Instant::now();
    build_images()?;
    eprintln!("kube play: images built in {:.1} s", started.elapsed().as_secs_f64());
    let rendered = kustomize(&repo_root().join("deploy/kubernetes/overlays").join(KUBE_OVERLAY))?;
    let mut kube = KubeCluster::new(&rendered)?;
    let result = kube.run_a_job();
    let logs = if result.is_err() { kube.logs() } else { String::new() };
    eprintln!("kube play: cluster up, job run and checked at {:.1} s", started.elapsed().as_secs_f64());
    drop(kube);
    eprintln!("kube play: removed at {:.1} s", started.elapsed().as_secs_f64());
    result.map_err(|e| e.context(logs))
}

// ------------------------------------------------------------------------------------ the manifests, played

/// The overlay played: one task manager, small requests (what fits a 2-core machine).
const KUBE_OVERLAY: &str = "small";
/// The label on the test's pods, store, volumes and network (so that the next run removes what one killed outright
/// left).
const KUBE_LABEL: &str = "weir-test=kube-play";
/// The test's S3 store (not part of the manifests: their ConfigMap names AWS), on the test's network.
const KUBE_STORE: &str = "weir-kube-test-s3";

/// `overlays/small`, as `kubectl kustomize` renders it, played with `podman kube play` (podman 4.3, Debian
/// bookworm's) on a network the test creates. Everything a pod runs — images, args, env, envFrom of the
/// ConfigMap and the Secrets, volumes and their mounts, security context, resources — is the manifests'. The
/// placeholders the manifests ask an operator to fill are filled: the Secrets' values (a CA and a member
/// certificate made here, a token, S3 keys) and the ConfigMap's S3 endpoint (the test's store instead of AWS).
/// Pods get a label of the test's. They are started in order, each kind once the one before passes its
/// probes (etcd, the job managers, the task manager), where Kubernetes would start all at once and let the
/// job managers restart until etcd answers. Replaced, each because kube play cannot do it (and a kubelet or the
/// API server would):
///
/// - StatefulSets are not a kind kube play knows: each replica `N` is played as the Pod the StatefulSet
///   controller makes, `<name>-N`, from the template, with that hostname and, for each volumeClaimTemplate, the
///   PersistentVolumeClaim `<claim>-<name>-N` (a podman volume owned by the pod's `fsGroup`: kube play ignores
///   `fsGroup`). The Deployment is played as a Deployment (its one replica: kube play names the pod
///   `<name>-pod-0`).
/// - Services and cluster DNS: the headless names (`weir-jobmanager-0.weir-jobmanager-headless`, …) and the
///   store's are `hostAliases` of every pod, to static pod IPs (`--ip`) on the test's network; the test checks
///   that each StatefulSet's `serviceName` is a headless Service selecting its pods, which is what makes those
///   names resolve in a cluster.
/// - The downward API's `status.podIP` (kube play refuses it) is the pod's static IP, and `$(VAR)` references in
///   env values, command and args (kube play leaves them as they are) are expanded as Kubernetes does.
/// - Secret volumes: kube play 4.3 writes base64 text (of `data` only, `stringData` dropped), ignores
///   `defaultMode`, and leaves a volume behind; each is a read-only hostPath directory holding the decoded
///   values with the volume's `defaultMode`, group `fsGroup`. `envFrom` a Secret reads, in kube play 4.3, a
///   podman secret of JSON: the Secret is stored so.
/// - `containerPort`s: kube play 4.3 publishes each on the host, at the same port (Kubernetes publishes none;
///   and three etcd pods cannot all have the host's 2379). They are dropped: a pod's every port is reachable at
///   its IP, where the members and the probes dial it.
/// - Probes: kube play runs none (gRPC probes are unknown to it; an httpGet liveness probe becomes a curl health
///   check the images lack). The test is the kubelet: each container's startup probe must pass within
///   `initialDelaySeconds + periodSeconds × failureThreshold`, its readiness probe within a minute, its liveness
///   probe then and again after the job; each as stated (gRPC health service and port, HTTP path and port),
///   dialled at the pod's IP from the host.
struct KubeCluster {
    dir: tempfile::TempDir,
    network: String,
    /// The first three octets of the network's /24.
    subnet: String,
    /// Every document of the rendered overlay, the placeholders filled.
    docs: Vec<Value>,
    /// Pod name → IP, in the order they are played.
    pods: Vec<(String, String)>,
    /// The name → IP aliases every pod gets (the cluster DNS stand-in).
    aliases: Vec<(String, String)>,
    /// The probes of every played container.
    probes: Vec<KubeProbe>,
    /// Podman secrets made, and containers named, to remove at the end.
    secrets: Vec<String>,
    containers: Vec<String>,
    /// The client's files on the host.
    ca_file: PathBuf,
    token_file: PathBuf,
}

impl KubeCluster {
    /// Fills the placeholders of `rendered` and makes the network; nothing runs yet.
    fn new(rendered: &str) -> Result<KubeCluster> {
        remove_leftovers();
        let mut docs = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(rendered) {
            let v: Value = serde::Deserialize::deserialize(doc)?;
            if !v.is_null() {
                docs.push(v);
            }
        }
        let dir = tempfile::Builder::new().prefix("weir-kube-").tempdir()?;
        let network = format!("weir-kube-test-{}", std::process::id());
        podman_ok(&["network", "create", "--label", KUBE_LABEL, &network], Duration::from_secs(30))?;
        let mut kube = KubeCluster {
            dir,
            network,
            subnet: String::new(),
            docs,
            pods: Vec::new(),
            aliases: Vec::new(),
            probes: Vec::new(),
            secrets: Vec::new(),
            containers: Vec::new(),
            ca_file: PathBuf::new(),
            token_file: PathBuf::new(),
        };
        let cidr = podman_ok(
            &["network", "inspect", &kube.network, "--format", "{{range .Subnets}}{{.Subnet}} {{end}}"],
            Duration::from_secs(30),
        )?;
        let cidr = cidr.split_whitespace().next().context("the test's network has no subnet")?.to_string();
        let (net, bits) = cidr.split_once('/').context("a subnet")?;
        if bits.parse::<u32>()? > 24 {
            bail!("the test's network {cidr} is smaller than a /24");
        }
        kube.subnet = net.rsplit_once('.').context("an IPv4 subnet")?.0.to_string();
        kube.plan()?;
        kube.fill_placeholders()?;
        Ok(kube)
    }

    fn ip(&self, host: u8) -> String {
        format!("{}.{host}", self.subnet)
    }

    fn docs_of<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.docs.iter().filter(move |d| d["kind"] == kind)
    }

    fn doc(&self, kind: &str, name: &str) -> Result<&Value> {
        self.docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .ok_or_else(|| anyhow!("the overlay renders no {kind} {name}"))
    }

    fn doc_mut(&mut self, kind: &str, name: &str) -> Result<&mut Value> {
        self.docs
            .iter_mut()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .ok_or_else(|| anyhow!("the overlay renders no {kind} {name}"))
    }

    /// Names and IPs: every StatefulSet replica `<name>-N`, reachable as `<name>-N.<serviceName>` once the test
    /// has checked that that Service is headless and selects the set's pods; then the Deployment's pod.
    fn plan(&mut self) -> Result<()> {
        let mut host = 10u8;
        let mut pods = Vec::new();
        let mut aliases = vec![("weir-s3".to_string(), self.ip(5))];
        for sts in self.docs_of("StatefulSet") {
            let name = text(&sts["metadata"]["name"])?;
            let service = text(&sts["spec"]["serviceName"])?;
            let svc = self.doc("Service", &service)?;
            assert_eq!(svc["spec"]["clusterIP"], "None", "the StatefulSet {name}'s Service {service} is headless");
            let labels = &sts["spec"]["template"]["metadata"]["labels"];
            let selector = svc["spec"]["selector"].as_mapping().context("a Service's selector")?;
            for (k, v) in selector {
                assert_eq!(&labels[k], v, "the Service {service} selects the pods of {name} ({k:?})");
            }
            for n in 0..sts["spec"]["replicas"].as_u64().unwrap_or(1) {
                let pod = format!("{name}-{n}");
                aliases.push((format!("{pod}.{service}"), self.ip(host)));
                pods.push((pod, self.ip(host)));
                host += 1;
            }
        }
        for deployment in self.docs_of("Deployment") {
            let name = text(&deployment["metadata"]["name"])?;
            // One replica: the kubelet's per-pod values (its IP, `$(POD_NAME)`) are expanded into the template.
            let replicas = deployment["spec"]["replicas"].as_u64().unwrap_or(1);
            assert_eq!(replicas, 1, "the played overlay runs one replica of {name}");
            pods.push((format!("{name}-pod-0"), self.ip(host)));
            host += 1;
        }
        self.pods = pods;
        self.aliases = aliases;
        Ok(())
    }

    /// What the manifests leave to the operator: the Secrets' values and where the checkpoint store is.
    fn fill_placeholders(&mut self) -> Result<()> {
        // One member certificate for every name a member is dialled by: the headless names of the StatefulSets'
        // pods, the client Service, and the pod IPs (task managers advertise theirs; the test's client on the host
        // dials the job managers' IPs, the cluster's names being unknown there).
        let mut sans: Vec<String> = self.aliases.iter().map(|(n, _)| n.clone()).collect();
        sans.extend(self.pods.iter().map(|(_, ip)| ip.clone()));
        sans.push("weir-jobmanager".into());
        let (ca, cert, key) = member_certificate(&sans)?;
        let token: String = (0..32).map(|_| format!("{:02x}", rand::random::<u8>())).collect();
        self.ca_file = self.dir.path().join("ca.crt");
        self.token_file = self.dir.path().join("token");
        std::fs::write(&self.ca_file, &ca)?;
        std::fs::write(&self.token_file, &token)?;
        let fill = |kube: &mut KubeCluster, secret: &str, values: &[(&str, &str)]| -> Result<()> {
            let doc = kube.doc_mut("Secret", secret)?;
            for (k, v) in values {
                let slot = &mut doc["stringData"][*k];
                assert!(slot.as_str().is_some_and(|s| s.starts_with("REPLACE")), "{secret} has a placeholder {k}");
                *slot = (*v).into();
            }
            Ok(())
        };
        fill(self, "weir-tls", &[("ca.crt", &ca), ("tls.crt", &cert), ("tls.key", &key)])?;
        fill(self, "weir-client-token", &[("token", &token)])?;
        fill(self, "weir-s3", &[("AWS_ACCESS_KEY_ID", "weir"), ("AWS_SECRET_ACCESS_KEY", "weir-secret")])?;
        for secret in self.docs_of("Secret") {
            assert!(!serde_yaml::to_string(secret)?.contains("REPLACE"), "a placeholder left: {secret:?}");
        }
        let config = &mut self.doc_mut("ConfigMap", "weir-config")?["data"];
        config["WEIR_S3_ENDPOINT"] = "http://weir-s3:9000".into();
        config["WEIR_S3_ALLOW_HTTP"] = "true".into();
        Ok(())
    }

    /// The values of a ConfigMap or Secret (`stringData` over `data`, which the manifests do not use).
    fn values_of(&self, kind: &str, name: &str) -> Result<Vec<(String, String)>> {
        let doc = self.doc(kind, name)?;
        if kind == "Secret" && doc.get("data").is_some() {
            bail!("Secret {name}: the test reads stringData only");
        }
        let field = if kind == "Secret" { "stringData" } else { "data" };
        let mut values = Vec::new();
        for (k, v) in doc[field].as_mapping().into_iter().flatten() {
            values.push((text(k)?, v.as_str().map(str::to_string).unwrap_or_else(|| yaml_scalar(v))));
        }
        Ok(values)
    }

    /// What a kubelet does for a pod that kube play does not (see [`KubeCluster`]): returns the pod spec to play
    /// and records the containers' probes.
    fn stand_in(&mut self, template: &Value, pod: &str, ip: &str) -> Result<Value> {
        let mut spec = template.clone();
        let aliases: Vec<Value> = self
            .aliases
            .iter()
            .map(|(name, ip)| serde_yaml::from_str(&format!("{{ ip: {ip:?}, hostnames: [{name:?}] }}")))
            .collect::<Result<_, _>>()?;
        spec["hostAliases"] = Value::Sequence(aliases);
        let fs_group = spec["securityContext"]["fsGroup"].as_u64().map(|g| g as u32);
        for volume in spec["volumes"].as_sequence_mut().into_iter().flatten() {
            if let Some(secret) = volume.get("secret").cloned() {
                let name = text(&secret["secretName"])?;
                if secret.get("items").is_some() {
                    bail!("secret volume {name}: items are not stood in for");
                }
                let mode = secret["defaultMode"].as_u64().unwrap_or(0o644) as u32;
                let dir = self.secret_dir(&name, mode, fs_group)?;
                volume.as_mapping_mut().context("a volume")?.remove("secret");
                volume["hostPath"] =
                    serde_yaml::from_str(&format!("{{ path: {:?}, type: Directory }}", dir.display()))?;
            }
        }
        let mut probes = Vec::new();
        for c in spec["containers"].as_sequence_mut().context("containers")? {
            let container = text(&c["name"])?;
            let mut vars: HashMap<String, String> = HashMap::new();
            for from in c["envFrom"].as_sequence().cloned().unwrap_or_default() {
                if let Some(name) = from["configMapRef"]["name"].as_str() {
                    vars.extend(self.values_of("ConfigMap", name)?);
                }
                if let Some(name) = from["secretRef"]["name"].as_str() {
                    vars.extend(self.values_of("Secret", name)?);
                    self.envfrom_secret(name)?;
                }
            }
            for env in c["env"].as_sequence_mut().into_iter().flatten() {
                let name = text(&env["name"])?;
                let value = if let Some(field) = env["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    match field {
                        // kube play gives metadata.name itself (the pod's name, as here).
                        "metadata.name" => pod.to_string(),
                        "status.podIP" => {
                            *env = serde_yaml::from_str(&format!("{{ name: {name}, value: {ip:?} }}"))?;
                            ip.to_string()
                        }
                        other => bail!("env {name}: fieldRef {other} is not stood in for"),
                    }
                } else if let Some(value) = env["value"].as_str() {
                    let value = expand(value, &vars);
                    env["value"] = value.clone().into();
                    value
                } else {
                    bail!("env {name}: {env:?} is not stood in for");
                };
                vars.insert(name, value);
            }
            for field in ["command", "args"] {
                for arg in c[field].as_sequence_mut().into_iter().flatten() {
                    *arg = expand(arg.as_str().unwrap_or_default(), &vars).into();
                }
            }
            let fields = c.as_mapping_mut().context("a container")?;
            let ports = fields.remove("ports").unwrap_or_default();
            for kind in ["startupProbe", "livenessProbe", "readinessProbe"] {
                if let Some(p) = fields.remove(kind) {
                    probes.push(KubeProbe::parse(&p, &ports, kind, pod, ip, &container)?);
                }
            }
        }
        self.probes.extend(probes);
        Ok(spec)
    }

    /// A secret volume's files: the Secret's values, mode `mode`, group `group`, in a directory of their own.
    fn secret_dir(&self, secret: &str, mode: u32, group: Option<u32>) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.dir.path().join("secrets").join(secret);
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        for (key, value) in self.values_of("Secret", secret)? {
            let file = dir.join(&key);
            std::fs::write(&file, value)?;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode))?;
            if let Some(g) = group {
                std::os::unix::fs::chown(&file, Some(0), Some(g))
                    .with_context(|| format!("giving {} to group {g} (the test runs as root)", file.display()))?;
            }
        }
        Ok(dir)
    }

    /// The Secret `name` as kube play 4.3's `envFrom` reads it: a podman secret of JSON, key → base64 value.
    fn envfrom_secret(&mut self, name: &str) -> Result<()> {
        if self.secrets.iter().any(|s| s == name) {
            return Ok(());
        }
        let values: serde_json::Map<String, serde_json::Value> = self
            .values_of("Secret", name)?
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(base64(v.as_bytes()))))
            .collect();
        let file = self.dir.path().join(format!("{name}.json"));
        std::fs::write(&file, serde_json::to_string(&values)?)?;
        let _ = podman(&["secret", "rm", name], Duration::from_secs(30));
        podman_ok(&["secret", "create", name, &file.to_string_lossy()], Duration::from_secs(30))?;
        self.secrets.push(name.to_string());
        Ok(())
    }

    /// Plays one pod (or the Deployment of one) with the ConfigMap and claims it needs, at its static IP.
    fn play(&mut self, docs: Vec<Value>, ip: &str) -> Result<()> {
        let mut all = self.docs_of("ConfigMap").cloned().collect::<Vec<_>>();
        all.extend(docs);
        let text = all.iter().map(serde_yaml::to_string).collect::<Result<Vec<_>, _>>()?.join("---\n");
        let file = self.dir.path().join(format!("play-{ip}.yaml"));
        std::fs::write(&file, text)?;
        podman_ok(
            &["kube", "play", "--network", &self.network, "--ip", ip, &file.to_string_lossy()],
            Duration::from_secs(120),
        )?;
        Ok(())
    }

    /// Plays the StatefulSet `name`'s pods.
    fn play_statefulset(&mut self, name: &str) -> Result<()> {
        let sts = self.doc("StatefulSet", name)?.clone();
        let template = &sts["spec"]["template"];
        let pods: Vec<(String, String)> =
            self.pods.iter().filter(|(p, _)| p.rsplit_once('-').is_some_and(|(n, _)| n == name)).cloned().collect();
        for (pod, ip) in pods {
            let mut spec = self.stand_in(&template["spec"], &pod, &ip)?;
            spec["hostname"] = pod.clone().into();
            let mut docs = Vec::new();
            let fs_group = spec["securityContext"]["fsGroup"].as_u64();
            for claim in sts["spec"]["volumeClaimTemplates"].as_sequence().into_iter().flatten() {
                let volume = text(&claim["metadata"]["name"])?;
                let claim_name = format!("{volume}-{pod}");
                let mut pvc: Value = serde_yaml::from_str("{ apiVersion: v1, kind: PersistentVolumeClaim }")?;
                pvc["metadata"]["name"] = claim_name.clone().into();
                label(&mut pvc["metadata"]["labels"]);
                if let Some(g) = fs_group {
                    pvc["metadata"]["annotations"]["volume.podman.io/uid"] = g.to_string().into();
                    pvc["metadata"]["annotations"]["volume.podman.io/gid"] = g.to_string().into();
                }
                pvc["spec"] = claim["spec"].clone();
                docs.push(pvc);
                let source: Value = serde_yaml::from_str(&format!(
                    "{{ name: {volume}, persistentVolumeClaim: {{ claimName: {claim_name} }} }}"
                ))?;
                match spec["volumes"].as_sequence_mut() {
                    Some(volumes) => volumes.push(source),
                    None => spec["volumes"] = Value::Sequence(vec![source]),
                }
            }
            let mut doc: Value = serde_yaml::from_str("{ apiVersion: v1, kind: Pod }")?;
            doc["metadata"]["name"] = pod.clone().into();
            doc["metadata"]["labels"] = template["metadata"]["labels"].clone();
            label(&mut doc["metadata"]["labels"]);
            doc["spec"] = spec;
            docs.push(doc);
            self.play(docs, &ip)?;
        }
        Ok(())
    }

    /// Plays the Deployment `name` (one replica), as a Deployment.
    fn play_deployment(&mut self, name: &str) -> Result<()> {
        let mut deployment = self.doc("Deployment", name)?.clone();
        let pod = format!("{name}-pod-0");
        let ip = self.pods.iter().find(|(p, _)| *p == pod).context("the Deployment's pod")?.1.clone();
        let spec = self.stand_in(&deployment["spec"]["template"]["spec"], &pod, &ip)?;
        deployment["spec"]["template"]["spec"] = spec;
        label(&mut deployment["spec"]["template"]["metadata"]["labels"]);
        self.play(vec![deployment], &ip)
    }

    /// The test's S3 store, with the bucket the ConfigMap's checkpoint store names.
    fn start_store(&mut self) -> Result<()> {
        let store_ip = self.ip(5);
        self.containers.push(KUBE_STORE.to_string());
        podman_ok(
            &[
                "run",
                "-d",
                "--name",
                KUBE_STORE,
                "--label",
                KUBE_LABEL,
                "--network",
                &self.network,
                "--ip",
                &store_ip,
                "localhost/weir-s3:dev",
            ],
            Duration::from_secs(60),
        )?;
        let store = self.values_of("ConfigMap", "weir-config")?;
        let url = store.iter().find(|(k, _)| k == "WEIR_CHECKPOINT_STORE").context("WEIR_CHECKPOINT_STORE")?;
        let bucket = url.1.strip_prefix("s3://").and_then(|r| r.split('/').next()).context("an s3:// store")?;
        let bucket = bucket.to_string();
        weir_integration_tests::wait_until("the S3 store's bucket", Duration::from_secs(60), || {
            Ok((http_status(&store_ip, 9000, "PUT", &format!("/{bucket}"))? == 200).then_some(()))
        })
    }

    /// Waits, as a kubelet would, until every probe of `pod`'s containers has passed: startup within its
    /// bound, then readiness (within a minute) and liveness.
    fn wait_probes(&self, pod_prefix: &str) -> Result<()> {
        let probes: Vec<&KubeProbe> = self.probes.iter().filter(|p| p.pod.starts_with(pod_prefix)).collect();
        assert!(!probes.is_empty(), "no probes for {pod_prefix}");
        for p in probes.iter().filter(|p| p.kind == "startupProbe") {
            let bound = p.initial_delay + p.period * p.failures + 5;
            p.wait(Duration::from_secs(bound))?;
        }
        for p in probes.iter().filter(|p| p.kind != "startupProbe") {
            p.wait(Duration::from_secs(60))?;
        }
        Ok(())
    }

    /// `weir ARGS --output json` on the host, against the job managers' pod IPs, as a client with the CA and the
    /// token.
    fn weir_json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let jobmanagers: Vec<String> = self
            .pods
            .iter()
            .filter(|(p, _)| p.starts_with("weir-jobmanager-"))
            .map(|(_, ip)| format!("https://{ip}:6123"))
            .collect();
        let mut cmd = Command::new(binary("weir")?);
        cmd.args(args)
            .args(["--output", "json"])
            .env("WEIR_JOBMANAGER", jobmanagers.join(","))
            .env("WEIR_TLS_CA", &self.ca_file)
            .env("WEIR_TOKEN_FILE", &self.token_file)
            .env_remove("WEIR_TLS_CERT")
            .env_remove("WEIR_TLS_KEY");
        let out = run_with_timeout(cmd, Duration::from_secs(60))?;
        if !out.status.success() {
            bail!("weir {}: {out}", args.join(" "));
        }
        serde_json::from_str(&out.stdout).with_context(|| format!("weir {} printed no JSON: {out}", args.join(" ")))
    }

    /// Brings the cluster up (store, etcd, job managers, task manager, each once the previous passes its
    /// probes), runs a keyed count to its end and checks its output, the task manager it ran on and the probes.
    fn run_a_job(&mut self) -> Result<()> {
        self.start_store()?;
        let statefulsets: Vec<String> =
            self.docs_of("StatefulSet").map(|d| text(&d["metadata"]["name"])).collect::<Result<_>>()?;
        // etcd first, then the job managers (which wait for etcd only `etcd_timeout_ms` at start).
        for name in statefulsets
            .iter()
            .filter(|n| n.contains("etcd"))
            .chain(statefulsets.iter().filter(|n| !n.contains("etcd")))
        {
            self.play_statefulset(name)?;
            self.wait_probes(&format!("{name}-"))?;
            eprintln!("kube play: {name} passes its probes");
        }
        let deployments: Vec<String> =
            self.docs_of("Deployment").map(|d| text(&d["metadata"]["name"])).collect::<Result<_>>()?;
        for name in &deployments {
            self.play_deployment(name)?;
            self.wait_probes(&format!("{name}-"))?;
            eprintln!("kube play: {name} passes its probes");
        }
        // The task manager registered under its pod's name (`$(POD_NAME)`) with the Deployment's slots.
        let cluster = self.weir_json(&["cluster"])?;
        let tms = cluster["task_managers"].as_array().context("task_managers")?;
        assert_eq!(tms.len(), 1, "{cluster}");
        assert_eq!(tms[0]["id"], "weir-taskmanager-pod-0", "{cluster}");
        assert_eq!(tms[0]["slots"], 2, "{cluster}");
        // One job manager leads (HA through etcd): `weir.ready` on exactly one.
        let leaders = self
            .pods
            .iter()
            .filter(|(p, _)| p.starts_with("weir-jobmanager-"))
            .filter(|(_, ip)| grpc_serving(ip, 6129, "weir.ready").is_ok())
            .count();
        assert_eq!(leaders, 1, "job managers serving weir.ready");

        let job = CountJob::bounded("kube", 400_000, 4_000, 23)
            .rate(80_000)
            .checkpoint_every_ms(500)
            .into_files(Path::new("/var/lib/weir/out/kube"));
        let spec = self.dir.path().join("job.yaml");
        std::fs::write(&spec, job.yaml())?;
        let submitted = self.weir_json(&["job", "submit", &spec.to_string_lossy()])?;
        let id = submitted["id"].as_str().or(submitted.as_str()).context("no job id")?.to_string();
        let mut last = serde_json::Value::Null;
        let done = weir_integration_tests::wait_until("the job's end", Duration::from_secs(120), || {
            let job = self.weir_json(&["job", "status", &id])?;
            last = job.clone();
            match job["state"].as_str() {
                Some("FINISHED") => Ok(Some(job)),
                Some("FAILED") | Some("CANCELED") => {
                    Err(weir_integration_tests::Fatal(format!("the job ended: {job}")).into())
                }
                _ => Ok(None),
            }
        })
        .with_context(|| format!("the job's last status: {last}"))?;
        assert!(done["last_completed_checkpoint"].as_u64().is_some(), "no checkpoint reached S3: {done}");
        let out = self.dir.path().join("out");
        let source = "weir-taskmanager-pod-0-taskmanager:/var/lib/weir/out/kube";
        podman_ok(&["cp", source, &out.to_string_lossy()], Duration::from_secs(60))?;
        verify_job_output(&job, &out).context("the job's output")?;
        // Nothing a kubelet would have restarted: every liveness probe passes still, and no container has
        // restarted (kube play restarts a container that exits, as a kubelet does).
        for p in self.probes.iter().filter(|p| p.kind == "livenessProbe") {
            p.check().map_err(|e| anyhow!("{p:?} fails after the job: {e}"))?;
        }
        let names: std::collections::BTreeSet<String> =
            self.probes.iter().map(|p| format!("{}-{}", p.pod, p.container)).collect();
        let mut args = vec!["inspect", "--format", "{{.Name}} {{.RestartCount}}"];
        args.extend(names.iter().map(String::as_str));
        let restarts = podman_ok(&args, Duration::from_secs(30))?;
        let restarted: Vec<&str> = restarts.lines().filter(|l| !l.ends_with(" 0")).collect();
        assert!(restarted.is_empty(), "containers restarted: {restarted:?}");
        Ok(())
    }

    /// The last lines of every container's log.
    fn logs(&self) -> String {
        let listed = podman(&["ps", "-a", "--pod", "--format", "{{.Names}} {{.PodName}}"], Duration::from_secs(20))
            .map(|o| o.stdout)
            .unwrap_or_default();
        let ours = listed
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(name, pod)| self.pods.iter().any(|(p, _)| p == pod) && !name.ends_with("-infra"));
        let mut all = String::new();
        for name in ours.map(|(name, _)| name).chain(self.containers.iter().map(String::as_str)) {
            let log = podman(&["logs", "--tail", "15", name], Duration::from_secs(20))
                .map(|o| format!("{}{}", o.stdout, o.stderr))
                .unwrap_or_default();
            all.push_str(&format!("----- {name}\n{log}\n"));
        }
        all
    }
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        // The network and the claims' volumes carry the label too.
        remove_leftovers();
        for secret in &self.secrets {
            let _ = podman(&["secret", "rm", secret], Duration::from_secs(30));
        }
    }
}

/// Removes the pods, containers, volumes and networks of this test, also a run's that was killed before it
/// cleaned up.
fn remove_leftovers() {
    let t = Duration::from_secs(120);
    let filter = format!("label={KUBE_LABEL}");
    // Each kind in one command: podman removes them in parallel.
    let remove = |list: &[&str], rm: &[&str]| {
        let listed = podman(&[list, &["-q", "--filter", &filter]].concat(), t).map(|o| o.stdout).unwrap_or_default();
        let ids: Vec<&str> = listed.split_whitespace().collect();
        if !ids.is_empty() {
            let _ = podman(&[rm, &ids].concat(), t);
        }
    };
    // SIGKILL first: the test is over, and `pod rm --force` would stop the pods one after the other, each
    // taking its grace period (its `--time` notwithstanding, in podman 4.3).
    remove(&["pod", "ps"], &["pod", "stop", "--time", "0"]);
    remove(&["pod", "ps"], &["pod", "rm", "--force"]);
    let _ = podman(&["rm", "--force", "--time", "0", "--ignore", KUBE_STORE], t);
    remove(&["volume", "ls"], &["volume", "rm", "--force"]);
    remove(&["network", "ls"], &["network", "rm", "--force"]);
}

/// Adds the test's label to a labels mapping.
fn label(labels: &mut Value) {
    let (k, v) = KUBE_LABEL.split_once('=').expect("a label");
    labels[k] = v.into();
}

/// One probe of one container, as the manifests state it.
#[derive(Debug)]
struct KubeProbe {
    kind: &'static str,
    pod: String,
    container: String,
    ip: String,
    action: ProbeAction,
    period: u64,
    failures: u64,
    initial_delay: u64,
}

#[derive(Debug)]
enum ProbeAction {
    Grpc { port: u16, service: String },
    Http { port: u16, path: String },
    Tcp { port: u16 },
}

impl KubeProbe {
    fn parse(p: &Value, ports: &Value, kind: &str, pod: &str, ip: &str, container: &str) -> Result<KubeProbe> {
        // A port by number, or by the name of one of the container's ports.
        let port = |v: &Value| -> Result<u16> {
            if let Some(n) = v.as_u64() {
                return Ok(n as u16);
            }
            let name = v.as_str().context("a probe's port")?;
            let port = ports.as_sequence().into_iter().flatten().find(|p| p["name"] == name);
            Ok(port.and_then(|p| p["containerPort"].as_u64()).context("a named port")? as u16)
        };
        let action = if let Some(g) = p.get("grpc") {
            ProbeAction::Grpc { port: port(&g["port"])?, service: g["service"].as_str().unwrap_or("").to_string() }
        } else if let Some(h) = p.get("httpGet") {
            ProbeAction::Http { port: port(&h["port"])?, path: h["path"].as_str().unwrap_or("/").to_string() }
        } else if let Some(t) = p.get("tcpSocket") {
            ProbeAction::Tcp { port: port(&t["port"])? }
        } else {
            bail!("{pod}/{container}: {kind} {p:?} is not stood in for");
        };
        let kind = match kind {
            "startupProbe" => "startupProbe",
            "livenessProbe" => "livenessProbe",
            _ => "readinessProbe",
        };
        Ok(KubeProbe {
            kind,
            pod: pod.to_string(),
            container: container.to_string(),
            ip: ip.to_string(),
            action,
            period: p["periodSeconds"].as_u64().unwrap_or(10),
            failures: p["failureThreshold"].as_u64().unwrap_or(3),
            initial_delay: p["initialDelaySeconds"].as_u64().unwrap_or(0),
        })
    }

    /// One probe, dialled at the pod's IP.
    fn check(&self) -> Result<()> {
        match &self.action {
            ProbeAction::Grpc { port, service } => grpc_serving(&self.ip, *port, service),
            ProbeAction::Http { port, path } => match http_status(&self.ip, *port, "GET", path)? {
                200..=399 => Ok(()),
                s => bail!("HTTP {s}"),
            },
            ProbeAction::Tcp { port } => {
                let addr = format!("{}:{port}", self.ip).parse()?;
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
                Ok(())
            }
        }
    }

    /// Probes every second until one passes, for at most `bound`.
    fn wait(&self, bound: Duration) -> Result<()> {
        let what = format!("{} of {}/{} ({:?})", self.kind, self.pod, self.container, self.action);
        weir_integration_tests::wait_until(&what, bound, || match self.check() {
            Ok(()) => Ok(Some(())),
            Err(e) => Err(e),
        })
    }
}

/// Whether the gRPC health service at `ip:port` serves `service` (`weir health`, as a probe asks it).
fn grpc_serving(ip: &str, port: u16, service: &str) -> Result<()> {
    let mut cmd = Command::new(binary("weir")?);
    cmd.args(["health", &format!("{ip}:{port}"), "--service", service]);
    let out = run_with_timeout(cmd, Duration::from_secs(10))?;
    if !out.status.success() {
        bail!("{out}");
    }
    Ok(())
}

/// The status code of an HTTP/1.0 request without a body.
fn http_status(ip: &str, port: u16, method: &str, path: &str) -> Result<u16> {
    use std::io::{Read, Write};
    let addr = format!("{ip}:{port}").parse()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "{method} {path} HTTP/1.0\r\nHost: {ip}:{port}\r\nContent-Length: 0\r\n\r\n")?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head)?;
    let line = String::from_utf8_lossy(&head);
    line.get(9..12).and_then(|c| c.parse().ok()).with_context(|| format!("not an HTTP answer: {line:?}"))
}

/// A CA, and a member certificate for `sans` (names and IPs) with its key, as PEM.
fn member_certificate(sans: &[String]) -> Result<(String, String, String)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "Weir kube play test CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(sans.to_vec())?;
    params.distinguished_name.push(DnType::CommonName, "weir-member");
    let cert = params.signed_by(&key, &issuer)?;
    Ok((ca.pem(), cert.pem(), key.serialize_pem()))
}

/// Kubernetes' expansion of `$(VAR)` references: a defined variable's value; `$$` is `$`; anything else as is.
fn expand(s: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some((name, r)) = after.strip_prefix('(').and_then(|a| a.split_once(')')) {
            match vars.get(name) {
                Some(v) => out.push_str(v),
                None => out.push_str(&format!("$({name})")),
            }
            rest = r;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Standard base64, padded.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn text(v: &Value) -> Result<String> {
    v.as_str().map(str::to_string).ok_or_else(|| anyhow!("not a string: {v:?}"))
}

fn yaml_scalar(v: &Value) -> String {
    serde_yaml::to_string(v).unwrap_or_default().trim().to_string()
}

#[test]
fn kube_stand_ins_expand_and_encode_as_kubernetes_does() {
    let vars = HashMap::from([("POD_NAME".to_string(), "weir-etcd-0".to_string())]);
    assert_eq!(expand("--name=$(POD_NAME)", &vars), "--name=weir-etcd-0");
    assert_eq!(expand("http://$(POD_NAME).weir-etcd:2379", &vars), "http://weir-etcd-0.weir-etcd:2379");
    assert_eq!(expand("$(NOPE) $$(POD_NAME) $x", &vars), "$(NOPE) $(POD_NAME) $x");
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"t0ken"), "dDBrZW4=");
    assert_eq!(base64(b"ab"), "YWI=");
    assert_eq!(base64(b"abc"), "YWJj");
}
