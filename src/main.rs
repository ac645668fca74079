//! The fusebox command line (see `fusebox::cli`).

/// mimalloc: the agent loop and the replay allocate many small, short-lived
/// objects across threads, where it is markedly faster than the system one.
#[global_allocator]
static GLOBAL: fusebox::alloc::Mimalloc = fusebox::alloc::Mimalloc;

fn main() {
    std::process::exit(fusebox::cli::main());
}
