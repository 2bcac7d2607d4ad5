//! The chord pieces the server works with, re-exported for hosts, plus the server's
//! encode-once machinery for updates shared by many subscribers.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, OnceLock};

use baton_protocol::frame::FRAME_HEADER_LENGTH;
use baton_protocol::{Id, Value, encode_service_update_frame, encode_update_payload};
use bytes::{BufMut, Bytes, BytesMut};

pub use baton_protocol::chord::{
    ControlCall, InstanceAddress, InstanceSnapshot, MemberSnapshot, ProviderUpdate,
    RemoteServiceError, ServiceCall, ServiceMode, SubscriptionSnapshot,
};

use baton_protocol::chord::StateEncoder;

use crate::config::ResyncDialect;

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
///
/// Subscribers that already share one encoder state (they took it from the same encoding)
/// are matched by identity in O(1) and advance by taking a reference to the shared state
/// after the update; only a subscriber whose state has no shared identity yet is compared by
/// contents, once, after which it shares the identity too. Encodings are immutable once
/// made and read without a lock, so a batch of updates can walk from one encoding's end
/// state to the next update's encoding by reference
/// ([`Publisher::publish_shared_many`](crate::Publisher::publish_shared_many)).
#[derive(Clone)]
pub struct SharedUpdate {
    inner: Arc<SharedInner>,
}

struct SharedInner {
    update: ProviderUpdate,
    /// Filled in order, each at most once (first come, first kept).
    encodings: [OnceLock<Encoding>; SHARED_ENCODINGS],
}

impl SharedInner {
    fn encodings(&self) -> impl Iterator<Item = &Encoding> {
        self.encodings.iter().map_while(OnceLock::get)
    }

    /// The encoding that starts from `state`: by identity, else by contents.
    fn encoding_from(&self, state: &StateEncoder) -> Option<&Encoding> {
        self.encodings()
            .find(|e| e.before.shares_state_with(state))
            .or_else(|| self.encodings().find(|e| e.before == *state))
    }

    /// Keeps `encoding` if a slot is free (a full update is just encoded again).
    fn remember(&self, mut encoding: Encoding) {
        for slot in &self.encodings {
            match slot.set(encoding) {
                Ok(()) => return,
                Err(back) => encoding = back,
            }
        }
    }
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
            .field("encodings", &self.encode_count())
            .finish()
    }
}

impl SharedUpdate {
    /// Wraps `update` for publishing to several subscriptions.
    pub fn new(update: ProviderUpdate) -> Self {
        Self {
            inner: Arc::new(SharedInner {
                update,
                encodings: Default::default(),
            }),
        }
    }

    /// The update.
    pub fn update(&self) -> &ProviderUpdate {
        &self.inner.update
    }

    /// How many times this update has been encoded so far (for tests and metrics).
    pub fn encode_count(&self) -> usize {
        self.inner.encodings().count()
    }
}

impl From<ProviderUpdate> for SharedUpdate {
    fn from(update: ProviderUpdate) -> Self {
        Self::new(update)
    }
}

/// Where a subscriber stands while a batch of updates is encoded for it: the shared state
/// its last update ended in (borrowed from that update's encoding), or `None` while its own
/// encoder holds its state.
#[derive(Debug, Default)]
pub(crate) struct BatchCursor<'u> {
    state: Option<&'u StateEncoder>,
}

/// One subscription's encoder, as the connection state holds it.
#[derive(Debug, Default)]
pub(crate) struct SubscriptionEncoder {
    encoder: StateEncoder,
    /// This subscription's `service_update` envelope up to the update value (the same for
    /// every frame), made on first use; empty until then or if it cannot be made.
    head: Vec<u8>,
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

    /// Appends `update` to `out` as a complete `service_update` frame for `sid`. On error
    /// neither `out` nor the encoder's state changes.
    #[cfg(test)]
    pub(crate) fn encode_frame(
        &mut self,
        sid: &Id,
        update: &SharedUpdate,
        max_frame_length: u32,
        out: &mut BytesMut,
    ) -> Result<(), String> {
        let mut cursor = BatchCursor::default();
        let r = self.encode_in_batch(&mut cursor, sid, update, max_frame_length, out);
        self.end_batch(cursor);
        r
    }

