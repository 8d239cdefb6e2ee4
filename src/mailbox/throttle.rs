//! Bounds applied where things are made, before anything is queued: the token bucket (used
//! per identity for the request rate, and per request for its log lines) and a count of
//! slots (a request's unanswered requests to the client).
//!
//! [`LineBudget`] lives in one request's context, on one thread: plain `Cell`s,
//! no atomics, and no clock read until a line is actually logged.

use crate::mailbox::inbox::Inbox;
use std::cell::Cell;
use std::time::{Duration, Instant};

/// A bucket's refill rate and size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    per_second: f64,
    burst: f64,
}

/// The state of one token bucket: the tokens it held at `at` (full when never used).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenBucket {
    tokens: f64,
    at: Option<Instant>,
}

impl Rate {
    /// `per_second` tokens a second, at most `burst` held (both positive).
    pub fn new(per_second: f64, burst: u32) -> Self {
        Self {
            per_second,
            burst: f64::from(burst.max(1)),
        }
    }

    /// How long an empty bucket takes to fill up.
    pub fn refill_time(&self) -> Duration {
        Duration::from_secs_f64(self.burst / self.per_second)
    }

    /// The tokens `bucket` holds at `now`.
    pub fn tokens(&self, bucket: &TokenBucket, now: Instant) -> f64 {
        match bucket.at {
            None => self.burst,
            Some(at) => {
                let elapsed = now.saturating_duration_since(at).as_secs_f64();
                (bucket.tokens + elapsed * self.per_second).min(self.burst)
            }
        }
    }

    /// Whether `bucket` is full at `now` (it holds nothing a new bucket would not).
    pub fn is_full(&self, bucket: &TokenBucket, now: Instant) -> bool {
        self.tokens(bucket, now) >= self.burst
    }

    /// Takes a token from `bucket`.
    ///
    /// # Errors
    /// How long until there is one (at least a millisecond), when there is none now.
    pub fn take(&self, bucket: &mut TokenBucket, now: Instant) -> Result<(), Duration> {
        let tokens = self.tokens(bucket, now);
        bucket.at = Some(now);
        if tokens >= 1.0 {
            bucket.tokens = tokens - 1.0;
            return Ok(());
        }
        bucket.tokens = tokens;
        let wait = Duration::from_secs_f64((1.0 - tokens) / self.per_second);
        Err(wait.max(Duration::from_millis(1)))
    }
}

/// The log lines one request may still send (`limits.log_lines_per_second` and
/// `log_lines_burst`). A line over it is dropped where it is logged and counted in the
/// session's inbox.
#[derive(Debug)]
pub struct LineBudget {
    rate: Option<Rate>,
    bucket: Cell<TokenBucket>,
}

impl LineBudget {
    /// `per_second` lines a second, `burst` at once; no limit when `per_second` is 0.
    pub fn new(per_second: u32, burst: u32) -> Self {
        Self {
            rate: (per_second > 0).then(|| Rate::new(f64::from(per_second), burst)),
            bucket: Cell::default(),
        }
    }

    /// No limit.
    pub fn unlimited() -> Self {
        Self::new(0, 0)
    }

    /// Takes one line from the budget; when there is none, counts the dropped line in
    /// `inbox` and says no.
    pub fn take(&self, inbox: &Inbox) -> bool {
        let Some(rate) = &self.rate else {
            return true;
        };
        let mut bucket = self.bucket.get();
        let taken = rate.take(&mut bucket, Instant::now()).is_ok();
        self.bucket.set(bucket);
        if !taken {
            inbox.count_dropped_log_line();
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_starts_full_and_refills_at_its_rate() {
        let rate = Rate::new(10.0, 2);
        let mut bucket = TokenBucket::default();
        let t0 = Instant::now();
        assert!(rate.take(&mut bucket, t0).is_ok());
        assert!(rate.take(&mut bucket, t0).is_ok());
        let wait = rate.take(&mut bucket, t0).expect_err("empty");
        assert_eq!(wait, Duration::from_millis(100));
        // Half a token later, half the wait.
        let wait = rate
            .take(&mut bucket, t0 + Duration::from_millis(50))
            .expect_err("half a token");
        assert!(wait.abs_diff(Duration::from_millis(50)) < Duration::from_micros(10));
        assert!(rate
            .take(&mut bucket, t0 + Duration::from_millis(101))
            .is_ok());
        // Never more than the burst, however long it rests.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(rate.tokens(&bucket, later), 2.0);
    }

    #[test]
    fn a_line_budget_drops_and_counts_past_its_burst() {
        let inbox = Inbox::default();
        let budget = LineBudget::new(1, 3);
        let sent = (0..10).filter(|_| budget.take(&inbox)).count();
        assert_eq!(sent, 3);
        assert_eq!(inbox.take_dropped().log_lines, 7);
        let unlimited = LineBudget::unlimited();
        assert!((0..1000).all(|_| unlimited.take(&inbox)));
    }
}
