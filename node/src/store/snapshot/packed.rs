//! Snapshot files compressed at rest: a build writes its lines through zstd, and everything
//! that reads a snapshot file reads its lines, compressed or not.
//!
//! A snapshot holds every kept receipt again as a JSON line, so uncompressed it takes about
//! as many bytes per invocation as the receipt's own file does; the lines repeat field
//! names and most values, and zstd packs them several times smaller for little CPU, once
//! per build (see the performance chapter). Only the bytes at rest change:
//!
//! - A file is compressed when it starts with zstd's frame magic; a JSON line never does
//!   (it starts with `{`). A file this node receives from a leader, a file of an older
//!   version, and a backup's lines are plain and stay readable as they are.
//! - A leader sends a follower the file as it is when the follower says it installs packed
//!   files (`packed_snapshots` in its hello), else the file's lines ([`Unpack`] behind
//!   [`super::file::SnapshotFile`]'s reads), so a follower of an older version installs
//!   them. A backup is the same lines as before.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use zstd::stream::raw::Operation as _;

/// The first bytes of a zstd frame.
const MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// zstd's level for snapshot files: its fastest, with the least memory (a window of half a
/// megabyte). On a soak's snapshot it packed as tightly as the default level 3 (41.1 MB of
/// lines into 5.7 MB, against 6.2 MB) in three quarters of the CPU.
const LEVEL: i32 = 1;
/// Buffer between the line writer and the compressor, and for reading compressed bytes.
const BUFFER: usize = 64 * 1024;

/// Whether a file that starts with `head` is compressed.
pub(crate) fn is_packed(head: &[u8]) -> bool {
    head.starts_with(&MAGIC)
}

