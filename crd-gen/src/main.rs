//! Prints the CustomResourceDefinitions of the failover controller as YAML.
//!
//! ```text
//! cargo run --bin crd-gen                          # the FailoverPolicy CRD on stdout
//! cargo run --bin crd-gen -- --with-traffic-split  # also the SMI TrafficSplit CRD
//! cargo run --bin crd-gen -- --out-dir charts/failover-controller/crds
//! ```

use std::{fs, path::PathBuf};

use anyhow::Context;
use clap::Parser;
use failover::crd;

/// Prints the FailoverPolicy CRD (and optionally the SMI TrafficSplit CRD) as YAML.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Also emit the SMI TrafficSplit CRD (split.smi-spec.io, v1alpha1 and v1alpha2), for
    /// clusters without a mesh's SMI extension.
    #[arg(long)]
    with_traffic_split: bool,

    /// Write one file per CRD into this directory instead of printing to stdout.
    #[arg(long)]
    out_dir: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut documents = vec![(
        "failoverpolicies.failover.dev.yaml",
        crd::failover_policy_yaml()?,
    )];
    if args.with_traffic_split {
        documents.push((
            "trafficsplits.split.smi-spec.io.yaml",
            crd::traffic_split_yaml()?,
        ));
    }
    match args.out_dir {
        Some(dir) => {
            fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for (file, yaml) in documents {
                let path = dir.join(file);
                fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
        None => {
            let all: Vec<String> = documents.into_iter().map(|(_, yaml)| yaml).collect();
            print!("{}", all.join("---\n"));
        }
    }
    Ok(())
}
