//! The hostile-input catalogue, as data: one row per input, with the outcome docs/protocol.md
//! and docs/server.md promise for it. Add a row to extend it; `hostile.rs` runs every row
//! against a live server over a Unix socket.
//!
//! Inputs are written in the `baton_tests::notation` text form (JSON-like values, raw hex in
//! `<…>`), with these placeholders on top of `$SID`/`$OTHER`:
//! `$T` = `{"serverId":"$SID"}` (a server target), `$ECHO` = a `test.echo` call of `[42]`.
//! Requests that are expected to be *answered* use the id `"h"`.

/// Which of the catalogue's servers an entry runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Srv {
    /// Default limits (16 MiB frames, 5 s handshake), but `max_active_requests = 8` and
    /// `max_subscriptions = 4` so floods reach the limits quickly.
    Default,
    /// `max_frame_length = 1024`.
    Small,
    /// `handshake_timeout = 200 ms`; only for entries about the handshake deadline.
    Timeout,
}

/// Where in the connection the input is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// As the very first bytes of a fresh connection.
    Fresh,
    /// After a completed handshake.
    Ready,
}

/// What a class of inputs is (for the per-class counts; `Bomb` entries run inside the
/// memory-measurement window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Class {
    /// A violation of the CBOR profile.
    Cbor,
    /// A declared length or nesting that would cost memory if trusted.
    Bomb,
    /// Frame lengths at and beyond the limit.
    Length,
    /// Envelope (message schema) violations.
    Envelope,
    /// Handshake misuse.
    Handshake,
    /// Invalid service calls and routes (answered, connection kept).
    Call,
    /// Abusive behaviour: floods, storms, slow delivery.
    Abuse,
}

/// What is sent.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Input {
    /// One frame whose payload is the notation text.
    Frame(&'static str),
    /// Several frames in one write.
    Frames(&'static [&'static str]),
    /// Raw bytes (notation text, not framed), then nothing.
    Stream(&'static str),
    /// Raw bytes, then the write side is shut down (end of stream).
    StreamThenEof(&'static str),
    /// One frame whose payload is the text with `$PAD` replaced by a run of `x` so the
    /// payload is exactly this many bytes.
    FrameOfLen(&'static str, usize),
    /// A scripted behaviour (see `hostile.rs`), which checks its own outcome.
    Script(Script),
}

/// Behaviours that take more than one write.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Script {
    /// A valid hello and an echo request, one byte per write.
    OneByteAtATime,
    /// Nothing at all (the handshake deadline fires).
    Silence,
    /// Two bytes of a frame header, then silence.
    HalfHeader,
    /// Hello followed by this many more hellos, in one write.
    HelloFlood(usize),
    /// A request id reused while the first request with it is active, and reused again
    /// after it finished.
    IdReuse,
    /// This many cancels for ids that were never sent (and one for another server).
    UnknownCancels(usize),
    /// This many subscribes (beyond `max_subscriptions`), plus a duplicate id.
    SubscribeStorm(usize),
    /// `max_active_requests` held requests, then this many more.
    RequestFlood(usize),
    /// This many connections that each declare a maximal (16 MiB) frame and send 1 byte of
    /// it, all open at once; then they hang up.
    DeclaredFrames(usize),
}

/// The documented outcome.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Expect {
    /// `hello_error{invalid_request, "Invalid client protocol frame: <text>"}`, then EOF.
    FrameError(&'static str),
    /// `hello_error{invalid_request, "Invalid client protocol message"}`, then EOF.
    BadMessage,
    /// `hello_error{code, message}`, then EOF.
    Fatal(&'static str, &'static str),
    /// The request `"h"` is answered with the error `{code, message}`; the connection stays.
    Answer(&'static str, &'static str),
    /// The request `"h"` is answered successfully; the connection stays.
    Answered,
    /// The server `hello` (the input was a lenient but valid hello); the connection stays.
    Hello,
    /// End of stream with no frame at all.
    Silent,
    /// Checked by the script; `closed` says whether the connection ends.
    Scripted {
        /// Whether the connection is closed at the end.
        closed: bool,
    },
}

/// One catalogue row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    /// Unique name.
    pub name: &'static str,
    /// The class.
    pub class: Class,
    /// The server it runs against.
    pub srv: Srv,
    /// When it is sent.
    pub stage: Stage,
    /// What is sent.
    pub input: Input,
    /// What must happen.
    pub expect: Expect,
}

