//! The boxed future the crate's object-safe async traits return.

use std::future::Future;
use std::pin::Pin;

/// A boxed, `Send` future (the object-safe async return type of the crate's traits).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
