//! CPU micro-benchmarks (criterion), no sockets:
//! - `codec`: decode and classify a request (single, batch of 10), encode a result;
//! - `dispatch`: a frame through the session core and back, via the in-memory transport:
//!   `ping` (answered inline), `tools/call echo` (through a worker actor), and the same echo
//!   inside a 10-entry batch;
//! - `worker`: the echo work awaited `inline`; the same work in a `RequestWorker`
//!   (`worker_actor`, started with `RequestWorker::run` as the session does) and on a task
//!   of its own (`worker_actor_own_task`, as `Actor::start` would run it); `message_only`,
//!   this benchmark's own round trip without any worker (a `Finished` posted to a session
//!   inbox and taken back out by the loop), so `worker_actor - message_only` is the worker's
//!   price; and `bare_actor`, an actix actor started with `Actor::start` that only posts that
//!   event.
//! - `observe`: what each request's record adds: `clock_read` (one `Instant::now`, two per
//!   request: arrival and answer), `latency_histogram` (one observation in a method's
//!   histogram), `access_enabled_check` (the `enabled!` check of the access-log target,
//!   filtered out here: no subscriber is installed).
//!
//! Run: `cargo bench --bench codec` (add `-- --quick` for a short run).

#[path = "../src/demo/mod.rs"]
mod demo;

use actix::prelude::*;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use mcp_ws::context::SessionInfo;
use mcp_ws::model::Implementation;
use mcp_ws::testing::inbox::{Inbox, SessionEvent};
use mcp_ws::testing::jsonrpc::{
    decode, encode_result, Decoded, Entry, FrameLimits, Params, Request, RequestId,
};
use mcp_ws::testing::mcp::CallToolParams;
use mcp_ws::testing::memory::{ClientFrame, MemorySession};
use mcp_ws::testing::shared::Shared;
use mcp_ws::testing::{Job, PoolShare, RequestWorker, Work};
use mcp_ws::{RequestContext, Server, Settings};
use serde_json::value::RawValue;
use std::future::poll_fn;
use std::hint::black_box;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// The allocator of the shipped binary (src/main.rs), so these figures match it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ECHO: &str = r#"{"jsonrpc":"2.0","id":12345,"method":"tools/call","params":{"name":"echo","arguments":{"text":"0123456789012345678901234567890123456789012345678901234567890123"}}}"#;
const PING: &str = r#"{"jsonrpc":"2.0","id":12345,"method":"ping"}"#;

fn batch_of(request: &str, n: usize) -> String {
    let entries: Vec<String> = (0..n)
        .map(|i| request.replace("12345", &i.to_string()))
        .collect();
    format!("[{}]", entries.join(","))
}

fn codec(c: &mut Criterion) {
    let mut group = c.benchmark_group("codec");
    let batch = batch_of(ECHO, 10);
    group.bench_function("decode_single", |b| {
        b.iter(
            || match decode::<CallToolParams<'_>>(black_box(ECHO), &FrameLimits::new(100)) {
                Decoded::Single(Entry::Request(Request {
                    params: Params::Parsed(p),
                    ..
                })) => black_box(p.arguments.map(|a| a.get().len())),
                _ => unreachable!(),
            },
        )
    });
    group.bench_function("decode_batch_10", |b| {
        b.iter(
            || match decode::<CallToolParams<'_>>(black_box(&batch), &FrameLimits::new(100)) {
                Decoded::Batch(entries) => black_box(entries.len()),
                _ => unreachable!(),
            },
        )
    });
    let raw = RawValue::from_string("12345".into()).expect("json");
    let id = RequestId::from_raw(&raw).expect("id");
    let result = r#"{"content":[{"type":"text","text":"0123456789012345678901234567890123456789012345678901234567890123"}]}"#;
    group.bench_function("encode_result", |b| {
        b.iter(|| black_box(encode_result(&id, black_box(result))))
    });
    group.finish();
}

fn shared() -> Arc<Shared> {
    demo::demo(Server::builder().settings(Settings::default()))
        .build()
        .expect("server builds")
        .shared()
        .clone()
}

/// Round trips of `frame` through a fresh initialized in-memory session; `answers` is how
/// many frames come back per round trip.
fn session_round_trips(c: &mut Criterion, name: &str, frame: String) {
    let system = System::new();
    let (session, mut frames) = system.block_on(async {
        let (session, mut frames) = MemorySession::start(shared());
        session.do_send(ClientFrame(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#.into(),
        ));
        frames.recv().await.expect("initialize answered");
        (session, frames)
    });
    c.benchmark_group("dispatch")
        .bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter_custom(|iters| {
                system.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        session.do_send(ClientFrame(frame.clone()));
                        black_box(frames.recv().await.expect("answered"));
                    }
                    start.elapsed()
                })
            })
        });
}

