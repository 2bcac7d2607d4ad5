//! Codec benchmark: our strict codec against the generic ciborium path, side by side.
//!
//! Run: `cargo bench -p baton-protocol --bench codec` (quick smoke: `BATON_BENCH_QUICK=1`; our
//! decode alone for `perf record`: `BATON_BENCH_PROFILE=1`, optionally `BATON_BENCH_ITERS=N`).
//!
//! For each frame (client hello, a small request, a one-op `service_update` append, a ~1 MiB
//! subscription snapshot response):
//!
//! * **ours, decode**: [`decode_payload`] (the envelope read in place from the strict CBOR, its
//!   opaque `call`/`result`/`update` payloads built as [`Value`]s).
//! * **ours, decode in place**: the connections' path: the frame lands in a
//!   [`MessageDecoder`]'s read buffer (a copy standing in for the socket read) and
//!   `next_message` splits and decodes it there. For the `service_update` also as a client
//!   reads it ([`ServerFrameDecoder`]: the update validated and left encoded).
//! * **ours, encode**: [`encode_frame`] (typed envelope → framed bytes).
//! * **baseline, decode**: `ciborium::from_reader` into `ciborium::Value`, then a walk that
//!   applies the profile checks a generic decoder leaves out (depth, no tags, no byte strings,
//!   safe integers, finite numbers, text keys, no duplicates) while building our [`Value`],
//!   then [`from_value`] into the same typed envelope.
//! * **baseline, encode**: `ciborium::into_writer` from a prebuilt `ciborium::Value` of the
//!   message, behind a 4-byte header.
//!
//! Before timing, every case checks that both paths decode to the same message and encode to
//! the same bytes. Each (case, op, codec) runs R repetitions of N iterations (N calibrated to
//! about 20 ms per repetition), ours and the baseline alternating repetition by repetition;
//! the figure is the median ns per frame over the repetitions. Time is the benchmark thread's
//! CPU time on Linux (so time spent waiting for a core on a loaded machine is left out), else
//! wall time.
//! MB/s is frame bytes (header included) / median time, in 10^6 bytes per second.

use std::hint::black_box;
use std::time::{Duration, Instant};

use baton_protocol::cbor::decode_value;
use baton_protocol::codec::{MessageDecoder, ServerFrameDecoder, WireMessage};
use baton_protocol::encode_frame_into;
use baton_protocol::limits::CborLimits;
use baton_protocol::limits::DEFAULT_MAX_FRAME_LENGTH;
use baton_protocol::{
    ClientMessage, Map, Number, ServerMessage, Value, decode_payload, encode_frame, from_value,
    to_value,
};
use bytes::BytesMut;

/// One repetition's timing budget, the number of repetitions, and the least iterations.
#[derive(Debug, Clone, Copy)]
struct Plan {
    target: Duration,
    reps: usize,
    min_iters: u64,
}

impl Plan {
    fn from_env() -> Self {
        if std::env::var_os("BATON_BENCH_QUICK").is_some_and(|v| v != "0") {
            Self {
                target: Duration::from_micros(500),
                reps: 3,
                min_iters: 1,
            }
        } else {
            Self {
                target: Duration::from_millis(20),
                reps: 15,
                min_iters: 10,
            }
        }
    }
}

/// Runs `f` `iters` times and returns the CPU time this thread spent doing it, or the wall
/// time where that cannot be read. On a machine shared with
/// other builds, run time leaves out the time the thread waited for a core, which wall time
/// counts: it is what keeps the figures comparable under load.
#[expect(clippy::disallowed_methods, reason = "benchmarks measure wall time")]
fn time_iters<R>(iters: u64, f: &mut impl FnMut() -> R) -> Duration {
    let cpu = thread_cpu_time();
    let start = Instant::now();
    for _ in 0..iters {
        black_box(f());
    }
    let wall = start.elapsed();
    match (cpu, thread_cpu_time()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => wall,
    }
}

/// This thread's CPU time so far (`CLOCK_THREAD_CPUTIME_ID`, nanosecond resolution).
#[cfg(target_os = "linux")]
fn thread_cpu_time() -> Option<Duration> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    let secs = u64::try_from(t.tv_sec).ok()?;
    let nanos = u32::try_from(t.tv_nsec).ok()?;
    Some(Duration::new(secs, nanos))
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu_time() -> Option<Duration> {
    None
}