    /// As `encode_frame` for the next update of a batch (several updates to this
    /// subscription in a row). While the subscriber walks through shared encodings its
    /// state is only a reference in `cursor`; call [`Self::end_batch`] with the cursor when
    /// done (also after an error), which stores it. On error neither `out` nor the state
    /// (as of the previous update) changes.
    pub(crate) fn encode_in_batch<'u>(
        &mut self,
        cursor: &mut BatchCursor<'u>,
        sid: &Id,
        update: &'u SharedUpdate,
        max_frame_length: u32,
        out: &mut BytesMut,
    ) -> Result<(), String> {
        let shared = &*update.inner;
        let state = cursor.state.unwrap_or(&self.encoder);
        if let Some(e) = shared.encoding_from(state) {
            self.put_frame(sid, &e.update_cbor, max_frame_length, out)?;
            cursor.state = Some(&e.after);
            return Ok(());
        }
        // Encode it here: the walk through shared states ends.
        self.end_batch(std::mem::take(cursor));
        let before = self.encoder.clone();
        let wire = self
            .encoder
            .encode_update(&shared.update)
            .map_err(|e| e.to_string())?;
        // Checked against the limits it has inside the envelope (one level down).
        let framed = encode_update_payload(&wire, max_frame_length)
            .map_err(|e| e.to_string())
            .and_then(|cbor| {
                self.put_frame(sid, &cbor, max_frame_length, out)
                    .map(|()| cbor)
            });
        let update_cbor = match framed {
            Ok(cbor) => cbor,
            Err(e) => {
                self.encoder = before;
                return Err(e);
            }
        };
        shared.remember(Encoding {
            before,
            after: self.encoder.clone(),
            update_cbor,
        });
        Ok(())
    }

    /// Appends the frame `{"type":"service_update","subscriptionId":sid,"update":<update_cbor>}`
    /// to `out`: the length, this subscription's cached envelope head, the shared update.
    /// Byte-identical to [`encode_service_update_frame`], which also makes the head and is
    /// used as is when the frame would be too long (for its error).
    fn put_frame(
        &mut self,
        sid: &Id,
        update_cbor: &[u8],
        max_frame_length: u32,
        out: &mut BytesMut,
    ) -> Result<(), String> {
        if self.head.is_empty() {
            let mut frame = BytesMut::new();
            if encode_service_update_frame(sid, &[], max_frame_length, &mut frame).is_ok() {
                self.head = frame[FRAME_HEADER_LENGTH..].to_vec();
            }
        }
        let len = self.head.len() + update_cbor.len();
        match u32::try_from(len) {
            Ok(len32) if !self.head.is_empty() && len32 <= max_frame_length => {
                out.reserve(FRAME_HEADER_LENGTH + len);
                out.put_u32(len32);
                out.put_slice(&self.head);
                out.put_slice(update_cbor);
                Ok(())
            }
            _ => encode_service_update_frame(sid, update_cbor, max_frame_length, out)
                .map_err(|e| e.to_string()),
        }
    }

    /// Stores the state a batch walked to (see [`Self::encode_in_batch`]).
    pub(crate) fn end_batch(&mut self, cursor: BatchCursor<'_>) {
        if let Some(state) = cursor.state {
            self.encoder.clone_from(state);
        }
    }

    /// Encodes a resync (the `updates` from [`resync`] for `snapshot`) as one run of frames.
    ///
    /// Afterwards the codecs are those of `snapshot`, as the client's are once it applied the
    /// run: its `closed` drop every codec it held, its `spawned` (or `replaced`, or `reset`)
    /// start a fresh one for every state of the snapshot. Each update's wire form is its
    /// plain form (snapshots are full root replacements). On error nothing changes.
    pub(crate) fn encode_resync(
        &mut self,
        sid: &Id,
        snapshot: &SubscriptionSnapshot,
        updates: &[ProviderUpdate],
        max_frame_length: u32,
    ) -> Result<Bytes, String> {
        let mut fresh = StateEncoder::new();
        fresh.encode_snapshot(snapshot).map_err(|e| e.to_string())?;
        let mut out = BytesMut::new();
        for update in updates {
            let cbor = encode_update_payload(&update.to_value(), max_frame_length)
                .map_err(|e| e.to_string())?;
            self.put_frame(sid, &cbor, max_frame_length, &mut out)?;
        }
        self.encoder = fresh;
        Ok(out.freeze())
    }

    /// Encodes a one-off update (no sharing) into a frame of its own.
    #[cfg(test)]
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

