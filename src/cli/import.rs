//! `fusebox import`: traffic recorded elsewhere written as a fusebox
//! traffic log, and the same conversion for `replay --format`.

use anyhow::{Context, Result};
use std::io::Write as _;
use std::path::PathBuf;

/// What a traffic file is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// fusebox's traffic log (JSONL, format v1).
    #[default]
    Fusebox,
    /// OTLP/JSON traces, as the OpenTelemetry Collector's file exporter writes them.
    Otlp,
}

/// `fusebox import`'s options.
#[derive(clap::Args)]
pub struct ImportArgs {
    /// What the files are.
    #[arg(long, value_enum)]
    pub format: LogFormat,
    /// The files to read, in order.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The traffic log to write.
    #[arg(short, long, value_name = "LOG")]
    pub output: PathBuf,
}

/// Writes the traffic of `files` to `out` as a traffic log; says what it read.
fn convert(files: &[PathBuf], out: &mut impl std::io::Write, name: &str) -> Result<()> {
    let imported = crate::otel::import::read(files)?;
    for r in imported.records {
        writeln!(out, "{}", crate::traffic::log::line_of(r)).with_context(|| format!("cannot write {name}"))?;
    }
    out.flush().with_context(|| format!("cannot write {name}"))?;
    let shown: Vec<_> = files.iter().map(|f| f.display().to_string()).collect();
    let _ = writeln!(
        std::io::stderr(),
        "{}: {} requests from GenAI spans, {} other spans skipped",
        shown.join(" "),
        imported.requests,
        imported.skipped
    );
    Ok(())
}

/// Runs `fusebox import`.
pub fn import(args: ImportArgs) -> Result<()> {
    match args.format {
        LogFormat::Fusebox => {
            anyhow::bail!("--format fusebox: the files are traffic logs already; replay them as they are")
        }
        LogFormat::Otlp => {
            let name = args.output.display().to_string();
            let file = std::fs::File::create(&args.output).with_context(|| format!("cannot write {name}"))?;
            convert(&args.files, &mut std::io::BufWriter::new(file), &name)
        }
    }
}

/// For `replay --format otlp`: the files converted into a traffic log in a
/// temporary file, which `logs` then names (kept until the value is dropped).
pub fn in_place(logs: &mut Vec<PathBuf>, format: LogFormat) -> Result<Option<tempfile::TempPath>> {
    if format == LogFormat::Fusebox {
        return Ok(None);
    }
    let mut tmp = tempfile::Builder::new()
        .prefix("fusebox-import-")
        .suffix(".jsonl")
        .tempfile()
        .context("cannot make a temporary traffic log")?;
    let name = tmp.path().display().to_string();
    convert(logs, tmp.as_file_mut(), &name)?;
    let path = tmp.into_temp_path();
    *logs = vec![path.to_path_buf()];
    Ok(Some(path))
}
