//! The id of the answer a message is, read from its bytes as they stream past without
//! keeping them: how a transport that skips a message over `max_message_bytes` (a stdio
//! line, a WebSocket message) still answers the request it answered, at once, as too long,
//! rather than leave it to its deadline.

/// The id of the response a message is, read as the message streams past without keeping
/// it: the integer of its top-level `id` member, in an object without a top-level `method`
/// (a request of the server's own, not an answer). The `id` may come after a long `result`
/// (the TypeScript SDK writes it last), so the whole message is read: byte by byte outside
/// strings, and inside one from quote or backslash to the next. A batch, an id of another
/// kind or named twice, reads as none. The message is taken to be JSON; what is not reads
/// as some id or none, and at worst answers a request of that id as too long.
#[derive(Debug, Default)]
pub(crate) struct ResponseId {
    depth: u32,
    /// Whether the outermost value is an object (a batch is an array).
    object: bool,
    in_string: bool,
    escaped: bool,
    /// At depth 1, whether the next string is a member's name.
    name_next: bool,
    /// The member name being read at depth 1, while it is one of the two looked for.
    name: Option<Vec<u8>>,
    /// Whether the value being read at depth 1 is the `id` member's.
    id_value: bool,
    id: IdRead,
    /// Whether a top-level `method` member was named (a request, not an answer).
    has_method: bool,
}

/// How far the top-level `id` has been read.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum IdRead {
    #[default]
    NotSeen,
    /// Its value begun: `None` until its first digit.
    Digits(Option<u64>),
    Read(u64),
    /// Not an integer this client could have sent, or named twice.
    Unusable,
}

impl ResponseId {
    /// The longest member name looked for (`method`).
    const LONGEST_NAME: usize = 6;

