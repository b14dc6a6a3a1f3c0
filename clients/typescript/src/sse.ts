// An event stream read block by block: the bytes of a stream in, its whole blocks out (each an
// event, or a comment such as the service's heartbeat), so that the client can bound the time
// between two of them, and the size of a line and of an event's data. No I/O here; not exported
// from the package.

/** The longest line, and the longest data of one event, in bytes: past it the stream is not read further. */
export const MAX_SIZE = 16 * 1024 * 1024;

const LF = 0x0a;
const CR = 0x0d;
const COLON = 0x3a;
const SPACE = 0x20;

/** One event of a stream, its fields read as the SSE standard reads them. */
export interface ServerSentEvent {
  /** Its `event` field; `message` when it had none. */
  event: string;
  /** Its `data` lines, joined with "\n". */
  data: string;
  /** The last event id the stream set (it stays until another is set). */
  id: string;
  /** The reconnection time the stream last set (`retry`, ASCII digits only), in milliseconds. */
  retry: number | undefined;
}

/** A line, or an event's data, longer than `MAX_SIZE`: the stream cannot be read on. */
export class TooLong extends Error {
  override readonly name = "TooLong";
}

function size(count: number): string {
  const mib = 1024 * 1024;
  return count % mib === 0 ? `${count / mib} MiB` : `${count} bytes`;
}

/**
 * The blocks of an event stream, as its bytes arrive in pieces. A block is one or more lines
 * ended by a blank line (`\n`, `\r\n` or `\r` each end a line); a blank line that ends no line is
 * no block, so that a peer cannot keep a stream alive with line ends alone. A block ends at the
 * line end that ends it: a `\r` is never held back for a `\n` that may follow. The text is UTF-8;
 * a byte order mark that begins the stream is dropped. The pieces of a line not yet ended are
 * kept apart and joined once, when it ends, so that a long line in many pieces costs its length.
 */
export class Blocks {
  /** The pieces of the line not yet ended, and their bytes in all. */
  private pieces: Uint8Array[] = [];
  private length = 0;
  /** The last piece ended with `\r`: a `\n` that begins the next ends no line. */
  private afterCR = false;
  /** No line has ended yet (the stream's byte order mark, if any, is still to drop). */
  private first = true;
  /** Lines of the block not yet ended. */
  private lines = 0;
  private event = "";
  private data: string[] = [];
  /** The bytes of the event's data so far, the line ends between its lines included. */
  private dataSize = 0;
  private id = "";
  private retry: number | undefined;
  private readonly decoder = new TextDecoder("utf-8", { ignoreBOM: true });

  /**
   * The blocks `bytes` ends, in order: an event, or `null` for a block that is none (comments
   * only, or no data). Throws `TooLong` for a line or an event's data past `MAX_SIZE`.
   */
  feed(bytes: Uint8Array): (ServerSentEvent | null)[] {
    if (bytes.length === 0) {
      // An empty piece between a `\r` and its `\n` changes nothing.
      return [];
    }
    const ended: (ServerSentEvent | null)[] = [];
    let start = this.afterCR && bytes[0] === LF ? 1 : 0;
    this.afterCR = false;
    for (let i = start; i < bytes.length; i += 1) {
      const byte = bytes[i];
      if (byte !== LF && byte !== CR) {
        continue;
      }
      this.keep(bytes.subarray(start, i));
      const line = this.take();
      if (byte === CR) {
        if (i + 1 === bytes.length) {
          this.afterCR = true;
        } else if (bytes[i + 1] === LF) {
          i += 1;
        }
      }
      start = i + 1;
      this.line(line, ended);
    }
    this.keep(bytes.subarray(start));
    return ended;
  }

  /** Keeps a piece of the line not yet ended (a copy: the caller may reuse its buffer). */
  private keep(part: Uint8Array): void {
    if (part.length === 0) {
      return;
    }
    this.length += part.length;
    if (this.length > MAX_SIZE) {
      throw new TooLong(`a line of the event stream is longer than ${size(MAX_SIZE)}`);
    }
    this.pieces.push(part.slice());
  }

  /** The line just ended, its pieces joined once. */
  private take(): Uint8Array {
    const pieces = this.pieces;
    let line: Uint8Array;
    if (pieces.length === 1) {
      line = pieces[0]!;
    } else {
      line = new Uint8Array(this.length);
      let at = 0;
      for (const piece of pieces) {
        line.set(piece, at);
        at += piece.length;
      }
    }
    this.pieces = [];
    this.length = 0;
    return line;
  }

  private line(line: Uint8Array, ended: (ServerSentEvent | null)[]): void {
    if (this.first) {
      this.first = false;
      if (line[0] === 0xef && line[1] === 0xbb && line[2] === 0xbf) {
        line = line.subarray(3);
      }
    }
    if (line.length > 0) {
      this.lines += 1;
      this.field(line);
    } else if (this.lines > 0) {
      this.lines = 0;
      ended.push(this.dispatch());
    }
  }

  private field(line: Uint8Array): void {
    if (line[0] === COLON) {
      return;
    }
    const colon = line.indexOf(COLON);
    let name: Uint8Array = line;
    let value: Uint8Array = new Uint8Array(0);
    if (colon >= 0) {
      name = line.subarray(0, colon);
      value = line.subarray(colon + 1);
      if (value[0] === SPACE) {
        value = value.subarray(1);
      }
    }
    switch (this.decoder.decode(name)) {
      case "event":
        this.event = this.decoder.decode(value);
        break;
      case "data":
        this.dataSize += value.length + (this.data.length > 0 ? 1 : 0);
        if (this.dataSize > MAX_SIZE) {
          throw new TooLong(`an event's data is longer than ${size(MAX_SIZE)}`);
        }
        this.data.push(this.decoder.decode(value));
        break;
      case "id":
        if (!value.includes(0)) {
          this.id = this.decoder.decode(value);
        }
        break;
      case "retry": {
        const text = this.decoder.decode(value);
        if (/^[0-9]+$/.test(text)) {
          this.retry = Number(text);
        }
        break;
      }
      default:
      // A field of no name the standard knows is ignored.
    }
  }

  /** The event a blank line ends: none without a data line, as the standard says. */
  private dispatch(): ServerSentEvent | null {
    const event: ServerSentEvent | null =
      this.data.length === 0
        ? null
        : { event: this.event || "message", data: this.data.join("\n"), id: this.id, retry: this.retry };
    this.event = "";
    this.data = [];
    this.dataSize = 0;
    return event;
  }
}
