//! Envelope decoding straight from the payload bytes.
//!
//! The result is exactly what decoding the payload into a [`Value`] and then parsing the
//! envelope would give (a differential property test holds the two paths together), but
//! envelope keys and string fields are read in place: no key is allocated, and a hello
//! allocates nothing at all.
//!
//! Error precedence matches upstream, which decodes the whole CBOR item before validating
//! its shape: the payload is always read to the end, so a CBOR error anywhere wins over a
//! schema error, and the schema is judged only once the bytes are known to be valid.

use crate::cbor::{CborError, Reader, ValueDecodeError};
use crate::ids::{Id, ServerId};
use crate::limits::CborLimits;
use crate::message::{
    Cancel, ClientMessage, HelloVersion, Outcome, Request, Response, ServerMessage, ServiceUpdate,
    SessionTarget, Target, WireError,
};
use crate::value::Value;

/// Why a payload is not a message.
#[derive(Debug)]
pub(crate) enum PayloadError {
    /// The bytes break the CBOR profile.
    Cbor(CborError),
    /// Valid CBOR, but not a valid envelope (or not strict JSON).
    Invalid,
}

impl From<CborError> for PayloadError {
    fn from(e: CborError) -> Self {
        Self::Cbor(e)
    }
}

impl From<ValueDecodeError> for PayloadError {
    fn from(e: ValueDecodeError) -> Self {
        match e {
            ValueDecodeError::Cbor(e) => Self::Cbor(e),
            ValueDecodeError::NotJson => Self::Invalid,
        }
    }
}

/// The keys of one strict map seen so far: known keys by bit, others by name.
struct Seen<'a> {
    known: u32,
    others: Vec<&'a str>,
}

impl<'a> Seen<'a> {
    fn new() -> Self {
        Self {
            known: 0,
            others: Vec::new(),
        }
    }

    fn known(&mut self, bit: u32) -> Result<(), CborError> {
        if self.known & bit != 0 {
            return Err(CborError::DuplicateKey);
        }
        self.known |= bit;
        Ok(())
    }

    fn other(&mut self, key: &'a str) -> Result<(), CborError> {
        if self.others.contains(&key) {
            return Err(CborError::DuplicateKey);
        }
        self.others.push(key);
        Ok(())
    }
}

/// A target read in place; `None` fields were absent.
#[derive(Default)]
struct TargetParts<'a> {
    /// `Some(None)`: text that is not a server id.
    server_id: Option<Option<ServerId>>,
    session_id: Option<&'a str>,
    attachment_id: Option<&'a str>,
}

impl TargetParts<'_> {
    fn build(self) -> Option<Target> {
        let server_id = self.server_id??;
        match (self.session_id, self.attachment_id) {
            (None, None) => Some(Target::Server(server_id)),
            (Some(s), Some(a)) => Some(Target::Session(SessionTarget {
                server_id,
                session_id: Id::from_text(s).ok()?,
                attachment_id: Id::from_text(a).ok()?,
            })),
            _ => None,
        }
    }
}

/// Reads a target map at `depth`; `Ok(None)` if it is not a valid target (after reading it
/// whole, so CBOR errors inside still surface).
fn target<'a>(r: &mut Reader<'a, '_>, depth: u32) -> Result<Option<TargetParts<'a>>, CborError> {
    let Some(len) = r.map_len(depth)? else {
        r.item(depth)?;
        return Ok(None);
    };
    let mut parts = TargetParts::default();
    let mut seen = Seen::new();
    let mut valid = true;
    for _ in 0..len {
        let key = r.key_among(depth + 1, TARGET_KEYS)?;
        let slot = match key {
            "serverId" => {
                seen.known(1)?;
                parts.server_id = r.text_parsed_or_skip(depth + 1, ServerId::from_ascii)?;
                valid &= parts.server_id.is_some();
                continue;
            }
            "sessionId" => {
                seen.known(2)?;
                &mut parts.session_id
            }
            "attachmentId" => {
                seen.known(4)?;
                &mut parts.attachment_id
            }
            other => {
                seen.other(other)?;
                r.item(depth + 1)?;
                valid = false;
                continue;
            }
        };
        *slot = r.text_or_skip(depth + 1)?;
        valid &= slot.is_some();
    }
    Ok(valid.then_some(parts))
}

/// The field names of a target, matched without a UTF-8 pass.
const TARGET_KEYS: &[&str] = &["serverId", "sessionId", "attachmentId"];
/// The field names of a client envelope.
const CLIENT_KEYS: &[&str] = &["type", "version", "id", "target", "call"];
/// The `type` tags of a client envelope.
const CLIENT_TYPES: &[&str] = &["hello", "request", "cancel"];
/// The field names of a server envelope.
const SERVER_KEYS: &[&str] = &[
    "type",
    "version",
    "serverId",
    "error",
    "id",
    "ok",
    "result",
    "subscriptionId",
    "update",
    "attachment",
];
/// The `type` tags of a server envelope.
const SERVER_TYPES: &[&str] = &[
    "hello",
    "hello_error",
    "response",
    "service_update",
    "attachment",
];

