//! The snapshot file format: one JSON value per line, written and read one line at a time,
//! so neither side ever holds more than one receipt of it.
//!
//! ```text
//! {"header":{"format":2,"share_secret":…,"share_previous":…,"revoked":[…],"alarms":[…]}}
//! {"row":{…}}            one per row
//! {"receipt":{…}}        one per receipt, in id order (sled's key order)
//! {"request":{…}}        one per remembered request id, in index order
//! {"leaf":{…}}           one per leaf of the receipt log, in leaf order (format 3)
//! {"end":{"rows":…,"receipts":…,"requests":…,"leaves":…}}
//! ```
//!
//! Format 3 added the receipt log (its header and leaves); a format 2 file is still read,
//! and the log is then rebuilt from its receipts.
//!
//! The closing line carries the counts, so a file cut short, or one with lines lost, is
//! refused rather than installed as a smaller state; receipts out of id order are refused
//! too (an install merges them with the stored ones in that order).

use std::io::{self, BufRead, Write};

use serde::{Deserialize, Serialize};

use super::Revocation;
use crate::catalogue::row::Row;
use crate::model::alarm::StorageAlarm;
use crate::model::receipt::Receipt;
use crate::model::share::ShareSecret;
use crate::store::checkpoint::LogHeader;
use crate::store::requests::Record;

/// The format version this node writes and reads.
pub const FORMAT: u32 = 3;
/// The oldest format this node still reads.
const OLDEST: u32 = 2;

/// What a snapshot holds besides rows, receipts and request records: the share state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The format version ([`FORMAT`]).
    pub format: u32,
    /// The share-token secret, once one was applied.
    pub share_secret: Option<ShareSecret>,
    /// The secret a planned rotation replaced.
    pub share_previous: Option<ShareSecret>,
    /// Revoked share tokens.
    pub revoked: Vec<Revocation>,
    /// The receipt log at the cut (absent in format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogHeader>,
    /// The members' storage alarms at the cut (absent when none: an older build reads the
    /// header as before, and a file without them holds none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alarms: Vec<StorageAlarm>,
}

/// One leaf of the receipt log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafLine {
    pub index: u64,
    pub id: String,
    /// The leaf hash, hex.
    pub hash: String,
}

/// How many of each a complete file holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub rows: u64,
    pub receipts: u64,
    pub requests: u64,
    #[serde(default)]
    pub leaves: u64,
}

/// One line of a snapshot file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    Header(Header),
    Row(Row),
    Receipt(Receipt),
    Request(Record),
    Leaf(LeafLine),
    End(Counts),
}

