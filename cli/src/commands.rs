//! The client commands: `job submit|list|status|cancel|stop`, `savepoint trigger|inspect|dispose`,
//! `checkpoints`, `cluster`.

use crate::args::{JobCommand, OutputFormat, SavepointCommand, SqlCommand, SubmitArgs};
use crate::client::JobManager;
use crate::error::CliError;
use crate::progress::Progress;
use crate::render;
use crate::settings::Settings;
use serde::Serialize;
use serde_json::json;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use weir_common::checkpoint::RestoreMode;
use weir_common::job::kind::KindInfo;
use weir_proto as pb;

/// How often `job submit --wait` asks for the job's state.
const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// How long `--wait` keeps polling while the job manager is unreachable (e.g. while it restarts).
const UNREACHABLE_GRACE: Duration = Duration::from_secs(60);

/// `weir job …`
pub async fn job(settings: &Settings, cmd: JobCommand) -> Result<ExitCode, CliError> {
    match cmd {
        JobCommand::Submit(args) => submit(settings, args).await,
        JobCommand::List => {
            let mut jobs = connect(settings).await?.list_jobs().await?;
            jobs.sort_by(|a, b| (a.submit_time_ms, &a.id).cmp(&(b.submit_time_ms, &b.id)));
            emit(settings, || render::jobs_table(&jobs), || render::jobs_json(&jobs, weir_common::now_ms()));
            Ok(ExitCode::SUCCESS)
        }
        JobCommand::Status { id } => {
            let job = connect(settings).await?.get_job(&id).await?;
            emit(
                settings,
                || render::job_text(&job, weir_common::now_ms()),
                || render::job_json(&job, weir_common::now_ms()),
            );
            Ok(ExitCode::SUCCESS)
        }
        JobCommand::Cancel { id } => {
            let job = connect(settings).await?.cancel_job(&id).await?;
            emit(
                settings,
                || format!("{}\n", render::job_line(&job)),
                || render::job_json(&job, weir_common::now_ms()),
            );
            Ok(ExitCode::SUCCESS)
        }
        JobCommand::Delete { id, delete_checkpoints } => {
            let files = connect(settings).await?.delete_job(&id, delete_checkpoints).await?;
            emit(
                settings,
                || match delete_checkpoints {
                    true => format!("deleted job {id} and {files} checkpoint files\n"),
                    false => format!("deleted job {id} (its checkpoints are kept)\n"),
                },
                || json!({ "id": id, "deleted": true, "deleted_files": files }),
            );
            Ok(ExitCode::SUCCESS)
        }
        JobCommand::Stop(a) => {
            let dir = a.savepoint.unwrap_or_default();
            let jm = connect_for(settings, a.timeout).await?;
            let r = jm.savepoint(&a.id, &dir, a.format, Some(a.drain)).await?;
            emit(settings, || format!("{}\n", r.savepoint), || render::savepoint_json(&r));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `weir savepoint …`
pub async fn savepoint(settings: &Settings, cmd: SavepointCommand) -> Result<ExitCode, CliError> {
    match cmd {
        SavepointCommand::Trigger { id, dir, format, timeout } => {
            let jm = connect_for(settings, timeout).await?;
            let r = jm.savepoint(&id, dir.as_deref().unwrap_or(""), format, None).await?;
            emit(settings, || format!("{}\n", r.savepoint), || render::savepoint_json(&r));
        }
        SavepointCommand::Inspect { url } => {
            let r = connect(settings).await?.inspect_savepoint(&url).await?;
            emit(settings, || render::savepoint_text(&r), || render::inspect_json(&r));
        }
        SavepointCommand::Check { url, spec, parallelism, allow_non_restored_state } => {
            let args = SubmitArgs {
                spec,
                parallelism,
                wait: false,
                from_savepoint: Some(url.clone()),
                allow_non_restored_state,
                restore_mode: RestoreMode::NoClaim,
            };
            let spec = load_spec(&args)?;
            let r = connect(settings).await?.check_savepoint(&url, spec, allow_non_restored_state).await?;
            emit(settings, || render::check_text(&r), || render::check_json(&r));
            if !r.ok {
                return Ok(ExitCode::from(1));
            }
        }
        SavepointCommand::Dispose { url } => {
            let n = connect(settings).await?.dispose_savepoint(&url).await?;
            emit(
                settings,
                || format!("disposed {url} ({n} files)\n"),
                || json!({ "savepoint": url, "deleted_files": n }),
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A connection whose calls may take `secs` (at least the usual timeout): savepoints take as long as their state.
async fn connect_for(settings: &Settings, secs: u64) -> Result<JobManager, CliError> {
    JobManager::connect(
        &settings.jobmanager,
        settings.rpc_timeout.max(Duration::from_secs(secs)),
        settings.security.clone(),
    )
    .await
}

/// `weir checkpoints ID`
pub async fn checkpoints(settings: &Settings, id: &str) -> Result<ExitCode, CliError> {
    let mut cs = connect(settings).await?.list_checkpoints(id).await?;
    cs.sort_by_key(|c| c.id);
    emit(settings, || render::checkpoints_table(&cs), || render::checkpoints_json(&cs));
    Ok(ExitCode::SUCCESS)
}

/// `weir cluster`
pub async fn cluster(settings: &Settings) -> Result<ExitCode, CliError> {
    let overview = connect(settings).await?.cluster_overview().await?;
    emit(settings, || render::cluster_text(&overview), || render::cluster_json(&overview));
    Ok(ExitCode::SUCCESS)
}

/// `weir kinds [KIND]`: what a spec can use, from what the task managers report.
pub async fn kinds(settings: &Settings, only: Option<&str>) -> Result<ExitCode, CliError> {
    let reported = connect(settings).await?.list_kinds().await?.kinds;
    // A kind this CLI cannot read (a newer job manager's) is named, not shown.
    let mut kinds: Vec<KindInfo> =
        reported.iter().filter_map(|k| KindInfo::try_from(k).map_err(|e| eprintln!("warning: {e}")).ok()).collect();
    if let Some(name) = only {
        kinds.retain(|k| k.kind == name);
        if kinds.is_empty() {
            return Err(CliError::Failed(format!(
                "no task manager offers the operator kind {}",
                weir_common::text::echo(name)
            )));
        }
    }
    emit(settings, || render::kinds_text(&kinds), || render::kinds_json(&kinds));
    Ok(ExitCode::SUCCESS)
}

/// `weir health`: whether the health service at `address` says `service` is SERVING (exit 0) or not (exit 1).
pub async fn health(address: &str, service: &str) -> Result<ExitCode, CliError> {
    let what = if service.is_empty() { "the process" } else { service };
    match weir_common::service::health::check(address, service, std::time::Duration::from_secs(3)).await {
        Ok(true) => {
            println!("{address}: {what} is serving");
            Ok(ExitCode::SUCCESS)
        }
        Ok(false) => Err(CliError::Failed(format!("{address}: {what} is not serving"))),
        Err(e) => Err(CliError::Failed(e.to_string())),
    }
}

/// Reads and parses a spec file and applies `--parallelism`. The file is read only up to the size limit of a
/// spec (`/dev/zero` is refused, not read until memory runs out), and the spec's limits are checked here, so that
/// a value over them is refused by name instead of by gRPC's message size.
pub fn load_spec(args: &SubmitArgs) -> Result<pb::JobSpec, CliError> {
    let path = args.spec.display();
    let text = read_bounded(&args.spec, weir_common::job::spec::MAX_SPEC_BYTES, "the limit of a spec (1 MiB)")
        .map_err(|e| CliError::Spec(format!("cannot read job spec {path}: {e}")))?;
    let invalid = |e: String| CliError::Spec(format!("invalid job spec {path}: {e}"));
    let mut spec = if is_sql(&args.spec) {
        let planned = plan_sql(&args.spec, &text, args.parallelism)?;
        weir_common::job::spec::file_to_proto(planned.spec).map_err(|e| invalid(e.to_string()))?
    } else {
        weir_common::job::spec::parse_spec_text(&text).map_err(|e| invalid(e.to_string()))?
    };
    if let Some(p) = args.parallelism {
        spec.parallelism = Some(p);
    }
    let dir = args.spec.parent().unwrap_or(std::path::Path::new("."));
    inline_schema_files(&mut spec, dir).map_err(invalid)?;
    weir_common::job::spec::check_limits(&spec).map_err(|e| invalid(e.to_string()))?;
    Ok(spec)
}

/// Whether a job file is a SQL script (its name ends in `.sql`).
fn is_sql(path: &std::path::Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("sql"))
}

/// Plans a SQL script's `text` (read from `path`) into a job spec, its warnings on stderr. A script that does
/// not plan is an invalid spec (exit 2), its message naming the line and column.
fn plan_sql(
    path: &std::path::Path,
    text: &str,
    parallelism: Option<u32>,
) -> Result<weir_sql::script::Planned, CliError> {
    let name = path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_else(|| "sql".into());
    let options = weir_sql::script::PlanOptions { name, parallelism };
    let planned = weir_sql::script::plan_script(text, &options)
        .map_err(|e| CliError::Spec(format!("invalid SQL script {}: {e}", path.display())))?;
    for w in &planned.warnings {
        eprintln!("warning: {w}");
    }
    Ok(planned)
}

/// `weir sql …`: planning only, no job manager.
pub fn sql(settings: &Settings, cmd: SqlCommand) -> Result<ExitCode, CliError> {
    match cmd {
        SqlCommand::Explain { file, parallelism } => {
            let text = read_bounded(&file, weir_common::job::spec::MAX_SPEC_BYTES, "the limit of a spec (1 MiB)")
                .map_err(|e| CliError::Spec(format!("cannot read {}: {e}", file.display())))?;
            let planned = plan_sql(&file, &text, parallelism)?;
            emit(settings, || render::explain_text(&planned.spec), || &planned.spec);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The text of the file at `path`, refused if it is longer than `limit` bytes (only `limit + 1` are read);
/// `what` names the limit in the error.
fn read_bounded(path: &std::path::Path, limit: usize, what: &str) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() > limit {
        return Err(format!("it is over {limit} bytes, {what}"));
    }
    String::from_utf8(bytes).map_err(|e| format!("it is not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
}

/// Replaces each operator's `avro_schema_file` (a path relative to the spec's directory, e.g. the `.avsc` a
/// schema registry holds) by the file's text as `avro_schema`: the job manager and task managers get the schema
/// itself, not a path on the submitting machine.
fn inline_schema_files(spec: &mut pb::JobSpec, dir: &std::path::Path) -> Result<(), String> {
    for op in &mut spec.operators {
        let Some(file) = op.config.remove("avro_schema_file") else { continue };
        let at = |e: String| format!("operator {:?}: avro_schema_file: {e}", op.uid);
        if op.config.contains_key("avro_schema") {
            return Err(at("give avro_schema or avro_schema_file, not both".into()));
        }
        let Some(file) = file.as_text() else { return Err(at("expected a path, as text".into())) };
        let path = dir.join(file.trim());
        let limit = weir_common::job::spec::MAX_CONFIG_VALUE_BYTES;
        let text = read_bounded(&path, limit, "the limit of a config value (64 KiB)")
            .map_err(|e| at(format!("cannot read {}: {e}", path.display())))?;
        op.config.insert("avro_schema".into(), text.into());
    }
    Ok(())
}

async fn submit(settings: &Settings, args: SubmitArgs) -> Result<ExitCode, CliError> {
    let spec = load_spec(&args)?;
    let jm = connect(settings).await?;
    let req = pb::SubmitJobRequest {
        spec: Some(spec),
        from_savepoint: args.from_savepoint.clone().unwrap_or_default(),
        allow_non_restored_state: args.allow_non_restored_state,
        restore_mode: args.restore_mode as i32,
    };
    let submitted = jm.submit_job(req).await?;
    let id = submitted.job_id;
    // A restore that drops state says so, state by state, where a person sees it even with --output json.
    for d in &submitted.dropped {
        eprintln!("warning: the restore drops state {:?} of operator {:?}: {}", d.state, d.uid, d.reason);
    }
    let dropped: Vec<serde_json::Value> =
        submitted.dropped.iter().map(|d| json!({ "uid": d.uid, "state": d.state, "reason": d.reason })).collect();
    emit(settings, || format!("{id}\n"), || json!({ "id": id, "dropped_states": dropped }));
    if !args.wait {
        return Ok(ExitCode::SUCCESS);
    }
    let job = wait_for_job(&jm, &id, &mut Progress::stderr()).await?;
    eprintln!("{}", render::job_line(&job));
    Ok(if job.state() == pb::JobState::Finished { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Polls a job until it reaches a final state, showing state, last completed checkpoint and restarts.
pub async fn wait_for_job<W: Write>(
    jm: &JobManager,
    id: &str,
    progress: &mut Progress<W>,
) -> Result<pb::JobInfo, CliError> {
    let start = Instant::now();
    let mut ticker = tokio::time::interval(POLL_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut unreachable_since: Option<Instant> = None;
    loop {
        ticker.tick().await;
        let elapsed = render::duration_ms(start.elapsed().as_secs() * 1000);
        match jm.get_job(id).await {
            Ok(job) => {
                unreachable_since = None;
                let key = format!(
                    "job {}: {}, last completed checkpoint {}, restarts {}",
                    job.id,
                    job.state(),
                    job.last_completed_checkpoint.map_or_else(|| "-".to_string(), |c| c.to_string()),
                    job.restarts
                );
                progress.update(&key, &format!("{key} ({elapsed})"));
                if job.state().is_terminal() {
                    progress.finish();
                    return Ok(job);
                }
            }
            Err(e) if e.is_transient() => {
                let since = *unreachable_since.get_or_insert_with(Instant::now);
                if since.elapsed() > UNREACHABLE_GRACE {
                    progress.finish();
                    return Err(e);
                }
                progress.update("unreachable", &format!("job {id}: waiting for the job manager ({e}) ({elapsed})"));
            }
            Err(e) => {
                progress.finish();
                return Err(e);
            }
        }
    }
}

async fn connect(settings: &Settings) -> Result<JobManager, CliError> {
    JobManager::connect(&settings.jobmanager, settings.rpc_timeout, settings.security.clone()).await
}

/// Prints a result on stdout in the chosen format.
fn emit<J: Serialize>(settings: &Settings, text: impl FnOnce() -> String, json: impl FnOnce() -> J) {
    match settings.output {
        OutputFormat::Text => print_stdout(&text()),
        OutputFormat::Json => print_stdout(&render::json_text(&json())),
    }
}

/// Writes to stdout and flushes; a closed pipe (`weir job list | head -1`) is not an error.
pub fn print_stdout(s: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(s.as_bytes()).and_then(|_| out.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_with(config: &[(&str, &str)]) -> pb::JobSpec {
        let mut op = pb::OperatorSpec { uid: "bids".into(), kind: "kafka".into(), ..Default::default() };
        op.config = config.iter().map(|(k, v)| (k.to_string(), (*v).into())).collect();
        pb::JobSpec { operators: vec![op], ..Default::default() }
    }

    #[test]
    fn an_avro_schema_file_is_read_beside_the_spec_and_sent_as_the_schema() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bid.avsc"), r#"{"type": "record"}"#).unwrap();
        let mut spec = spec_with(&[("avro_schema_file", "bid.avsc")]);
        inline_schema_files(&mut spec, dir.path()).unwrap();
        let config = &spec.operators[0].config;
        assert_eq!(config.get("avro_schema").and_then(|v| v.as_text()), Some(r#"{"type": "record"}"#));
        assert!(!config.contains_key("avro_schema_file"));

        let mut missing = spec_with(&[("avro_schema_file", "nope.avsc")]);
        let e = inline_schema_files(&mut missing, dir.path()).unwrap_err();
        assert!(e.contains("operator \"bids\": avro_schema_file: cannot read") && e.contains("nope.avsc"), "{e}");
        let mut both = spec_with(&[("avro_schema_file", "bid.avsc"), ("avro_schema", "{}")]);
        assert!(inline_schema_files(&mut both, dir.path()).unwrap_err().contains("not both"));
    }
}