/// The updates that re-baseline a subscriber on `snapshot` after its backlog was dropped,
/// given the instances its client holds (`held`, keyed subscriptions only).
///
/// [`ResyncDialect::Lifecycle`], which every upstream consumer accepts: a singleton gets one
/// `replaced` carrying the instance (chord's consumer installs it as a full re-baseline, each
/// state taking the snapshot's sequence); a keyed subscription gets a `closed` for every
/// instance the client holds, then a `spawned` for every instance of the snapshot. The
/// `closed` come first and cover *every* held instance, those that live on included: the
/// client's state decoder refuses a `spawned` for an address it still has codecs for
/// (`Duplicate service state k@g.member`), and a `closed` it has no instance for is ignored.
/// [`ResyncDialect::Reset`]: one `reset` (pi ≥ 1.0 only).
///
/// # Errors
/// A singleton snapshot that is not exactly one unaddressed instance, or a keyed one with an
/// unaddressed instance (a host bug: no valid update can carry it).
pub(crate) fn resync(
    dialect: ResyncDialect,
    snapshot: &SubscriptionSnapshot,
    held: &BTreeSet<InstanceAddress>,
) -> Result<Vec<ProviderUpdate>, String> {
    if dialect == ResyncDialect::Reset {
        return Ok(vec![ProviderUpdate::Reset {
            snapshot: snapshot.clone(),
        }]);
    }
    match snapshot.mode {
        ServiceMode::Singleton => match snapshot.instances.as_slice() {
            [only] if only.instance.is_none() => Ok(vec![ProviderUpdate::Replaced {
                snapshot: only.clone(),
            }]),
            _ => Err("a singleton snapshot must hold exactly one unaddressed instance".into()),
        },
        ServiceMode::Keyed => {
            let closed = held.iter().map(|address| ProviderUpdate::Closed {
                instance: address.clone(),
            });
            let spawned = snapshot.instances.iter().map(|instance| {
                if instance.instance.is_none() {
                    return Err("a keyed snapshot holds an unaddressed instance".to_owned());
                }
                Ok(ProviderUpdate::Spawned {
                    instance: instance.clone(),
                })
            });
            closed.map(Ok).chain(spawned).collect()
        }
    }
}

/// The addresses of a snapshot's keyed instances.
pub(crate) fn addresses(snapshot: &SubscriptionSnapshot) -> BTreeSet<InstanceAddress> {
    snapshot
        .instances
        .iter()
        .filter_map(|instance| instance.instance.clone())
        .collect()
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
#[cfg(test)]
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
        Self::from_code(e.code.into(), e.message)
    }
}

#[cfg(test)]
mod tests {
    use baton_protocol::chord::{Op, PathSegment};
    use baton_protocol::{Map, ServerMessage, ServiceUpdate, encode_frame};

    use super::*;

    const MAX: u32 = 1 << 20;

    fn snapshot() -> SubscriptionSnapshot {
        let mut m = Map::new();
        m.insert("a", Value::from(""));
        m.insert("b", Value::from(""));
        SubscriptionSnapshot::new(
            "svc",
            ServiceMode::Singleton,
            vec![InstanceSnapshot::new(
                None,
                vec![MemberSnapshot::state("reply", 0, Value::Map(m))],
            )],
        )
    }

    fn append(sequence: u64, key: &str) -> ProviderUpdate {
        ProviderUpdate::State {
            instance: None,
            member: "reply".into(),
            sequence,
            ops: vec![Op::Append {
                path: vec![PathSegment::key(key)],
                text: "tok ".into(),
            }],
        }
    }

    /// A subscriber plus a reference encoder that sees the same history on its own.
    struct Subscriber {
        sid: Id,
        encoder: SubscriptionEncoder,
        reference: StateEncoder,
    }

    impl Subscriber {
        fn new(sid: &str) -> Self {
            let mut encoder = SubscriptionEncoder::default();
            encoder.encode_snapshot(&snapshot()).unwrap();
            let mut reference = StateEncoder::new();
            reference.encode_snapshot(&snapshot()).unwrap();
            Self {
                sid: Id::new(sid).unwrap(),
                encoder,
                reference,
            }
        }

        /// Encodes through `shared` and checks the bytes against a whole-message encoding.
        fn receive(&mut self, shared: &SharedUpdate) {
            let mut out = BytesMut::new();
            self.encoder
                .encode_frame(&self.sid, shared, MAX, &mut out)
                .unwrap();
            let expected = encode_frame(
                &ServerMessage::ServiceUpdate(ServiceUpdate {
                    subscription_id: self.sid.clone(),
                    update: self.reference.encode_update(shared.update()).unwrap(),
                }),
                MAX,
            )
            .unwrap();
            assert_eq!(&out[..], &expected[..], "{}", self.sid);
        }

        fn receive_alone(&mut self, update: &ProviderUpdate) {
            self.encoder.encode_single(&self.sid, update, MAX).unwrap();
            self.reference.encode_update(update).unwrap();
        }
    }

