//! The WebSocket reader: bytes off the socket into whole messages for the session actor. It
//! decodes frames itself (actix's reader turns a text frame that is not UTF-8 into an I/O
//! error, indistinguishable from a broken socket) and reassembles continuation frames, so
//! everything a client has sent of a message the server cannot act on yet is here, and held
//! within bounds:
//!
//! - one message: `limits.max_message_bytes` (a frame or a reassembled message). A frame is
//!   refused by the length its header announces, as soon as the header is in: the codec
//!   refuses only a frame it holds whole, and this reader reads no more than a message's
//!   worth ahead, so a frame announcing more would never be whole;
//! - all partly received messages of the server together: `limits.max_partial_bytes`, a
//!   [`Reservation`] held for this connection's unfinished frame and fragments (given back
//!   as they complete, and when the reader is dropped with its connection);
//! - time: a message still unfinished after `limits.partial_timeout_ms` is refused (within
//!   1.5× that: one timer per connection ticks every half timeout while anything is held, and
//!   a message seen unfinished at three ticks in a row, a whole timeout from the first to the
//!   last, is refused; a timer per message cost every pipelined request a timer
//!   registration). Pings and pongs between its fragments do not extend it.
//!
//! Each refusal is a [`Refused`], which knows its close code and the counter it counts in.

use crate::observe::metrics::{Counter, Rejections};
use crate::perimeter::Reservation;
use actix_codec::Decoder as _;
use actix_http::ws::{CloseCode, CloseReason, Codec, Frame, Item, ProtocolError};
use actix_web::web::Payload;
use bytes::{Bytes, BytesMut};
use bytestring::ByteString;
use futures_util::Stream;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

/// A whole message (or a sign of life) from the client.
#[derive(Debug)]
pub enum Inbound {
    /// A text message, checked to be UTF-8.
    Text(ByteString),
    /// A binary message (or the first frame of one), which this server does not take.
    Binary,
    /// A fragment of a text message, kept here until its last one: the client is alive.
    Fragment,
    /// A ping, to be answered with its payload.
    Ping(Bytes),
    /// A pong.
    Pong,
    /// The client closes the connection.
    Close(Option<CloseReason>),
}

/// Why the reader gave up on the connection; it yields nothing after one.
#[derive(Debug)]
pub enum Refused {
    /// A frame or a reassembled message over `limits.max_message_bytes` (a frame's header
    /// announcing a payload that would take its message over it is enough).
    TooBig,
    /// `limits.max_partial_bytes` of partly received messages are held already.
    OverBudget,
    /// A message not whole within `limits.partial_timeout_ms`.
    Deadline,
    /// A text message that is not UTF-8.
    NotText,
    /// A frame that breaks the WebSocket protocol, or a read error.
    Protocol(ProtocolError),
}

impl Refused {
    /// The close code the connection is closed with.
    pub fn close_code(&self) -> CloseCode {
        match self {
            Self::TooBig | Self::OverBudget => CloseCode::Size,
            Self::Deadline => CloseCode::Policy,
            Self::NotText => CloseCode::Invalid,
            Self::Protocol(_) => CloseCode::Protocol,
        }
    }

    /// The close frame's description.
    pub fn description(&self) -> &'static str {
        match self {
            Self::TooBig => "message too big",
            Self::OverBudget => "server busy receiving other messages; retry later",
            Self::Deadline => "message not received within limits.partial_timeout_ms",
            Self::NotText => "text message is not valid UTF-8",
            Self::Protocol(_) => "websocket protocol error",
        }
    }

    /// The counter of `mcp_rejected_total` this refusal counts in, if a limit made it.
    pub fn rejection<'a>(&self, rejections: &'a Rejections) -> Option<&'a Counter> {
        match self {
            Self::TooBig => Some(&rejections.message_too_large),
            Self::OverBudget => Some(&rejections.partial_budget),
            Self::Deadline => Some(&rejections.partial_deadline),
            Self::NotText | Self::Protocol(_) => None,
        }
    }
}

