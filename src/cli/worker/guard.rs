//! The guard: a small process between `fairway worker` and each command it
//! runs, so that no command, nor anything it started, outlives its task or
//! the worker.
//!
//! The worker starts every command through `fairway __worker-guard PID --
//! COMMAND…`, the guard in a process group of its own and the command in
//! another:
//! - a Ctrl-C in the worker's terminal reaches the worker alone, which then
//!   decides what becomes of the commands (docs/scheduler.md);
//! - the worker stops a command and everything it started with a SIGTERM
//!   to the guard (a timeout, a lost lease, a second signal), which kills
//!   the command's group (SIGKILL) and exits;
//! - when the worker dies, even by SIGKILL, the kernel sends the guard the
//!   same SIGTERM (`PR_SET_PDEATHSIG`): the task is delivered again after
//!   its lease, never run twice at once by a leftover command;
//! - when the command exits, the guard kills what it left running in its
//!   group (a process put in the background, say), before it reaps the
//!   command, so that the group's id cannot name another group yet.
//!
//! The guard exits with the command's status (128 + N for a command killed
//! by signal N), or 127 when the command cannot be started, 126 when it is
//! not executable, as a shell does, with the reason on stderr.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::ExitCode;
use std::sync::atomic::{AtomicI32, Ordering};

/// The hidden first argument that makes `fairway` a guard.
pub(crate) const GUARD_ARG: &str = "__worker-guard";

/// The command's process group, once it runs (0 before).
static COMMAND_GROUP: AtomicI32 = AtomicI32::new(0);

/// The guard for `command`, in a new process group, ready to spawn.
pub(super) fn command(command: &[String]) -> tokio::process::Command {
    // The running binary, even once its file is replaced (an upgrade).
    let mut guard = tokio::process::Command::new("/proc/self/exe");
    guard.arg0("fairway").arg(GUARD_ARG).arg(std::process::id().to_string()).arg("--").args(command);
    // Out of the worker's group, so that a terminal's Ctrl-C does not reach
    // it. `PR_SET_PDEATHSIG` follows the thread that spawns the guard; the
    // worker spawns from the runtime's worker threads, which live as long
    // as the worker does.
    guard.process_group(0);
    guard
}

/// Has a guard kill its command and everything the command started, and
/// exit. The caller then reaps the guard.
pub(super) fn stop(guard_pid: u32) {
    // SAFETY: kill has no memory effects; the guard is not reaped yet, so
    // its pid names no other process.
    unsafe {
        libc::kill(guard_pid as libc::pid_t, libc::SIGTERM);
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
    let mut sigterm = empty_signal_set();
    // SAFETY: the handler only calls functions that are async-signal-safe
    // (killpg, _exit) and reads an atomic; the signal set is initialised
    // before use; prctl and getppid have no memory effects.
    unsafe {
        libc::sigaddset(&mut sigterm, libc::SIGTERM);
        // Held until the command's group is known, so that the handler
        // never misses it. (The command starts with an empty mask.)
        libc::sigprocmask(libc::SIG_BLOCK, &sigterm, std::ptr::null_mut());
        libc::signal(libc::SIGTERM, on_sigterm as *const () as libc::sighandler_t);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
        // The worker may have died before the prctl took effect.
        if libc::getppid() != parent {
            return ExitCode::FAILURE;
        }
    }
    let spawned = std::process::Command::new(&command[0]).args(&command[1..]).process_group(0).spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            eprintln!("cannot run {}: {error}", command[0].to_string_lossy());
            let not_found = error.kind() == std::io::ErrorKind::NotFound;
            return ExitCode::from(if not_found { 127 } else { 126 });
        }
    };
    let group = child.id() as libc::pid_t;
    COMMAND_GROUP.store(group, Ordering::SeqCst);
    // SAFETY: as above; `info` is plain data the kernel fills.
    unsafe {
        libc::sigprocmask(libc::SIG_UNBLOCK, &sigterm, std::ptr::null_mut());
        // Wait for the command to end without reaping it, then kill what it
        // left in its group: the group's id is still the command's.
        let mut info: libc::siginfo_t = std::mem::zeroed();
        while libc::waitid(libc::P_PID, group as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) != 0
            && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
        {}
        libc::killpg(group, libc::SIGKILL);
    }
    // Once reaped, the command's pid may name another process.
    COMMAND_GROUP.store(0, Ordering::SeqCst);
    match child.wait() {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => ExitCode::from(code as u8),
            (None, Some(signal)) => ExitCode::from(128u8.saturating_add(signal as u8)),
            (None, None) => ExitCode::FAILURE,
        },
        Err(error) => {
            eprintln!("cannot wait for {}: {error}", command[0].to_string_lossy());
            ExitCode::FAILURE
        }
    }
}

fn empty_signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set it is given.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        set
    }
}

extern "C" fn on_sigterm(_signal: libc::c_int) {
    let group = COMMAND_GROUP.load(Ordering::SeqCst);
    // SAFETY: killpg, waitpid and _exit are async-signal-safe. The command
    // is reaped, so that it leaves no zombie behind where the worker is
    // process 1 of a container and reaps only its own children.
    unsafe {
        if group > 0 {
            libc::killpg(group, libc::SIGKILL);
            libc::waitpid(group, std::ptr::null_mut(), 0);
        }
        libc::_exit(128 + libc::SIGTERM);
    }
}
