//! Locking without poison.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, ignoring poisoning. For state whose every critical section leaves it
/// consistent at each point a panic could occur (maps of scanners, positions, tables): a panic
/// in one caller must not turn every later call into a second panic.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
