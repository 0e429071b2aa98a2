//! Label selectors, as Kubernetes reads them, in the two forms the controller meets: a
//! `metav1.LabelSelector` object (a Gateway listener's `allowedRoutes.namespaces.selector`) and
//! the string form of `kubectl get -l` (the admin's `--shard`). One reading of each, one
//! matching: labels are held as boxed pairs, the form the namespace cache keeps.

use std::fmt;

use serde_json::Value;

/// A set of labels, as the caches hold them.
pub type Labels = [(Box<str>, Box<str>)];

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    /// The label has one of these values (`matchLabels` and `key=value` give one value).
    In(Box<str>, Box<[Box<str>]>),
    /// The label is absent or has none of these values.
    NotIn(Box<str>, Box<[Box<str>]>),
    /// The label is present.
    Exists(Box<str>),
    /// The label is absent.
    DoesNotExist(Box<str>),
}

impl Requirement {
    fn matches(&self, labels: &Labels) -> bool {
        let value = |key: &str| labels.iter().find(|(k, _)| &**k == key).map(|(_, v)| v);
        match self {
            Requirement::In(key, values) => value(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => !value(key).is_some_and(|v| values.contains(v)),
            Requirement::Exists(key) => value(key).is_some(),
            Requirement::DoesNotExist(key) => value(key).is_none(),
        }
    }
}

/// A label selector: every requirement must hold (none: every set of labels matches).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector(Box<[Requirement]>);

impl Selector {
    /// Whether `labels` meet every requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }

    /// A `metav1.LabelSelector` object; `None` when it holds an operator it does not define.
    pub fn of_object(value: &Value) -> Option<Self> {
        let strings = |v: &Value| -> Box<[Box<str>]> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| Some(s.as_str()?.into()))
                .collect()
        };
        let labels = value["matchLabels"].as_object().into_iter().flatten();
        let mut requirements: Vec<Requirement> = labels
            .filter_map(|(k, v)| {
                Some(Requirement::In(
                    k.as_str().into(),
                    [v.as_str()?.into()].into(),
                ))
            })
            .collect();
        for expression in value["matchExpressions"].as_array().into_iter().flatten() {
            let key: Box<str> = expression["key"].as_str()?.into();
            requirements.push(match expression["operator"].as_str()? {
                "In" => Requirement::In(key, strings(&expression["values"])),
                "NotIn" => Requirement::NotIn(key, strings(&expression["values"])),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                _ => return None,
            });
        }
        Some(Self(requirements.into()))
    }

    /// The string form (`key=value`, `key==value`, `key!=value`, `key in (a,b)`,
    /// `key notin (a,b)`, `key`, `!key`, joined by commas), or why it cannot be read, in one
    /// line. An empty string selects everything, as `kubectl -l ''` does; that is refused too:
    /// a selector that picks everything is no part of anything.
    pub fn parse(text: &str) -> Result<Self, String> {
        let requirements = split_requirements(text)
            .into_iter()
            .map(requirement)
            .collect::<Result<Vec<_>, _>>()?;
        if requirements.is_empty() {
            return Err("an empty selector picks every namespace".to_string());
        }
        Ok(Self(requirements.into()))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |values: &[Box<str>]| values.join(",");
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match r {
                Requirement::In(k, v) if v.len() == 1 => write!(f, "{k}={}", v[0])?,
                Requirement::In(k, v) => write!(f, "{k} in ({})", join(v))?,
                Requirement::NotIn(k, v) if v.len() == 1 => write!(f, "{k}!={}", v[0])?,
                Requirement::NotIn(k, v) => write!(f, "{k} notin ({})", join(v))?,
                Requirement::Exists(k) => write!(f, "{k}")?,
                Requirement::DoesNotExist(k) => write!(f, "!{k}")?,
            }
        }
        Ok(())
    }
}

/// The requirements of a selector string: split at the commas outside parentheses.
fn split_requirements(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0_i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// One requirement of the string form.
fn requirement(text: &str) -> Result<Requirement, String> {
    let key = |k: &str| -> Result<Box<str>, String> {
        let k = k.trim();
        let valid = !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
        valid
            .then(|| k.into())
            .ok_or_else(|| format!("{k:?} is not a label key (in {text:?})"))
    };
    let set = |rest: &str| -> Result<Box<[Box<str>]>, String> {
        let inner = rest
            .trim()
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'));
        let inner = inner.ok_or_else(|| format!("{text:?}: the values go in parentheses"))?;
        Ok(inner.split(',').map(|v| v.trim().into()).collect())
    };
    if let Some((k, v)) = text.split_once("!=") {
        return Ok(Requirement::NotIn(key(k)?, [v.trim().into()].into()));
    }
    if let Some((k, v)) = text.split_once("==").or_else(|| text.split_once('=')) {
        return Ok(Requirement::In(key(k)?, [v.trim().into()].into()));
    }
    if let Some((k, rest)) = text.split_once(" notin ") {
        return Ok(Requirement::NotIn(key(k)?, set(rest)?));
    }
    if let Some((k, rest)) = text.split_once(" in ") {
        return Ok(Requirement::In(key(k)?, set(rest)?));
    }
    match text.strip_prefix('!') {
        Some(k) => Ok(Requirement::DoesNotExist(key(k)?)),
        None => Ok(Requirement::Exists(key(text)?)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(Box<str>, Box<str>)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn a_selector_of_expressions_reads_as_kubernetes_reads_it() {
        let labels = labels(&[("env", "prod")]);
        let read = |s: Value| Selector::of_object(&s).expect("readable");
        let all = |s: Value| read(s).matches(&labels);
        assert!(all(
            json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]}]})
        ));
        assert!(!all(
            json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]})
        ));
        assert!(all(
            json!({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]})
        ));
        assert!(!all(
            json!({"matchExpressions": [{"key": "team", "operator": "Exists"}]})
        ));
        assert!(all(json!({})), "an empty selector selects every namespace");
        assert!(
            Selector::of_object(&json!({"matchExpressions": [{"key": "env", "operator": "Gt"}]}))
                .is_none()
        );
    }

    #[test]
    fn the_string_form_reads_as_kubectl_reads_it_and_prints_back() {
        let a = labels(&[("failover.dev/shard", "a"), ("team", "x")]);
        let b = labels(&[("failover.dev/shard", "b")]);
        let none = labels(&[]);
        let cases = [
            ("failover.dev/shard=a", [true, false, false]),
            ("failover.dev/shard==a", [true, false, false]),
            ("failover.dev/shard!=a", [false, true, true]),
            ("failover.dev/shard in (a, b)", [true, true, false]),
            ("failover.dev/shard notin (a,b)", [false, false, true]),
            ("failover.dev/shard", [true, true, false]),
            ("!failover.dev/shard", [false, false, true]),
            ("failover.dev/shard in (a,b),team", [true, false, false]),
        ];
        for (text, expected) in cases {
            let selector = Selector::parse(text).expect(text);
            let got = [&a, &b, &none].map(|l| selector.matches(l));
            assert_eq!(got, expected, "{text}");
            let printed = Selector::parse(&selector.to_string()).expect("prints readably");
            assert_eq!(printed, selector, "{text} prints as {selector}");
        }
        for bad in ["", " , ", "a b=c", "shard in a,b", "=a"] {
            assert!(Selector::parse(bad).is_err(), "{bad:?} is refused");
        }
    }
}
