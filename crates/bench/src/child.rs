//! A child process a benchmark crashes on purpose (the recovery figures of `bench
//! engine` and `bench recovery`): its stdout read line by line on a thread of its own,
//! its stderr collected whole, and SIGKILL when the benchmark says so.
//!
//! Invariants:
//! - The child is killed and reaped when this is dropped, whatever happened (an error or
//!   a panic of the benchmark never leaves it writing).
//! - Both pipes are always drained, so a full pipe never blocks the child.
//! - A wait for a line is bounded by the caller's timeout.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct CrashChild {
    child: std::process::Child,
    lines: mpsc::Receiver<std::io::Result<String>>,
    errors: Option<JoinHandle<String>>,
    what: &'static str,
}

impl CrashChild {
    /// Starts `command` with piped stdout and stderr; `what` names it in errors.
    pub fn spawn(mut command: Command, what: &'static str) -> Result<CrashChild, String> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting the {what}: {e}"))?;
        let stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let (lines_tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Ok(CrashChild {
            child,
            lines,
            errors: Some(errors),
            what,
        })
    }

    /// The next line of the child's stdout; `None` once it is closed (the child ended).
    /// Lines the child printed before it was killed still come.
    pub fn next_line(&self, timeout: Duration) -> Result<Option<String>, String> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => line
                .map(Some)
                .map_err(|e| format!("reading the {}: {e}", self.what)),
            Err(mpsc::RecvTimeoutError::Disconnected) => Ok(None),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
                "the {} printed nothing for {} s",
                self.what,
                timeout.as_secs()
            )),
        }
    }

    pub fn kill(&mut self) -> Result<(), String> {
        self.child
            .kill()
            .map_err(|e| format!("killing the {}: {e}", self.what))
    }

    /// Reads the child's lines until its stdout closes: `mounted` marks the start of its
    /// work, every other line goes to `on_line`, which says when to kill the child (the
    /// first time it says so). Lines still in the pipe after the kill were printed before
    /// it and go to `on_line` too. Returns the nanoseconds from `mounted` to the kill; an
    /// error if the child ended without being killed.
    pub fn until_killed(
        mut self,
        stall: Duration,
        mut on_line: impl FnMut(&str) -> Result<bool, String>,
    ) -> Result<u64, String> {
        let (mut mounted_at, mut killed_after) = (None, None);
        while let Some(line) = self.next_line(stall)? {
            if line == "mounted" {
                mounted_at = Some(Instant::now());
                continue;
            }
            if on_line(&line)? && killed_after.is_none() {
                self.kill()?;
                killed_after =
                    Some(mounted_at.map_or(0, |t: Instant| t.elapsed().as_nanos() as u64));
            }
        }
        let what = self.what;
        let (status, errors) = self.finish()?;
        killed_after.ok_or_else(|| {
            format!(
                "the {what} ended before it was killed ({status}): {}",
                errors.trim()
            )
        })
    }

    /// Waits for the child; its exit status and everything it wrote to stderr.
    pub fn finish(mut self) -> Result<(ExitStatus, String), String> {
        let status = self
            .child
            .wait()
            .map_err(|e| format!("waiting for the {}: {e}", self.what))?;
        let errors = self
            .errors
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        Ok((status, errors))
    }
}

impl Drop for CrashChild {
    fn drop(&mut self) {
        // Already dead and reaped in the ordinary course; errors say only that.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