/// Iterations per repetition so that one repetition of `f` takes about `plan.target`.
fn calibrate<R>(plan: Plan, f: &mut impl FnMut() -> R) -> u64 {
    // Warm up and calibrate: double until one batch takes a tenth of the budget.
    let mut iters = 1u64;
    let per_iter = loop {
        let t = time_iters(iters, f);
        if t >= plan.target / 10 || iters >= 1 << 30 {
            break t.as_secs_f64() / iters as f64;
        }
        iters *= 2;
    };
    ((plan.target.as_secs_f64() / per_iter) as u64).max(plan.min_iters)
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Median ns per call of each closure. The repetitions of the closures are interleaved
/// (a, b, a, b, …) so that load from other processes on a shared machine hits every
/// contender alike and the ratios stay meaningful even when absolute times drift.
fn measure_interleaved<A, B>(
    plan: Plan,
    mut a: impl FnMut() -> A,
    mut b: impl FnMut() -> B,
) -> (f64, f64) {
    let (na, nb) = (calibrate(plan, &mut a), calibrate(plan, &mut b));
    let mut sa = Vec::with_capacity(plan.reps);
    let mut sb = Vec::with_capacity(plan.reps);
    for _ in 0..plan.reps {
        sa.push(time_iters(na, &mut a).as_secs_f64() * 1e9 / na as f64);
        sb.push(time_iters(nb, &mut b).as_secs_f64() * 1e9 / nb as f64);
    }
    (median(sa), median(sb))
}

// ---------------------------------------------------------------------------------------------
// Baseline: the generic way.

/// Our value → `ciborium::Value`, keys in order (what a generic encoder would be handed).
fn to_ciborium(v: &Value) -> ciborium::Value {
    match v {
        Value::Null => ciborium::Value::Null,
        Value::Bool(b) => ciborium::Value::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => ciborium::Value::Integer(i.into()),
            None => ciborium::Value::Float(n.as_f64()),
        },
        Value::String(s) => ciborium::Value::Text(s.clone()),
        Value::Array(a) => ciborium::Value::Array(a.iter().map(to_ciborium).collect()),
        Value::Map(m) => ciborium::Value::Map(
            m.iter()
                .map(|(k, v)| (ciborium::Value::Text(k.to_owned()), to_ciborium(v)))
                .collect(),
        ),
    }
}

/// The checks ciborium does not make, applied while building our [`Value`].
fn from_ciborium(v: ciborium::Value, depth: u32) -> Option<Value> {
    if depth > 64 {
        return None;
    }
    Some(match v {
        ciborium::Value::Null => Value::Null,
        ciborium::Value::Bool(b) => Value::Bool(b),
        ciborium::Value::Integer(i) => {
            let i = i64::try_from(i128::from(i)).ok()?;
            Value::Number(Number::from_i64(i).ok()?)
        }
        ciborium::Value::Float(f) => Value::Number(Number::from_f64(f).ok()?),
        ciborium::Value::Text(s) => Value::String(s),
        ciborium::Value::Array(items) => {
            if items.len() > 1_000_000 {
                return None;
            }
            Value::Array(
                items
                    .into_iter()
                    .map(|item| from_ciborium(item, depth + 1))
                    .collect::<Option<_>>()?,
            )
        }
        ciborium::Value::Map(entries) => {
            if entries.len() > 1_000_000 {
                return None;
            }
            let mut map = Map::with_capacity(entries.len());
            for (k, v) in entries {
                let ciborium::Value::Text(k) = k else {
                    return None;
                };
                if map.insert(k, from_ciborium(v, depth + 1)?).is_some() {
                    return None;
                }
            }
            Value::Map(map)
        }
        // Byte strings, tags and anything newer are outside the profile.
        _ => return None,
    })
}

fn baseline_decode<M: WireMessage>(payload: &[u8]) -> Option<M> {
    let cv: ciborium::Value = ciborium::from_reader(payload).ok()?;
    from_value(from_ciborium(cv, 0)?).ok()
}

/// The baseline encode into a caller's reused buffer (what a `Framed` writer does).
fn baseline_encode_into(cv: &ciborium::Value, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[0; 4]);
    ciborium::into_writer(cv, &mut *out).expect("writing to a Vec cannot fail");
    let len = u32::try_from(out.len() - 4).expect("benchmark frames are small");
    out[..4].copy_from_slice(&len.to_be_bytes());
}

