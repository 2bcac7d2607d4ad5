//! Specifications of the in-flight limit: callers' requests beyond it wait in the core, in
//! order, and take a slot when one settles (answered, cancelled, timed out, failed, or lost
//! with the connection); what waits can be cancelled or time out without ever being sent.

use super::*;

/// A live core that admits two callers' requests at once.
fn limited(reconnect: Option<ReconnectPolicy>) -> Pair {
    let mut pair = Pair::with_limit(reconnect, None, 2);
    pair.open_and_greet();
    assert!(pair.conn.is_live());
    pair
}

/// Requests 1, 2 and 3 (tags and members `r1`..`r3`): the first two are sent, the third waits.
fn three_requests(pair: &mut Pair, deadline: Option<Instant>) -> [u64; 3] {
    let numbers = [1, 2, 3].map(|n| pair.request(n, &format!("r{n}"), deadline));
    for n in [1, 2] {
        let sent = pair.recv_request();
        assert_eq!(sent.call, call(&format!("r{n}")));
        assert_eq!(sent.id, request_id(numbers[n as usize - 1]));
    }
    assert_eq!(pair.try_recv(), None, "the third waits for a slot");
    assert_eq!(pair.conn.requests_in_flight(), (2, 1));
    numbers
}

fn is_cancel_of(msg: &ClientMessage, number: u64) -> bool {
    matches!(msg, ClientMessage::Cancel(c) if c.id == request_id(number))
}

#[test]
fn requests_beyond_the_limit_wait_in_order_and_go_out_as_answers_free_slots() {
    let mut pair = limited(None);
    let [first, ..] = three_requests(&mut pair, None);
    let fourth = pair.request(4, "r4", None);
    assert_eq!(pair.conn.requests_in_flight(), (2, 2));

    pair.respond(&request_id(first), Outcome::Void);
    assert_eq!(pair.reply_of(1), Ok(Reply::Void));
    assert_eq!(
        pair.recv_request().call,
        call("r3"),
        "first come, first admitted"
    );
    assert_eq!(pair.try_recv(), None);
    assert_eq!(pair.conn.requests_in_flight(), (2, 1));

    // A server error settles a request as well as a result does.
    let busy = WireError::new("busy", "later");
    pair.respond(&request_id(2), Outcome::Error(busy.clone()));
    assert_eq!(pair.reply_of(2), Err(RequestError::Server(busy)));
    let sent = pair.recv_request();
    assert_eq!((sent.call, sent.id), (call("r4"), request_id(fourth)));
    assert_eq!(pair.conn.requests_in_flight(), (2, 0));
}

#[test]
fn cancelling_a_sent_request_frees_its_slot_for_the_next_waiting_one() {
    let mut pair = limited(None);
    let [first, ..] = three_requests(&mut pair, None);
    pair.command(Command::Cancel(first));
    assert!(is_cancel_of(&pair.recv(), first));
    assert_eq!(pair.recv_request().call, call("r3"));
    assert_eq!(pair.conn.requests_in_flight(), (2, 0));
    // The late answer of the cancelled one is ignored, and settles nothing more.
    pair.respond(&request_id(first), Outcome::Void);
    assert!(pair.conn.is_live());
    assert!(pair.answers().is_empty());
    assert_eq!(pair.conn.requests_in_flight(), (2, 0));
}

#[test]
fn a_timed_out_request_frees_its_slot_for_the_next_waiting_one() {
    let mut pair = limited(None);
    let first = pair.request(1, "r1", Some(pair.now + Duration::from_secs(1)));
    pair.request(2, "r2", None);
    pair.request(3, "r3", None);
    let _ = (pair.recv_request(), pair.recv_request());
    assert_eq!(pair.try_recv(), None);
    pair.advance(Duration::from_secs(1));
    assert_eq!(pair.reply_of(1), Err(RequestError::TimedOut));
    assert!(is_cancel_of(&pair.recv(), first));
    assert_eq!(pair.recv_request().call, call("r3"));
    assert_eq!(pair.conn.requests_in_flight(), (2, 0));
}

