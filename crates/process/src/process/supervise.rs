//! The one supervisor: every process ralph starts — a gate, an agent's CLI, git — runs
//! through [`ProcessSpec::supervise`].
//!
//! It starts the process, reads its output into the log and into a [`Listener`] (the
//! consumer's buffer; a [`LineListener`] gets stdout line by line), watches the clocks (the deadline, silence, the listener's
//! own), ends the process as the reason for ending asks (SIGINT, or SIGTERM then SIGKILL
//! after the grace), kills whatever it left behind, and reads what is still in the pipes
//! by the one [`Drain`] rule.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::{Instant, sleep, sleep_until};

use super::lines::{LineSplitter, Piece};
use super::{Drain, Exit, ProcessError, ProcessSpec, SupervisedChild, Termination};
use crate::files::capped::CappedLog;
use crate::process::StopToken;

/// The one read buffer of each stream: output is streamed through it, never collected whole.
const READ_CHUNK: usize = 64 * 1024;

/// From when on the main process's exit is watched while its output is still open. Before,
/// only the end of the output is: a run that ends within it is seen to end by its pipes
/// closing, which costs no exit check, no timer and no SIGCHLD wake-up per read.
const EXIT_WATCHED_AFTER: Duration = Duration::from_millis(200);

/// How often a stdout written to a file is looked at for growth.
const FILE_POLL: Duration = Duration::from_millis(200);

/// What a supervised process's output is for: the consumer's side of [`ProcessSpec::supervise`].
pub trait Listener {
    /// How the listener says a run ralph ended came to its end: the listener's own reasons
    /// (the context is full, the process lingers after its answer) and its words for the
    /// supervisor's clocks ([`stopped`](Self::stopped), [`past_deadline`](Self::past_deadline),
    /// [`silent`](Self::silent)). A run that ended by itself has no cut.
    type Cut: Clone;

    /// The stop token has stopped: the cut that says so.
    fn stopped(&mut self) -> Self::Cut;

    /// The deadline ([`Clocks::deadline`]) passed: the cut that says so.
    fn past_deadline(&mut self) -> Self::Cut;

    /// No output came for [`Clocks::idle`]: the cut that says so.
    fn silent(&mut self) -> Self::Cut;

    /// Bytes of stdout (of all output, when stdout and stderr are [merged](Streams::Merged)),
    /// in the order they were read. Returns a reason to end the run now, if there is one.
    fn stdout(&mut self, bytes: &[u8]) -> Option<Self::Cut>;

    /// Bytes of stderr.
    fn stderr(&mut self, _bytes: &[u8]) {}

    /// stdout has ended (or reading it has stopped): the time to take an unfinished last line.
    fn closed(&mut self) {}

    /// The run is ending: what is read from now on is what the pipes still held, and a cut
    /// no longer counts.
    fn ending(&mut self) {}

    /// The listener's own clock, asked after each read.
    fn clock(&self) -> OwnClock<Self::Cut> {
        OwnClock::default()
    }

    /// Whether `cut` asks the process to end by itself (SIGINT, then the grace) rather than
    /// be terminated.
    fn interrupts(&self, _cut: &Self::Cut) -> bool {
        false
    }
}

/// A [`Listener`] of stdout's lines: the supervisor splits them, in memory bounded by the
/// line cap ([`LineSplitter`]), and hands over each line, or each piece of a longer one.
pub trait LineListener {
    /// As [`Listener::Cut`].
    type Cut: Clone;

    /// As [`Listener::stopped`].
    fn stopped(&mut self) -> Self::Cut;

    /// As [`Listener::past_deadline`].
    fn past_deadline(&mut self) -> Self::Cut;

    /// As [`Listener::silent`].
    fn silent(&mut self) -> Self::Cut;

    /// One line of stdout, or a piece of a line longer than the cap. Returns a reason to
    /// end the run now, if there is one.
    fn line(&mut self, piece: Piece<'_>) -> Option<Self::Cut>;

    /// As [`Listener::stderr`].
    fn stderr(&mut self, _bytes: &[u8]) {}

    /// As [`Listener::ending`].
    fn ending(&mut self) {}

    /// As [`Listener::clock`].
    fn clock(&self) -> OwnClock<Self::Cut> {
        OwnClock::default()
    }

    /// As [`Listener::interrupts`].
    fn interrupts(&self, _cut: &Self::Cut) -> bool {
        false
    }
}

/// A [`LineListener`] with the splitter that feeds it: a [`Listener`].
#[allow(missing_debug_implementations)] // the splitter holds buffers, the listener anything
pub struct Lines<L> {
    splitter: LineSplitter,
    bytes: u64,
    /// What gets the lines.
    pub listener: L,
}

impl<L> Lines<L> {
    /// Lines of at most `max_line` bytes for `listener`; a longer one comes in pieces.
    pub fn new(max_line: usize, listener: L) -> Self {
        Lines {
            splitter: LineSplitter::new(max_line),
            bytes: 0,
            listener,
        }
    }