fn id(s: Option<&str>) -> Result<Id, PayloadError> {
    s.and_then(|s| Id::from_text(s).ok())
        .ok_or(PayloadError::Invalid)
}

mod client_keys {
    pub(super) const TYPE: u32 = 1;
    pub(super) const VERSION: u32 = 2;
    pub(super) const ID: u32 = 4;
    pub(super) const TARGET: u32 = 8;
    pub(super) const CALL: u32 = 16;
}

/// Decodes a client message from one payload.
pub(crate) fn decode_client(
    bytes: &[u8],
    limits: &CborLimits,
) -> Result<ClientMessage, PayloadError> {
    use client_keys::{CALL, ID, TARGET, TYPE, VERSION};
    let mut r = Reader::new(bytes, limits)?;
    let Some(len) = r.map_len(0)? else {
        r.item(0)?;
        r.finish()?;
        return Err(PayloadError::Invalid);
    };
    let mut seen = Seen::new();
    let mut valid = true;
    let (mut ty, mut version, mut rid, mut tgt, mut call) = (None, None, None, None, None);
    for _ in 0..len {
        match r.key_among(1, CLIENT_KEYS)? {
            "type" => {
                seen.known(TYPE)?;
                ty = r.text_or_skip_among(1, CLIENT_TYPES)?;
            }
            "version" => {
                seen.known(VERSION)?;
                version = Some(r.item(1)?);
            }
            "id" => {
                seen.known(ID)?;
                rid = r.text_or_skip(1)?;
                valid &= rid.is_some();
            }
            "target" => {
                seen.known(TARGET)?;
                tgt = target(&mut r, 1)?;
                valid &= tgt.is_some();
            }
            "call" => {
                seen.known(CALL)?;
                call = Some(r.item(1)?);
            }
            other => {
                seen.other(other)?;
                r.item(1)?;
                valid = false;
            }
        }
    }
    r.finish()?;
    if !valid {
        return Err(PayloadError::Invalid);
    }
    let target = || {
        tgt.and_then(TargetParts::build)
            .ok_or(PayloadError::Invalid)
    };
    match (ty, seen.known) {
        (Some("hello"), k) if k == TYPE | VERSION => {
            let version = version
                .as_ref()
                .and_then(HelloVersion::from_value)
                .ok_or(PayloadError::Invalid)?;
            Ok(ClientMessage::Hello { version })
        }
        (Some("request"), k) if k == TYPE | ID | TARGET | CALL => {
            Ok(ClientMessage::Request(Request {
                id: id(rid)?,
                target: target()?,
                call: call.ok_or(PayloadError::Invalid)?,
            }))
        }
        (Some("cancel"), k) if k == TYPE | ID | TARGET => Ok(ClientMessage::Cancel(Cancel {
            id: id(rid)?,
            target: target()?,
        })),
        _ => Err(PayloadError::Invalid),
    }
}

mod server_keys {
    pub(super) const TYPE: u32 = 1;
    pub(super) const VERSION: u32 = 2;
    pub(super) const SERVER_ID: u32 = 4;
    pub(super) const ERROR: u32 = 8;
    pub(super) const ID: u32 = 16;
    pub(super) const OK: u32 = 32;
    pub(super) const RESULT: u32 = 64;
    pub(super) const SUBSCRIPTION_ID: u32 = 128;
    pub(super) const UPDATE: u32 = 256;
    pub(super) const ATTACHMENT: u32 = 512;
}

/// Decodes a server message from one payload.
pub(crate) fn decode_server(
    bytes: &[u8],
    limits: &CborLimits,
) -> Result<ServerMessage, PayloadError> {
    match decode_server_as(bytes, limits, UpdateForm::Value)? {
        ServerPayload::Message(m) => Ok(m),
        // Only asked for with `UpdateForm::Encoded`.
        ServerPayload::EncodedUpdate { .. } => Err(PayloadError::Invalid),
    }
}

/// How [`decode_server_as`] returns a `service_update`'s `update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpdateForm {
    /// Decoded into a [`Value`] inside [`ServerMessage::ServiceUpdate`].
    Value,
    /// Validated in place (same checks, same errors) and returned as a byte range of the
    /// payload, for a decoder that reads it without building a [`Value`].
    Encoded,
}

/// A decoded server payload.
#[derive(Debug)]
pub(crate) enum ServerPayload {
    Message(ServerMessage),
    /// A `service_update` whose update is `payload[update]` (only with `UpdateForm::Encoded`).
    EncodedUpdate {
        subscription_id: Id,
        update: std::ops::Range<usize>,
    },
}

