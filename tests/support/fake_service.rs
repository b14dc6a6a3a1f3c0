//! A `reactstep` service faked over a raw socket on loopback, for the driver's tests of what an
//! odd or hostile `--server` answers: each connection's request is read (its head, then its
//! body by `content-length`), then answered as the test says, each in a thread of its own.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

use serde_json::Value;

/// The body of the request on `stream`, its head read past.
pub fn request_body(stream: &TcpStream) -> std::io::Result<Vec<u8>> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let (mut length, mut line) = (0, String::new());
    while reader.read_line(&mut line)? > 0 && line != "\r\n" {
        if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = n.trim().parse().unwrap_or(0);
        }
        line.clear();
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(body)
}

/// Serves every connection with `answer` (given the request's body), each in its own thread,
/// until the test ends. The service's base URL.
pub fn serve(
    answer: impl Fn(&mut TcpStream, Vec<u8>) -> std::io::Result<()> + Clone + Send + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let body = request_body(&stream)?;
                answer(&mut stream, body)
            });
        }
    });
    url
}

/// A service whose every answer is a 200 of `content_type`, its body written by `body` until it
/// returns or the driver closes the connection.
pub fn answering(
    content_type: &'static str,
    body: fn(&mut TcpStream) -> std::io::Result<()>,
) -> String {
    serve(move |stream, _| {
        write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n"
        )?;
        body(stream)
    })
}

/// `reply` as a whole JSON answer on `stream`.
pub fn reply_json(stream: &mut TcpStream, reply: &Value) -> std::io::Result<()> {
    let reply = reply.to_string();
    write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
        reply.len()
    )
}

/// A service that answers every step with `reply` and hands each request's body to the test.
pub fn recording(reply: Value) -> (String, std::sync::mpsc::Receiver<Value>) {
    let (bodies, received) = std::sync::mpsc::channel();
    let url = serve(move |stream, body| {
        let _ = bodies.send(serde_json::from_slice(&body).unwrap_or(Value::Null));
        reply_json(stream, &reply)
    });
    (url, received)
}
