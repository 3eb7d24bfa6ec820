//! The command line: every command, option and its help text.

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use weir_common::checkpoint::{parse_restore_mode, parse_savepoint_format, RestoreMode, SavepointFormat};

/// The job manager address used when neither `--jobmanager`, `WEIR_JOBMANAGER` nor a config file names one.
pub const DEFAULT_JOBMANAGER: &str = "http://127.0.0.1:6123";
/// Default timeout of one call to the job manager, in seconds.
pub const DEFAULT_RPC_TIMEOUT_SECS: u64 = 10;
/// Default address the job manager of `weir local` binds to.
pub const DEFAULT_LOCAL_BIND: &str = "127.0.0.1:6123";

/// Weir's command line: submit and inspect jobs, list checkpoints, run a local cluster.
#[derive(Parser, Debug)]
#[command(name = "weir", version, propagate_version = true)]
pub struct Cli {
    /// The options every command takes.
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes (before or after the command name).
#[derive(Args, Debug, Clone, Default)]
pub struct GlobalArgs {
    /// Address of the job manager's client API, or several comma-separated (HA: any of them leads to the
    /// leader) [default: http://127.0.0.1:6123]
    #[arg(long, global = true, env = "WEIR_JOBMANAGER", value_name = "ADDR[,ADDR...]")]
    pub jobmanager: Option<String>,
    /// File holding the bearer token for the job manager's client API (or the token itself in WEIR_TOKEN)
    #[arg(long, global = true, env = "WEIR_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// TLS (`--tls-ca` alone trusts the job manager's certificate, as https:// addresses need; with
    /// `--tls-cert` and `--tls-key` this command presents a certificate too) and the cluster secret.
    #[command(flatten)]
    pub security: weir_common::service::security::SecurityFlags,
    /// Output format: `text` for people, `json` for scripts [default: text]
    #[arg(long, global = true, env = "WEIR_OUTPUT", value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,
    /// Timeout of every call to the job manager, in seconds [default: 10]
    #[arg(long, global = true, env = "WEIR_RPC_TIMEOUT", value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub rpc_timeout: Option<u64>,
    /// TOML file with defaults for the options above (keys `jobmanager`, `output`, `rpc_timeout`);
    /// `WEIR_*` variables and flags override it
    #[arg(long, global = true, env = "WEIR_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// How results are printed on stdout.
#[derive(ValueEnum, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// Short, aligned text for people.
    #[default]
    Text,
    /// JSON for scripts.
    Json,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Submit, list, inspect and cancel jobs
    #[command(subcommand)]
    Job(JobCommand),
    /// List the checkpoints of a job (in progress, completed and failed)
    Checkpoints {
        /// Job id
        id: String,
    },
    /// Take, inspect and dispose of savepoints
    #[command(subcommand)]
    Savepoint(SavepointCommand),
    /// Show the registered task managers and their slots
    Cluster,
    /// List the operator kinds the cluster's task managers offer: role, config fields, states and output columns
    Kinds {
        /// Show only this kind
        kind: Option<String>,
    },
    /// Plan Flink SQL scripts without running them
    #[command(subcommand)]
    Sql(SqlCommand),
    /// Run a job manager and task managers on this machine until Ctrl-C or SIGTERM
    Local(LocalArgs),
    /// Ask a process's gRPC health service (its health_bind) whether it serves: exit 0 if so, 1 if not
    Health {
        /// The health service's address
        #[arg(value_name = "HOST:PORT", default_value = "127.0.0.1:6129")]
        address: String,
        /// The service asked about: empty for the process, weir.ready for its readiness
        #[arg(long, default_value = "")]
        service: String,
    },
}

/// `weir job …`
#[derive(Subcommand, Debug)]
pub enum JobCommand {
    /// Submit a job spec (YAML or JSON) or a Flink SQL script (a file ending in .sql) and print the job's id
    Submit(SubmitArgs),
    /// List all jobs
    List,
    /// Show one job
    Status {
        /// Job id
        id: String,
    },
    /// Cancel a job (without a savepoint) and show its state
    Cancel {
        /// Job id
        id: String,
    },
    /// Stop a job with a savepoint and print the savepoint's URL; the job ends FINISHED
    Stop(StopArgs),
    /// Delete the record of a job that has ended (FINISHED, CANCELED or FAILED); its checkpoints are kept
    /// unless --delete-checkpoints, its savepoints always
    Delete {
        /// Job id
        id: String,
        /// Also delete the job's checkpoints (<checkpoint store>/<job id>/)
        #[arg(long)]
        delete_checkpoints: bool,
    },
}

/// `weir job stop`
#[derive(Args, Debug, Clone)]
pub struct StopArgs {
    /// Job id
    pub id: String,
    /// Take a savepoint (required: a stop always takes one), in DIR if given
    /// [default: the job manager's --savepoint-dir]
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "", required = true)]
    pub savepoint: Option<String>,
    /// End the input first (sources finish, end-of-input results such as keyed-count's are emitted), then
    /// take the savepoint; without it sources stop where they are
    #[arg(long)]
    pub drain: bool,
    /// Savepoint format: `native` (the backend's files, fast) or `canonical` (restorable into either backend)
    #[arg(long, value_name = "FORMAT", default_value = "native", value_parser = parse_savepoint_format)]
    pub format: SavepointFormat,
    /// Seconds to wait for the savepoint
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout: u64,
}

