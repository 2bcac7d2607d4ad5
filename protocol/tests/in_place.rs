//! The one inbound decoder, fed in place: reads land in the decoder's buffer and frames are
//! decoded there, with the same messages and errors as feeding it chunk by chunk.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use baton_protocol::codec::{
    ClientMessageDecoder, DecodeError, MessageDecoder, ServerFrameDecoder, WireMessage,
};
use baton_protocol::{
    ClientMessage, Id, Request, ServerFrame, ServerMessage, ServiceUpdate, Target, Value,
    encode_frame,
};
use bytes::BytesMut;

fn request(id: &str) -> ClientMessage {
    ClientMessage::Request(Request {
        id: Id::new(id).unwrap(),
        target: Target::Server(
            baton_protocol::ServerId::parse("00000000-0000-4000-8000-000000000001").unwrap(),
        ),
        call: Value::from_json(r#"{"serviceId":"pi.models","member":"list","args":[]}"#).unwrap(),
    })
}

fn update(sequence: u64) -> ServerMessage {
    ServerMessage::ServiceUpdate(ServiceUpdate {
        subscription_id: Id::new("service-1").unwrap(),
        update: Value::from_json(&format!(
            r#"{{"type":"state","member":"reply","sequence":{sequence},"ops":[["a",["text"],"tok"]]}}"#
        ))
        .unwrap(),
    })
}

fn stream_of(messages: &[ClientMessage]) -> Vec<u8> {
    messages
        .iter()
        .flat_map(|m| encode_frame(m, u32::MAX).unwrap().to_vec())
        .collect()
}

/// Feeds `reads` through `read_buffer` + `next_message` (the connection's loop), then ends
/// the stream; returns what was handed out and the first error.
fn read_in_place<M: WireMessage>(reads: &[&[u8]], max: u32) -> (Vec<M>, Option<DecodeError>) {
    let mut d = MessageDecoder::<M>::new(max);
    let mut got = Vec::new();
    for read in reads {
        d.read_buffer(read.len()).extend_from_slice(read);
        loop {
            match d.next_message() {
                Ok(Some(m)) => got.push(m),
                Ok(None) => break,
                Err(e) => return (got, Some(e)),
            }
        }
    }
    (got, d.end().err())
}

/// The same reads through `push`.
fn read_by_push<M: WireMessage>(reads: &[&[u8]], max: u32) -> (Vec<M>, Option<DecodeError>) {
    let mut d = MessageDecoder::<M>::new(max);
    let mut got = Vec::new();
    for read in reads {
        match d.push(read) {
            Ok(ms) => got.extend(ms),
            Err(e) => return (got, Some(e)),
        }
    }
    (got, d.end().err())
}

#[test]
fn reading_in_place_agrees_with_pushing_chunks_at_every_split_of_a_stream() {
    let mut stream = stream_of(&[ClientMessage::hello(), request("request-1")]);
    stream.extend_from_slice(&[0, 0, 0, 1, 0xff]); // a bad payload at the end
    stream.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]); // then an oversize header
    for cut in 0..=stream.len() {
        let reads: [&[u8]; 2] = [&stream[..cut], &stream[cut..]];
        let in_place = read_in_place::<ClientMessage>(&reads, 1024);
        assert_eq!(in_place, read_by_push(&reads, 1024), "cut {cut}");
        assert!(in_place.1.is_some(), "cut {cut}: the stream is bad");
    }
    let good = stream_of(&[ClientMessage::hello(), request("a"), request("b")]);
    for cut in 0..=good.len() {
        let reads: [&[u8]; 2] = [&good[..cut], &good[cut..]];
        let (msgs, err) = read_in_place::<ClientMessage>(&reads, 1024);
        assert_eq!(err, None, "cut {cut}");
        assert_eq!(
            msgs,
            vec![ClientMessage::hello(), request("a"), request("b")]
        );
    }
}

#[test]
fn a_read_with_a_bad_frame_yields_none_of_its_messages_but_earlier_reads_stand() {
    let good = stream_of(&[request("a")]);
    let mut bad = stream_of(&[request("b")]);
    bad.extend_from_slice(&[0, 0, 0, 2, 0xc0, 0x00]);
    let (msgs, err) = read_in_place::<ClientMessage>(&[&good, &bad], 1024);
    assert_eq!(msgs, vec![request("a")]);
    assert_eq!(
        err.unwrap().to_string(),
        "Invalid client protocol frame: CBOR tags are not supported"
    );
}

#[test]
fn an_oversize_header_fails_before_its_payload_is_buffered_or_reserved() {
    let mut d = ClientMessageDecoder::new(1024);
    // A good frame, then the header of one frame over the limit, and no payload yet.
    let mut read = stream_of(&[ClientMessage::hello()]);
    read.extend_from_slice(&1025u32.to_be_bytes());
    d.read_buffer(read.len()).extend_from_slice(&read);
    assert_eq!(
        d.next_message().unwrap_err().to_string(),
        "Invalid client protocol frame: Frame length 1025 exceeds configured limit of 1024"
    );
    assert_eq!(
        d.next_message().unwrap_err(),
        DecodeError::Failed {
            side: baton_protocol::Side::Client
        },
        "sticky"
    );
    assert_eq!(
        d.end().unwrap_err().to_string(),
        "client message decoder has failed"
    );
}