    /// Reads the next bytes of the message.
    pub(crate) fn read(&mut self, mut bytes: &[u8]) {
        while let Some((&byte, rest)) = bytes.split_first() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    // An escaped name is not one of the two plain names looked for.
                    self.name = None;
                    bytes = rest;
                    continue;
                }
                // To the next quote or backslash at once: a long string is most of a line.
                let Some(at) = memchr::memchr2(b'"', b'\\', bytes) else {
                    self.name_bytes(bytes);
                    return;
                };
                self.name_bytes(&bytes[..at]);
                if bytes[at] == b'\\' {
                    self.escaped = true;
                } else {
                    self.string_ended();
                }
                bytes = &bytes[at + 1..];
                continue;
            }
            bytes = rest;
            let top = self.depth == 1 && self.object;
            if top && self.id_value {
                if let IdRead::Digits(digits) = self.id {
                    if byte.is_ascii_digit() {
                        let digit = u64::from(byte - b'0');
                        self.id = match digits
                            .unwrap_or(0)
                            .checked_mul(10)
                            .and_then(|n| n.checked_add(digit))
                        {
                            Some(n) => IdRead::Digits(Some(n)),
                            None => IdRead::Unusable,
                        };
                        continue;
                    }
                    self.id = match digits {
                        // The number ended: a space, `,` or `}` follows it.
                        Some(n) if matches!(byte, b' ' | b'\t' | b'\r' | b'\n' | b',' | b'}') => {
                            IdRead::Read(n)
                        }
                        // Still to begin: spaces may come first.
                        None if matches!(byte, b' ' | b'\t' | b'\r' | b'\n') => {
                            IdRead::Digits(None)
                        }
                        // A string, a fraction, a sign, `null`: not one of this client's ids.
                        _ => IdRead::Unusable,
                    };
                }
            }
            match byte {
                b'"' => {
                    self.in_string = true;
                    if top && self.name_next {
                        self.name = Some(Vec::new());
                    }
                }
                b'{' | b'[' => {
                    if self.depth == 0 {
                        self.object = byte == b'{';
                        self.name_next = true;
                    }
                    // Saturating: a line of 2^32 brackets does not bring a nested `id` up.
                    self.depth = self.depth.saturating_add(1);
                }
                b'}' | b']' => self.depth = self.depth.saturating_sub(1),
                b':' if top && self.id_value => {
                    // Named twice: which one the child meant is not for the gateway to guess.
                    self.id = if self.id == IdRead::NotSeen {
                        IdRead::Digits(None)
                    } else {
                        IdRead::Unusable
                    };
                }
                b',' if top => {
                    self.name_next = true;
                    self.id_value = false;
                }
                _ => {}
            }
        }
    }

    /// Keeps the bytes of a member name being read, while it may still be `id` or `method`.
    fn name_bytes(&mut self, bytes: &[u8]) {
        if let Some(name) = &mut self.name {
            if name.len() + bytes.len() > Self::LONGEST_NAME {
                self.name = None;
            } else {
                name.extend_from_slice(bytes);
            }
        }
    }

    fn string_ended(&mut self) {
        self.in_string = false;
        if self.depth == 1 && self.object && self.name_next {
            self.name_next = false;
            let name = self.name.take();
            self.id_value = name.as_deref() == Some(b"id");
            self.has_method |= name.as_deref() == Some(b"method");
        }
    }

    /// The id read, if the message is a response with one this client could have sent.
    pub(crate) fn response_to(&self) -> Option<u64> {
        match self.id {
            IdRead::Read(id) if !self.has_method && self.object => Some(id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`ResponseId`] reads of `line`, fed in pieces of `piece` bytes.
    fn response_id_of(line: &str, piece: usize) -> Option<u64> {
        let mut scan = ResponseId::default();
        line.as_bytes().chunks(piece).for_each(|p| scan.read(p));
        scan.response_to()
    }

    #[test]
    fn a_messages_response_id_is_read_wherever_its_member_is() {
        let long = "x".repeat(100);
        let cases: [(String, Option<u64>); 15] = [
            (
                format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"t":"{long}"}}}}"#),
                Some(7),
            ),
            // The TypeScript SDK writes the id last.
            (
                format!(r#"{{"result":{{"id":1,"t":"{long}"}},"jsonrpc":"2.0","id":42}}"#),
                Some(42),
            ),
            (
                format!(r#"{{ "id" : 18446744073709551615 , "result": "{long}" }}"#),
                Some(u64::MAX),
            ),
            // Pretty-printed (a WebSocket message may be): line feeds around the id.
            (
                format!("{{\n  \"result\": \"{long}\",\n  \"id\":\n 9\n}}"),
                Some(9),
            ),
            // Quotes, backslashes and names inside strings and nested values are no members.
            (
                format!(r#"{{"result":"\"id\":3 \\","e":{{"id":4}},"id":5,"x":"{long}"}}"#),
                Some(5),
            ),
            (
                format!(r#"{{"error":{{"code":-1,"message":"{long}"}},"id":0}}"#),
                Some(0),
            ),
            // A request or notification of the server's own is no answer.
            (
                format!(r#"{{"id":7,"method":"sampling/createMessage","params":"{long}"}}"#),
                None,
            ),
            (
                format!(r#"{{"method":"x","params":{{"id":1}},"id":7,"r":"{long}"}}"#),
                None,
            ),
            // Ids this client never sends, or named twice.
            (format!(r#"{{"id":"7","result":"{long}"}}"#), None),
            (format!(r#"{{"id":-7,"result":"{long}"}}"#), None),
            (format!(r#"{{"id":7.5,"result":"{long}"}}"#), None),
            (
                format!(r#"{{"id":18446744073709551616,"result":"{long}"}}"#),
                None,
            ),
            (format!(r#"{{"id":7,"id":8,"result":"{long}"}}"#), None),
            // An escaped name is not read as `id`; a batch has no top-level id.
            (format!(r#"{{"\u0069d":7,"result":"{long}"}}"#), None),
            (format!(r#"[{{"id":7,"result":"{long}"}}]"#), None),
        ];
        for (line, expected) in &cases {
            for piece in [1, 3, 1000] {
                assert_eq!(
                    response_id_of(line, piece),
                    *expected,
                    "{line} in pieces of {piece}"
                );
            }
        }
    }
}
