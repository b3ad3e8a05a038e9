#![cfg(gpu_event_pool_loom)]
//! Loom model of the submission queue, driven through the public API: two producers submit
//! two lists each while the collector takes everything submitted so far.
//!
//! Checked: no list is lost or collected twice, each producer's lists arrive in the order it
//! submitted them, and what reached the slots' records (zone name, lane; the list's length
//! and id, written by `submit` on the producer's thread) and the events' times arrive in
//! the sink intact.

#[path = "common/backend.rs"]
mod backend;
mod common;

use backend::{assert_accounted, context, received, record_one_zone, LoomStream};
use gpu_event_pool::{Collected, Lane};
use loom::thread;

#[test]
fn two_producers_and_a_collector_lose_nothing_and_keep_each_producers_order() {
    common::model(|| {
        // Eight slots for four lists of two events: the pool never grows or runs out. The
        // lists are recorded up front (recording races are the lifecycle models' subject):
        // the threads race only on `submit` and `collect`, so the model explores the queue.
        let (backend, sink, ctx) = context(8, 8, 2);
        let producers: Vec<_> = (0..2u64)
            .map(|p| {
                let stream = LoomStream::new(p);
                let lists: Vec<_> =
                    (0..2).map(|l| record_one_zone(&ctx, &stream, &format!("p{p} l{l}"))).collect();
                let ctx = ctx.clone();
                thread::spawn(move || {
                    for list in lists {
                        ctx.submit(list).expect("no open zone, same context");
                    }
                })
            })
            .collect();
        let collector = {
            let ctx = ctx.clone();
            thread::spawn(move || match ctx.collect() {
                Ok(Collected::Done(report)) => report.lists,
                other => panic!("the only collector got {other:?}"),
            })
        };
        for producer in producers {
            producer.join().unwrap();
        }
        let collected_early = collector.join().unwrap();
        let report = ctx.flush().unwrap();
        assert_eq!(collected_early + report.lists, 4, "every list collected exactly once");

        let zones = received(&sink);
        assert_eq!(zones.len(), 4, "{zones:?}");
        for p in 0..2u64 {
            let mine: Vec<_> = zones.iter().filter(|z| z.1 == Lane::Stream(p)).cloned().collect();
            let expected: Vec<_> = (0..2).map(|l| (format!("p{p} l{l}"), Lane::Stream(p), 1_000)).collect();
            assert_eq!(mine, expected, "producer {p}'s zones, in its submission order");
        }
        let stats = assert_accounted(&ctx);
        assert_eq!((stats.owned, stats.submitted, stats.free), (0, 0, 8));
        assert_eq!((stats.lists_submitted, stats.lists_collected), (4, 4));
        drop(ctx);
        assert_eq!(backend.live_events(), 0, "every event destroyed with the pool");
    });
}