fn baseline_encode(cv: &ciborium::Value) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    ciborium::into_writer(cv, &mut out).expect("writing to a Vec cannot fail");
    let len = u32::try_from(out.len() - 4).expect("benchmark frames are small");
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}

// ---------------------------------------------------------------------------------------------
// Cases

fn json_msg<M: WireMessage>(json: &str) -> M {
    from_value(Value::from_json(json).expect("valid JSON")).expect("valid message")
}

/// A transcript-like subscription snapshot of about 1 MiB: 2,000 chat messages.
fn snapshot_json() -> String {
    const WORDS: &[&str] = &[
        "the",
        "session",
        "model",
        "returns",
        "a",
        "patch",
        "for",
        "src/lib.rs",
        "with",
        "tests",
        "and",
        "updated",
        "docs;",
        "cargo",
        "build",
        "passes",
        "after",
        "fixing",
        "imports.",
        "Next",
        "we",
        "refactor",
        "decoder",
        "state",
        "machine",
        "into",
        "smaller",
        "steps",
    ];
    let mut messages = Vec::with_capacity(2000);
    let mut w = 0usize;
    for i in 0..2000u32 {
        let mut text = String::new();
        while text.len() < 380 {
            text.push_str(WORDS[w % WORDS.len()]);
            text.push(' ');
            w = w.wrapping_mul(31).wrapping_add(7) % 997;
        }
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let cost = f64::from(i % 97 + 1) * 0.000_137;
        messages.push(format!(
            r#"{{"id":"msg-{i:05}","role":"{role}","timestamp":{ts},"content":[{{"type":"text","text":{text:?}}}],"usage":{{"input":{inp},"output":{out},"cost":{cost}}},"stopReason":"stop"}}"#,
            ts = 1_760_000_000_000u64 + u64::from(i) * 1_337,
            inp = 1_000 + i * 3,
            out = 200 + i % 500,
        ));
    }
    format!(
        r#"{{"type":"response","id":"request-3","ok":true,"result":{{"serviceId":"pi.session","mode":"singleton","instances":[{{"members":[{{"name":"prompt","kind":"method"}},{{"name":"transcript","kind":"state","sequence":0,"ops":[["r",{{"sessionId":"session-1","messages":[{}]}}]]}}]}}]}}}}"#,
        messages.join(",")
    )
}

/// Runs one case, appending its rows.
type CaseFn<'a> = dyn Fn(&'static str, &mut Vec<Row>, &mut Vec<Breakdown>) + 'a;

struct Row {
    case: &'static str,
    op: &'static str,
    bytes: usize,
    ours: f64,
    baseline: f64,
}

/// Where our time goes (ours only): the CBOR layer alone, and encoding into a reused buffer.
struct Breakdown {
    case: &'static str,
    decode_full: f64,
    decode_cbor_only: f64,
    encode_fresh: f64,
    encode_reused: f64,
}

