//! `crashfs MOUNTPOINT [--mode strict|lenient] [--capacity BYTES]`: mounts a crashfs (see the
//! library's docs) for a test driven from outside Rust. SIGUSR1 performs a crash (unmount, drop
//! what was not durable, mount again) and prints `crashed ...` on stdout when the mount is back;
//! SIGINT or SIGTERM unmounts and exits. `mounted` on stdout means the filesystem is ready.
//! `--capacity` makes the volume fill up (ENOSPC) as a small tmpfs would.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use crashfs::{CrashFs, Mode};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Parser)]
#[command(about = "In-memory FUSE filesystem that loses what was not fsynced, on SIGUSR1")]
struct Args {
    /// An existing empty directory.
    mountpoint: PathBuf,
    /// strict: a name is durable once its directory is fsynced; lenient: namespace operations
    /// are durable at once (as LazyFS). File data always needs fsync.
    #[arg(long, value_enum, default_value = "strict")]
    mode: ModeArg,
    /// Bytes of file data the volume holds before writes fail with ENOSPC (whole 4 KiB
    /// blocks); no limit without it.
    #[arg(long)]
    capacity: Option<u64>,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    Strict,
    Lenient,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(why) = CrashFs::available() {
        eprintln!("crashfs: FUSE unavailable: {why}");
        return ExitCode::from(2);
    }
    let mode = match args.mode {
        ModeArg::Strict => Mode::Strict,
        ModeArg::Lenient => Mode::Lenient,
    };
    let mounted = match args.capacity {
        Some(bytes) => CrashFs::mount_with_capacity(&args.mountpoint, mode, bytes),
        None => CrashFs::mount(&args.mountpoint, mode),
    };
    let mut fs = match mounted {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("crashfs: mounting {}: {e}", args.mountpoint.display());
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("crashfs: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result: std::io::Result<()> = runtime.block_on(async {
        let mut usr1 = signal(SignalKind::user_defined1())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        say("mounted");
        loop {
            tokio::select! {
                _ = usr1.recv() => {
                    let lost = fs.unsynced();
                    match fs.crash() {
                        Ok(()) => say(&format!(
                            "crashed: lost {} unsynced bytes in {} files, {} namespace changes",
                            lost.data_bytes, lost.files, lost.namespace_changes
                        )),
                        Err(e) => eprintln!("{e}"),
                    }
                }
                _ = term.recv() => return Ok(()),
                _ = int.recv() => return Ok(()),
            }
        }
    });
    // Unmounts.
    drop(fs);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crashfs: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One line on stdout, flushed: a driving script waits for it.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
