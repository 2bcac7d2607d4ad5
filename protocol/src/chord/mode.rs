//! `ServiceMode`: whether a service has one instance or many addressed ones.

use std::fmt;

/// How a service's instances are addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServiceMode {
    /// One instance, addressed by the service id alone (`"singleton"`).
    Singleton,
    /// Many instances, each addressed by `{key, generation}` (`"keyed"`).
    Keyed,
}

impl ServiceMode {
    /// The wire spelling: `"singleton"` or `"keyed"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Singleton => "singleton",
            Self::Keyed => "keyed",
        }
    }

    /// Parses the wire spelling; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "singleton" => Some(Self::Singleton),
            "keyed" => Some(Self::Keyed),
            _ => None,
        }
    }
}

impl fmt::Display for ServiceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
