//! baton-client: placeholder crate; see the open issue for this component.