    /// The bytes of stdout split so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }
}

impl<L: LineListener> Listener for Lines<L> {
    type Cut = L::Cut;

    fn stopped(&mut self) -> L::Cut {
        self.listener.stopped()
    }

    fn past_deadline(&mut self) -> L::Cut {
        self.listener.past_deadline()
    }

    fn silent(&mut self) -> L::Cut {
        self.listener.silent()
    }

    /// The last cut the lines of these bytes call for.
    fn stdout(&mut self, bytes: &[u8]) -> Option<L::Cut> {
        self.bytes += bytes.len() as u64;
        self.splitter.push(bytes);
        let mut cut = None;
        while let Some(piece) = self.splitter.next() {
            cut = self.listener.line(piece).or(cut);
        }
        cut
    }

    fn stderr(&mut self, bytes: &[u8]) {
        self.listener.stderr(bytes);
    }

    fn closed(&mut self) {
        if let Some(piece) = self.splitter.rest() {
            let _ = self.listener.line(piece);
        }
    }

    fn ending(&mut self) {
        self.listener.ending();
    }

    fn clock(&self) -> OwnClock<L::Cut> {
        self.listener.clock()
    }

    fn interrupts(&self, cut: &L::Cut) -> bool {
        self.listener.interrupts(cut)
    }
}

/// A listener's own clock: when it cuts the run, and whether silence is being timed.
#[derive(Clone, Debug)]
pub struct OwnClock<C> {
    /// The run is cut at this time, for this reason.
    pub cut_at: Option<(Instant, C)>,
    /// Silence counts against [`Clocks::idle`] (it does not once an agent has answered).
    pub idle_counts: bool,
}

impl<C> Default for OwnClock<C> {
    fn default() -> Self {
        OwnClock {
            cut_at: None,
            idle_counts: true,
        }
    }
}

/// The clocks of one run besides the spec's stop token.
#[derive(Clone, Copy, Debug, Default)]
pub struct Clocks {
    /// The run is cut at this time.
    pub deadline: Option<Instant>,
    /// The run is cut after this long without output.
    pub idle: Option<Duration>,
    /// Once all output has closed, how long the process may take to exit before it is
    /// terminated; `None`: as long as the other clocks allow.
    pub exit_after_close: Option<Duration>,
    /// The run goes on until stdout closes, whenever the process exits: every line of it
    /// may cut the run (an exit seen first would leave the last lines to the drain, where
    /// cuts no longer count).
    pub read_to_close: bool,
}

/// Where the process's stdout and stderr go.
#[derive(Debug)]
pub enum Streams {
    /// Both on one pipe, which keeps their interleaving as written; all of it is stdout to
    /// the listener.
    Merged,
    /// Each on a pipe of its own.
    Separate,
    /// stdout to this file, read as it grows; stderr on a pipe. For a program that exits
    /// before a pipe has taken all it wrote (Node's `process.exit` drops what is still
    /// queued for a pipe, never for a file).
    StdoutToFile(PathBuf),
}

/// What [`ProcessSpec::supervise`] observed.
#[derive(Debug)]
pub struct Supervised<C> {
    /// How ralph ended the run, in the listener's words; `None`: it ended by itself (the
    /// main process exited, or closed its output and was then given
    /// [`Clocks::exit_after_close`] to exit).
    pub cut: Option<C>,
    /// How the main process ended, if it was seen to.
    pub exit: Option<Exit>,
    /// Processes left behind by the main one, killed after it ended.
    pub leaked: usize,
    pub duration: Duration,
    /// The first error writing the log, after which the log was dropped.
    pub log_error: Option<io::Error>,
    /// The first error reading the output, after which that stream counted as closed.
    pub read_error: Option<io::Error>,
}

impl ProcessSpec {
    /// Runs the process under supervision to its end, feeding its output to `listener`
    /// and to the spec's log.
    ///
    /// Dropping the future kills everything the run started.
    ///
    /// # Errors
    ///
    /// [`ProcessError::Cwd`] or [`ProcessError::Spawn`] when the process cannot be started,
    /// [`ProcessError::Log`] when the log cannot be opened, [`ProcessError::Io`] when its
    /// exit cannot be read (processes are killed before the error is returned).
    pub async fn supervise<L: Listener>(
        &self,
        streams: Streams,
        clocks: Clocks,
        listener: &mut L,
    ) -> Result<Supervised<L::Cut>, ProcessError> {
        let started = Instant::now();
        let (mut child, stdout, stderr) = self.launch(streams)?;
        // The log's file is made once the process has started, while it starts up on the
        // other core: making a file is the dearest step of a run's setup on some file
        // systems (ext4 without a journal scans for recently freed inodes), the process
        // needs no log to start, and its first output waits in the pipe. A log that cannot
        // be made ends the process: returning drops `child`, which kills its group.
        let log = match &self.log_path {
            Some(path) => Log::open(path)?,
            None => Log::none(),
        };
        let mut run = Running {
            stdout,
            stderr,
            log,
            read_error: None,
            last_output: started,
            closed_at: None,
        };
        let cut = run.watch(&mut child, &self.stop, clocks, listener).await;
        let interrupt = cut.as_ref().is_some_and(|cut| listener.interrupts(cut));
        listener.ending();
        let done = StopToken::new();
        let (ended, ()) = tokio::join!(
            async {
                let ended = end(&mut child, interrupt, self.grace).await;
                done.stop();
                ended
            },
            run.drain(listener, &done)
        );
        run.log.finish();
        let ended = ended?;
        Ok(Supervised {
            cut,
            exit: ended.exit,
            leaked: ended.leaked,
            duration: started.elapsed(),
            log_error: run.log.error,
            read_error: run.read_error,
        })
    }

