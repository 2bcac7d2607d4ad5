//! The run configuration, order statistics, number formatting and the fd limit.

use std::time::Duration;

/// Counts and windows for one run; `--quick` shrinks everything to prove the harness works.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Tiny counts, figures not to be quoted.
    pub quick: bool,
    /// Interleaved rounds per workload (medians are taken over rounds).
    pub rounds: usize,
    /// Sequential round trips timed per implementation and round.
    pub seq_requests: usize,
    /// Sequential warm-up round trips (not timed).
    pub seq_warmup: usize,
    /// Pipelined: requests kept outstanding on the one connection.
    pub window: usize,
    /// Pipelined warm-up before the counting window.
    pub pipe_warmup: Duration,
    /// Pipelined counting window.
    pub pipe_window: Duration,
    /// Fan-out subscriber counts.
    pub fanout_levels: Vec<usize>,
    /// Fan-out warm-up after streaming starts.
    pub fan_warmup: Duration,
    /// Fan-out counting window.
    pub fan_window: Duration,
    /// Idle connections for the memory figure (capped by the fd limit; the full run asks for
    /// as many as it allows).
    pub idle_connections: usize,
    /// Connection counts of the unary scale curve.
    pub scale_levels: Vec<usize>,
    /// Counting window of each point of the unary scale curve.
    pub scale_window: Duration,
    /// Subscriber counts of the fan-out scale curve (subscribers in a child process).
    pub fan_scale_levels: Vec<usize>,
    /// Clients × subscriptions each for the per-subscription memory figure.
    pub sub_clients: usize,
    /// Subscriptions per client for the per-subscription memory figure.
    pub subs_per_client: usize,
    /// Updates applied for the replica rebuild figure.
    pub replica_ops: usize,
    /// Busy connections behind the latency-under-load figure.
    pub busy: usize,
    /// How long sequential round trips are timed under that load.
    pub loaded_window: Duration,
}

impl Plan {
    /// The full plan (about fifteen minutes on 2 loaded cores) or the quick one (seconds).
    pub fn new(quick: bool) -> Self {
        if quick {
            Self {
                quick,
                rounds: 1,
                seq_requests: 200,
                seq_warmup: 20,
                window: 64,
                pipe_warmup: Duration::from_millis(20),
                pipe_window: Duration::from_millis(100),
                fanout_levels: vec![1, 10],
                fan_warmup: Duration::from_millis(20),
                fan_window: Duration::from_millis(100),
                idle_connections: 100,
                scale_levels: vec![1, 10],
                scale_window: Duration::from_millis(100),
                fan_scale_levels: vec![1, 10],
                sub_clients: 4,
                subs_per_client: 5,
                replica_ops: 2_000,
                busy: 10,
                loaded_window: Duration::from_millis(100),
            }
        } else {
            Self {
                quick,
                rounds: 3,
                seq_requests: 20_000,
                seq_warmup: 2_000,
                window: 64,
                pipe_warmup: Duration::from_millis(300),
                pipe_window: Duration::from_secs(2),
                fanout_levels: vec![1, 10, 100, 1_000],
                fan_warmup: Duration::from_millis(500),
                fan_window: Duration::from_secs(2),
                idle_connections: usize::MAX,
                scale_levels: vec![1, 10, 100, 1_000],
                scale_window: Duration::from_secs(1),
                fan_scale_levels: vec![1, 10, 100, 1_000, 10_000],
                sub_clients: 100,
                subs_per_client: 100,
                replica_ops: 2_000_000,
                busy: 1_000,
                loaded_window: Duration::from_secs(3),
            }
        }
    }
}

/// The median of `v` (mean of the middle two for an even count); NaN when empty.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The `q` quantile (0..=1) of sorted `v` by nearest rank.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Human formatting: thousands separators for large numbers, 2–3 significant decimals below.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return "–".to_owned();
    }
    if x.abs() >= 1000.0 {
        let s = format!("{:.0}", x);
        let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        format!("{sign}{out}")
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A ratio with two decimals and a `×`.
pub fn fmt_ratio(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}×")
    } else {
        "–".to_owned()
    }
}

/// Raises the soft limit on open files to the hard limit (children inherit it) and returns
/// the limit in force. The scale curves and the idle-connection figure need one fd per
/// connection; if the soft limit cannot be raised, the figures are capped by it and the
/// message says so.
pub fn raise_fd_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let lim = getrlimit(Resource::Nofile);
    let (soft, hard) = (lim.current.unwrap_or(u64::MAX), lim.maximum);
    if let Some(hard) = hard
        && soft < hard
    {
        let raised = rustix::process::Rlimit {
            current: Some(hard),
            maximum: Some(hard),
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                eprintln!("fd limit: soft {soft} raised to the hard limit {hard}");
                return hard;
            }
            Err(e) => eprintln!(
                "fd limit: cannot raise the soft limit {soft} to the hard limit {hard} ({e}); connection counts are capped at {soft}"
            ),
        }
    }
    soft
}

/// A count with thousands separators and no decimals.
pub fn fmt_count(n: usize) -> String {
    if n >= 1000 {
        fmt_num(n as f64)
    } else {
        n.to_string()
    }
}