use Class::*;
use Expect::*;
use Input::*;
use Stage::*;

const fn e(name: &'static str, class: Class, stage: Stage, input: Input, expect: Expect) -> Entry {
    Entry {
        name,
        class,
        srv: Srv::Default,
        stage,
        input,
        expect,
    }
}

const fn on(srv: Srv, entry: Entry) -> Entry {
    Entry { srv, ..entry }
}

const IR: &str = "invalid_request";
const TAGS: &str = "CBOR tags are not supported";
const SIMPLE: &str = "Unsupported CBOR simple value or floating-point width";
const FINITE: &str = "Decoded CBOR number must be finite";
const UNSAFE_ARG: &str = "Decoded CBOR integer or length is outside the safe range";
const UNSAFE_INT: &str = "Decoded CBOR integer is outside the safe range";
const UTF8: &str = "CBOR text string contains invalid UTF-8";
const KEYS: &str = "CBOR map keys must be strings";
const TRUNC: &str = "Truncated CBOR payload";
const BAD_CALL: (&str, &str) = (IR, "Invalid service call");

/// Every entry.
#[rustfmt::skip]
pub(crate) const CATALOGUE: &[Entry] = &[
    // ---- CBOR profile (docs/protocol.md §2), each as the first frame of a connection ----
    e("tag on an empty string", Cbor, Fresh, Frame("<c0 60>"), FrameError(TAGS)),
    e("tag around a valid hello", Cbor, Fresh, Frame(r#"<d8 20>{"type":"hello","version":8}"#), FrameError(TAGS)),
    e("tag inside request args", Cbor, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo","args":[<c1>1]}}"#), FrameError(TAGS)),
    e("indefinite text string", Cbor, Fresh, Frame("<7f 60 ff>"), FrameError("Indefinite-length CBOR text strings are not supported")),
    e("indefinite byte string", Cbor, Fresh, Frame("<5f ff>"), FrameError("Indefinite-length CBOR byte strings are not supported")),
    e("indefinite array", Cbor, Fresh, Frame("<9f ff>"), FrameError("Indefinite-length CBOR arrays are not supported")),
    e("indefinite map as the hello", Cbor, Fresh, Frame(r#"<bf>"type" "hello" "version" 8 <ff>"#), FrameError("Indefinite-length CBOR maps are not supported")),
    e("indefinite unsigned integer", Cbor, Fresh, Frame("<1f>"), FrameError("Indefinite-length CBOR items are not supported")),
    e("additional information 28", Cbor, Fresh, Frame("<1c>"), FrameError("Malformed CBOR additional information")),
    e("additional information 30 on a map", Cbor, Fresh, Frame("<be>"), FrameError("Malformed CBOR additional information")),
    e("additional information 28 on major 7", Cbor, Fresh, Frame("<fc>"), FrameError(SIMPLE)),
    e("additional information 30 on major 7", Cbor, Fresh, Frame("<fe>"), FrameError(SIMPLE)),
    e("lone break marker", Cbor, Fresh, Frame("<ff>"), FrameError("CBOR break marker is not supported")),
    e("float16 version", Cbor, Fresh, Frame(r#"{"type":"hello","version":<f9 4800>}"#), FrameError(SIMPLE)),
    e("float32 version", Cbor, Fresh, Frame(r#"{"type":"hello","version":<fa 41000000>}"#), FrameError(SIMPLE)),
    e("undefined", Cbor, Fresh, Frame("<f7>"), FrameError(SIMPLE)),
    e("simple value 16", Cbor, Fresh, Frame("<f0>"), FrameError(SIMPLE)),
    e("simple value 255 (two-byte form)", Cbor, Fresh, Frame("<f8 ff>"), FrameError(SIMPLE)),
    e("NaN version", Cbor, Fresh, Frame(r#"{"type":"hello","version":<fb 7ff8000000000000>}"#), FrameError(FINITE)),
    e("+Infinity in request args", Cbor, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo","args":[<fb 7ff0000000000000>]}}"#), FrameError(FINITE)),
    e("-Infinity", Cbor, Fresh, Frame("<fb fff0000000000000>"), FrameError(FINITE)),
    e("unsigned 2^53 version", Cbor, Fresh, Frame(r#"{"type":"hello","version":9007199254740992}"#), FrameError(UNSAFE_ARG)),
    e("unsigned 2^64-1", Cbor, Fresh, Frame("<1b ffffffffffffffff>"), FrameError(UNSAFE_ARG)),
    e("negative -(2^53)", Cbor, Fresh, Frame("-9007199254740992"), FrameError(UNSAFE_INT)),
    e("integral float 2^53", Cbor, Fresh, Frame("<fb 4340000000000000>"), FrameError(UNSAFE_INT)),
    e("invalid UTF-8 in a value", Cbor, Fresh, Frame(r#"{"type":<65 68656c6cff>,"version":8}"#), FrameError(UTF8)),
    e("overlong UTF-8 encoding", Cbor, Fresh, Frame("<62 c0af>"), FrameError(UTF8)),
    e("UTF-8 encoded surrogate", Cbor, Fresh, Frame("<63 eda080>"), FrameError(UTF8)),
    e("invalid UTF-8 in a map key", Cbor, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo","args":[{<62 c328>:1}]}}"#), FrameError(UTF8)),
    e("integer map key", Cbor, Fresh, Frame(r#"{"type":"hello",1:8}"#), FrameError(KEYS)),
    e("byte-string map key", Cbor, Fresh, Frame(r#"{<44 74797065>:"hello","version":8}"#), FrameError(KEYS)),
    e("array map key", Cbor, Fresh, Frame(r#"{[]:1}"#), FrameError(KEYS)),
    e("duplicate key in the hello", Cbor, Fresh, Frame(r#"{"type":"hello","version":8,"version":8}"#), FrameError("CBOR map contains a duplicate key")),
    e("duplicate key in request args", Cbor, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo","args":[{"a":1,"a":2}]}}"#), FrameError("CBOR map contains a duplicate key")),
    e("trailing item after the hello", Cbor, Fresh, Frame(r#"{"type":"hello","version":8} null"#), FrameError("CBOR payload contains trailing data")),
    e("truncated map", Cbor, Fresh, Frame(r#"<a2 64>"type""#), FrameError(TRUNC)),
    e("truncated float64", Cbor, Fresh, Frame("<fb 3ff0>"), FrameError(TRUNC)),
    e("depth 65", Cbor, Fresh, Frame("<81*65 f6>"), FrameError("CBOR nesting depth exceeds configured limit of 64")),
    e("depth 65 inside request args", Cbor, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo","args":[<81*62 f6>]}}"#), FrameError("CBOR nesting depth exceeds configured limit of 64")),
    e("depth 64 inside request args is fine", Cbor, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo","args":[<81*61 f6>]}}"#), Answered),
    e("byte string as the hello version", Cbor, Fresh, Frame(r#"{"type":"hello","version":<41 08>}"#), BadMessage),
    e("byte string in request args", Cbor, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo","args":[<43 616263>]}}"#), BadMessage),
    e("non-minimal head version is accepted", Cbor, Fresh, Frame(r#"{"type":"hello","version":<1b 0000000000000008>}"#), Hello),
    e("integral float64 version is accepted", Cbor, Fresh, Frame(r#"{"type":"hello","version":8.0}"#), Hello),
    // ---- Allocation bombs and declared lengths (measured for memory) ----
    e("text string declaring 4 GiB", Bomb, Fresh, Frame("<7a ffffffff>"), FrameError("CBOR text string length exceeds configured limit of 16777216")),
    e("byte string declaring 2^53-1 bytes", Bomb, Fresh, Frame("<5b 001fffffffffffff>"), FrameError("CBOR byte string length exceeds configured limit of 16777216")),
    e("text string declaring 2^64-1 bytes", Bomb, Fresh, Frame("<7b ffffffffffffffff>"), FrameError(UNSAFE_ARG)),
    e("text string declaring exactly the limit, 1 byte present", Bomb, Fresh, Frame("<7a 01000000 61>"), FrameError(TRUNC)),
    e("array declaring 1,000,001 elements", Bomb, Fresh, Frame("<9a 000f4241>"), FrameError("CBOR array length exceeds configured limit of 1000000")),
    e("array declaring 1,000,000 elements, none present", Bomb, Fresh, Frame("<9a 000f4240>"), FrameError(TRUNC)),
    e("map declaring 2^32-1 entries", Bomb, Fresh, Frame("<ba ffffffff>"), FrameError("CBOR map length exceeds configured limit of 1000000")),
    e("map declaring 1,000,000 entries, one present", Bomb, Fresh, Frame(r#"<ba 000f4240>"a" 1"#), FrameError(TRUNC)),
    e("64 nested arrays each declaring 1,000,000", Bomb, Fresh, Frame("<9a000f4240*64>"), FrameError(TRUNC)),
    e("63 nested maps each declaring 1,000,000", Bomb, Fresh, Frame("<ba000f42406161*63>"), FrameError(TRUNC)),
    e("request args declaring 1,000,000 elements", Bomb, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo","args":<9a 000f4240>}}"#), FrameError(TRUNC)),
    e("1,000,000 nulls present as an extra hello field", Bomb, Fresh, Frame(r#"{"type":"hello","version":8,"x":<9a 000f4240 f6*1000000>}"#), BadMessage),
    e("1,000,001 nulls present", Bomb, Fresh, Frame("<9a 000f4241 f6*1000001>"), FrameError("CBOR array length exceeds configured limit of 1000000")),
    e("2 x 1,000,000 nulls: 2 MB that would decode to ~64 MB", Bomb, Fresh, Frame("<82 9a000f4240 f6*1000000 9a000f4240 f6*1000000>"), FrameError("CBOR item count exceeds configured limit of 1048576")),
    e("header declaring 16 MiB, 64 KiB sent, then EOF", Bomb, Fresh, StreamThenEof("<01000000 00*65536>"), Silent),
    e("32 connections each holding a declared 16 MiB frame", Bomb, Ready, Script(Script::DeclaredFrames(32)), Scripted { closed: true }),
    // ---- Frame lengths (docs/protocol.md §1) ----
    e("zero-length frame first", Length, Fresh, Stream("<00000000>"), FrameError(TRUNC)),
    e("zero-length frame after the handshake", Length, Ready, Stream("<00000000>"), FrameError(TRUNC)),
    e("header of 16 MiB + 1", Length, Fresh, Stream("<01000001>"), FrameError("Frame length 16777217 exceeds configured limit of 16777216")),
    e("header of 4 GiB - 1", Length, Ready, Stream("<ffffffff>"), FrameError("Frame length 4294967295 exceeds configured limit of 16777216")),
    e("truncated frame then EOF", Length, Ready, StreamThenEof(r#"<00000010 a2>"#), Silent),
    e("half a header then EOF", Length, Fresh, StreamThenEof("<0000>"), Silent),
    on(Srv::Small, e("frame of exactly the limit (1024)", Length, Ready, FrameOfLen(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo","args":["$PAD"]}}"#, 1024), Answered)),
    on(Srv::Small, e("frame of the limit + 1 (1025)", Length, Ready, FrameOfLen(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo","args":["$PAD"]}}"#, 1025), FrameError("Frame length 1025 exceeds configured limit of 1024"))),
    on(Srv::Small, e("header of the limit + 1 before the hello", Length, Fresh, Stream("<00000401>"), FrameError("Frame length 1025 exceeds configured limit of 1024"))),
    on(Srv::Small, e("string declaring more than the frame limit", Length, Fresh, Frame("<7a 00000800>"), FrameError("CBOR text string length exceeds configured limit of 1024"))),
    // ---- Envelopes (docs/protocol.md §3) ----
    e("unknown message type", Envelope, Fresh, Frame(r#"{"type":"goodbye"}"#), BadMessage),
    e("hello with an extra field", Envelope, Fresh, Frame(r#"{"type":"hello","version":8,"x":1}"#), BadMessage),
    e("hello version as a string", Envelope, Fresh, Frame(r#"{"type":"hello","version":"8"}"#), BadMessage),
    e("hello version negative", Envelope, Fresh, Frame(r#"{"type":"hello","version":-1}"#), BadMessage),
    e("hello version 8.5", Envelope, Fresh, Frame(r#"{"type":"hello","version":8.5}"#), BadMessage),
    e("hello without version", Envelope, Fresh, Frame(r#"{"type":"hello"}"#), BadMessage),
    e("message without type", Envelope, Fresh, Frame(r#"{"version":8}"#), BadMessage),
    e("type as an integer", Envelope, Fresh, Frame(r#"{"type":1,"version":8}"#), BadMessage),
    e("message is an array", Envelope, Fresh, Frame(r#"["hello",8]"#), BadMessage),
    e("message is a string", Envelope, Fresh, Frame(r#""hello""#), BadMessage),
    e("message is null", Envelope, Fresh, Frame("null"), BadMessage),
    e("server hello sent by a client", Envelope, Fresh, Frame(r#"{"type":"hello","version":8,"serverId":"$SID"}"#), BadMessage),
    e("response sent by a client", Envelope, Ready, Frame(r#"{"type":"response","id":"h","ok":true}"#), BadMessage),
    e("request with an empty id", Envelope, Ready, Frame(r#"{"type":"request","id":"","target":$T,"call":$ECHO}"#), BadMessage),
    e("request id as an integer", Envelope, Ready, Frame(r#"{"type":"request","id":1,"target":$T,"call":$ECHO}"#), BadMessage),
    e("request without target", Envelope, Ready, Frame(r#"{"type":"request","id":"h","call":$ECHO}"#), BadMessage),
    e("request without call", Envelope, Ready, Frame(r#"{"type":"request","id":"h","target":$T}"#), BadMessage),
    e("request with an extra field", Envelope, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":$ECHO,"x":null}"#), BadMessage),
    e("serverId in upper case", Envelope, Ready, Frame(r#"{"type":"request","id":"h","target":{"serverId":"00000000-0000-4000-8000-00000000000A"},"call":$ECHO}"#), BadMessage),
    e("serverId not a v4 UUID", Envelope, Ready, Frame(r#"{"type":"request","id":"h","target":{"serverId":"00000000-0000-1000-8000-000000000001"},"call":$ECHO}"#), BadMessage),
    e("serverId with a bad variant", Envelope, Ready, Frame(r#"{"type":"request","id":"h","target":{"serverId":"00000000-0000-4000-c000-000000000001"},"call":$ECHO}"#), BadMessage),
    e("serverId without dashes", Envelope, Ready, Frame(r#"{"type":"request","id":"h","target":{"serverId":"00000000000040008000000000000001"},"call":$ECHO}"#), BadMessage),
    e("serverId empty", Envelope, Ready, Frame(r#"{"type":"request","id":"h","target":{"serverId":""},"call":$ECHO}"#), BadMessage),
    e("target with sessionId but no attachmentId", Envelope, Ready, Frame(r#"{"type":"request","id":"h","target":{"serverId":"$SID","sessionId":"s1"},"call":$ECHO}"#), BadMessage),
    e("target with an extra field", Envelope, Ready, Frame(r#"{"type":"request","id":"h","target":{"serverId":"$SID","x":1},"call":$ECHO}"#), BadMessage),
    e("target as a string", Envelope, Ready, Frame(r#"{"type":"request","id":"h","target":"$SID","call":$ECHO}"#), BadMessage),
    e("cancel without target", Envelope, Ready, Frame(r#"{"type":"cancel","id":"h"}"#), BadMessage),
    e("cancel with an empty id", Envelope, Ready, Frame(r#"{"type":"cancel","id":"","target":$T}"#), BadMessage),
    e("cancel with an extra field", Envelope, Ready, Frame(r#"{"type":"cancel","id":"h","target":$T,"call":$ECHO}"#), BadMessage),
    // ---- Handshake (docs/protocol.md §4) ----
    e("version 7", Handshake, Fresh, Frame(r#"{"type":"hello","version":7}"#), Fatal("version", "Unsupported protocol version 7; expected 8")),
    e("version 2^53-1", Handshake, Fresh, Frame(r#"{"type":"hello","version":9007199254740991}"#), Fatal("version", "Unsupported protocol version 9007199254740991; expected 8")),
    e("request before hello", Handshake, Fresh, Frame(r#"{"type":"request","id":"h","target":$T,"call":$ECHO}"#), Fatal(IR, "The first client message must be hello")),
    e("cancel before hello", Handshake, Fresh, Frame(r#"{"type":"cancel","id":"h","target":$T}"#), Fatal(IR, "The first client message must be hello")),
    e("second hello", Handshake, Ready, Frame(r#"{"type":"hello","version":8}"#), Fatal(IR, "hello may only be sent as the first message")),
    // The decoder refuses a chunk whole when any frame in it is bad (codec `push` docs), so
    // the hello that arrived with the garbage is never answered: only the hello_error.
    e("hello and a garbage frame in one write", Handshake, Fresh, Frames(&[r#"{"type":"hello","version":8}"#, "<ff>"]), Fatal(IR, "Invalid client protocol frame: CBOR break marker is not supported")),
    e("hello flood of 1,000", Handshake, Fresh, Script(Script::HelloFlood(1000)), Scripted { closed: true }),
    on(Srv::Timeout, e("silence (handshake timeout)", Handshake, Fresh, Script(Script::Silence), Scripted { closed: true })),
    on(Srv::Timeout, e("half a header then silence", Handshake, Fresh, Script(Script::HalfHeader), Scripted { closed: true })),
    // ---- Service calls and routes (answered, connection kept) ----
    e("call is a string", Call, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":"echo"}"#), Answer(BAD_CALL.0, BAD_CALL.1)),
    e("call without args", Call, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo"}}"#), Answer(BAD_CALL.0, BAD_CALL.1)),
    e("call with an extra key", Call, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo","args":[],"x":1}}"#), Answer(BAD_CALL.0, BAD_CALL.1)),
    e("call with an empty serviceId", Call, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"","member":"echo","args":[]}}"#), Answer(BAD_CALL.0, BAD_CALL.1)),
    e("call args not an array", Call, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","member":"echo","args":{}}}"#), Answer(BAD_CALL.0, BAD_CALL.1)),
    e("instance generation 0", Call, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"test","instance":{"key":"k","generation":0},"member":"echo","args":[]}}"#), Answer(BAD_CALL.0, BAD_CALL.1)),
    e("request for another server", Call, Ready, Frame(r#"{"type":"request","id":"h","target":{"serverId":"$OTHER"},"call":$ECHO}"#), Answer("wrong_server", "Request was addressed to another server")),
    e("session target without an attachment", Call, Ready, Frame(r#"{"type":"request","id":"h","target":{"serverId":"$SID","sessionId":"s1","attachmentId":"00000000-0000-4000-8000-00000000000f"},"call":$ECHO}"#), Answer("session_not_attached", "Session is not attached to this client")),
    e("unknown service", Call, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"nope","member":"x","args":[]}}"#), Answer("service_not_found", "Unknown remote service nope")),
    e("malformed control call", Call, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"$chord.service","member":"subscribe","args":[1]}}"#), Answer("service_not_allowed", "Remote service $chord.service is not allowlisted")),
    e("attach to an unknown session", Call, Ready, Frame(r#"{"type":"request","id":"h","target":$T,"call":{"serviceId":"pi.session-management","member":"attach","args":["nobody"]}}"#), Answer("session_not_found", "Session was not found")),
    // ---- Abuse ----
    e("hello and echo delivered one byte at a time", Abuse, Fresh, Script(Script::OneByteAtATime), Scripted { closed: false }),
    e("request id reuse", Abuse, Ready, Script(Script::IdReuse), Scripted { closed: false }),
    e("1,000 cancels for unknown ids", Abuse, Ready, Script(Script::UnknownCancels(1000)), Scripted { closed: false }),
    e("subscribe storm of 64", Abuse, Ready, Script(Script::SubscribeStorm(64)), Scripted { closed: false }),
    e("request flood of 500 beyond the active limit", Abuse, Ready, Script(Script::RequestFlood(500)), Scripted { closed: false }),
];
