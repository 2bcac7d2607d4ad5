//! The chord pieces the server works with, re-exported for hosts, plus the server's
//! encode-once machinery for updates shared by many subscribers.

use std::fmt;
use std::sync::{Arc, Mutex};

use baton_protocol::{Id, Value, encode_service_update_frame, encode_update_payload};
use bytes::{Bytes, BytesMut};

pub use baton_protocol::chord::{
    ControlCall, InstanceAddress, InstanceSnapshot, MemberSnapshot, ProviderUpdate,
    RemoteServiceError, ServiceCall, ServiceMode, SubscriptionSnapshot,
};

use baton_protocol::chord::StateEncoder;

use crate::router::lock;

/// How many distinct encoder states one [`SharedUpdate`] remembers encodings for.
const SHARED_ENCODINGS: usize = 4;

/// A provider update published to many subscribers, encoded as few times as their state
/// encoders allow.
///
/// Each subscription has its own delta dictionary, so the wire form of one update can differ
/// between subscribers; but subscribers whose encoders are in the same state (the common case:
/// they saw the same updates since their snapshots) get identical bytes. A `SharedUpdate`
/// remembers, per distinct encoder state it met, the CBOR of the encoded update and the
/// encoder state after it, so later subscribers in that state reuse both. Cheap to clone.
#[derive(Clone)]
pub struct SharedUpdate {
    inner: Arc<SharedInner>,
}

struct SharedInner {
    update: ProviderUpdate,
    encodings: Mutex<Vec<Encoding>>,
}

struct Encoding {
    before: StateEncoder,
    after: StateEncoder,
    update_cbor: Bytes,
}

impl fmt::Debug for SharedUpdate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedUpdate")
            .field("update", &self.inner.update)
            .field("encodings", &lock(&self.inner.encodings).len())
            .finish()
    }
}

impl SharedUpdate {
    /// Wraps `update` for publishing to several subscriptions.
    pub fn new(update: ProviderUpdate) -> Self {
        Self {
            inner: Arc::new(SharedInner {
                update,
                encodings: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The update.
    pub fn update(&self) -> &ProviderUpdate {
        &self.inner.update
    }

    /// How many times this update has been encoded so far (for tests and metrics).
    pub fn encode_count(&self) -> usize {
        lock(&self.inner.encodings).len()
    }
}

impl From<ProviderUpdate> for SharedUpdate {
    fn from(update: ProviderUpdate) -> Self {
        Self::new(update)
    }
}

/// One subscription's encoder, as the connection state holds it.
#[derive(Debug, Default)]
pub(crate) struct SubscriptionEncoder {
    encoder: StateEncoder,
}

impl SubscriptionEncoder {
    /// Encodes the subscribe response (resets the dictionaries).
    pub(crate) fn encode_snapshot(
        &mut self,
        snapshot: &SubscriptionSnapshot,
    ) -> Result<Value, String> {
        self.encoder
            .encode_snapshot(snapshot)
            .map_err(|e| e.to_string())
    }

    /// Encodes `update` into a complete `service_update` frame for `sid`.
    pub(crate) fn encode_frame(
        &mut self,
        sid: &Id,
        update: &SharedUpdate,
        max_frame_length: u32,
    ) -> Result<Bytes, String> {
        let shared = &update.inner;
        {
            let encodings = lock(&shared.encodings);
            if let Some(e) = encodings.iter().find(|e| e.before == self.encoder) {
                let frame = service_update_frame(sid, &e.update_cbor, max_frame_length)?;
                self.encoder.clone_from(&e.after);
                return Ok(frame);
            }
        }
        let before = self.encoder.clone();
        let wire = self
            .encoder
            .encode_update(&shared.update)
            .map_err(|e| e.to_string())?;
        // Checked against the limits it has inside the envelope (one level down).
        let update_cbor = match encode_update_payload(&wire, max_frame_length) {
            Ok(cbor) => cbor,
            Err(e) => {
                self.encoder = before;
                return Err(e.to_string());
            }
        };
        let frame = match service_update_frame(sid, &update_cbor, max_frame_length) {
            Ok(frame) => frame,
            Err(e) => {
                self.encoder = before;
                return Err(e);
            }
        };
        let mut encodings = lock(&shared.encodings);
        if encodings.len() < SHARED_ENCODINGS {
            encodings.push(Encoding {
                before,
                after: self.encoder.clone(),
                update_cbor,
            });
        }
        Ok(frame)
    }

    /// Encodes a one-off update (no sharing).
    pub(crate) fn encode_single(
        &mut self,
        sid: &Id,
        update: &ProviderUpdate,
        max_frame_length: u32,
    ) -> Result<Bytes, String> {
        let before = self.encoder.clone();
        let wire = self
            .encoder
            .encode_update(update)
            .map_err(|e| e.to_string())?;
        let encoded = encode_update_payload(&wire, max_frame_length)
            .map_err(|e| e.to_string())
            .and_then(|cbor| service_update_frame(sid, &cbor, max_frame_length));
        if encoded.is_err() {
            self.encoder = before;
        }
        encoded
    }
}

/// A `reset` update carrying `snapshot`.
pub(crate) fn reset(snapshot: SubscriptionSnapshot) -> ProviderUpdate {
    ProviderUpdate::Reset { snapshot }
}

/// Parses what a host returned from `subscribe` (upstream `parseServiceSubscriptionSnapshot`).
pub(crate) fn parse_snapshot(value: &Value) -> Result<SubscriptionSnapshot, String> {
    SubscriptionSnapshot::parse(value).map_err(|e| e.to_string())
}

/// True when `update` is a state update the snapshot already contains (same instance and
/// member, sequence at or below the snapshot's): replaying it after the snapshot would break
/// the client's sequence check (upstream `updateCoveredBySnapshot`).
pub(crate) fn covered_by(update: &ProviderUpdate, snapshot: &SubscriptionSnapshot) -> bool {
    let ProviderUpdate::State {
        instance,
        member,
        sequence,
        ..
    } = update
    else {
        return false;
    };
    snapshot
        .instances
        .iter()
        .filter(|i| &i.instance == instance)
        .flat_map(InstanceSnapshot::states)
        .any(|(name, snap_seq, _)| name == member && *sequence <= snap_seq)
}

/// Frames `{"type":"service_update","subscriptionId":sid,"update":<update_cbor>}` around an
/// already encoded update (byte-identical to encoding the whole message).
fn service_update_frame(
    sid: &Id,
    update_cbor: &[u8],
    max_frame_length: u32,
) -> Result<Bytes, String> {
    let mut frame = BytesMut::with_capacity(48 + sid.as_str().len() + update_cbor.len());
    encode_service_update_frame(sid, update_cbor, max_frame_length, &mut frame)
        .map_err(|e| e.to_string())?;
    Ok(frame.freeze())
}

impl From<RemoteServiceError> for crate::ServiceError {
    fn from(e: RemoteServiceError) -> Self {
        Self::new(e.code.as_str(), e.message)
    }
}
