/*
 * The collect/flush hand-off of src/collect/mod.rs, as a C11 program for GenMC (issue 31).
 *
 * Mirrors the Rust code name for name; each function's comment names what it mirrors. What it
 * keeps: the `state` word (FLUSHING, MISSED, FLUSH_WAITER, the reader count), the submission
 * queue and the `read` and `retry` queues (src/slots/submit.rs: push = the Release CAS, take =
 * the Acquire swap, `is_empty_now` = fetch_or(0, SeqCst)), the emitter's mutex (std's futex
 * mutex: try_lock = CAS Acquire, unlock = swap Release), the two SeqCst fences of
 * `emit_handed_off`, a list's completion (the backend's answer to `elapsed`).
 * The rounds and the last-round hand-over (`ROUNDS`, `handover` with `LAST_ROUND`, `begin_round`,
 * `take_over_from_last_round`) are modelled, with ROUNDS = 2 (loom's value; the Rust code has
 * 4 outside loom): a flush's own round and one more, so that with 2 lists a flush's last
 * round and a collect racing it are reached.
 * What it leaves out: lanes and their order, the shared read batches, void places (a caller
 * hands over exactly when it read a list), sinks (so `HOLDING` is always 0 here).
 *
 * Every waiting loop (the emitter lock, the flush's wait for readers, its wait for
 * completion, a caller's wait for a last round) is an await, written with GenMC's spinloop
 * markers (`await_while`); verify/run.sh runs GenMC with --disable-spin-assume (so the
 * `fetch_update` CAS loops, which always end, are explored as plain loops) and
 * --check-liveness, so an execution in which an await never ends under a fair scheduler (it
 * reads only the final values of what it reads, every other thread done or blocked) is a
 * "Liveness violation". No other loop can run forever: a CAS loop fails only on a newer
 * value, and the emitter's loop runs at most ROUNDS rounds.
 *
 * Each ordering the mutation table of docs/verification.md weakens is a macro (ORD_*), set
 * on the command line by verify/run.sh; the defaults are the Rust code's orderings.
 *
 * Scenario (a flush racing 2 collects and a submit, as in loom-tests/collector.rs,
 * a_list_submitted_before_a_collect_racing_a_flush_is_emitted_before_both_return and
 * a_list_read_by_a_busy_collector_is_emitted_before_both_return):
 *   t1: submits list 0, collects. In scenario 2 it sees the list complete after submitting
 *       it (a relaxed store: the caller's own view of its GPU work, as the sim GPU's clock in
 *       tests/handoff.rs); elsewhere the list is complete before its submit (as loom's
 *       backend): another reader that takes it before it completes would leave it on
 *       `retry`, and the shared read batches (read.rs, ReadShare) that make a caller entering
 *       meanwhile read it are not modelled.
 *   t2: submits list 1, says so (`sub1`, release), collects.
 *   gpu: completes list 1 (any time).
 *   flush: reads `sub1` (acquire), flushes.
 * SCENARIO (main, below) picks the threads: verify/run.sh runs 1, 2 and 3 separately; 0, all
 * four at once, is too large for GenMC in minutes.
 * Promises checked: list 0 is emitted once both calls returned; list 1 too if the flush
 * started after its submit (the flush waits for every list submitted before it); no list is
 * emitted twice (and `emitted` is a plain array under the emitter lock: GenMC reports a race
 * if two threads ever emit at once); no await waits forever (--check-liveness: the flush's
 * lock, its wait for readers in the FLUSH_WAIT_LOAD form only, see verify/run.sh, its wait
 * for completion, and a caller's wait for a last round).
 */
#include <assert.h>
#include <genmc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define RLX memory_order_relaxed
#define ACQ memory_order_acquire
#define REL memory_order_release
#define AR memory_order_acq_rel
#define SC memory_order_seq_cst