    #[test]
    fn subscribers_in_one_state_share_one_encoding_and_then_one_identity() {
        let mut subs: Vec<_> = ["s1", "s2", "s3"].map(Subscriber::new).into();
        for sequence in 1..=3 {
            let shared = SharedUpdate::new(append(sequence, "a"));
            for s in &mut subs {
                s.receive(&shared);
            }
            assert_eq!(shared.encode_count(), 1);
            // Every subscriber holds the state the one encoding ended in.
            assert!(subs.iter().all(|s| {
                s.encoder
                    .encoder
                    .shares_state_with(&subs[0].encoder.encoder)
            }));
        }
    }

    #[test]
    fn a_diverged_subscriber_gets_its_own_encoding_and_the_others_keep_sharing() {
        let mut subs: Vec<_> = ["s1", "s2", "s3"].map(Subscriber::new).into();
        let first = SharedUpdate::new(append(1, "a"));
        subs.iter_mut().for_each(|s| s.receive(&first));
        // s2 alone sees a path the others have not: its dictionary differs from theirs.
        subs[1].receive_alone(&append(2, "b"));
        // Third use of `b`: s2's dictionary interned it one update earlier than the others',
        // so the states differ for two updates and then coincide again (equal contents).
        for (sequence, encodings) in [(3, 2), (4, 2), (5, 1)] {
            let shared = SharedUpdate::new(append(sequence, "b"));
            for s in &mut subs {
                s.receive(&shared);
            }
            assert_eq!(shared.encode_count(), encodings, "update {sequence}");
            let [s1, s2, s3] = [0, 1, 2].map(|i| &subs[i].encoder.encoder);
            assert!(s1.shares_state_with(s3));
            assert_eq!(s1.shares_state_with(s2), encodings == 1);
        }
    }

    #[test]
    fn a_batch_walks_shared_encodings_and_ends_where_the_first_subscriber_did() {
        let mut subs: Vec<_> = ["s1", "s2"].map(Subscriber::new).into();
        let batch: Vec<_> = (1..=4)
            .map(|i| SharedUpdate::new(append(i, if i == 3 { "b" } else { "a" })))
            .collect();
        subs[0].encoder.encoder = subs[1].encoder.encoder.clone();
        for s in &mut subs {
            let mut cursor = BatchCursor::default();
            let mut out = BytesMut::new();
            for update in &batch {
                s.encoder
                    .encode_in_batch(&mut cursor, &s.sid, update, MAX, &mut out)
                    .unwrap();
            }
            s.encoder.end_batch(cursor);
            let mut expected = BytesMut::new();
            for update in &batch {
                let wire = s.reference.encode_update(update.update()).unwrap();
                expected.extend_from_slice(
                    &encode_frame(
                        &ServerMessage::ServiceUpdate(ServiceUpdate {
                            subscription_id: s.sid.clone(),
                            update: wire,
                        }),
                        MAX,
                    )
                    .unwrap(),
                );
            }
            assert_eq!(out, expected, "{}", s.sid);
        }
        assert!(batch.iter().all(|u| u.encode_count() == 1));
        assert!(
            subs[0]
                .encoder
                .encoder
                .shares_state_with(&subs[1].encoder.encoder)
        );
    }

    #[test]
    fn a_frame_over_the_length_limit_is_refused_and_changes_nothing() {
        let mut s = Subscriber::new("s1");
        let mut out = BytesMut::new();
        let shared = SharedUpdate::new(append(1, "a"));
        // 60 bytes hold the envelope head but not the update with it.
        let err = s.encoder.encode_frame(&s.sid, &shared, 60, &mut out);
        assert!(err.is_err());
        assert!(out.is_empty());
        assert_eq!(shared.encode_count(), 0);
        // Refused from a shared encoding too (made for another subscriber within limits).
        s.receive(&shared);
        let mut other = Subscriber::new("s2");
        let before = other.encoder.encoder.clone();
        let err = other
            .encoder
            .encode_frame(&other.sid, &shared, 60, &mut out);
        assert!(err.is_err());
        assert!(out.is_empty());
        assert_eq!(shared.encode_count(), 1);
        assert!(other.encoder.encoder.shares_state_with(&before));
        other.receive(&shared);
    }

    #[test]
    fn a_failed_encoding_leaves_the_output_and_the_state_untouched() {
        let mut s = Subscriber::new("s1");
        let before = s.encoder.encoder.clone();
        let unknown = SharedUpdate::new(ProviderUpdate::State {
            instance: None,
            member: "other".into(),
            sequence: 1,
            ops: vec![],
        });
        let mut out = BytesMut::from(&b"queued"[..]);
        assert!(
            s.encoder
                .encode_frame(&s.sid, &unknown, MAX, &mut out)
                .is_err()
        );
        assert_eq!(&out[..], b"queued");
        assert_eq!(s.encoder.encoder, before);
        assert_eq!(unknown.encode_count(), 0);
    }
}
