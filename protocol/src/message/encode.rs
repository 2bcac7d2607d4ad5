//! Envelope encoding straight into the output buffer, in upstream field order.

use bytes::BufMut;

use crate::cbor::{CborError, Writer};
use crate::message::{ClientMessage, Outcome, ServerMessage, SessionTarget, Target, WireError};
use crate::value::Value;

impl<B: BufMut> Writer<'_, '_, B> {
    fn target(&mut self, target: &Target) -> Result<(), CborError> {
        match target {
            Target::Server(server_id) => {
                self.map_head(1)?;
                self.text("serverId")?;
                self.text(server_id.as_str())
            }
            Target::Session(s) => self.session_target(s),
        }
    }

    fn session_target(&mut self, s: &SessionTarget) -> Result<(), CborError> {
        self.map_head(3)?;
        self.text("serverId")?;
        self.text(s.server_id.as_str())?;
        self.text("sessionId")?;
        self.text(s.session_id.as_str())?;
        self.text("attachmentId")?;
        self.text(s.attachment_id.as_str())
    }

    fn wire_error(&mut self, e: &WireError) -> Result<(), CborError> {
        self.map_head(2)?;
        self.text("code")?;
        self.text(e.code.as_str())?;
        self.text("message")?;
        self.text(&e.message)
    }

    /// Opaque payloads sit one level below the envelope root.
    fn payload(&mut self, v: &Value) -> Result<(), CborError> {
        self.value(v, 1)
    }

    pub(crate) fn client_message(&mut self, msg: &ClientMessage) -> Result<(), CborError> {
        match msg {
            ClientMessage::Hello { version } => {
                self.map_head(2)?;
                self.text("type")?;
                self.text("hello")?;
                self.text("version")?;
                self.uint(*version);
            }
            ClientMessage::Request(r) => {
                self.map_head(4)?;
                self.text("type")?;
                self.text("request")?;
                self.text("id")?;
                self.text(r.id.as_str())?;
                self.text("target")?;
                self.target(&r.target)?;
                self.text("call")?;
                self.payload(&r.call)?;
            }
            ClientMessage::Cancel(c) => {
                self.map_head(3)?;
                self.text("type")?;
                self.text("cancel")?;
                self.text("id")?;
                self.text(c.id.as_str())?;
                self.text("target")?;
                self.target(&c.target)?;
            }
        }
        Ok(())
    }

    pub(crate) fn server_message(&mut self, msg: &ServerMessage) -> Result<(), CborError> {
        match msg {
            ServerMessage::Hello { server_id } => {
                self.map_head(3)?;
                self.text("type")?;
                self.text("hello")?;
                self.text("version")?;
                self.uint(crate::version::PROTOCOL_VERSION);
                self.text("serverId")?;
                self.text(server_id.as_str())?;
            }
            ServerMessage::HelloError(e) => {
                self.map_head(2)?;
                self.text("type")?;
                self.text("hello_error")?;
                self.text("error")?;
                self.wire_error(e)?;
            }
            ServerMessage::Response(r) => {
                let len = if matches!(r.outcome, Outcome::Void) {
                    3
                } else {
                    4
                };
                self.map_head(len)?;
                self.text("type")?;
                self.text("response")?;
                self.text("id")?;
                self.text(r.id.as_str())?;
                self.text("ok")?;
                match &r.outcome {
                    Outcome::Void => self.bool(true),
                    Outcome::Value(v) => {
                        self.bool(true);
                        self.text("result")?;
                        self.payload(v)?;
                    }
                    Outcome::Error(e) => {
                        self.bool(false);
                        self.text("error")?;
                        self.wire_error(e)?;
                    }
                }
            }
            ServerMessage::ServiceUpdate(u) => {
                self.service_update_head(u.subscription_id.as_str())?;
                self.payload(&u.update)?;
            }
            ServerMessage::Attachment(a) => {
                self.map_head(2)?;
                self.text("type")?;
                self.text("attachment")?;
                self.text("attachment")?;
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
        self.map_head(3)?;
        self.text("type")?;
        self.text("service_update")?;
        self.text("subscriptionId")?;
        self.text(subscription_id)?;
        self.text("update")
    }
}
