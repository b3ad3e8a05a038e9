/*
 * The collect/flush hand-off of src/collect/mod.rs, as a C11 program for GenMC.
 *
 * Mirrors the Rust code name for name; each function's comment names what it mirrors. What it
 * keeps: the `state` word (FLUSHING, MISSED, FLUSH_WAITER, the reader count), the submission
 * queue and the `read` and `retry` queues (src/slots/submit.rs: push = the Release CAS, take =
 * the Acquire swap, `is_empty_now` = fetch_or(0, SeqCst)), the emitter's mutex (std's futex
 * mutex: try_lock = CAS Acquire, unlock = swap Release), the two SeqCst fences of
 * `emit_handed_off`, a list's completion (the backend's answer to `elapsed`); the rounds and
 * the last-round hand-over (`ROUNDS`, `handover` with `LAST_ROUND`, `begin_round`,
 * `take_over_from_last_round`); the void places (src/shared/voids.rs: a shard's mutex, its
 * places and its `any` flag, stored under the lock, loaded by `hand_over`, by the check after
 * the unlock and by `take_all`); the lanes' order as far as the void places need it (the
 * emitter's next place per lane: a list waits for the places before it); the shared read
 * batches (src/collect/events/read.rs, `ReadShare`, and src/slots/head.rs, `HeadBatch`: published
 * under the collectors' lock, `published` read Relaxed, pieces claimed by a Relaxed
 * fetch_add) and the re-probe limit of a contended read (`CONTENDED_REPROBES`, `list_probed`,
 * the own lane, the rotating `probe_cursor`). A list's head record is plain memory (its state
 * and `list_probed`), touched only by the list's owner: GenMC reports a data race if a
 * hand-off of a list (queue, batch, piece) lacks its happens-before edge.
 * What it leaves out: the lane table and its lock (a list's place is fixed here), the hold
 * limit, sinks (so `HOLDING` is always 0 here), errors and unwinding, the anchors.
 *
 * Every waiting loop (the emitter lock and the other mutexes, the flush's wait for readers,
 * its wait for completion, a caller's wait for a last round) is an await, written with
 * GenMC's spinloop markers (`await_while`); verify/run.sh runs GenMC with --disable-spin-assume
 * (so the `fetch_update` CAS loops, which always end, are explored as plain loops) and
 * --check-liveness, so an execution in which an await never ends under a fair scheduler (it
 * reads only the final values of what it reads, every other thread done or blocked) is a
 * "Liveness violation". No other loop can run forever: a CAS loop fails only on a newer
 * value, the emitter's loop runs at most ROUNDS rounds, and a batch has finitely many pieces.
 *
 * Each ordering the mutation table of docs/verification.md weakens is a macro (ORD_*), set
 * on the command line by verify/run.sh; the defaults are the Rust code's orderings. So are
 * ROUNDS (the Rust code's 4, loom's 2; verify/run.sh runs 2 and 3) and CONTENDED_REPROBES.
 *
 * Lists: list 0 on lane 0, place 0; list 1 on lane 1, place 0, or place 1 in the scenarios
 * with a void place (4 and 5), where a list dropped unsubmitted gave up place 0 of lane 1.
 * Threads (SCENARIO, in main, picks them; verify/run.sh runs each scenario separately):
 *   t1: submits list 0 and collects. In scenario 2 it sees the list complete after submitting
 *       it (a relaxed store: the caller's own view of its GPU work, as the sim GPU's clock in
 *       tests/handoff.rs); elsewhere the list is complete before its submit (as loom's
 *       backend). In scenarios 4 and 5 it gives up place 0 of lane 1 (a list dropped
 *       unsubmitted) instead, then collects; in scenario 6 it only collects.
 *   t2: submits list 1, says so (`sub1`, release), collects.
 *   gpu: completes list 1 (any time).
 *   flush: reads `sub1` (acquire), flushes.
 * Promises checked (after every thread returned): a list submitted and complete before a
 * `collect` of its thread is emitted; a list submitted before a flush began is emitted; a
 * list that waited for a place given up before a `collect` began is emitted (scenarios 4, 5);
 * a list left on `retry` is found by the next flush (scenario 6); no list is emitted twice
 * (and `emitted` is plain memory under the emitter lock: GenMC reports a race if two threads
 * ever emit at once); no await waits forever.
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
#ifndef ORD_HANDOVER /* begin_round: handover.fetch_update(SeqCst, SeqCst, ...) */
#define ORD_HANDOVER SC
#endif
#ifndef ORD_SEEN /* emit_handed_off: handover.load(SeqCst) (seen), and the take-over's loads */
#define ORD_SEEN SC
#endif
#ifndef ORD_VOID_SET /* VoidPlaces::push: any.store(true, SeqCst), under the shard's lock */
#define ORD_VOID_SET SC
#endif
#ifndef ORD_VOID_LOAD /* VoidPlaces::is_empty and take_all: any.load(SeqCst) */
#define ORD_VOID_LOAD SC
#endif
#ifndef ORD_VOID_CLEAR /* VoidPlaces::take_all: any.store(false, SeqCst), under the lock */
#define ORD_VOID_CLEAR SC
#endif
#ifndef ROUNDS /* collect/mod.rs: ROUNDS (2 under loom, 4 otherwise) */
#define ROUNDS 2
#endif
#ifndef CONTENDED_REPROBES /* collect/events/read.rs: CONTENDED_REPROBES */
#define CONTENDED_REPROBES 2
#endif
/* collect/events/read.rs: PIECE_LISTS (at most 4 lists of one lane in a piece). */
#define PIECE_LISTS 4
/* The mutations of the control flow (each a control that must fail, or a row):
 * NO_FENCE_BEFORE_TRY_LOCK, NO_FENCE_AFTER_UNLOCK: remove emit_handed_off's fences.
 * EMPTY_LOAD=ord: is_empty_now as head.load(ord) instead of fetch_or(0, SeqCst).
 * NO_LOOK_AFTER_UNLOCK: the emitter never looks at `read` after unlocking (control a).
 * NO_MISSED_COLLECT: the flush does not collect once more for a MISSED caller.
 * Rounds: NO_TAKE_OVER: a caller never waits for a last round (the code before the hand-over,
 * with the bound); SEEN_AFTER_TRY_LOCK: `handover` read after the failed try_lock;
 * NO_BEGIN_ROUND_FENCE: begin_round without its fence.
 * Void places: NO_VOIDS_IN_HAND_OVER: a caller hands over only when it read lists (not for a
 * place it gave up); NO_VOIDS_AFTER_UNLOCK: the check after the unlock looks at `read` only.
 * Read batches: SHARE_WITHOUT_LOCK: batches published and looked up without the collectors'
 * lock (a data race on the batch, which GenMC must report); TAKER_CLAIMS_ONCE: the collector
 * that took the lists claims one piece of its batch, not every piece left.
 * Witnesses (each must fail: it shows that some execution of its scenario reaches a case):
 * WITNESS_SHARED_PIECE (a collector claims a piece of another's batch), WITNESS_REPROBE_LIMIT
 * (the limit leaves a list unread), WITNESS_TAKE_OVER (a caller takes over from a last round).
 * Liveness controls: NO_READING_DROP: a reader never leaves (Reading::drop skipped), so a flush
 * waits for it forever; TAKE_OVER_NO_TRY_LOCK: a caller waiting for a last round only waits
 * for another round to begin (or a flush), never taking the freed emitter itself. */

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
#define LANES 2
#define PLACES 2
/* The threads that read (each has one read phase at a time): t1, t2, the flusher. */
#define T1 0
#define T2 1
#define TF 2
/* The void places' shards (slots/tally.rs: SHARDS, 1 under loom): one dropping thread here. */
#define SHARDS 1
#ifndef SCENARIO
#define SCENARIO 0
#endif
#define VOID_SCENARIO (SCENARIO == 4 || SCENARIO == 5)