/// `weir sql …`
#[derive(Subcommand, Debug)]
pub enum SqlCommand {
    /// Print the operator graph a SQL script plans into: each operator's uid, kind, input, parallelism and
    /// config (`--output json`: the job spec)
    Explain {
        /// The SQL script (SET, CREATE TABLE, CREATE VIEW, one INSERT INTO … SELECT)
        #[arg(value_name = "FILE.sql")]
        file: PathBuf,
        /// Default parallelism of the job's operators, as for `job submit`
        #[arg(long, short = 'p', value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        parallelism: Option<u32>,
    },
}

/// `weir savepoint …`
#[derive(Subcommand, Debug)]
pub enum SavepointCommand {
    /// Take a savepoint of a running job and print its URL
    Trigger {
        /// Job id
        id: String,
        /// Directory URL to create the savepoint in [default: the job manager's --savepoint-dir]
        #[arg(value_name = "DIR")]
        dir: Option<String>,
        /// Savepoint format: `native` (the backend's files, fast) or `canonical` (restorable into either backend)
        #[arg(long, value_name = "FORMAT", default_value = "native", value_parser = parse_savepoint_format)]
        format: SavepointFormat,
        /// Seconds to wait for the savepoint
        #[arg(long, value_name = "SECS", default_value_t = 600)]
        timeout: u64,
    },
    /// Show what a savepoint or retained checkpoint holds: operators, states, key groups, elements
    Inspect {
        /// URL of the savepoint's (or checkpoint's) directory
        url: String,
    },
    /// Check, before restoring, what a savepoint's state becomes in a job spec: per operator and state
    /// RESTORED, DROPPED, INCOMPATIBLE or NEW (exit 1 if a submission would be refused)
    Check {
        /// URL of the savepoint's (or checkpoint's) directory
        url: String,
        /// Job spec file, YAML or JSON, or a SQL script (FILE.sql)
        #[arg(value_name = "SPEC")]
        spec: PathBuf,
        /// Default parallelism of the job's operators, as for `job submit`
        #[arg(long, short = 'p', value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        parallelism: Option<u32>,
        /// Check as a submission with --allow-non-restored-state would be (dropped state is then accepted)
        #[arg(long)]
        allow_non_restored_state: bool,
    },
    /// Delete a savepoint
    Dispose {
        /// URL of the savepoint's directory
        url: String,
    },
}

