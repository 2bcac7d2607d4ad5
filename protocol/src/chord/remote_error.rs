//! `RemoteServiceError`: the service errors whose code and message cross the wire verbatim.

use std::fmt;

use crate::chord::mode::ServiceMode;

/// The `service_*` error codes (upstream `RemoteServiceErrorCode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RemoteServiceErrorCode {
    /// `service_not_allowed`.
    NotAllowed,
    /// `service_not_found`.
    NotFound,
    /// `service_mode_mismatch`.
    ModeMismatch,
    /// `service_member_not_found`.
    MemberNotFound,
    /// `service_member_mismatch`.
    MemberMismatch,
    /// `service_instance_not_found`.
    InstanceNotFound,
    /// `service_stale_instance`.
    StaleInstance,
    /// `service_invalid_value` (exists upstream; no producer is known).
    InvalidValue,
}

impl RemoteServiceErrorCode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotAllowed => "service_not_allowed",
            Self::NotFound => "service_not_found",
            Self::ModeMismatch => "service_mode_mismatch",
            Self::MemberNotFound => "service_member_not_found",
            Self::MemberMismatch => "service_member_mismatch",
            Self::InstanceNotFound => "service_instance_not_found",
            Self::StaleInstance => "service_stale_instance",
            Self::InvalidValue => "service_invalid_value",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(code: &str) -> Option<Self> {
        Some(match code {
            "service_not_allowed" => Self::NotAllowed,
            "service_not_found" => Self::NotFound,
            "service_mode_mismatch" => Self::ModeMismatch,
            "service_member_not_found" => Self::MemberNotFound,
            "service_member_mismatch" => Self::MemberMismatch,
            "service_instance_not_found" => Self::InstanceNotFound,
            "service_stale_instance" => Self::StaleInstance,
            "service_invalid_value" => Self::InvalidValue,
            _ => return None,
        })
    }
}

impl fmt::Display for RemoteServiceErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A service-level failure that a server sends as `{code, message}` unchanged.
///
/// The constructors build upstream's message templates exactly (§6.2 of the spec).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RemoteServiceError {
    /// The machine-readable code.
    pub code: RemoteServiceErrorCode,
    /// The human-readable message.
    pub message: String,
}

impl RemoteServiceError {
    /// Any code with any message.
    pub fn new(code: RemoteServiceErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// `service_not_allowed`: `Remote service <id> is not allowlisted`.
    pub fn not_allowlisted(service_id: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::NotAllowed,
            format!("Remote service {service_id} is not allowlisted"),
        )
    }

