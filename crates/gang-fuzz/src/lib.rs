//! What the fuzz targets share (this crate's README lists the targets and how to run a
//! long campaign).
//!
//! A target is a `#[test]` that calls [`run`] with a strategy and a check. Its inputs are
//! the seeds in `crates/gang-fuzz/corpus/<target>/`, mutated the way coverage-guided
//! fuzzers mutate (bit flips, interesting bytes, truncation, insertion, deletion,
//! duplication, splicing two seeds, fragments of the text syntaxes), mixed with fresh
//! random inputs. Each input
//! is checked on a worker thread under a time bound, so a hang fails the test instead of
//! stalling it. A failure is shrunk by proptest to a small input, which [`run`] prints with
//! the seed that replays the run.
//!
//! Environment: `PROPTEST_CASES` (cases per target; each target has a small default so
//! that `cargo test` stays quick), `GANG_FUZZ_SEED` (a number replays a run; `random`
//! explores new inputs, as a campaign does; unset, each target's seed is fixed, so a test
//! run is repeatable and CI fails only on a change, never on luck), `GANG_FUZZ_INPUT_MS`
//! (the time bound per input, 1000 by default).

use std::cell::{Cell, RefCell};
use std::collections::hash_map::RandomState;
use std::fmt::Debug;
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};

/// Longest input kept after mutation. It bounds the work per input (so the time bound
/// measures hangs, not size); seeds are far smaller.
pub const MAX_INPUT: usize = 64 << 10;

/// Corpus files named so are inputs that once failed: regenerating a corpus keeps them.
pub const REGRESSION_PREFIX: &str = "regress-";

/// `corpus/` beside this crate (`crates/gang-fuzz/corpus`).
pub fn corpus_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/corpus"))
}

pub fn corpus_dir(target: &str) -> PathBuf {
    corpus_root().join(target)
}

/// A target's seeds, in file-name order.
pub fn seeds(target: &str) -> Arc<Vec<Vec<u8>>> {
    let dir = corpus_dir(target);
    let regenerate =
        "the corpus is in the repository; crates/gang-fuzz/README.md says how to regenerate it";
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("fuzz corpus {}: {e} ({regenerate})", dir.display()))
        .map(|e| e.expect("corpus directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "fuzz corpus {} has no seeds ({regenerate})",
        dir.display()
    );
    let seeds = files
        .iter()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect();
    Arc::new(seeds)
}

