//! Growing state (issue 16): what agent frameworks write when they persist the whole state at
//! every step (LangGraph's checkpoint holds the full message list). Each context is one agent
//! thread; its step k appends `{"messages":[m1,…,mk]}`: the state of step k − 1 plus one more
//! chat message, so N steps cost O(N²) logical bytes while the final state is O(N).
//!
//! The states of a thread depend only on (seed, thread index) and the configuration, so every
//! backend of a side-by-side run stores the same bytes, and a test can regenerate them.

use bytes::Bytes;

use crate::workload::text::{ChatText, Rng};

/// A message shorter than ChatText's header (`{"role":…,"id":…,"seq":…,"content":"`, ≈ 80
/// bytes) would cut the header itself; half of this is the shortest message drawn.
pub const GROWING_MESSAGE_BYTES_MIN: usize = 256;

const STATE_OPEN: &[u8] = b"{\"messages\":[";
const STATE_CLOSE: &[u8] = b"]}";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrowingConfig {
    /// Mean length of a message; each is drawn uniformly in [½, 1½] × this.
    pub message_bytes: usize,
    /// Appends per thread; the thread is done after them.
    pub steps: u32,
}

impl Default for GrowingConfig {
    fn default() -> Self {
        GrowingConfig {
            message_bytes: 1024,
            steps: 300,
        }
    }
}

impl GrowingConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.message_bytes < GROWING_MESSAGE_BYTES_MIN {
            return Err(format!(
                "--growing-message-bytes must be at least {GROWING_MESSAGE_BYTES_MIN}"
            ));
        }
        if self.steps == 0 {
            return Err("--growing-steps must be at least 1".into());
        }
        Ok(())
    }
}

/// One agent thread's states, step after step.
#[derive(Debug)]
pub struct GrowingThread {
    message_bytes: usize,
    text: ChatText,
    rng: Rng,
    /// `{"messages":[m1,…,mk` without the closing `]}`, so that a step appends in place.
    body: Vec<u8>,
    messages: u32,
}

impl GrowingThread {
    pub fn new(config: GrowingConfig, seed: u64, thread: u64) -> GrowingThread {
        let thread_seed = seed ^ (thread.wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut body = Vec::with_capacity(STATE_OPEN.len() + config.message_bytes * 2);
        body.extend_from_slice(STATE_OPEN);
        GrowingThread {
            message_bytes: config.message_bytes,
            text: ChatText::new(thread_seed),
            rng: Rng::new(thread_seed ^ 0x6772_6f77),
            body,
            messages: 0,
        }
    }

    /// Messages in the state `next_state` returned last.
    pub fn messages(&self) -> u32 {
        self.messages
    }

    /// The next state: the previous one plus one message.
    pub fn next_state(&mut self) -> Bytes {
        let half = self.message_bytes / 2;
        let len = half + self.rng.below(self.message_bytes as u64 + 1) as usize;
        let message = json_message(&mut self.text, len);
        if self.messages > 0 {
            self.body.push(b',');
        }
        self.body.extend_from_slice(&message);
        self.messages += 1;
        let mut state = Vec::with_capacity(self.body.len() + STATE_CLOSE.len());
        state.extend_from_slice(&self.body);
        state.extend_from_slice(STATE_CLOSE);
        Bytes::from(state)
    }
}

/// A ChatText message of exactly `len` bytes that is valid JSON. ChatText cuts its text to
/// length, which can leave half an escape (a lone `\`) before the closing quote; that would
/// escape the quote and break every later state, so it becomes a space.
fn json_message(text: &mut ChatText, len: usize) -> Vec<u8> {
    let mut message = text.payload(len);
    let Some(quote_at) = message.iter().rposition(|&byte| byte == b'"') else {
        return message;
    };
    let backslashes = message[..quote_at]
        .iter()
        .rev()
        .take_while(|&&byte| byte == b'\\')
        .count();
    if backslashes % 2 == 1 {
        message[quote_at - 1] = b' ';
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_is_the_previous_plus_one_message_and_valid_json() {
        let config = GrowingConfig {
            message_bytes: 600,
            steps: 60,
        };
        let mut thread = GrowingThread::new(config, 1, 0);
        let mut previous: Option<serde_json::Value> = None;
        for step in 1..=config.steps {
            let state = thread.next_state();
            let parsed: serde_json::Value = serde_json::from_slice(&state)
                .unwrap_or_else(|error| panic!("step {step}: {error}"));
            let messages = parsed["messages"].as_array().unwrap();
            assert_eq!(messages.len(), step as usize);
            assert_eq!(thread.messages(), step);
            if let Some(previous) = &previous {
                assert_eq!(
                    &messages[..messages.len() - 1],
                    previous["messages"].as_array().unwrap().as_slice()
                );
            }
            let last = serde_json::to_vec(messages.last().unwrap()).unwrap();
            // serde drops the padding spaces; the message was drawn in [300, 900] bytes.
            assert!(last.len() <= 900, "message of {} bytes", last.len());
            previous = Some(parsed);
        }
    }

    #[test]
    fn message_lengths_cover_half_to_one_and_a_half_times() {
        let config = GrowingConfig {
            message_bytes: 1024,
            steps: 400,
        };
        let mut thread = GrowingThread::new(config, 9, 3);
        let mut previous_len = STATE_OPEN.len() + STATE_CLOSE.len();
        let mut lengths = Vec::new();
        for step in 0..config.steps {
            let state = thread.next_state();
            let separator = usize::from(step > 0);
            lengths.push(state.len() - previous_len - separator);
            previous_len = state.len();
        }
        assert!(lengths.iter().all(|len| (512..=1536).contains(len)));
        assert!(lengths.iter().any(|len| *len < 640));
        assert!(lengths.iter().any(|len| *len > 1408));
        let mean = lengths.iter().sum::<usize>() as f64 / lengths.len() as f64;
        assert!((960.0..1090.0).contains(&mean), "mean {mean}");
    }

    #[test]
    fn threads_repeat_with_their_seed_and_differ_from_each_other() {
        let config = GrowingConfig::default();
        let states = |seed, index| {
            let mut thread = GrowingThread::new(config, seed, index);
            (0..5).map(|_| thread.next_state()).collect::<Vec<_>>()
        };
        assert_eq!(states(1, 0), states(1, 0));
        assert_ne!(states(1, 0), states(1, 1));
        assert_ne!(states(1, 0), states(2, 0));
    }

    #[test]
    fn a_lone_backslash_before_the_closing_quote_is_replaced() {
        // Many messages of odd lengths: some cut inside a `\n` escape.
        let mut text = ChatText::new(5);
        for len in 200..1200 {
            let message = json_message(&mut text, len);
            assert_eq!(message.len(), len);
            let parsed: Result<serde_json::Value, _> = serde_json::from_slice(&message);
            assert!(parsed.is_ok(), "{}", String::from_utf8_lossy(&message));
        }
    }
}
