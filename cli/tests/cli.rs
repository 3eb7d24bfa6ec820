//! Runs the `weir` binary against a fake job manager (an in-process `ClientApi` server) and, for
//! `weir local`, against shell scripts standing in for `weir-jobmanager` and `weir-taskmanager`.

use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tonic::{Request, Response, Status};
use weir_proto as pb;
use weir_proto::client_api_server::{ClientApi, ClientApiServer};

#[derive(Default)]
struct FakeState {
    submitted: Vec<pb::JobSpec>,
    polls: u32,
    task_managers: Vec<String>,
}

/// The fake job manager; clones share the state, so the test sees what the server received.
#[derive(Clone, Default)]
struct FakeJm(Arc<Mutex<FakeState>>);

impl FakeJm {
    fn state(&self) -> MutexGuard<'_, FakeState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn job(id: &str, name: &str, state: &str, last: Option<u64>) -> pb::JobInfo {
    pb::JobInfo {
        id: id.into(),
        name: name.into(),
        state: pb::JobState::from_name(state).expect("a job state") as i32,
        last_completed_checkpoint: last,
        restarts: 0,
        attempt: 1,
        submit_time_ms: 1_700_000_000_000,
        end_time_ms: 0,
        failure: String::new(),
        parallelism: 2,
        max_parallelism: 128,
        checkpoints_completed: last.unwrap_or(0),
        checkpoints_failed: 0,
        ..Default::default()
    }
}

#[tonic::async_trait]
impl ClientApi for FakeJm {
    async fn trigger_savepoint(
        &self,
        r: Request<pb::TriggerSavepointRequest>,
    ) -> Result<Response<pb::SavepointResponse>, Status> {
        let r = r.into_inner();
        Ok(Response::new(pb::SavepointResponse {
            savepoint: format!("{}/savepoint-{}", r.target_dir, r.job_id),
            checkpoint_id: 4,
            full_size_bytes: 10,
            format: r.format,
            job: None,
        }))
    }