/// The longest WebSocket frame header (2 bytes, 8 of length, 4 of mask).
const MAX_HEADER: usize = 14;

/// The payload length in a frame header's second byte, below the mask bit (RFC 6455 §5.2).
const PAYLOAD_LEN: u8 = 0x7F;
/// That length when a 16-bit length follows.
const PAYLOAD_LEN_16: u8 = 126;
/// That length when a 64-bit length follows.
const PAYLOAD_LEN_64: u8 = 127;
/// The opcode in a frame header's first byte.
const OPCODE: u8 = 0x0F;
/// The opcode of a continuation frame.
const OPCODE_CONTINUATION: u8 = 0x0;
/// The opcode bit of control frames (close, ping, pong).
const OPCODE_CONTROL: u8 = 0x8;
/// The longest payload of a control frame (RFC 6455 §5.5).
const MAX_CONTROL_PAYLOAD: u64 = 125;

/// See the module docs.
pub struct Reader {
    socket: Payload,
    codec: Codec,
    /// Bytes read and not yet decoded: at most one unfinished frame once decoding stops.
    buffer: BytesMut,
    /// A text message arriving in continuation frames, until its last frame.
    fragments: Option<BytesMut>,
    max_message_bytes: usize,
    /// This connection's share of the server's budget: `buffer` and `fragments`.
    reservation: Reservation,
    timeout: Duration,
    /// Ticks every half `timeout` while anything is held (made once, then reset).
    tick: Option<Pin<Box<Sleep>>>,
    /// Whether `tick` is set to fire (it is left set when the held bytes complete: most
    /// unfinished messages complete before it fires, and setting it again costs more).
    tick_armed: bool,
    /// Messages completed on this connection: a tick tells a message that stayed unfinished
    /// from a new one by it.
    completed: u64,
    /// The message seen unfinished at the last tick: `completed` then, and at how many
    /// ticks in a row (0: none). Two fields, not an `Option` of a pair: the tick count packs
    /// with the flags, and the reader stays inside the allocator's 256 B class with the
    /// actor's wrapper around it (benches/README.md, "An idle session's actor in 1 KiB").
    seen_completed: u64,
    seen_ticks: u8,
    /// The socket has ended: what is buffered is all there is.
    socket_ended: bool,
    /// It ended with an error (actix reports a peer that shut its side down after sending
    /// as one): what is buffered whole is still decoded, an unfinished rest refused.
    socket_failed: bool,
    /// A refusal was yielded: the stream is over.
    done: bool,
}

impl Reader {
    /// A reader of `socket`, holding its partial messages in `reservation`.
    pub fn new(
        socket: Payload,
        max_message_bytes: usize,
        reservation: Reservation,
        timeout: Duration,
    ) -> Self {
        Self {
            socket,
            codec: Codec::new().max_size(max_message_bytes),
            buffer: BytesMut::new(),
            fragments: None,
            max_message_bytes,
            reservation,
            timeout,
            tick: None,
            tick_armed: false,
            completed: 0,
            seen_completed: 0,
            seen_ticks: 0,
            socket_ended: false,
            socket_failed: false,
            done: false,
        }
    }

    /// Bytes of unfinished messages held now.
    fn held(&self) -> usize {
        self.buffer.len() + self.fragments.as_ref().map_or(0, BytesMut::len)
    }

    /// Holds what is buffered in the budget.
    fn reserve(&mut self) -> Result<(), Refused> {
        let held = self.held();
        self.reservation
            .hold(held)
            .map_err(|_over| Refused::OverBudget)
    }

    /// Gives up: frees what is held and ends the stream after this refusal.
    fn refuse(&mut self, refused: Refused) -> Poll<Option<Result<Inbound, Refused>>> {
        self.done = true;
        self.buffer = BytesMut::new();
        self.fragments = None;
        self.tick = None;
        // Shrinking cannot be refused.
        let _ = self.reservation.hold(0);
        Poll::Ready(Some(Err(refused)))
    }

