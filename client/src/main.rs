//! `rowcall`: the command-line client. Everything is in [`rowcall_client::cli`].

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    rowcall_client::cli::main().await
}