/// `weir job submit`
#[derive(Args, Debug, Clone)]
pub struct SubmitArgs {
    /// Job spec file, YAML or JSON, or a SQL script (FILE.sql)
    #[arg(value_name = "SPEC")]
    pub spec: PathBuf,
    /// Default parallelism of the job's operators, overriding the spec's `parallelism`
    /// (operators with their own `parallelism` keep it)
    #[arg(long, short = 'p', value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub parallelism: Option<u32>,
    /// Wait until the job ends, showing its progress on stderr; exit 0 only if it FINISHED
    #[arg(long)]
    pub wait: bool,
    /// Start the job's state from this savepoint or retained checkpoint (URL of its directory); operators
    /// may have new parallelisms
    #[arg(long, value_name = "URL")]
    pub from_savepoint: Option<String>,
    /// With --from-savepoint: drop the state of operators the job no longer has (or whose kind or state
    /// signature changed) instead of refusing
    #[arg(long)]
    pub allow_non_restored_state: bool,
    /// With --from-savepoint: `no-claim` (the savepoint is never changed; the first checkpoint is full) or
    /// `claim` (the job owns and eventually deletes it)
    #[arg(long, value_name = "MODE", default_value = "no-claim", value_parser = parse_restore_mode)]
    pub restore_mode: RestoreMode,
}