    /// Starts the process with its output routed as `streams` says.
    fn launch(&self, streams: Streams) -> Result<(SupervisedChild, Source, Source), ProcessError> {
        let spawn_error = |source| ProcessError::Spawn {
            program: self.program_name(),
            source,
        };
        match streams {
            Streams::Merged => {
                let (reader, writer) = io::pipe().map_err(spawn_error)?;
                let stderr = writer.try_clone().map_err(spawn_error)?;
                let child = SupervisedChild::launch(self, writer.into(), stderr.into())?;
                // Should this fail, dropping `child` kills the process.
                match tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into()) {
                    Ok(reader) => Ok((child, Source::pipe(Some(reader)), Source::Closed)),
                    Err(source) => Err(child.io_error(source)),
                }
            }
            Streams::Separate => {
                let mut child = self.spawn()?;
                let (stdout, stderr) = (child.take_stdout(), child.take_stderr());
                Ok((child, Source::pipe(stdout), Source::pipe(stderr)))
            }
            Streams::StdoutToFile(path) => {
                let io = |source| ProcessError::Log {
                    path: path.clone(),
                    source,
                };
                // Its folder may be the log's, which is made beside the spawn, not before.
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    crate::files::own::create_own_dir(dir).map_err(io)?;
                }
                let file = std::fs::File::create(&path).map_err(io)?;
                let tail = std::fs::File::open(&path).map_err(io)?;
                let mut child = self.spawn_stdout_to(file)?;
                let stderr = Source::pipe(child.take_stderr());
                Ok((child, Source::File(tail), stderr))
            }
        }
    }
}

/// One stream of output as the supervisor reads it.
enum Source {
    Pipe(Pin<Box<dyn AsyncRead + Send>>),
    /// A file the process writes, read as it grows.
    File(std::fs::File),
    Closed,
}

impl Source {
    fn pipe(pipe: Option<impl AsyncRead + Send + 'static>) -> Source {
        pipe.map_or(Source::Closed, |pipe| Source::Pipe(Box::pin(pipe)))
    }

    fn is_open(&self) -> bool {
        !matches!(self, Source::Closed)
    }

    /// The next bytes, or 0 at the end. A file has no end while the process runs: it is
    /// read until it holds nothing more only once `ending`.
    async fn read(&mut self, buf: &mut [u8], ending: bool) -> io::Result<usize> {
        match self {
            Source::Pipe(pipe) => pipe.read(buf).await,
            // A local file's read lands in the page cache: no trip to the blocking pool.
            Source::File(file) => loop {
                let n = file.read(buf)?;
                if n > 0 || ending {
                    return Ok(n);
                }
                sleep(FILE_POLL).await;
            },
            Source::Closed => std::future::pending().await,
        }
    }
}

