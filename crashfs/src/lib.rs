//! crashfs: an in-memory FUSE filesystem that loses, on a simulated power cut, everything that
//! was not made durable. It is hbidx's stand-in for Jepsen's LazyFS: a server runs on the mount,
//! is killed with SIGKILL, [`CrashFs::crash`] drops what a power loss would drop, and the server
//! restarts on what is left.
//!
//! # The model
//!
//! The filesystem holds two trees of inodes (same inode numbers in both):
//!
//! - **volatile**: what processes see; every operation applies here;
//! - **durable**: what survives a crash.
//!
//! [`CrashFs::crash`] unmounts, makes volatile := durable, and mounts again, so the kernel's
//! page and dentry caches are fresh, as after a reboot. What becomes durable, and when, is
//! POSIX's minimum, what careful software must rely on:
//!
//! - `fsync`/`fdatasync` of a file: the durable copy of that inode (data, size, mode, owner,
//!   times) := the volatile one. Its name is *not* made durable by that.
//! - `fsync` of a directory (`fsyncdir`): the directory's durable entries := its volatile
//!   entries. An entry naming an inode with no durable copy yet gets a durable inode with empty
//!   data (an empty directory, for a directory): the name survives, unsynced data does not. So
//!   creates, renames and unlinks become durable only when the affected parents are fsynced.
//! - [`Mode::Lenient`], as LazyFS does: namespace operations (create, mknod, mkdir, symlink,
//!   unlink, rmdir, rename, and chmod/chown) are durable at once, only file data waits for
//!   fsync. For third-party engines that do not fsync directories everywhere.
//!
//! The kernel side: no `direct_io` (tantivy reads segments through mmap, which needs the page
//! cache; the remount on crash empties it), `default_permissions` (the kernel checks modes),
//! `allow_other`, 1 s attribute and entry TTLs. The mount is fuser's pure-Rust one: a mount(2)
//! call, so it needs root but neither libfuse nor fusermount.
//!
//! File data is stored copy-on-write in 64 KiB chunks shared between the two trees, so an fsync
//! copies one pointer per chunk (a 64 MiB journal: 1024 pointers), never the data; a write
//! after an fsync copies only the chunks it touches (a 100-byte append + fdatasync loop copies
//! its 64 KiB chunk each time: ~0.1 ms per iteration through FUSE, measured).
//!
//! # Capacity
//!
//! [`CrashFs::mount_with_capacity`] bounds the volatile tree's file data, so a test can fill
//! the disk as on a small tmpfs (and crash it too). What counts:
//!
//! - each regular file's size rounded up to 4 KiB blocks (as tmpfs counts pages), for every
//!   live inode, including unlinked files still open; holes count as allocated (unlike tmpfs
//!   and ext4, which allocate them on write). Directories, symlinks, names and inodes are free.
//! - A `write` that would take the total past the capacity fails with ENOSPC and changes
//!   nothing, all or nothing per FUSE write request. But the kernel splits a write(2) into
//!   several requests (of up to 1 MiB here, and after a partly written first page it has not
//!   cached), and then returns the bytes of those that succeeded: a write(2) can still end
//!   short, with its first part written. ext4 and tmpfs write what fits and return a short
//!   count too, so a caller looping until ENOSPC fills all three to the last block.
//!   Overwriting within a file's blocks never fails.
//! - `fallocate` and a size-extending truncate (`setattr`) past it fail with ENOSPC too;
//!   shrinking truncates, and unlinks once the last name and handle are gone, give space back.
//! - `statfs` reports the capacity's whole blocks, free = bavail = what is left (no blocks
//!   reserved for root), in 4 KiB blocks; `st_blocks` of a file is its charged size.
//! - The durable tree is not bounded. After a crash, the usage is recomputed from what
//!   survived, which can exceed the capacity (a synced file whose shrinking truncate was not
//!   synced comes back whole): growth then fails until enough is removed.
//!
//! # What it does not model
//!
//! - No torn writes: a crash never leaves part of a write or a sector; each inode's data is its
//!   last fsynced content, exactly.
//! - No reordering or partial persistence within an fsync, and nothing is ever persisted
//!   *without* an fsync (real disks may persist unsynced data early; code that is correct here
//!   may still assume too little, never too much).
//! - Hard links are refused (EPERM). A crash can still leave one inode under two names: a
//!   rename across directories of which only the destination was fsynced (as on ext4).
//! - No xattrs (EOPNOTSUPP), no FIFOs, sockets or devices (EPERM); file locks are the kernel's
//!   local ones. Symlinks work.
//! - One thread serves all FUSE requests, under one lock.
//! - The durable state lives in this process's memory: it survives a crash of the process
//!   *using* the mount, not of the process serving it.
//! - Space: only with [`CrashFs::mount_with_capacity`], and then only file data counts (see
//!   Capacity above); [`CrashFs::mount`] has no limit (statfs reports 4 TiB free). Inodes are
//!   never short (statfs reports a billion free). Files are limited to 1 TiB (EFBIG).
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, SessionACL, TimeOrNow, WriteFlags,
};

/// Size of the copy-on-write unit of file data.
const CHUNK: usize = 64 * 1024;
/// Largest file size: a sparse write far past the end allocates one pointer per chunk of hole.
const MAX_FILE_SIZE: u64 = 1 << 40;
/// Attribute and entry cache lifetime given to the kernel. Short, though nothing but the kernel
/// changes the tree while mounted (a crash remounts, which empties every cache).
const TTL: Duration = Duration::from_secs(1);
const ROOT: u64 = 1;
const NAME_MAX: usize = 255;
const BLOCK: u32 = 4096;

/// When namespace operations become durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// POSIX's minimum: a name is durable only once its parent directory is fsynced.
    Strict,
    /// As LazyFS: namespace operations are durable at once; file data still needs fsync.
    /// Needed by fjall 3.1, which doesn't fsync `keyspaces/` after creating a keyspace's
    /// directory: in Strict mode a crash loses the keyspace and every key in it.
    Lenient,
}

/// What a crash would lose now ([`CrashFs::unsynced`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unsynced {
    /// Bytes passed to write(2) on files since their last fsync (overlapping writes count
    /// twice; truncates and fallocate count in `files` only).
    pub data_bytes: u64,
    /// Files whose data or size changed since their last fsync.
    pub files: u64,
    /// Directory entries whose volatile and durable versions differ (an entry created, removed
    /// or pointing elsewhere), summed over directories. Always 0 in [`Mode::Lenient`]. chmod
    /// and chown awaiting an fsync are not counted.
    pub namespace_changes: u64,
}

