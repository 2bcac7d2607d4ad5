//! The `baton-wire` command: encode and decode lines, independent errors, exit codes.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::Write;
use std::process::{Command, Stdio};

fn run(args: &[&str], input: &str) -> (String, i32) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton-wire"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        out.status.code().unwrap(),
    )
}

const HELLO_HEX: &str = "00000015a264747970656568656c6c6f6776657273696f6e08";
const ORDERED: &str = r#"{"type":"response","id":"request-2","ok":true,"result":{"zeta":[{"m":1.5,"b":null}],"alpha":"x","nested":{"b":{"d":1,"c":2},"a":[]}}}"#;
const ORDERED_HEX: &str = "00000059a4647479706568726573706f6e736562696469726571756573742d32626f6bf566726573756c74a3647a65746181a2616dfb3ff80000000000006162f665616c7068616178666e6573746564a26162a2616401616302616180";

#[test]
fn encode_prints_one_hex_frame_per_json_line() {
    let (out, code) = run(
        &["encode", "--side", "client"],
        "{\"type\":\"hello\",\"version\":8}\n",
    );
    assert_eq!(out, format!("{HELLO_HEX}\n"));
    assert_eq!(code, 0);
    let (out, code) = run(&["encode", "--side", "server"], &format!("{ORDERED}\n"));
    assert_eq!(out, format!("{ORDERED_HEX}\n"));
    assert_eq!(code, 0);
}

#[test]
fn decode_prints_json_with_key_order_preserved() {
    let (out, code) = run(&["decode", "--side", "server"], &format!("{ORDERED_HEX}\n"));
    assert_eq!(out, format!("{ORDERED}\n"));
    assert_eq!(code, 0);
}

#[test]
fn each_line_is_independent_and_errors_use_the_decoder_message() {
    let input = format!("{HELLO_HEX}\n00000002c000\n{HELLO_HEX}\nzz\n{HELLO_HEX}{HELLO_HEX}\n");
    let (out, code) = run(&["decode", "--side", "client"], &input);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], r#"{"type":"hello","version":8}"#);
    assert_eq!(
        lines[1],
        "error: Invalid client protocol frame: CBOR tags are not supported"
    );
    assert_eq!(lines[2], r#"{"type":"hello","version":8}"#);
    assert!(lines[3].starts_with("error: "), "{}", lines[3]);
    assert_eq!(
        lines[4],
        "error: Frame must contain exactly one complete payload"
    );
    assert_eq!(code, 1);
}

#[test]
fn encode_refuses_invalid_messages_and_respects_the_frame_limit() {
    let input = "{\"type\":\"hello\",\"version\":\"8\"}\n{\"type\":\"hello\",\"version\":8}\n";
    let (out, code) = run(
        &["encode", "--side", "client", "--max-frame-length", "8"],
        input,
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "error: Invalid client protocol message");
    assert_eq!(
        lines[1],
        "error: Unable to encode client protocol message: CBOR byte length exceeds configured limit of 8"
    );
    assert_eq!(code, 1);
}

#[test]
fn truncated_frames_are_reported() {
    let (out, _) = run(&["decode", "--side", "server"], "0000000201\n");
    assert_eq!(
        out,
        "error: Invalid server protocol framing: Truncated frame at end of stream\n"
    );
}

#[test]
fn bad_arguments_exit_with_status_2() {
    assert_eq!(run(&["encode"], "").1, 2);
    assert_eq!(run(&["frobnicate", "--side", "client"], "").1, 2);
}

/// `batch`: one answer line per command line, in order, errors in place; `chunk` is one read
/// into a fresh decoder then end of stream, answered as `{"messages":[…]}` plus `"error"`.
#[test]
fn batch_answers_every_command_with_one_line_in_order() {
    let cut = &HELLO_HEX[..HELLO_HEX.len() - 2];
    let input = format!(
        "encode {{\"type\":\"hello\",\"version\":8}}\n\
         decode {HELLO_HEX}\n\
         chunk {HELLO_HEX}{HELLO_HEX}\n\
         chunk {HELLO_HEX}{cut}\n\
         chunk {HELLO_HEX}ffffffff\n\
         decode 00000002c000\n\
         frobnicate 00\n\
         encode {{\"type\":\"hello\",\"version\":8}}\n"
    );
    let (out, code) = run(&["batch", "--side", "client"], &input);
    let lines: Vec<&str> = out.lines().collect();
    let hello = r#"{"type":"hello","version":8}"#;
    assert_eq!(
        lines,
        [
            HELLO_HEX,
            hello,
            &format!(r#"{{"messages":[{hello},{hello}]}}"#),
            &format!(
                r#"{{"messages":[{hello}],"error":"Invalid client protocol framing: Truncated frame at end of stream"}}"#
            ),
            r#"{"messages":[],"error":"Invalid client protocol frame: Frame length 4294967295 exceeds configured limit of 16777216"}"#,
            "error: Invalid client protocol frame: CBOR tags are not supported",
            r#"error: unknown batch command "frobnicate""#,
            HELLO_HEX,
        ]
    );
    assert_eq!(code, 1, "a failed line sets the exit status");
}

#[test]
fn batch_applies_the_side_and_the_frame_limit() {
    let input = format!("decode {HELLO_HEX}\nencode {{\"type\":\"hello\",\"version\":8}}\n");
    let (out, _) = run(
        &["batch", "--side", "server", "--max-frame-length", "8"],
        &input,
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "error: Invalid server protocol frame: Frame length 21 exceeds configured limit of 8",
            "error: Invalid server protocol message",
        ]
    );
}

const NEGATIVE_ZERO_HELLO_HEX: &str =
    "0000001da264747970656568656c6c6f6776657273696f6efb8000000000000000";

#[test]
fn negative_zero_prints_as_minus_zero_and_encodes_back_to_the_same_float() {
    let (out, code) = run(
        &["decode", "--side", "client"],
        &format!("{NEGATIVE_ZERO_HELLO_HEX}\n"),
    );
    assert_eq!(out, "{\"type\":\"hello\",\"version\":-0}\n");
    assert_eq!(code, 0);
    let (out, code) = run(&["encode", "--side", "client"], &out);
    assert_eq!(out, format!("{NEGATIVE_ZERO_HELLO_HEX}\n"));
    assert_eq!(code, 0);
}