/// Replace a target's generated seeds (regression seeds stay).
pub fn write_seeds(target: &str, seeds: &[(String, Vec<u8>)]) {
    let dir = corpus_dir(target);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in std::fs::read_dir(&dir).expect("corpus directory") {
        let path = entry.expect("corpus directory entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_file() && !name.starts_with(REGRESSION_PREFIX) {
            std::fs::remove_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
    for (name, data) in seeds {
        let path = dir.join(name);
        std::fs::write(&path, data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

/// A scratch directory for targets that write files, in memory (`/dev/shm`) where there is
/// one: a disk shared with builds stalls now and then, which the time bound would report
/// as a hang.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let made = if shm.is_dir() {
        tempfile::Builder::new().prefix("gang-fuzz").tempdir_in(shm)
    } else {
        tempfile::Builder::new().prefix("gang-fuzz").tempdir()
    };
    made.expect("a scratch directory")
}

/// Bytes that sit on boundaries: zero, one, sign bits, all ones, and the separators of the
/// text syntaxes (newline, space, '-', ';').
const INTERESTING: &[u8] = &[0x00, 0x01, 0x7f, 0x80, 0xff, b'\n', b' ', b'-', b';'];

/// Fragments of the syntaxes under test (shapes, durations, nodes, addresses, SWF fields)
/// and numbers at the edges of the integer types, for mutations to splice in.
const TOKENS: &[&str] = &[
    "x",
    "X",
    "*",
    ",",
    ":",
    "/",
    "://",
    "unix:",
    "https://",
    "http://",
    "-",
    "+",
    "0",
    "1",
    "-1",
    ".5",
    "1e9",
    "inf",
    "NaN",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    " ",
    "\t",
    "\n",
    "\r\n",
    "s",
    "m",
    "h",
    "d",
    ";",
    "; MaxProcs: 8\n",
    "\0",
    "é",
    "\u{a0}",
    "\u{feff}",
];

/// One edit of an input. Positions are [`Index`]es, resolved against the input's length
/// when applied, so every edit applies to every input.
#[derive(Debug, Clone)]
pub enum Mutation {
    FlipBit(Index, u8),
    SetByte(Index, u8),
    Interesting(Index, Index),
    Truncate(Index),
    Insert(Index, Vec<u8>),
    /// A run of one byte: long varints, long lines, deep nesting.
    InsertRun(Index, u8, u16),
    Token(Index, Index),
    Delete(Index, u8),
    /// A range copied after itself.
    Duplicate(Index, u8),
    /// This input up to a point, then another seed from a point.
    Splice(Index, Index, Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(i, b)| Mutation::Interesting(i, b)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        2 => (any::<Index>(), vec(any::<u8>(), 1..16)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => (any::<Index>(), any::<u8>(), 1u16..1024)
            .prop_map(|(i, b, n)| Mutation::InsertRun(i, b, n)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(i, t)| Mutation::Token(i, t)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        2 => (any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(s, i, j)| Mutation::Splice(s, i, j)),
    ]
}

/// A position in `0..len` (`None` for an empty input).
fn byte_at(i: &Index, len: usize) -> Option<usize> {
    (len > 0).then(|| i.index(len))
}

/// A position in `0..=len` (between bytes, for insertions and cuts).
fn gap_at(i: &Index, len: usize) -> usize {
    i.index(len + 1)
}

/// Apply `edits` to seed `seed` of `seeds`; the result is at most [`MAX_INPUT`] long.
pub fn mutate(seeds: &[Vec<u8>], seed: &Index, edits: &[Mutation]) -> Vec<u8> {
    let mut b = seeds[seed.index(seeds.len())].clone();
    for m in edits {
        let len = b.len();
        match m {
            Mutation::FlipBit(i, bit) => {
                if let Some(p) = byte_at(i, len) {
                    b[p] ^= 1 << (bit % 8);
                }
            }
            Mutation::SetByte(i, v) => {
                if let Some(p) = byte_at(i, len) {
                    b[p] = *v;
                }
            }
            Mutation::Interesting(i, v) => {
                if let Some(p) = byte_at(i, len) {
                    b[p] = INTERESTING[v.index(INTERESTING.len())];
                }
            }
            Mutation::Truncate(i) => b.truncate(gap_at(i, len)),
            Mutation::Insert(i, bytes) => {
                let p = gap_at(i, len);
                b.splice(p..p, bytes.iter().copied());
            }
            Mutation::InsertRun(i, v, n) => {
                let p = gap_at(i, len);
                b.splice(p..p, std::iter::repeat_n(*v, usize::from(*n)));
            }
            Mutation::Token(i, t) => {
                let p = gap_at(i, len);
                let tok = TOKENS[t.index(TOKENS.len())].as_bytes();
                b.splice(p..p, tok.iter().copied());
            }
            Mutation::Delete(i, n) => {
                if let Some(p) = byte_at(i, len) {
                    b.drain(p..(p + usize::from(*n) + 1).min(len));
                }
            }
            Mutation::Duplicate(i, n) => {
                if let Some(p) = byte_at(i, len) {
                    let end = (p + usize::from(*n) + 1).min(len);
                    let copy = b[p..end].to_vec();
                    b.splice(end..end, copy);
                }
            }
            Mutation::Splice(s, i, j) => {
                let other = &seeds[s.index(seeds.len())];
                b.truncate(gap_at(i, len));
                b.extend_from_slice(&other[gap_at(j, other.len())..]);
            }
        }
        b.truncate(MAX_INPUT);
    }
    b
}

/// A seed edited 0 to 6 times (0: the seed itself, which must pass as well).
pub fn mutated(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = Vec<u8>> {
    assert!(!seeds.is_empty(), "mutation needs at least one seed");
    (any::<Index>(), vec(mutation(), 0..=6)).prop_map(move |(s, ms)| mutate(&seeds, &s, &ms))
}

/// Fresh random bytes, shorter than `max`.
pub fn fresh(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..max)
}

/// Input of a byte-level target: mostly mutated seeds, some fresh bytes.
pub fn bytes(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![4 => mutated(seeds), 1 => fresh(512)]
}

/// Input of a text target: mutated seeds (invalid UTF-8 replaced, as a lossy caller
/// would), fresh printable ASCII, and fresh text of any characters.
pub fn text(seeds: Arc<Vec<Vec<u8>>>) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => mutated(seeds).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        1 => "[ -~]{0,32}",
        1 => any::<String>(),
    ]
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: expected a whole number")),
    )
}

/// The time one input may take before it counts as a hang.
pub fn input_limit() -> Duration {
    Duration::from_millis(env_u64("GANG_FUZZ_INPUT_MS").unwrap_or(1000))
}

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    /// This test thread's worker, reused across inputs (a thread per input would cost more
    /// than most inputs do); replaced when one hangs.
    static WORKER: RefCell<Option<mpsc::Sender<Job>>> = const { RefCell::new(None) };
}

fn worker() -> mpsc::Sender<Job> {
    WORKER.with(|w| {
        w.borrow_mut()
            .get_or_insert_with(|| {
                let (tx, rx) = mpsc::channel::<Job>();
                std::thread::Builder::new()
                    .name("fuzz-input".into())
                    // As much stack as the main thread: the code under test may recurse.
                    .stack_size(8 << 20)
                    .spawn(move || rx.into_iter().for_each(|job| job()))
                    .expect("spawn a fuzz worker thread");
                tx
            })
            .clone()
    })
}

/// Run `f` on a worker thread; a panic there is raised here, and `f` running longer than
/// `limit` is a panic naming the hang (that worker is abandoned: it cannot be stopped).
/// Returns `f`'s result and how long it took.
pub fn bounded<R: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> R + Send + 'static,
) -> (R, Duration) {
    let (tx, rx) = mpsc::channel();
    let job: Job = Box::new(move || {
        let t = Instant::now();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r.map(|r| (r, t.elapsed())));
    });
    worker()
        .send(job)
        .expect("the fuzz worker takes jobs until it is abandoned");
    match rx.recv_timeout(limit) {
        Ok(Ok(done)) => done,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            unreachable!("the job sends its outcome, panic or not")
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            WORKER.with(|w| w.borrow_mut().take());
            panic!("one input ran longer than {limit:?}: a hang (or a pathological slowdown)")
        }
    }
}

