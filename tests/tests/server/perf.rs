//! Rough loopback figures (ignored by default; run with `--ignored --nocapture`, ideally in
//! release mode). Not a benchmark harness: one connection, the test host, wall-clock time.

use baton_protocol::{Outcome, ServerMessage, Value};
use baton_tests::host::TestHost;
use baton_tests::peer::call;
use baton_tests::server::{TestServer, config};

const N: u32 = 20_000;

#[expect(clippy::print_stdout, reason = "reports figures of a hand-run test")]
async fn measure(s: &TestServer, label: &str) {
    let mut p = s.ready_peer().await;
    let echo = call("test", "echo", vec![Value::from("x")]);
    let start = tokio::time::Instant::now();
    for _ in 0..N {
        assert_eq!(
            p.call(p.server_target(), echo.clone()).await,
            Outcome::Value(Value::from("x"))
        );
    }
    let seq = start.elapsed();
    let start = tokio::time::Instant::now();
    for _ in 0..N {
        p.request(p.server_target(), echo.clone()).await;
    }
    for _ in 0..N {
        assert!(matches!(p.recv().await, ServerMessage::Response(_)));
    }
    let pipelined = start.elapsed();
    println!(
        "{label}: sequential round trip {:.1} µs; pipelined {:.0} req/s",
        seq.as_secs_f64() * 1e6 / f64::from(N),
        f64::from(N) / pipelined.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing figures, run by hand"]
async fn loopback_request_figures() {
    let unix = TestServer::unix(TestHost::new(&[]), config()).await;
    measure(&unix, "unix").await;
    let tcp = TestServer::tcp(TestHost::new(&[]), config()).await;
    measure(&tcp, "tcp").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing figures, run by hand"]
async fn fan_out_figures() {
    let host = TestHost::new(&[]);
    let s = TestServer::unix(host.clone(), config()).await;
    let mut peers = Vec::new();
    for n in 0..50 {
        let mut p = s.ready_peer().await;
        let sub = call(
            "$chord.service",
            "subscribe",
            vec![
                Value::from(format!("service-{n}")),
                Value::from("test.counter"),
                Value::from("singleton"),
            ],
        );
        assert!(matches!(
            p.call(p.server_target(), sub).await,
            Outcome::Value(_)
        ));
        peers.push(p);
    }
    let updates = 2_000;
    let start = tokio::time::Instant::now();
    let mut encodes = 0;
    for _ in 0..updates {
        encodes += host.bump();
    }
    let publish = start.elapsed();
    // Slow readers get resyncs instead of every update; read until the last sequence shows.
    let last = format!("\"sequence\":{}", host.counter_sequence());
    let mut frames = 0;
    for p in &mut peers {
        loop {
            let ServerMessage::ServiceUpdate(u) = p.recv().await else {
                panic!("update expected");
            };
            frames += 1;
            if u.update.to_json().contains(&last) {
                break;
            }
        }
    }
    let total = start.elapsed();
    println!(
        "fan-out to 50 subscribers: {:.1} µs per publish of one update to all, {} encodings for {} updates; {} frames delivered (resyncs included) in {:.0} ms",
        publish.as_secs_f64() * 1e6 / f64::from(updates),
        encodes,
        updates,
        frames,
        total.as_secs_f64() * 1e3
    );
}
