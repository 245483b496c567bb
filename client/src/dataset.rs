//! Where evaluation and benchmark data comes from: the project's fixture catalogue in the
//! repository (`data/`), or the larger public development data kept outside it and named
//! explicitly by `ROWCALL_PUBLIC_DATA`.
//!
//! The public data is never looked for at a guessed path: a clone of the repository does not
//! have it, and a benchmark that quietly fell back to "skipped" would report nothing while
//! looking green. So an unset variable means the fixture, and a variable naming something that
//! does not exist is an error.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::quality::{parse_queries, GoldQuery};

/// Environment variable naming the folder of the public development data (the files listed
/// in [`DataSet::public`]).
pub const PUBLIC_DATA_ENV: &str = "ROWCALL_PUBLIC_DATA";

/// Why a data set could not be found or read.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A data file that was asked for explicitly is not there.
    #[error("{path} does not exist ({PUBLIC_DATA_ENV} must name the folder of the public development data)")]
    Missing {
        /// The path that was given or derived from the variable.
        path: PathBuf,
    },
    /// A data file exists but could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A line of a JSON-lines file is not what it should be.
    #[error("{path} line {line}: {source}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was wrong with it.
        #[source]
        source: serde_json::Error,
    },
}

/// A catalogue with a query set over it, as files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataSet {
    /// Short name for report headings.
    pub name: &'static str,
    /// JSON lines of rows (`POST /api/directory` bodies); the queries are about these.
    pub rows: PathBuf,
    /// JSON lines of `{"q", "gold"}` over [`DataSet::rows`].
    pub queries: PathBuf,
    /// More rows with no queries of their own, for building larger catalogues.
    pub more_rows: Vec<PathBuf>,
}

impl DataSet {
    /// The fixture catalogue in the repository (`data/`, 303 rows, 300 queries).
    pub fn fixture() -> Self {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data");
        DataSet {
            name: "fixture",
            rows: dir.join("fixture.rows.jsonl"),
            queries: dir.join("fixture.queries.jsonl"),
            more_rows: Vec::new(),
        }
    }

    /// The public development data in `dir`: seal rows and dev queries, plus the livemcp
    /// rows. Every file must exist.
    pub fn public(dir: &Path) -> Result<Self, DataError> {
        let set = DataSet {
            name: "public (seal + livemcp)",
            rows: dir.join("seal.rows.jsonl"),
            queries: dir.join("seal.dev-queries.jsonl"),
            more_rows: vec![dir.join("livemcp.rows.jsonl")],
        };
        let missing = [&set.rows, &set.queries]
            .into_iter()
            .chain(&set.more_rows)
            .find(|f| !f.is_file())
            .cloned();
        match missing {
            Some(path) => Err(DataError::Missing { path }),
            None => Ok(set),
        }
    }

    /// The public data when `ROWCALL_PUBLIC_DATA` is set (an error if it names nothing
    /// usable), otherwise the fixture.
    pub fn from_env() -> Result<Self, DataError> {
        Self::choose(std::env::var_os(PUBLIC_DATA_ENV).map(PathBuf::from))
    }

    /// The public data in `dir` if given (an empty value counts as not given), otherwise
    /// the fixture.
    pub fn choose(dir: Option<PathBuf>) -> Result<Self, DataError> {
        match dir.filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) if !dir.is_dir() => Err(DataError::Missing { path: dir }),
            Some(dir) => Self::public(&dir),
            None => Ok(Self::fixture()),
        }
    }

    /// The rows the queries are about, as JSON values.
    pub fn read_rows(&self) -> Result<Vec<Value>, DataError> {
        read_json_lines(&self.rows)
    }

    /// The query set.
    pub fn read_queries(&self) -> Result<Vec<GoldQuery>, DataError> {
        let text = read_text(&self.queries)?;
        parse_queries(&text).map_err(|e| DataError::Line {
            path: self.queries.clone(),
            line: e.line,
            source: e.source,
        })
    }

    /// [`DataSet::more_rows`], all files together, as JSON values.
    pub fn read_more_rows(&self) -> Result<Vec<Value>, DataError> {
        let mut rows = Vec::new();
        for path in &self.more_rows {
            rows.extend(read_json_lines(path)?);
        }
        Ok(rows)
    }
}

fn read_text(path: &Path) -> Result<String, DataError> {
    std::fs::read_to_string(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => DataError::Missing {
            path: path.to_owned(),
        },
        _ => DataError::Read {
            path: path.to_owned(),
            source,
        },
    })
}

/// One JSON value per non-blank line.
pub fn read_json_lines(path: &Path) -> Result<Vec<Value>, DataError> {
    let text = read_text(path)?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|source| DataError::Line {
                path: path.to_owned(),
                line: i + 1,
                source,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_folder_means_the_fixture_and_the_fixture_is_complete() {
        let set = DataSet::choose(None).unwrap();
        assert_eq!(set, DataSet::fixture());
        assert_eq!(DataSet::choose(Some(PathBuf::new())).unwrap(), set);
        let rows = set.read_rows().unwrap();
        let queries = set.read_queries().unwrap();
        assert_eq!((rows.len(), queries.len()), (303, 300));
        // Every gold key is a row of the fixture, so no query is unanswerable by design.
        let keys: std::collections::HashSet<&str> =
            rows.iter().filter_map(|r| r["key"].as_str()).collect();
        assert_eq!(keys.len(), rows.len(), "fixture keys are unique");
        for q in &queries {
            assert!(!q.gold.is_empty(), "{q:?}");
            for gold in &q.gold {
                assert!(keys.contains(gold.as_str()), "{q:?}");
            }
        }
    }

    #[test]
    fn a_folder_that_does_not_exist_is_an_error_not_a_skip() {
        let nowhere = std::env::temp_dir().join("rowcall-no-such-public-data");
        let err = DataSet::choose(Some(nowhere.clone())).unwrap_err();
        assert!(matches!(&err, DataError::Missing { path } if *path == nowhere));
        assert!(err.to_string().contains(PUBLIC_DATA_ENV), "{err}");
    }

    #[test]
    fn a_folder_without_every_file_is_an_error_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("rowcall-partial-data-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("seal.rows.jsonl"), "{}\n").unwrap();
        std::fs::write(dir.join("seal.dev-queries.jsonl"), "").unwrap();
        let err = DataSet::choose(Some(dir.clone())).unwrap_err();
        std::fs::write(dir.join("livemcp.rows.jsonl"), "{}\n").unwrap();
        let complete = DataSet::choose(Some(dir.clone()));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            matches!(&err, DataError::Missing { path } if path.ends_with("livemcp.rows.jsonl")),
            "{err}"
        );
        assert_eq!(complete.unwrap().rows, dir.join("seal.rows.jsonl"));
    }

    #[test]
    fn a_bad_line_names_its_file_and_line() {
        let dir = std::env::temp_dir().join(format!("rowcall-bad-line-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rows.jsonl");
        std::fs::write(&path, "{\"key\": \"A\"}\n\n{not json\n").unwrap();
        let err = read_json_lines(&path).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(err, DataError::Line { line: 3, .. }), "{err}");
    }
}
