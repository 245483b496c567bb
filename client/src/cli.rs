//! The `rowcall` command line: one clap subcommand per operation, each a small function over
//! [`NodeClient`]. DESIGN §7.1 lists the full set (ask, contract, invoke, confirm, put, rm,
//! counts, cluster, import-mcp); each new one is a variant of [`Command`] and a function here.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

use crate::node::{ImportReport, NodeClient};
use crate::quality::{parse_queries, Quality, Scorecard, RECALL_DEPTH};

/// Misses printed by `eval` without `--misses`.
const MISSES_SHOWN: usize = 20;

/// rowcall: ask a rowcall node for capabilities and check its answers.
#[derive(Debug, Parser)]
#[command(name = "rowcall", version, about)]
pub struct Cli {
    /// The node to talk to (any member of the cluster).
    #[arg(
        long,
        global = true,
        env = "ROWCALL_NODE",
        default_value = "http://127.0.0.1:8080"
    )]
    pub node: String,
    #[command(subcommand)]
    pub command: Command,
}

/// The operations.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ranked candidates for a plain-language request.
    Ask {
        /// The request, e.g. `rowcall ask what time is it`.
        #[arg(required = true, num_args = 1..)]
        words: Vec<String>,
        /// How many candidates at most (the node caps it at 50).
        #[arg(long, default_value_t = 5)]
        limit: usize,
        /// Print the node's JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Resolver quality on a query set: top-1, recall@5 and MRR, and the misses.
    Eval {
        /// JSON lines of `{"q": "...", "gold": ["KEY", ...]}`.
        queries: PathBuf,
        /// Candidates asked for per query; MRR is computed to this depth.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Print every miss (otherwise the first 20).
        #[arg(long)]
        misses: bool,
    },
    /// Wrap an MCP server: one row per tool of its tools/list (run again to sync; tools that
    /// are gone are disabled). The node does the import, so the URL is as the node sees it.
    ImportMcp {
        /// The server's Streamable HTTP endpoint, e.g. `https://host/mcp`.
        url: String,
        /// Put before every new key (`gh` → `GH_SEARCH_ISSUES`).
        #[arg(long)]
        prefix: Option<String>,
        /// Category of the rows (default: the server's name).
        #[arg(long)]
        category: Option<String>,
        /// The node's admin key.
        #[arg(long, env = "ROWCALL_ADMIN_KEY", hide_env_values = true)]
        admin_key: String,
        /// Print the node's JSON answer instead of a summary.
        #[arg(long)]
        json: bool,
    },
}

/// Runs one command against the node.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let node = NodeClient::new(&cli.node)?;
    match cli.command {
        Command::Ask { words, limit, json } => ask(&node, &words.join(" "), limit, json).await,
        Command::Eval {
            queries,
            limit,
            misses,
        } => eval(&node, &queries, limit, misses).await,
        Command::ImportMcp {
            url,
            prefix,
            category,
            admin_key,
            json,
        } => {
            let report = node
                .import_mcp(&url, prefix.as_deref(), category.as_deref(), &admin_key)
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report.raw)?);
            } else {
                print!("{}", import_summary(&url, &report));
            }
            Ok(())
        }
    }
}

/// What `import-mcp` prints: counts, then one line per added, changed and removed key.
pub fn import_summary(url: &str, report: &ImportReport) -> String {
    let mut out = String::new();
    let server = report.server.as_deref().unwrap_or("the server");
    let _ = writeln!(out, "{} tools from {server} at {url}", report.tools);
    let _ = writeln!(
        out,
        "{} added, {} changed, {} removed, {} unchanged{}",
        report.added.len(),
        report.changed.len(),
        report.removed.len(),
        report.unchanged,
        report.version.map_or_else(
            || " (nothing written)".to_owned(),
            |v| format!(" (index {v})")
        )
    );
    for (label, keys) in [
        ("added", &report.added),
        ("changed", &report.changed),
        ("removed", &report.removed),
    ] {
        for key in keys {
            let note = if label == "removed" {
                "  (disabled)"
            } else {
                ""
            };
            let _ = writeln!(out, "  {label:<8} {key}{note}");
        }
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "  warning  {warning}");
    }
    out
}

async fn ask(node: &NodeClient, query: &str, limit: usize, json: bool) -> anyhow::Result<()> {
    let answer = node.ask(query, limit).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&answer.raw)?);
        return Ok(());
    }
    if answer.candidates.is_empty() {
        println!("no candidates for {query:?}");
        return Ok(());
    }
    let width = answer
        .candidates
        .iter()
        .map(|c| c.key.len())
        .max()
        .unwrap_or(0);
    for (rank, c) in answer.candidates.iter().enumerate() {
        println!(
            "{:>2}. {:<width$}  {:>7.3}  {}",
            rank + 1,
            c.key,
            c.score,
            c.what
        );
    }
    Ok(())
}

