//! One instant query against Prometheus' HTTP API (`GET /api/v1/query`), over plain HTTP with
//! the hyper client already in the build: the value of the first series, or `None` when the
//! query returns no data.

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use crate::message;

/// How long one query may take, connection included.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// The largest answer read: an instant query for one number is a few hundred bytes; a larger
/// answer (the wrong server, a query over many series) is refused unread.
const MAX_ANSWER: usize = 1 << 20;

/// A Prometheus HTTP client.
#[derive(Clone)]
pub struct Prometheus {
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
}

impl Default for Prometheus {
    fn default() -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }
}

impl Prometheus {
    /// The value of `query` now, at `address` (`http://host:port`); a failure as one clean line
    /// (Prometheus' error quotes the tenant's query).
    pub async fn query(&self, address: &str, query: &str) -> Result<Option<f64>, String> {
        self.ask(address, query)
            .await
            .map_err(|e| message::line(&e))
    }

    async fn ask(&self, address: &str, query: &str) -> Result<Option<f64>, String> {
        let url = format!(
            "{}/api/v1/query?query={}",
            address.trim_end_matches('/'),
            utf8_percent_encode(query, NON_ALPHANUMERIC)
        );
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| format!("bad address {address}: {e}"))?;
        let answer = async {
            let response = self.client.get(uri).await.map_err(|e| {
                format!(
                    "Prometheus at {address} did not answer: {}",
                    message::with_causes(&e)
                )
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|_| {
                    format!("Prometheus at {address} answered more than 1 MiB, or broke off")
                })?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(TIMEOUT, answer)
            .await
            .map_err(|_| format!("Prometheus at {address} did not answer within {TIMEOUT:?}"))??;
        let json: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|_| format!("Prometheus answered HTTP {status} without JSON"))?;
        value(&json)
    }
}

/// The first sample's value of an instant-query answer.
fn value(json: &serde_json::Value) -> Result<Option<f64>, String> {
    if json["status"] != "success" {
        let error = json["error"].as_str().unwrap_or("unknown error");
        return Err(format!("the query failed: {error}"));
    }
    let data = &json["data"];
    let sample = match data["resultType"].as_str() {
        Some("scalar") => &data["result"],
        _ => &data["result"][0]["value"],
    };
    match sample[1].as_str() {
        None => Ok(None),
        Some(text) => text
            .parse::<f64>()
            .map(|v| (!v.is_nan()).then_some(v))
            .map_err(|_| format!("the query returned {text}, not a number")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_first_sample_or_no_data() {
        let answer = json!({"status": "success", "data": {"resultType": "vector",
            "result": [{"metric": {}, "value": [1.0, "0.25"]}]}});
        assert_eq!(value(&answer), Ok(Some(0.25)));
        let empty = json!({"status": "success", "data": {"resultType": "vector", "result": []}});
        assert_eq!(value(&empty), Ok(None));
        let nan = json!({"status": "success", "data": {"resultType": "vector",
            "result": [{"metric": {}, "value": [1.0, "NaN"]}]}});
        assert_eq!(value(&nan), Ok(None), "0/0 is no data");
        let bad = json!({"status": "error", "error": "parse error"});
        assert_eq!(value(&bad), Err("the query failed: parse error".into()));
    }
}
