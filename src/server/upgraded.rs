//! A connection from its upgrade request on (a WebSocket handshake, the only upgrade actix
//! recognizes: `Upgrade: websocket`, or a `CONNECT`): served here rather than by actix-http's
//! HTTP/1 dispatcher, so that an idle WebSocket holds no I/O buffer.
//!
//! The dispatcher keeps a read and a write buffer of 8 KiB for its connection's whole life
//! (a constant of actix-http, `HW_BUFFER_SIZE`); an idle session touches one page of each,
//! which made 8 of the 13.7 KiB an idle WebSocket session took (benches/README, "18 000 idle
//! sessions"). Given an upgrade service, actix-http hands such a request over with its
//! connection ([`Framed`]) once its head is read; [`serve`] then gives the request to the
//! same application as every other request (its routes, the perimeter, the WebSocket
//! handler), writes the answer's head with the connection's own codec, and from there moves
//! bytes both ways as the dispatcher did (the socket's bytes to the request's payload, the
//! answer's body to the socket), with buffers only while bytes are in flight: a read goes
//! through a buffer on the stack into a chunk of its own size, and what is to be written is
//! gathered in a buffer that is let go once written.
//!
//! What the dispatcher did and this keeps: the payload's back-pressure (no read while the
//! request's payload holds more than actix's 32 KiB), a read ended or failed told to the
//! payload (its reader, the WebSocket session, ends as before), a write failure ending the
//! connection (the answer's body dropped, so the session's actor stops as before), a body
//! that ends closing the connection (shut down within [`SHUTDOWN_WITHIN`], as
//! `client_disconnect_timeout`), and a request answered with anything but `101` written as
//! HTTP/1 (the codec frames its body) before the connection closes.