fn bench_case<M>(
    plan: Plan,
    case: &'static str,
    msg: &M,
    rows: &mut Vec<Row>,
    breakdown: &mut Vec<Breakdown>,
) where
    M: WireMessage + PartialEq + std::fmt::Debug,
{
    let frame = encode_frame(msg, DEFAULT_MAX_FRAME_LENGTH).expect("encodes");
    let payload = frame[4..].to_vec();
    let cv = to_ciborium(&to_value(msg));

    // Both paths agree before anything is timed.
    let ours: M = decode_payload(&payload, DEFAULT_MAX_FRAME_LENGTH).expect("ours decodes");
    assert_eq!(&ours, msg, "{case}: our decode");
    let base: M = baseline_decode(&payload).expect("baseline decodes");
    assert_eq!(&base, msg, "{case}: baseline decode");
    assert_eq!(baseline_encode(&cv), &frame[..], "{case}: baseline bytes");

    if profile_only() {
        // Only our decode, for a profile that is not mixed with the baseline or encoding.
        spin(|| decode_payload::<M>(black_box(&payload), DEFAULT_MAX_FRAME_LENGTH));
        return;
    }
    let (decode_ours, decode_base) = measure_interleaved(
        plan,
        || decode_payload::<M>(black_box(&payload), DEFAULT_MAX_FRAME_LENGTH),
        || baseline_decode::<M>(black_box(&payload)),
    );
    rows.push(Row {
        case,
        op: "decode",
        bytes: frame.len(),
        ours: decode_ours,
        baseline: decode_base,
    });
    let mut decoder = MessageDecoder::<M>::new(DEFAULT_MAX_FRAME_LENGTH);
    assert_eq!(
        read_in_place(&mut decoder, &frame).as_ref(),
        Some(msg),
        "{case}: in place"
    );
    let (in_place, in_place_base) = measure_interleaved(
        plan,
        || read_in_place(&mut decoder, black_box(&frame)),
        || baseline_decode::<M>(black_box(&payload)),
    );
    rows.push(Row {
        case,
        op: "decode in place (read buffer → message)",
        bytes: frame.len(),
        ours: in_place,
        baseline: in_place_base,
    });
    let (encode_ours, encode_base) = measure_interleaved(
        plan,
        || encode_frame(black_box(msg), DEFAULT_MAX_FRAME_LENGTH),
        || baseline_encode(black_box(&cv)),
    );
    rows.push(Row {
        case,
        op: "encode",
        bytes: frame.len(),
        ours: encode_ours,
        baseline: encode_base,
    });
    // Connections encode into their writer's reused buffer: compare that path too, with the
    // baseline also writing into a reused buffer.
    let mut ours_buf = BytesMut::with_capacity(frame.len());
    let mut base_buf = Vec::with_capacity(frame.len());
    let (reused_ours, reused_base) = measure_interleaved(
        plan,
        || {
            ours_buf.clear();
            encode_frame_into(black_box(msg), DEFAULT_MAX_FRAME_LENGTH, &mut ours_buf)
        },
        || baseline_encode_into(black_box(&cv), &mut base_buf),
    );
    rows.push(Row {
        case,
        op: "encode into reused buffer",
        bytes: frame.len(),
        ours: reused_ours,
        baseline: reused_base,
    });

    // Breakdown, each part interleaved with the full operation it is a part of.
    let limits = CborLimits::for_frame_length(DEFAULT_MAX_FRAME_LENGTH);
    let (decode_full, decode_cbor_only) = measure_interleaved(
        plan,
        || decode_payload::<M>(black_box(&payload), DEFAULT_MAX_FRAME_LENGTH),
        || decode_value(black_box(&payload), &limits),
    );
    let mut reused = BytesMut::with_capacity(frame.len());
    let (encode_fresh, encode_reused) = measure_interleaved(
        plan,
        || encode_frame(black_box(msg), DEFAULT_MAX_FRAME_LENGTH),
        || {
            reused.clear();
            encode_frame_into(black_box(msg), DEFAULT_MAX_FRAME_LENGTH, &mut reused)
        },
    );
    breakdown.push(Breakdown {
        case,
        decode_full,
        decode_cbor_only,
        encode_fresh,
        encode_reused,
    });
}

/// `BATON_BENCH_PROFILE=1`: run our decode alone for a few seconds per case and print no
/// table (for `perf record`, whose profile is otherwise mostly the baseline and the encoders).
fn profile_only() -> bool {
    std::env::var_os("BATON_BENCH_PROFILE").is_some_and(|v| v != "0")
}

/// Calls `f` for about three seconds of this thread's CPU time, or exactly
/// `BATON_BENCH_ITERS` times (so `perf stat` counts can be divided per call).
fn spin<R>(mut f: impl FnMut() -> R) {
    if let Some(n) = std::env::var("BATON_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        time_iters(n, &mut f);
        return;
    }
    let iters = calibrate(
        Plan {
            target: Duration::from_secs(3),
            reps: 1,
            min_iters: 1,
        },
        &mut f,
    );
    time_iters(iters, &mut f);
}

/// One frame through a decoder's read buffer, as a connection's read loop takes it.
fn read_in_place<M: WireMessage>(decoder: &mut MessageDecoder<M>, frame: &[u8]) -> Option<M> {
    decoder.read_buffer(frame.len()).extend_from_slice(frame);
    decoder.next_message().expect("the frame decodes")
}