#[test]
fn a_large_declared_frame_reserves_in_steps_not_its_whole_length() {
    let mut d = ClientMessageDecoder::default();
    let header = (16u32 * 1024 * 1024).to_be_bytes();
    d.read_buffer(4).extend_from_slice(&header);
    assert_eq!(d.next_message().unwrap(), None);
    assert!(
        d.read_buffer(0).capacity() <= 2 * baton_protocol::frame::PAYLOAD_RESERVE_STEP,
        "a header alone must not reserve the frame: {}",
        d.read_buffer(0).capacity()
    );
    assert_eq!(
        d.end().unwrap_err().to_string(),
        "Invalid client protocol framing: Truncated frame at end of stream"
    );
}

#[test]
fn the_read_buffer_is_reused_in_place_once_its_payloads_are_dropped() {
    let frames = stream_of(&[request("a"), request("b")]);
    let mut d = ClientMessageDecoder::new(1024);
    let first = d.read_buffer(4096);
    let allocation = first.as_ptr() as usize..first.as_ptr() as usize + first.capacity();
    for round in 0..100 {
        // Each first read ends inside a frame, so the buffer holds a cut frame when the next
        // read is reserved; 100 rounds write far more than the allocation holds.
        let cut = frames.len() - 3;
        // Asking for less than the allocation holds: its room is reclaimed, not regrown.
        let buf = d.read_buffer(1024);
        assert!(
            allocation.contains(&(buf.as_ptr() as usize)),
            "round {round}: no reallocation, the decoded payloads gave their room back"
        );
        buf.extend_from_slice(&frames[..cut]);
        assert_eq!(
            d.next_message().unwrap(),
            Some(request("a")),
            "round {round}"
        );
        assert_eq!(d.next_message().unwrap(), None);
        d.read_buffer(1024).extend_from_slice(&frames[cut..]);
        assert_eq!(d.next_message().unwrap(), Some(request("b")));
        assert_eq!(d.next_message().unwrap(), None);
        assert_eq!(d.buffered(), 0);
    }
    d.end().unwrap();
}

#[test]
fn a_clients_update_is_a_zero_copy_slice_of_the_read_buffer() {
    let frame = encode_frame(&update(7), u32::MAX).unwrap();
    let mut d = ServerFrameDecoder::default();
    let buf = d.read_buffer(frame.len());
    buf.extend_from_slice(&frame);
    let region = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
    let Some(ServerFrame::Update(u)) = d.next_message().unwrap() else {
        panic!("not an update")
    };
    let at = u.update.as_ptr() as usize;
    assert!(
        region.contains(&at),
        "the update's bytes point into the read buffer"
    );
    assert_eq!(u.into_message().unwrap(), update(7));
}

#[test]
fn the_client_decoder_agrees_with_the_value_decoder_frame_by_frame() {
    let mut stream = BytesMut::new();
    for m in [
        update(1),
        ServerMessage::Attachment(None),
        update(2),
        update(3),
    ] {
        stream.extend_from_slice(&encode_frame(&m, u32::MAX).unwrap());
    }
    for cut in 0..=stream.len() {
        let reads: [&[u8]; 2] = [&stream[..cut], &stream[cut..]];
        let (values, err) = read_in_place::<ServerMessage>(&reads, 1024);
        assert_eq!(err, None);
        let mut d = ServerFrameDecoder::new(1024);
        let mut frames = Vec::new();
        for read in reads {
            d.read_buffer(0).extend_from_slice(read);
            while let Some(f) = d.next_message().unwrap() {
                frames.push(f.into_message().unwrap());
            }
        }
        d.end().unwrap();
        assert_eq!(frames, values, "cut {cut}");
        assert_eq!(frames.len(), 4);
    }
}

#[test]
fn a_callers_buffer_decodes_like_the_decoders_own() {
    let stream = stream_of(&[ClientMessage::hello(), request("x")]);
    let mut buf = BytesMut::from(&stream[..stream.len() - 1]);
    let mut d = ClientMessageDecoder::default();
    assert_eq!(d.decode(&mut buf).unwrap(), Some(ClientMessage::hello()));
    assert_eq!(d.decode(&mut buf).unwrap(), None);
    assert_eq!(
        d.end_of(&buf).unwrap_err().to_string(),
        "Invalid client protocol framing: Truncated frame at end of stream"
    );
    assert_eq!(
        d.decode(&mut buf).unwrap_err().to_string(),
        "client message decoder has failed"
    );
}

#[test]
fn a_second_end_of_stream_is_reported_as_ended() {
    let mut d = ClientMessageDecoder::default();
    d.end().unwrap();
    assert_eq!(
        d.end().unwrap_err().to_string(),
        "client message decoder has ended"
    );
}