    async fn stop_job(&self, _: Request<pb::StopJobRequest>) -> Result<Response<pb::SavepointResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn dispose_savepoint(
        &self,
        _: Request<pb::DisposeSavepointRequest>,
    ) -> Result<Response<pb::DisposeSavepointResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn inspect_savepoint(
        &self,
        _: Request<pb::InspectSavepointRequest>,
    ) -> Result<Response<pb::InspectSavepointResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn check_savepoint(
        &self,
        _: Request<pb::CheckSavepointRequest>,
    ) -> Result<Response<pb::CheckSavepointResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }

    async fn submit_job(&self, r: Request<pb::SubmitJobRequest>) -> Result<Response<pb::SubmitJobResponse>, Status> {
        let spec = r.into_inner().spec.unwrap_or_default();
        if spec.name == "rejected" {
            return Err(Status::invalid_argument(
                "operator \"counts\": field \"kind\": unknown operator kind \"nope\"",
            ));
        }
        let mut dropped = Vec::new();
        if spec.name == "drops" {
            dropped.push(pb::DroppedState {
                uid: "counts".into(),
                state: "count".into(),
                reason: "kind changed".into(),
            });
        }
        let mut s = self.state();
        s.submitted.push(spec);
        Ok(Response::new(pb::SubmitJobResponse { job_id: format!("job-{}", s.submitted.len()), dropped }))
    }

    /// One job per page, so that the CLI must follow `next_page_token` to list both.
    async fn list_jobs(&self, r: Request<pb::ListJobsRequest>) -> Result<Response<pb::ListJobsResponse>, Status> {
        let mut failed = job("job-2", "other", "FAILED", Some(4));
        failed.failure = "task failed: boom".into();
        failed.end_time_ms = 1_700_000_100_000;
        let page = match r.into_inner().page_token.as_str() {
            "" => pb::ListJobsResponse { jobs: vec![failed], next_page_token: "second".into() },
            "second" => pb::ListJobsResponse {
                jobs: vec![job("job-1", "demo", "RUNNING", None)],
                next_page_token: String::new(),
            },
            other => return Err(Status::invalid_argument(format!("unknown page token {other}"))),
        };
        Ok(Response::new(page))
    }

    async fn delete_job(&self, r: Request<pb::DeleteJobRequest>) -> Result<Response<pb::DeleteJobResponse>, Status> {
        let r = r.into_inner();
        if r.job_id == "job-1" {
            return Err(Status::failed_precondition("job job-1 is RUNNING: cancel it first"));
        }
        Ok(Response::new(pb::DeleteJobResponse { deleted_files: if r.delete_checkpoints { 7 } else { 0 } }))
    }

    async fn get_job(&self, r: Request<pb::GetJobRequest>) -> Result<Response<pb::GetJobResponse>, Status> {
        let id = r.into_inner().job_id;
        if id == "missing" {
            return Err(Status::not_found("job missing not found"));
        }
        let mut s = self.state();
        s.polls += 1;
        let name = id
            .strip_prefix("job-")
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| s.submitted.get(n - 1))
            .map_or("demo".to_string(), |spec| spec.name.clone());
        let state = match (s.polls >= 3, name.as_str()) {
            (false, _) => "RUNNING",
            (true, "doomed") => "FAILED",
            (true, _) => "FINISHED",
        };
        let j = job(&id, &name, state, Some(s.polls as u64));
        Ok(Response::new(pb::GetJobResponse { job: Some(j) }))
    }

    async fn cancel_job(&self, r: Request<pb::CancelJobRequest>) -> Result<Response<pb::CancelJobResponse>, Status> {
        let id = r.into_inner().job_id;
        Ok(Response::new(pb::CancelJobResponse { job: Some(job(&id, "demo", "CANCELED", Some(2))) }))
    }

    async fn list_checkpoints(
        &self,
        _: Request<pb::ListCheckpointsRequest>,
    ) -> Result<Response<pb::ListCheckpointsResponse>, Status> {
        let done = pb::CheckpointInfo {
            id: 1,
            status: pb::CheckpointStatus::Completed as i32,
            trigger_time_ms: 1_700_000_000_500,
            duration_ms: 120,
            full_size_bytes: 4096,
            uploaded_bytes: 4096,
            failure_reason: String::new(),
            path: "file:///tmp/c/job-1/chk-1".into(),
            is_final: false,
            is_savepoint: false,
        };
        let failed = pb::CheckpointInfo {
            id: 2,
            status: pb::CheckpointStatus::Failed as i32,
            failure_reason: "declined: disk full".into(),
            path: String::new(),
            ..done.clone()
        };
        Ok(Response::new(pb::ListCheckpointsResponse { checkpoints: vec![failed, done] }))
    }

    async fn list_kinds(&self, _: Request<pb::ListKindsRequest>) -> Result<Response<pb::ListKindsResponse>, Status> {
        Ok(Response::new(pb::ListKindsResponse::default()))
    }

    async fn cluster_overview(
        &self,
        _: Request<pb::ClusterOverviewRequest>,
    ) -> Result<Response<pb::ClusterOverviewResponse>, Status> {
        let s = self.state();
        let task_managers: Vec<pb::TaskManagerInfo> = s
            .task_managers
            .iter()
            .map(|id| pb::TaskManagerInfo {
                id: id.clone(),
                rpc_address: "http://127.0.0.1:1".into(),
                data_address: "127.0.0.1:2".into(),
                slots: 2,
                free_slots: 2,
            })
            .collect();
        let total = 2 * task_managers.len() as u32;
        Ok(Response::new(pb::ClusterOverviewResponse {
            task_managers,
            total_slots: total,
            free_slots: total,
            ..Default::default()
        }))
    }
}

async fn start_fake(fake: FakeJm) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ClientApiServer::new(fake))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    format!("http://{addr}")
}

