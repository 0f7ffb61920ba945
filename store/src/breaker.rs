//! A circuit breaker for a remote store: after `failures` consecutive transport failures it opens
//! and calls fail at once (a lookup answers 503 in microseconds instead of waiting out a timeout
//! per request, and a struggling server isn't hammered); after `open_for` one trial call is let
//! through (half-open), and its outcome closes or re-opens the breaker. No background task: the
//! state moves only when calls happen, so recovery needs no restart and no timer.
//!
//! Only transport-level failures count. An HBase `IOError` is an answer from a live server and
//! resets the count.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The breaker's state, as the `hbidx_store_breaker_state` gauge reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed = 0,
    HalfOpen = 1,
    Open = 2,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::HalfOpen => "half_open",
            BreakerState::Open => "open",
        }
    }
}

#[derive(Debug)]
struct Inner {
    consecutive_failures: u32,
    opened_at: Option<Instant>,
    /// A half-open trial call is in flight; others keep failing fast until it reports.
    trial_in_flight: bool,
}

/// See the module docs.
#[derive(Debug)]
pub struct Breaker {
    name: String,
    failures: u32,
    open_for: Duration,
    inner: Mutex<Inner>,
}

/// Why [`Breaker::admit`] refused a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Time left before the next trial call is allowed.
    pub retry_in: Duration,
}

impl Breaker {
    pub fn new(name: impl Into<String>, failures: u32, open_for: Duration) -> Self {
        let breaker = Self {
            name: name.into(),
            failures: failures.max(1),
            open_for,
            inner: Mutex::new(Inner {
                consecutive_failures: 0,
                opened_at: None,
                trial_in_flight: false,
            }),
        };
        breaker.publish(BreakerState::Closed);
        breaker
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every critical section leaves the state consistent, so a poisoned lock is still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn publish(&self, state: BreakerState) {
        metrics::gauge!("hbidx_store_breaker_state", "store" => self.name.clone())
            .set(state as u8 as f64);
    }

    /// The current state (an open breaker whose wait is over reads as half-open).
    pub fn state(&self) -> BreakerState {
        let inner = self.lock();
        match inner.opened_at {
            None => BreakerState::Closed,
            Some(at) if at.elapsed() >= self.open_for || inner.trial_in_flight => {
                BreakerState::HalfOpen
            }
            Some(_) => BreakerState::Open,
        }
    }

    /// Asks to make a call. `Ok` means go ahead and report the outcome with [`Breaker::success`]
    /// or [`Breaker::failure`].
    pub fn admit(&self) -> Result<(), Refused> {
        let mut inner = self.lock();
        let Some(opened_at) = inner.opened_at else {
            return Ok(());
        };
        let elapsed = opened_at.elapsed();
        if elapsed < self.open_for {
            return Err(Refused {
                retry_in: self.open_for - elapsed,
            });
        }
        if inner.trial_in_flight {
            return Err(Refused {
                retry_in: Duration::ZERO,
            });
        }
        inner.trial_in_flight = true;
        drop(inner);
        self.publish(BreakerState::HalfOpen);
        Ok(())
    }

    /// The call got an answer from the server (even an error answer).
    pub fn success(&self) {
        let mut inner = self.lock();
        let was_open = inner.opened_at.is_some();
        inner.consecutive_failures = 0;
        inner.opened_at = None;
        inner.trial_in_flight = false;
        drop(inner);
        if was_open {
            tracing::info!(store = %self.name, "store reachable again; circuit breaker closed");
            self.publish(BreakerState::Closed);
        }
    }

    /// The call failed at the transport level (refused, reset, timed out).
    pub fn failure(&self) {
        let mut inner = self.lock();
        inner.consecutive_failures = inner.consecutive_failures.saturating_add(1);
        let reopen = inner.trial_in_flight;
        let open_now = inner.opened_at.is_none() && inner.consecutive_failures >= self.failures;
        inner.trial_in_flight = false;
        if reopen || open_now {
            inner.opened_at = Some(Instant::now());
        }
        let failures = inner.consecutive_failures;
        drop(inner);
        if open_now {
            tracing::warn!(store = %self.name, failures, open_ms = self.open_for.as_millis() as u64, "store unreachable; circuit breaker open");
        }
        if reopen || open_now {
            self.publish(BreakerState::Open);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_heals_through_one_trial() {
        let breaker = Breaker::new("test", 3, Duration::from_millis(40));
        for _ in 0..2 {
            breaker.admit().unwrap();
            breaker.failure();
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
        breaker.admit().unwrap();
        breaker.failure();
        assert_eq!(breaker.state(), BreakerState::Open);
        assert!(breaker.admit().is_err(), "open breaker fails fast");

        std::thread::sleep(Duration::from_millis(50));
        breaker.admit().expect("one trial after the wait");
        assert!(breaker.admit().is_err(), "only one trial at a time");
        breaker.failure();
        assert_eq!(breaker.state(), BreakerState::Open, "failed trial re-opens");

        std::thread::sleep(Duration::from_millis(50));
        breaker.admit().unwrap();
        breaker.success();
        assert_eq!(breaker.state(), BreakerState::Closed);
        breaker.admit().unwrap();
    }

    #[test]
    fn a_success_resets_the_count() {
        let breaker = Breaker::new("test", 2, Duration::from_secs(60));
        breaker.failure();
        breaker.success();
        breaker.failure();
        assert_eq!(breaker.state(), BreakerState::Closed);
        breaker.failure();
        assert_eq!(breaker.state(), BreakerState::Open);
    }
}