/* Sets are bit masks, kept in one word each (GenMC records every access to memory, plain or
 * atomic, as an event of the execution: one word per set keeps the graphs small). */
#define BIT(i) (1u << (i))

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
static int flush_saw_sub1;

/* A list's place (LaneSeq): list i is on lane i; list 1 is at place 1 in the void scenarios
 * (place 0 given up), every other list at place 0. A place as one number: lane * PLACES +
 * place. */
#define LANE_OF(i) (i)
#define PLACE_OF(i) ((i) == 1 && VOID_SCENARIO ? 1 : 0)
#define PLACE(lane, place) ((lane) * PLACES + (place))
/* shared::own_lane: the lane of the list the thread submitted last (-1: none). Every thread
 * submits before it collects, so this is fixed per thread. */
static int own_lane(int tid)
{
	if (tid == T1 && !VOID_SCENARIO)
		return LANE_OF(0);
	return tid == T2 ? LANE_OF(1) : -1;
}
/* The head record of list i (ListRecord: plain memory, its owner's alone): its kind
 * (SUBMITTED by its producer, READ once a reader read its times) and `list_probed`. */
enum { SUBMITTED = 1, READ = 2 };
static int rec_kind[LISTS];
static int rec_probed[LISTS];

/* The emitter's state (emit.rs, Emitter: plain memory under the emitter lock): each lane's
 * next place to emit (`next_place`: lane l's in bits 2l..2l+1), the places where a read list
 * waits (`waiting`), and the void places taken and not yet passed, as sets of places. */