/* The orderings of the mutation table (docs/verification.md), Rust's by default. */
#ifndef ORD_READING_DROP /* Reading::drop: fetch_sub(1, Release) */
#define ORD_READING_DROP REL
#endif
#ifndef ORD_FLUSH_WAIT /* flush: while state.fetch_add(0, SeqCst) & READERS != 0 */
#define ORD_FLUSH_WAIT SC
#endif
#ifndef ORD_FLUSH_START /* flush: fetch_update(SeqCst, SeqCst, |s| (s - FLUSH_WAITER) | FLUSHING) */
#define ORD_FLUSH_START SC
#endif
#ifndef ORD_ENTER /* read: fetch_update(SeqCst, SeqCst, ...), the reader entering */
#define ORD_ENTER SC
#endif
#ifndef ORD_ENTER_LOAD /* read: fetch_update's load / failure ordering */
#define ORD_ENTER_LOAD SC
#endif
#ifndef ROUNDS /* collect/mod.rs: ROUNDS (2 under loom, 4 otherwise) */
#define ROUNDS 2
#endif
/* NO_FENCE_BEFORE_TRY_LOCK, NO_FENCE_AFTER_UNLOCK: remove emit_handed_off's fences.
 * EMPTY_LOAD=ord: is_empty_now as head.load(ord) instead of fetch_or(0, SeqCst).
 * NO_LOOK_AFTER_UNLOCK: the emitter never looks at `read` after unlocking (control a).
 * NO_MISSED_COLLECT: the flush does not collect once more for a MISSED caller.
 * Rounds: NO_TAKE_OVER: a caller never waits for a last round (the code before issue 26's
 * hand-over, with the bound); SEEN_AFTER_TRY_LOCK: `handover` read after the failed try_lock;
 * NO_BEGIN_ROUND_FENCE: begin_round without its fence; ORD_HANDOVER / ORD_SEEN: the orderings
 * of begin_round's RMW and of the `seen` load (SeqCst in the Rust code).
 * Liveness controls: NO_READING_DROP: a reader never leaves (Reading::drop skipped), so a flush
 * waits for it forever; TAKE_OVER_NO_TRY_LOCK: a caller waiting for a last round only waits
 * for another round to begin (or a flush), never taking the freed emitter itself. */
#ifndef ORD_HANDOVER /* begin_round: handover.fetch_update(SeqCst, SeqCst, ...) */
#define ORD_HANDOVER SC
#endif
#ifndef ORD_SEEN /* emit_handed_off: handover.load(SeqCst) (seen), and the take-over's loads */
#define ORD_SEEN SC
#endif

/* GenMC's spinloop markers (its tests/correct/liveness): an await, the loop repeats while
 * `cond` holds and each iteration has no side effect; a failed iteration blocks the
 * execution, and --check-liveness reports one that would spin forever. */
#define await_while(cond)                                                                     \
	({                                                                                    \
		int tmp_ = 0;                                                                 \
		for (__VERIFIER_loop_begin(); __VERIFIER_spin_start(), tmp_ = (cond),        \
					      __VERIFIER_spin_end(!tmp_), tmp_;)              \
			;                                                                     \
	})

/* src/collect/mod.rs: the `state` word (bit positions as in the Rust code). */
#define FLUSHING (1ull << 63)
#define MISSED (1ull << 62)
#define FLUSH_WAITER (1ull << 32)
#define FLUSH_WAITERS (MISSED - FLUSH_WAITER)
#define READERS (FLUSH_WAITER - 1)
/* Collector::handover: LAST_ROUND and the count of rounds begun. */
#define LAST_ROUND (1ull << 63)
#define ROUND_COUNT (LAST_ROUND - 1)

#define LISTS 2
#ifndef SCENARIO
#define SCENARIO 0
#endif
/* A queue is a set of lists (bit i: list i). The Rust queue is a Treiber stack; a push is
 * one successful Release CAS, which is an RMW like this fetch_or, and take_all a swap. */
static _Atomic uint64_t queue; /* Inner::queue, the submission queue */
static _Atomic uint64_t retry; /* Inner::retry */
static _Atomic uint64_t read_q; /* Inner::read */
static _Atomic uint64_t state; /* Collector::state */
static _Atomic int emitter; /* Collector::emitter, std::sync::Mutex (futex word) */
static _Atomic uint64_t handover; /* Collector::handover */
static _Atomic int done[LISTS]; /* the backend: list i's events complete */
static _Atomic int sub1; /* t2 -> flush: list 1 was submitted */
static int emitted[LISTS]; /* the sinks, under the emitter lock */
static int flush_saw_sub1;

/* SubmissionQueue::push_chain: Release CAS. */
static void push(_Atomic uint64_t *q, uint64_t lists) { atomic_fetch_or_explicit(q, lists, REL); }
/* SubmissionQueue::take_all: swap(NIL, Acquire). */
static uint64_t take_all(_Atomic uint64_t *q) { return atomic_exchange_explicit(q, 0, ACQ); }
/* SubmissionQueue::is_empty_now: fetch_or(0, SeqCst) == NIL. */
static bool is_empty_now(_Atomic uint64_t *q)
{
#ifdef EMPTY_LOAD
	return atomic_load_explicit(q, EMPTY_LOAD) == 0;
#else
	return atomic_fetch_or_explicit(q, 0, SC) == 0;
#endif
}

/* sync::try_lock on std's Mutex: compare_exchange(0, 1, Acquire, Relaxed). */
static bool try_lock(void)
{
	int unlocked = 0;
	return atomic_compare_exchange_strong_explicit(&emitter, &unlocked, 1, ACQ, RLX);
}
/* sync::lock: an await for the same CAS (the futex wait is a wait for it). */
static void lock(void) { await_while(!try_lock()); }
/* MutexGuard::drop: swap(0, Release). */
static void unlock(void) { atomic_exchange_explicit(&emitter, 0, REL); }

