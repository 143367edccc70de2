//! The operations a workload mixes, and the mix itself (`append=70,get_last=25,fork=5`).

use std::fmt;
use std::str::FromStr;

use crate::workload::text::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// Append a turn to a context (durable when acknowledged).
    Append,
    /// The newest `read_turns` turns of a context, with payloads.
    GetLast,
    /// A page of turns older than a known turn (cursor paging), with payloads.
    Page,
    /// A depth window of a context's chain, with payloads.
    Range,
    /// A new context whose head is an existing turn.
    Fork,
    /// One payload by hash.
    GetBlob,
    /// Streaming workload (`--workload streaming`): open a stream on a context.
    StreamOpen,
    /// Streaming workload: one delta appended, from its intended send time to its
    /// acknowledgement (durable).
    Delta,
    /// Streaming workload: one delta from its intended send time until its follower holds
    /// its bytes.
    Delivery,
    /// Streaming workload: seal a stream into one turn.
    Seal,
}

impl Op {
    pub const ALL: [Op; 10] = [
        Op::Append,
        Op::GetLast,
        Op::Page,
        Op::Range,
        Op::Fork,
        Op::GetBlob,
        Op::StreamOpen,
        Op::Delta,
        Op::Delivery,
        Op::Seal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Append => "append",
            Op::GetLast => "get_last",
            Op::Page => "page",
            Op::Range => "range",
            Op::Fork => "fork",
            Op::GetBlob => "get_blob",
            Op::StreamOpen => "stream_open",
            Op::Delta => "delta",
            Op::Delivery => "delivery",
            Op::Seal => "seal",
        }
    }

    /// Measured by the streaming workload alone: never in a `--mix`.
    pub fn is_streaming(self) -> bool {
        matches!(self, Op::StreamOpen | Op::Delta | Op::Delivery | Op::Seal)
    }

    pub fn index(self) -> usize {
        Op::ALL.iter().position(|op| *op == self).unwrap_or(0)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Op {
    type Err = String;

    fn from_str(text: &str) -> Result<Op, String> {
        Op::ALL
            .into_iter()
            .find(|op| op.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Op::ALL.iter().map(|op| op.name()).collect();
                format!("unknown operation {text:?}; known: {}", names.join(", "))
            })
    }
}

/// Weighted operations. Weights are relative (they need not add up to 100).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mix {
    weights: Vec<(Op, u32)>,
    total: u32,
}

impl Mix {
    pub fn only(op: Op) -> Mix {
        Mix {
            weights: vec![(op, 1)],
            total: 1,
        }
    }

    pub fn pick(&self, rng: &mut Rng) -> Op {
        let mut target = rng.below(u64::from(self.total)) as u32;
        for (op, weight) in &self.weights {
            if target < *weight {
                return *op;
            }
            target -= weight;
        }
        self.weights[0].0
    }

    pub fn weights(&self) -> &[(Op, u32)] {
        &self.weights
    }

    pub fn contains(&self, op: Op) -> bool {
        self.weights.iter().any(|(candidate, _)| *candidate == op)
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .weights
            .iter()
            .map(|(op, weight)| format!("{op}={weight}"))
            .collect();
        f.write_str(&parts.join(","))
    }
}

impl FromStr for Mix {
    type Err = String;

    fn from_str(text: &str) -> Result<Mix, String> {
        let mut weights: Vec<(Op, u32)> = Vec::new();
        for part in text
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
        {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not op=weight"))?;
            let op: Op = name.trim().parse()?;
            let weight: u32 = weight
                .trim()
                .parse()
                .map_err(|_| format!("weight of {name} is not a whole number"))?;
            if op.is_streaming() {
                return Err(format!(
                    "{op} is measured by --workload streaming, not run from a --mix"
                ));
            }
            if weights.iter().any(|(known, _)| *known == op) {
                return Err(format!("{op} appears twice in the mix"));
            }
            if weight > 0 {
                weights.push((op, weight));
            }
        }
        let total: u32 = weights.iter().map(|(_, weight)| weight).sum();
        if total == 0 {
            return Err("the mix has no operation with a positive weight".into());
        }
        Ok(Mix { weights, total })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let mix: Mix = "append=70, get_last=25,fork=5".parse().unwrap();
        assert_eq!(mix.to_string(), "append=70,get_last=25,fork=5");
        assert!("append=x".parse::<Mix>().is_err());
        assert!("teleport=3".parse::<Mix>().is_err());
        assert!("append=0".parse::<Mix>().is_err());
        assert!("append=1,append=2".parse::<Mix>().is_err());
        assert!("append=1,delta=2".parse::<Mix>().is_err());
    }

    #[test]
    fn picks_in_proportion() {
        let mix: Mix = "append=70,get_last=25,fork=5".parse().unwrap();
        let mut rng = Rng::new(42);
        let mut counts = [0u32; Op::ALL.len()];
        let draws = 100_000;
        for _ in 0..draws {
            counts[mix.pick(&mut rng).index()] += 1;
        }
        let share = |op: Op| f64::from(counts[op.index()]) / f64::from(draws);
        assert!((share(Op::Append) - 0.70).abs() < 0.01);
        assert!((share(Op::GetLast) - 0.25).abs() < 0.01);
        assert!((share(Op::Fork) - 0.05).abs() < 0.005);
        assert_eq!(counts[Op::Page.index()], 0);
    }
}