/// A mounted crashfs. Dropping it unmounts.
pub struct CrashFs {
    mountpoint: PathBuf,
    /// Canonical form, to recognise paths under the mount in /proc.
    canonical: PathBuf,
    state: Arc<Mutex<State>>,
    /// None only after a failed unmount or remount: the mount's state is then unknown.
    session: Option<BackgroundSession>,
}

impl CrashFs {
    /// Mounts an empty filesystem at `mountpoint` (an existing empty directory), served on a
    /// background thread. No space limit: see [`CrashFs::mount_with_capacity`] for one.
    pub fn mount(mountpoint: &Path, mode: Mode) -> io::Result<CrashFs> {
        Self::mount_inner(mountpoint, mode, u64::MAX)
    }

    /// As [`CrashFs::mount`], on a volume that holds `capacity_bytes` of file data (rounded
    /// down to whole 4 KiB blocks), so it can fill up: growing a file past it fails with
    /// ENOSPC. See "Capacity" in the crate docs for what counts.
    pub fn mount_with_capacity(
        mountpoint: &Path,
        mode: Mode,
        capacity_bytes: u64,
    ) -> io::Result<CrashFs> {
        Self::mount_inner(mountpoint, mode, capacity_bytes)
    }

    fn mount_inner(mountpoint: &Path, mode: Mode, capacity: u64) -> io::Result<CrashFs> {
        if !mountpoint.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("mountpoint {} is not a directory", mountpoint.display()),
            ));
        }
        let canonical = mountpoint.canonicalize()?;
        let state = Arc::new(Mutex::new(State::new(mode, capacity)));
        let session = spawn(mountpoint, &state)?;
        Ok(CrashFs {
            mountpoint: mountpoint.to_path_buf(),
            canonical,
            state,
            session: Some(session),
        })
    }

    /// Power cut: unmounts, drops everything not durable, mounts again at the same place. The
    /// caller ensures no process uses the mount (no open file, mapping or working directory
    /// under it: kill -9 and reap the server first). If one does, fails with `ResourceBusy`
    /// naming the processes, before changing anything, so the caller may retry.
    pub fn crash(&mut self) -> io::Result<()> {
        let users = users(&self.canonical);
        if !users.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "crashfs: {} is in use, not crashing: {}",
                    self.mountpoint.display(),
                    users.join("; ")
                ),
            ));
        }
        let session = self.session.take().ok_or_else(|| {
            io::Error::other("crashfs: not mounted (an earlier unmount or mount failed)")
        })?;
        // On failure the session is gone (fuser consumes it); later calls fail as above rather
        // than mount a second filesystem on top of a live one.
        session.umount_and_join().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "crashfs: unmounting {} failed: {e}",
                    self.mountpoint.display()
                ),
            )
        })?;
        lock(&self.state).crash();
        self.session = Some(spawn(&self.mountpoint, &self.state)?);
        Ok(())
    }

    /// What a crash would lose now.
    pub fn unsynced(&self) -> Unsynced {
        lock(&self.state).unsynced()
    }

    /// The mountpoint.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// Whether FUSE mounting can work here: root (the mount is a mount(2) call, no setuid
    /// fusermount) and a usable /dev/fuse. The error says what is missing.
    pub fn available() -> Result<(), String> {
        let status = std::fs::read_to_string("/proc/self/status")
            .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
        let euid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .ok_or("no Uid: line in /proc/self/status")?;
        if euid != "0" {
            return Err(format!(
                "crashfs mounts FUSE with mount(2), which needs root (effective uid is {euid})"
            ));
        }
        OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(|e| format!("cannot open /dev/fuse: {e}"))?;
        Ok(())
    }
}

impl Drop for CrashFs {
    fn drop(&mut self) {
        if let Some(session) = self.session.take()
            && let Err(e) = session.umount_and_join()
        {
            eprintln!(
                "crashfs: unmounting {} failed: {e}",
                self.mountpoint.display()
            );
        }
    }
}

/// Processes using something under `mountpoint` (open file, mapping, working or root
/// directory), as "pid (command): path", from /proc: what would make the unmount fail with
/// EBUSY, named, so a test's failure says which process the caller forgot to reap.
fn users(mountpoint: &Path) -> Vec<String> {
    let under = |p: &Path| p.starts_with(mountpoint);
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in procs.flatten() {
        let pid = entry.file_name();
        if !pid.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let dir = entry.path();
        let mut paths: Vec<PathBuf> = ["cwd", "root"]
            .iter()
            .filter_map(|l| std::fs::read_link(dir.join(l)).ok())
            .collect();
        if let Ok(fds) = std::fs::read_dir(dir.join("fd")) {
            paths.extend(
                fds.flatten()
                    .filter_map(|fd| std::fs::read_link(fd.path()).ok()),
            );
        }
        if let Ok(maps) = std::fs::read_to_string(dir.join("maps")) {
            // The path is the last field and the only one starting with '/'.
            paths.extend(
                maps.lines()
                    .filter_map(|l| l.find('/').map(|i| &l[i..]))
                    .map(|p| PathBuf::from(p.trim_end_matches(" (deleted)"))),
            );
        }
        if let Some(p) = paths.into_iter().find(|p| under(p)) {
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            found.push(format!(
                "pid {} ({}): {}",
                pid.to_string_lossy(),
                comm.trim(),
                p.display()
            ));
        }
    }
    found
}

fn spawn(mountpoint: &Path, state: &Arc<Mutex<State>>) -> io::Result<BackgroundSession> {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("crashfs".into()),
        MountOption::Subtype("crashfs".into()),
        // The kernel checks permission bits, so a chmod 000 file is refused as on a disk.
        MountOption::DefaultPermissions,
    ];
    // allow_other: the server under test may run as another user than the test.
    config.acl = SessionACL::All;
    fuser::spawn_mount(
        Fs {
            state: state.clone(),
        },
        mountpoint,
        &config,
    )
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic in one FUSE request must not wedge every later one.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// File data: copy-on-write chunks.

type Chunk = Arc<[u8; CHUNK]>;

#[derive(Clone, Default)]
struct Data {
    /// `ceil(len / CHUNK)` chunks; bytes past `len` in the last chunk are zero.
    chunks: Vec<Chunk>,
    len: u64,
}

fn zero_chunk() -> Chunk {
    // Built on the heap: a 64 KiB array on the stack of a FUSE thread is avoidable.
    let boxed: Box<[u8; CHUNK]> = vec![0u8; CHUNK]
        .into_boxed_slice()
        .try_into()
        .expect("CHUNK bytes");
    Arc::from(boxed)
}

