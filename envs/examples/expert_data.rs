//! Writes the scripted expert's trajectories as chat JSON lines (one task per line, see
//! `sage_envs::expert::TrajectoryRecord`), keeping only scenarios whose tasks all
//! passed (the paper's rejection sampling).
//!
//! Run: `cargo run --release -p sage-envs --example expert_data -- OUT.jsonl [SPLIT] [VARIANTS] [MODE]`
//! with SPLIT one of train, iid, dev, test-normal, test-challenge (default train),
//! VARIANTS the number of style variants per scenario (default 1), and MODE skills,
//! direct or both (default skills).

use std::error::Error;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::Arc;

use sage_envs::environment::{EnvConfig, WorldEnv};
use sage_envs::expert::{Expert, ExpertConfig, ExpertMode};
use sage_envs::scenarios::{Catalog, CatalogConfig, Split};

fn main() -> Result<(), Box<dyn Error>> {
    // Agent code runs in worker processes started from this program.
    sage_envs::sandbox::serve_worker_if_asked();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = args
        .first()
        .ok_or("usage: expert_data OUT.jsonl [SPLIT] [VARIANTS] [MODE]")?;
    let split_name = args.get(1).map_or("train", String::as_str);
    let split: Split = split_name.parse()?;
    let variants: u64 = args.get(2).map_or(Ok(1), |v| v.parse())?;
    let modes = match args.get(3).map_or("skills", String::as_str) {
        "skills" => vec![ExpertMode::Skills],
        "direct" => vec![ExpertMode::Direct],
        "both" => vec![ExpertMode::Skills, ExpertMode::Direct],
        other => return Err(format!("unknown mode {other:?}").into()),
    };
    let catalog = Arc::new(Catalog::build_splits(&CatalogConfig::default(), &[split])?);
    let mut env = WorldEnv::new(catalog.clone(), EnvConfig::default())?;
    let mut file = BufWriter::new(File::create(out)?);
    let (mut kept, mut dropped) = (0, 0);
    for mode in modes {
        for variant in 0..variants {
            let expert = Expert::new(ExpertConfig {
                variant,
                ..ExpertConfig::new(mode)
            });
            for scenario in catalog.scenarios() {
                let run = expert.solve(&mut env, scenario)?;
                if !run.passed() {
                    dropped += 1;
                    continue;
                }
                kept += 1;
                for record in run.records() {
                    writeln!(file, "{}", record.to_json_line())?;
                }
            }
        }
    }
    file.flush()?;
    println!("wrote {kept} scenarios to {out} ({dropped} dropped by rejection sampling)");
    Ok(())
}
