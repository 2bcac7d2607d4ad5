//! What a test does when this machine cannot run it.
//!
//! Some tests need what not every machine has: root, network namespaces, a tmpfs in a private
//! mount namespace, Landlock, tmux, etcd. Where the need is missing such a test reports one line,
//! `SKIPPED <test>: <why>`, and passes, unless the need's switch requires it: then the same
//! line fails the test. `.ci/run` sets every switch the machine can honour, so a CI run that
//! skips anything fails instead.
//!
//! Every switch is parsed one way ([`Need::is_required`]): unset, empty or `0` is not required,
//! `1` is required, and any other value is a mistake that fails the test at once, so a typo in
//! CI cannot turn a requirement off.
//!
//! [`etcd`]: a throwaway etcd on loopback for the fleet tests ([`etcd::Etcd`]).

use std::fmt;

pub mod etcd;

/// Something a test needs that a machine may lack, with the switch that requires it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Running as root (chown to another uid, running a child as uid 65534).
    Root,
    /// Creating network namespaces and a veth link (root and iproute2's `ip`).
    Netns,
    /// Mounting a tmpfs in a private mount namespace (root and util-linux's `unshare`).
    Tmpfs,
    /// Landlock in the running kernel, for the bash tool's confinement.
    Landlock,
    /// The `tmux` command, for the terminal-UI tests.
    Tmux,
    /// The `etcd` command (Debian's `etcd-server`), for the fleet tests.
    Etcd,
}

impl Need {
    /// Every need, in the order `.ci/run` reports them.
    pub const ALL: [Self; 6] = [
        Self::Root,
        Self::Netns,
        Self::Tmpfs,
        Self::Landlock,
        Self::Tmux,
        Self::Etcd,
    ];

    /// The environment variable that turns a skip for this need into a failure.
    pub const fn switch(self) -> &'static str {
        match self {
            Self::Root => "BATON_REQUIRE_ROOT_TESTS",
            Self::Netns => "BATON_REQUIRE_NETNS",
            Self::Tmpfs => "BATON_REQUIRE_TMPFS",
            Self::Landlock => "BATON_REQUIRE_LANDLOCK",
            Self::Tmux => "BATON_REQUIRE_TMUX",
            Self::Etcd => "BATON_REQUIRE_ETCD",
        }
    }

    /// Whether this run requires the need, read from [`switch`](Self::switch).
    ///
    /// # Panics
    /// When the switch holds anything but nothing, `0` or `1`.
    pub fn is_required(self) -> bool {
        let value = std::env::var_os(self.switch());
        match parse_switch(value.as_deref().and_then(|v| v.to_str())) {
            Ok(required) => required,
            Err(()) => panic!(
                "{} must be 0 or 1, not {:?}",
                self.switch(),
                value.unwrap_or_default()
            ),
        }
    }

    /// Reports that the calling test cannot run here because of `why`: fails the test when
    /// the need is required, else prints `SKIPPED <test>: <why>` on the test's output. The
    /// caller returns straight after.
    ///
    /// # Panics
    /// When the need is required (that is the point), or its switch is malformed.
    #[track_caller]
    #[expect(
        clippy::print_stdout,
        reason = "a skipped test says so on its own output"
    )]
    pub fn skip(self, why: impl fmt::Display) {
        let test = current_test();
        if self.is_required() {
            panic!("{}=1, but {test} cannot run: {why}", self.switch());
        }
        println!(
            "SKIPPED {test}: {why} (set {}=1 to fail instead)",
            self.switch()
        );
    }
}

/// The switch's rule: unset, empty or `0` is off, `1` is on, anything else (a non-UTF-8 value
/// included) is an error.
fn parse_switch(value: Option<&str>) -> Result<bool, ()> {
    match value {
        None | Some("" | "0") => Ok(false),
        Some("1") => Ok(true),
        Some(_) => Err(()),
    }
}

/// The running test's name: libtest names each test's thread after it, and `#[tokio::test]`
/// runs its body on that thread.
fn current_test() -> String {
    std::thread::current()
        .name()
        .filter(|name| *name != "main")
        .unwrap_or("this test")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_nothing_empty_or_zero_is_off_and_only_one_is_on() {
        assert_eq!(parse_switch(None), Ok(false));
        assert_eq!(parse_switch(Some("")), Ok(false));
        assert_eq!(parse_switch(Some("0")), Ok(false));
        assert_eq!(parse_switch(Some("1")), Ok(true));
        for bad in ["true", "yes", "2", " 1", "1 ", "01"] {
            assert_eq!(parse_switch(Some(bad)), Err(()), "{bad:?}");
        }
    }

    #[test]
    fn every_need_has_its_own_switch() {
        let mut switches: Vec<_> = Need::ALL.iter().map(|n| n.switch()).collect();
        switches.sort_unstable();
        switches.dedup();
        assert_eq!(switches.len(), Need::ALL.len());
        assert!(switches.iter().all(|s| s.starts_with("BATON_REQUIRE_")));
    }

    #[test]
    fn the_skip_line_names_the_running_test() {
        assert!(
            current_test().ends_with("the_skip_line_names_the_running_test"),
            "{}",
            current_test()
        );
    }
}
