//! What the load generator sends: chat-like text, the payload stream (sizes, duplicates,
//! large incompressible payloads), growing agent states, and a stream's token deltas.

pub mod deltas;
pub mod growing;
pub mod payloads;
pub mod text;