/// Run target `name`: `default_cases` inputs (`PROPTEST_CASES` overrides), each checked
/// by `check` under the time bound. `check` returns how many inputs it fed to the code
/// under test (a case may be a sequence of requests). Prints the figures a campaign
/// reports; panics with the smallest failing input found.
pub fn run<S>(
    name: &str,
    default_cases: u32,
    strategy: S,
    check: impl Fn(S::Value) -> Result<u64, TestCaseError> + Send + Sync + 'static,
) where
    S: Strategy,
    S::Value: Send + Debug + 'static,
{
    let cases = env_u64("PROPTEST_CASES").map_or(default_cases, |c| c as u32);
    let seed = match std::env::var("GANG_FUZZ_SEED").as_deref() {
        Ok("random") => RandomState::new().hash_one(name),
        Ok(_) => env_u64("GANG_FUZZ_SEED").expect("set"),
        // FNV-1a of the name: the same inputs at every run.
        Err(_) => name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        }),
    };
    let limit = input_limit();
    let config = Config {
        cases,
        // Failures are reported with the seed that replays them, and fixed inputs belong
        // in the corpus (as regress-* seeds), not in files beside the sources.
        failure_persistence: None,
        max_shrink_iters: 1024,
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let check = Arc::new(check);
    let (ran, fed, slowest) = (Cell::new(0u64), Cell::new(0u64), Cell::new(Duration::ZERO));
    let start = Instant::now();
    let result = runner.run(&strategy, |input| {
        let check = check.clone();
        let (r, took) = bounded(limit, move || check(input));
        ran.set(ran.get() + 1);
        slowest.set(slowest.get().max(took));
        fed.set(fed.get() + r.as_ref().map_or(1, |n| *n));
        r.map(drop)
    });
    let secs = start.elapsed().as_secs_f64();
    let (ran, fed, slowest) = (ran.get(), fed.get(), slowest.get());
    match result {
        Ok(()) => eprintln!(
            "fuzz {name}: {ran} cases, {fed} inputs, {secs:.1} s, slowest case {:.1} ms; \
             0 crashes, 0 hangs (seed {seed})",
            slowest.as_secs_f64() * 1e3
        ),
        Err(TestError::Fail(why, input)) => panic!(
            "fuzz {name} failed ({ran} cases run, shrinking included): {why}\n\
             smallest failing input: {input:?}\n\
             replay: GANG_FUZZ_SEED={seed} PROPTEST_CASES={cases} cargo test {name}"
        ),
        Err(TestError::Abort(why)) => panic!("fuzz {name} aborted: {why} (seed {seed})"),
    }
}

