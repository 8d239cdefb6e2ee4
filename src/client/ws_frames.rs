//! The frames a WebSocket server sends, read on their way to tungstenite: a message over
//! `max_message_bytes` is skipped whole, the request it answers fails at once as too long,
//! and the connection goes on.
//!
//! tungstenite cannot read past a message over its limit: it refuses it, and nothing after
//! it on the stream can be read. So one oversized answer closed the connection and failed
//! every request on it, every session's on a `shared` upstream, and sent the upstream into
//! its restart backoff; a client able to make a tool's answer grow could do that at will.
//! [`SkipOversized`] sits between the socket and tungstenite and reads only the frames'
//! headers. A message that fits passes unchanged: a single frame at once, a fragmented one
//! held until its last frame (at most `max_message_bytes` of payload, which tungstenite
//! would hold anyway, and 64 KiB of frame headers). One that does not fit is read past and
//! dropped, its id read as it streams by
//! ([`ResponseId`]), as the stdio transport does with a line over the limit. Control frames
//! pass at once, also between the fragments of a message held.
//!
//! What is not a frame a client may take from a server (masked, reserved bits or opcodes,
//! a continuation with no message begun, a message begun inside another) stops the reading
//! here: from then on every byte passes unread, for tungstenite to refuse (inside a message
//! being skipped, which tungstenite never saw, after a frame it refuses for certain).

use super::response_id::ResponseId;
use super::{ClientError, Inner};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes read from the socket at a time.
const CHUNK: usize = 8 << 10;
/// Capacity of the bytes waiting for tungstenite kept after they are taken: what a large
/// message held grew is given back.
const RETAINED: usize = 64 << 10;
/// The longest frame header: 2 bytes, a 64-bit length and a masking key.
const MAX_HEADER: usize = 14;
/// What a fragmented message's frame headers may add to what is held of it, beyond its
/// payload's `max_message_bytes`: past it the message is skipped, so that endless empty
/// fragments (two bytes of header each, no payload) cannot grow what is held without end.
const HELD_HEADERS: usize = 64 << 10;

/// Where the requests of a skipped message's answers are failed: the connection's client,
/// set once it runs (nothing is read before but the upgrade's answer).
pub(super) type Requests = Arc<OnceLock<Weak<Inner>>>;

/// A server's stream with its messages over the limit taken out (see the module's doc).
/// Writes pass unchanged.
pub(super) struct SkipOversized<S> {
    io: S,
    frames: Frames,
    /// Bytes read and kept, handed to tungstenite from `taken` on.
    out: Vec<u8>,
    taken: usize,
    requests: Requests,
}