static unsigned emitter_next, emitter_lists, emitter_voids;
static int emitted[LISTS]; /* the sinks */

/* shared/voids.rs, VoidPlaces: per shard a mutex over its places (a set) and `any`. */
static _Atomic int shard_lock[SHARDS];
static unsigned shard_places[SHARDS];
static _Atomic bool shard_any[SHARDS];

/* collect/events/read.rs, ReadShare, and slots/head.rs, HeadBatch: a thread's batch (it has one read
 * phase at a time, and publishes at most one batch in every scenario here, so a batch is
 * never reused while another thread may hold it: the Rust `Arc`). Its lists in claim order
 * (`order`: the list at position k in bits 2k..2k+1) and where each piece starts (`starts`:
 * piece p's first position in bits 2p..2p+1, then the count of lists). */
struct batch {
	unsigned order, starts;
	int pieces;
	_Atomic int next; /* HeadBatch::next */
};
#define AT(word, k) (((word) >> (2 * (k))) & 3)
static struct batch batches[3];
static _Atomic int share_lock; /* ReadShare::batches' Mutex */
static unsigned shared_batches; /* ReadShare::batches: the set of publishing threads */
static _Atomic int published; /* ReadShare::published */
static _Atomic unsigned probe_cursor; /* ReadShare::probe_cursor */

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
static bool mutex_try_lock(_Atomic int *m)
{
	int unlocked = 0;
	return atomic_compare_exchange_strong_explicit(m, &unlocked, 1, ACQ, RLX);
}
/* sync::lock: an await for the same CAS (the futex wait is a wait for it). */
static void mutex_lock(_Atomic int *m) { await_while(!mutex_try_lock(m)); }
/* MutexGuard::drop: swap(0, Release). */
static void mutex_unlock(_Atomic int *m) { atomic_exchange_explicit(m, 0, REL); }

static bool try_lock(void) { return mutex_try_lock(&emitter); }
static void lock(void) { mutex_lock(&emitter); }
static void unlock(void) { mutex_unlock(&emitter); }

static void fence_seq_cst(void) { atomic_thread_fence(SC); }

