//! The load generator as a command, for the demo on a real node: requests at a steady rate to
//! one URL on loopback (the proxy), for at most `--seconds`; one line per answer on standard
//! output, as it comes: `<ms since start> <status> <backend>` (`-` when none answered).
//!
//!     cargo run --example load -- --url http://127.0.0.1:8000/cgi-bin/name --rate 50 --seconds 120

// The tests' load generator; the command uses part of it.
#[allow(dead_code)]
#[path = "../../tests/it/support/traffic.rs"]
mod traffic;

use std::{io::Write, time::Duration};

/// Steady HTTP load to loopback, one line per answer.
#[derive(clap::Parser, Debug)]
#[command(about = "Steady HTTP load to a URL on loopback; prints each answer as it comes")]
struct Args {
    /// The URL (plain HTTP, loopback only).
    #[arg(long)]
    url: String,
    /// Requests per second.
    #[arg(long, default_value_t = 50)]
    rate: u32,
    /// The longest the load runs, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The Host header to send.
    #[arg(long)]
    host: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = <Args as clap::Parser>::parse();
    let mut load = traffic::Load::new(&args.url, args.rate, Duration::from_secs(args.seconds));
    load.host = args.host;
    let running = match load.start() {
        Ok(running) => running,
        Err(e) => {
            eprintln!("load: {e}");
            std::process::exit(2);
        }
    };
    let mut printed = 0;
    let mut out = std::io::stdout();
    loop {
        let done = running.finished();
        let answers = running.answers();
        for a in &answers[printed..] {
            let at = a.sent.duration_since(running.started).as_millis();
            let backend = a.backend.as_deref().unwrap_or("-");
            if writeln!(out, "{at} {} {backend}", a.status).is_err() {
                return;
            }
        }
        printed = answers.len();
        let _ = out.flush();
        if done {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
