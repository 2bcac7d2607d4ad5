//! Fuzz target bodies for the client (not a stable API).
//!
//! [`client_replica`] is the body of the cargo-fuzz target of the same name in
//! `fuzz/fuzz_targets/`; `client/tests/fuzz_seeds.rs` replays the committed seeds
//! (`fuzz/seeds/client_replica/*`) through it on stable `cargo test`. A panic here is a bug
//! report.
//!
//! The target drives the decoding half of a subscription the way the connection core's
//! subscriptions (`conn::Subscriptions`) do: a [`StateDecoder`] turns each update's CBOR bytes
//! into a provider update ([`StateDecoder::decode_update_cbor`]) and a [`Replica`] applies it
//! by reference; any decode or apply error makes the client re-subscribe (a fresh decoder and
//! replica hydrated from a fresh snapshot). A second decoder reads every update through a
//! [`Value`] and must agree on the result and on its state, and a third decoder and replica
//! take every update straight from its bytes ([`StateDecoder::apply_update_cbor`], what the
//! connection core does) and must agree with decoding then applying on the outcome, the
//! step that refused, the decoder state and the replica.

use std::collections::{BTreeMap, BTreeSet};

use baton_protocol::Value;
use baton_protocol::cbor;
use baton_protocol::chord::{
    InstanceAddress, InstanceSnapshot, MemberSnapshot, ProviderUpdate, Replica, ServiceMode,
    StateDecoder, StateEncoder, SubscriptionSnapshot, UpdateRefused, diff,
};
use baton_protocol::fuzzing::ValueSource;
use baton_protocol::limits::CborLimits;

const SERVICE: &str = "svc";
const MEMBERS: [&str; 2] = ["a", "b"];
const KEYS: [&str; 3] = ["k0", "k1", "k2"];

/// One instance as the producer holds it: per state member, its sequence and value.
#[derive(Debug, Clone)]
struct Instance {
    address: Option<InstanceAddress>,
    states: BTreeMap<&'static str, (u64, Value)>,
}

impl Instance {
    fn snapshot(&self) -> InstanceSnapshot {
        let mut members: Vec<MemberSnapshot> = self
            .states
            .iter()
            .map(|(name, (seq, v))| MemberSnapshot::state(*name, *seq, v.clone()))
            .collect();
        members.push(MemberSnapshot::method("run"));
        InstanceSnapshot::new(self.address.clone(), members)
    }
}

/// The server side: the service's true state and the subscription's encoder.
struct Producer {
    mode: ServiceMode,
    /// Singleton: the one instance, `None` while unavailable. Keyed: live instances by key.
    instances: BTreeMap<&'static str, Instance>,
    generation: u64,
    encoder: StateEncoder,
}

impl Producer {
    fn new_instance(src: &mut ValueSource<'_>, address: Option<InstanceAddress>) -> Instance {
        let states = MEMBERS
            .iter()
            .map(|m| (*m, (src.below(4) as u64, src.value(0))))
            .collect();
        Instance { address, states }
    }

    fn snapshot(&self) -> SubscriptionSnapshot {
        SubscriptionSnapshot::new(
            SERVICE,
            self.mode,
            self.instances.values().map(Instance::snapshot).collect(),
        )
    }

