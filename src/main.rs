//! The `fairway` command: runs a server, talks to one, or runs a demo.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