static void fence_seq_cst(void) { atomic_thread_fence(SC); }

/* read.rs, read_phase: take the submission queue and `retry`; a list whose events are
 * complete (the backend's `elapsed`, a relaxed read here: no edge from the backend) goes to
 * `read`, one not complete to `retry` (`wait`: the flush waits for completion). */
static int read_phase(bool wait)
{
	uint64_t taken = take_all(&queue) | take_all(&retry);
	uint64_t rd = 0, rt = 0;
	for (int i = 0; i < LISTS; i++) {
		if (!(taken & (1ull << i)))
			continue;
		if (wait) /* an await: the flush waits for completion */
			await_while(!atomic_load_explicit(&done[i], RLX));
		if (atomic_load_explicit(&done[i], RLX))
			rd |= 1ull << i;
		else
			rt |= 1ull << i;
	}
	if (rd)
		push(&read_q, rd); /* read.push_onto(&ctx.read) */
	if (rt)
		push(&retry, rt); /* retry.push_onto(&ctx.retry) */
	return rd != 0; /* outcome.read > 0 */
}

/* emit.rs, Emitter::emit_phase: take `read`, emit each list (held: the emitter lock). */
static void emit_phase(void)
{
	uint64_t taken = take_all(&read_q);
	for (int i = 0; i < LISTS; i++)
		if (taken & (1ull << i)) {
			assert(emitted[i] == 0 && "a list was emitted twice");
			emitted[i]++;
		}
}

/* Collector::flush_waiting: state.load(SeqCst) & FLUSH_WAITERS != 0. */
static bool flush_waiting(void) { return (atomic_load_explicit(&state, SC) & FLUSH_WAITERS) != 0; }

/* Collector::begin_round: the SeqCst fetch_update of `handover` (count + 1, LAST_ROUND on the
 * holder's last round), then fence(SeqCst). Called holding the emitter, before the take. */
static void begin_round(bool last)
{
	uint64_t mark = last ? LAST_ROUND : 0;
	uint64_t w = atomic_load_explicit(&handover, ORD_HANDOVER == SC ? SC : RLX);
	while (!atomic_compare_exchange_strong_explicit(
		&handover, &w, (((w & ROUND_COUNT) + 1) & ROUND_COUNT) | mark, ORD_HANDOVER,
		ORD_HANDOVER == SC ? SC : RLX))
		;
#ifndef NO_BEGIN_ROUND_FENCE
	fence_seq_cst();
#endif
}

/* Collector::take_over_from_last_round: true = this caller now holds the emitter. Waits (an
 * await) while the emitter is busy, no flush waits, and `handover` is still `seen`. */
static bool take_over_from_last_round(uint64_t seen)
{
#ifdef NO_TAKE_OVER
	return false;
#endif
	if (!(seen & LAST_ROUND)) /* HOLDING is 0: no sinks in the model */
		return false;
	bool got = false;
#ifdef TAKE_OVER_NO_TRY_LOCK
	await_while(!flush_waiting() && atomic_load_explicit(&handover, ORD_SEEN) == seen);
#else
	await_while(!(got = try_lock()) && !flush_waiting() &&
		    atomic_load_explicit(&handover, ORD_SEEN) == seen);
#endif
	return got;
}

/* Collector::emit_handed_off(rounds, hand_over): at most ROUNDS rounds for one holder. */
static bool emit_handed_off(int rounds, bool hand_over)
{
	bool emitted_any = false;
	for (;;) {
#ifndef NO_FENCE_BEFORE_TRY_LOCK
		fence_seq_cst();
#endif
		if (flush_waiting())
			break;
		bool have_seen = rounds == 0 && hand_over;
		uint64_t seen = 0;
#ifndef SEEN_AFTER_TRY_LOCK
		if (have_seen)
			seen = atomic_load_explicit(&handover, ORD_SEEN);
		if (!try_lock() && !(have_seen && take_over_from_last_round(seen)))
			break;
#else
		if (!try_lock()) {
			if (have_seen)
				seen = atomic_load_explicit(&handover, ORD_SEEN);
			if (!(have_seen && take_over_from_last_round(seen)))
				break;
		}
#endif
		rounds++;
		bool last = rounds >= ROUNDS;
		begin_round(last);
		emit_phase();
		emitted_any = true;
		unlock(); /* drop(emitter) */
		if (last)
			break;
#ifdef NO_LOOK_AFTER_UNLOCK
		break;
#endif
#ifndef NO_FENCE_AFTER_UNLOCK
		fence_seq_cst();
#endif
		if (flush_waiting() || is_empty_now(&read_q))
			break;
	}
	return emitted_any;
}

/* Collector::read: the entering fetch_update (a load, then CAS until it holds), then the
 * read phase, then Reading::drop. -1: turned away by a flush (MISSED set); else whether it
 * read a list (outcome.read > 0). */