async fn eval(
    node: &NodeClient,
    path: &PathBuf,
    limit: usize,
    all_misses: bool,
) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let queries = parse_queries(&text).with_context(|| format!("in {}", path.display()))?;
    anyhow::ensure!(!queries.is_empty(), "{} has no queries", path.display());
    if limit < RECALL_DEPTH {
        eprintln!("note: --limit {limit} is below {RECALL_DEPTH}, so recall@{RECALL_DEPTH} only sees {limit} candidates");
    }
    let mut card = Scorecard::new(limit);
    for query in &queries {
        let answer = node
            .ask(&query.q, limit)
            .await
            .with_context(|| format!("asking {:?}", query.q))?;
        let ranked: Vec<String> = answer.candidates.into_iter().map(|c| c.key).collect();
        card.add(query, &ranked);
    }
    print!(
        "{}",
        report(&card, node.base(), all_misses.then_some(usize::MAX))
    );
    Ok(())
}

/// The text `eval` prints: the averages, then up to `shown` misses (default 20).
pub fn report(card: &Scorecard, node: &str, shown: Option<usize>) -> String {
    let Quality {
        queries,
        top1,
        recall_at_5,
        mrr,
        depth,
    } = card.summary();
    let mut out = String::new();
    let _ = writeln!(out, "node      {node}");
    let _ = writeln!(out, "queries   {queries}");
    let _ = writeln!(out, "top-1     {top1:.3}");
    let _ = writeln!(out, "recall@5  {recall_at_5:.3}");
    let _ = writeln!(out, "MRR@{depth:<4}  {mrr:.3}");
    let misses = card.misses();
    if misses.is_empty() {
        return out;
    }
    let shown = shown.unwrap_or(MISSES_SHOWN).min(misses.len());
    let _ = writeln!(out, "\nmisses ({shown} of {} shown):", misses.len());
    for miss in &misses[..shown] {
        let gold_at = match miss.gold_rank {
            Some(rank) => format!("at rank {rank}"),
            None => format!("not in the top {depth}"),
        };
        let _ = writeln!(out, "- {}", miss.q);
        let _ = writeln!(
            out,
            "    want {} ({gold_at}); first: {}",
            miss.gold.join(", "),
            miss.first.as_deref().unwrap_or("nothing")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quality::GoldQuery;

    #[test]
    fn report_lists_averages_and_misses() {
        let mut card = Scorecard::new(10);
        let query = |q: &str| GoldQuery {
            q: q.into(),
            gold: vec!["A".into()],
        };
        card.add(&query("hit"), &["A".into()]);
        card.add(&query("late"), &["B".into(), "A".into()]);
        card.add(&query("none"), &[]);
        let text = report(&card, "http://n", None);
        assert!(text.contains("top-1     0.333"), "{text}");
        assert!(text.contains("misses (2 of 2 shown)"), "{text}");
        assert!(text.contains("want A (at rank 2); first: B"), "{text}");
        assert!(
            text.contains("want A (not in the top 10); first: nothing"),
            "{text}"
        );
        let one = report(&card, "http://n", Some(1));
        assert!(
            one.contains("misses (1 of 2 shown)") && !one.contains("- none"),
            "{one}"
        );
    }

    #[test]
    fn import_summary_lists_the_difference() {
        let report = ImportReport {
            server: Some("docs".into()),
            tools: 2,
            added: vec!["NEW".into()],
            removed: vec!["OLD".into()],
            unchanged: 1,
            version: Some(9),
            ..ImportReport::default()
        };
        let text = import_summary("http://h/mcp", &report);
        assert!(
            text.contains("1 added, 0 changed, 1 removed, 1 unchanged (index 9)"),
            "{text}"
        );
        assert!(text.contains("removed  OLD  (disabled)"), "{text}");
    }

    #[test]
    fn command_line_parses() {
        let cli = Cli::try_parse_from([
            "rowcall",
            "eval",
            "q.jsonl",
            "--node",
            "http://x:1",
            "--misses",
        ])
        .unwrap();
        assert_eq!(cli.node, "http://x:1");
        assert!(matches!(
            cli.command,
            Command::Eval {
                limit: 10,
                misses: true,
                ..
            }
        ));
        let cli = Cli::try_parse_from([
            "rowcall",
            "import-mcp",
            "http://h/mcp",
            "--prefix",
            "gh",
            "--admin-key",
            "k",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Command::ImportMcp { ref prefix, ref admin_key, .. }
                if prefix.as_deref() == Some("gh") && admin_key == "k"
        ));
        let cli = Cli::try_parse_from(["rowcall", "ask", "what", "time"]).unwrap();
        assert!(
            matches!(cli.command, Command::Ask { ref words, limit: 5, .. } if words.len() == 2)
        );
    }
}