/// `weir local`
#[derive(Args, Debug, Clone)]
pub struct LocalArgs {
    /// Number of job managers to start (more than one needs --ha etcd)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobmanagers: u32,
    /// High availability: none, or etcd (starts an etcd under DIR/etcd; the job managers elect a leader)
    #[arg(long, value_name = "MODE", default_value = "none")]
    pub ha: String,
    /// The etcd binary for --ha etcd [default: etcd on PATH, as Debian's etcd-server installs it]
    #[arg(long, value_name = "PATH")]
    pub etcd_bin: Option<PathBuf>,
    /// Number of task managers to start
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub taskmanagers: u32,
    /// Task slots per task manager
    #[arg(long, value_name = "S", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub slots: u32,
    /// Directory for the cluster's state: DIR/jobmanager, DIR/tm-<i>, DIR/checkpoints, DIR/logs and
    /// DIR/cluster.json (addresses and pids); created if missing
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Address the job manager binds to (port 0 picks a free one)
    #[arg(long, value_name = "HOST:PORT", default_value = DEFAULT_LOCAL_BIND)]
    pub bind: String,
    /// Checkpoint store URL (`file:///…`, `s3://bucket/prefix`) [default: file://DIR/checkpoints]
    #[arg(long, value_name = "URL")]
    pub checkpoint_store: Option<String>,
    /// Write each process's stderr to DIR/logs/<name>.log (jobmanager.log, taskmanager-<i>.log) instead of
    /// this terminal
    #[arg(long)]
    pub logs_to_files: bool,
    /// The weir-jobmanager binary [default: next to this executable, else on PATH]
    #[arg(long, value_name = "PATH")]
    pub jobmanager_bin: Option<PathBuf>,
    /// The weir-taskmanager binary, e.g. one built with your own operators
    /// [default: next to this executable, else on PATH]
    #[arg(long, value_name = "PATH")]
    pub taskmanager_bin: Option<PathBuf>,
    /// Seconds to wait for each process to listen and for all task managers to register
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub startup_timeout: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("weir").chain(args.iter().copied()))
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn submit_with_options() {
        let cli = parse(&["job", "submit", "job.yaml", "--parallelism", "4", "--wait"]).unwrap();
        match cli.command {
            Command::Job(JobCommand::Submit(s)) => {
                assert_eq!(s.spec, PathBuf::from("job.yaml"));
                assert_eq!(s.parallelism, Some(4));
                assert!(s.wait);
            }
            other => panic!("{other:?}"),
        }
        let cli = parse(&["job", "submit", "-p", "2", "job.yaml"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Job(JobCommand::Submit(SubmitArgs { parallelism: Some(2), wait: false, .. }))
        ));
    }

    #[test]
    fn submit_rejects_bad_parallelism_and_missing_spec() {
        assert!(parse(&["job", "submit", "job.yaml", "--parallelism", "0"]).is_err());
        assert!(parse(&["job", "submit", "job.yaml", "--parallelism", "x"]).is_err());
        assert!(parse(&["job", "submit"]).is_err());
    }

    #[test]
    fn global_options_go_anywhere() {
        let cli = parse(&["checkpoints", "abc", "--output", "json", "--jobmanager", "http://h:1"]).unwrap();
        assert_eq!(cli.global.output, Some(OutputFormat::Json));
        assert_eq!(cli.global.jobmanager.as_deref(), Some("http://h:1"));
        assert!(matches!(cli.command, Command::Checkpoints { ref id } if id == "abc"));

        let cli = parse(&["--output", "text", "--rpc-timeout", "3", "job", "list"]).unwrap();
        assert_eq!(cli.global.output, Some(OutputFormat::Text));
        assert_eq!(cli.global.rpc_timeout, Some(3));
        assert!(matches!(cli.command, Command::Job(JobCommand::List)));

        assert!(parse(&["job", "list", "--output", "yaml"]).is_err());
        assert!(parse(&["job", "list", "--rpc-timeout", "0"]).is_err());
    }

    #[test]
    fn job_subcommands() {
        assert!(matches!(parse(&["job", "status", "j1"]).unwrap().command,
                         Command::Job(JobCommand::Status { ref id }) if id == "j1"));
        assert!(matches!(parse(&["job", "cancel", "j1"]).unwrap().command,
                         Command::Job(JobCommand::Cancel { ref id }) if id == "j1"));
        assert!(parse(&["job", "status"]).is_err());
        assert!(parse(&["job", "frobnicate"]).is_err());
        assert!(matches!(parse(&["cluster"]).unwrap().command, Command::Cluster));
        assert!(matches!(parse(&["kinds"]).unwrap().command, Command::Kinds { kind: None }));
        assert!(
            matches!(parse(&["kinds", "datagen"]).unwrap().command, Command::Kinds { kind: Some(k) } if k == "datagen")
        );
    }

    #[test]
    fn local_defaults_and_options() {
        let cli = parse(&["local", "--dir", "/tmp/x"]).unwrap();
        let Command::Local(l) = cli.command else { panic!() };
        assert_eq!((l.taskmanagers, l.slots), (1, 1));
        assert_eq!(l.bind, DEFAULT_LOCAL_BIND);
        assert_eq!(l.checkpoint_store, None);
        assert!(!l.logs_to_files);
        assert_eq!(l.startup_timeout, 30);

        let cli = parse(&[
            "local",
            "--taskmanagers",
            "3",
            "--slots",
            "2",
            "--dir",
            "d",
            "--bind",
            "127.0.0.1:0",
            "--checkpoint-store",
            "s3://b/p",
            "--logs-to-files",
            "--taskmanager-bin",
            "/opt/my-tm",
        ])
        .unwrap();
        let Command::Local(l) = cli.command else { panic!() };
        assert_eq!((l.taskmanagers, l.slots), (3, 2));
        assert_eq!(l.bind, "127.0.0.1:0");
        assert_eq!(l.checkpoint_store.as_deref(), Some("s3://b/p"));
        assert!(l.logs_to_files);
        assert_eq!(l.taskmanager_bin, Some(PathBuf::from("/opt/my-tm")));

        assert!(parse(&["local"]).is_err(), "--dir is required");
        assert!(parse(&["local", "--dir", "d", "--slots", "0"]).is_err());
    }

    #[test]
    fn help_documents_every_option() {
        let mut cmd = Cli::command();
        cmd.build();
        let help = cmd.find_subcommand_mut("local").unwrap().render_long_help().to_string();
        for opt in [
            "--taskmanagers",
            "--slots",
            "--dir",
            "--bind",
            "--checkpoint-store",
            "--logs-to-files",
            "--jobmanager",
            "--output",
        ] {
            assert!(help.contains(opt), "{opt} missing from:\n{help}");
        }
    }
}