impl Data {
    fn read(&self, offset: u64, size: usize) -> Vec<u8> {
        if offset >= self.len {
            return Vec::new();
        }
        let end = (offset + size as u64).min(self.len);
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut pos = offset;
        while pos < end {
            let (i, within) = ((pos / CHUNK as u64) as usize, (pos % CHUNK as u64) as usize);
            let n = ((CHUNK - within) as u64).min(end - pos) as usize;
            out.extend_from_slice(&self.chunks[i][within..within + n]);
            pos += n as u64;
        }
        out
    }

    fn write(&mut self, offset: u64, data: &[u8], zero: &Chunk) {
        let end = offset + data.len() as u64;
        if end > self.len {
            self.set_len(end, zero);
        }
        let mut pos = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let (i, within) = ((pos / CHUNK as u64) as usize, (pos % CHUNK as u64) as usize);
            let n = (CHUNK - within).min(rest.len());
            // Copies the chunk only if the durable tree (or a hole) shares it.
            Arc::make_mut(&mut self.chunks[i])[within..within + n].copy_from_slice(&rest[..n]);
            pos += n as u64;
            rest = &rest[n..];
        }
    }

    fn set_len(&mut self, len: u64, zero: &Chunk) {
        let chunks = len.div_ceil(CHUNK as u64) as usize;
        if len < self.len {
            self.chunks.truncate(chunks);
            // Zero the cut-off tail of the last chunk, so a later extension reads zeros.
            let within = (len % CHUNK as u64) as usize;
            if within != 0 {
                let last = self.chunks.last_mut().expect("a partial last chunk");
                Arc::make_mut(last)[within..].fill(0);
            }
        } else {
            // Holes share one zero chunk until written.
            self.chunks.resize(chunks, zero.clone());
        }
        self.len = len;
    }
}

// ---------------------------------------------------------------------------------------------
// Inodes and the two trees.

#[derive(Clone, Default)]
struct Dir {
    parent: u64,
    /// name -> (inode, readdir cookie). Cookies only grow, so a readdir resumed after creates
    /// and unlinks neither repeats nor skips a surviving entry.
    entries: BTreeMap<OsString, (u64, u64)>,
    by_cookie: BTreeMap<u64, OsString>,
    next_cookie: u64,
}

/// readdir cookies 1 and 2 are `.` and `..`.
const FIRST_COOKIE: u64 = 3;

impl Dir {
    fn new(parent: u64) -> Dir {
        Dir {
            parent,
            next_cookie: FIRST_COOKIE,
            ..Dir::default()
        }
    }

    fn get(&self, name: &OsStr) -> Option<u64> {
        self.entries.get(name).map(|&(ino, _)| ino)
    }

    /// Adds or replaces `name`; returns the inode it named before.
    fn insert(&mut self, name: &OsStr, ino: u64) -> Option<u64> {
        let old = self.remove(name);
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.entries.insert(name.to_owned(), (ino, cookie));
        self.by_cookie.insert(cookie, name.to_owned());
        old
    }

    fn remove(&mut self, name: &OsStr) -> Option<u64> {
        let (ino, cookie) = self.entries.remove(name)?;
        self.by_cookie.remove(&cookie);
        Some(ino)
    }
}

#[derive(Clone)]
enum Kind {
    File(Data),
    Dir(Dir),
    Symlink(PathBuf),
}

#[derive(Clone)]
struct Node {
    kind: Kind,
    perm: u16,
    uid: u32,
    gid: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
    /// Directory entries naming this inode in the same tree.
    nlink: u32,
    /// Volatile tree only: bytes written since the last fsync, and whether data or size changed.
    dirty_bytes: u64,
    dirty: bool,
}

impl Node {
    fn new(kind: Kind, perm: u16, uid: u32, gid: u32) -> Node {
        let now = SystemTime::now();
        Node {
            kind,
            perm,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
            nlink: 0,
            dirty_bytes: 0,
            dirty: false,
        }
    }

    /// A durable copy with the same identity and metadata but none of the content: what a name
    /// made durable before its inode's data leaves behind.
    fn shell(&self) -> Node {
        let kind = match &self.kind {
            Kind::File(_) => Kind::File(Data::default()),
            Kind::Dir(d) => Kind::Dir(Dir::new(d.parent)),
            Kind::Symlink(target) => Kind::Symlink(target.clone()),
        };
        Node {
            kind,
            nlink: 0,
            dirty_bytes: 0,
            dirty: false,
            ..self.clone()
        }
    }

    fn file_type(&self) -> FileType {
        match self.kind {
            Kind::File(_) => FileType::RegularFile,
            Kind::Dir(_) => FileType::Directory,
            Kind::Symlink(_) => FileType::Symlink,
        }
    }

    fn attr(&self, ino: u64) -> FileAttr {
        let size = match &self.kind {
            Kind::File(d) => d.len,
            Kind::Dir(_) => u64::from(BLOCK),
            Kind::Symlink(t) => t.as_os_str().len() as u64,
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            // In 512-byte units, of the 4 KiB blocks charged against the capacity (files; the
            // rest charge nothing but report their size), so du agrees with df.
            blocks: match self.kind {
                Kind::File(_) => charge(size) / 512,
                _ => size.div_ceil(512),
            },
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            crtime: self.ctime,
            kind: self.file_type(),
            perm: self.perm,
            // 1 for directories: "subdirectory count unknown", so find(1) doesn't skip any.
            nlink: match self.kind {
                Kind::Dir(_) => 1,
                _ => self.nlink.max(1),
            },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: BLOCK,
            flags: 0,
        }
    }

