//! `baton-wire`: encode and decode Pi v8 frames from the command line, one per line.
//!
//! ```text
//! baton-wire encode --side client|server [--max-frame-length N]   JSON lines in, hex frames out
//! baton-wire decode --side client|server [--max-frame-length N]   hex frames in, JSON lines out
//! ```
//!
//! Every input line is independent. A line that fails prints `error: <message>` in its place;
//! the exit status is 1 if any line failed, 2 for bad arguments.

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
    "usage: baton-wire (encode|decode) --side (client|server) [--max-frame-length N]

  encode   read one JSON message per line on stdin, print each full frame as hex
  decode   read one hex frame per line on stdin, print each message as one JSON line

Each line is independent; a failing line prints `error: <message>`.";

#[derive(Clone, Copy)]
enum Mode {
    Encode,
    Decode,
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
    let stdin = std::io::stdin();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut failed = false;
    for line in stdin.lock().lines() {
        let Ok(line) = line else {
            eprintln!("baton-wire: stdin is not valid UTF-8 text");
            return ExitCode::from(2);
        };
        if line.trim().is_empty() {
            continue;
        }
        let max = args.max_frame_length;
        let result = match (args.mode, args.client) {
            (Mode::Encode, true) => encode_line::<ClientMessage>(&line, max),
            (Mode::Encode, false) => encode_line::<ServerMessage>(&line, max),
            (Mode::Decode, true) => decode_line::<ClientMessage>(&line, max),
            (Mode::Decode, false) => decode_line::<ServerMessage>(&line, max),
        };
        let written = match result {
            Ok(text) => writeln!(out, "{text}"),
            Err(e) => {
                failed = true;
                writeln!(out, "error: {e}")
            }
        };
        if written.is_err() {
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