/// The client's path for a `service_update`: [`ServerFrameDecoder`], update left encoded.
fn bench_client_frame(plan: Plan, case: &'static str, msg: &ServerMessage, rows: &mut Vec<Row>) {
    let frame = encode_frame(msg, DEFAULT_MAX_FRAME_LENGTH).expect("encodes");
    let payload = frame[4..].to_vec();
    let mut decoder = ServerFrameDecoder::new(DEFAULT_MAX_FRAME_LENGTH);
    let mut read = |frame: &[u8]| {
        decoder.read_buffer(frame.len()).extend_from_slice(frame);
        decoder.next_message().expect("the frame decodes")
    };
    let first = read(&frame).expect("one frame").into_message();
    assert_eq!(first.as_ref(), Ok(msg), "{case}: client frame");
    if profile_only() {
        return;
    }
    let (ours, base) = measure_interleaved(
        plan,
        || read(black_box(&frame)),
        || baseline_decode::<ServerMessage>(black_box(&payload)),
    );
    rows.push(Row {
        case,
        op: "decode in place as a client reads it (update left encoded)",
        bytes: frame.len(),
        ours,
        baseline: base,
    });
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!("{cpu}, {cores} logical CPU(s)")
}

#[expect(clippy::print_stdout, reason = "a benchmark reports on stdout")]
fn main() {
    // Ignore libtest-style arguments (`--bench`) that cargo passes.
    let plan = Plan::from_env();
    // `BATON_BENCH_FILTER=request` runs only the cases whose name contains the text
    // (handy under `perf record`).
    let filter = std::env::var("BATON_BENCH_FILTER").unwrap_or_default();
    let mut rows = Vec::new();
    let mut breakdown = Vec::new();
    let mut run = |case: &'static str, f: &CaseFn<'_>| {
        if case.contains(filter.as_str()) {
            f(case, &mut rows, &mut breakdown);
        }
    };

    run("hello (client)", &|c, r, b| {
        bench_case(plan, c, &ClientMessage::hello(), r, b);
    });
    let request: ClientMessage = json_msg(
        r#"{"type":"request","id":"request-1","target":{"serverId":"00000000-0000-4000-8000-000000000001"},"call":{"serviceId":"pi.session-directory","member":"list","args":[]}}"#,
    );
    run("request", &|c, r, b| bench_case(plan, c, &request, r, b));
    let update: ServerMessage = json_msg(
        r#"{"type":"service_update","subscriptionId":"service-1","update":{"type":"state","member":"state","sequence":42,"ops":[["a",3,"hello "]]}}"#,
    );
    run("service_update append", &|c, r, b| {
        bench_case(plan, c, &update, r, b);
        bench_client_frame(plan, c, &update, r);
    });
    run("snapshot response", &|c, r, b| {
        let snapshot: ServerMessage = json_msg(&snapshot_json());
        bench_case(plan, c, &snapshot, r, b);
    });

    println!("# baton-protocol codec benchmark");
    println!("machine: {}", machine());
    println!(
        "timing: {}",
        if thread_cpu_time().is_some() {
            "thread CPU time (CLOCK_THREAD_CPUTIME_ID), so waiting for a core under load is not counted"
        } else {
            "wall time"
        }
    );
    println!(
        "plan: {} repetitions x ~{:?} each, median reported{}",
        plan.reps,
        plan.target,
        if plan.reps < 5 {
            " (QUICK: not meaningful)"
        } else {
            ""
        }
    );
    println!();
    println!(
        "| case | frame bytes | op | ours ns/frame | baseline ns/frame | ratio (baseline/ours) | ours MB/s | baseline MB/s |"
    );
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    for r in &rows {
        let mbs = |ns: f64| r.bytes as f64 / ns * 1e3;
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.2}x | {:.0} | {:.0} |",
            r.case,
            r.bytes,
            r.op,
            r.ours,
            r.baseline,
            r.baseline / r.ours,
            mbs(r.ours),
            mbs(r.baseline),
        );
    }
    println!();
    println!("Where our time goes (ours only, ns/frame):");
    println!();
    println!(
        "| case | decode: full | decode: CBOR -> Value only | envelope share | encode: fresh buffer | encode: reused buffer |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for b in &breakdown {
        println!(
            "| {} | {:.0} | {:.0} | {:.0}% | {:.0} | {:.0} |",
            b.case,
            b.decode_full,
            b.decode_cbor_only,
            (1.0 - b.decode_cbor_only / b.decode_full) * 100.0,
            b.encode_fresh,
            b.encode_reused,
        );
    }
}
