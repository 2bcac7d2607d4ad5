//! baton-wire: encode and decode v8 frames from the command line.
fn main() {}
