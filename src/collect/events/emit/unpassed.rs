//! The slots of failed lists whose events the GPU has not passed yet, on a backend that
//! retires events ([`Backend::RETIRES`]: Vulkan resets its queries there).
//!
//! A list fails when one of its times cannot be read; another of its zones, on another
//! stream, may still be running then, its events still to be written. Retiring such an event
//! (resetting a query that a pending command buffer will write) and recording it again in
//! another list would let the late write land in that list's times. So a failed list's
//! chain is retired, and its slots freed, only once the backend says each of its events is
//! complete ([`Backend::is_complete`]); until then the chain waits here, its slots counted
//! as submitted, and is asked again at each emit phase. An event the backend cannot answer
//! for (an error, a device lost) is taken as passed: the GPU will not write it, and holding
//! it would hold its slots for good. A list read whole (emitted, or failed on a time that
//! cannot be true) has had every event complete: it passes at once. A failed list whose
//! events never complete (a Vulkan command buffer that never reached the queue) keeps its
//! slots, counted as submitted: the application may still submit that work, which would
//! write them.

use crate::backend::{guarded, Backend};
use crate::shared::Inner;
use crate::slots::freelist::Chain;

/// Chains of failed lists waiting for the GPU to pass their events.
#[derive(Debug, Default)]
pub(super) struct Unpassed {
    chains: Vec<Chain>,
}

impl Unpassed {
    /// The chain of a failed list: itself if it may be retired now (the backend retires
    /// nothing, or the GPU has passed every event), else `None`, kept until it has.
    pub(super) fn release_when_passed<B: Backend>(&mut self, ctx: &Inner<B>, chain: Chain) -> Option<Chain> {
        if !B::RETIRES || passed(ctx, &chain) {
            return Some(chain);
        }
        self.chains.push(chain);
        None
    }

    /// The chains kept whose events the GPU has passed since, taken out.
    pub(super) fn take_passed<B: Backend>(&mut self, ctx: &Inner<B>) -> Vec<Chain> {
        let mut passed_now = Vec::new();
        self.chains.retain(|chain| {
            let done = passed(ctx, chain);
            if done {
                passed_now.push(*chain);
            }
            !done
        });
        passed_now
    }
}

/// Whether the GPU has passed every event of `chain` (an error, or a panic, counts as passed).
fn passed<B: Backend>(ctx: &Inner<B>, chain: &Chain) -> bool {
    let mut all = true;
    ctx.pool().for_each_event(chain, |event| {
        all &= guarded("Backend::is_complete", || ctx.backend().is_complete(event)).unwrap_or(true);
    });
    all
}