    /// `service_not_allowed`: `Service <id> is process-local`.
    pub fn process_local(service_id: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::NotAllowed,
            format!("Service {service_id} is process-local"),
        )
    }

    /// `service_not_found`: `Unknown remote service <id>`.
    pub fn unknown_service(service_id: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::NotFound,
            format!("Unknown remote service {service_id}"),
        )
    }

    /// `service_not_found`: `Remote service <id> has no provider`.
    pub fn no_provider(service_id: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::NotFound,
            format!("Remote service {service_id} has no provider"),
        )
    }

    /// `service_not_found`: `Remote service <id> has no local provider`.
    pub fn no_local_provider(service_id: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::NotFound,
            format!("Remote service {service_id} has no local provider"),
        )
    }

    /// `service_mode_mismatch`: `Remote service <id> is <registered>, not <requested>`.
    pub fn mode_mismatch(
        service_id: &str,
        registered: ServiceMode,
        requested: ServiceMode,
    ) -> Self {
        Self::new(
            RemoteServiceErrorCode::ModeMismatch,
            format!("Remote service {service_id} is {registered}, not {requested}"),
        )
    }

    /// `service_mode_mismatch`: `Remote service <id> is singleton` (an address was given).
    pub fn singleton_addressed(service_id: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::ModeMismatch,
            format!("Remote service {service_id} is singleton"),
        )
    }

    /// `service_mode_mismatch`: `Remote service <id> is keyed` (the address is missing).
    pub fn keyed_unaddressed(service_id: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::ModeMismatch,
            format!("Remote service {service_id} is keyed"),
        )
    }

    /// `service_mode_mismatch`: `Remote service <id> already has a provider`.
    pub fn already_provided(service_id: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::ModeMismatch,
            format!("Remote service {service_id} already has a provider"),
        )
    }

    /// `service_mode_mismatch`: `Remote service <id> already has a live instance with key <key>`.
    pub fn live_instance_exists(service_id: &str, key: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::ModeMismatch,
            format!("Remote service {service_id} already has a live instance with key {key}"),
        )
    }

    /// `service_instance_not_found`: `Remote service <id> has no instance <key>`.
    pub fn instance_not_found(service_id: &str, key: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::InstanceNotFound,
            format!("Remote service {service_id} has no instance {key}"),
        )
    }

    /// `service_stale_instance`: `Remote service <id> instance <key> is stale`.
    pub fn stale_instance(service_id: &str, key: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::StaleInstance,
            format!("Remote service {service_id} instance {key} is stale"),
        )
    }

    /// `service_member_not_found`: `Unknown remote service member <id>.<member>`.
    pub fn unknown_member(service_id: &str, member: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::MemberNotFound,
            format!("Unknown remote service member {service_id}.{member}"),
        )
    }

    /// `service_member_mismatch`: `Remote service member <id>.<member> is not a method`.
    pub fn not_a_method(service_id: &str, member: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::MemberMismatch,
            format!("Remote service member {service_id}.{member} is not a method"),
        )
    }

    /// `service_member_mismatch`:
    /// `Remote service <id> replacement must preserve its member shape`.
    pub fn replacement_shape(service_id: &str) -> Self {
        Self::new(
            RemoteServiceErrorCode::MemberMismatch,
            format!("Remote service {service_id} replacement must preserve its member shape"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_wire_spelling() {
        for code in [
            RemoteServiceErrorCode::NotAllowed,
            RemoteServiceErrorCode::NotFound,
            RemoteServiceErrorCode::ModeMismatch,
            RemoteServiceErrorCode::MemberNotFound,
            RemoteServiceErrorCode::MemberMismatch,
            RemoteServiceErrorCode::InstanceNotFound,
            RemoteServiceErrorCode::StaleInstance,
            RemoteServiceErrorCode::InvalidValue,
        ] {
            assert_eq!(RemoteServiceErrorCode::parse(code.as_str()), Some(code));
        }
    }

    #[test]
    fn constructors_build_upstream_message_templates() {
        let e = RemoteServiceError::not_allowlisted("$chord.service");
        assert_eq!(e.code, RemoteServiceErrorCode::NotAllowed);
        assert_eq!(
            e.message,
            "Remote service $chord.service is not allowlisted"
        );
        let e = RemoteServiceError::mode_mismatch(
            "pi.models",
            ServiceMode::Singleton,
            ServiceMode::Keyed,
        );
        assert_eq!(e.code, RemoteServiceErrorCode::ModeMismatch);
        assert_eq!(
            e.to_string(),
            "Remote service pi.models is singleton, not keyed"
        );
        assert_eq!(
            RemoteServiceError::unknown_member("pi.models", "nope").message,
            "Unknown remote service member pi.models.nope"
        );
        assert_eq!(
            RemoteServiceError::stale_instance("pi.dialogs", "d-1").message,
            "Remote service pi.dialogs instance d-1 is stale"
        );
        assert_eq!(
            RemoteServiceError::live_instance_exists("pi.dialogs", "d-1").message,
            "Remote service pi.dialogs already has a live instance with key d-1"
        );
        assert_eq!(
            RemoteServiceError::replacement_shape("pi.models").message,
            "Remote service pi.models replacement must preserve its member shape"
        );
    }
}
