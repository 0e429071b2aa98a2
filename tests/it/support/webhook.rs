//! A webhook receiver the test controls: an HTTP/1.1 server on loopback that records every
//! request it is sent (method, path, headers, body) and answers each with the status the test
//! chose, or never answers at all.

use std::{
    io::{ErrorKind, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU16, Ordering},
    },
    time::Duration,
};

/// The status that stands for "never answer".
const SILENT: u16 = 0;

/// How often a connection's thread, waiting for bytes, looks whether the receiver was dropped.
const POLL: Duration = Duration::from_millis(50);

/// One request as the receiver read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// `POST`, `GET`, ...
    pub method: String,
    /// The request target as sent: the path, and the query if any.
    pub path: String,
    /// Each header line in order, its name lowercased, its value trimmed.
    pub headers: Vec<(String, String)>,
    /// The body: `Content-Length` bytes (or the chunks, joined).
    pub body: Vec<u8>,
}

impl Received {
    /// The value of the first header of this name (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the server's threads share with the test.
#[derive(Default)]
struct Shared {
    received: Mutex<Vec<Received>>,
    /// The answer to the next request, [`SILENT`] for none.
    status: AtomicU16,
    stopped: AtomicBool,
}

/// An HTTP/1.1 server on loopback (a thread accepting, one per connection), several requests per
/// connection; it stops when dropped.
pub struct WebhookReceiver {
    shared: Arc<Shared>,
    address: String,
    /// Where to post: `http://127.0.0.1:PORT/hook` (any other path is recorded as well).
    pub url: String,
}

impl WebhookReceiver {
    /// Answers each request with `status` and an empty body.
    pub fn answering(status: u16) -> Self {
        assert!(
            (100..=999).contains(&status),
            "an HTTP status has 3 digits: {status}"
        );
        Self::start(status)
    }

    /// Reads each request and never answers it: the connection stays open, unanswered, until
    /// the client closes it or the receiver is dropped (a sink that hangs).
    pub fn silent() -> Self {
        Self::start(SILENT)
    }

    fn start(status: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("webhook port");
        let address = listener.local_addr().expect("address").to_string();
        let shared = Arc::new(Shared::default());
        shared.status.store(status, Ordering::SeqCst);
        let serving = shared.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if serving.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let serving = serving.clone();
                std::thread::spawn(move || serve(stream, &serving));
            }
        });
        Self {
            shared,
            url: format!("http://{address}/hook"),
            address,
        }
    }

    /// Answers the requests read from now on with `status` (one that is held unanswered stays
    /// so): a sink that recovers, or starts failing.
    pub fn set_status(&self, status: u16) {
        assert!(
            (100..=999).contains(&status),
            "an HTTP status has 3 digits: {status}"
        );
        self.shared.status.store(status, Ordering::SeqCst);
    }

    /// The requests read so far, in the order they were read.
    pub fn received(&self) -> Vec<Received> {
        self.shared
            .received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many requests were read so far.
    pub fn count(&self) -> usize {
        self.shared
            .received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

impl Drop for WebhookReceiver {
    /// Stops the threads: the accepting one sees the flag at its next connection, this one; each
    /// connection's within [`POLL`], closing its connection.
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.address);
    }
}

/// One connection: its requests, each recorded and then answered (or held, silent).
fn serve(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(POLL));
    let _ = stream.set_nodelay(true);
    let mut connection = Connection {
        stream,
        buffer: Vec::new(),
        stopped: &shared.stopped,
    };
    while let Some(request) = connection.request() {
        let close = request
            .header("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"));
        shared
            .received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(request);
        let status = shared.status.load(Ordering::SeqCst);
        if status == SILENT {
            connection.hold();
            return;
        }
        let answer = format!(
            "HTTP/1.1 {status} {}\r\nContent-Length: 0\r\n\r\n",
            reason(status)
        );
        if connection.stream.write_all(answer.as_bytes()).is_err() || close {
            return;
        }
    }
}

/// The bytes of a connection, read as they are needed.
struct Connection<'a> {
    stream: TcpStream,
    /// Read and not yet parsed: the rest of a request, or the start of the next.
    buffer: Vec<u8>,
    stopped: &'a AtomicBool,
}

impl Connection<'_> {
    /// The next request whole; `None` once the client closed the connection (or sent what is
    /// not HTTP), or the receiver was dropped.
    fn request(&mut self) -> Option<Received> {
        let head = self.take_through(b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&head);
        // A client may send empty lines before a request.
        let mut lines = head.split("\r\n").skip_while(|l| l.is_empty());
        let mut start = lines.next()?.split(' ');
        let (method, path) = (start.next()?.to_string(), start.next()?.to_string());
        let headers = lines
            .filter(|l| !l.is_empty())
            .filter_map(|l| {
                let (name, value) = l.split_once(':')?;
                Some((name.trim().to_ascii_lowercase(), value.trim().to_string()))
            })
            .collect();
        let mut received = Received {
            method,
            path,
            headers,
            body: Vec::new(),
        };
        let chunked = received
            .header("transfer-encoding")
            .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"));
        received.body = if chunked {
            self.chunked()?
        } else {
            let length = match received.header("content-length") {
                Some(l) => l.parse().ok()?,
                None => 0,
            };
            self.take(length)?
        };
        Some(received)
    }

    /// A chunked body: each chunk is its size in hex, CRLF, the bytes, CRLF; size 0, then the
    /// trailers up to an empty line, end it.
    fn chunked(&mut self) -> Option<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line = self.take_through(b"\r\n")?;
            let line = String::from_utf8_lossy(&line);
            let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
            if size == 0 {
                while self.take_through(b"\r\n")?.len() > 2 {}
                return Some(body);
            }
            body.extend(self.take(size)?);
            self.take(2)?;
        }
    }

    /// Holds the connection unanswered: reads (and drops) whatever comes until the client
    /// closes it or the receiver is dropped.
    fn hold(&mut self) {
        while self.fill() {
            self.buffer.clear();
        }
    }

    /// The bytes up to and including the first `delimiter`.
    fn take_through(&mut self, delimiter: &[u8]) -> Option<Vec<u8>> {
        loop {
            if let Some(at) = self
                .buffer
                .windows(delimiter.len())
                .position(|w| w == delimiter)
            {
                return self.take(at + delimiter.len());
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// The next `n` bytes.
    fn take(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buffer.len() < n {
            if !self.fill() {
                return None;
            }
        }
        let rest = self.buffer.split_off(n);
        Some(std::mem::replace(&mut self.buffer, rest))
    }

    /// Reads what has come into the buffer; false at the end of the stream, on an error, or
    /// once the receiver is dropped.
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        loop {
            if self.stopped.load(Ordering::SeqCst) {
                return false;
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => {
                    self.buffer.extend_from_slice(&chunk[..n]);
                    return true;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(_) => return false,
            }
        }
    }
}

/// The reason phrase of a status (any will do for a client; these read well in a capture).
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}
