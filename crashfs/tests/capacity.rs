//! crashfs with a capacity, on real FUSE mounts: it fills up (ENOSPC) as the chaos soak's
//! tmpfs does, `df` agrees with it, space comes back on delete, truncate and crash.
//!
//! Same conventions as tests/mount.rs: root and /dev/fuse needed, hence ignored by plain
//! `cargo test`; scripts/test.sh runs them, and without FUSE they fail with the reason.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crashfs::Mode;

const MIB: u64 = 1 << 20;
const CAPACITY: u64 = 4 * MIB;
const BLOCK: u64 = 4096;

mod common;

use common::Mounted;

/// `df` and the wait on it, for a mount of [`CAPACITY`].
trait Df {
    fn df(&self) -> (u64, u64, u64);
    fn wait_used(&self, used: u64);
}

impl Df for Mounted {
    /// (size, used, available) in bytes, as `df` reads them from statfs.
    fn df(&self) -> (u64, u64, u64) {
        let out = Command::new("df")
            .args(["-B1", "--output=size,used,avail"])
            .arg(self.fs.path())
            .output()
            .expect("df runs");
        assert!(out.status.success(), "df: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let nums: Vec<u64> = text
            .lines()
            .nth(1)
            .unwrap_or_else(|| panic!("df said {text:?}"))
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(nums.len(), 3, "df said {text:?}");
        (nums[0], nums[1], nums[2])
    }

    /// Waits until `df` reports `used` bytes: space given back by an unlink only returns when
    /// the kernel forgets the inode, a moment after the last close.
    fn wait_used(&self, used: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let df = self.df();
            if df.1 == used {
                assert_eq!(df, (CAPACITY, used, CAPACITY - used));
                return;
            }
            assert!(
                Instant::now() < deadline,
                "df still says {df:?}, expected {used} used"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn mount(mode: Mode) -> Mounted {
    common::mount(mode, Some(CAPACITY))
}

fn is_enospc(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(libc::ENOSPC)
}

#[track_caller]
fn assert_enospc<T: std::fmt::Debug>(r: io::Result<T>) {
    let e = r.expect_err("should fail with ENOSPC");
    assert!(is_enospc(&e), "expected ENOSPC, got {e:?}");
}

/// The soak's filler (tests/util/tmpfs.rs): 1 MiB writes, halved on each ENOSPC, until not a
/// byte more fits. Returns the filler's size; panics on any other error.
fn fill(path: &Path) -> u64 {
    let mut file = File::create(path).expect("filler created");
    let mut chunk = vec![0xf1u8; MIB as usize];
    let mut enospc = 0;
    while !chunk.is_empty() {
        match file.write_all(&chunk) {
            Ok(()) => {}
            Err(e) if is_enospc(&e) => {
                enospc += 1;
                chunk.truncate(chunk.len() / 2);
            }
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    assert!(enospc > 0);
    file.metadata().unwrap().len()
}

/// Deterministic, block-unaligned content.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2] ^ seed)
        .collect()
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn filler_stops_at_the_capacity_and_deleting_it_gives_the_space_back() {
    let m = mount(Mode::Strict);
    assert_eq!(m.df(), (CAPACITY, 0, CAPACITY));
    fs::write(m.p("small"), b"one block").unwrap();
    assert_eq!(m.df(), (CAPACITY, BLOCK, CAPACITY - BLOCK));

    let filled = fill(&m.p("filler"));
    assert_eq!(filled, CAPACITY - BLOCK, "filled to the last block");
    assert_eq!(m.df(), (CAPACITY, CAPACITY, 0));
    // du's view agrees: st_blocks is the charged size.
    let meta = fs::metadata(m.p("filler")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::blocks(&meta) * 512, filled);
    // Full: a new file can be created (names are free) but not given a byte; the small
    // file's unused tail of its block still takes bytes.
    assert_enospc(fs::write(m.p("new"), b"x"));
    assert_eq!(fs::metadata(m.p("new")).unwrap().len(), 0);
    let mut small = OpenOptions::new().append(true).open(m.p("small")).unwrap();
    small.write_all(&[b'.'; 100]).unwrap();
    drop(small);

    fs::remove_file(m.p("filler")).unwrap();
    m.wait_used(BLOCK);
    fs::write(m.p("new"), vec![7u8; 3 * MIB as usize]).expect("space is back");
    m.wait_used(3 * MIB + BLOCK);
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn an_unlinked_open_file_keeps_its_space_until_closed() {
    let m = mount(Mode::Strict);
    let mut f = File::create(m.p("f")).unwrap();
    f.write_all(&vec![1u8; 3 * MIB as usize]).unwrap();
    fs::remove_file(m.p("f")).unwrap();
    assert_eq!(m.df().1, 3 * MIB, "still open: still charged");
    // The handle still writes, within the space left, and fills the volume.
    f.write_all(&vec![3u8; MIB as usize]).unwrap();
    assert_eq!(m.df().1, CAPACITY);
    assert_enospc(fs::write(m.p("g"), b"x"));
    drop(f);
    m.wait_used(0);
    fs::write(m.p("g"), vec![2u8; 2 * MIB as usize]).unwrap();
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn a_write_that_does_not_fit_leaves_the_file_unchanged() {
    let m = mount(Mode::Strict);
    // 64 KiB free: the file ends 10 bytes into its last block.
    let len = CAPACITY - 64 * 1024 - BLOCK + 10;
    let content = pattern(len as usize, 1);
    fs::write(m.p("f"), &content).unwrap();
    assert_eq!(m.df(), (CAPACITY, CAPACITY - 64 * 1024, 64 * 1024));

    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.p("f"))
        .unwrap();
    // Over the last 10 bytes and on to one byte past the capacity, refused whole. From a block
    // boundary so the kernel sends it as one FUSE request: it ends a request after a partly
    // written page not in its cache (from `len - 100` it sent 90 bytes, which fitted, then
    // the rest, refused: write(2) returned 90).
    let at = len - 10;
    assert_eq!(at % BLOCK, 0);
    let too_big = pattern((CAPACITY - at + 1) as usize, 2);
    assert_enospc(f.write_at(&too_big, at));
    assert_enospc(f.set_len(CAPACITY + 1));
    let out = Command::new("fallocate")
        .args(["-l", &(CAPACITY + 1).to_string()])
        .arg(m.p("f"))
        .output()
        .expect("fallocate runs");
    assert!(!out.status.success(), "fallocate past the capacity worked");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No space left"),
        "{out:?}"
    );
    let mut now = Vec::new();
    File::open(m.p("f")).unwrap().read_to_end(&mut now).unwrap();
    assert!(now == content, "the file changed (len {})", now.len());
    assert_eq!(m.df().1, CAPACITY - 64 * 1024);

    // Overwriting in place always fits, and what exactly fits does.
    f.write_at(&too_big[..1000], 0).unwrap();
    let fits = &too_big[..(CAPACITY - at) as usize];
    assert_eq!(f.write_at(fits, at).unwrap(), fits.len());
    assert_eq!(m.df(), (CAPACITY, CAPACITY, 0));
    assert_eq!(f.metadata().unwrap().len(), CAPACITY);
    // A truncate gives space back at once.
    f.set_len(MIB).unwrap();
    assert_eq!(m.df().1, MIB);
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn a_crash_recomputes_the_usage_from_what_survived() {
    let mut m = mount(Mode::Lenient);
    let mut kept = File::create(m.p("kept")).unwrap();
    kept.write_all(&vec![1u8; MIB as usize]).unwrap();
    kept.sync_all().unwrap();
    drop(kept);
    fill(&m.p("filler"));
    assert_eq!(m.df().1, CAPACITY);
    // The filler's name is durable (Lenient), its data is not.
    m.fs.crash().expect("crash");
    assert_eq!(fs::metadata(m.p("filler")).unwrap().len(), 0);
    assert_eq!(m.df(), (CAPACITY, MIB, CAPACITY - MIB));
    assert_eq!(fill(&m.p("filler")), CAPACITY - MIB);

    // A synced file whose shrinking truncate was not synced comes back whole, next to a
    // synced file that used the freed space: over the capacity. df says full (not negative),
    // growth fails until enough is removed.
    fs::remove_file(m.p("filler")).unwrap();
    m.wait_used(MIB);
    let kept = File::options().write(true).open(m.p("kept")).unwrap();
    kept.set_len(0).unwrap();
    drop(kept);
    let mut other = File::create(m.p("other")).unwrap();
    other.write_all(&vec![2u8; CAPACITY as usize]).unwrap();
    other.sync_all().unwrap();
    drop(other);
    m.wait_used(CAPACITY);
    m.fs.crash().expect("crash");
    assert_eq!(fs::metadata(m.p("kept")).unwrap().len(), MIB);
    assert_eq!(fs::metadata(m.p("other")).unwrap().len(), CAPACITY);
    assert_eq!(m.df(), (CAPACITY, CAPACITY, 0));
    assert_enospc(fs::write(m.p("new"), b"x"));
    fs::remove_file(m.p("other")).unwrap();
    m.wait_used(MIB);
    fs::write(m.p("new"), vec![3u8; 2 * MIB as usize]).unwrap();
}
