//! `baton-wire`: encode and decode Pi v8 frames from the command line, one per line.
//!
//! ```text
//! baton-wire encode --side client|server [--max-frame-length N]   JSON lines in, hex frames out
//! baton-wire decode --side client|server [--max-frame-length N]   hex frames in, JSON lines out
//! baton-wire batch  --side client|server [--max-frame-length N]   commands in, one line out each
//! ```
//!
//! Every input line is independent. A line that fails prints `error: <message>` in its place;
//! the exit status is 1 if any line failed, 2 for bad arguments.
//!
//! `batch` is the machine interface for long-running drivers (the interop suites): each line is
//! `encode <json>`, `decode <hex>` or `chunk <hex>`, answered by exactly one line, and output is
//! flushed whenever no further input is buffered, so a driver may pipeline requests.
//! `encode` and `decode` answer as the commands of the same name. `chunk` feeds the bytes to a
//! fresh decoder as **one** read, then ends the stream, and prints one JSON object:
//! `{"messages":[…]}` with every message that read yielded, plus `"error":"<message>"` for the
//! first failure (of the read, in which case `messages` is empty, or of the end of stream).

#![expect(
    clippy::print_stderr,
    reason = "a command-line tool reports usage errors on stderr"
)]

use std::io::{BufRead, Write};
use std::process::ExitCode;

use baton_protocol::codec::{MessageDecoder, WireMessage};
use baton_protocol::limits::DEFAULT_MAX_FRAME_LENGTH;
use baton_protocol::{ClientMessage, ServerMessage, Value, encode_frame, from_value, to_value};

const USAGE: &str =
    "usage: baton-wire (encode|decode|batch) --side (client|server) [--max-frame-length N]

  encode   read one JSON message per line on stdin, print each full frame as hex
  decode   read one hex frame per line on stdin, print each message as one JSON line
  batch    read `encode <json>`, `decode <hex>` or `chunk <hex>` lines; answer each with one
           line (chunk: one read into a fresh decoder, then end of stream, as
           {\"messages\":[...]} plus \"error\" for the first failure)

Each line is independent; a failing line prints `error: <message>`.";

#[derive(Clone, Copy)]
enum Mode {
    Encode,
    Decode,
    Batch,
}

struct Args {
    mode: Mode,
    client: bool,
    max_frame_length: u32,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mode = match args.next().as_deref() {
        Some("encode") => Mode::Encode,
        Some("decode") => Mode::Decode,
        Some("batch") => Mode::Batch,
        Some("-h" | "--help") | None => return Err(String::new()),
        Some(other) => return Err(format!("unknown command {other:?}")),
    };
    let mut side = None;
    let mut max_frame_length = DEFAULT_MAX_FRAME_LENGTH;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--side" => side = args.next(),
            "--max-frame-length" => {
                let v = args.next().ok_or("--max-frame-length needs a value")?;
                max_frame_length = v
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or("--max-frame-length must be an integer between 1 and 4294967295")?;
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let client = match side.as_deref() {
        Some("client") => true,
        Some("server") => false,
        Some(other) => return Err(format!("--side must be client or server, not {other:?}")),
        None => return Err("--side client|server is required".to_owned()),
    };
    Ok(Args {
        mode,
        client,
        max_frame_length,
    })
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    let s: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    if !s.len().is_multiple_of(2) {
        return Err("hex input has an odd number of digits".to_owned());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("invalid hex digit near offset {i}"))
        })
        .collect()
}

fn encode_line<M: WireMessage>(line: &str, max: u32) -> Result<String, String> {
    let value = Value::from_json(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let msg: M = from_value(value).map_err(|e| e.to_string())?;
    let frame = encode_frame(&msg, max).map_err(|e| e.to_string())?;
    Ok(hex(&frame))
}

fn decode_line<M: WireMessage>(line: &str, max: u32) -> Result<String, String> {
    let bytes = unhex(line)?;
    let mut decoder = MessageDecoder::<M>::new(max);
    let mut msgs = decoder.push(&bytes).map_err(|e| e.to_string())?;
    decoder.end().map_err(|e| e.to_string())?;
    match (msgs.pop(), msgs.is_empty()) {
        (Some(msg), true) => Ok(to_value(&msg).to_json()),
        _ => Err("Frame must contain exactly one complete payload".to_owned()),
    }
}

/// `chunk`: the bytes as one read into a fresh decoder, then end of stream.
fn chunk_line<M: WireMessage>(line: &str, max: u32) -> Result<String, String> {
    let bytes = unhex(line)?;
    let mut decoder = MessageDecoder::<M>::new(max);
    let (msgs, error) = match decoder.push(&bytes) {
        Ok(msgs) => {
            let error = decoder.end().err().map(|e| e.to_string());
            (msgs, error)
        }
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let messages: Vec<Value> = msgs.iter().map(to_value).collect();
    let mut out = String::from("{\"messages\":");
    out.push_str(&Value::Array(messages).to_json());
    if let Some(e) = error {
        out.push_str(",\"error\":");
        out.push_str(&Value::String(e).to_json());
    }
    out.push('}');
    Ok(out)
}

fn batch_line(line: &str, client: bool, max: u32) -> Result<String, String> {
    let (command, rest) = line.split_once(' ').unwrap_or((line, ""));
    match (command, client) {
        ("encode", true) => encode_line::<ClientMessage>(rest, max),
        ("encode", false) => encode_line::<ServerMessage>(rest, max),
        ("decode", true) => decode_line::<ClientMessage>(rest, max),
        ("decode", false) => decode_line::<ServerMessage>(rest, max),
        ("chunk", true) => chunk_line::<ClientMessage>(rest, max),
        ("chunk", false) => chunk_line::<ServerMessage>(rest, max),
        _ => Err(format!("unknown batch command {command:?}")),
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("baton-wire: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut input = std::io::BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut failed = false;
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(_) => {
                eprintln!("baton-wire: stdin is not valid UTF-8 text");
                return ExitCode::from(2);
            }
        }
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        let max = args.max_frame_length;
        let result = match (args.mode, args.client) {
            (Mode::Encode, true) => encode_line::<ClientMessage>(text, max),
            (Mode::Encode, false) => encode_line::<ServerMessage>(text, max),
            (Mode::Decode, true) => decode_line::<ClientMessage>(text, max),
            (Mode::Decode, false) => decode_line::<ServerMessage>(text, max),
            (Mode::Batch, client) => batch_line(text, client, max),
        };
        let written = match result {
            Ok(text) => writeln!(out, "{text}"),
            Err(e) => {
                failed = true;
                writeln!(out, "error: {e}")
            }
        };
        // A pipelining driver waits for answers: flush once no further input is buffered.
        let idle = matches!(args.mode, Mode::Batch) && input.buffer().is_empty();
        if written
            .and_then(|()| if idle { out.flush() } else { Ok(()) })
            .is_err()
        {
            // Downstream closed (e.g. `| head`): stop quietly.
            return ExitCode::SUCCESS;
        }
    }
    let _ = out.flush();
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
