//! One instant query against Prometheus' HTTP API (`GET /api/v1/query`), over plain HTTP with
//! the hyper client already in the build: one number, or `None` when the query returns no data.
//!
//! The answer (up to [`MAX_ANSWER`]) is parsed on a blocking thread, never on the thread that
//! serves `/healthz`, renews the leader Lease and runs the work queue. It is read into the few
//! fields a health check needs: labels and the samples of a range are skipped unkept. Only a
//! scalar, or an instant vector of at most one series, is an answer; anything else (a range
//! vector, a string, several series, a native histogram) is an error that names it.

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use serde::{Deserialize, de::IgnoredAny};

use failover_core::message;

/// How long Prometheus may evaluate one query (its `timeout` parameter): it stops the query
/// then and gives its query slot back, whatever the query.
pub const QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);
/// How long one query may take, connection and answer included.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// The largest answer read: an instant query for one number is a few hundred bytes; a larger
/// answer (the wrong server, a query over many series) is refused unread.
pub const MAX_ANSWER: usize = 1 << 20;

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
            "{}/api/v1/query?timeout={}s&query={}",
            address.trim_end_matches('/'),
            QUERY_TIMEOUT.as_secs(),
            utf8_percent_encode(query, NON_ALPHANUMERIC)
        );
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| format!("bad address {address}: {e}"))?;
        let reply = async {
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
        let (status, body) = tokio::time::timeout(TIMEOUT, reply)
            .await
            .map_err(|_| format!("Prometheus at {address} did not answer within {TIMEOUT:?}"))??;
        // Parsing up to a MiB takes milliseconds: off this thread.
        tokio::task::spawn_blocking(move || answer(status, &body))
            .await
            .map_err(|_| format!("Prometheus' answer at {address} could not be read"))?
    }
}

/// Prometheus' answer to an instant query, as far as a health check reads it.
#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    data: Option<Data>,
}

/// The result, by its type.
#[derive(Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum Data {
    Scalar(Sample),
    Vector(Vec<Series>),
    Matrix(Vec<IgnoredAny>),
    String(IgnoredAny),
}

/// A timestamp and a value, as Prometheus writes it (the value as text).
type Sample = (IgnoredAny, String);

/// One series of an instant vector: a value, or a native histogram (its labels are skipped).
#[derive(Deserialize)]
struct Series {
    #[serde(default)]
    value: Option<Sample>,
}

/// The number an answer (HTTP `status`, `body`) gives, `None` for no data; an error names what
/// else it is.
fn answer(status: hyper::StatusCode, body: &[u8]) -> Result<Option<f64>, String> {
    let answer: Answer = serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => {
            format!("Prometheus answered HTTP {status} with JSON that is not a query's answer")
        }
        _ => format!("Prometheus answered HTTP {status} without JSON"),
    })?;
    if answer.status != "success" {
        let error = answer.error.as_deref().unwrap_or("unknown error");
        return Err(format!("the query failed: {error}"));
    }
    match answer.data {
        None => Err("Prometheus answered success without data".to_string()),
        Some(Data::Scalar((_, text))) => number(&text),
        Some(Data::Vector(series)) => match series.as_slice() {
            [] => Ok(None),
            [one] => match &one.value {
                Some((_, text)) => number(text),
                None => Err(NOT_A_NUMBER_HISTOGRAM.to_string()),
            },
            many => Err(format!(
                "non-scalar answer: {} series, not one number; aggregate them, e.g. max(...)",
                many.len()
            )),
        },
        Some(Data::Matrix(series)) => Err(format!(
            "non-scalar answer: a range vector (matrix) of {} series, not one number; drop the [range] or use an *_over_time function",
            series.len()
        )),
        Some(Data::String(_)) => Err("non-scalar answer: a string, not one number".to_string()),
    }
}

/// Why a native histogram is no answer.
const NOT_A_NUMBER_HISTOGRAM: &str =
    "non-scalar answer: a native histogram, not one number; take e.g. histogram_quantile of it";

/// A sample's value; NaN (0/0, say) is no data.
fn number(text: &str) -> Result<Option<f64>, String> {
    text.parse::<f64>()
        .map(|v| (!v.is_nan()).then_some(v))
        .map_err(|_| format!("the query returned {text}, not a number"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(json: serde_json::Value) -> Result<Option<f64>, String> {
        answer(hyper::StatusCode::OK, json.to_string().as_bytes())
    }

    #[test]
    fn a_scalar_or_one_series_or_no_data() {
        let answer = json!({"status": "success", "data": {"resultType": "vector",
            "result": [{"metric": {"a": "b"}, "value": [1.5, "0.25"]}]}});
        assert_eq!(read(answer), Ok(Some(0.25)));
        let scalar = json!({"status": "success", "data": {"resultType": "scalar",
            "result": [1, "3"]}});
        assert_eq!(read(scalar), Ok(Some(3.0)));
        let empty = json!({"status": "success", "data": {"resultType": "vector", "result": []}});
        assert_eq!(read(empty), Ok(None));
        let nan = json!({"status": "success", "data": {"resultType": "vector",
            "result": [{"metric": {}, "value": [1.0, "NaN"]}]}});
        assert_eq!(read(nan), Ok(None), "0/0 is no data");
        let bad = json!({"status": "error", "errorType": "bad_data", "error": "parse error"});
        assert_eq!(read(bad), Err("the query failed: parse error".into()));
    }

    #[test]
    fn a_non_scalar_answer_is_an_error_that_names_it() {
        let matrix = json!({"status": "success", "data": {"resultType": "matrix",
            "result": [{"metric": {}, "values": [[1, "1"], [2, "1"]]}]}});
        let said = read(matrix).expect_err("a matrix is no number");
        assert!(
            said.starts_with("non-scalar answer: a range vector (matrix) of 1 series"),
            "{said}"
        );
        let string = json!({"status": "success", "data": {"resultType": "string",
            "result": [1, "up"]}});
        assert_eq!(
            read(string),
            Err("non-scalar answer: a string, not one number".into())
        );
        let two = json!({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"pod": "a"}, "value": [1, "0.1"]},
            {"metric": {"pod": "b"}, "value": [1, "0.9"]}]}});
        let said = read(two).expect_err("which of two?");
        assert!(said.starts_with("non-scalar answer: 2 series"), "{said}");
        let histogram = json!({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {}, "histogram": [1, {"count": "2", "sum": "3", "buckets": []}]}]}});
        assert_eq!(read(histogram), Err(NOT_A_NUMBER_HISTOGRAM.into()));
        for message in [said, NOT_A_NUMBER_HISTOGRAM.to_string()] {
            assert_eq!(message::line(&message), message, "one line as it is");
        }
    }

    #[test]
    fn what_is_not_a_query_answer_says_so() {
        let html = answer(hyper::StatusCode::OK, b"<html>Sign in</html>");
        assert_eq!(
            html,
            Err("Prometheus answered HTTP 200 OK without JSON".into())
        );
        let other = read(json!({"status": "success", "data": {"resultType": "table"}}));
        assert_eq!(
            other,
            Err("Prometheus answered HTTP 200 OK with JSON that is not a query's answer".into())
        );
    }
}
