//! Length-prefixed framing: split and coalesced input, limits at the header, truncation.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use baton_protocol::frame::{FrameDecoder, FrameError, encode_frame};
use bytes::BytesMut;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn drain(d: &mut FrameDecoder, buf: &mut BytesMut) -> Result<Vec<Vec<u8>>, FrameError> {
    let mut out = Vec::new();
    while let Some(f) = d.decode(buf)? {
        out.push(f.to_vec());
    }
    Ok(out)
}

#[test]
fn payloads_are_prefixed_with_a_big_endian_length() {
    assert_eq!(
        encode_frame(&[0xaa, 0xbb, 0xcc]).unwrap(),
        unhex("00000003aabbcc")
    );
    assert_eq!(encode_frame(&[]).unwrap(), unhex("00000000"));
}

#[test]
fn coalesced_and_empty_frames_decode_in_order() {
    let mut d = FrameDecoder::default();
    let mut buf = BytesMut::from(&unhex("00000001610000000000000003626364")[..]);
    let frames = drain(&mut d, &mut buf).unwrap();
    assert_eq!(frames, vec![vec![0x61], vec![], vec![0x62, 0x63, 0x64]]);
    d.end(&buf).unwrap();
}

#[test]
fn every_split_point_across_two_frames_yields_the_same_payloads() {
    let mut stream = encode_frame(b"hello").unwrap();
    stream.extend(encode_frame(&[7u8; 300]).unwrap());
    for split in 0..=stream.len() {
        let mut d = FrameDecoder::default();
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&stream[..split]);
        let mut frames = drain(&mut d, &mut buf).unwrap();
        buf.extend_from_slice(&stream[split..]);
        frames.extend(drain(&mut d, &mut buf).unwrap());
        assert_eq!(
            frames,
            vec![b"hello".to_vec(), vec![7u8; 300]],
            "split at {split}"
        );
        d.end(&buf).unwrap();
    }
}

#[test]
fn byte_at_a_time_delivery_assembles_large_payloads() {
    let payload: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    let stream = encode_frame(&payload).unwrap();
    let mut d = FrameDecoder::default();
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for b in stream {
        buf.extend_from_slice(&[b]);
        got.extend(drain(&mut d, &mut buf).unwrap());
    }
    assert_eq!(got, vec![payload]);
}

#[test]
fn oversized_declared_length_fails_as_soon_as_the_header_is_complete() {
    let mut d = FrameDecoder::new(3);
    let mut buf = BytesMut::from(&[0, 0, 0, 4][..]);
    assert_eq!(
        d.decode(&mut buf).unwrap_err().to_string(),
        "Frame length 4 exceeds configured limit of 3"
    );
    assert_eq!(d.decode(&mut buf).unwrap_err(), FrameError::Failed);
    assert_eq!(
        d.decode(&mut buf).unwrap_err().to_string(),
        "Frame decoder has failed"
    );
}

#[test]
fn sixteen_byte_frame_over_an_eight_byte_limit_is_refused() {
    let mut d = FrameDecoder::new(8);
    let mut buf = BytesMut::from(&encode_frame(&[0u8; 16]).unwrap()[..]);
    assert_eq!(
        d.decode(&mut buf).unwrap_err().to_string(),
        "Frame length 16 exceeds configured limit of 8"
    );
}

#[test]
fn a_frame_exactly_at_the_limit_is_accepted() {
    let mut d = FrameDecoder::new(8);
    let mut buf = BytesMut::from(&encode_frame(&[1u8; 8]).unwrap()[..]);
    assert_eq!(drain(&mut d, &mut buf).unwrap(), vec![vec![1u8; 8]]);
}

#[test]
fn truncation_at_end_of_stream_is_an_error() {
    for partial in ["0000000201", "000000", "00"] {
        let mut d = FrameDecoder::default();
        let mut buf = BytesMut::from(&unhex(partial)[..]);
        assert!(drain(&mut d, &mut buf).unwrap().is_empty());
        assert_eq!(
            d.end(&buf).unwrap_err().to_string(),
            "Truncated frame at end of stream",
            "{partial}"
        );
        assert_eq!(d.end(&buf).unwrap_err(), FrameError::Failed);
    }
}

#[test]
fn an_empty_stream_ends_cleanly_and_cannot_be_used_after_end() {
    let mut d = FrameDecoder::default();
    let mut buf = BytesMut::new();
    assert!(drain(&mut d, &mut buf).unwrap().is_empty());
    d.end(&buf).unwrap();
    assert_eq!(
        d.decode(&mut buf).unwrap_err().to_string(),
        "Frame decoder has ended"
    );
}

#[test]
fn a_zero_frame_limit_is_refused_where_one_byte_is_required() {
    assert!(FrameDecoder::with_nonzero_limit(0).is_err());
    assert!(FrameDecoder::with_nonzero_limit(1).is_ok());
}
