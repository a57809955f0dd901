//! `stowq`: the SteadQ subcommands on an `s3://bucket/prefix` queue.
fn main() {
    std::process::exit(stowq_cli::main());
}
mod stowq_cli {
    pub fn main() -> i32 {
        0
    }
}
