//! Service-level objectives: `--slo 'append.p99<=10ms,get_last.p50<=1ms,append.errors<=0,
//! append.throughput>=1000'`. The load generator exits non-zero when one is missed.

use std::fmt;
use std::str::FromStr;

use crate::ops::Op;
use crate::report::Report;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    P50,
    P90,
    P99,
    P999,
    Max,
    /// Operations per second.
    Throughput,
    Errors,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    AtMost,
    AtLeast,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Objective {
    pub op: Op,
    pub metric: Metric,
    pub comparison: Comparison,
    /// Microseconds for latencies, per second for throughput, a count for errors.
    pub value: f64,
    text: String,
}

impl fmt::Display for Objective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A list of objectives, as given on the command line.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Slo(pub Vec<Objective>);

impl FromStr for Slo {
    type Err = String;

    fn from_str(text: &str) -> Result<Slo, String> {
        text.split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(parse_objective)
            .collect::<Result<_, _>>()
            .map(Slo)
    }
}

fn parse_objective(text: &str) -> Result<Objective, String> {
    let (left, comparison, right) = if let Some((left, right)) = text.split_once("<=") {
        (left, Comparison::AtMost, right)
    } else if let Some((left, right)) = text.split_once(">=") {
        (left, Comparison::AtLeast, right)
    } else {
        return Err(format!(
            "{text:?}: expected op.metric<=value or op.metric>=value"
        ));
    };
    let (op, metric) = left
        .trim()
        .split_once('.')
        .ok_or_else(|| format!("{text:?}: expected op.metric"))?;
    let op: Op = op.parse()?;
    let metric = match metric {
        "p50" => Metric::P50,
        "p90" => Metric::P90,
        "p99" => Metric::P99,
        "p999" => Metric::P999,
        "max" => Metric::Max,
        "throughput" => Metric::Throughput,
        "errors" => Metric::Errors,
        other => {
            return Err(format!(
                "{text:?}: unknown metric {other:?} (p50 p90 p99 p999 max throughput errors)"
            ));
        }
    };
    let right = right.trim();
    let value = match metric {
        Metric::Throughput | Metric::Errors => right
            .trim_end_matches("/s")
            .parse::<f64>()
            .map_err(|_| format!("{text:?}: {right:?} is not a number"))?,
        _ => parse_latency_us(right)
            .ok_or_else(|| format!("{text:?}: {right:?} is not a latency like 800us, 5ms, 1s"))?,
    };
    Ok(Objective {
        op,
        metric,
        comparison,
        value,
        text: text.to_string(),
    })
}

fn parse_latency_us(text: &str) -> Option<f64> {
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match unit {
        "us" | "µs" => 1.0,
        "ms" => 1_000.0,
        "s" => 1_000_000.0,
        _ => return None,
    };
    Some(number * factor)
}

/// The outcome of one objective.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub objective: Objective,
    /// `None`: the operation did not run (a miss).
    pub actual: Option<f64>,
    pub met: bool,
}

impl Slo {
    pub fn judge(&self, report: &Report) -> Vec<Verdict> {
        self.0
            .iter()
            .map(|objective| {
                let actual =
                    report
                        .operations
                        .get(objective.op.name())
                        .map(|op| match objective.metric {
                            Metric::P50 => op.latency_us.p50 as f64,
                            Metric::P90 => op.latency_us.p90 as f64,
                            Metric::P99 => op.latency_us.p99 as f64,
                            Metric::P999 => op.latency_us.p999 as f64,
                            Metric::Max => op.latency_us.max as f64,
                            Metric::Throughput => op.throughput_per_s,
                            Metric::Errors => op.errors as f64,
                        });
                let met = actual.is_some_and(|actual| match objective.comparison {
                    Comparison::AtMost => actual <= objective.value,
                    Comparison::AtLeast => actual >= objective.value,
                });
                Verdict {
                    objective: objective.clone(),
                    actual,
                    met,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::report::{Recorder, ServerReport};

    #[test]
    fn parses_objectives() {
        let slo: Slo =
            "append.p99<=10ms, get_last.p50<=800us,append.throughput>=1000,fork.errors<=0"
                .parse()
                .unwrap();
        assert_eq!(slo.0.len(), 4);
        assert_eq!(slo.0[0].value, 10_000.0);
        assert_eq!(slo.0[1].value, 800.0);
        assert_eq!(slo.0[2].comparison, Comparison::AtLeast);
        assert_eq!(slo.0[3].metric, Metric::Errors);
        for bad in [
            "append.p99<10ms",
            "append<=1ms",
            "warp.p99<=1ms",
            "append.p42<=1ms",
            "append.p99<=fast",
            "append.p99<=5d",
        ] {
            assert!(bad.parse::<Slo>().is_err(), "{bad}");
        }
    }

    #[test]
    fn judges_against_a_report() {
        let mut recorder = Recorder::default();
        for _ in 0..100 {
            recorder.record(Op::Append, Duration::from_millis(4));
        }
        let report = Report::new(
            &recorder,
            Duration::from_secs(1),
            ServerReport::default(),
            serde_json::json!({}),
        );
        let slo: Slo = "append.p99<=5ms,append.p50<=1ms,append.throughput>=50,get_last.p50<=1ms"
            .parse()
            .unwrap();
        let met: Vec<bool> = slo
            .judge(&report)
            .iter()
            .map(|verdict| verdict.met)
            .collect();
        assert_eq!(
            met,
            vec![true, false, true, false],
            "get_last never ran: a miss"
        );
    }
}