/* VoidPlaces::push (through Inner::void_place): lock the shard, push, set `any`, unlock. */
static void void_places_push(int shard, int place)
{
	mutex_lock(&shard_lock[shard]);
	shard_places[shard] |= BIT(place);
	atomic_store_explicit(&shard_any[shard], true, ORD_VOID_SET);
	mutex_unlock(&shard_lock[shard]);
}

/* VoidPlaces::take_all: each shard whose `any` is set, locked and emptied; the set of places. */
static unsigned void_places_take_all(void)
{
	unsigned out = 0;
	for (int s = 0; s < SHARDS; s++) {
		if (!atomic_load_explicit(&shard_any[s], ORD_VOID_LOAD))
			continue;
		mutex_lock(&shard_lock[s]);
		out |= shard_places[s];
		shard_places[s] = 0;
		atomic_store_explicit(&shard_any[s], false, ORD_VOID_CLEAR);
		mutex_unlock(&shard_lock[s]);
	}
	return out;
}

/* VoidPlaces::is_empty: one load per shard, no lock. */
static bool void_places_is_empty(void)
{
	for (int s = 0; s < SHARDS; s++)
		if (atomic_load_explicit(&shard_any[s], ORD_VOID_LOAD))
			return false;
	return true;
}

/* ReadShare::publish (publishing: true) and retire (false): under the lock, then
 * `published` (Relaxed). */
static void share_update(int tid, bool publishing)
{
#ifndef SHARE_WITHOUT_LOCK
	mutex_lock(&share_lock);
#endif
	unsigned set = shared_batches;
	set = publishing ? set | BIT(tid) : set & ~BIT(tid);
	shared_batches = set;
	atomic_store_explicit(&published, __builtin_popcount(set), RLX);
#ifndef SHARE_WITHOUT_LOCK
	mutex_unlock(&share_lock);
#endif
}

/* ReadShare::published: nothing if `published` (Relaxed) is 0, else a copy under the lock
 * (the set of publishing threads). */
static unsigned share_published(void)
{
	if (atomic_load_explicit(&published, RLX) == 0)
		return 0;
#ifndef SHARE_WITHOUT_LOCK
	mutex_lock(&share_lock);
#endif
	unsigned set = shared_batches;
#ifndef SHARE_WITHOUT_LOCK
	mutex_unlock(&share_lock);
#endif
	return set;
}

/* HeadBatch::new: the m lists of `order` cut into pieces of one lane, at most PIECE_LISTS
 * lists each. */
static void batch_new(struct batch *b, unsigned order, int m)
{
	unsigned starts = 0;
	int pieces = 0, start = -1;
	for (int k = 0; k < m; k++) {
		bool same = start >= 0 && LANE_OF(AT(order, start)) == LANE_OF(AT(order, k)) &&
			    k - start < PIECE_LISTS;
		if (!same) {
			start = k;
			starts |= (unsigned)k << (2 * pieces++);
		}
	}
	b->order = order;
	b->starts = starts | (unsigned)m << (2 * pieces);
	b->pieces = pieces;
	atomic_store_explicit(&b->next, 0, RLX);
}

/* HeadBatch::claim: fetch_add(1, Relaxed); the piece, or -1 when none is left. */
static int batch_claim(struct batch *b)
{
	int piece = atomic_fetch_add_explicit(&b->next, 1, RLX);
	return piece < b->pieces ? piece : -1;
}

/* read.rs, Reader: what one collector's read phase carries from piece to piece, in one
 * word (GenMC keeps a local struct in memory, as events of the execution): the re-probes of
 * lanes found incomplete before still allowed (bits 0..8; LISTS + 1: no limit) and the lists
 * read (outcome.read, bits 8..). */
#define READER(reprobes, read) ((reprobes) | (read) << 8)
#define REPROBES(r) ((r) & 0xff)
#define READ_COUNT(r) ((r) >> 8)

/* Reader::read_piece: one lane's lists in place order, up to the first incomplete one (the
 * rest go to `retry` unread); a list found incomplete before (`list_probed`), not of this
 * thread's own lane, only while re-probes are left. A list complete (the backend's `elapsed`,
 * a relaxed read here: no edge from the backend) goes to `read`. */
