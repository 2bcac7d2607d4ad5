//! Shared harness for the baton integration tests.
