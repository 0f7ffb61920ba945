//! crashfs on real FUSE mounts: what survives a crash, in both modes, through the kernel.
//!
//! Each test mounts its own filesystem in a tempdir, so they run in parallel. They need root and
//! /dev/fuse, hence ignored by plain `cargo test`; scripts/test.sh runs them
//! (`--include-ignored`), and without FUSE they fail with the reason instead of passing.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use crashfs::{Mode, Unsynced};

mod common;

use common::Mounted;

fn mount(mode: Mode) -> Mounted {
    common::mount(mode, None)
}

fn write(path: &Path, bytes: &[u8], fsync: bool) {
    let mut f = File::create(path).expect("create");
    f.write_all(bytes).expect("write");
    if fsync {
        f.sync_all().expect("fsync");
    }
}

fn append(path: &Path, bytes: &[u8], fsync: bool) {
    let mut f = OpenOptions::new().append(true).open(path).expect("open");
    f.write_all(bytes).expect("append");
    if fsync {
        f.sync_all().expect("fsync");
    }
}

fn fsync_dir(path: &Path) {
    File::open(path)
        .expect("open dir")
        .sync_all()
        .expect("fsync dir");
}

fn errno(r: io::Result<impl std::fmt::Debug>) -> i32 {
    r.expect_err("should fail")
        .raw_os_error()
        .expect("an errno")
}