/// The run's log: its output, appended as it is read, its head and tail kept (a
/// [`CappedLog`]). Synchronous writes: a log is a local file whose writes land in the page
/// cache, and a trip to the blocking pool for each would cost more than the write.
struct Log {
    file: Option<CappedLog>,
    error: Option<io::Error>,
}

impl Log {
    /// No log: the output is read and passed on, not kept.
    fn none() -> Log {
        Log {
            file: None,
            error: None,
        }
    }

    #[allow(clippy::disallowed_methods)] // a run's log, not a state file
    fn open(path: &Path) -> Result<Log, ProcessError> {
        let io = |source| ProcessError::Log {
            path: path.to_owned(),
            source,
        };
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .read(true)
                .append(true)
                .open(path)
        };
        // The folder is nearly always there: made when it is not, rather than asked first.
        let file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    crate::files::own::create_own_dir(dir).map_err(io)?;
                }
                open()
            }
            opened => opened,
        }
        .and_then(CappedLog::new)
        .map_err(io)?;
        Ok(Log {
            file: Some(file),
            error: None,
        })
    }

    /// A log that cannot be written loses the transcript, not the run: the first error is
    /// kept and the log dropped.
    fn write(&mut self, bytes: &[u8]) {
        if let Some(file) = &mut self.file
            && let Err(err) = file.write_all(bytes)
        {
            self.error = Some(err);
            self.file = None;
        }
    }

    /// Cuts the log to its head and tail, once the output is all read.
    fn finish(&mut self) {
        if let Some(file) = &mut self.file
            && let Err(err) = file.finish()
        {
            self.error = Some(err);
            self.file = None;
        }
    }
}

/// The output side of a run: its streams, its log and what the clocks need.
struct Running {
    stdout: Source,
    stderr: Source,
    log: Log,
    read_error: Option<io::Error>,
    last_output: Instant,
    /// When the last open stream closed.
    closed_at: Option<Instant>,
}

/// Which stream a read came from.
#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

impl Running {
    /// Reads the output until a reason to end the run comes.
    async fn watch<L: Listener>(
        &mut self,
        child: &mut SupervisedChild,
        stop: &StopToken,
        clocks: Clocks,
        listener: &mut L,
    ) -> Option<L::Cut> {
        let mut out = vec![0; READ_CHUNK];
        let mut err = vec![0; READ_CHUNK / 8];
        let watch_exit_at = Instant::now() + EXIT_WATCHED_AFTER;
        let mut alarms = Alarms::new(clocks.deadline, watch_exit_at);
        loop {
            let exit_watched = if clocks.read_to_close {
                !self.stdout.is_open()
            } else {
                self.closed_at.is_some() || Instant::now() >= watch_exit_at
            };
            let own = listener.clock();
            alarms.idle.set(
                clocks
                    .idle
                    .filter(|_| own.idle_counts)
                    .and_then(|idle| self.last_output.checked_add(idle)),
            );
            alarms.exit_by.set(
                self.closed_at
                    .zip(clocks.exit_after_close)
                    .and_then(|(at, patience)| at.checked_add(patience)),
            );
            alarms.own.set(own.cut_at.as_ref().map(|(at, _)| *at));
            let (stream, read) = tokio::select! {
                // An exit that coincides with a clock is an exit.
                biased;
                _ = child.wait(), if exit_watched => return None,
                () = alarms.watch_exit.rings(), if !exit_watched && !clocks.read_to_close => continue,
                () = stop.stopped() => return Some(listener.stopped()),
                () = alarms.deadline.rings() => return Some(listener.past_deadline()),
                () = alarms.own.rings() => {
                    if let Some((_, cut)) = own.cut_at {
                        return Some(cut);
                    }
                    continue;
                }
                () = alarms.idle.rings() => return Some(listener.silent()),
                // Its output closed and it did not exit in time: it ended by itself, and
                // is terminated (see `end`).
                () = alarms.exit_by.rings() => return None,
                read = self.stdout.read(&mut out, false) => (Stream::Stdout, read),
                read = self.stderr.read(&mut err, false) => (Stream::Stderr, read),
            };
            let buf = match stream {
                Stream::Stdout => &out,
                Stream::Stderr => &err,
            };
            if let Some(cut) = self.take(stream, read, buf, listener) {
                return Some(cut);
            }
        }
    }

