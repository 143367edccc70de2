//! What the load generator sends: chat-like text and the payload stream (sizes, duplicates,
//! large incompressible payloads).

pub mod payloads;
pub mod text;