/// [`decode_server`] with a choice of update form. Every other message, and every error,
/// is the same for both forms.
pub(crate) fn decode_server_as(
    bytes: &[u8],
    limits: &CborLimits,
    form: UpdateForm,
) -> Result<ServerPayload, PayloadError> {
    use server_keys::{
        ATTACHMENT, ERROR, ID, OK, RESULT, SERVER_ID, SUBSCRIPTION_ID, TYPE, UPDATE, VERSION,
    };
    let mut r = Reader::new(bytes, limits)?;
    let Some(len) = r.map_len(0)? else {
        r.item(0)?;
        r.finish()?;
        return Err(PayloadError::Invalid);
    };
    let mut seen = Seen::new();
    let mut valid = true;
    let mut ty = None;
    let mut version = None;
    let mut server_id = None;
    let mut error = None;
    let mut rid = None;
    let mut ok = None;
    let mut result = None;
    let mut subscription_id = None;
    let mut update = None;
    let mut update_span = None;
    let mut attachment = None;
    for _ in 0..len {
        match r.key_among(1, SERVER_KEYS)? {
            "type" => {
                seen.known(TYPE)?;
                ty = r.text_or_skip_among(1, SERVER_TYPES)?;
            }
            "version" => {
                seen.known(VERSION)?;
                version = Some(r.item(1)?);
            }
            "serverId" => {
                seen.known(SERVER_ID)?;
                server_id = r.text_parsed_or_skip(1, ServerId::from_ascii)?;
                valid &= server_id.is_some();
            }
            "error" => {
                seen.known(ERROR)?;
                error = Some(r.item(1)?);
            }
            "id" => {
                seen.known(ID)?;
                rid = r.text_or_skip(1)?;
                valid &= rid.is_some();
            }
            "ok" => {
                seen.known(OK)?;
                ok = r.bool_or_skip(1)?;
                valid &= ok.is_some();
            }
            "result" => {
                seen.known(RESULT)?;
                result = Some(r.item(1)?);
            }
            "subscriptionId" => {
                seen.known(SUBSCRIPTION_ID)?;
                subscription_id = r.text_or_skip(1)?;
                valid &= subscription_id.is_some();
            }
            "update" => {
                seen.known(UPDATE)?;
                match form {
                    UpdateForm::Value => update = Some(r.item(1)?),
                    UpdateForm::Encoded => {
                        let start = r.position();
                        r.skip(1)?;
                        update_span = Some(start..r.position());
                    }
                }
            }
            "attachment" => {
                seen.known(ATTACHMENT)?;
                attachment = Some(r.item(1)?);
            }
            other => {
                seen.other(other)?;
                r.item(1)?;
                valid = false;
            }
        }
    }
    r.finish()?;
    if !valid {
        return Err(PayloadError::Invalid);
    }
    let wire_error = |e: Option<Value>| {
        e.ok_or(PayloadError::Invalid)
            .and_then(|e| WireError::parse(e).map_err(|_| PayloadError::Invalid))
    };
    let message = match (ty, seen.known) {
        (Some("hello"), k) if k == TYPE | VERSION | SERVER_ID => {
            if version.as_ref().and_then(Value::as_u64) != Some(crate::version::PROTOCOL_VERSION) {
                return Err(PayloadError::Invalid);
            }
            let server_id = server_id.flatten().ok_or(PayloadError::Invalid)?;
            Ok(ServerMessage::Hello { server_id })
        }
        (Some("hello_error"), k) if k == TYPE | ERROR => {
            Ok(ServerMessage::HelloError(wire_error(error)?))
        }
        (Some("response"), k)
            if k & (TYPE | ID | OK) == TYPE | ID | OK
                && k & !(TYPE | ID | OK | RESULT | ERROR) == 0 =>
        {
            let outcome = match (ok, result, error) {
                (Some(true), None, None) => Outcome::Void,
                (Some(true), Some(v), None) => Outcome::Value(v),
                (Some(false), None, Some(e)) => Outcome::Error(wire_error(Some(e))?),
                _ => return Err(PayloadError::Invalid),
            };
            Ok(ServerMessage::Response(Response {
                id: id(rid)?,
                outcome,
            }))
        }
        (Some("service_update"), k) if k == TYPE | SUBSCRIPTION_ID | UPDATE => {
            let subscription_id = id(subscription_id)?;
            if let Some(span) = update_span {
                return Ok(ServerPayload::EncodedUpdate {
                    subscription_id,
                    update: span,
                });
            }
            Ok(ServerMessage::ServiceUpdate(ServiceUpdate {
                subscription_id,
                update: update.ok_or(PayloadError::Invalid)?,
            }))
        }
        (Some("attachment"), k) if k == TYPE | ATTACHMENT => match attachment {
            Some(Value::Null) => Ok(ServerMessage::Attachment(None)),
            Some(v) => SessionTarget::parse(v)
                .map(|s| ServerMessage::Attachment(Some(s)))
                .map_err(|_| PayloadError::Invalid),
            None => Err(PayloadError::Invalid),
        },
        _ => Err(PayloadError::Invalid),
    };
    message.map(ServerPayload::Message)
}