/// Deterministic, chunk-unaligned content.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2] ^ seed)
        .collect()
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn fsynced_file_survives_crash_with_exact_bytes() {
    let mut m = mount(Mode::Strict);
    let bytes = pattern(200_003, 1);
    write(&m.p("f"), &bytes, true);
    fsync_dir(m.root());
    let ino = fs::metadata(m.p("f")).unwrap().ino();
    assert_eq!(m.fs.unsynced(), Unsynced::default());
    m.crash();
    assert_eq!(fs::read(m.p("f")).unwrap(), bytes);
    assert_eq!(
        fs::metadata(m.p("f")).unwrap().ino(),
        ino,
        "inode numbers are stable across a crash"
    );
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn unsynced_writes_are_lost() {
    let mut m = mount(Mode::Strict);
    write(&m.p("synced"), b"A", true);
    // Named durably, data never synced: the name survives, empty.
    write(&m.p("named"), b"never synced", false);
    fsync_dir(m.root());
    append(&m.p("synced"), b"B", false);
    // Neither name nor data durable.
    write(&m.p("ghost"), b"boo", false);
    let u = m.fs.unsynced();
    assert_eq!(u.data_bytes, "never synced".len() as u64 + 1 + 3);
    assert_eq!(u.files, 3);
    assert_eq!(u.namespace_changes, 1, "{u:?}");
    m.crash();
    assert_eq!(fs::read(m.p("synced")).unwrap(), b"A");
    assert_eq!(fs::read(m.p("named")).unwrap(), b"");
    assert!(!m.p("ghost").exists());
    assert_eq!(m.fs.unsynced(), Unsynced::default());
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn partial_sync_keeps_the_last_fsynced_content() {
    let mut m = mount(Mode::Strict);
    let a = pattern(150_000, 2);
    write(&m.p("f"), &a, true);
    fsync_dir(m.root());
    // Overwrite the start, append past the end, then crash without fsync.
    let f = OpenOptions::new().write(true).open(m.p("f")).unwrap();
    f.write_all_at(&[0xFF; 70_000], 0).unwrap();
    f.write_all_at(b"tail", 300_000).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 300_004);
    drop(f);
    m.crash();
    assert_eq!(fs::read(m.p("f")).unwrap(), a);
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn truncate_is_lost_without_fsync_and_kept_with_it() {
    let mut m = mount(Mode::Strict);
    let a = pattern(100_000, 3);
    write(&m.p("f"), &a, true);
    fsync_dir(m.root());
    OpenOptions::new()
        .write(true)
        .open(m.p("f"))
        .unwrap()
        .set_len(10)
        .unwrap();
    assert_eq!(fs::metadata(m.p("f")).unwrap().len(), 10);
    m.crash();
    assert_eq!(fs::read(m.p("f")).unwrap(), a);

    let f = OpenOptions::new().write(true).open(m.p("f")).unwrap();
    f.set_len(10).unwrap();
    // Extending after a shrink reads zeros, not the old bytes.
    f.set_len(70_000).unwrap();
    f.sync_all().unwrap();
    drop(f);
    m.crash();
    let got = fs::read(m.p("f")).unwrap();
    assert_eq!(got.len(), 70_000);
    assert_eq!(&got[..10], &a[..10]);
    assert!(got[10..].iter().all(|&b| b == 0));

    // O_TRUNC through File::create, synced.
    write(&m.p("f"), b"short", true);
    m.crash();
    assert_eq!(fs::read(m.p("f")).unwrap(), b"short");
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn strict_create_needs_a_directory_fsync() {
    let mut m = mount(Mode::Strict);
    write(&m.p("unnamed"), b"data", true);
    m.crash();
    assert!(
        !m.p("unnamed").exists(),
        "file fsync alone doesn't make its name durable"
    );

    write(&m.p("named"), b"data", true);
    fsync_dir(m.root());
    m.crash();
    assert_eq!(fs::read(m.p("named")).unwrap(), b"data");
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn rename_without_parent_fsync_is_lost_in_strict_kept_in_lenient() {
    for mode in [Mode::Strict, Mode::Lenient] {
        let mut m = mount(mode);
        write(&m.p("old"), b"content", true);
        fsync_dir(m.root());
        fs::rename(m.p("old"), m.p("new")).unwrap();
        m.crash();
        let (old, new) = (m.p("old").exists(), m.p("new").exists());
        match mode {
            Mode::Strict => assert!(old && !new, "strict: old {old}, new {new}"),
            Mode::Lenient => assert!(!old && new, "lenient: old {old}, new {new}"),
        }
        let survivor = if old { "old" } else { "new" };
        assert_eq!(fs::read(m.p(survivor)).unwrap(), b"content");
    }
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn rename_across_directories_with_parent_fsyncs() {
    let mut m = mount(Mode::Strict);
    fs::create_dir(m.p("a")).unwrap();
    fs::create_dir(m.p("b")).unwrap();
    fsync_dir(m.root());
    write(&m.p("a/f"), b"moved", true);
    fsync_dir(&m.p("a"));
    fs::rename(m.p("a/f"), m.p("b/g")).unwrap();
    // Only the destination synced: both names survive (as on ext4 with that order).
    fsync_dir(&m.p("b"));
    m.crash();
    assert_eq!(fs::read(m.p("a/f")).unwrap(), b"moved");
    assert_eq!(fs::read(m.p("b/g")).unwrap(), b"moved");

    // Two names of one inode now (rename(2) between them would do nothing): unlink one.
    assert_eq!(fs::metadata(m.p("b/g")).unwrap().nlink(), 2);
    fs::remove_file(m.p("a/f")).unwrap();
    fsync_dir(&m.p("a"));
    m.crash();
    assert!(!m.p("a/f").exists());
    assert_eq!(fs::read(m.p("b/g")).unwrap(), b"moved");

    // Both parents synced: only the new name.
    write(&m.p("a/h"), b"h", true);
    fsync_dir(&m.p("a"));
    fs::rename(m.p("a/h"), m.p("b/h")).unwrap();
    fsync_dir(&m.p("b"));
    fsync_dir(&m.p("a"));
    m.crash();
    assert!(!m.p("a/h").exists());
    assert_eq!(fs::read(m.p("b/h")).unwrap(), b"h");
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn unlink_without_directory_fsync_comes_back_in_strict() {
    let mut m = mount(Mode::Strict);
    write(&m.p("f"), b"still here", true);
    fsync_dir(m.root());
    fs::remove_file(m.p("f")).unwrap();
    assert!(!m.p("f").exists());
    m.crash();
    assert_eq!(fs::read(m.p("f")).unwrap(), b"still here");

    fs::remove_file(m.p("f")).unwrap();
    fsync_dir(m.root());
    m.crash();
    assert!(!m.p("f").exists());

    let mut m = mount(Mode::Lenient);
    write(&m.p("f"), b"x", true);
    fs::remove_file(m.p("f")).unwrap();
    m.crash();
    assert!(!m.p("f").exists(), "lenient: unlink is durable at once");
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn mkdir_and_rmdir() {
    let mut m = mount(Mode::Strict);
    fs::create_dir_all(m.p("d/e")).unwrap();
    m.crash();
    assert!(!m.p("d").exists());

    fs::create_dir_all(m.p("d/e")).unwrap();
    fsync_dir(m.root());
    m.crash();
    assert!(m.p("d").is_dir());
    assert!(!m.p("d/e").exists(), "d's own entries were never synced");

    fs::create_dir(m.p("d/e")).unwrap();
    fsync_dir(&m.p("d"));
    fs::remove_dir(m.p("d/e")).unwrap();
    m.crash();
    assert!(m.p("d/e").is_dir(), "rmdir without fsync of d is lost");
    fs::remove_dir(m.p("d/e")).unwrap();
    fsync_dir(&m.p("d"));
    m.crash();
    assert!(!m.p("d/e").exists());
    assert_eq!(fs::read_dir(m.p("d")).unwrap().count(), 0);

    let mut m = mount(Mode::Lenient);
    fs::create_dir_all(m.p("x/y/z")).unwrap();
    write(&m.p("x/y/z/f"), b"unsynced", false);
    fs::set_permissions(m.p("x/y"), fs::Permissions::from_mode(0o700)).unwrap();
    m.crash();
    assert!(m.p("x/y/z").is_dir(), "lenient: mkdir is durable at once");
    assert_eq!(
        fs::read(m.p("x/y/z/f")).unwrap(),
        b"",
        "but file data is not"
    );
    assert_eq!(
        fs::metadata(m.p("x/y")).unwrap().permissions().mode() & 0o777,
        0o700
    );
    fs::remove_dir_all(m.p("x")).unwrap();
    m.crash();
    assert!(!m.p("x").exists());
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn errors_are_posix_errnos() {
    let m = mount(Mode::Strict);
    fs::create_dir(m.p("d")).unwrap();
    write(&m.p("d/f"), b"x", false);
    write(&m.p("file"), b"x", false);
    assert_eq!(errno(File::open(m.p("missing"))), libc::ENOENT);
    assert_eq!(errno(fs::create_dir(m.p("d"))), libc::EEXIST);
    assert_eq!(
        errno(
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(m.p("file"))
        ),
        libc::EEXIST
    );
    assert_eq!(errno(fs::remove_dir(m.p("d"))), libc::ENOTEMPTY);
    assert_eq!(errno(fs::remove_file(m.p("d"))), libc::EISDIR);
    assert_eq!(errno(fs::remove_dir(m.p("file"))), libc::ENOTDIR);
    assert_eq!(errno(File::open(m.p("file/x"))), libc::ENOTDIR);
    assert_eq!(
        errno(OpenOptions::new().write(true).open(m.p("d"))),
        libc::EISDIR
    );
    fs::create_dir(m.p("e")).unwrap();
    assert!(matches!(
        errno(fs::rename(m.p("e"), m.p("d"))),
        libc::ENOTEMPTY | libc::EEXIST
    ));
    assert_eq!(errno(fs::rename(m.p("e"), m.p("file"))), libc::ENOTDIR);
    assert_eq!(errno(fs::rename(m.p("file"), m.p("e"))), libc::EISDIR);
    assert_eq!(errno(fs::rename(m.p("d"), m.p("d/inside"))), libc::EINVAL);
    assert_eq!(errno(fs::hard_link(m.p("file"), m.p("link"))), libc::EPERM);
    assert_eq!(
        errno(File::create(m.p(&"n".repeat(256)))),
        libc::ENAMETOOLONG
    );
    let mut buf = Vec::new();
    assert_eq!(
        errno(File::open(m.p("d")).unwrap().read_to_end(&mut buf)),
        libc::EISDIR
    );
    // Symlinks work.
    std::os::unix::fs::symlink("file", m.p("sym")).unwrap();
    assert_eq!(fs::read_link(m.p("sym")).unwrap(), Path::new("file"));
    assert_eq!(fs::read(m.p("sym")).unwrap(), b"x");
    // A write past the end leaves a hole of zeros.
    let f = OpenOptions::new().write(true).open(m.p("file")).unwrap();
    f.write_all_at(b"end", 200_000).unwrap();
    let got = fs::read(m.p("file")).unwrap();
    assert_eq!(got.len(), 200_003);
    assert_eq!(got[0], b'x');
    assert!(got[1..200_000].iter().all(|&b| b == 0));
    assert_eq!(&got[200_000..], b"end");
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn atomic_replace_pattern() {
    let mut m = mount(Mode::Strict);
    write(&m.p("meta.json"), b"{\"v\":1}", true);
    fsync_dir(m.root());

    // Right: write temp, fsync it, rename over, fsync the directory.
    write(&m.p("meta.json.tmp"), b"{\"v\":2}", true);
    fs::rename(m.p("meta.json.tmp"), m.p("meta.json")).unwrap();
    fsync_dir(m.root());
    m.crash();
    assert_eq!(fs::read(m.p("meta.json")).unwrap(), b"{\"v\":2}");
    assert!(!m.p("meta.json.tmp").exists());

    // Wrong: no fsync of the temp file. The rename is durable, its data is not: an empty
    // meta.json, the classic bug this layer exists to catch.
    write(&m.p("meta.json.tmp"), b"{\"v\":3}", false);
    fs::rename(m.p("meta.json.tmp"), m.p("meta.json")).unwrap();
    fsync_dir(m.root());
    m.crash();
    assert_eq!(fs::read(m.p("meta.json")).unwrap(), b"");
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
#[allow(unsafe_code)] // memmap2: the file must not change size while mapped; nothing else writes it.
fn mmap_reads_see_written_data() {
    let mut m = mount(Mode::Strict);
    let bytes = pattern(300_000, 4);
    write(&m.p("seg"), &bytes, true);
    fsync_dir(m.root());
    let f = File::open(m.p("seg")).unwrap();
    let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    assert_eq!(&map[..], &bytes[..]);
    // A write through the file is seen by the mapping (one page cache).
    OpenOptions::new()
        .write(true)
        .open(m.p("seg"))
        .unwrap()
        .write_all_at(b"NEW", 131_072)
        .unwrap();
    assert_eq!(&map[131_072..131_075], b"NEW");
    drop(map);
    drop(f);
    m.crash();
    let f = File::open(m.p("seg")).unwrap();
    let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
    assert_eq!(&map[..], &bytes[..], "after the crash: the fsynced bytes");
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn big_file_fsync_cost_does_not_grow_with_size() {
    let mut m = mount(Mode::Strict);
    const MB: usize = 1 << 20;
    let block = pattern(MB, 5);
    let mut f = File::create(m.p("journal")).unwrap();
    fsync_dir(m.root());
    let start = Instant::now();
    let mut fsyncs = Vec::new();
    for i in 0..100 {
        f.write_all(&block).unwrap();
        if i % 4 == 3 {
            let t = Instant::now();
            f.sync_data().unwrap();
            fsyncs.push(t.elapsed());
        }
    }
    let total = start.elapsed();
    // Unsynced tail: lost at the crash.
    f.write_all(&block[..12_345]).unwrap();
    drop(f);
    let avg = |d: &[Duration]| d.iter().sum::<Duration>() / d.len() as u32;
    let (first, last) = (avg(&fsyncs[..5]), avg(&fsyncs[fsyncs.len() - 5..]));
    let max = fsyncs.iter().max().unwrap();
    println!(
        "100 MiB in 1 MiB writes, fsync every 4 MiB: {total:?} ({:.0} MiB/s); {} fsyncs, \
         first five avg {first:?} (file 4-20 MiB), last five avg {last:?} (80-100 MiB), \
         max {max:?}",
        100.0 / total.as_secs_f64(),
        fsyncs.len()
    );
    assert!(
        last < first * 10 + Duration::from_millis(5),
        "fsync cost grows with file size: {first:?} -> {last:?}"
    );
    assert!(*max < Duration::from_millis(500), "an fsync took {max:?}");
    let t = Instant::now();
    m.crash();
    let crash = t.elapsed();
    let t = Instant::now();
    let got = fs::read(m.p("journal")).unwrap();
    println!(
        "crash (unmount, restore, mount): {crash:?}; read back 100 MiB: {:?}",
        t.elapsed()
    );
    assert_eq!(got.len(), 100 * MB);
    for i in [0, 37, 99] {
        assert!(got[i * MB..(i + 1) * MB] == block[..], "MiB {i}");
    }

    // A journal's worst case: small appends, each fsynced (each copies its 64 KiB chunk, which
    // the durable copy shares), on the end of the 100 MiB file.
    let mut f = OpenOptions::new()
        .append(true)
        .open(m.p("journal"))
        .unwrap();
    let t = Instant::now();
    for _ in 0..2000 {
        f.write_all(&block[..100]).unwrap();
        f.sync_data().unwrap();
    }
    let per = t.elapsed() / 2000;
    println!("100-byte append + fdatasync: {per:?} each");
    drop(f);
    m.crash();
    assert_eq!(
        fs::metadata(m.p("journal")).unwrap().len(),
        100 * MB as u64 + 200_000
    );
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn readdir_after_many_creates_and_unlinks() {
    let mut m = mount(Mode::Strict);
    let dir = m.p("many");
    fs::create_dir(&dir).unwrap();
    for i in 0..3000 {
        write(&dir.join(format!("file-{i:05}")), b"", false);
    }
    for i in (0..3000).step_by(3) {
        fs::remove_file(dir.join(format!("file-{i:05}"))).unwrap();
    }
    let list = |dir: &Path| {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    let expected: Vec<String> = (0..3000)
        .filter(|i| i % 3 != 0)
        .map(|i| format!("file-{i:05}"))
        .collect();
    assert_eq!(list(&dir), expected);
    fsync_dir(m.root());
    fsync_dir(&dir);
    m.crash();
    assert_eq!(list(&dir), expected);

    // Unlinking while reading the directory (rm -r's pattern) skips and repeats nothing.
    let mut seen = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        fs::remove_file(entry.unwrap().path()).unwrap();
        seen += 1;
    }
    assert_eq!(seen, expected.len());
    assert_eq!(list(&dir), Vec::<String>::new());
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn open_unlinked_file_stays_readable() {
    let m = mount(Mode::Strict);
    write(&m.p("f"), b"kept open", false);
    let f = File::open(m.p("f")).unwrap();
    fs::remove_file(m.p("f")).unwrap();
    let mut buf = String::new();
    (&f).read_to_string(&mut buf).unwrap();
    assert_eq!(buf, "kept open");
}

/// The child side of `fjall_keeps_every_synced_key`: this test binary re-run with
/// FJALL_CHILD_DB set. Writes keys forever, persisting (SyncAll) every 100, and reports each
/// persisted count on stdout, until the parent kills it with SIGKILL.
fn fjall_child(path: &Path) -> ! {
    let db = fjall::Database::builder(path).open().unwrap();
    let ks = db
        .keyspace("rows", fjall::KeyspaceCreateOptions::default)
        .unwrap();
    let mut out = io::stdout();
    for i in 0u32.. {
        ks.insert(i.to_be_bytes(), pattern(100, i as u8)).unwrap();
        if i % 100 == 99 {
            db.persist(fjall::PersistMode::SyncAll).unwrap();
            writeln!(out, "synced {}", i + 1).unwrap();
            out.flush().unwrap();
        }
    }
    unreachable!()
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn fjall_keeps_every_synced_key() {
    if let Some(path) = std::env::var_os("FJALL_CHILD_DB") {
        fjall_child(Path::new(&path));
    }
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    // Lenient: fjall 3.1 doesn't fsync `keyspaces/` after creating a keyspace directory, so in
    // Strict mode the keyspace (and every key) is gone after a crash.
    let mut m = mount(Mode::Lenient);
    let path = m.p("db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "fjall_keeps_every_synced_key",
            "--exact",
            "--include-ignored",
        ])
        .args(["--nocapture", "--test-threads=1"])
        .env("FJALL_CHILD_DB", &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut synced = 0u32;
    for line in io::BufReader::new(child.stdout.take().unwrap()).lines() {
        if let Some(n) = line.unwrap().strip_prefix("synced ") {
            synced = n.parse().unwrap();
            if synced >= 20_000 {
                break;
            }
        }
    }
    // Power cut while it writes: SIGKILL, reap, then drop what was not durable.
    child.kill().unwrap();
    child.wait().unwrap();
    let lost = m.fs.unsynced();
    m.crash();
    let db = fjall::Database::builder(&path).open().unwrap();
    let ks = db
        .keyspace("rows", fjall::KeyspaceCreateOptions::default)
        .unwrap();
    for i in 0..synced {
        let v = ks.get(i.to_be_bytes()).unwrap();
        assert_eq!(v.as_deref(), Some(&pattern(100, i as u8)[..]), "key {i}");
    }
    let extra = (synced..)
        .take_while(|i| ks.get(i.to_be_bytes()).unwrap().is_some())
        .count();
    println!(
        "fjall (Lenient): all {synced} keys reported synced are back after the crash, and \
         {extra} written after the last report; unsynced at the crash: {lost:?}"
    );
}

#[test]
#[ignore = "needs root and /dev/fuse: scripts/test.sh runs it"]
fn crash_refuses_while_a_file_is_open_and_can_retry() {
    let mut m = mount(Mode::Strict);
    write(&m.p("f"), b"x", true);
    fsync_dir(m.root());
    let open = File::open(m.p("f")).unwrap();
    let err = m.fs.crash().expect_err("busy");
    assert_eq!(err.kind(), io::ErrorKind::ResourceBusy);
    let pid = format!("pid {} ", std::process::id());
    assert!(err.to_string().contains(&pid), "{err}");
    // Nothing changed: the mount still serves the volatile state.
    write(&m.p("g"), b"y", false);
    drop(open);
    m.crash();
    assert!(m.p("f").exists() && !m.p("g").exists());
}
