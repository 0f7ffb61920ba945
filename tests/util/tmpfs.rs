//! A tmpfs of its own for a data directory, so that a test can fill it to the last byte
//! without filling anything else. Mounting needs root (CAP_SYS_ADMIN): without it the test
//! fails saying so, never skips.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a directory, unmounted on drop (lazily, so a process still holding files
/// there can't keep it mounted).
pub struct Tmpfs {
    pub dir: PathBuf,
}

impl Tmpfs {
    pub fn mount(dir: &Path, size_mb: u32) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mb}m"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("mount runs");
        assert!(
            output.status.success(),
            "this test fills a tmpfs of its own on {} and needs root (CAP_SYS_ADMIN) to mount \
             it; run it as root. mount said: {}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }

    /// Writes a filler file until the volume has no byte left; returns its path.
    pub fn fill(&self) -> PathBuf {
        fill(&self.dir)
    }

    /// Removes the filler: the space is back.
    pub fn free(&self) {
        std::fs::remove_file(self.dir.join("filler")).expect("filler removed");
    }
}

/// Writes `dir/filler` until its volume has no byte left; returns its path.
pub fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).expect("filler created");
    let mut chunk = vec![0u8; 1 << 20];
    while !chunk.is_empty() {
        match file.write_all(&chunk) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::StorageFull => {
                chunk.truncate(chunk.len() / 2);
            }
            Err(err) => panic!("filling {}: {err}", path.display()),
        }
    }
    path
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}