    fn dir(&self) -> Result<&Dir, Errno> {
        match &self.kind {
            Kind::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self) -> Result<&mut Dir, Errno> {
        match &mut self.kind {
            Kind::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }
}

type Tree = HashMap<u64, Node>;

struct State {
    mode: Mode,
    vol: Tree,
    dur: Tree,
    /// The kernel's lookup count per volatile inode: an unlinked inode lives on until forgotten
    /// (open files of deleted names still read and write it).
    lookups: HashMap<u64, u64>,
    /// Never reused, across crashes too, so an inode number names one file for the whole run.
    next_ino: u64,
    zero: Chunk,
    /// Bytes the volatile tree's file data may occupy ([`charge`]); `u64::MAX`: no limit.
    capacity: u64,
    /// What it occupies now: [`charge`] summed over every volatile file, including unlinked
    /// ones still open. Kept up to date by each size change, so statfs and the ENOSPC check
    /// are O(1).
    used: u64,
}

type Res<T> = Result<T, Errno>;

fn check_name(name: &OsStr) -> Res<()> {
    if name.len() > NAME_MAX {
        Err(Errno::ENAMETOOLONG)
    } else {
        Ok(())
    }
}

impl State {
    fn new(mode: Mode, capacity: u64) -> State {
        let mut root = Node::new(Kind::Dir(Dir::new(ROOT)), 0o755, 0, 0);
        root.nlink = 1;
        let vol: Tree = [(ROOT, root)].into();
        State {
            mode,
            dur: vol.clone(),
            vol,
            lookups: HashMap::new(),
            next_ino: ROOT + 1,
            zero: zero_chunk(),
            capacity,
            used: 0,
        }
    }

    /// A file of `old_len` bytes becomes `new_len` bytes long: accounts for it, or fails with
    /// ENOSPC, changing nothing, if that would take the volume past its capacity. Shrinking
    /// always succeeds; growing within the blocks the file already has is free.
    fn resize(&mut self, old_len: u64, new_len: u64) -> Res<()> {
        let used = self.used - charge(old_len) + charge(new_len);
        if new_len > old_len && used > self.capacity {
            return Err(Errno::ENOSPC);
        }
        self.used = used;
        Ok(())
    }

    /// The current length of file `ino` (ENOENT, or `not_file` for a directory or symlink).
    fn file_len(&self, ino: u64, not_file: Errno) -> Res<u64> {
        match &self.node(ino)?.kind {
            Kind::File(d) => Ok(d.len),
            _ => Err(not_file),
        }
    }

    fn node(&self, ino: u64) -> Res<&Node> {
        self.vol.get(&ino).ok_or(Errno::ENOENT)
    }

    fn node_mut(&mut self, ino: u64) -> Res<&mut Node> {
        self.vol.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    fn looked_up(&mut self, ino: u64) {
        *self.lookups.entry(ino).or_default() += 1;
    }

    fn forget(&mut self, ino: u64, n: u64) {
        if let Some(count) = self.lookups.get_mut(&ino) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                self.lookups.remove(&ino);
                self.maybe_drop(ino);
            }
        }
    }

    /// Drops a volatile inode no name and no kernel reference keeps, then its durable copy if
    /// no durable name keeps that.
    fn maybe_drop(&mut self, ino: u64) {
        if ino == ROOT {
            return;
        }
        if let Some(node) = self.vol.get(&ino)
            && node.nlink == 0
            && !self.lookups.contains_key(&ino)
        {
            // Its last name and handle are gone: its blocks are free again.
            if let Some(Node {
                kind: Kind::File(d),
                ..
            }) = self.vol.remove(&ino)
            {
                self.used -= charge(d.len);
            }
        }
        self.maybe_drop_durable(ino);
    }

    fn maybe_drop_durable(&mut self, ino: u64) {
        if ino == ROOT || self.vol.contains_key(&ino) {
            return;
        }
        let Some(node) = self.dur.get(&ino) else {
            return;
        };
        if node.nlink != 0 {
            return;
        }
        let node = self.dur.remove(&ino).expect("present");
        // Unreachable directory: its durable entries no longer keep their inodes either.
        if let Kind::Dir(d) = node.kind {
            for (child, _) in d.entries.into_values() {
                if let Some(c) = self.dur.get_mut(&child) {
                    c.nlink = c.nlink.saturating_sub(1);
                }
                self.maybe_drop_durable(child);
            }
        }
    }

    fn lookup(&mut self, parent: u64, name: &OsStr) -> Res<FileAttr> {
        let ino = self.node(parent)?.dir()?.get(name).ok_or(Errno::ENOENT)?;
        let attr = self.node(ino)?.attr(ino);
        self.looked_up(ino);
        Ok(attr)
    }

    /// Adds a new inode under `parent/name` (create, mknod, mkdir, symlink).
    fn add(
        &mut self,
        parent: u64,
        name: &OsStr,
        kind: Kind,
        perm: u16,
        owner: (u32, u32),
    ) -> Res<u64> {
        check_name(name)?;
        let dir = self.node(parent)?.dir()?;
        if dir.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let mut node = Node::new(kind, perm, owner.0, owner.1);
        node.nlink = 1;
        if let Kind::Dir(d) = &mut node.kind {
            d.parent = parent;
        }
        self.vol.insert(ino, node);
        let p = self.node_mut(parent)?;
        p.dir_mut()?.insert(name, ino);
        touch(p);
        self.looked_up(ino);
        if self.mode == Mode::Lenient {
            self.sync_entry(parent, name);
        }
        Ok(ino)
    }

    fn remove(&mut self, parent: u64, name: &OsStr, want_dir: bool) -> Res<()> {
        let ino = self.node(parent)?.dir()?.get(name).ok_or(Errno::ENOENT)?;
        let node = self.node(ino)?;
        match (&node.kind, want_dir) {
            (Kind::Dir(d), true) if !d.entries.is_empty() => return Err(Errno::ENOTEMPTY),
            (Kind::Dir(_), true) => {}
            (Kind::Dir(_), false) => return Err(Errno::EISDIR),
            (_, true) => return Err(Errno::ENOTDIR),
            (_, false) => {}
        }
        let p = self.node_mut(parent)?;
        p.dir_mut()?.remove(name);
        touch(p);
        self.unlinked(ino);
        if self.mode == Mode::Lenient {
            self.sync_entry(parent, name);
        }
        Ok(())
    }

    /// One volatile name of `ino` is gone.
    fn unlinked(&mut self, ino: u64) {
        if let Some(n) = self.vol.get_mut(&ino) {
            n.nlink = n.nlink.saturating_sub(1);
            n.ctime = SystemTime::now();
        }
        self.maybe_drop(ino);
    }

    fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Res<()> {
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            // RENAME_EXCHANGE and RENAME_WHITEOUT.
            return Err(Errno::EINVAL);
        }
        check_name(newname)?;
        let ino = self.node(parent)?.dir()?.get(name).ok_or(Errno::ENOENT)?;
        let target = self.node(newparent)?.dir()?.get(newname);
        if let Some(t) = target {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            if t == ino {
                // Same inode (same name, or a hard link): rename(2) does nothing.
                return Ok(());
            }
            let src_dir = matches!(self.node(ino)?.kind, Kind::Dir(_));
            match (&self.node(t)?.kind, src_dir) {
                (Kind::Dir(d), true) if !d.entries.is_empty() => return Err(Errno::ENOTEMPTY),
                (Kind::Dir(_), true) => {}
                (Kind::Dir(_), false) => return Err(Errno::EISDIR),
                (_, true) => return Err(Errno::ENOTDIR),
                (_, false) => {}
            }
        }
        if matches!(self.node(ino)?.kind, Kind::Dir(_)) {
            // A directory can't move under itself.
            let mut at = newparent;
            loop {
                if at == ino {
                    return Err(Errno::EINVAL);
                }
                if at == ROOT {
                    break;
                }
                at = self.node(at)?.dir()?.parent;
            }
        }
        let p = self.node_mut(parent)?;
        p.dir_mut()?.remove(name);
        touch(p);
        let np = self.node_mut(newparent)?;
        np.dir_mut()?.insert(newname, ino);
        touch(np);
        let n = self.node_mut(ino)?;
        n.ctime = SystemTime::now();
        if let Kind::Dir(d) = &mut n.kind {
            d.parent = newparent;
        }
        if let Some(t) = target {
            self.unlinked(t);
        }
        if self.mode == Mode::Lenient {
            // The new name first: the inode keeps a durable name throughout.
            self.sync_entry(newparent, newname);
            self.sync_entry(parent, name);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &mut self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
    ) -> Res<FileAttr> {
        let zero = self.zero.clone();
        if let Some(size) = size
            && let Ok(old) = self.file_len(ino, Errno::EISDIR)
            && size <= MAX_FILE_SIZE
        {
            // Before anything changes, so a truncate past the capacity changes nothing (not
            // even the mode or times given with it). Holes count as allocated: see the docs.
            self.resize(old, size)?;
        }
        let node = self.node_mut(ino)?;
        let now = SystemTime::now();
        if let Some(size) = size {
            match &mut node.kind {
                Kind::File(data) => {
                    if size > MAX_FILE_SIZE {
                        return Err(Errno::EFBIG);
                    }
                    data.set_len(size, &zero);
                    node.dirty = true;
                    node.mtime = now;
                }
                Kind::Dir(_) => return Err(Errno::EISDIR),
                Kind::Symlink(_) => return Err(Errno::EINVAL),
            }
        }
        if let Some(mode) = mode {
            node.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = uid {
            node.uid = uid;
        }
        if let Some(gid) = gid {
            node.gid = gid;
        }
        let resolve = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => t,
            TimeOrNow::Now => now,
        };
        if let Some(t) = atime {
            node.atime = resolve(t);
        }
        if let Some(t) = mtime {
            node.mtime = resolve(t);
        }
        node.ctime = now;
        let attr = node.attr(ino);
        let owner_and_mode = (node.perm, node.uid, node.gid);
        // chmod/chown are namespace-like metadata: durable at once in Lenient mode.
        if self.mode == Mode::Lenient
            && (mode.is_some() || uid.is_some() || gid.is_some())
            && let Some(d) = self.dur.get_mut(&ino)
        {
            (d.perm, d.uid, d.gid) = owner_and_mode;
        }
        Ok(attr)
    }

    fn write(&mut self, ino: u64, offset: u64, data: &[u8]) -> Res<u32> {
        if offset.saturating_add(data.len() as u64) > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let zero = self.zero.clone();
        let old = self.file_len(ino, Errno::EISDIR)?;
        // All or nothing: a write that would go past the capacity fails whole, leaving the
        // file as it was (the kernel then returns ENOSPC, or the bytes of the earlier requests
        // if it split a big write(2) into several).
        self.resize(old, old.max(offset + data.len() as u64))?;
        let node = self.node_mut(ino)?;
        let Kind::File(d) = &mut node.kind else {
            return Err(Errno::EISDIR);
        };
        d.write(offset, data, &zero);
        node.dirty_bytes += data.len() as u64;
        node.dirty = true;
        let now = SystemTime::now();
        node.mtime = now;
        node.ctime = now;
        Ok(data.len() as u32)
    }

    fn fallocate(&mut self, ino: u64, offset: u64, length: u64, mode: i32) -> Res<()> {
        if mode != 0 {
            // Punching holes, zeroing ranges, KEEP_SIZE: not needed by the engines we test.
            return Err(Errno::EOPNOTSUPP);
        }
        let end = offset.saturating_add(length);
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let zero = self.zero.clone();
        let old = self.file_len(ino, Errno::ENODEV)?;
        self.resize(old, old.max(end))?;
        let node = self.node_mut(ino)?;
        let Kind::File(d) = &mut node.kind else {
            return Err(Errno::ENODEV);
        };
        if end > d.len {
            d.set_len(end, &zero);
            node.dirty = true;
            node.ctime = SystemTime::now();
        }
        Ok(())
    }

    /// fsync of a file: its durable copy := the volatile inode (content and metadata), names
    /// untouched.
    fn sync_file(&mut self, ino: u64) -> Res<()> {
        let node = self.node_mut(ino)?;
        if let Kind::Dir(_) = node.kind {
            // fsync(2) of a directory reaches us as fsyncdir; should it come as fsync, same thing.
            self.sync_dir(ino);
            return Ok(());
        }
        node.dirty_bytes = 0;
        node.dirty = false;
        let mut copy = node.clone();
        copy.nlink = self.dur.get(&ino).map_or(0, |d| d.nlink);
        self.dur.insert(ino, copy);
        Ok(())
    }

    /// Lenient mode, after a namespace operation: makes `parent/name` durable as it is now, in
    /// O(log n) (a whole-directory sync per create would be quadratic in big directories).
    fn sync_entry(&mut self, parent: u64, name: &OsStr) {
        let Some(Kind::Dir(vdir)) = self.vol.get(&parent).map(|n| &n.kind) else {
            return;
        };
        let now = vdir.get(name);
        let Some(Kind::Dir(ddir)) = self.dur.get_mut(&parent).map(|n| &mut n.kind) else {
            // The parent itself is not durable (can't happen in Lenient mode): sync it whole.
            return self.sync_dir(parent);
        };
        let before = ddir.get(name);
        if before == now {
            return;
        }
        match now {
            Some(ino) => ddir.insert(name, ino),
            None => ddir.remove(name),
        };
        self.relinked(
            parent,
            now.into_iter().collect(),
            before.into_iter().collect(),
        );
    }

    /// fsyncdir: the directory's durable entries := its volatile entries.
    fn sync_dir(&mut self, ino: u64) {
        let Some(node) = self.vol.get(&ino) else {
            return;
        };
        let Kind::Dir(vdir) = &node.kind else {
            return;
        };
        let mut copy = node.clone();
        copy.nlink = self.dur.get(&ino).map_or(0, |d| d.nlink);
        let old = match self.dur.get(&ino).map(|d| &d.kind) {
            Some(Kind::Dir(d)) => d.entries.clone(),
            _ => BTreeMap::new(),
        };
        let added: Vec<u64> = vdir
            .entries
            .iter()
            .filter(|(name, (i, _))| old.get(*name).map(|e| e.0) != Some(*i))
            .map(|(_, (i, _))| *i)
            .collect();
        let removed: Vec<u64> = old
            .iter()
            .filter(|(name, (i, _))| vdir.entries.get(*name).map(|e| e.0) != Some(*i))
            .map(|(_, (i, _))| *i)
            .collect();
        self.dur.insert(ino, copy);
        self.relinked(ino, added, removed);
    }

    /// Durable names in `dir` now name `added` and no longer name `removed`: link counts, and
    /// durable shells for inodes named before their data was ever synced.
    fn relinked(&mut self, dir: u64, added: Vec<u64>, removed: Vec<u64>) {
        for child in added {
            if !self.dur.contains_key(&child)
                && let Some(v) = self.vol.get(&child)
            {
                self.dur.insert(child, v.shell());
            }
            if let Some(c) = self.dur.get_mut(&child) {
                c.nlink += 1;
                if let Kind::Dir(d) = &mut c.kind {
                    d.parent = dir;
                }
            }
        }
        // After the additions: an inode moved within the directory must not be dropped.
        for child in removed {
            if let Some(c) = self.dur.get_mut(&child) {
                c.nlink = c.nlink.saturating_sub(1);
            }
            self.maybe_drop_durable(child);
        }
    }

    /// Power cut: volatile := durable, minus what no durable name reaches.
    fn crash(&mut self) {
        let mut tree = std::mem::take(&mut self.dur);
        for n in tree.values_mut() {
            n.nlink = 0;
        }
        let mut reached: Tree = HashMap::new();
        let mut root = tree.remove(&ROOT).expect("durable root");
        root.nlink = 1;
        let mut stack = vec![(ROOT, root)];
        while let Some((ino, node)) = stack.pop() {
            if let Kind::Dir(d) = &node.kind {
                for &(child, _) in d.entries.values() {
                    if let Some(n) = reached.get_mut(&child) {
                        n.nlink += 1;
                    } else if let Some(mut n) = tree.remove(&child) {
                        n.nlink = 1;
                        if let Kind::Dir(cd) = &mut n.kind {
                            cd.parent = ino;
                        }
                        stack.push((child, n));
                    } else if let Some((_, n)) = stack.iter_mut().find(|(i, _)| *i == child) {
                        n.nlink += 1;
                    }
                }
            }
            reached.insert(ino, node);
        }
        self.dur = reached.clone();
        self.vol = reached;
        self.lookups.clear();
        // What survived may even exceed the capacity (a synced file whose truncate was not
        // synced comes back whole, next to a synced filler): growth then fails until files
        // are removed, as on a disk that is over-full.
        self.used = usage(&self.vol);
    }

    fn unsynced(&self) -> Unsynced {
        let mut u = Unsynced::default();
        for (ino, node) in &self.vol {
            match &node.kind {
                Kind::File(_) => {
                    u.data_bytes += node.dirty_bytes;
                    u.files += u64::from(node.dirty);
                }
                Kind::Dir(v) => {
                    let empty = BTreeMap::new();
                    let d = match self.dur.get(ino).map(|d| &d.kind) {
                        Some(Kind::Dir(d)) => &d.entries,
                        _ => &empty,
                    };
                    let differ =
                        |a: &BTreeMap<OsString, (u64, u64)>, b: &BTreeMap<OsString, (u64, u64)>| {
                            a.iter()
                                .filter(|(name, (i, _))| b.get(*name).map(|e| e.0) != Some(*i))
                                .count() as u64
                        };
                    // A replaced entry counts once.
                    u.namespace_changes += differ(&v.entries, d)
                        + d.keys().filter(|n| !v.entries.contains_key(*n)).count() as u64;
                }
                Kind::Symlink(_) => {}
            }
        }
        u
    }
}

/// Space a file of `len` bytes takes against the capacity: whole 4 KiB blocks, as tmpfs's
/// pages, holes included. (Memory really goes by 64 KiB chunk, holes sharing one; the block is
/// the unit statfs reports, so `df` and the ENOSPC threshold agree to the byte.)
fn charge(len: u64) -> u64 {
    len.div_ceil(u64::from(BLOCK)) * u64::from(BLOCK)
}

/// [`charge`] summed over a tree's files: how [`State::used`] is recomputed after a crash.
fn usage(tree: &Tree) -> u64 {
    tree.values()
        .map(|n| match &n.kind {
            Kind::File(d) => charge(d.len),
            _ => 0,
        })
        .sum()
}

/// A directory's content changed.
fn touch(node: &mut Node) {
    let now = SystemTime::now();
    node.mtime = now;
    node.ctime = now;
}

// ---------------------------------------------------------------------------------------------
// The FUSE side: each request locks the state, applies itself, replies.

struct Fs {
    state: Arc<Mutex<State>>,
}

impl Fs {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Adds `name` of `kind` under `parent`, owned by the caller, and replies with its entry:
    /// mknod/create of a file, mkdir and symlink differ only in the kind and mode.
    fn reply_added(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: Kind,
        perm: u16,
        reply: ReplyEntry,
    ) {
        let mut s = self.state();
        let r = s
            .add(parent.0, name, kind, perm, (req.uid(), req.gid()))
            .and_then(|ino| Ok(s.node(ino)?.attr(ino)));
        reply_entry(reply, r);
    }
}

fn reply_entry(reply: ReplyEntry, r: Res<FileAttr>) {
    match r {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(reply: ReplyEmpty, r: Res<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn file_perm(mode: u32, umask: u32) -> u16 {
    (mode & !umask & 0o7777) as u16
}

impl Filesystem for Fs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Up to 1 MiB per write request (the kernel caps it at its max_pages anyway).
        let _ = config.set_max_write(1 << 20);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.state().lookup(parent.0, name);
        reply_entry(reply, r);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.state().forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.state().node(ino.0) {
            Ok(n) => reply.attr(&TTL, &n.attr(ino.0)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self
            .state()
            .setattr(ino.0, mode, uid, gid, size, atime, mtime)
        {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.state().node(ino.0).map(|n| &n.kind) {
            Ok(Kind::Symlink(t)) => reply.data(t.as_os_str().as_encoded_bytes()),
            Ok(_) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG && mode & libc::S_IFMT != 0 {
            // FIFOs, sockets, devices: not needed by storage engines.
            return reply.error(Errno::EPERM);
        }
        let kind = Kind::File(Data::default());
        self.reply_added(req, parent, name, kind, file_perm(mode, umask), reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let kind = Kind::Dir(Dir::new(parent.0));
        self.reply_added(req, parent, name, kind, file_perm(mode, umask), reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.state().remove(parent.0, name, false);
        reply_empty(reply, r);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.state().remove(parent.0, name, true);
        reply_empty(reply, r);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let kind = Kind::Symlink(target.to_path_buf());
        self.reply_added(req, parent, link_name, kind, 0o777, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self
            .state()
            .rename(parent.0, name, newparent.0, newname, flags);
        reply_empty(reply, r);
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        // Hard links: what link(2) returns on filesystems without them.
        reply.error(Errno::EPERM);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.state().node(ino.0).map(|n| &n.kind) {
            Ok(Kind::Dir(_)) if flags.0 & libc::O_ACCMODE != libc::O_RDONLY => {
                reply.error(Errno::EISDIR)
            }
            // Stateless handles; no FOPEN_DIRECT_IO: mmap needs the page cache.
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let s = self.state();
        match s.node(ino.0).map(|n| &n.kind) {
            Ok(Kind::File(d)) => {
                let bytes = d.read(offset, size as usize);
                drop(s);
                reply.data(&bytes);
            }
            Ok(_) => reply.error(Errno::EISDIR),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.state().write(ino.0, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) makes nothing durable.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // fdatasync too copies the metadata: harmless, and size must be durable for it anyway.
        let r = self.state().sync_file(ino.0);
        reply_empty(reply, r);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.state().node(ino.0).and_then(Node::dir) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let s = self.state();
        let dir = match s.node(ino.0).and_then(Node::dir) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        // The offset given with each entry is the cookie to resume after it.
        if offset < 1 && reply.add(ino, 1, FileType::Directory, ".") {
            return reply.ok();
        }
        if offset < 2 && reply.add(INodeNo(dir.parent), 2, FileType::Directory, "..") {
            return reply.ok();
        }
        for (&cookie, name) in dir.by_cookie.range(offset.max(FIRST_COOKIE - 1) + 1..) {
            let child = dir.entries[name].0;
            let kind = s
                .vol
                .get(&child)
                .map_or(FileType::RegularFile, Node::file_type);
            if reply.add(INodeNo(child), cookie, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut s = self.state();
        match s.node(ino.0).and_then(Node::dir) {
            Ok(_) => {
                s.sync_dir(ino.0);
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.state();
        let block = u64::from(BLOCK);
        // Without a capacity, plenty of space: 4 TiB in 4 KiB blocks (and always a billion
        // inodes). With one, its whole blocks; free is what the ENOSPC check allows, so a
        // program that sizes its writes by statfs gets exactly what it was told. No blocks are
        // reserved for root: bavail = bfree.
        let (blocks, free) = if s.capacity == u64::MAX {
            (1 << 30, 1 << 30)
        } else {
            (
                s.capacity / block,
                s.capacity.saturating_sub(s.used) / block,
            )
        };
        drop(s);
        reply.statfs(
            blocks,
            free,
            free,
            1 << 30,
            1 << 30,
            BLOCK,
            NAME_MAX as u32,
            BLOCK,
        );
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // default_permissions: the kernel checks the mode bits itself.
        let r = self.state().node(ino.0).map(|_| ());
        reply_empty(reply, r);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut s = self.state();
        let existing = s.node(parent.0).and_then(Node::dir).map(|d| d.get(name));
        let r = match existing {
            Err(e) => Err(e),
            // Lost a race with another creator: O_EXCL fails, plain O_CREAT opens.
            Ok(Some(_)) if flags & libc::O_EXCL != 0 => Err(Errno::EEXIST),
            Ok(Some(ino)) => match s.node(ino).map(|n| &n.kind) {
                Ok(Kind::File(_)) => {
                    s.looked_up(ino);
                    if flags & libc::O_TRUNC != 0 {
                        s.setattr(ino, None, None, None, Some(0), None, None)
                    } else {
                        s.node(ino).map(|n| n.attr(ino))
                    }
                }
                Ok(_) => Err(Errno::EISDIR),
                Err(e) => Err(e),
            },
            Ok(None) => s
                .add(
                    parent.0,
                    name,
                    Kind::File(Data::default()),
                    file_perm(mode, umask),
                    (req.uid(), req.gid()),
                )
                .and_then(|ino| Ok(s.node(ino)?.attr(ino))),
        };
        match r {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self.state().fallocate(ino.0, offset, length, mode);
        reply_empty(reply, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_writes_reads_and_truncates_across_chunks() {
        let zero = zero_chunk();
        let mut d = Data::default();
        d.write(CHUNK as u64 - 2, b"abcd", &zero);
        assert_eq!(d.len, CHUNK as u64 + 2);
        assert_eq!(d.read(CHUNK as u64 - 3, 10), b"\0abcd");
        d.set_len(CHUNK as u64 - 1, &zero);
        d.set_len(CHUNK as u64 + 10, &zero);
        assert_eq!(
            d.read(CHUNK as u64 - 3, 6),
            b"\0a\0\0\0\0",
            "a shrink zeroes the cut tail"
        );
        // Sparse write: the hole reads as zeros.
        d.write(5 * CHUNK as u64, b"z", &zero);
        assert_eq!(d.read(3 * CHUNK as u64, 4), vec![0; 4]);
        assert_eq!(d.read(5 * CHUNK as u64, 4), b"z");
    }

    fn file(s: &mut State, parent: u64, name: &str) -> u64 {
        s.add(
            parent,
            name.as_ref(),
            Kind::File(Data::default()),
            0o644,
            (0, 0),
        )
        .unwrap()
    }

    fn names(tree: &Tree, dir: u64) -> Vec<String> {
        match &tree[&dir].kind {
            Kind::Dir(d) => d
                .entries
                .keys()
                .map(|n| n.to_string_lossy().into())
                .collect(),
            _ => panic!("not a directory"),
        }
    }

    #[test]
    fn rename_flags_and_errors() {
        let mut s = State::new(Mode::Strict, u64::MAX);
        let a = file(&mut s, ROOT, "a");
        file(&mut s, ROOT, "b");
        let d = s
            .add(ROOT, "d".as_ref(), Kind::Dir(Dir::new(ROOT)), 0o755, (0, 0))
            .unwrap();
        s.lookups.clear();
        let none = RenameFlags::empty();
        let noreplace = RenameFlags::RENAME_NOREPLACE;
        let r = |s: &mut State, from: &str, to_dir: u64, to: &str, f| {
            s.rename(ROOT, from.as_ref(), to_dir, to.as_ref(), f)
        };
        assert_eq!(r(&mut s, "a", ROOT, "b", noreplace), Err(Errno::EEXIST));
        assert_eq!(
            r(&mut s, "a", ROOT, "b", RenameFlags::RENAME_EXCHANGE),
            Err(Errno::EINVAL)
        );
        assert_eq!(r(&mut s, "a", ROOT, "d", none), Err(Errno::EISDIR));
        assert_eq!(r(&mut s, "d", ROOT, "a", none), Err(Errno::ENOTDIR));
        assert_eq!(r(&mut s, "nope", ROOT, "x", none), Err(Errno::ENOENT));
        assert_eq!(r(&mut s, "d", d, "inside", none), Err(Errno::EINVAL));
        assert_eq!(r(&mut s, "a", ROOT, "c", noreplace), Ok(()));
        assert_eq!(names(&s.vol, ROOT), ["b", "c", "d"]);
        // Replacing drops the replaced inode (no kernel reference in this unit test).
        let b = s.vol[&ROOT].dir().unwrap().get("b".as_ref()).unwrap();
        assert_eq!(r(&mut s, "c", ROOT, "b", none), Ok(()));
        assert!(!s.vol.contains_key(&b));
        assert!(s.vol.contains_key(&a));
    }

    #[test]
    fn durable_copies_follow_names_and_syncs() {
        let mut s = State::new(Mode::Strict, u64::MAX);
        let a = file(&mut s, ROOT, "a");
        // No kernel in this unit test: nothing holds the inode but its name.
        s.lookups.clear();
        s.write(a, 0, b"hello").unwrap();
        assert_eq!(s.unsynced().namespace_changes, 1);
        s.sync_dir(ROOT);
        // Named, but its data never synced: an empty shell.
        match &s.dur[&a].kind {
            Kind::File(d) => assert_eq!(d.len, 0),
            _ => panic!(),
        }
        s.sync_file(a).unwrap();
        s.remove(ROOT, "a".as_ref(), false).unwrap();
        assert!(!s.vol.contains_key(&a));
        assert!(s.dur.contains_key(&a), "the durable name keeps it");
        s.sync_dir(ROOT);
        assert!(!s.dur.contains_key(&a));
        assert_eq!(s.unsynced(), Unsynced::default());
    }

    #[test]
    fn crash_keeps_what_durable_names_reach() {
        let mut s = State::new(Mode::Lenient, u64::MAX);
        let d = s
            .add(ROOT, "d".as_ref(), Kind::Dir(Dir::new(ROOT)), 0o755, (0, 0))
            .unwrap();
        let f = file(&mut s, d, "f");
        s.write(f, 0, b"x").unwrap();
        let g = file(&mut s, d, "g");
        s.write(g, 0, b"y").unwrap();
        s.sync_file(g).unwrap();
        s.crash();
        assert_eq!(names(&s.vol, d), ["f", "g"]);
        match (&s.vol[&f].kind, &s.vol[&g].kind) {
            (Kind::File(f), Kind::File(g)) => {
                assert_eq!(f.len, 0);
                assert_eq!(g.read(0, 10), b"y");
            }
            _ => panic!(),
        }
        assert_eq!(s.vol[&g].nlink, 1);
        let next = s.next_ino;
        assert_eq!(
            file(&mut s, ROOT, "new"),
            next,
            "inode numbers are never reused"
        );
    }

    #[test]
    fn fsync_copies_pointers_not_data() {
        let mut s = State::new(Mode::Strict, u64::MAX);
        let f = file(&mut s, ROOT, "journal");
        let mut timings = Vec::new();
        for size in [4u64 << 20, 1 << 30] {
            // Holes share the zero chunk: the pointer count is what an fsync pays for.
            s.setattr(f, None, None, None, Some(size), None, None)
                .unwrap();
            s.write(f, size - 1, b"x").unwrap();
            let t = std::time::Instant::now();
            s.sync_file(f).unwrap();
            timings.push(t.elapsed());
        }
        println!(
            "fsync state cost: 4 MiB file {:?}, 1 GiB file {:?}",
            timings[0], timings[1]
        );
        assert!(timings[1] < Duration::from_millis(20), "{timings:?}");
    }

    #[test]
    fn capacity_is_charged_by_block_and_given_back() {
        const B: u64 = BLOCK as u64;
        let mut s = State::new(Mode::Lenient, 10 * B + 100);
        let a = file(&mut s, ROOT, "a");
        let b = file(&mut s, ROOT, "b");
        let check = |s: &State, used: u64| {
            assert_eq!(s.used, used);
            assert_eq!(usage(&s.vol), used, "the running count drifted");
        };
        s.write(a, 0, &[1; 100]).unwrap();
        check(&s, B);
        s.write(a, 100, &[2; 100]).unwrap();
        check(&s, B);
        s.write(b, 0, &vec![3; 8 * B as usize]).unwrap();
        check(&s, 9 * B);
        // 2 blocks asked, 1 left (the 100 bytes past the last whole block don't count).
        assert_eq!(
            s.write(a, 100, &vec![4; 2 * B as usize]),
            Err(Errno::ENOSPC)
        );
        match &s.vol[&a].kind {
            Kind::File(d) => assert_eq!(d.read(0, 1 << 20), [[1; 100], [2; 100]].concat()),
            _ => panic!(),
        }
        assert_eq!(s.fallocate(a, 0, 3 * B, 0), Err(Errno::ENOSPC));
        assert_eq!(
            s.setattr(a, Some(0o600), None, None, Some(3 * B), None, None)
                .map(|_| ()),
            Err(Errno::ENOSPC)
        );
        assert_eq!(s.vol[&a].perm, 0o644, "a failed setattr changes nothing");
        check(&s, 9 * B);
        s.fallocate(a, 0, 2 * B, 0).unwrap();
        check(&s, 10 * B);
        // Full, yet overwriting in place works.
        s.write(b, 5, b"xyz").unwrap();
        assert_eq!(s.write(b, 8 * B, b"x"), Err(Errno::ENOSPC));
        // A truncate gives space back; an unlinked file gives it back once forgotten.
        s.setattr(b, None, None, None, Some(B), None, None).unwrap();
        check(&s, 3 * B);
        s.sync_file(b).unwrap();
        s.remove(ROOT, "a".as_ref(), false).unwrap();
        check(&s, 3 * B);
        s.forget(a, 1);
        check(&s, B);
        s.setattr(b, None, None, None, Some(0), None, None).unwrap();
        check(&s, 0);
        // After a crash: what survived (b's synced block), recounted.
        let c = file(&mut s, ROOT, "c");
        s.write(c, 0, &vec![5; 10 * B as usize]).unwrap();
        check(&s, 10 * B);
        s.crash();
        check(&s, B);
    }

    #[test]
    fn a_copy_shares_chunks_until_written() {
        let zero = zero_chunk();
        let mut d = Data::default();
        d.write(0, &vec![7u8; 4 * CHUNK], &zero);
        let durable = d.clone();
        d.write(CHUNK as u64, b"x", &zero);
        assert!(Arc::ptr_eq(&d.chunks[0], &durable.chunks[0]));
        assert!(!Arc::ptr_eq(&d.chunks[1], &durable.chunks[1]));
        assert_eq!(durable.read(CHUNK as u64, 1), [7]);
    }
}