    /// A valid next update (`None` when the chosen one is impossible right now).
    fn next(&mut self, src: &mut ValueSource<'_>) -> Option<(ProviderUpdate, Touch)> {
        let keyed = self.mode == ServiceMode::Keyed;
        match src.below(10) {
            0..=5 => {
                let key = if keyed {
                    KEYS[src.below(KEYS.len())]
                } else {
                    ""
                };
                let member = MEMBERS[src.below(MEMBERS.len())];
                let inst = self.instances.get_mut(key)?;
                let (seq, old) = inst.states.get_mut(member)?;
                let new = src.mutate(old, 0);
                let ops = diff(old, &new);
                if ops.is_empty() {
                    return None;
                }
                *seq += 1;
                *old = new;
                Some((
                    ProviderUpdate::State {
                        instance: inst.address.clone(),
                        member: member.to_owned(),
                        sequence: *seq,
                        ops,
                    },
                    Touch::State(key, member),
                ))
            }
            6 => Some((
                ProviderUpdate::Reset {
                    snapshot: self.snapshot(),
                },
                Touch::Lifecycle,
            )),
            7 if !keyed => {
                self.instances.clear();
                Some((ProviderUpdate::Unavailable, Touch::Lifecycle))
            }
            8 if !keyed => {
                let inst = Self::new_instance(src, None);
                let snapshot = inst.snapshot();
                self.instances.insert("", inst);
                Some((ProviderUpdate::Replaced { snapshot }, Touch::Lifecycle))
            }
            7 | 8 => {
                let key = KEYS[src.below(KEYS.len())];
                if self.instances.contains_key(key) {
                    return None;
                }
                self.generation += 1;
                let inst =
                    Self::new_instance(src, Some(InstanceAddress::new(key, self.generation)));
                let instance = inst.snapshot();
                self.instances.insert(key, inst);
                Some((ProviderUpdate::Spawned { instance }, Touch::Lifecycle))
            }
            _ if keyed => {
                let key = KEYS[src.below(KEYS.len())];
                let inst = self.instances.remove(key)?;
                let instance = inst.address.unwrap_or_else(|| unreachable!("keyed"));
                Some((ProviderUpdate::Closed { instance }, Touch::Lifecycle))
            }
            _ => None,
        }
    }
}

/// What an update changes, for the taint bookkeeping.
#[derive(Debug, Clone, Copy)]
enum Touch {
    State(&'static str, &'static str),
    Lifecycle,
}

/// The client side: decoder and replica, as the subscription core holds them.
struct Consumer {
    decoder: StateDecoder,
    /// The same stream decoded through `Value`s, the reference for `decoder`.
    reference: StateDecoder,
    replica: Replica,
    /// The same stream applied straight from its bytes
    /// ([`StateDecoder::apply_update_cbor`], what the client does), which must agree with
    /// decoding then applying (`decoder`, `replica`) at every step.
    direct: (StateDecoder, Replica),
}

impl Consumer {
    /// Subscribes: a fresh decoder and replica hydrated from the producer's snapshot.
    /// A singleton subscription needs its instance: an unavailable one comes back first.
    fn subscribe(producer: &mut Producer) -> Self {
        if producer.mode == ServiceMode::Singleton && producer.instances.is_empty() {
            let inst = Instance {
                address: None,
                states: MEMBERS.iter().map(|m| (*m, (0, Value::Null))).collect(),
            };
            producer.instances.insert("", inst);
        }
        producer.encoder = StateEncoder::new();
        let wire = producer
            .encoder
            .encode_snapshot(&producer.snapshot())
            .expect("the producer's snapshot encodes");
        let mut decoder = StateDecoder::new();
        let snapshot = decoder
            .decode_snapshot(&wire)
            .expect("a valid wire snapshot decodes");
        let mut replica = Replica::new(SERVICE, producer.mode);
        replica
            .apply_snapshot(snapshot)
            .expect("a valid snapshot hydrates");
        Self {
            reference: decoder.clone(),
            direct: (decoder.clone(), replica.clone()),
            decoder,
            replica,
        }
    }