use actix_codec::{Encoder, Framed, FramedParts};
use actix_http::body::{BodySize, EitherBody, MessageBody};
use actix_http::error::PayloadError;
use actix_http::h1::{Codec, Message};
use actix_http::{Payload, Request, Response};
use actix_service::Service;
use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::io;
use std::mem::MaybeUninit;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most a read takes at once (the stack buffer's size), as the dispatcher's buffer.
const READ_BYTES: usize = 8 * 1024;

/// How much of what was read the request's payload holds before the socket is no longer
/// read (until its reader takes some): actix-http's own bound for an HTTP/1 payload.
const PAYLOAD_HELD_BYTES: usize = 32 * 1024;

/// How much of the answer's body is gathered before it is written: as the dispatcher's
/// `h1_write_buffer_size` default.
const GATHER_BYTES: usize = 32 * 1024;

/// The write buffer's first size, made when the body yields its first chunk after the
/// buffer was let go.
const GATHER_FIRST_BYTES: usize = 4 * 1024;

/// Rounds of reading or of gathering and writing in one poll before the connection lets
/// the other tasks of its thread run: a client that sends without pause, or a body that
/// never waits, would otherwise hold the thread.
const ROUNDS_PER_POLL: usize = 16;

/// How long a connection whose answer has ended has to close (the TLS `close_notify`
/// written, the socket shut down), as `client_disconnect_timeout`.
const SHUTDOWN_WITHIN: Duration = Duration::from_secs(1);

/// How long a closed connection's client has to close its side (see [`close`]).
const LINGER: Duration = Duration::from_secs(5);

/// Serves an upgrade `request` on its connection `framed` (its head read; what the client
/// sent after the head in the framed's read buffer) with `app`, until the answer's body
/// ends or the connection fails. Never fails: a connection that breaks is closed, as the
/// dispatcher closes one (logged at debug, where actix would log a failed upgrade service
/// as an error).
pub(super) async fn serve<T, S, B>(
    app: Rc<S>,
    mut request: Request,
    framed: Framed<T, Codec>,
) -> Result<(), Infallible>
where
    T: AsyncRead + AsyncWrite + Unpin,
    S: Service<Request>,
    S::Response: Into<Response<B>>,
    S::Error: Into<actix_web::Error>,
    B: MessageBody + 'static,
{
    let FramedParts {
        mut io,
        mut codec,
        read_buf,
        ..
    } = framed.into_parts();
    let inbound = Rc::new(RefCell::new(Inbound::default()));
    // What the client sent after the head (its first frames, if it did not wait for the
    // answer), copied: the dispatcher's 8 KiB buffer is let go here.
    if !read_buf.is_empty() {
        inbound.borrow_mut().feed(Bytes::copy_from_slice(&read_buf));
    }
    drop(read_buf);
    *request.payload() = Payload::Stream {
        payload: Box::pin(InboundStream(inbound.clone())),
    };

    // The application answers while the request's payload is read (a handler may wait for
    // it).
    let mut answer = pin!(app.call(request));
    let answer = poll_fn(|cx| {
        read_into(&mut io, &inbound, cx);
        answer.as_mut().poll(cx)
    })
    .await;
    let response: Response<EitherBody<B>> = match answer {
        Ok(response) => response.into().map_body(|_, body| EitherBody::left(body)),
        Err(error) => Response::from(error.into().error_response())
            .map_body(|_, body| EitherBody::right(body)),
    };
    let (head, body) = response.into_parts();
    let size = body.size();
    let mut out = BytesMut::new();
    if let Err(error) = codec.encode(Message::Item((head, size)), &mut out) {
        tracing::debug!(%error, "upgraded connection: the answer's head not encoded");
        return Ok(());
    }
    let mut body = pin!(body);
    // A body of no bytes is not polled (as the dispatcher does); its end is framed as such.
    let mut body_done = matches!(size, BodySize::None | BodySize::Sized(0));
    let ended = poll_fn(|cx| -> Poll<io::Result<()>> {
        for _ in 0..ROUNDS_PER_POLL {
            read_into(&mut io, &inbound, cx);
            // Gather what the body has ready, up to a buffer's worth.
            let mut body_waits = false;
            while !body_done && out.len() < GATHER_BYTES {
                match body.as_mut().poll_next(cx) {
                    Poll::Pending => {
                        body_waits = true;
                        break;
                    }
                    Poll::Ready(Some(Ok(chunk))) => {
                        // Room for a few answers at once: growing from nothing by
                        // doubling moved a batch of small answers several times.
                        if out.capacity() == 0 {
                            out.reserve(chunk.len().max(GATHER_FIRST_BYTES));
                        }
                        codec.encode(Message::Chunk(Some(chunk)), &mut out)?;
                    }
                    Poll::Ready(None) => {
                        body_done = true;
                        codec.encode(Message::Chunk(None), &mut out)?;
                    }
                    Poll::Ready(Some(Err(error))) => {
                        let error: Box<dyn std::error::Error> = error.into();
                        tracing::debug!(%error, "upgraded connection: the answer's body failed");
                        return Poll::Ready(Err(io::Error::other("the answer's body failed")));
                    }
                }
            }
            if out.is_empty() {
                return if body_done {
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Pending
                };
            }
            ready!(write_out(&mut io, &mut out, cx))?;
            // All written, and the body has nothing ready: what wakes it (a message read
            // for its session, above all) wakes this task too. Polled again at once, it
            // would only say so again (the session's actor polled for nothing).
            if body_waits {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
    // The payload's reader is told the connection ended, however it ended.
    inbound.borrow_mut().end(None);
    match ended {
        Ok(()) => close(&mut io).await,
        Err(error) => tracing::debug!(%error, "upgraded connection ended"),
    }
    Ok(())
}

/// Closes a connection whose answer is whole: its write side shut down (within
/// [`SHUTDOWN_WITHIN`]), then what the client still sends read and dropped until it closes
/// its side too, for at most [`LINGER`]. Dropped at once, a socket with unread bytes is
/// reset, and a reset can discard what the client had not read yet: a session's close
/// frame, sent just before, was lost to a client that answered the pings ahead of it.
/// (actix's dispatcher kept such a connection open until its client closed it, however
/// long that took.)
async fn close<T: AsyncRead + AsyncWrite + Unpin>(io: &mut T) {
    let shut = poll_fn(|cx| Pin::new(&mut *io).poll_shutdown(cx));
    match tokio::time::timeout(SHUTDOWN_WITHIN, shut).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            tracing::debug!(%error, "upgraded connection: not shut down");
            return;
        }
        Err(_) => {
            tracing::debug!("upgraded connection: not shut down in time");
            return;
        }
    }
    let drained = poll_fn(|cx| {
        for _ in 0..ROUNDS_PER_POLL {
            match ready!(read_once(io, cx, |_| {})) {
                Ok(0) | Err(_) => return Poll::Ready(()),
                Ok(_) => {}
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    });
    let _ = tokio::time::timeout(LINGER, drained).await;
}

/// Writes `out` to `io` and flushes it; `out` is let go (its allocation freed) once written,
/// so that a connection with nothing to send holds no buffer.
fn write_out<T: AsyncWrite + Unpin>(
    io: &mut T,
    out: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    while !out.is_empty() {
        match ready!(Pin::new(&mut *io).poll_write(cx, out))? {
            0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
            written => {
                let _ = out.split_to(written);
            }
        }
    }
    *out = BytesMut::new();
    Pin::new(io).poll_flush(cx)
}

/// Reads what the socket has into `inbound` while it holds less than
/// [`PAYLOAD_HELD_BYTES`] (else this task is woken when its reader takes some), through a
/// buffer on the stack: each read is a chunk of its own size, and no buffer is kept between
/// reads. A read that ends or fails ends the payload; nothing is read after it.
fn read_into<T: AsyncRead + Unpin>(io: &mut T, inbound: &RefCell<Inbound>, cx: &mut Context<'_>) {
    for _ in 0..ROUNDS_PER_POLL {
        if !inbound.borrow_mut().wants_more(cx) {
            return;
        }
        let read = read_once(io, cx, |bytes| {
            inbound.borrow_mut().feed(Bytes::copy_from_slice(bytes));
        });
        match read {
            Poll::Pending => return,
            Poll::Ready(Ok(0)) => inbound.borrow_mut().end(None),
            Poll::Ready(Ok(_)) => {}
            Poll::Ready(Err(error)) => inbound.borrow_mut().end(Some(error)),
        }
    }
    // More may be there: read again once the thread's other tasks have run.
    cx.waker().wake_by_ref();
}

/// One read of `io` through a buffer on the stack, what it read given to `take`: the
/// number of bytes read, 0 when the client has closed its side.
fn read_once<T: AsyncRead + Unpin>(
    io: &mut T,
    cx: &mut Context<'_>,
    take: impl FnOnce(&[u8]),
) -> Poll<io::Result<usize>> {
    let mut buffer = [MaybeUninit::<u8>::uninit(); READ_BYTES];
    let mut read = ReadBuf::uninit(&mut buffer);
    ready!(Pin::new(io).poll_read(cx, &mut read))?;
    let filled = read.filled();
    if !filled.is_empty() {
        take(filled);
    }
    Poll::Ready(Ok(filled.len()))
}

/// What the connection read and the request's payload has not taken yet, shared by the
/// connection ([`read_into`]) and the payload ([`InboundStream`]).
#[derive(Default)]
struct Inbound {
    chunks: VecDeque<Bytes>,
    held: usize,
    /// The read ended (`Some(None)`) or failed; told to the reader after the chunks.
    end: Option<Option<io::Error>>,
    /// The payload's reader, waiting for a chunk.
    reader: Option<Waker>,
    /// The connection, waiting for the reader to take some.
    connection: Option<Waker>,
    /// The payload was dropped: nothing more is read for it.
    dropped: bool,
}

impl Inbound {
    /// Whether the connection should read more for the payload; if not because the payload
    /// holds enough, the connection is woken when its reader takes some.
    fn wants_more(&mut self, cx: &Context<'_>) -> bool {
        if self.end.is_some() || self.dropped {
            return false;
        }
        if self.held < PAYLOAD_HELD_BYTES {
            return true;
        }
        crate::remember_waker(&mut self.connection, cx.waker());
        false
    }

    fn feed(&mut self, chunk: Bytes) {
        self.held += chunk.len();
        self.chunks.push_back(chunk);
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
    }

    fn end(&mut self, error: Option<io::Error>) {
        if self.end.is_none() {
            self.end = Some(error);
        }
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
    }
}

/// The request's payload: the chunks the connection read, then its end.
struct InboundStream(Rc<RefCell<Inbound>>);

impl Stream for InboundStream {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut inbound = self.0.borrow_mut();
        if let Some(chunk) = inbound.chunks.pop_front() {
            inbound.held -= chunk.len();
            if inbound.held < PAYLOAD_HELD_BYTES {
                if let Some(connection) = inbound.connection.take() {
                    connection.wake();
                }
            }
            return Poll::Ready(Some(Ok(chunk)));
        }
        match inbound.end.as_mut() {
            None => {
                crate::remember_waker(&mut inbound.reader, cx.waker());
                Poll::Pending
            }
            Some(None) => Poll::Ready(None),
            // The error once, then the end.
            Some(error) => Poll::Ready(error.take().map(|error| Err(PayloadError::Io(error)))),
        }
    }
}

impl Drop for InboundStream {
    fn drop(&mut self) {
        let mut inbound = self.0.borrow_mut();
        inbound.dropped = true;
        inbound.chunks.clear();
        inbound.held = 0;
    }
}
