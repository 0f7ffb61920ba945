//! The directories of a table's index and how a rebuilt one replaces it, durably.
//!
//! `index/<table>` is the live index; a reindex builds `index/<table>.reindex` (the shadow),
//! and the swap moves the live one to `index/<table>.old` and the shadow into its place. A
//! rename is durable only once its directory is fsynced, and a file's content only once the
//! file is: after a power cut the filesystem may show any prefix of the unsynced steps, each
//! directory on its own. So the swap syncs in this order, and [`recover`] turns every state a
//! crash can leave into one whole index:
//!
//! 1. [`SwapStep::MarkedReady`]: `READY` written and fsynced in the shadow, the shadow
//!    directory fsynced. Before it, a crash leaves the live index and a shadow `recover`
//!    removes.
//! 2. [`SwapStep::MovedAside`]: live → `.old` (not synced yet).
//! 3. [`SwapStep::MovedIn`]: shadow → live, then the parent fsynced: both renames durable.
//!    Until then a crash leaves any of (live, READY shadow), (`.old`, READY shadow), or the new
//!    live; `recover` finishes the first two the same way.
//! 4. [`SwapStep::Cleaned`]: `READY` and `.old` removed. Leftovers of these are removed by
//!    `recover`.
//!
//! Nothing may trim a source past the old index's checkpoint before step 3 is durable: a crash
//! before it can bring the old index back. The reindex keeps its hold on the change feed until
//! the new live indexer runs (`reindex.rs`), which is after step 3.
//!
//! `recover` never removes the only index: with no live index and no complete shadow, `.old`
//! (the live index moved aside) goes back into place.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Marker file: the shadow index is complete and committed.
pub const READY: &str = "READY";

pub fn shadow_dir(index_dir: &Path) -> PathBuf {
    with_suffix(index_dir, ".reindex")
}

pub fn old_dir(index_dir: &Path) -> PathBuf {
    with_suffix(index_dir, ".old")
}

fn with_suffix(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    dir.with_file_name(name)
}

/// The steps of [`swap`], in order; a test stops after any of them to crash there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SwapStep {
    MarkedReady,
    MovedAside,
    MovedIn,
    Cleaned,
}

impl SwapStep {
    pub const ALL: [SwapStep; 4] = [
        SwapStep::MarkedReady,
        SwapStep::MovedAside,
        SwapStep::MovedIn,
        SwapStep::Cleaned,
    ];
}

/// Fsyncs a directory: the names created, renamed or removed in it become durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    hbidx_store::durable::sync_dir(dir)
        .with_context(|| format!("syncing the directory {}", dir.display()))
}

fn parent(dir: &Path) -> &Path {
    dir.parent().unwrap_or(Path::new("."))
}

/// Replaces the index in `index_dir` with its complete, committed shadow, durably (see the
/// module docs). `after` is called after each step; returning `false` stops there, as a crash
/// would (tests only: the service passes `|_| true`). The caller has closed every writer of
/// both indexes.
pub fn swap(index_dir: &Path, mut after: impl FnMut(SwapStep) -> bool) -> Result<()> {
    let shadow = shadow_dir(index_dir);
    let old = old_dir(index_dir);
    let ready = shadow.join(READY);
    std::fs::File::create(&ready)
        .and_then(|file| file.sync_all())
        .with_context(|| format!("marking {} ready", shadow.display()))?;
    sync_dir(&shadow)?;
    if !after(SwapStep::MarkedReady) {
        return Ok(());
    }
    if old.exists() {
        std::fs::remove_dir_all(&old).with_context(|| format!("removing {}", old.display()))?;
    }
    if index_dir.exists() {
        std::fs::rename(index_dir, &old)
            .with_context(|| format!("moving {} aside", index_dir.display()))?;
    }
    if !after(SwapStep::MovedAside) {
        return Ok(());
    }
    std::fs::rename(&shadow, index_dir)
        .with_context(|| format!("moving the new index into {}", index_dir.display()))?;
    sync_dir(parent(index_dir))?;
    if !after(SwapStep::MovedIn) {
        return Ok(());
    }
    let _ = std::fs::remove_file(index_dir.join(READY));
    if let Err(err) = std::fs::remove_dir_all(&old) {
        tracing::warn!(dir = %old.display(), error = %err, "could not remove the old index");
    }
    after(SwapStep::Cleaned);
    Ok(())
}

/// Finishes or undoes a swap that a crash interrupted (see the module docs), before the index
/// in `index_dir` is opened.
pub fn recover(index_dir: &Path) -> Result<()> {
    let shadow = shadow_dir(index_dir);
    let old = old_dir(index_dir);
    if !index_dir.exists() {
        if shadow.join(READY).exists() {
            tracing::warn!(dir = %index_dir.display(), "finishing an interrupted reindex swap");
            std::fs::rename(&shadow, index_dir)
                .with_context(|| format!("moving {} into place", shadow.display()))?;
            sync_dir(parent(index_dir))?;
        } else if old.exists() {
            tracing::error!(dir = %index_dir.display(), "an interrupted reindex swap left no complete new index: putting the old one back");
            std::fs::rename(&old, index_dir)
                .with_context(|| format!("moving {} back into place", old.display()))?;
            sync_dir(parent(index_dir))?;
        }
    }
    let _ = std::fs::remove_file(index_dir.join(READY));
    for leftover in [shadow, old] {
        if leftover.exists() {
            std::fs::remove_dir_all(&leftover)
                .with_context(|| format!("removing {}", leftover.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(dir: &Path, id: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("id"), id).unwrap();
    }

    fn id(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("id")).unwrap()
    }

    #[test]
    fn a_swap_stopped_after_any_step_recovers_to_one_whole_index() {
        for step in SwapStep::ALL {
            let dir = tempfile::tempdir().unwrap();
            let live = dir.path().join("user");
            index(&live, "old");
            index(&shadow_dir(&live), "new");
            swap(&live, |done| done < step).unwrap();
            recover(&live).unwrap();
            // Once the live index is moved aside, recovery finishes the swap (the shadow is
            // READY); before, the live index stays and the shadow goes.
            let expected = if step >= SwapStep::MovedAside {
                "new"
            } else {
                "old"
            };
            assert_eq!(id(&live), expected, "stopped after {step:?}");
            assert!(!shadow_dir(&live).exists() && !old_dir(&live).exists());
            assert!(!live.join(READY).exists());
        }
    }

    #[test]
    fn recovery_puts_back_a_live_index_moved_aside_without_a_ready_shadow() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("user");
        index(&old_dir(&live), "old");
        index(&shadow_dir(&live), "half-built");
        recover(&live).unwrap();
        assert_eq!(id(&live), "old");
        assert!(!shadow_dir(&live).exists() && !old_dir(&live).exists());
    }
}