/// A global allocator that notes the largest single allocation each thread asks for, so a
/// target can check that no input makes the code under test allocate past a bound. A test
/// binary installs it with
/// `#[global_allocator] static ALLOC: gang_fuzz::PeakAlloc = gang_fuzz::PeakAlloc;`
/// and measures with [`largest_alloc`].
pub struct PeakAlloc;

thread_local! {
    /// The largest allocation (or reallocation's new size) on this thread since the last
    /// reset. Constant-initialized and without a destructor: the allocator may use it
    /// at any time, even while the thread is being set up or torn down.
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = PEAK.try_with(|p| {
        if size > p.get() {
            p.set(size)
        }
    });
}

// SAFETY: every call is passed to the system allocator unchanged; noting the size touches
// only a thread-local cell.
unsafe impl std::alloc::GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        note(new);
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.realloc(ptr, layout, new) }
    }
}

/// Run `f` on this thread; its result and the largest single allocation it made. Panics
/// if the binary has not installed [`PeakAlloc`] (the figure would be 0, a false pass).
pub fn largest_alloc<R>(f: impl FnOnce() -> R) -> (R, usize) {
    PEAK.with(|p| p.set(0));
    let probe = std::hint::black_box(Vec::<u8>::with_capacity(3));
    drop(probe);
    assert!(
        PEAK.with(Cell::get) >= 3,
        "largest_alloc needs `#[global_allocator] static A: gang_fuzz::PeakAlloc = gang_fuzz::PeakAlloc;`"
    );
    PEAK.with(|p| p.set(0));
    let r = f();
    (r, PEAK.with(Cell::get))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest! {
        #[test]
        fn every_edit_applies_to_every_input(
            seeds in vec(vec(any::<u8>(), 0..40), 1..4),
            seed in any::<Index>(),
            edits in vec(mutation(), 0..12),
        ) {
            let out = mutate(&seeds, &seed, &edits);
            prop_assert!(out.len() <= MAX_INPUT);
        }
    }

    proptest! {
        #[test]
        fn unedited_seeds_come_back_as_they_are(
            seeds in vec(vec(any::<u8>(), 0..40), 1..4),
            seed in any::<Index>(),
        ) {
            prop_assert_eq!(&mutate(&seeds, &seed, &[]), seed.get(&seeds));
        }
    }

    #[test]
    fn bounded_returns_the_result_and_raises_panics() {
        let (r, _) = bounded(Duration::from_secs(5), || 6 * 7);
        assert_eq!(r, 42);
        let caught =
            std::panic::catch_unwind(|| bounded(Duration::from_secs(5), || panic!("boom")));
        let msg = caught.unwrap_err();
        assert_eq!(msg.downcast_ref::<&str>(), Some(&"boom"));
    }

    #[test]
    fn bounded_fails_an_input_that_hangs() {
        let caught = std::panic::catch_unwind(|| {
            bounded(Duration::from_millis(20), || {
                std::thread::sleep(Duration::from_secs(2))
            })
        });
        let msg = caught.unwrap_err();
        let msg = msg.downcast_ref::<String>().expect("a formatted message");
        assert!(msg.contains("a hang"), "{msg}");
    }
}