static int read_piece(int tid, bool wait, int r, const struct batch *b, int piece)
{
	uint64_t rd = 0, rt = 0;
	bool blocked = false;
	int reprobes = REPROBES(r);
	unsigned order = b->order, starts = b->starts;
	int from = AT(starts, piece), to = AT(starts, piece + 1);
	bool own = own_lane(tid) == LANE_OF(AT(order, from));
	for (int k = from; k < to; k++) {
		int i = AT(order, k);
		if (blocked) {
			rt |= BIT(i);
			continue;
		}
		if (rec_probed[i] && !own) {
			if (reprobes == 0) {
#ifdef WITNESS_REPROBE_LIMIT
				assert(0 && "witness: the re-probe limit left a list on retry unread");
#endif
				blocked = true;
				rt |= BIT(i);
				continue;
			}
			reprobes--;
		}
		if (wait) /* read_times with `wait`: an await for completion */
			await_while(!atomic_load_explicit(&done[i], RLX));
		if (atomic_load_explicit(&done[i], RLX)) {
			rec_kind[i] = READ;
			rd |= BIT(i);
		} else {
			rec_probed[i] = 1;
			blocked = true;
			rt |= BIT(i);
		}
	}
	if (rd)
		push(&read_q, rd); /* read.push_onto(ctx.read()) */
	if (rt)
		push(&retry, rt); /* retry.push_onto(ctx.retry()) */
	return READER(reprobes, READ_COUNT(r) + __builtin_popcountll(rd));
}

/* Reader::read_batch: claims and reads pieces until none is left. */
static int read_batch(int tid, bool wait, int r, struct batch *b)
{
	int piece;
	while ((piece = batch_claim(b)) >= 0) {
#ifdef WITNESS_SHARED_PIECE
		assert(b == &batches[tid] && "witness: a collector claimed a piece of another's batch");
#endif
		r = read_piece(tid, wait, r, b, piece);
#ifdef TAKER_CLAIMS_ONCE
		if (b == &batches[tid])
			break;
#endif
	}
	return r;
}

/* read.rs, read_phase: the pieces of other collectors' batches first, then every submitted
 * and retried list, keyed by (lane, place) (rotated to start at the next lane in turn when
 * contended), as a batch shared with the collectors that come meanwhile (not by a flush, nor
 * when it is one piece). Returns outcome.read. */
static int read_phase(int tid, bool wait, bool contended)
{
	int r = READER(contended && !wait ? CONTENDED_REPROBES : LISTS + 1, 0);
	unsigned others = share_published();
	for (int t = 0; t < 3; t++)
		if (others & BIT(t))
			r = read_batch(tid, wait, r, &batches[t]);
	uint64_t taken = take_all(&queue);
	taken |= take_all(&retry);
	if (!taken)
		return READ_COUNT(r);
	/* Sorted by (lane, place): list i is on lane i, so by list. */
	unsigned order = 0;
	int m = 0;
	for (int i = 0; i < LISTS; i++)
		if (taken & BIT(i))
			order |= (unsigned)i << (2 * m++);
	if (contended) {
		/* Start at the next lane of those taken, in turn (`keyed.rotate_left(split)`):
		 * with one list per lane, lane `turn` is at position `turn`. */
		int split = atomic_fetch_add_explicit(&probe_cursor, 1, RLX) % m;
		unsigned rotated = 0;
		for (int k = 0; k < m; k++)
			rotated |= AT(order, (split + k) % m) << (2 * k);
		order = rotated;
	}
	struct batch *b = &batches[tid];
	batch_new(b, order, m);
	bool sharing = !wait && b->pieces > 1;
	if (sharing)
		share_update(tid, true);
	r = read_batch(tid, wait, r, b);
	if (sharing)
		share_update(tid, false);
	return READ_COUNT(r);
}

