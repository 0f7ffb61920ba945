//! Directories whose names survive a power cut.
//!
//! A new file or directory is durable once its data is fsynced *and* its name is: the name
//! lives in the parent directory, which must be fsynced too. Engines sync what they write
//! inside their own directories (fjall its journal and tables, tantivy its segments and
//! `meta.json`); the directories hbidx creates for them are its own to sync.

use std::io;
use std::path::Path;

/// Fsyncs a directory: the names created, renamed or removed in it become durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// `create_dir_all`, then fsyncs the parent of every directory it created, so that the new
/// directories' names are durable. `mode` (Unix) applies to the directories it creates.
pub fn create_dir_all(dir: &Path, mode: Option<u32>) -> io::Result<()> {
    // The deepest ancestor that exists: everything below it is created here.
    let mut existing = dir;
    while !existing.exists() {
        match existing.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => existing = parent,
            _ => break,
        }
    }
    if existing == dir {
        return Ok(());
    }
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    if let Some(mode) = mode {
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    builder.create(dir)?;
    let mut created = dir;
    while created != existing {
        let Some(parent) = created.parent() else {
            break;
        };
        sync_dir(if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        })?;
        created = parent;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_every_level_and_leaves_existing_ones_alone() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        create_dir_all(&deep, Some(0o700)).unwrap();
        assert!(deep.is_dir());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&deep).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700);
        }
        create_dir_all(&deep, None).unwrap();
    }
}