static int collector_read(void)
{
	uint64_t s = atomic_load_explicit(&state, ORD_ENTER_LOAD), next;
	do {
		next = (s & FLUSHING) ? (s | MISSED) : (s + 1);
	} while (!atomic_compare_exchange_strong_explicit(&state, &s, next, ORD_ENTER, ORD_ENTER_LOAD));
	if (s & FLUSHING)
		return -1;
	int read = read_phase(false);
#ifndef NO_READING_DROP
	atomic_fetch_sub_explicit(&state, 1, ORD_READING_DROP); /* Reading::drop */
#endif
	return read;
}

/* Collector::collect. */
static void collect(void)
{
	int read = collector_read();
	if (read < 0)
		return; /* Collected::Busy: the flush collects once more for it */
	emit_handed_off(0, read > 0); /* hand_over: it read lists */
}

/* Collector::flush. */
static void flush(void)
{
	atomic_fetch_add_explicit(&state, FLUSH_WAITER, SC); /* announced: Waiting */
	lock();
	uint64_t s = atomic_load_explicit(&state, SC);
	while (!atomic_compare_exchange_strong_explicit(&state, &s, (s - FLUSH_WAITER) | FLUSHING,
							 ORD_FLUSH_START, SC))
		;
	/* Wait for the readers inside: an await on fetch_add(0) (GenMC explores the executions
	 * where the last one finds no reader; --check-liveness, one that never does). */
#ifndef FLUSH_WAIT_LOAD
	await_while((atomic_fetch_add_explicit(&state, 0, ORD_FLUSH_WAIT) & READERS) != 0);
#else
	await_while((atomic_load_explicit(&state, FLUSH_WAIT_LOAD) & READERS) != 0);
#endif
	read_phase(true);
	begin_round(false); /* this flush's first round (ROUNDS > 1: never the last) */
	emit_phase();
	/* Flushing::end */
	bool missed = (atomic_fetch_and_explicit(&state, ~(FLUSHING | MISSED), SC) & MISSED) != 0;
	unlock();
#ifndef NO_MISSED_COLLECT
	if (missed)
		collect();
	else
#endif
		emit_handed_off(1, false);
}

static void *t1(void *arg)
{
	if (SCENARIO != 2)
		atomic_store_explicit(&done[0], 1, RLX); /* complete before its submit (as loom's backend) */
	push(&queue, 1ull << 0); /* submit list 0 */
	if (SCENARIO == 2)
		atomic_store_explicit(&done[0], 1, RLX); /* the caller sees it complete */
	collect();
	return NULL;
}

static void *t2(void *arg)
{
	push(&queue, 1ull << 1); /* submit list 1 */
	atomic_store_explicit(&sub1, 1, REL);
	collect();
	return NULL;
}

static void *gpu(void *arg)
{
	atomic_store_explicit(&done[1], 1, RLX);
	return NULL;
}

static void *flusher(void *arg)
{
	flush_saw_sub1 = atomic_load_explicit(&sub1, ACQ);
	flush();
	return NULL;
}

/* 1: t1 and t2 (the collect/collect hand-off: the fences, is_empty_now);
 * 2: t1 and the flush (MISSED, the entering RMW; the flush's last round and the take-over);
 * 3: t2, gpu and the flush (the readers' count: Reading::drop, the flush's wait);
 * 0: all four. */
int main(void)
{
	pthread_t a, b, g, f;
	bool run1 = SCENARIO == 0 || SCENARIO == 1 || SCENARIO == 2;
	bool run2 = SCENARIO == 0 || SCENARIO == 1 || SCENARIO == 3;
	bool runf = SCENARIO != 1;
	if (SCENARIO == 1)
		atomic_store_explicit(&done[1], 1, RLX); /* list 1 complete before its submit */
	if (run1)
		pthread_create(&a, NULL, t1, NULL);
	if (run2)
		pthread_create(&b, NULL, t2, NULL);
	if (runf && run2)
		pthread_create(&g, NULL, gpu, NULL);
	if (runf)
		pthread_create(&f, NULL, flusher, NULL);
	if (run1)
		pthread_join(a, NULL);
	if (run2)
		pthread_join(b, NULL);
	if (runf && run2)
		pthread_join(g, NULL);
	if (runf)
		pthread_join(f, NULL);
	if (!run1)
		emitted[0] = 1; /* list 0 is not in this scenario */
	if (SCENARIO == 1)
		assert(emitted[1] == 1 && "list 1, submitted and complete before its collect, was left behind");
	assert(emitted[0] == 1 && "list 0, submitted and complete before its collect, was left behind");
	if (flush_saw_sub1)
		assert(emitted[1] == 1 && "list 1, submitted before the flush began, was left behind");
	return 0;
}