    /// Delivers one wire update; `false` if the client reported an error.
    fn deliver(&mut self, wire: &Value) -> bool {
        // Whatever a server could send as CBOR; a value beyond the limits never arrives.
        let Ok(bytes) = cbor::to_vec(wire, &CborLimits::default()) else {
            return false;
        };
        let decoded = self.decoder.decode_update_cbor(&bytes);
        let reference = self.reference.decode_update(wire);
        assert_eq!(
            decoded.as_ref().map_err(ToString::to_string),
            reference.as_ref().map_err(ToString::to_string),
            "decode_update_cbor and decode_update disagree"
        );
        assert_eq!(self.decoder, self.reference, "the decoders' states differ");
        let decode_failed = decoded.is_err();
        let two_steps = match decoded {
            Err(e) => Err(UpdateRefused::Decode(e)),
            Ok(update) => {
                let sequence = match &update {
                    ProviderUpdate::State { sequence, .. } => Some(*sequence),
                    _ => None,
                };
                self.replica
                    .apply_update_ref(&update)
                    .map(|()| sequence)
                    .map_err(UpdateRefused::Apply)
            }
        };
        let (decoder, replica) = &mut self.direct;
        let direct = decoder.apply_update_cbor(&bytes, replica);
        assert_eq!(
            direct, two_steps,
            "apply_update_cbor and decode_update_cbor + apply_update_ref disagree"
        );
        if !decode_failed {
            assert_eq!(
                self.direct.0, self.decoder,
                "the direct decoder's state differs"
            );
        }
        assert_eq!(self.direct.1, self.replica, "the direct replica differs");
        two_steps.is_ok()
    }

    /// True when the replica shows `inst`'s member `member` exactly as the producer has it.
    fn agrees(&self, inst: &Instance, member: &str) -> bool {
        let (seq, value) = &inst.states[member];
        let addr = inst.address.as_ref();
        self.replica.value(addr, member) == Some(value)
            && self.replica.sequence(addr, member) == Some(*seq)
    }
}

/// How a corrupted delivery affects the convergence check.
#[derive(Debug, Default)]
struct Taint {
    /// Members whose own stream lost, repeated or reordered an update: their next genuine
    /// update must either be refused or bring them back in sync.
    members: BTreeSet<(&'static str, &'static str)>,
    /// Anything else (forged or lost lifecycle events, garbage, an update from before a
    /// singleton replacement delivered after it): no convergence claim until the next
    /// re-subscribe.
    all: bool,
}

