//! What the load generator sends: chat-like text, the payload stream (sizes, duplicates,
//! large incompressible payloads), and growing agent states.

pub mod growing;
pub mod payloads;
pub mod text;
