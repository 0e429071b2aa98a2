//! One POST of a JSON body over plain HTTP, with the hyper client already in the build (as the
//! health queries' GET): an answer in 2xx is success; anything else, or no answer within
//! [`TIMEOUT`], is a failure said in one line. The answer's body is not read.

use http_body_util::Full;
use hyper::{Request, body::Bytes};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};

use failover_core::message;

/// How long one POST may take, connection and answer included: a receiver that never answers
/// holds its sender this long per try.
pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A client for POSTs.
#[derive(Clone)]
pub struct Poster {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for Poster {
    fn default() -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }
}

impl Poster {
    /// POSTs `body` to `url` with `headers` (besides `Content-Type: application/json`).
    pub async fn post(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Result<(), String> {
        let mut request = Request::post(url).header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, value.as_str());
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("bad URL {url}: {e}"))?;
        let response = tokio::time::timeout(TIMEOUT, self.client.request(request))
            .await
            .map_err(|_| format!("{url} did not answer within {TIMEOUT:?}"))?
            .map_err(|e| format!("{url} did not answer: {}", message::with_causes(&e)))?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("{url} answered {status}"))
        }
    }
}
