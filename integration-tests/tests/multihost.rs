//! Multi-host on one machine: etcd, an HA job manager and two task managers, each in a network namespace the
//! test creates, with its own address. One task manager is cut off the network (not killed): the job fails
//! over to the other; when the partition heals, the cut-off task manager is told to register again, its old
//! tasks end (canceled, or failed on their reset connections), and nothing it sends for the old attempt
//! changes the job: the output is exact.

use std::path::Path;
use std::time::Duration;
use weir_integration_tests::ha::{etcd_binary, etcd_member_args};
use weir_integration_tests::netns::Hosts;
use weir_integration_tests::process::run_with_timeout;
use weir_integration_tests::{binary, scenario_seed, verify_job_output, wait_until, CountJob, Process};

struct Cli<'a> {
    hosts: &'a Hosts,
    jm: String,
}

impl Cli<'_> {
    fn json(&self, args: &[&str]) -> anyhow::Result<serde_json::Value> {
        let mut cmd = self.hosts.command("jm", &binary("weir")?);
        cmd.args(args).args(["--output", "json", "--rpc-timeout", "3", "--jobmanager", &self.jm]);
        let out = run_with_timeout(cmd, Duration::from_secs(30))?;
        anyhow::ensure!(out.code() == Some(0), "weir {}: {}", args.join(" "), out.stderr);
        Ok(serde_json::from_str(&out.stdout)?)
    }
}

fn log_of(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default()
}

#[test]
fn a_task_manager_cut_off_the_network_is_failed_over_and_fenced_when_it_returns() -> anyhow::Result<()> {
    anyhow::ensure!(Hosts::available(), "this test needs root and iproute2 to create network namespaces");
    let hosts = Hosts::create(&["etcd", "jm", "tm0", "tm1"])?;
    let dir = tempfile::Builder::new().prefix("weir-multihost-").tempdir()?;
    let d = dir.path();
    let (etcd_ip, jm_ip) = (hosts.ip_of("etcd"), hosts.ip_of("jm"));

    let mut etcd_cmd = hosts.command("etcd", &etcd_binary()?);
    let peer = format!("http://{etcd_ip}:2380");
    etcd_member_args(
        &mut etcd_cmd,
        "mh",
        &d.join("etcd"),
        &format!("http://{etcd_ip}:2379"),
        &peer,
        &format!("mh={peer}"),
    );
    let mut etcd = Process::spawn("etcd", etcd_cmd, &d.join("etcd.log"))?;
    wait_until("for etcd", Duration::from_secs(30), || {
        Ok(log_of(d, "etcd").contains("ready to serve client requests").then_some(()))
    })?;

    let jm_addr = format!("{jm_ip}:6123");
    let mut jm_cmd = hosts.command("jm", &binary("weir-jobmanager")?);
    jm_cmd
        .args(["--bind", &jm_addr, "--advertise-address", &format!("http://{jm_addr}")])
        .args(["--ha", "etcd", "--etcd-endpoints", &format!("http://{etcd_ip}:2379"), "--ha-cluster-id", "mh"])
        .args(["--heartbeat-interval-ms", "300", "--heartbeat-timeout-ms", "3000", "--data-dir"])
        .arg(d.join("jm"))
        .args(["--checkpoint-store", &format!("file://{}", d.join("checkpoints").display())]);
    let mut jm = Process::spawn("jobmanager", jm_cmd, &d.join("jobmanager.log"))?;
    jm.wait_for_stdout(Duration::from_secs(30), |l| l.starts_with("weir-jobmanager listening").then_some(()))?;

    let mut tms = Vec::new();
    for name in ["tm0", "tm1"] {
        let ip = hosts.ip_of(name);
        let mut cmd = hosts.command(name, &binary("weir-taskmanager")?);
        cmd.args(["--jobmanager", &format!("http://{jm_addr}"), "--bind", &format!("{ip}:0")])
            .args(["--data-bind", &format!("{ip}:0"), "--advertise-host", &ip, "--slots", "2", "--tm-id", name])
            .arg("--data-dir")
            .arg(d.join(name));
        let mut p = Process::spawn(name, cmd, &d.join(format!("{name}.log")))?;
        p.wait_for_stdout(Duration::from_secs(30), |l| l.starts_with("weir-taskmanager").then_some(()))?;
        tms.push(p);
    }
    let cli = Cli { hosts: &hosts, jm: format!("http://{jm_addr}") };
    wait_until("for both task managers", Duration::from_secs(30), || {
        let Ok(o) = cli.json(&["cluster"]) else { return Ok(None) };
        Ok((o["task_managers"].as_array().map_or(0, |a| a.len()) == 2).then_some(()))
    })?;

    let out = d.join("out");
    std::fs::create_dir_all(&out)?;
    let job = CountJob::bounded("multihost", 1_000_000, 20_000, scenario_seed() % 1000)
        .rate(40_000)
        .checkpoint_every_ms(500)
        .emit_updates()
        .into_files(&out);
    let spec = d.join("job.yaml");
    std::fs::write(&spec, job.yaml())?;
    let id =
        cli.json(&["job", "submit", spec.to_str().unwrap_or_default()])?["id"].as_str().unwrap_or_default().to_string();
    let before = wait_until("for checkpoints", Duration::from_secs(60), || {
        let j = cli.json(&["job", "status", &id])?;
        Ok((j["checkpoints_completed"].as_u64().unwrap_or(0) >= 3).then_some(j))
    })?;

    // tm1 drops off the network, alive: the job manager misses its heartbeats and fails the job over to tm0.
    hosts.cut("tm1")?;
    let attempt = before["attempt"].as_u64().unwrap_or(0);
    let moved = wait_until("for the job to run on tm0 alone", Duration::from_secs(60), || {
        let Ok(j) = cli.json(&["job", "status", &id]) else { return Ok(None) };
        Ok((j["attempt"].as_u64().unwrap_or(0) > attempt && j["state"] == "RUNNING").then_some(j))
    })?;
    assert!(tms[1].is_running(), "tm1 was cut off, not killed");

    // Healed: tm1 learns it was lost and registers again; none of its old tasks runs on. Each is canceled by
    // the new registration, or failed before it by itself (its data connections to tm0, which tm0 closed when
    // the old attempt was canceled there, are reset as soon as the network is back).
    let deployed = log_of(d, "tm1").matches("deploying task").count();
    hosts.heal("tm1")?;
    wait_until("for tm1 to register again", Duration::from_secs(60), || {
        Ok((log_of(d, "tm1").matches("registered with job manager").count() >= 2).then_some(()))
    })?;
    assert!(deployed > 0, "tm1 ran tasks of the job:\n{}", log_of(d, "tm1"));
    wait_until("for every old task of tm1 to end", Duration::from_secs(30), || {
        let log = log_of(d, "tm1");
        let ended = log.lines().filter(|l| l.contains("task canceled") || l.contains("task failed")).count();
        Ok((ended >= deployed).then_some(()))
    })?;

    let done = wait_until("for the job to finish", Duration::from_secs(180), || {
        let j = cli.json(&["job", "status", &id])?;
        anyhow::ensure!(j["state"] != "FAILED", "the job failed: {j}");
        Ok((j["state"] == "FINISHED").then_some(j))
    })?;
    assert_eq!(done["attempt"], moved["attempt"], "tm1's return disturbed the job: {done}");
    verify_job_output(&job, &out)?;
    for p in &mut tms {
        p.kill();
    }
    jm.kill();
    etcd.kill();
    Ok(())
}