/// Where a build writes a snapshot's lines: through zstd into the file.
pub(crate) struct Packer(BufWriter<zstd::stream::write::Encoder<'static, File>>);

impl Packer {
    /// Compresses what is written into `file`.
    pub(crate) fn new(file: File) -> io::Result<Self> {
        let encoder = zstd::stream::write::Encoder::new(file, LEVEL)?;
        Ok(Self(BufWriter::with_capacity(BUFFER, encoder)))
    }

    /// Writes the rest and the frame's end; returns the file (not yet synced).
    pub(crate) fn finish(self) -> io::Result<File> {
        self.0.into_inner().map_err(|e| e.into_error())?.finish()
    }
}

impl Write for Packer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// The lines of the snapshot file `file` (at its start), compressed or not.
pub fn lines(mut file: File) -> io::Result<Box<dyn BufRead + Send>> {
    let mut head = Vec::with_capacity(MAGIC.len());
    (&mut file)
        .take(MAGIC.len() as u64)
        .read_to_end(&mut head)?;
    file.seek(SeekFrom::Start(0))?;
    Ok(if is_packed(&head) {
        Box::new(BufReader::with_capacity(
            BUFFER,
            zstd::stream::read::Decoder::new(file)?,
        ))
    } else {
        Box::new(BufReader::with_capacity(BUFFER, file))
    })
}

/// Reads a snapshot file's lines without blocking: the file's own bytes when they are
/// plain, else what zstd unpacks from them. Decided by the file's first bytes.
pub(crate) struct Unpack {
    /// Bytes read from the file and not yet passed on (plain) or unpacked (compressed);
    /// allocated at the first read.
    input: Vec<u8>,
    start: usize,
    end: usize,
    /// The file has no more bytes.
    eof: bool,
    mode: Mode,
}

enum Mode {
    /// Fewer bytes read than the magic's length, and the file not at its end.
    Undecided,
    Plain,
    /// `frame_done`: the last step ended a frame (so the file may end there).
    Packed {
        decoder: Box<zstd::stream::raw::Decoder<'static>>,
        frame_done: bool,
    },
}

impl Default for Unpack {
    fn default() -> Self {
        Self {
            input: Vec::new(),
            start: 0,
            end: 0,
            eof: false,
            mode: Mode::Undecided,
        }
    }
}

impl Unpack {
    /// Passes the file's bytes on as they are, compressed or not: what a leader sends a
    /// follower that installs packed files.
    pub(crate) fn stored() -> Self {
        Self {
            mode: Mode::Plain,
            ..Self::default()
        }
    }

    /// Reads more of `file` into the input buffer (moving what is left to its start).
    fn fill<R: AsyncRead + Unpin>(
        &mut self,
        file: &mut R,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        if self.input.is_empty() {
            self.input = vec![0; BUFFER];
        }
        if self.start > 0 {
            self.input.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let mut read = ReadBuf::new(&mut self.input[self.end..]);
        ready!(Pin::new(file).poll_read(cx, &mut read))?;
        let n = read.filled().len();
        self.end += n;
        self.eof = n == 0;
        Poll::Ready(Ok(()))
    }

    /// The next of the file's lines' bytes into `buf` (none at the end), read from `file`.
    pub(crate) fn poll_read<R: AsyncRead + Unpin>(
        &mut self,
        file: &mut R,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            match &mut self.mode {
                Mode::Undecided => {
                    if self.end - self.start >= MAGIC.len() || self.eof {
                        self.mode = if is_packed(&self.input[self.start..self.end]) {
                            Mode::Packed {
                                decoder: Box::new(zstd::stream::raw::Decoder::new()?),
                                frame_done: false,
                            }
                        } else {
                            Mode::Plain
                        };
                    } else {
                        ready!(self.fill(file, cx))?;
                    }
                }
                Mode::Plain if self.start < self.end => {
                    let n = buf.remaining().min(self.end - self.start);
                    buf.put_slice(&self.input[self.start..self.start + n]);
                    self.start += n;
                    return Poll::Ready(Ok(()));
                }
                Mode::Plain => return Pin::new(file).poll_read(cx, buf),
                Mode::Packed {
                    decoder,
                    frame_done,
                } => {
                    // Unpack what is buffered first: zstd may hold output from earlier input.
                    let status = decoder.run_on_buffers(
                        &self.input[self.start..self.end],
                        buf.initialize_unfilled(),
                    )?;
                    self.start += status.bytes_read;
                    buf.advance(status.bytes_written);
                    // A step that moved nothing says nothing of the frame: after a frame's
                    // end zstd hints at the next frame's header, not 0.
                    if status.bytes_read > 0 || status.bytes_written > 0 {
                        *frame_done = status.remaining == 0;
                    }
                    if status.bytes_written > 0 {
                        return Poll::Ready(Ok(()));
                    }
                    if self.start < self.end {
                        if status.bytes_read == 0 {
                            return Poll::Ready(Err(io::Error::other(
                                "zstd took none of the compressed snapshot's bytes",
                            )));
                        }
                        // Input taken into zstd's window without output yet: go on.
                        continue;
                    }
                    if self.eof {
                        return Poll::Ready(if *frame_done {
                            Ok(())
                        } else {
                            Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the compressed snapshot file ends inside a frame",
                            ))
                        });
                    }
                    ready!(self.fill(file, cx))?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines like a snapshot's: repetitive JSON.
    fn sample(lines: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..lines {
            writeln!(
                out,
                r#"{{"receipt":{{"id":"inv_{i:010}","key":"TIME_NOW","status":"ok","n":{}}}}}"#,
                i * 7919 % 1000
            )
            .unwrap();
        }
        out
    }

    fn packed(dir: &std::path::Path, bytes: &[u8]) -> std::path::PathBuf {
        let path = dir.join("packed");
        let mut packer = Packer::new(File::create(&path).unwrap()).unwrap();
        packer.write_all(bytes).unwrap();
        packer.finish().unwrap().sync_all().unwrap();
        path
    }

    /// Reads `path` through [`lines`], whole.
    fn read_lines(path: &std::path::Path) -> io::Result<Vec<u8>> {
        let mut read = Vec::new();
        lines(File::open(path)?)?.read_to_end(&mut read)?;
        Ok(read)
    }

    /// Reads `path` through [`Unpack`], `chunk` bytes asked at a time.
    async fn unpack(path: &std::path::Path, chunk: usize) -> io::Result<Vec<u8>> {
        let mut file = tokio::fs::File::open(path).await?;
        let mut unpack = Unpack::default();
        let mut out = Vec::new();
        loop {
            let mut space = vec![0; chunk];
            let mut buf = ReadBuf::new(&mut space);
            std::future::poll_fn(|cx| unpack.poll_read(&mut file, cx, &mut buf)).await?;
            if buf.filled().is_empty() {
                return Ok(out);
            }
            out.extend_from_slice(buf.filled());
        }
    }

    #[tokio::test]
    async fn a_packed_file_reads_back_as_its_lines_and_takes_a_fraction_of_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let plain = sample(20_000);
        let path = packed(dir.path(), &plain);
        let on_disk = std::fs::metadata(&path).unwrap().len();
        assert!(
            on_disk * 4 < plain.len() as u64,
            "{on_disk} of {}",
            plain.len()
        );

        assert!(read_lines(&path).unwrap() == plain, "sync read differs");
        for chunk in [1, 7, 4096, 1 << 20] {
            assert!(
                unpack(&path, chunk).await.unwrap() == plain,
                "chunk {chunk}"
            );
        }
    }

    #[tokio::test]
    async fn a_packed_file_many_times_the_read_buffer_reads_back_whole() {
        // Lines of pseudo-random hex pack poorly: the compressed file is far larger than the
        // buffer its bytes are read through, which must be refilled many times.
        let mut plain = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..40_000 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            writeln!(
                plain,
                r#"{{"receipt":{{"id":"inv_{i:010}","sha":"{x:016x}{:016x}"}}}}"#,
                x.rotate_left(17)
            )
            .unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let path = packed(dir.path(), &plain);
        let on_disk = std::fs::metadata(&path).unwrap().len();
        assert!(on_disk > 8 * BUFFER as u64, "{on_disk} bytes packed");
        for chunk in [4096, 1 << 20] {
            assert!(
                unpack(&path, chunk).await.unwrap() == plain,
                "chunk {chunk}"
            );
        }
    }

    #[tokio::test]
    async fn a_plain_file_reads_as_it_is_however_short() {
        let dir = tempfile::tempdir().unwrap();
        for plain in [Vec::new(), b"{".to_vec(), b"{\"he".to_vec(), sample(3_000)] {
            let path = dir.path().join("plain");
            std::fs::write(&path, &plain).unwrap();
            let read = read_lines(&path).unwrap();
            assert!(read == plain, "sync read of {} bytes", plain.len());
            for chunk in [1, 3, 64 * 1024] {
                assert!(
                    unpack(&path, chunk).await.unwrap() == plain,
                    "chunk {chunk}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_packed_file_cut_short_is_an_error_not_a_shorter_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let path = packed(dir.path(), &sample(5_000));
        let len = std::fs::metadata(&path).unwrap().len();
        for keep in [MAGIC.len() as u64, len / 2, len - 1] {
            let cut = dir.path().join("cut");
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&cut, &bytes[..keep as usize]).unwrap();
            let error = unpack(&cut, 4096).await.unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof, "kept {keep}");
            let sync = read_lines(&cut);
            assert!(sync.is_err(), "sync read of a file cut at {keep}");
        }
    }
}
