//! The `fairway` command: runs a server or talks to one. The tools (bench,
//! chaos, simulate, demo) are `tools/fairway-lab`.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
