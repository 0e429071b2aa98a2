//! Prints the CustomResourceDefinitions of the failover controller as YAML.
//!
//! ```text
//! cargo run --bin crd-gen                          # the FailoverPolicy and FailoverGroup CRDs on stdout
//! cargo run --bin crd-gen -- --with-traffic-split  # also the SMI TrafficSplit CRD
//! cargo run --bin crd-gen -- --out-dir DIR               # one file per CRD
//! cargo run --bin crd-gen -- --chart charts/failover-controller --api-reference docs/api-reference.md
//! ```

use std::{fs, path::PathBuf};

mod api_reference;

use anyhow::Context;
use clap::Parser;
use failover_core::crd;

/// Prints the FailoverPolicy and FailoverGroup CRDs (and optionally the SMI TrafficSplit CRD) as
/// YAML.
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

    /// Regenerate the chart's generated files in this chart directory: `crds/` and the optional
    /// TrafficSplit CRD template.
    #[arg(long)]
    chart: Option<PathBuf>,

    /// Write the API reference (Markdown, from the CRD's descriptions) to this file.
    #[arg(long)]
    api_reference: Option<PathBuf>,
}

fn write(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.chart.is_some() || args.api_reference.is_some() {
        if let Some(chart) = &args.chart {
            write(
                &chart.join("crds/failoverpolicies.failover.dev.yaml"),
                &crd::failover_policy_yaml()?,
            )?;
            write(
                &chart.join("crds/failovergroups.failover.dev.yaml"),
                &crd::failover_group_yaml()?,
            )?;
            write(
                &chart.join("templates/trafficsplit-crd.yaml"),
                &crd::traffic_split_chart_template()?,
            )?;
        }
        if let Some(path) = &args.api_reference {
            write(path, &api_reference::markdown())?;
        }
        return Ok(());
    }
    let mut documents = vec![
        (
            "failoverpolicies.failover.dev.yaml",
            crd::failover_policy_yaml()?,
        ),
        (
            "failovergroups.failover.dev.yaml",
            crd::failover_group_yaml()?,
        ),
    ];
    if args.with_traffic_split {
        documents.push((
            "trafficsplits.split.smi-spec.io.yaml",
            crd::traffic_split_yaml()?,
        ));
    }
    match args.out_dir {
        Some(dir) => {
            for (file, yaml) in documents {
                write(&dir.join(file), &yaml)?;
            }
        }
        None => {
            let all: Vec<String> = documents.into_iter().map(|(_, yaml)| yaml).collect();
            print!("{}", all.join("---\n"));
        }
    }
    Ok(())
}