fn weir_cmd(args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.args(args)
        .env_remove("WEIR_JOBMANAGER")
        .env_remove("WEIR_OUTPUT")
        .env_remove("WEIR_RPC_TIMEOUT")
        .env_remove("WEIR_CONFIG")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

async fn weir(args: &[&str]) -> Output {
    tokio::time::timeout(Duration::from_secs(60), weir_cmd(args).output()).await.expect("weir hangs").unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write_spec(dir: &Path, name: &str) -> String {
    let path = dir.join(format!("{name}.yaml"));
    let text = format!(
        "name: {name}\nparallelism: 2\noperators:\n  - {{ uid: events, kind: datagen, config: {{ count: 10 }} }}\n  \
         - {{ uid: out, kind: blackhole, input: events }}\n"
    );
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_job_manager_exits_1() {
    let o = weir(&["--jobmanager", "http://127.0.0.1:1", "job", "list"]).await;
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).starts_with("error: cannot reach the job manager at http://127.0.0.1:1: "), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_prints_the_id_and_applies_parallelism() {
    let fake = FakeJm::default();
    let addr = start_fake(fake.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "demo");

    let o = weir(&["job", "submit", &spec, "--jobmanager", &addr]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "job-1\n");

    let o = weir(&["job", "submit", &spec, "--parallelism", "5", "--jobmanager", &addr, "--output", "json"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v, serde_json::json!({ "id": "job-2", "dropped_states": [] }));

    // A restore that drops state says so, state by state, on stderr, and in the JSON.
    let drops = write_spec(dir.path(), "drops");
    let o = weir(&["job", "submit", &drops, "--jobmanager", &addr, "--output", "json"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: the restore drops state \"count\" of operator \"counts\": kind changed"),
        "{}",
        stderr(&o)
    );
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["dropped_states"][0]["uid"], "counts", "{v}");

    let s = fake.state();
    assert_eq!(s.submitted[0].parallelism, Some(2));
    assert_eq!(s.submitted[1].parallelism, Some(5));
    assert_eq!(s.submitted[1].operators.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_forgets_an_ended_job_and_refuses_a_running_one() {
    let addr = start_fake(FakeJm::default()).await;
    let o = weir(&["job", "delete", "job-2", "--jobmanager", &addr]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "deleted job job-2 (its checkpoints are kept)\n");
    let o = weir(&["job", "delete", "job-2", "--delete-checkpoints", "--jobmanager", &addr, "--output", "json"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v, serde_json::json!({ "id": "job-2", "deleted": true, "deleted_files": 7 }));
    let o = weir(&["job", "delete", "job-1", "--jobmanager", &addr]).await;
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("cancel it first"), "{}", stderr(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_errors_exit_2() {
    let fake = FakeJm::default();
    let addr = start_fake(fake.clone()).await;
    let dir = tempfile::tempdir().unwrap();

    // Rejected by the job manager: its message is shown.
    let spec = write_spec(dir.path(), "rejected");
    let o = weir(&["job", "submit", &spec, "--jobmanager", &addr]).await;
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("error: operator \"counts\": field \"kind\": unknown operator kind"), "{}", stderr(&o));

    // Malformed locally: never sent.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "name: x\noperators: [ { uid: a, kind: datagen, colour: red } ]\n").unwrap();
    let o = weir(&["job", "submit", bad.to_str().unwrap(), "--jobmanager", &addr]).await;
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).starts_with("error: invalid job spec"), "{}", stderr(&o));

    let o = weir(&["job", "submit", "/nonexistent/spec.yaml", "--jobmanager", &addr]).await;
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("cannot read job spec"), "{}", stderr(&o));
    assert!(fake.state().submitted.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_wait_exit_code_follows_the_final_state() {
    let fake = FakeJm::default();
    let addr = start_fake(fake.clone()).await;
    let dir = tempfile::tempdir().unwrap();

    let spec = write_spec(dir.path(), "demo");
    let o = weir(&["job", "submit", &spec, "--wait", "--jobmanager", &addr]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "job-1\n");
    let err = stderr(&o);
    assert!(err.contains("job job-1: RUNNING, last completed checkpoint 1, restarts 0"), "{err}");
    assert!(err.contains("FINISHED"), "{err}");
    assert!(!err.contains('\r'), "no in-place updates when stderr is not a terminal: {err:?}");

    fake.state().polls = 0;
    let spec = write_spec(dir.path(), "doomed");
    let o = weir(&["job", "submit", &spec, "--wait", "--jobmanager", &addr]).await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("FAILED"), "{}", stderr(&o));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_and_checkpoint_json() {
    let addr = start_fake(FakeJm::default()).await;

    let o = weir(&["job", "list", "--output", "json", "--jobmanager", &addr]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let jobs = v.as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    for j in jobs {
        for field in
            ["id", "name", "state", "last_completed_checkpoint", "restarts", "failure", "failure_reason", "end_time_ms"]
        {
            assert!(j.get(field).is_some(), "{field} missing in {j}");
        }
    }
    let running = jobs.iter().find(|j| j["id"] == "job-1").unwrap();
    assert_eq!(running["last_completed_checkpoint"], Value::Null);
    assert_eq!(running["failure"], Value::Null);
    let failed = jobs.iter().find(|j| j["id"] == "job-2").unwrap();
    assert_eq!(failed["last_completed_checkpoint"], 4);
    assert_eq!(failed["failure"], "task failed: boom");
    assert_eq!(failed["failure_reason"], "task failed: boom");

    let o = weir(&["job", "list", "--jobmanager", &addr]).await;
    assert!(stdout(&o).starts_with("ID     NAME   STATE"), "{}", stdout(&o));

    let o = weir(&["--output", "json", "--jobmanager", &addr, "job", "status", "job-7"]).await;
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["id"], "job-7");
    assert_eq!(v["state"], "RUNNING");

    let o = weir(&["job", "status", "missing", "--jobmanager", &addr]).await;
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).trim(), "error: job missing not found");

    let o = weir(&["job", "cancel", "job-1", "--jobmanager", &addr, "--output", "json"]).await;
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["state"], "CANCELED");

    let o = weir(&["checkpoints", "job-1", "--output", "json", "--jobmanager", &addr]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let cs = v.as_array().unwrap();
    assert_eq!(cs[0]["id"], 1, "sorted by id");
    assert_eq!(cs[0]["status"], "COMPLETED");
    assert_eq!(cs[0]["trigger_time"], 1_700_000_000_500u64);
    assert_eq!(cs[0]["failure_reason"], Value::Null);
    assert_eq!(cs[1]["failure_reason"], "declined: disk full");
    for field in ["duration_ms", "full_size_bytes", "uploaded_bytes", "path", "is_final"] {
        assert!(cs[1].get(field).is_some(), "{field}");
    }

    let o = weir(&["checkpoints", "job-1", "--jobmanager", &addr]).await;
    assert!(stdout(&o).contains("declined: disk full") && stdout(&o).contains("4.0 KiB"), "{}", stdout(&o));
}

fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn alive(pid: i64) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_starts_reports_and_stops_the_cluster() {
    let fake = FakeJm::default();
    fake.state().task_managers = vec!["tm-0".into(), "tm-1".into()];
    let addr = start_fake(fake).await;
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let jm = script(
        &bin,
        "fake-jm",
        "echo \"$@\" > \"$FAKE_OUT/jm-args\"\necho starting\necho \"weir-jobmanager listening on $FAKE_JM\"\n\
         exec sleep 300\n",
    );
    let tm = script(
        &bin,
        "fake-tm",
        "for a; do last=$a; done\nid=$(basename \"$last\")\necho \"$@\" > \"$FAKE_OUT/$id-args\"\n\
         echo \"weir-taskmanager $id listening on http://127.0.0.1:1 data 127.0.0.1:2\"\nexec sleep 300\n",
    );
    let dir = tmp.path().join("cluster");
    let dir_s = dir.display().to_string();
    let mut child = weir_cmd(&[
        "local",
        "--taskmanagers",
        "2",
        "--slots",
        "3",
        "--dir",
        &dir_s,
        "--bind",
        "127.0.0.1:0",
        "--jobmanager-bin",
        &jm,
        "--taskmanager-bin",
        &tm,
        "--output",
        "json",
    ])
    .env("FAKE_JM", &addr)
    .env("FAKE_OUT", tmp.path())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();

    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await.expect("ready line").unwrap();
    let v: Value = serde_json::from_str(&line.expect("stdout closed")).unwrap();
    assert_eq!(v["jobmanager"], addr.as_str());
    let tms = v["taskmanagers"].as_array().unwrap();
    assert_eq!(tms.iter().map(|t| t["id"].as_str().unwrap()).collect::<Vec<_>>(), ["tm-0", "tm-1"]);
    let mut pids: Vec<i64> = tms.iter().map(|t| t["pid"].as_i64().unwrap()).collect();
    pids.push(v["jobmanager_pid"].as_i64().unwrap());
    assert!(pids.iter().all(|p| alive(*p)));

    let canonical = dir.canonicalize().unwrap().display().to_string();
    let file: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("cluster.json")).unwrap()).unwrap();
    assert_eq!(file, v);
    let jm_args = std::fs::read_to_string(tmp.path().join("jm-args")).unwrap();
    assert_eq!(
        jm_args.trim(),
        format!(
            "--bind 127.0.0.1:0 --data-dir {canonical}/jobmanager --checkpoint-store file://{canonical}/checkpoints"
        )
    );
    let tm_args = std::fs::read_to_string(tmp.path().join("tm-1-args")).unwrap();
    assert_eq!(
        tm_args.trim(),
        format!("--jobmanager {addr} --bind 127.0.0.1:0 --data-bind 127.0.0.1:0 --slots 3 --data-dir {canonical}/tm-1")
    );

    // A task manager dies: the cluster keeps running.
    unsafe { libc::kill(pids[0] as libc::pid_t, libc::SIGKILL) };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(child.try_wait().unwrap().is_none(), "weir local must survive a task manager's death");
    assert!(alive(pids[1]) && alive(pids[2]));

    // SIGTERM stops everything and exits 0.
    unsafe { libc::kill(child.id().unwrap() as libc::pid_t, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("weir stops").unwrap();
    let mut err = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut err).await.unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("[weir-jobmanager] starting"), "{err}");
    assert!(err.contains("exited"), "{err}");
    assert!(pids.iter().all(|p| !alive(*p)), "children still running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_reports_a_child_that_exits_early() {
    let tmp = tempfile::tempdir().unwrap();
    let jm = script(tmp.path(), "fake-jm", "echo 'address already in use' >&2\nexit 3\n");
    let dir = tmp.path().join("c").display().to_string();
    let o = weir(&["local", "--dir", &dir, "--jobmanager-bin", &jm, "--logs-to-files"]).await;
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = stderr(&o);
    assert!(err.contains("weir-jobmanager exited before it was listening (exit status: 3)"), "{err}");
    let log = std::fs::read_to_string(tmp.path().join("c/logs/jobmanager.log")).unwrap();
    assert!(log.contains("address already in use"), "{log}");

    let o = weir(&["local", "--dir", &dir, "--jobmanager-bin", "/nonexistent/weir-jobmanager"]).await;
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).contains("cannot start weir-jobmanager"), "{}", stderr(&o));
}