fn dispatch(c: &mut Criterion) {
    session_round_trips(c, "ping_inline", PING.into());
    session_round_trips(c, "echo_via_worker", ECHO.into());
    session_round_trips(c, "echo_batch_10_via_workers", batch_of(ECHO, 10));
}

async fn echo_work() -> Result<String, mcp_ws::testing::mcp::Error> {
    Ok(r#"{"content":[{"type":"text","text":"x"}]}"#.to_owned())
}

fn worker(c: &mut Criterion) {
    let system = System::new();
    let shared = shared();
    let raw = RawValue::from_string("1".into()).expect("json");
    let id = RequestId::from_raw(&raw).expect("id");
    let inbox = Rc::new(Inbox::default());
    let session_info = Rc::new(SessionInfo {
        protocol_version: mcp_ws::testing::mcp::ProtocolVersion::NEWEST_SESSION,
        client_capabilities: Arc::new(serde_json::json!({})),
        client_info: Arc::new(Implementation::new("bench", "0")),
        identity: mcp_ws::context::Identity::anonymous(),
        trace_id: Arc::from("0af7651916cd43dd8448eb211c80319c"),
        scope: None,
    });
    let mut group = c.benchmark_group("worker");
    group.bench_function("inline", |b| {
        b.iter_custom(|iters| {
            system.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(echo_work().await.expect("ok"));
                }
                start.elapsed()
            })
        })
    });
    let job = || Job {
        id: id.clone(),
        serial: 1,
        // The session reads the clock when a request arrives; the worker reuses that read.
        received: Instant::now(),
        work: Work::new(|_id, _ctx: RequestContext| Box::pin(echo_work())),
        timeout: Duration::from_secs(60),
        wants_progress: false,
        trace_id: None,
        inbox: inbox.clone(),
        session: session_info.clone(),
        input: mcp_ws::testing::Input::Session,
        log_floor: mcp_ws::testing::LogFloor::Session,
        on_input: None,
        pool: shared.pool.clone(),
        share: PoolShare::default(),
        span: tracing::Span::none(),
    };
    group.bench_function("worker_actor", |b| {
        round_trips(b, &system, &inbox, || drop(RequestWorker::run(job())))
    });
    // The same worker on a task of its own, as `Actor::start` would run it.
    group.bench_function("worker_actor_own_task", |b| {
        round_trips(b, &system, &inbox, || drop(RequestWorker::spawn(job())))
    });
    group.bench_function("message_only", |b| {
        round_trips(b, &system, &inbox, || {
            inbox.post(SessionEvent::Finished {
                id: id.clone(),
                serial: 1,
                outcome: Ok(String::new()),
            })
        })
    });
    group.bench_function("bare_actor", |b| {
        round_trips(b, &system, &inbox, || {
            drop(
                BareActor {
                    id: Some(id.clone()),
                    inbox: inbox.clone(),
                }
                .start(),
            )
        })
    });
    group.finish();
}

/// Times `start` and the wait for the `Finished` it causes to reach the inbox, `iters` times.
fn round_trips(
    b: &mut criterion::Bencher<'_>,
    system: &SystemRunner,
    inbox: &Rc<Inbox>,
    start: impl Fn(),
) {
    b.iter_custom(|iters| {
        system.block_on(async {
            let begin = Instant::now();
            for _ in 0..iters {
                start();
                black_box(next_event(inbox).await);
            }
            begin.elapsed()
        })
    })
}

/// The inbox's next event, waiting for it the way a session's pump does.
async fn next_event(inbox: &Inbox) -> SessionEvent {
    poll_fn(|cx| {
        inbox.register(cx.waker());
        match inbox.take_event() {
            Some(event) => Poll::Ready(event),
            None => Poll::Pending,
        }
    })
    .await
}

/// An actix actor started the usual way (`Actor::start`, a task of its own) that only sends
/// one message to its session and stops.
struct BareActor {
    id: Option<RequestId>,
    inbox: Rc<Inbox>,
}

impl Actor for BareActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if let Some(id) = self.id.take() {
            self.inbox.post(SessionEvent::Finished {
                id,
                serial: 1,
                outcome: Ok(String::new()),
            });
        }
        ctx.stop();
    }
}

fn observe(c: &mut Criterion) {
    let mut group = c.benchmark_group("observe");
    group.bench_function("clock_read", |b| b.iter(|| black_box(Instant::now())));
    let metrics = mcp_ws::testing::metrics::Metrics::default();
    let method = mcp_ws::testing::metrics::MethodLabel::of("tools/call");
    group.bench_function("latency_histogram", |b| {
        b.iter(|| {
            metrics
                .latency
                .observe(black_box(method), black_box(Duration::from_micros(40)))
        })
    });
    group.bench_function("access_enabled_check", |b| {
        b.iter(|| black_box(tracing::enabled!(target: "mcp_ws::access", tracing::Level::INFO)))
    });
    group.finish();
}

criterion_group!(benches, codec, dispatch, worker, observe);
criterion_main!(benches);