/* emit.rs, Emitter::emit_phase: take `read`, then the void places; per lane, emit (or skip,
 * for a void place) what waits at its next place, in place order (held: the emitter lock). */
static void emit_phase(void)
{
	unsigned next = emitter_next, lists = emitter_lists, voids = emitter_voids;
	uint64_t taken = take_all(&read_q);
	for (int i = 0; i < LISTS; i++)
		if (taken & BIT(i)) {
			/* Taken from `read` by the emitter, the list's only owner now. */
			assert(rec_kind[i] == READ && "the emitter took a list not read");
			lists |= BIT(PLACE(LANE_OF(i), PLACE_OF(i)));
		}
	unsigned given_up = void_places_take_all();
	for (int lane = 0; lane < LANES; lane++) {
		int place = AT(next, lane);
		/* A void place is kept unless its lane is past it already. */
		for (int p = place; p < PLACES; p++)
			voids |= given_up & BIT(PLACE(lane, p));
		for (; place < PLACES && ((lists | voids) & BIT(PLACE(lane, place))); place++) {
			unsigned at = BIT(PLACE(lane, place));
			voids &= ~at;
			if (lists & at) {
				lists &= ~at;
				int i = lane; /* list i is on lane i */
				assert(emitted[i] == 0 && "a list was emitted twice");
				emitted[i]++;
			}
		}
		next = (next & ~(3u << (2 * lane))) | (unsigned)place << (2 * lane);
	}
	emitter_next = next;
	emitter_lists = lists;
	emitter_voids = voids;
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
#ifdef WITNESS_TAKE_OVER
	assert(!got && "witness: a caller took the emitter over from a last round");
#endif
	return got;
}

/* emit_handed_off's check after the unlock: stop if a flush waits, or if nothing was left
 * behind (`read` empty, and then no void place waiting). */
static bool stop_after_unlock(void)
{
	if (flush_waiting())
		return true;
	if (!is_empty_now(&read_q))
		return false;
#ifdef NO_VOIDS_AFTER_UNLOCK
	return true;
#else
	return void_places_is_empty();
#endif
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
		if (stop_after_unlock())
			break;
	}
	return emitted_any;
}

/* Collector::read: the entering fetch_update (a load, then CAS until it holds), then the
 * read phase (contended: other readers were inside), then Reading::drop. -1: turned away by a
 * flush (MISSED set); else outcome.read. */
static int collector_read(int tid)
{
	uint64_t s = atomic_load_explicit(&state, ORD_ENTER_LOAD), next;
	do {
		next = (s & FLUSHING) ? (s | MISSED) : (s + 1);
	} while (!atomic_compare_exchange_strong_explicit(&state, &s, next, ORD_ENTER, ORD_ENTER_LOAD));
	if (s & FLUSHING)
		return -1;
	int read = read_phase(tid, false, (s & READERS) > 0);
#ifndef NO_READING_DROP
	atomic_fetch_sub_explicit(&state, 1, ORD_READING_DROP); /* Reading::drop */
#endif
	return read;
}

/* Collector::collect. */
static void collect(int tid)
{
	int read = collector_read(tid);
	if (read < 0)
		return; /* Collected::Busy: the flush collects once more for it */
	/* hand_over: lists this call read, or a place given up (a void place waiting). */
#ifdef NO_VOIDS_IN_HAND_OVER
	bool hand_over = read > 0;
#else
	bool hand_over = read > 0 || !void_places_is_empty();
#endif
	emit_handed_off(0, hand_over);
}

/* Collector::flush. */
static void flush(int tid)
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
	read_phase(tid, true, false);
	begin_round(false); /* this flush's first round (ROUNDS > 1: never the last) */
	emit_phase();
	/* Flushing::end */
	bool missed = (atomic_fetch_and_explicit(&state, ~(FLUSHING | MISSED), SC) & MISSED) != 0;
	unlock();
#ifndef NO_MISSED_COLLECT
	if (missed)
		collect(tid);
	else
