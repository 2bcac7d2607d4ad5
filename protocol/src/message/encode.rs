//! Envelope encoding straight into the output buffer, in upstream field order.

use bytes::BufMut;

use crate::cbor::{CborError, Writer};
use crate::message::{ClientMessage, Outcome, ServerMessage, SessionTarget, Target, WireError};
use crate::value::Value;

/// `-0` as a float64, the only non-integer a hello's version can be (upstream's encoder).
const NEGATIVE_ZERO: [u8; 9] = [0xfb, 0x80, 0, 0, 0, 0, 0, 0, 0];

/// Constant runs of envelope bytes (map heads, keys, type names), written with one copy each
/// instead of one call per item. The upstream vectors pin every byte of them.
mod runs {
    pub(super) const CLIENT_HELLO: &[u8] = b"\xa2\x64type\x65hello\x67version";
    pub(super) const REQUEST: &[u8] = b"\xa4\x64type\x67request\x62id";
    pub(super) const CANCEL: &[u8] = b"\xa3\x64type\x66cancel\x62id";
    pub(super) const TARGET_KEY: &[u8] = b"\x66target";
    pub(super) const CALL_KEY: &[u8] = b"\x64call";
    pub(super) const SERVER_TARGET: &[u8] = b"\xa1\x68serverId";
    pub(super) const SESSION_TARGET: &[u8] = b"\xa3\x68serverId";
    pub(super) const SESSION_ID_KEY: &[u8] = b"\x69sessionId";
    pub(super) const ATTACHMENT_ID_KEY: &[u8] = b"\x6cattachmentId";
    // Carries `"version":8`: tied to the protocol version at compile time.
    const _: () = assert!(crate::version::PROTOCOL_VERSION == 8);
    pub(super) const SERVER_HELLO: &[u8] = b"\xa3\x64type\x65hello\x67version\x08\x68serverId";
    pub(super) const HELLO_ERROR: &[u8] = b"\xa2\x64type\x6bhello_error\x65error";
    pub(super) const ERROR_CODE: &[u8] = b"\xa2\x64code";
    pub(super) const MESSAGE_KEY: &[u8] = b"\x67message";
    pub(super) const RESPONSE_VOID: &[u8] = b"\xa3\x64type\x68response\x62id";
    pub(super) const RESPONSE: &[u8] = b"\xa4\x64type\x68response\x62id";
    pub(super) const OK_TRUE_RESULT: &[u8] = b"\x62ok\xf5\x66result";
    pub(super) const OK_TRUE: &[u8] = b"\x62ok\xf5";
    pub(super) const OK_FALSE_ERROR: &[u8] = b"\x62ok\xf4\x65error";
    pub(super) const SERVICE_UPDATE: &[u8] = b"\xa3\x64type\x6eservice_update\x6esubscriptionId";
    pub(super) const UPDATE_KEY: &[u8] = b"\x66update";
    pub(super) const ATTACHMENT: &[u8] = b"\xa2\x64type\x6aattachment\x6aattachment";
}

impl<B: BufMut> Writer<'_, '_, B> {
    fn target(&mut self, target: &Target) -> Result<(), CborError> {
        match target {
            Target::Server(server_id) => {
                self.raw(runs::SERVER_TARGET);
                self.text(server_id.as_str())
            }
            Target::Session(s) => self.session_target(s),
        }
    }

    fn session_target(&mut self, s: &SessionTarget) -> Result<(), CborError> {
        self.raw(runs::SESSION_TARGET);
        self.text(s.server_id.as_str())?;
        self.raw(runs::SESSION_ID_KEY);
        self.text(s.session_id.as_str())?;
        self.raw(runs::ATTACHMENT_ID_KEY);
        self.text(s.attachment_id.as_str())
    }

    fn wire_error(&mut self, e: &WireError) -> Result<(), CborError> {
        self.raw(runs::ERROR_CODE);
        self.text(e.code.as_str())?;
        self.raw(runs::MESSAGE_KEY);
        self.text(&e.message)
    }

    /// Opaque payloads sit one level below the envelope root.
    fn payload(&mut self, v: &Value) -> Result<(), CborError> {
        self.value(v, 1)
    }

    pub(crate) fn client_message(&mut self, msg: &ClientMessage) -> Result<(), CborError> {
        match msg {
            ClientMessage::Hello { version } => {
                self.raw(runs::CLIENT_HELLO);
                if version.is_negative_zero() {
                    self.raw(&NEGATIVE_ZERO);
                } else {
                    self.uint(version.get());
                }
            }
            ClientMessage::Request(r) => {
                self.raw(runs::REQUEST);
                self.text(r.id.as_str())?;
                self.raw(runs::TARGET_KEY);
                self.target(&r.target)?;
                self.raw(runs::CALL_KEY);
                self.payload(&r.call)?;
            }
            ClientMessage::Cancel(c) => {
                self.raw(runs::CANCEL);
                self.text(c.id.as_str())?;
                self.raw(runs::TARGET_KEY);
                self.target(&c.target)?;
            }
        }
        Ok(())
    }

    pub(crate) fn server_message(&mut self, msg: &ServerMessage) -> Result<(), CborError> {
        match msg {
            ServerMessage::Hello { server_id } => {
                // The run ends with `"version":8` (PROTOCOL_VERSION) and the serverId key.
                self.raw(runs::SERVER_HELLO);
                self.text(server_id.as_str())?;
            }
            ServerMessage::HelloError(e) => {
                self.raw(runs::HELLO_ERROR);
                self.wire_error(e)?;
            }
            ServerMessage::Response(r) => match &r.outcome {
                Outcome::Void => {
                    self.raw(runs::RESPONSE_VOID);
                    self.text(r.id.as_str())?;
                    self.raw(runs::OK_TRUE);
                }
                Outcome::Value(v) => {
                    self.raw(runs::RESPONSE);
                    self.text(r.id.as_str())?;
                    self.raw(runs::OK_TRUE_RESULT);
                    self.payload(v)?;
                }
                Outcome::Error(e) => {
                    self.raw(runs::RESPONSE);
                    self.text(r.id.as_str())?;
                    self.raw(runs::OK_FALSE_ERROR);
                    self.wire_error(e)?;
                }
            },
            ServerMessage::ServiceUpdate(u) => {
                self.service_update_head(u.subscription_id.as_str())?;
                self.payload(&u.update)?;
            }
            ServerMessage::Attachment(a) => {
                self.raw(runs::ATTACHMENT);
                match a {
                    Some(s) => self.session_target(s)?,
                    None => self.null(),
                }
            }
        }
        Ok(())
    }

    /// Everything of a `service_update` envelope up to (not including) the update value.
    pub(crate) fn service_update_head(&mut self, subscription_id: &str) -> Result<(), CborError> {
        self.raw(runs::SERVICE_UPDATE);
        self.text(subscription_id)?;
        self.raw(runs::UPDATE_KEY);
        Ok(())
    }
}