    /// Hands a read to the log and the listener; at the end of a stream, closes it.
    fn take<L: Listener>(
        &mut self,
        stream: Stream,
        read: io::Result<usize>,
        buf: &[u8],
        listener: &mut L,
    ) -> Option<L::Cut> {
        let n = match read {
            Ok(n) => n,
            Err(err) => {
                self.read_error.get_or_insert(err);
                0
            }
        };
        if n == 0 {
            self.close(stream, listener);
            return None;
        }
        let bytes = &buf[..n];
        self.last_output = Instant::now();
        self.log.write(bytes);
        match stream {
            Stream::Stdout => listener.stdout(bytes),
            Stream::Stderr => {
                listener.stderr(bytes);
                None
            }
        }
    }

    fn close<L: Listener>(&mut self, stream: Stream, listener: &mut L) {
        match stream {
            Stream::Stdout => {
                self.stdout = Source::Closed;
                listener.closed();
            }
            Stream::Stderr => self.stderr = Source::Closed,
        }
        if !self.stdout.is_open() && !self.stderr.is_open() {
            self.closed_at = Some(Instant::now());
        }
    }

    /// Reads what the streams still bring, to the listener (whose cuts no longer count),
    /// until they end or the drain after `done` is over (see [`Drain`]).
    async fn drain<L: Listener>(&mut self, listener: &mut L, done: &StopToken) {
        let mut out = vec![0; READ_CHUNK];
        let mut err = vec![0; READ_CHUNK / 8];
        let mut drain: Option<Drain> = None;
        while self.stdout.is_open() || self.stderr.is_open() {
            let ending = drain.is_some();
            // `done` and the drain come first, so a pipe that never stops being readable
            // cannot starve them.
            let (stream, read) = tokio::select! {
                biased;
                () = done.stopped(), if drain.is_none() => {
                    drain = Some(Drain::begin());
                    continue;
                }
                () = Drain::over(drain.as_ref()) => break,
                read = self.stdout.read(&mut out, ending) => (Stream::Stdout, read),
                read = self.stderr.read(&mut err, ending) => (Stream::Stderr, read),
            };
            if let (Some(drain), Ok(1..)) = (&mut drain, &read) {
                drain.heard();
            }
            let buf = match stream {
                Stream::Stdout => &out,
                Stream::Stderr => &err,
            };
            let _ = self.take(stream, read, buf, listener);
        }
        if self.stdout.is_open() {
            // Something that escaped the sweep holds the pipe; the log has what was read.
            self.close(Stream::Stdout, listener);
        }
    }
}

/// The clocks of [`Running::watch`], each a timer set again only when its time changes: a
/// select turn per read would otherwise register and drop a timer for every clock.
struct Alarms {
    deadline: Alarm,
    watch_exit: Alarm,
    idle: Alarm,
    exit_by: Alarm,
    own: Alarm,
}

impl Alarms {
    fn new(deadline: Option<Instant>, watch_exit: Instant) -> Self {
        let mut alarms = Alarms {
            deadline: Alarm::new(),
            watch_exit: Alarm::new(),
            idle: Alarm::new(),
            exit_by: Alarm::new(),
            own: Alarm::new(),
        };
        alarms.deadline.set(deadline);
        alarms.watch_exit.set(Some(watch_exit));
        alarms
    }
}

/// One timer: unset, or ringing at a time.
struct Alarm {
    sleep: Pin<Box<tokio::time::Sleep>>,
    at: Option<Instant>,
}

impl Alarm {
    fn new() -> Self {
        Alarm {
            // Never polled while unset.
            sleep: Box::pin(sleep_until(Instant::now())),
            at: None,
        }
    }

    fn set(&mut self, at: Option<Instant>) {
        if at != self.at {
            self.at = at;
            if let Some(at) = at {
                self.sleep.as_mut().reset(at);
            }
        }
    }

    /// Resolves when the time comes; never, while unset.
    async fn rings(&mut self) {
        match self.at {
            Some(_) => self.sleep.as_mut().await,
            None => std::future::pending().await,
        }
    }
}

/// Ends the process, by SIGINT when the cut `interrupt`s, else by SIGTERM and SIGKILL,
/// unless it has exited already; then kills whatever it left behind.
async fn end(
    child: &mut SupervisedChild,
    interrupt: bool,
    grace: Duration,
) -> Result<Termination, ProcessError> {
    let exit = if let Some(exit) = child.exited() {
        Some(exit)
    } else if interrupt {
        // The process ends its turn, says so, and exits by itself within the grace.
        child.interrupt();
        tokio::time::timeout(grace, child.wait())
            .await
            .ok()
            .transpose()?
    } else {
        None
    };
    match exit {
        Some(exit) => Ok(Termination {
            exit: Some(exit),
            leaked: child.kill_all().await,
        }),
        None => child.terminate(grace).await,
    }
}