impl<S> SkipOversized<S> {
    /// Reads `io` from the start of the upgrade's HTTP answer, `max` bytes the longest
    /// message passed on.
    pub(super) fn new(io: S, max: usize, requests: Requests) -> Self {
        Self {
            io,
            frames: Frames::new(max),
            out: Vec::new(),
            taken: 0,
            requests,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SkipOversized<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.taken < this.out.len() {
                let n = (this.out.len() - this.taken).min(buf.remaining());
                buf.put_slice(&this.out[this.taken..this.taken + n]);
                this.taken += n;
                if this.taken == this.out.len() {
                    this.taken = 0;
                    if this.out.capacity() > RETAINED {
                        this.out = Vec::new();
                    } else {
                        this.out.clear();
                    }
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                // The end of the stream; a message still held ends unfinished with it.
                return Poll::Ready(Ok(()));
            }
            let (requests, max) = (&this.requests, this.frames.max);
            this.frames.read(read.filled(), &mut this.out, |id| {
                skipped(requests, max, id)
            });
        }
    }
}

/// A message over the limit was skipped: its request, if it answered one, fails now.
fn skipped(requests: &Requests, max: u64, id: Option<u64>) {
    let Some(inner) = requests.get().and_then(Weak::upgrade) else {
        return;
    };
    inner.warn_skipped(|| {
        tracing::warn!(upstream = %inner.label(), max_message_bytes = max, "skipped a WebSocket message longer than the limit");
    });
    if let Some(id) = id {
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        inner.fail(id, ClientError::too_long(max));
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SkipOversized<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The reading of the stream, bytes in, bytes kept out.
struct Frames {
    /// The longest message kept, in payload bytes (tungstenite's `max_message_size`).
    max: u64,
    step: Step,
    /// The data message whose frames are being read, when it is fragmented or skipped (a
    /// single frame that fits passes without one).
    message: Option<Message>,
}

enum Step {
    /// The upgrade's HTTP answer, passed unread until the empty line that ends it (`\r\n`
    /// or a bare `\n`, as tungstenite's parser takes either); `line_start`: the last byte
    /// ended a line (a `\r` after it keeps it so).
    Head { line_start: bool },
    /// A frame's header, its first `have` bytes read.
    Header {
        bytes: [u8; MAX_HEADER],
        have: usize,
    },
    /// A frame's payload, `left` bytes of it still to come.
    Payload { left: u64, fin: bool, to: To },
    /// Not a stream this reader understands: everything passes, for tungstenite to refuse.
    Through,
}

/// Where a frame's payload goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum To {
    /// On to tungstenite (a control frame, a single frame that fits).
    Out,
    /// Held with its message's other frames until the last.
    Held,
    /// Nowhere: its message is over the limit.
    Skipped,
}

struct Message {
    /// Payload bytes so far.
    len: u64,
    /// Its frames, headers and payloads, while it may still fit.
    held: Vec<u8>,
    skipping: bool,
    /// The id of the answer it is, read as it passes (a text message's only).
    id: Option<ResponseId>,
}

impl Frames {
    fn new(max: usize) -> Self {
        Self {
            max: u64::try_from(max).unwrap_or(u64::MAX),
            step: Step::Head { line_start: false },
            message: None,
        }
    }

    /// Reads `bytes`, appends what passes to `out`, and calls `skipped` with the response
    /// id (if it read as one) of each message skipped.
    fn read(&mut self, mut bytes: &[u8], out: &mut Vec<u8>, mut skipped: impl FnMut(Option<u64>)) {
        while !bytes.is_empty() {
            match &mut self.step {
                Step::Through => {
                    out.extend_from_slice(bytes);
                    return;
                }
                Step::Head { line_start } => {
                    let mut end = None;
                    for (at, &byte) in bytes.iter().enumerate() {
                        match byte {
                            b'\n' if *line_start => {
                                end = Some(at + 1);
                                break;
                            }
                            b'\n' => *line_start = true,
                            b'\r' => {}
                            _ => *line_start = false,
                        }
                    }
                    let ended = end.is_some();
                    let end = end.unwrap_or(bytes.len());
                    out.extend_from_slice(&bytes[..end]);
                    bytes = &bytes[end..];
                    if ended {
                        self.step = Step::Header {
                            bytes: [0; MAX_HEADER],
                            have: 0,
                        };
                    }
                }
                Step::Header {
                    bytes: header,
                    have,
                } => {
                    let need = if *have < 2 { 2 } else { header_len(header[1]) };
                    let n = (need - *have).min(bytes.len());
                    header[*have..*have + n].copy_from_slice(&bytes[..n]);
                    *have += n;
                    bytes = &bytes[n..];
                    if *have >= 2 && *have == header_len(header[1]) {
                        let (header, have) = (*header, *have);
                        self.header(&header[..have], out, &mut skipped);
                    }
                }
                Step::Payload { left, fin, to } => {
                    let n = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(bytes.len());
                    let (now, rest) = bytes.split_at(n);
                    bytes = rest;
                    *left -= n as u64;
                    let (fin, to, done) = (*fin, *to, *left == 0);
                    match (to, &mut self.message) {
                        (To::Held, Some(message)) => {
                            message.held.extend_from_slice(now);
                            message.read_id(now);
                        }
                        (To::Skipped, Some(message)) => message.read_id(now),
                        _ => out.extend_from_slice(now),
                    }
                    if done {
                        self.frame_ended(fin, to, out, &mut skipped);
                    }
                }
            }
        }
    }

    /// A frame's header was read whole.
    fn header(&mut self, header: &[u8], out: &mut Vec<u8>, skipped: &mut impl FnMut(Option<u64>)) {
        let (first, second) = (header[0], header[1]);
        let fin = first & 0x80 != 0;
        let opcode = first & 0x0f;
        let len = match second & 0x7f {
            126 => u64::from(u16::from_be_bytes([header[2], header[3]])),
            127 => {
                let mut length = [0; 8];
                length.copy_from_slice(&header[2..10]);
                u64::from_be_bytes(length)
            }
            short => u64::from(short),
        };
        // Reserved bits (no extension is asked for), a masked frame (a server's never
        // is), a length with its top bit set: tungstenite's to refuse.
        if first & 0x70 != 0 || second & 0x80 != 0 || len > i64::MAX as u64 {
            return self.through(header, out, skipped);
        }
        let to = match (opcode, &mut self.message) {
            // Control frames pass at once, between fragments too.
            (0x8..=0xA, _) => {
                out.extend_from_slice(header);
                To::Out
            }
            (0x1 | 0x2, None) => {
                let text = opcode == 0x1;
                if len > self.max {
                    self.message = Some(Message::new(len, true, text));
                    To::Skipped
                } else if fin {
                    out.extend_from_slice(header);
                    To::Out
                } else {
                    let mut message = Message::new(len, false, text);
                    message.held.extend_from_slice(header);
                    self.message = Some(message);
                    To::Held
                }
            }
            (0x0, Some(message)) => {
                message.len = message.len.saturating_add(len);
                let headers = message.held.len() as u64 + header.len() as u64;
                let over = message.len > self.max
                    || headers.saturating_sub(message.len) > HELD_HEADERS as u64;
                if !message.skipping && over {
                    message.skipping = true;
                    message.held = Vec::new();
                }
                if message.skipping {
                    To::Skipped
                } else {
                    message.held.extend_from_slice(header);
                    To::Held
                }
            }
            // A continuation with no message begun, a message begun inside another, an
            // opcode of no meaning.
            _ => return self.through(header, out, skipped),
        };
        self.step = Step::Payload { left: len, fin, to };
        if len == 0 {
            self.frame_ended(fin, to, out, skipped);
        }
    }

    /// A frame's payload was read whole (a message's last frame ends the message).
    fn frame_ended(
        &mut self,
        fin: bool,
        to: To,
        out: &mut Vec<u8>,
        skipped: &mut impl FnMut(Option<u64>),
    ) {
        self.step = Step::Header {
            bytes: [0; MAX_HEADER],
            have: 0,
        };
        if !fin || to == To::Out {
            return;
        }
        let Some(message) = self.message.take() else {
            return;
        };
        if message.skipping {
            skipped(message.id.and_then(|id| id.response_to()));
        } else if out.is_empty() {
            *out = message.held;
        } else {
            out.extend_from_slice(&message.held);
        }
    }

    /// Stops reading frames: what is held and `header` pass, then everything after. A
    /// message being skipped is over: its request fails, and tungstenite is first handed a
    /// lone final continuation frame, which it refuses, as it would have refused what came
    /// (the frame is out of place after a message it never saw).
    fn through(&mut self, header: &[u8], out: &mut Vec<u8>, skipped: &mut impl FnMut(Option<u64>)) {
        if let Some(message) = self.message.take() {
            if message.skipping {
                skipped(message.id.and_then(|id| id.response_to()));
                out.extend_from_slice(&[0x80, 0x00]);
            } else {
                out.extend_from_slice(&message.held);
            }
        }
        out.extend_from_slice(header);
        self.step = Step::Through;
    }
}

impl Message {
    fn new(len: u64, skipping: bool, text: bool) -> Self {
        Self {
            len,
            held: Vec::new(),
            skipping,
            id: text.then(ResponseId::default),
        }
    }

    fn read_id(&mut self, payload: &[u8]) {
        if let Some(id) = &mut self.id {
            id.read(payload);
        }
    }
}

/// A frame header's length from its second byte: 2, the extended length, the masking key.
fn header_len(second: u8) -> usize {
    let length = match second & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if second & 0x80 != 0 { 4 } else { 0 };
    2 + length + mask
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n";

    /// An unmasked frame as a server writes it.
    fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut frame = vec![if fin { 0x80 } else { 0 } | opcode];
        match payload.len() {
            n if n < 126 => frame.push(n as u8),
            n if n <= 0xffff => {
                frame.push(126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(payload);
        frame
    }

    /// What passes of `input` read with `max`, fed in pieces of `piece` bytes, and the ids
    /// of the messages skipped.
    fn read(input: &[u8], max: usize, piece: usize) -> (Vec<u8>, Vec<Option<u64>>) {
        let mut frames = Frames::new(max);
        let (mut out, mut skipped) = (Vec::new(), Vec::new());
        for piece in input.chunks(piece) {
            frames.read(piece, &mut out, |id| skipped.push(id));
        }
        (out, skipped)
    }

    #[test]
    fn messages_that_fit_pass_unchanged_and_those_over_the_limit_are_skipped_with_their_id() {
        let long = format!(
            r#"{{"result":"{}","jsonrpc":"2.0","id":7}}"#,
            "x".repeat(300)
        );
        let fits = br#"{"jsonrpc":"2.0","id":8,"result":{}}"#;
        let ping = frame(true, 0x9, b"p");
        let mut input = HEAD.to_vec();
        input.extend(frame(true, 0x1, fits));
        // Over the limit in one frame, with a 16-bit length.
        input.extend(frame(true, 0x1, long.as_bytes()));
        input.extend(ping.clone());
        // Over the limit only at its third fragment, a ping between the fragments.
        let (a, rest) = long.as_bytes().split_at(100);
        let (b, c) = rest.split_at(100);
        input.extend(frame(false, 0x1, a));
        input.extend(frame(false, 0x0, b));
        input.extend(ping.clone());
        input.extend(frame(true, 0x0, c));
        // A fragmented message that fits is passed whole at its last frame; the ping
        // between its fragments goes ahead of it.
        let (d, e) = fits.split_at(10);
        input.extend(frame(false, 0x1, d));
        input.extend(ping.clone());
        input.extend(frame(true, 0x0, e));
        // A binary message over the limit has no id; an empty frame passes.
        input.extend(frame(true, 0x2, &[0; 400]));
        input.extend(frame(true, 0x1, b""));
        // A 64-bit length.
        input.extend(frame(true, 0x1, &vec![b' '; 70_000]));
        input.extend(frame(true, 0xA, b""));

        let mut expected = HEAD.to_vec();
        expected.extend(frame(true, 0x1, fits));
        expected.extend(ping.clone());
        expected.extend(ping.clone());
        expected.extend(ping);
        expected.extend(frame(false, 0x1, d));
        expected.extend(frame(true, 0x0, e));
        expected.extend(frame(true, 0x1, b""));
        expected.extend(frame(true, 0xA, b""));
        for piece in [1, 2, 7, 100, 1 << 20] {
            let (out, skipped) = read(&input, 250, piece);
            assert_eq!(out, expected, "in pieces of {piece}");
            assert_eq!(
                skipped,
                [Some(7), Some(7), None, None],
                "in pieces of {piece}"
            );
        }
        // At the limit exactly, a message passes, in one frame or in several.
        let exactly = [
            HEAD.to_vec(),
            frame(true, 0x1, &[b' '; 250]),
            frame(false, 0x1, &[b' '; 125]),
            frame(true, 0x0, &[b' '; 125]),
        ]
        .concat();
        assert_eq!(read(&exactly, 250, 1 << 20), (exactly.clone(), vec![]));
        assert_eq!(
            read(&exactly, 249, 1 << 20),
            (HEAD.to_vec(), vec![None, None])
        );
    }

    #[test]
    fn what_a_server_may_not_send_stops_the_reading_and_passes_unread() {
        let fits = frame(true, 0x1, b"{}");
        let masked = [0x81, 0x82, 1, 2, 3, 4, b'{' ^ 1, b'}' ^ 2];
        let mut reserved = frame(true, 0x1, b"{}");
        reserved[0] |= 0x40;
        let cases: [Vec<u8>; 5] = [
            masked.to_vec(),
            reserved,
            // A continuation with nothing begun; a message begun inside another.
            frame(true, 0x0, b"{}"),
            [frame(false, 0x1, b"{"), frame(true, 0x1, b"}")].concat(),
            frame(true, 0x3, b"{}"),
        ];
        for case in cases {
            let mut input = HEAD.to_vec();
            input.extend_from_slice(&case);
            // After it, even a message over the limit passes: tungstenite refuses it all.
            input.extend(frame(true, 0x1, &[b'x'; 300]));
            input.extend_from_slice(&fits);
            for piece in [1, 1 << 20] {
                let (out, skipped) = read(&input, 250, piece);
                assert_eq!(out, input, "{case:?} in pieces of {piece}");
                assert!(skipped.is_empty());
            }
        }
    }

    #[test]
    fn endless_empty_fragments_are_skipped_not_held() {
        let mut input = HEAD.to_vec();
        input.extend(frame(false, 0x1, b"{"));
        for _ in 0..40_000 {
            input.extend(frame(false, 0x0, b""));
        }
        input.extend(frame(true, 0x0, b"}"));
        input.extend(frame(true, 0x1, b"{}"));
        let mut frames = Frames::new(250);
        let (mut out, mut skipped) = (Vec::new(), Vec::new());
        for piece in input.chunks(4096) {
            frames.read(piece, &mut out, |id| skipped.push(id));
            let held = frames.message.as_ref().map_or(0, |m| m.held.len());
            assert!(held <= 250 + HELD_HEADERS + MAX_HEADER, "{held} bytes held");
        }
        assert_eq!(out, [HEAD.to_vec(), frame(true, 0x1, b"{}")].concat());
        assert_eq!(skipped, [None]);
    }

    #[test]
    fn a_message_begun_inside_one_being_skipped_fails_its_request_and_the_stream() {
        let long = format!(r#"{{"id":7,"result":"{}"}}"#, "x".repeat(300));
        let (a, b) = long.as_bytes().split_at(260);
        let input = [
            HEAD.to_vec(),
            frame(false, 0x1, a),
            frame(false, 0x0, b),
            frame(true, 0x1, b"{}"),
        ]
        .concat();
        let (out, skipped) = read(&input, 250, 1 << 20);
        // A lone final continuation, which tungstenite refuses, before what came.
        assert_eq!(
            out,
            [HEAD.to_vec(), vec![0x80, 0x00], frame(true, 0x1, b"{}")].concat()
        );
        assert_eq!(skipped, [Some(7)]);
        let (_, skipped) = read(
            &[
                HEAD.to_vec(),
                frame(false, 0x1, long.as_bytes()),
                frame(true, 0x2, b""),
            ]
            .concat(),
            250,
            1 << 20,
        );
        assert_eq!(skipped, [Some(7)]);
    }

    #[test]
    fn an_upgrade_answer_with_bare_line_feeds_ends_at_its_empty_line() {
        let head = b"HTTP/1.1 101 Switching Protocols\nUpgrade: websocket\n\n".to_vec();
        let input = [
            head.clone(),
            frame(true, 0x1, &[b'x'; 300]),
            frame(true, 0x1, b"{}"),
        ]
        .concat();
        assert_eq!(
            read(&input, 250, 1),
            ([head, frame(true, 0x1, b"{}")].concat(), vec![None])
        );
    }

    #[test]
    fn the_upgrades_answer_passes_unread_whatever_it_holds() {
        // Bytes that would read as a frame header, and `\r\r\n\r\n`: the head ends at the
        // first `\r\n\r\n`.
        let mut input = b"HTTP/1.1 101 OK\r\nX: \x81\x7f\r\r\n\r\n".to_vec();
        let head = input.clone();
        input.extend(frame(true, 0x1, &[b'x'; 300]));
        input.extend(frame(true, 0x1, b"{}"));
        let mut expected = head;
        expected.extend(frame(true, 0x1, b"{}"));
        for piece in [1, 3, 1 << 20] {
            assert_eq!(read(&input, 250, piece), (expected.clone(), vec![None]));
        }
    }
}