#[test]
fn a_lost_connection_frees_the_slots_of_what_was_sent_and_what_waited_goes_out_on_the_next() {
    let mut pair = limited(Some(policy()));
    let [_, _, third] = three_requests(&mut pair, None);
    pair.conn.handle_lost(pair.now, "reset by peer".to_owned());
    let answers = pair.answers();
    assert!(
        matches!(
            &answers[..],
            [
                (1, Answer::Reply(Err(RequestError::OutcomeUnknown(_)))),
                (2, Answer::Reply(Err(RequestError::OutcomeUnknown(_)))),
            ]
        ),
        "{answers:?}"
    );
    // The third took a freed slot: it is held for the next transport.
    assert_eq!(pair.conn.requests_in_flight(), (1, 0));
    pair.advance(Duration::from_millis(100));
    pair.open_and_greet();
    let sent = pair.recv_request();
    assert_eq!((&sent.call, &sent.id), (&call("r3"), &request_id(third)));
    pair.respond(&sent.id, Outcome::Void);
    assert_eq!(pair.reply_of(3), Ok(Reply::Void));
    assert_eq!(pair.conn.requests_in_flight(), (0, 0));
}

#[test]
fn a_waiting_request_that_is_cancelled_never_leaves_and_takes_no_slot() {
    let mut pair = limited(None);
    let [first, _, third] = three_requests(&mut pair, None);
    pair.command(Command::Cancel(third));
    assert_eq!(pair.conn.requests_in_flight(), (2, 0));
    pair.respond(&request_id(first), Outcome::Void);
    assert_eq!(pair.reply_of(1), Ok(Reply::Void));
    assert_eq!(pair.try_recv(), None, "nothing was waiting any more");
    assert_eq!(pair.conn.requests_in_flight(), (1, 0));
    assert!(
        pair.answers().is_empty(),
        "a cancelled caller is not answered"
    );
}

#[test]
fn a_waiting_request_times_out_at_its_deadline_without_being_sent() {
    let mut pair = limited(None);
    pair.request(1, "r1", None);
    pair.request(2, "r2", None);
    pair.request(3, "r3", Some(pair.now + Duration::from_secs(1)));
    let _ = (pair.recv_request(), pair.recv_request());
    assert_eq!(
        pair.conn.poll_timeout(),
        Some(pair.now + Duration::from_secs(1)),
        "a waiting request's deadline is armed"
    );
    pair.advance(Duration::from_secs(1));
    assert_eq!(pair.reply_of(3), Err(RequestError::TimedOut));
    assert_eq!(pair.conn.requests_in_flight(), (2, 0));
    assert_eq!(pair.conn.poll_timeout(), None, "and disarmed");
    pair.respond(&request_id(1), Outcome::Void);
    assert_eq!(pair.try_recv(), None, "and it never leaves");
}

#[test]
fn a_request_admitted_past_its_deadline_fails_as_timed_out_unsent() {
    let mut pair = limited(None);
    pair.request(1, "r1", None);
    pair.request(2, "r2", None);
    let at = pair.now + Duration::from_secs(1);
    pair.request(3, "r3", Some(at));
    let _ = (pair.recv_request(), pair.recv_request());
    // The slot frees at the very instant of its deadline, before the timer ran.
    pair.now = at;
    pair.respond(&request_id(1), Outcome::Void);
    let answers = pair.answers();
    assert!(
        matches!(
            &answers[..],
            [
                (1, Answer::Reply(Ok(Reply::Void))),
                (3, Answer::Reply(Err(RequestError::TimedOut))),
            ]
        ),
        "{answers:?}"
    );
    assert_eq!(pair.try_recv(), None);
    assert_eq!(pair.conn.requests_in_flight(), (1, 0));
}