#endif
		emit_handed_off(1, false);
}

/* TracingContext::submit (Inner::enqueue): the head record written (OWN_LANE set: see
 * own_lane), the push. */
static void submit(int i)
{
	rec_kind[i] = SUBMITTED;
	push(&queue, BIT(i));
}

static void *t1(void *arg)
{
	if (VOID_SCENARIO) {
		void_places_push(0, PLACE(1, 0)); /* a list dropped unsubmitted gives up place 0 of lane 1 */
	} else if (SCENARIO != 6) {
		if (SCENARIO != 2)
			atomic_store_explicit(&done[0], 1, RLX); /* complete before its submit */
		submit(0);
		if (SCENARIO == 2)
			atomic_store_explicit(&done[0], 1, RLX); /* the caller sees it complete */
	}
	collect(T1);
	return NULL;
}

static void *t2(void *arg)
{
	submit(1);
	atomic_store_explicit(&sub1, 1, REL);
	collect(T2);
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
	flush(TF);
	return NULL;
}

/* 1: t1 and t2 (the collect/collect hand-off: the fences, is_empty_now, a shared batch);
 * 2: t1 and the flush (MISSED, the entering RMW; the flush's last round and the take-over);
 * 3: t2, gpu and the flush (the readers' count: Reading::drop, the flush's wait);
 * 4: t1 giving up place 0 of lane 1, and t2 with list 1 at place 1 (the void place handed
 *    over: `hand_over`, the check after the unlock);
 * 5: list 1 at place 1 of lane 1 submitted before the threads, t1 giving up place 0 of lane 1,
 *    and the flush (a void place given up during a flush's last round);
 * 6: t1 collecting (no list of its own), t2 and gpu, then main flushes (list 1 found
 *    incomplete, then probed again by a contended reader, or left on `retry` by the re-probe
 *    limit: the flush after them finds it);
 * 0: t1, t2 and the flush, all at once (list 1 complete before its submit). */
int main(void)
{
	pthread_t a, b, g, f;
	bool run1 = SCENARIO != 3;
	bool run2 = SCENARIO == 0 || SCENARIO == 1 || SCENARIO == 3 || SCENARIO == 4 || SCENARIO == 6;
	bool rungpu = SCENARIO == 3 || SCENARIO == 6;
	bool runf = SCENARIO == 0 || SCENARIO == 2 || SCENARIO == 3 || SCENARIO == 5;
	if (!rungpu)
		atomic_store_explicit(&done[1], 1, RLX); /* list 1 complete before its submit */
	if (SCENARIO == 5)
		submit(1); /* by main, before the flush began */
	if (run1)
		pthread_create(&a, NULL, t1, NULL);
	if (run2)
		pthread_create(&b, NULL, t2, NULL);
	if (rungpu)
		pthread_create(&g, NULL, gpu, NULL);
	if (runf)
		pthread_create(&f, NULL, flusher, NULL);
	if (run1)
		pthread_join(a, NULL);
	if (run2)
		pthread_join(b, NULL);
	if (rungpu)
		pthread_join(g, NULL);
	if (runf)
		pthread_join(f, NULL);
	if (run1 && !VOID_SCENARIO && SCENARIO != 6)
		assert(emitted[0] == 1 && "list 0, submitted and complete before its collect, was left behind");
	if (SCENARIO == 0 || SCENARIO == 1)
		assert(emitted[1] == 1 && "list 1, submitted and complete before its collect, was left behind");
	if (VOID_SCENARIO)
		assert(emitted[1] == 1 &&
		       "list 1, read, was left waiting for a place given up before a collect began");
	if (flush_saw_sub1)
		assert(emitted[1] == 1 && "list 1, submitted before the flush began, was left behind");
	if (SCENARIO == 6) {
		flush(TF); /* every thread joined, list 1 complete: this flush must find it */
		assert(emitted[1] == 1 && "list 1 was lost");
	}
	return 0;
}