    /// A message is whole: a tick from now on sees the next one.
    fn complete(&mut self, message: Bytes) -> Result<Inbound, Refused> {
        self.completed += 1;
        ByteString::try_from(message)
            .map(Inbound::Text)
            .map_err(|_| Refused::NotText)
    }

    /// Refuses the frame at the start of the buffer by the payload length its header
    /// announces, once the header's length is in (2, 4 or 10 bytes; the masking key after it
    /// is not needed). The codec refuses a frame over the limit only when it holds all of it,
    /// and the reader reads no more than a message's worth ahead: a larger frame (one 6 MiB
    /// frame sent whole, a header announcing 2^63 − 1 bytes) would never be whole, and the
    /// connection would sit, holding a message's worth of the budget and the client's pongs
    /// unread behind the frame, until the heartbeat closed it. The buffer starts with a frame
    /// header whenever it is not empty: the codec takes whole frames only, and a refusal ends
    /// the reader. Asked only when the codec finds the frame at the front unfinished (a
    /// whole frame is the codec's to refuse), after every read: a frame behind others is
    /// looked at once it is at the front, the read-ahead bound keeping what the buffer holds
    /// till then to a message's worth (checking every header as it is read would take an
    /// offset kept in the reader, which keeps to its allocator class: `seen_ticks`).
    fn check_header(&self) -> Result<(), Refused> {
        let [first, second, ref rest @ ..] = *self.buffer else {
            return Ok(());
        };
        let announced = match second & PAYLOAD_LEN {
            PAYLOAD_LEN_16 => match *rest {
                [a, b, ..] => u64::from(u16::from_be_bytes([a, b])),
                _ => return Ok(()),
            },
            PAYLOAD_LEN_64 => match *rest {
                [a, b, c, d, e, f, g, h, ..] => u64::from_be_bytes([a, b, c, d, e, f, g, h]),
                _ => return Ok(()),
            },
            short => u64::from(short),
        };
        let opcode = first & OPCODE;
        if opcode & OPCODE_CONTROL != 0 {
            // What the codec says of such a frame once whole; nothing is gained waiting.
            if announced > MAX_CONTROL_PAYLOAD {
                let length = usize::try_from(announced).unwrap_or(usize::MAX);
                return Err(Refused::Protocol(ProtocolError::InvalidLength(length)));
            }
            return Ok(());
        }
        // A continuation adds to what its message has so far (the frames before it in the
        // buffer are decoded, so `fragments` has all of them); any other data frame starts
        // a message (or is refused by the codec, inside a fragmented one).
        let room = match (opcode, &self.fragments) {
            (OPCODE_CONTINUATION, Some(fragments)) => {
                self.max_message_bytes.saturating_sub(fragments.len())
            }
            _ => self.max_message_bytes,
        };
        // A length beyond `usize` (a 32-bit target) is over any limit.
        if usize::try_from(announced).is_ok_and(|length| length <= room) {
            Ok(())
        } else {
            Err(Refused::TooBig)
        }
    }

