//! Server-sent events from bytes as they arrive: network reads may split a line, a `\r\n`, or a
//! multi-byte character anywhere, so bytes are buffered until a line is whole and decoded only
//! then. A line ends as the standard says, at `\r\n`, `\n` or a bare `\r`. Comments (`: ping`)
//! are skipped; `data:` lines of one event are joined with `\n`.

/// One event: its `event:` name, if any, and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

#[derive(Debug, Default)]
pub struct SseDecoder {
    pending: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
    /// Whether the stream's first bytes were read past a byte order mark, which the standard
    /// drops: left in, it made the first line an unknown field, and the first delta was lost.
    past_bom: bool,
    /// The last line ended at a `\r` that was the last byte read: a `\n` first in the next read
    /// belongs to that line's end.
    after_cr: bool,
    /// A line of the block under way was read (a comment counts).
    in_block: bool,
    /// Blocks a blank line has ended so far, events and comments alike.
    blocks_ended: u64,
}

const BOM: &[u8] = b"\xef\xbb\xbf";

/// The stream is not text: a line was not UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotText;

impl SseDecoder {
    /// Feeds the next bytes; returns the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, NotText> {
        // What was pending holds no line break (it was searched when it came): only the new bytes
        // are, so a line that never ends costs time in proportion to its length, not its square.
        let mut from = self.pending.len();
        self.pending.extend_from_slice(bytes);
        if !self.past_bom {
            if BOM.starts_with(&self.pending) && self.pending.len() < BOM.len() {
                return Ok(Vec::new());
            }
            if self.pending.starts_with(BOM) {
                self.pending.drain(..BOM.len());
            }
            self.past_bom = true;
            from = 0;
        }
        if self.after_cr && !self.pending.is_empty() {
            self.after_cr = false;
            if self.pending[0] == b'\n' {
                self.pending.remove(0);
            }
        }
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.pending[from..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        {
            let end = from + offset;
            let line = std::str::from_utf8(&self.pending[start..end]).map_err(|_| NotText)?;
            let line = line.to_string();
            start = end + 1;
            if self.pending[end] == b'\r' {
                match self.pending.get(start) {
                    Some(b'\n') => start += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            from = start;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.pending.drain(..start);
        Ok(events)
    }

    /// How many blocks (an event, or comments such as a heartbeat) have ended so far: what a
    /// reader that bounds a stream's quiet spells counts, since a comment is no event.
    pub fn blocks_ended(&self) -> u64 {
        self.blocks_ended
    }

    /// Whether the bytes so far end between events (nothing half-received).
    pub fn is_between_events(&self) -> bool {
        self.pending.is_empty() && self.data.is_none() && self.event.is_none()
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            self.blocks_ended += u64::from(std::mem::take(&mut self.in_block));
            let data = self.data.take();
            let event = self.event.take();
            return data.map(|data| SseEvent { event, data });
        }
        self.in_block = true;
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        for chunk in chunks {
            events.extend(decoder.push(chunk).unwrap_or_else(|_| panic!("not text")));
        }
        events
    }

    /// A byte order mark before the first event is dropped, as the standard says, however the
    /// bytes are split; one anywhere else is text.
    #[test]
    fn a_byte_order_mark_at_the_start_is_dropped() {
        let stream = "\u{feff}data: {\"a\":1}\n\ndata: \u{feff}x\n\n";
        let whole = all(&[stream.as_bytes()]);
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].data, "{\"a\":1}");
        assert_eq!(whole[1].data, "\u{feff}x");
        for size in [1, 2, 4] {
            let bytes: Vec<&[u8]> = stream.as_bytes().chunks(size).collect();
            assert_eq!(all(&bytes), whole, "{size}");
        }
        assert_eq!(all(&[b"\xef\xbb", b"\xbfdata: y\n\n"])[0].data, "y");
        assert!(all(&[b"\xef\xbb"]).is_empty());
    }

    #[test]
    fn events_split_at_every_byte_decode_the_same() {
        let stream = "event: content_block_delta\r\ndata: {\"text\":\"h\u{e9}llo \u{1F600}\"}\r\n\r\n: ping\n\ndata: [DONE]\n\n";
        let whole = all(&[stream.as_bytes()]);
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].event.as_deref(), Some("content_block_delta"));
        assert_eq!(whole[0].data, "{\"text\":\"h\u{e9}llo \u{1F600}\"}");
        assert_eq!(whole[1].data, "[DONE]");
        let bytes: Vec<&[u8]> = stream.as_bytes().chunks(1).collect();
        assert_eq!(all(&bytes), whole);
    }

    /// `\r`, `\n` and `\r\n` each end a line, mixed in one stream and however the reads split
    /// them: a `\r\n` split across two reads is one line end, `\r\r` an empty line.
    #[test]
    fn every_line_ending_the_standard_names_is_one() {
        let lines = [
            "event: a",
            "data: x",
            "data: y",
            "",
            ": ping",
            "",
            "data: [DONE]",
            "",
        ];
        let expected = all(&[format!("{}\n", lines.join("\n")).as_bytes()]);
        assert_eq!(expected.len(), 2);
        assert_eq!(expected[0].data, "x\ny");
        let mixed = ["\r", "\r\n", "\n", "\r", "\r", "\n", "\r", "\r"];
        for ends in [["\r"; 8], ["\r\n"; 8], mixed] {
            let stream: String = lines
                .iter()
                .zip(ends)
                .map(|(l, e)| format!("{l}{e}"))
                .collect();
            for size in 1..6 {
                let reads: Vec<&[u8]> = stream.as_bytes().chunks(size).collect();
                assert_eq!(all(&reads), expected, "{stream:?} in reads of {size}");
            }
            // An empty read between a `\r` and its `\n` changes nothing.
            let at = stream.find('\r').unwrap_or_default() + 1;
            let (head, tail) = stream.as_bytes().split_at(at);
            assert_eq!(all(&[head, b"", tail]), expected, "{stream:?}");
        }
    }

    /// Every block a blank line ends is counted, a comment's too; blank lines alone end none.
    #[test]
    fn blocks_are_counted_comments_among_them() {
        let mut decoder = SseDecoder::default();
        let _ = decoder.push(b"\n\n\r\n: heartbeat\n\n: a\n: b\n");
        assert_eq!(decoder.blocks_ended(), 1);
        let _ = decoder.push(b"\ndata: x\n\n\n\n");
        assert_eq!(decoder.blocks_ended(), 3);
    }

    #[test]
    fn multi_line_data_is_joined() {
        let events = all(&[b"data: a\ndata: b\n\n"]);
        assert_eq!(events[0].data, "a\nb");
    }

    #[test]
    fn an_unfinished_event_is_held() {
        let mut decoder = SseDecoder::default();
        assert!(decoder
            .push(b"data: {\"a\":")
            .unwrap_or_default()
            .is_empty());
        assert!(!decoder.is_between_events());
        assert_eq!(decoder.push(b"1}\n\n").unwrap_or_default().len(), 1);
        assert!(decoder.is_between_events());
    }

    #[test]
    fn bytes_that_are_not_utf8_are_refused() {
        let mut decoder = SseDecoder::default();
        assert_eq!(decoder.push(b"data: \xff\xfe\n"), Err(NotText));
    }
}
