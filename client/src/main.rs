//! `rowcall`: the command-line client. Parses flags and hands over to `cli::run`.

use clap::Parser as _;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let cli = rowcall_client::cli::Cli::parse();
    match rowcall_client::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("rowcall: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
