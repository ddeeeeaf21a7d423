use clap::Parser;
use oncehook::config::LogFormat;
use tracing_subscriber::EnvFilter;

/// See `oncehook::ops::allocator`.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    oncehook::ops::allocator::tune();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("starting the tokio runtime")
        .block_on(run())
}

async fn run() -> std::process::ExitCode {
    let cli = oncehook::cli::Cli::parse();
    // The log format is a setting; a configuration that does not load is reported by the
    // command itself, in text.
    let format = cli
        .common
        .settings(None)
        .map(|s| s.log.format)
        .unwrap_or(LogFormat::Text);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn")),
        )
        .with_writer(std::io::stderr);
    match format {
        // One JSON object per line for log shippers; field values are JSON strings, so a
        // newline or escape inside one cannot forge a line.
        LogFormat::Json => builder.json().with_current_span(true).init(),
        // Colour codes only for a terminal: log files and collectors get plain text.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    match oncehook::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // Drift is the check's answer, not a failure to run it (`oncehook verify`).
        Err(error) if error.is::<oncehook::verify::DriftFound>() => {
            eprintln!("{error}");
            std::process::ExitCode::from(oncehook::verify::DriftFound::EXIT_STATUS)
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