/// A snapshot file that does not read back as one.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// Reading or writing the file failed.
    #[error("snapshot file: {0}")]
    Io(#[from] io::Error),
    /// A line is not JSON of the expected shape.
    #[error("snapshot file line {line}: {reason}")]
    Line {
        /// The line number (1-based).
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The file stops before its closing line, or its counts disagree with its lines.
    #[error("snapshot file is incomplete: {0}")]
    Incomplete(String),
}

/// Writes a snapshot file line by line.
pub struct Writer<W: Write> {
    out: W,
    counts: Counts,
}

impl<W: Write> Writer<W> {
    /// Starts a file with its header.
    pub fn new(mut out: W, header: &Header) -> Result<Self, FormatError> {
        write_line(&mut out, &LineRef::Header(header))?;
        Ok(Self {
            out,
            counts: Counts::default(),
        })
    }

    pub fn row(&mut self, row: &Row) -> Result<(), FormatError> {
        self.counts.rows += 1;
        write_line(&mut self.out, &LineRef::Row(row))
    }

    pub fn receipt(&mut self, receipt: &Receipt) -> Result<(), FormatError> {
        self.counts.receipts += 1;
        write_line(&mut self.out, &LineRef::Receipt(receipt))
    }

    /// A receipt already serialised as JSON (as sled stores it): copied, not re-encoded.
    pub fn receipt_json(&mut self, json: &[u8]) -> Result<(), FormatError> {
        self.counts.receipts += 1;
        self.out.write_all(b"{\"receipt\":")?;
        self.out.write_all(json)?;
        self.out.write_all(b"}\n")?;
        Ok(())
    }

    pub fn request(&mut self, record: &Record) -> Result<(), FormatError> {
        self.counts.requests += 1;
        write_line(&mut self.out, &LineRef::Request(record))
    }

    pub fn leaf(&mut self, leaf: &LeafLine) -> Result<(), FormatError> {
        self.counts.leaves += 1;
        write_line(&mut self.out, &LineRef::Leaf(leaf))
    }

    /// Writes the closing line and returns the writer.
    pub fn finish(mut self) -> Result<W, FormatError> {
        write_line(&mut self.out, &LineRef::End(self.counts))?;
        Ok(self.out)
    }
}

/// [`Line`] by reference, for writing without cloning.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum LineRef<'a> {
    Header(&'a Header),
    Row(&'a Row),
    Receipt(&'a Receipt),
    Request(&'a Record),
    Leaf(&'a LeafLine),
    End(Counts),
}

fn write_line(out: &mut impl Write, line: &LineRef<'_>) -> Result<(), FormatError> {
    serde_json::to_writer(&mut *out, line).map_err(io::Error::from)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// Reads a snapshot file line by line: the header first, then [`Reader::next`] until it
/// returns `None` after a closing line whose counts match.
pub struct Reader<R: BufRead> {
    input: R,
    buf: String,
    line: u64,
    counts: Counts,
    /// The id of the last receipt read: the next must sort after it.
    last_receipt: Option<String>,
    done: bool,
}

impl<R: BufRead> Reader<R> {
    /// Reads the header.
    pub fn new(input: R) -> Result<(Header, Self), FormatError> {
        let mut reader = Self {
            input,
            buf: String::new(),
            line: 0,
            counts: Counts::default(),
            last_receipt: None,
            done: false,
        };
        match reader.read()? {
            Some(Line::Header(header)) if (OLDEST..=FORMAT).contains(&header.format) => {
                Ok((header, reader))
            }
            Some(Line::Header(header)) => Err(reader.bad(format!(
                "format {} is not the format {FORMAT} this node reads",
                header.format
            ))),
            _ => Err(reader.bad("the first line is not a header".into())),
        }
    }

    /// The next row, receipt or request record; `None` once the closing line was read and
    /// its counts match what came before.
    pub fn next(&mut self) -> Result<Option<Line>, FormatError> {
        if self.done {
            return Ok(None);
        }
        let line = self.read()?.ok_or_else(|| {
            FormatError::Incomplete(format!("no closing line after line {}", self.line))
        })?;
        match &line {
            Line::Row(_) => self.counts.rows += 1,
            Line::Receipt(receipt) => {
                if self
                    .last_receipt
                    .as_ref()
                    .is_some_and(|last| *last >= receipt.id)
                {
                    return Err(self.bad(format!("receipt {} is out of id order", receipt.id)));
                }
                self.last_receipt = Some(receipt.id.clone());
                self.counts.receipts += 1;
            }
            Line::Request(_) => self.counts.requests += 1,
            Line::Leaf(_) => self.counts.leaves += 1,
            Line::Header(_) => return Err(self.bad("a second header".into())),
            Line::End(counts) => {
                if *counts != self.counts {
                    return Err(FormatError::Incomplete(format!(
                        "the closing line counts {counts:?}, the file holds {:?}",
                        self.counts
                    )));
                }
                self.done = true;
                return Ok(None);
            }
        }
        Ok(Some(line))
    }

    fn read(&mut self) -> Result<Option<Line>, FormatError> {
        self.buf.clear();
        if self.input.read_line(&mut self.buf)? == 0 {
            return Ok(None);
        }
        self.line += 1;
        serde_json::from_str(&self.buf)
            .map(Some)
            .map_err(|e| self.bad(e.to_string()))
    }

    fn bad(&self, reason: String) -> FormatError {
        FormatError::Line {
            line: self.line,
            reason,
        }
    }
}

/// Reads a whole snapshot file to its closing line, keeping nothing: whether it is one that
/// can be installed. Its header.
pub fn read_through<R: BufRead>(input: R) -> Result<Header, FormatError> {
    let (header, mut reader) = Reader::new(input)?;
    while reader.next()?.is_some() {}
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let header = Header {
            format: FORMAT,
            ..Header::default()
        };
        let mut writer = Writer::new(Vec::new(), &header).unwrap();
        writer.receipt(&Receipt::sample("inv_0000000001")).unwrap();
        let json = serde_json::to_vec(&Receipt::sample("inv_0000000002")).unwrap();
        writer.receipt_json(&json).unwrap();
        writer.finish().unwrap()
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<Line>, FormatError> {
        let (_, mut reader) = Reader::new(bytes)?;
        let mut lines = Vec::new();
        while let Some(line) = reader.next()? {
            lines.push(line);
        }
        Ok(lines)
    }

    #[test]
    fn a_file_reads_back_line_by_line() {
        let lines = read_all(&sample()).unwrap();
        let ids: Vec<String> = lines
            .into_iter()
            .filter_map(|l| match l {
                Line::Receipt(r) => Some(r.id),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["inv_0000000001", "inv_0000000002"]);
    }

    #[test]
    fn a_file_cut_short_or_missing_a_line_is_refused() {
        let bytes = sample();
        let text = String::from_utf8(bytes.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // Cut before the closing line.
        let cut = lines[..lines.len() - 1].join("\n") + "\n";
        assert!(matches!(
            read_all(cut.as_bytes()),
            Err(FormatError::Incomplete(_))
        ));
        // A receipt line lost.
        let lost = [lines[0], lines[2], lines[3]].join("\n") + "\n";
        assert!(matches!(
            read_all(lost.as_bytes()),
            Err(FormatError::Incomplete(_))
        ));
        // Cut in the middle of a line.
        assert!(matches!(
            read_all(&bytes[..bytes.len() - 10]),
            Err(FormatError::Line { .. })
        ));
        // Receipts out of id order.
        let swapped = [lines[0], lines[2], lines[1], lines[3]].join("\n") + "\n";
        let refused = read_through(swapped.as_bytes()).unwrap_err().to_string();
        assert!(refused.contains("out of id order"), "{refused}");
    }
}
