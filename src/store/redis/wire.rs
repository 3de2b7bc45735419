//! The few RESP2 messages a lane's own socket (`own_socket.rs`) exchanges with Redis, written
//! and read by hand: commands go out as arrays of bulk strings, and a reply is read from the
//! bytes received so far, or found incomplete. Only what that socket meets is read: simple
//! strings (`+OK`), errors, integers, bulk strings (the hash `SCRIPT LOAD` answers) and arrays
//! (the script's integers). The redis crate's general parser does the same for any reply, at
//! several times the cost, on a path taken once per decision.

use super::script::{Arg, Call};

/// One reply from Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    Status(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

/// Bytes that are not RESP2: the socket is out of step and must be dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Redis sent what is not a RESP2 reply ({0})")]
pub(super) struct Garbled(&'static str);

/// The longest bulk string Redis sends (its `proto-max-bulk-len` default): a longer length is
/// garbage, not a reason to wait for more bytes.
const MAX_BULK: usize = 512 * 1024 * 1024;

/// The longest array read: far beyond any reply this socket asks for (a batch's integers).
const MAX_ARRAY: usize = 1 << 20;

/// The deepest array nesting read; the script answers a flat array.
const MAX_DEPTH: usize = 8;

/// Appends `EVALSHA sha numkeys keys… args…` for `call` to `out`.
pub(super) fn write_evalsha(out: &mut Vec<u8>, sha: &str, call: &Call) {
    let count = 3 + call.keys.len() + call.args.len();
    write_header(out, b'*', count);
    write_bulk(out, b"EVALSHA");
    write_bulk(out, sha.as_bytes());
    write_number(out, call.keys.len());
    for key in &call.keys {
        write_bulk(out, key.as_bytes());
    }
    for arg in &call.args {
        write_arg(out, arg);
    }
}

/// Numbers are written with `itoa`, not `write!`: through `core::fmt` a call's 15 or more
/// numbers cost about 8 k instructions (callgrind), a fifth of what a Redis decision adds.
fn write_arg(out: &mut Vec<u8>, arg: &Arg) {
    match arg {
        Arg::Text(text) => write_bulk(out, text.as_bytes()),
        Arg::Signed(number) => write_number(out, *number),
        Arg::Unsigned(number) => write_number(out, *number),
        // Only a queueing leaky bucket's capacity: not worth a formatter of its own.
        Arg::Queued { .. } => write_bulk(out, arg.to_string().as_bytes()),
    }
}

/// `number` as a bulk string of its decimal digits.
fn write_number(out: &mut Vec<u8>, number: impl itoa::Integer) {
    let mut digits = itoa::Buffer::new();
    write_bulk(out, digits.format(number).as_bytes());
}

/// Appends the command `parts` (e.g. `AUTH user password`) to `out`.
pub(super) fn write_command(out: &mut Vec<u8>, parts: &[&[u8]]) {
    write_header(out, b'*', parts.len());
    for part in parts {
        write_bulk(out, part);
    }
}

fn write_header(out: &mut Vec<u8>, kind: u8, length: usize) {
    out.push(kind);
    out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn write_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    write_header(out, b'$', bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// The first reply in `input` and the bytes it took, or `None` while it is incomplete.
pub(super) fn read_reply(input: &[u8]) -> Result<Option<(Reply, usize)>, Garbled> {
    read_at(input, 0, 0)
}

fn read_at(input: &[u8], start: usize, depth: usize) -> Result<Option<(Reply, usize)>, Garbled> {
    let Some((kind, line, after)) = read_line(input, start)? else {
        return Ok(None);
    };
    let reply = match kind {
        b'+' => Reply::Status(text(line)),
        b'-' => Reply::Error(text(line)),
        b':' => Reply::Integer(number(line)?),
        b'$' => match number(line)? {
            -1 => Reply::Bulk(None),
            length => {
                let length = usize::try_from(length)
                    .ok()
                    .filter(|length| *length <= MAX_BULK)
                    .ok_or(Garbled("bulk length"))?;
                let end = after + length;
                if input.len() < end + 2 {
                    return Ok(None);
                }
                if input.get(end..end + 2) != Some(b"\r\n") {
                    return Err(Garbled("bulk string not ended by CRLF"));
                }
                let bytes = input.get(after..end).unwrap_or_default().to_vec();
                return Ok(Some((Reply::Bulk(Some(bytes)), end + 2 - start)));
            }
        },
        b'*' => return read_array(input, start, after, number(line)?, depth),
        _ => return Err(Garbled("unknown reply type")),
    };
    Ok(Some((reply, after - start)))
}

fn read_array(
    input: &[u8],
    start: usize,
    mut at: usize,
    length: i64,
    depth: usize,
) -> Result<Option<(Reply, usize)>, Garbled> {
    if length < 0 {
        return Ok(Some((Reply::Bulk(None), at - start)));
    }
    if depth >= MAX_DEPTH {
        return Err(Garbled("arrays nested too deep"));
    }
    let length = usize::try_from(length)
        .ok()
        .filter(|length| *length <= MAX_ARRAY)
        .ok_or(Garbled("array length"))?;
    // Each element takes at least 3 bytes: never reserve for more than could have come.
    let mut items = Vec::with_capacity(length.min(input.len().saturating_sub(at) / 3));
    for _ in 0..length {
        let Some((item, taken)) = read_at(input, at, depth + 1)? else {
            return Ok(None);
        };
        items.push(item);
        at += taken;
    }
    Ok(Some((Reply::Array(items), at - start)))
}

/// One line of a reply: its type byte, the rest up to CRLF, and where the next line starts.
type Line<'a> = (u8, &'a [u8], usize);

fn read_line(input: &[u8], start: usize) -> Result<Option<Line<'_>>, Garbled> {
    let Some(rest) = input.get(start..) else {
        return Ok(None);
    };
    let Some(end) = rest.windows(2).position(|pair| pair == b"\r\n") else {
        return Ok(None);
    };
    match rest.split_first() {
        Some((&kind, _)) if end > 0 => Ok(Some((
            kind,
            rest.get(1..end).unwrap_or_default(),
            start + end + 2,
        ))),
        _ => Err(Garbled("empty line")),
    }
}

fn text(line: &[u8]) -> String {
    String::from_utf8_lossy(line).into_owned()
}

fn number(line: &[u8]) -> Result<i64, Garbled> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|digits| digits.parse().ok())
        .ok_or(Garbled("not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_written_as_evalsha_with_its_keys_then_its_arguments() {
        let call = Call {
            keys: vec!["fg:a".to_owned(), "fg:bc".to_owned()],
            args: vec![
                Arg::Unsigned(12),
                Arg::Text("x"),
                Arg::Signed(-3),
                Arg::Queued {
                    capacity: 5,
                    delay: 250,
                    max_wait: -1,
                },
            ],
        };
        let mut out = Vec::new();
        write_evalsha(&mut out, "abc", &call);
        assert_eq!(
            out,
            b"*9\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n2\r\n$4\r\nfg:a\r\n$5\r\nfg:bc\r\n\
              $2\r\n12\r\n$1\r\nx\r\n$2\r\n-3\r\n$8\r\n5 250 -1\r\n"
        );
    }

    #[test]
    fn every_kind_of_reply_is_read_with_its_length() {
        let cases: [(&[u8], Reply); 6] = [
            (b"+OK\r\n", Reply::Status("OK".to_owned())),
            (
                b"-NOSCRIPT No matching script\r\n",
                Reply::Error("NOSCRIPT No matching script".to_owned()),
            ),
            (b":-42\r\n", Reply::Integer(-42)),
            (b"$3\r\na\r\n\r\n", Reply::Bulk(Some(b"a\r\n".to_vec()))),
            (b"$-1\r\n", Reply::Bulk(None)),
            (
                b"*3\r\n:1\r\n:0\r\n*1\r\n:7\r\n",
                Reply::Array(vec![
                    Reply::Integer(1),
                    Reply::Integer(0),
                    Reply::Array(vec![Reply::Integer(7)]),
                ]),
            ),
        ];
        for (bytes, expected) in cases {
            let mut input = bytes.to_vec();
            input.extend_from_slice(b":9\r\n"); // the next reply is not taken
            assert_eq!(
                read_reply(&input),
                Ok(Some((expected, bytes.len()))),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn a_reply_cut_anywhere_is_incomplete_not_wrong() {
        let whole: &[u8] = b"*2\r\n:15\r\n$2\r\nok\r\n";
        for cut in 0..whole.len() {
            assert_eq!(read_reply(&whole[..cut]), Ok(None), "cut at {cut}");
        }
        assert!(matches!(read_reply(whole), Ok(Some((_, 17)))));
    }

    #[test]
    fn bytes_that_are_not_resp_are_refused() {
        for bad in [
            &b"?what\r\n"[..],
            b":twelve\r\n",
            b"$3\r\nabcd\r\n",
            b"\r\n",
            b"$9223372036854775807\r\nab\r\n",
            b"*9223372036854775807\r\n:1\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
        ] {
            assert!(read_reply(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
