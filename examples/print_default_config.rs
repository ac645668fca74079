//! Prints the built-in default configuration as TOML: a starting point for
//! your own config file (`cargo run --example print_default_config > fusebox.toml`).

fn main() {
    match toml::to_string_pretty(&fusebox::config::Config::default()) {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
