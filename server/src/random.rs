//! Randomness for identifiers (attachment ids, private socket names).

use ring::rand::{SecureRandom, SystemRandom};

/// Fills `buf` from the system CSPRNG.
///
/// # Panics
/// If the operating system has no working random source, which no supported platform lacks.
pub(crate) fn fill(buf: &mut [u8]) {
    SystemRandom::new()
        .fill(buf)
        .expect("the system random source is available on every supported platform");
}

/// A fresh lowercase UUIDv4 (upstream `randomUUID()`).
pub(crate) fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    fill(&mut b);
    baton_protocol::ServerId::from_random_bytes(b)
        .as_str()
        .to_owned()
}
