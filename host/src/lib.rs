//! baton-host: placeholder crate; see the open issue for this component.
