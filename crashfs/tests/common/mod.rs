//! What the mount tests share: a crashfs mounted in a tempdir of its own.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use crashfs::{CrashFs, Mode};
use tempfile::TempDir;

/// Field order matters: the filesystem unmounts before its mountpoint is removed.
pub struct Mounted {
    pub fs: CrashFs,
    _dir: TempDir,
}

impl Mounted {
    pub fn p(&self, rel: &str) -> PathBuf {
        self.fs.path().join(rel)
    }

    pub fn root(&self) -> &Path {
        self.fs.path()
    }

    pub fn crash(&mut self) {
        self.fs.crash().expect("crash");
    }
}

/// Mounts crashfs in `mode`, with `capacity` bytes or unlimited; fails with the reason when
/// FUSE can't mount here, so that a test never passes without running.
pub fn mount(mode: Mode, capacity: Option<u64>) -> Mounted {
    if let Err(why) = CrashFs::available() {
        panic!("crashfs tests need FUSE: {why}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = match capacity {
        Some(bytes) => CrashFs::mount_with_capacity(dir.path(), mode, bytes),
        None => CrashFs::mount(dir.path(), mode),
    }
    .expect("mount crashfs");
    Mounted { fs, _dir: dir }
}
