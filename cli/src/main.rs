//! The `weir` binary: parse the command line, run the command, map the outcome to an exit code.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = weir_cli::args::Cli::parse();
    weir_common::service::telemetry::init(false);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(weir_cli::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            // One line, so that scripts can pick out `error: …` from stderr.
            let message: Vec<String> =
                e.to_string().lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
            eprintln!("error: {}", message.join(" "));
            e.exit_code()
        }
    }
}
