//! What the tools (`tools/fairway-lab`) and the integration tests share to
//! drive real `fairway serve` processes. Behind the `test-util` feature:
//! the service build does not carry it.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Starts `command` (a `fairway serve` with the caller's arguments and
/// environment), its log going to `log`, and waits until it prints the
/// address it listens at; returns the process and that address. A process
/// that prints anything else first, or nothing, is killed, and the error
/// says what it printed (its log says why).
pub fn spawn_server(command: &mut Command, log: File) -> io::Result<(Child, String)> {
    spawn_server_with_console(command, log).map(|(child, address, _)| (child, address))
}

/// [`spawn_server`], and the console's URL when the server printed one
/// (it prints it in the same write as its address).
pub fn spawn_server_with_console(command: &mut Command, log: File) -> io::Result<(Child, String, Option<String>)> {
    let mut child = command.env("NO_COLOR", "1").stdout(Stdio::piped()).stderr(log).spawn()?;
    let mut line = String::new();
    let mut console = None;
    let read = match child.stdout.take() {
        Some(stdout) => {
            let mut reader = BufReader::new(stdout);
            let read = reader.read_line(&mut line);
            let rest = String::from_utf8_lossy(reader.buffer()).into_owned();
            console = rest.lines().next().and_then(|l| l.strip_prefix("console on ")).map(str::to_owned);
            read
        }
        None => Err(io::Error::other("no stdout")),
    };
    match (read, line.trim().strip_prefix("listening on ")) {
        (Ok(_), Some(addr)) => Ok((child, addr.to_owned(), console)),
        (read, _) => {
            let _ = child.kill();
            let _ = child.wait();
            let printed = match read {
                Ok(_) => format!("{line:?}"),
                Err(error) => format!("nothing readable ({error})"),
            };
            Err(io::Error::other(format!(
                "fairway serve did not start: it printed {printed} instead of `listening on ADDRESS`"
            )))
        }
    }
}

/// Blocks until this thread holds an exclusive lock on the file at `path`
/// (created if missing), and returns it: the lock lasts until the file is
/// dropped. Test binaries that cargo may run at once (and threads of one
/// binary) take turns this way at a resource they share, such as the test
/// Cassandra cluster of three nodes.
pub fn take_turn(path: &Path) -> io::Result<File> {
    let file = File::options().create(true).truncate(false).write(true).open(path)?;
    file.lock()?;
    Ok(file)
}
