//! The guard: a small process between `fairway worker` and each command it
//! runs, so that no command outlives the worker.
//!
//! The worker starts every command through `fairway __worker-guard PID --
//! COMMAND…` in a process group of its own (the guard leads it):
//! - a Ctrl-C in the worker's terminal reaches the worker alone, which then
//!   decides what becomes of the commands (docs/scheduler.md);
//! - the worker stops a command and everything it started with one
//!   `killpg(SIGKILL)` (a timeout, a lost lease, a second signal);
//! - when the worker dies, even by SIGKILL, the kernel sends the guard
//!   SIGTERM (`PR_SET_PDEATHSIG`), and the guard kills its whole group: the
//!   task is delivered again after its lease, never run twice at once by a
//!   leftover command.
//!
//! When the command exits, the guard kills what it left running in the group
//! (a process it put in the background, say): nothing of a task outlives it,
//! and the worker's pipes from the command close.
//!
//! The guard exits with the command's status (128 + N for a command killed
//! by signal N), or 127 when the command cannot be started, 126 when it is
//! not executable, as a shell does, with the reason on stderr.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitCode;

/// The hidden first argument that makes `fairway` a guard.
pub(crate) const GUARD_ARG: &str = "__worker-guard";

/// The guard for `command`, in a new process group, ready to spawn.
pub(super) fn command(command: &[String]) -> std::io::Result<tokio::process::Command> {
    let mut guard = tokio::process::Command::new(std::env::current_exe()?);
    guard.arg(GUARD_ARG).arg(std::process::id().to_string()).arg("--").args(command);
    // Its own group, led by the guard: see the module doc. `PR_SET_PDEATHSIG`
    // follows the thread that spawns the guard; the worker spawns from the
    // runtime's worker threads, which live as long as the worker does.
    guard.process_group(0);
    Ok(guard)
}

/// Stops a guard's command and everything it started.
pub(super) fn kill_group(guard_pid: u32) {
    // SAFETY: killpg has no memory effects; the guard is unreaped while
    // we call it, so its group id cannot name another group.
    unsafe {
        libc::killpg(guard_pid as libc::pid_t, libc::SIGKILL);
    }
}

/// `fairway __worker-guard PID -- COMMAND…`: runs as the guard of a worker
/// whose process id is PID.
pub(crate) fn run(args: &[OsString]) -> ExitCode {
    let (parent, command) = match args {
        [parent, dashes, command @ ..] if dashes == "--" && !command.is_empty() => (parent, command),
        _ => {
            eprintln!("error: {GUARD_ARG} is started by `fairway worker`, not by hand");
            return ExitCode::from(2);
        }
    };
    let parent: libc::pid_t = parent.to_str().and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: the handler only calls kill(2), which is async-signal-safe;
    // prctl and getppid have no memory effects.
    unsafe {
        libc::signal(libc::SIGTERM, kill_own_group as *const () as libc::sighandler_t);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
        // The worker may have died before the prctl took effect.
        if libc::getppid() != parent {
            kill_own_group(libc::SIGTERM);
        }
    }
    let ran = std::process::Command::new(&command[0]).args(&command[1..]).status();
    kill_the_rest_of_the_group();
    match ran {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => ExitCode::from(code as u8),
            (None, Some(signal)) => ExitCode::from(128u8.saturating_add(signal as u8)),
            (None, None) => ExitCode::FAILURE,
        },
        Err(error) => {
            eprintln!("cannot run {}: {error}", command[0].to_string_lossy());
            let not_found = error.kind() == std::io::ErrorKind::NotFound;
            ExitCode::from(if not_found { 127 } else { 126 })
        }
    }
}

/// Kills every live process of the guard's group but the guard.
fn kill_the_rest_of_the_group() {
    let guard = std::process::id() as libc::pid_t;
    // A process may start another while the others are killed: a few passes.
    for _ in 0..10 {
        let others: Vec<libc::pid_t> = live_members(guard).filter(|&pid| pid != guard).collect();
        if others.is_empty() {
            return;
        }
        for pid in others {
            // SAFETY: kill has no memory effects.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// The processes of group `group` that are not zombies, from /proc.
fn live_members(group: libc::pid_t) -> impl Iterator<Item = libc::pid_t> {
    let entries = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    entries.filter_map(move |entry| {
        let pid: libc::pid_t = entry.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
        let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
        let state = fields.next()?;
        let pgrp: libc::pid_t = fields.nth(1)?.parse().ok()?;
        (pgrp == group && state != "Z" && state != "X").then_some(pid)
    })
}

extern "C" fn kill_own_group(_signal: libc::c_int) {
    // SAFETY: kill(2) is async-signal-safe; 0 names the caller's own group.
    unsafe {
        libc::kill(0, libc::SIGKILL);
    }
}