#[test]
fn once_as_many_wait_as_the_limit_admits_the_core_takes_no_more_commands() {
    let mut pair = limited(None);
    three_requests(&mut pair, None);
    assert!(pair.conn.accepts_commands());
    pair.request(4, "r4", None);
    assert_eq!(pair.conn.requests_in_flight(), (2, 2));
    assert!(
        !pair.conn.accepts_commands(),
        "callers now wait on the handles' queue"
    );
    pair.respond(&request_id(1), Outcome::Void);
    assert!(pair.conn.accepts_commands());
}

#[test]
fn attaching_subscribing_and_the_cores_own_requests_take_no_slot() {
    let mut pair = Pair::with_limit(None, None, 1);
    pair.open_and_greet();
    pair.request(1, "r1", None);
    let _ = pair.recv_request();
    pair.request(2, "r2", None);
    assert_eq!(pair.try_recv(), None);
    // The limit is full, yet these go out at once.
    pair.attach("attachment-1");
    let (r, _) = pair.subscribe(5, TargetSpec::Explicit(Target::Server(server_id())));
    pair.respond(&r.id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)));
    assert_eq!(pair.answered(5), Some(Ok(())));
    pair.command(Command::Unsubscribe(5));
    let unsub = pair.recv_request();
    assert!(matches!(
        ControlCall::decode(&ServiceCall::parse(&unsub.call).unwrap()),
        Some(ControlCall::Unsubscribe { .. })
    ));
    assert_eq!(pair.conn.requests_in_flight(), (1, 1));
}

#[test]
fn a_request_that_fails_before_it_is_sent_gives_its_slot_back() {
    let mut pair = Pair::with_limit(None, None, 1);
    pair.open_and_greet();
    // Not attached: refused by the core.
    pair.request_to(
        1,
        TargetSpec::Session(Id::new("session-1").unwrap()),
        "p",
        None,
    );
    assert!(matches!(
        pair.reply_of(1),
        Err(RequestError::NotAttached(_))
    ));
    // Over the frame limit: refused by the encoder.
    pair.command(Command::Request(UserRequest {
        number: pair.numbers.next(),
        target: TargetSpec::Explicit(Target::Server(server_id())),
        call: Value::from("x".repeat(MAX_FRAME as usize).as_str()),
        deadline: None,
        waiter: 2,
    }));
    assert!(matches!(pair.reply_of(2), Err(RequestError::Encode(_))));
    assert_eq!(pair.conn.requests_in_flight(), (0, 0));
    pair.request(3, "r3", None);
    assert_eq!(pair.recv_request().call, call("r3"));
}

#[test]
fn closing_refuses_what_waited_as_never_sent() {
    let mut pair = limited(None);
    three_requests(&mut pair, None);
    pair.conn.close("client closed");
    let answers = pair.answers();
    assert!(
        matches!(
            &answers[..],
            [
                (1, Answer::Reply(Err(RequestError::OutcomeUnknown(_)))),
                (2, Answer::Reply(Err(RequestError::OutcomeUnknown(_)))),
                (3, Answer::Reply(Err(RequestError::NotSent(_)))),
            ]
        ),
        "{answers:?}"
    );
    assert_eq!(pair.conn.requests_in_flight(), (0, 0));
    assert_eq!(pair.conn.poll_timeout(), None);
}

#[test]
fn between_connections_admitted_requests_are_held_and_the_rest_wait_behind_them() {
    let mut pair = limited(Some(ReconnectPolicy {
        initial_delay: Duration::from_secs(5),
        max_delay: Duration::from_secs(5),
        ..policy()
    }));
    pair.conn.handle_lost(pair.now, "gone".to_owned());
    let _ = pair.events();
    for n in 1..=3 {
        pair.request(n, &format!("r{n}"), None);
    }
    assert_eq!(pair.conn.requests_in_flight(), (2, 1));
    pair.advance(Duration::from_secs(5));
    pair.open_and_greet();
    assert_eq!(pair.recv_request().call, call("r1"));
    let second = pair.recv_request();
    assert_eq!(second.call, call("r2"));
    assert_eq!(pair.try_recv(), None);
    pair.respond(&second.id, Outcome::Void);
    assert_eq!(pair.recv_request().call, call("r3"));
}