/// Target `client_replica`: a producer model (a server-side [`StateEncoder`] encoding updates
/// that [`diff`] derives from random successive values, plus resets, replacements,
/// unavailability, spawns and closes) feeding the client's [`StateDecoder`] and [`Replica`],
/// with input-chosen corruption of the stream.
///
/// Input: byte 0 picks singleton or keyed mode; then the bytes drive [`ValueSource`] for the
/// values and the choice of each step: a genuine update delivered as is, or dropped,
/// duplicated, held back and delivered after the next one, replaced by garbage, or mutated.
///
/// Checks: no panic; a valid stream never errors and, after every step, the replica equals
/// the producer (values, sequences, live instances); after a lost, repeated or reordered
/// state update, that state's next genuine update is refused or brings it back in sync; after
/// any error the client re-subscribes and must converge again. A corrupted stream may only
/// ever diverge while the corruption is one the protocol cannot detect (forged or lost
/// lifecycle events, garbage, a state update held back across a singleton replacement, whose
/// fresh sequences it may fit), and the target never claims convergence then.
pub fn client_replica(data: &[u8]) {
    let [mode, rest @ ..] = data else {
        return;
    };
    let mut src = ValueSource::new(rest);
    let mode = if mode & 1 == 0 {
        ServiceMode::Singleton
    } else {
        ServiceMode::Keyed
    };
    let mut producer = Producer {
        mode,
        instances: BTreeMap::new(),
        generation: 0,
        encoder: StateEncoder::new(),
    };
    match mode {
        ServiceMode::Singleton => {
            let inst = Producer::new_instance(&mut src, None);
            producer.instances.insert("", inst);
        }
        ServiceMode::Keyed => {
            for key in KEYS.iter().take(src.below(3)) {
                producer.generation += 1;
                let address = Some(InstanceAddress::new(*key, producer.generation));
                let inst = Producer::new_instance(&mut src, address);
                producer.instances.insert(key, inst);
            }
        }
    }
    let mut consumer = Consumer::subscribe(&mut producer);
    let mut taint = Taint::default();
    let mut held: Option<(Value, Touch)> = None;
    check(&consumer, &producer, &taint, None);

    let mut steps = 0;
    while !src.is_empty() && steps < 64 {
        steps += 1;
        let corruption = src.below(16);
        let Some((update, touch)) = producer.next(&mut src) else {
            continue;
        };
        let wire = producer
            .encoder
            .encode_update(&update)
            .expect("the producer's updates encode");
        let clean = !taint.all && taint.members.is_empty() && held.is_none();
        let mut ok = true;
        let mut genuine = None;
        match corruption {
            // Lost.
            0 => taint_by(&mut taint, touch),
            // Delivered twice.
            1 => {
                taint_by(&mut taint, touch);
                ok = consumer.deliver(&wire) && consumer.deliver(&wire);
            }
            // Held back, delivered after the next one.
            2 if held.is_none() => {
                taint_by(&mut taint, touch);
                held = Some((wire, touch));
            }
            // Replaced by garbage, or mutated.
            3 => {
                taint.all = true;
                let garbage = if src.below(2) == 0 {
                    src.value(0)
                } else {
                    src.mutate(&wire, 0)
                };
                ok = consumer.deliver(&garbage);
            }
            // The client re-subscribes (a reconnect); the snapshot includes this update.
            4 => {
                held = None;
                taint = Taint::default();
                consumer = Consumer::subscribe(&mut producer);
            }
            _ => {
                ok = consumer.deliver(&wire);
                assert!(ok || !clean, "a valid stream was refused: {update:?}");
                genuine = Some(touch);
                if ok && let Some((late, late_touch)) = held.take() {
                    taint_by(&mut taint, late_touch);
                    // A singleton replacement brings its own sequences, so an update from
                    // before it may fit them: the protocol cannot tell it from a genuine one.
                    if matches!(update, ProviderUpdate::Replaced { .. }) {
                        taint.all = true;
                    }
                    ok = consumer.deliver(&late);
                }
            }
        }
        if !ok {
            // The client reports the error and re-subscribes.
            held = None;
            taint = Taint::default();
            consumer = Consumer::subscribe(&mut producer);
        }
        check(&consumer, &producer, &taint, genuine);
        if let Some(Touch::State(key, member)) = genuine
            && held.is_none()
        {
            taint.members.remove(&(key, member));
        }
    }
}

fn taint_by(taint: &mut Taint, touch: Touch) {
    match touch {
        Touch::State(key, member) => {
            taint.members.insert((key, member));
        }
        Touch::Lifecycle => taint.all = true,
    }
}

/// The convergence check after a step: every untainted state agrees with the producer, and
/// a tainted state whose genuine next update was just accepted agrees too.
fn check(consumer: &Consumer, producer: &Producer, taint: &Taint, genuine: Option<Touch>) {
    if taint.all {
        return;
    }
    let replica = &consumer.replica;
    match producer.mode {
        ServiceMode::Singleton => {
            if producer.instances.is_empty() {
                for m in MEMBERS {
                    assert_eq!(
                        replica.value(None, m),
                        None,
                        "unavailable but {m} has a value"
                    );
                }
            }
        }
        ServiceMode::Keyed => {
            assert_eq!(
                replica.instances().len(),
                producer.instances.len(),
                "live instances differ"
            );
        }
    }
    for (key, inst) in &producer.instances {
        for member in MEMBERS {
            let tainted = taint.members.contains(&(*key, member));
            let just_updated =
                matches!(genuine, Some(Touch::State(k, m)) if k == *key && m == member);
            if tainted && !just_updated {
                continue;
            }
            assert!(
                consumer.agrees(inst, member),
                "replica diverged without an error on {key:?}/{member}: replica {:?}, producer {:?}",
                consumer.replica.value(inst.address.as_ref(), member),
                inst.states[member]
            );
        }
    }
}
