//! Real local peers for the relay: a merchant HTTP endpoint with scripted answers and an
//! SMTP receiver. Both listen on loopback port 0 and record what they receive.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[derive(Clone, Debug)]
pub enum Reply {
    Status(u16),
    /// A status with a Retry-After header.
    RetryAfter(u16, &'static str),
    /// Takes the request (it counts as received and applied), then answers too late.
    SucceedSlowly(Duration),
    /// A redirect (301/302/303/307/308) to another URL.
    Redirect(u16, String),
    /// A status with a body that never ends.
    EndlessBody(u16),
}

#[derive(Clone, Debug)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: String,
    pub at: std::time::Instant,
}

#[derive(Clone, Default)]
struct MerchantState {
    script: Arc<Mutex<VecDeque<Reply>>>,
    received: Arc<Mutex<Vec<Received>>>,
}

/// The merchant's fulfilment endpoint: answers from a script, 200 once it runs out.
pub struct Merchant {
    pub url: String,
    state: MerchantState,
}

impl Merchant {
    pub async fn start(script: Vec<Reply>) -> Merchant {
        let state = MerchantState {
            script: Arc::new(Mutex::new(script.into())),
            ..Default::default()
        };
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Merchant { url, state }
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    /// Idempotency keys of the requests received, in order.
    pub fn keys(&self) -> Vec<String> {
        self.received()
            .iter()
            .map(|r| r.headers["idempotency-key"].to_str().unwrap().to_string())
            .collect()
    }

    pub fn push(&self, reply: Reply) {
        self.state.script.lock().unwrap().push_back(reply);
    }
}

async fn receive(State(state): State<MerchantState>, headers: HeaderMap, body: Bytes) -> Response {
    state.received.lock().unwrap().push(Received {
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        at: std::time::Instant::now(),
    });
    let reply = state.script.lock().unwrap().pop_front();
    match reply {
        None => (StatusCode::OK, "ok").into_response(),
        Some(Reply::Status(s)) => (StatusCode::from_u16(s).unwrap(), "scripted").into_response(),
        Some(Reply::RetryAfter(s, after)) => (
            StatusCode::from_u16(s).unwrap(),
            [("retry-after", after)],
            "slow down",
        )
            .into_response(),
        Some(Reply::Redirect(s, location)) => (
            StatusCode::from_u16(s).unwrap(),
            [("location", location)],
            "moved",
        )
            .into_response(),
        Some(Reply::EndlessBody(s)) => {
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            let stream = futures::stream::repeat_with(move || {
                Ok::<_, std::convert::Infallible>(chunk.clone())
            });
            (
                StatusCode::from_u16(s).unwrap(),
                axum::body::Body::from_stream(stream),
            )
                .into_response()
        }
        Some(Reply::SucceedSlowly(d)) => {
            tokio::time::sleep(d).await;
            (StatusCode::OK, "ok, but late").into_response()
        }
    }
}

/// A minimal SMTP receiver (enough of RFC 5321 for a client to deliver one message per
/// transaction); keeps every message's raw DATA.
pub struct SmtpReceiver {
    pub port: u16,
    messages: Arc<Mutex<Vec<String>>>,
}

impl SmtpReceiver {
    pub async fn start() -> SmtpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let messages = Arc::new(Mutex::new(Vec::new()));
        let store = messages.clone();
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let store = store.clone();
                tokio::spawn(async move {
                    let (read, mut write) = socket.into_split();
                    let mut lines = BufReader::new(read).lines();
                    let _ = write.write_all(b"220 test-smtp ready\r\n").await;
                    while let Ok(Some(line)) = lines.next_line().await {
                        let verb = line
                            .split_whitespace()
                            .next()
                            .unwrap_or("")
                            .to_ascii_uppercase();
                        let reply: &[u8] = match verb.as_str() {
                            "EHLO" => b"250-test-smtp\r\n250 8BITMIME\r\n",
                            "HELO" | "MAIL" | "RCPT" | "RSET" | "NOOP" => b"250 OK\r\n",
                            "DATA" => {
                                let _ = write.write_all(b"354 go ahead\r\n").await;
                                let mut data = String::new();
                                while let Ok(Some(l)) = lines.next_line().await {
                                    if l == "." {
                                        break;
                                    }
                                    data.push_str(&l);
                                    data.push('\n');
                                }
                                store.lock().unwrap().push(data);
                                b"250 queued\r\n"
                            }
                            "QUIT" => {
                                let _ = write.write_all(b"221 bye\r\n").await;
                                return;
                            }
                            _ => b"502 not implemented\r\n",
                        };
                        if write.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        SmtpReceiver { port, messages }
    }

    pub fn messages(&self) -> Vec<String> {
        self.messages.lock().unwrap().clone()
    }
}