    /// The next frame in the buffer, as what the session actor gets; `Ok(None)` when the
    /// buffer holds no whole frame, or only continuation frames that leave the message
    /// unfinished.
    fn decode(&mut self) -> Result<Option<Inbound>, Refused> {
        let frame = match self.codec.decode(&mut self.buffer) {
            Ok(Some(frame)) => frame,
            // Unfinished: refused now if it never can be (the codec refuses a frame too
            // large only once it holds it whole). Looked at here only, after every read: a
            // whole frame costs no second look at its header.
            Ok(None) => return self.check_header().map(|()| None),
            Err(ProtocolError::Overflow) => return Err(Refused::TooBig),
            Err(error) => return Err(Refused::Protocol(error)),
        };
        let (bytes, last) = match frame {
            Frame::Text(text) => return self.complete(text).map(Some),
            Frame::Binary(_) | Frame::Continuation(Item::FirstBinary(_)) => {
                return Ok(Some(Inbound::Binary))
            }
            Frame::Ping(payload) => return Ok(Some(Inbound::Ping(payload))),
            Frame::Pong(_) => return Ok(Some(Inbound::Pong)),
            Frame::Close(reason) => return Ok(Some(Inbound::Close(reason))),
            // The codec refuses a continuation without a first frame, and a new message
            // inside a fragmented one (protocol errors).
            Frame::Continuation(Item::FirstText(bytes)) => {
                self.fragments = Some(BytesMut::new());
                (bytes, false)
            }
            Frame::Continuation(Item::Continue(bytes)) => (bytes, false),
            Frame::Continuation(Item::Last(bytes)) => (bytes, true),
        };
        let Some(fragments) = self.fragments.as_mut() else {
            return Err(Refused::Protocol(ProtocolError::ContinuationNotStarted));
        };
        if fragments.len() + bytes.len() > self.max_message_bytes {
            return Err(Refused::TooBig);
        }
        fragments.extend_from_slice(&bytes);
        if !last {
            return Ok(Some(Inbound::Fragment));
        }
        let message = self.fragments.take().unwrap_or_default().freeze();
        self.complete(message).map(Some)
    }
}

impl Stream for Reader {
    type Item = Result<Inbound, Refused>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        // Read no further than a whole message can need: what is buffered beyond that would
        // be another client's share of the budget, held for frames not yet decoded. A frame
        // that could not fit is refused by its header as what was read is decoded.
        while !this.socket_ended && this.buffer.len() <= this.max_message_bytes + MAX_HEADER {
            match Pin::new(&mut this.socket).poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    this.buffer.extend_from_slice(&chunk);
                    if let Err(refused) = this.reserve() {
                        return this.refuse(refused);
                    }
                }
                // The frames that came before it were sent whole: a client may close (or shut
                // down its side of) the connection right after its close frame, or a last
                // request or cancel (RFC 6455 §7.1.1), and those are read first.
                Poll::Ready(Some(Err(_))) => {
                    this.socket_ended = true;
                    this.socket_failed = true;
                }
                Poll::Ready(None) => this.socket_ended = true,
                Poll::Pending => break,
            }
        }
        match this.decode() {
            Ok(Some(inbound)) => {
                // Shrinking cannot be refused: decoding only moves or drops bytes.
                let _ = this.reserve();
                return Poll::Ready(Some(Ok(inbound)));
            }
            Ok(None) => {}
            Err(refused) => return this.refuse(refused),
        }
        if this.socket_ended {
            if this.socket_failed && this.held() > 0 {
                let error = std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the connection failed inside a message",
                );
                return this.refuse(Refused::Protocol(ProtocolError::Io(error)));
            }
            return Poll::Ready(None);
        }
        let _ = this.reserve();
        let held = this.held() > 0;
        if held && !this.tick_armed {
            this.arm_tick();
        }
        while this.tick_armed {
            let Some(tick) = this.tick.as_mut() else {
                break;
            };
            if tick.as_mut().poll(cx).is_pending() {
                break;
            }
            this.tick_armed = false;
            if !held {
                // Nothing unfinished: the tick rests until something is held again.
                this.seen_ticks = 0;
                break;
            }
            let ticks = if this.seen_ticks > 0 && this.seen_completed == this.completed {
                this.seen_ticks + 1
            } else {
                1
            };
            if ticks > 2 {
                // Unfinished at three ticks in a row: for a whole timeout at least.
                return this.refuse(Refused::Deadline);
            }
            (this.seen_completed, this.seen_ticks) = (this.completed, ticks);
            this.arm_tick();
        }
        Poll::Pending
    }
}

impl Reader {
    /// Sets the tick to fire half a timeout from now.
    fn arm_tick(&mut self) {
        let period = self.timeout / 2;
        match self.tick.as_mut() {
            Some(tick) => tick.as_mut().reset(tokio::time::Instant::now() + period),
            None => self.tick = Some(Box::pin(tokio::time::sleep(period))),
        }
        self.tick_armed = true;
    }
}
