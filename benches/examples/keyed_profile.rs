//! TEMPORARY profiling driver (not committed): 32 appenders for N seconds, plain or keyed.
use bytes::Bytes;
use ctxstore_benches::text::ChatText;
use ctxstore_engine::{AppendPayload, AppendRequest, Engine, EngineConfig, TurnOptions};
use std::time::{Duration, Instant};

fn checkpoint_options(index: u64) -> TurnOptions {
    TurnOptions {
        key: Some(Bytes::from(format!("1ef4f797-8335-6428-8001-{index:012x}"))),
        labels: vec![
            ("run_id".into(), format!("run-{}", index % 10)),
            ("source".into(), "loop".into()),
            ("step".into(), (index % 1000).to_string()),
        ],
        ..TurnOptions::default()
    }
}

fn main() {
    let keyed = std::env::args().nth(1).as_deref() == Some("keyed");
    let secs: u64 = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(8);
    let dir = tempfile::tempdir_in("/work/tmp-bench").unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let end = Instant::now() + Duration::from_secs(secs);
    let threads: Vec<_> = (0..2u64)
        .map(|r| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                compio::runtime::Runtime::new()
                    .unwrap()
                    .block_on(async move {
                        let tasks: Vec<_> = (r..32)
                            .step_by(2)
                            .map(|task| {
                                let engine = engine.clone();
                                compio::runtime::spawn(async move {
                                    let context = engine.create_context().await.unwrap().context_id;
                                    let mut text = ChatText::new(task);
                                    let payloads: Vec<Bytes> = (0..64)
                                        .map(|_| Bytes::from(text.payload(10 * 1024)))
                                        .collect();
                                    let mut index = 0u64;
                                    let mut count = 0u64;
                                    while Instant::now() < end {
                                        let mut unique = payloads[index as usize % 64].to_vec();
                                        unique[..8].copy_from_slice(&index.to_le_bytes());
                                        unique[8..16].copy_from_slice(&task.to_le_bytes());
                                        index += 1;
                                        let options = if keyed {
                                            checkpoint_options(task << 32 | index)
                                        } else {
                                            TurnOptions::default()
                                        };
                                        engine
                                            .append(AppendRequest {
                                                context_id: context,
                                                expected_head: None,
                                                type_tag: 1,
                                                codec: 1,
                                                payload: AppendPayload::Bytes(Bytes::from(unique)),
                                                options,
                                            })
                                            .await
                                            .unwrap();
                                        count += 1;
                                    }
                                    count
                                })
                            })
                            .collect();
                        let mut total = 0;
                        for t in tasks {
                            total += t.await.unwrap();
                        }
                        total
                    })
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    println!(
        "{} {:.0}/s",
        if keyed { "keyed" } else { "plain" },
        total as f64 / secs as f64
    );
    engine.shutdown();
}
