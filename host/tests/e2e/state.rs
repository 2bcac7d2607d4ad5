//! Hang guards and readers of `pi.session` state: what the in-process suites here and the
//! process-level suite of the `baton-host` command (`host/cli/tests/process.rs`, which
//! includes this file by path) both need.

use std::future::Future;
use std::time::Duration;

use baton_client::Subscription;
use baton_protocol::Value;

/// How long anything may take before the test is declared hung.
pub(crate) const HANG: Duration = Duration::from_secs(120);

/// Awaits `f`, failing the test if it hangs.
pub(crate) async fn guard<T>(what: &str, f: impl Future<Output = T>) -> T {
    guard_within(HANG, what, f).await
}

/// As [`guard`], for work that may take up to `limit` on a loaded machine (still only a hang
/// guard, never a performance bound).
pub(crate) async fn guard_within<T>(limit: Duration, what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("hung: {what}"))
}

/// `value[key]` for a map.
pub(crate) fn get<'a>(value: &'a Value, key: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    value.as_map().and_then(|m| m.get(key)).unwrap_or(&NULL)
}

/// The transcript array of a `pi.session` state.
pub(crate) fn transcript(state: &Value) -> Vec<Value> {
    get(state, "transcript")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The joined text blocks of an item's content.
pub(crate) fn text_of(item: &Value) -> String {
    get(item, "content")
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| get(b, "type").as_str() == Some("text"))
                .filter_map(|b| get(b, "text").as_str())
                .collect::<String>()
        })
        .unwrap_or_default()
}

/// The value of state member `member` of a subscription.
pub(crate) fn member(sub: &Subscription, member: &str) -> Value {
    sub.state()
        .value(None, member)
        .cloned()
        .unwrap_or(Value::Null)
}
