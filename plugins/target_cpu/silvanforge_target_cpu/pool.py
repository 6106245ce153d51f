"""A native worker pool for CPU kernels: shares of one phase handed to threads in microseconds.

Python's ``ThreadPoolExecutor`` wakes a worker through a condition variable and the GIL: the
worker starts 30-40 µs after the hand-off (measured on the Zen 4 of docs/benchmarks.md), as long
as a 512-row share of a small model takes to walk, so two threads would not pay below a few
thousand rows.  These workers
are native threads that never touch the GIL: each spins on its own mailbox for a while after its
last share (``SPIN_NS``, as OpenMP runtimes do), then sleeps on a condition variable.  The
caller runs the first share itself, then takes back each share no worker has started (a
worker claims its share, and the caller one that is unclaimed, by one compare-and-swap of the
mailbox's ``claimed`` number: never both) and runs it too, and spins until the others are
done.  So a share no worker has claimed (its worker asleep, or without a CPU while other
processes hold every core) never keeps the caller waiting; a worker pre-empted after it
claimed its share still does.  A worker called often spins longer (``SPIN_GROWTH``).

The pool is LLVM IR JIT-compiled once per process (llvmlite, as the kernels are) and calls
``pthread_create`` / ``pthread_cond_*`` of the C library: POSIX hosts only; elsewhere
:func:`native_pool` returns None and the core's Python pool runs the shares.

Each worker has its own mailbox (kernel address, argument block, a sequence number and the
number it last finished): the caller writes a mailbox only after its previous share is done,
so no worker can see half of a job, and two callers never share the pool (``NativePool.lock``;
a caller that finds it busy uses the Python pool).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading

MAX_WORKERS = 255
# How long an idle worker spins for its next share before it sleeps: calls that follow each
# other (a serving loop, a benchmark) then hand off without a wake-up.  OpenMP runtimes spin
# for longer (libgomp: about 300k polls); this is enough to cover the Python between calls.
SPIN_NS = 200_000
# ... and longer where calls come more often than that: a worker woken within SPIN_WINDOW times
# its spin of falling asleep spins twice as long from then on, up to SPIN_GROWTH times SPIN_NS
# (1.6 ms); one that slept longer spins SPIN_NS again.  Why: waking a sleeping worker is dear
# on a VM whose idle vCPU the host has descheduled (a 2-vCPU Intel Xeon VM: the caller's wake-up
# call took 12-33 us and the worker started 30-40 us after it, against 3 us for a spinning one;
# a C probe of 30 us shares after 500 us pauses), and a service calling every half millisecond
# paid it every call: xgb_100x8's 512-row calls on two threads took 112 us so, 68 on one thread.
SPIN_WINDOW, SPIN_GROWTH = 4, 8
# Walk steps (and rows) a share should hold for a native hand-off to pay are the run-time
# settings share_steps and min_share_rows (silvanforge.runtime.threads; measured there).
# Share arguments: rows, the seven scalar parameters, out, the pointer table (lir.SCALAR_PARAMS).
SHARE_WORDS = 10

_IR = r"""
%timespec = type { i64, i64 }
%mailbox = type { i64, i64, ptr, ptr, i64, [24 x i8] }  ; seq, done, kernel, args, claimed; a cache line each

@mail = global [MAXW x %mailbox] zeroinitializer, align 64
@sleepers = global i64 0, align 64
@quit = global i64 0, align 64
@taken = global i64 0, align 64  ; shares the caller took back (a count for tests)
@spin_ns = global i64 SPINNS, align 64
@mutex = global [128 x i8] zeroinitializer, align 64  ; PTHREAD_MUTEX_INITIALIZER (glibc: zeros)
@cond = global [128 x i8] zeroinitializer, align 64   ; PTHREAD_COND_INITIALIZER
@threads = global [MAXW x i64] zeroinitializer, align 64

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @clock_gettime(i32, ptr)
declare i32 @sched_yield()
declare void @llvm.x86.sse2.pause()

define internal i64 @now() {
  %ts = alloca %timespec
  call i32 @clock_gettime(i32 1, ptr %ts)
  %s = load i64, ptr %ts
  %p = getelementptr %timespec, ptr %ts, i32 0, i32 1
  %ns = load i64, ptr %p
  %a = mul i64 %s, 1000000000
  %t = add i64 %a, %ns
  ret i64 %t
}

define internal void @relax() {
  PAUSE
  ret void
}

RUN_SHARE
; Worker k: wait for mailbox k's sequence number to move past the last one it ran, run the share.
define internal ptr @worker(ptr %arg) {
entry:
  %k = ptrtoint ptr %arg to i64
  %box = getelementptr [MAXW x %mailbox], ptr @mail, i64 0, i64 %k
  %seqp = getelementptr %mailbox, ptr %box, i32 0, i32 0
  %donep = getelementptr %mailbox, ptr %box, i32 0, i32 1
  %fnp = getelementptr %mailbox, ptr %box, i32 0, i32 2
  %argsp = getelementptr %mailbox, ptr %box, i32 0, i32 3
  %claimp = getelementptr %mailbox, ptr %box, i32 0, i32 4
  %spinp = alloca i64                     ; this worker's spin, in SPIN_NS (the setting read at each check): 1, 2, 4 or 8
  store i64 1, ptr %spinp
  br label %idle

idle:                                     ; spin for this worker's spin from now
  %seen = load atomic i64, ptr %donep acquire, align 8
  %t0 = call i64 @now()
  br label %spin

spin:
  %i = phi i64 [ 0, %idle ], [ %i1, %spin_next ]
  %s = load atomic i64, ptr %seqp acquire, align 8
  %new = icmp ne i64 %s, %seen
  br i1 %new, label %work, label %spin_check

spin_check:
  %q = load atomic i64, ptr @quit acquire, align 8
  %stop = icmp ne i64 %q, 0
  br i1 %stop, label %exit, label %spin_relax

spin_relax:
  call void @relax()
  %i1 = add i64 %i, 1
  %m = and i64 %i1, 255
  %check = icmp eq i64 %m, 0
  br i1 %check, label %spin_clock, label %spin_next

spin_clock:
  %t1 = call i64 @now()
  %dt = sub i64 %t1, %t0
  %setting = load i64, ptr @spin_ns
  %times = load i64, ptr %spinp
  %lim = mul i64 %setting, %times
  %over = icmp sgt i64 %dt, %lim
  br i1 %over, label %sleep, label %spin_next

spin_next:
  br label %spin

sleep:                                    ; announce, then re-check under the mutex (Dekker with the caller)
  %slept_at = call i64 @now()
  call i32 @pthread_mutex_lock(ptr @mutex)
  %o = atomicrmw add ptr @sleepers, i64 1 seq_cst
  br label %sleep_check

sleep_check:
  %s2 = load atomic i64, ptr %seqp seq_cst, align 8
  %q2 = load atomic i64, ptr @quit seq_cst, align 8
  %new2 = icmp ne i64 %s2, %seen
  %stop2 = icmp ne i64 %q2, 0
  %wake = or i1 %new2, %stop2
  br i1 %wake, label %sleep_done, label %sleep_wait

sleep_wait:
  call i32 @pthread_cond_wait(ptr @cond, ptr @mutex)
  br label %sleep_check

sleep_done:
  %o2 = atomicrmw sub ptr @sleepers, i64 1 seq_cst
  call i32 @pthread_mutex_unlock(ptr @mutex)
  ; Woken soon after it slept (within SPIN_WINDOW times its spin): calls come more often than it
  ; spins, so it spins twice as long from now (up to SPIN_GROWTH times SPIN_NS); else SPIN_NS again.
  %woke_at = call i64 @now()
  %slept = sub i64 %woke_at, %slept_at
  %cur = load i64, ptr %spinp
  %base = load i64, ptr @spin_ns
  %spun = mul i64 %base, %cur
  %window = mul i64 %spun, SPINWINDOW
  %soon = icmp slt i64 %slept, %window
  %twice = shl i64 %cur, 1
  %over_cap = icmp sgt i64 %twice, SPINGROWTH
  %grown = select i1 %over_cap, i64 SPINGROWTH, i64 %twice
  %next = select i1 %soon, i64 %grown, i64 1
  store i64 %next, ptr %spinp
  br i1 %new2, label %work_reload, label %exit

work_reload:
  br label %work

work:                                     ; the share is ours unless the caller took it back
  %seq = load atomic i64, ptr %seqp acquire, align 8
  %prev = sub i64 %seq, 1
  %claim = cmpxchg ptr %claimp, i64 %prev, i64 %seq seq_cst seq_cst
  %won = extractvalue { i64, i1 } %claim, 1
  br i1 %won, label %run, label %finished

run:
  %fn = load ptr, ptr %fnp
  %args = load ptr, ptr %argsp
  call void @run_share(ptr %fn, ptr %args)
  br label %finished

finished:
  store atomic i64 %seq, ptr %donep release, align 8
  br label %idle

exit:
  ret ptr null
}

; Start workers [first, last): each gets mailbox k.  Returns 0, or the pthread_create error.
define i32 @sf_pool_start(i64 %first, i64 %last) {
entry:
  br label %loop
loop:
  %k = phi i64 [ %first, %entry ], [ %k1, %ok ]
  %more = icmp slt i64 %k, %last
  br i1 %more, label %body, label %done
body:
  %tid = getelementptr [MAXW x i64], ptr @threads, i64 0, i64 %k
  %arg = inttoptr i64 %k to ptr
  %r = call i32 @pthread_create(ptr %tid, ptr null, ptr @worker, ptr %arg)
  %failed = icmp ne i32 %r, 0
  br i1 %failed, label %fail, label %ok
ok:
  %k1 = add i64 %k, 1
  br label %loop
fail:
  ret i32 %r
done:
  ret i32 0
}

; Run shares 0 .. n-1 of kernel %fn (argument blocks of SHARE_WORDS words from %args): shares
; 1.. go to workers 0.., share 0 runs here; returns when all are done.
define void @sf_pool_run(ptr %fn, i64 %n, ptr %args) {
entry:
  br label %post
post:
  %k = phi i64 [ 1, %entry ], [ %k1, %post_body ]
  %more = icmp slt i64 %k, %n
  br i1 %more, label %post_body, label %notify
post_body:
  %w = sub i64 %k, 1
  %box = getelementptr [MAXW x %mailbox], ptr @mail, i64 0, i64 %w
  %seqp = getelementptr %mailbox, ptr %box, i32 0, i32 0
  %fnp = getelementptr %mailbox, ptr %box, i32 0, i32 2
  %argsp = getelementptr %mailbox, ptr %box, i32 0, i32 3
  %off = mul i64 %k, SHAREWORDS
  %a = getelementptr i64, ptr %args, i64 %off
  store ptr %fn, ptr %fnp
  store ptr %a, ptr %argsp
  %seq = load i64, ptr %seqp
  %seq1 = add i64 %seq, 1
  store atomic i64 %seq1, ptr %seqp seq_cst, align 8
  %k1 = add i64 %k, 1
  br label %post
notify:
  %sl = load atomic i64, ptr @sleepers seq_cst, align 8
  %any = icmp ne i64 %sl, 0
  br i1 %any, label %wake, label %own
wake:
  call i32 @pthread_mutex_lock(ptr @mutex)
  call i32 @pthread_cond_broadcast(ptr @cond)
  call i32 @pthread_mutex_unlock(ptr @mutex)
  br label %own
own:
  call void @run_share(ptr %fn, ptr %args)
  br label %wait
wait:                                     ; each worker's done number catches up with its seq
  %j = phi i64 [ 1, %own ], [ %j1, %wait_next ]
  %wmore = icmp slt i64 %j, %n
  br i1 %wmore, label %wait_one, label %finished
wait_one:
  %wj = sub i64 %j, 1
  %boxj = getelementptr [MAXW x %mailbox], ptr @mail, i64 0, i64 %wj
  %seqpj = getelementptr %mailbox, ptr %boxj, i32 0, i32 0
  %donepj = getelementptr %mailbox, ptr %boxj, i32 0, i32 1
  %want = load i64, ptr %seqpj
  %claimpj = getelementptr %mailbox, ptr %boxj, i32 0, i32 4
  %before = sub i64 %want, 1
  %claim = cmpxchg ptr %claimpj, i64 %before, i64 %want seq_cst seq_cst
  %took = extractvalue { i64, i1 } %claim, 1
  br i1 %took, label %take_back, label %spin
take_back:                                ; no worker started it (none had a CPU): run it here
  %offj = mul i64 %j, SHAREWORDS
  %aj = getelementptr i64, ptr %args, i64 %offj
  call void @run_share(ptr %fn, ptr %aj)
  store atomic i64 %want, ptr %donepj release, align 8
  %t = atomicrmw add ptr @taken, i64 1 monotonic
  br label %wait_next
spin:
  %i = phi i64 [ 0, %wait_one ], [ %i1, %spin_more ], [ %i1, %do_yield ]
  %d = load atomic i64, ptr %donepj acquire, align 8
  %ok = icmp eq i64 %d, %want
  br i1 %ok, label %wait_next, label %spin_more
spin_more:
  call void @relax()
  %i1 = add i64 %i, 1
  %m = and i64 %i1, 1023
  %yield = icmp eq i64 %m, 0
  br i1 %yield, label %do_yield, label %spin
do_yield:                                 ; a worker without a CPU of its own needs ours
  call i32 @sched_yield()
  br label %spin
wait_next:
  %j1 = add i64 %j, 1
  br label %wait
finished:
  ret void
}

; Stop and join workers [0, n) (at interpreter exit: the JIT's code must outlive them).
define void @sf_pool_stop(i64 %n) {
entry:
  store atomic i64 1, ptr @quit seq_cst, align 8
  call i32 @pthread_mutex_lock(ptr @mutex)
  call i32 @pthread_cond_broadcast(ptr @cond)
  call i32 @pthread_mutex_unlock(ptr @mutex)
  br label %loop
loop:
  %k = phi i64 [ 0, %entry ], [ %k1, %body ]
  %more = icmp slt i64 %k, %n
  br i1 %more, label %body, label %done
body:
  %tid = getelementptr [MAXW x i64], ptr @threads, i64 0, i64 %k
  %t = load i64, ptr %tid
  call i32 @pthread_join(i64 %t, ptr null)
  %k1 = add i64 %k, 1
  br label %loop
done:
  ret void
}

define i64 @sf_pool_taken() {
  %n = load atomic i64, ptr @taken monotonic, align 8
  ret i64 %n
}

define void @sf_pool_set_spin(i64 %ns) {
  store i64 %ns, ptr @spin_ns
  ret void
}
"""


def _run_share_ir() -> str:
    """``run_share(fn, args)``: kernel(rows, 7 x i64, out, table), its words from ``args``."""
    types = ["ptr"] + ["i64"] * (SHARE_WORDS - 3) + ["ptr", "ptr"]
    lines = ["; Run one share: the kernel with its words from the argument block.",
             "define internal void @run_share(ptr %fn, ptr %args) {"]
    for k, t in enumerate(types):
        lines += [f"  %p{k} = getelementptr i64, ptr %args, i64 {k}", f"  %a{k} = load {t}, ptr %p{k}"]
    lines += ["  call void %fn(" + ", ".join(f"{t} %a{k}" for k, t in enumerate(types)) + ")", "  ret void", "}"]
    return "\n".join(lines) + "\n"


def _ir_text(x86: bool) -> str:
    return (_IR.replace("RUN_SHARE", _run_share_ir()).replace("MAXW", str(MAX_WORKERS)).replace("SPINNS", str(SPIN_NS))
            .replace("SPINWINDOW", str(SPIN_WINDOW)).replace("SPINGROWTH", str(SPIN_GROWTH))
            .replace("SHAREWORDS", str(SHARE_WORDS))
            .replace("PAUSE", "call void @llvm.x86.sse2.pause()" if x86 else ""))


class NativePool:
    """The process's native workers (see the module docstring); grown, never shrunk."""

    def __init__(self):
        import llvmlite.binding as llvm

        from .llvm_host import init, optimise

        init()
        libc = ctypes.CDLL(None)
        for name in ("pthread_create", "pthread_join", "pthread_mutex_lock", "pthread_mutex_unlock",
                     "pthread_cond_wait", "pthread_cond_broadcast", "clock_gettime", "sched_yield"):
            llvm.add_symbol(name, ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)
        x86 = llvm.get_process_triple().startswith(("x86_64", "i686", "i386"))
        mod, tm = optimise(_ir_text(x86))
        self._engine = llvm.create_mcjit_compiler(mod, tm)
        self._engine.finalize_object()
        addr = self._engine.get_function_address
        self._start = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int64)(addr("sf_pool_start"))
        # sf_pool_run's address: the small-call entry hands half a tree loop over by it.
        self.run_address = addr("sf_pool_run")
        self._run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)(self.run_address)
        self._stop = ctypes.CFUNCTYPE(None, ctypes.c_int64)(addr("sf_pool_stop"))
        self.set_spin = ctypes.CFUNCTYPE(None, ctypes.c_int64)(addr("sf_pool_set_spin"))
        self.taken = ctypes.CFUNCTYPE(ctypes.c_int64)(addr("sf_pool_taken"))  # shares the callers took back
        self.workers = 0
        self.lock = threading.Lock()  # one caller at a time
        spin = os.environ.get("SILVANFORGE_SPIN_NS")
        if spin is not None:
            self.set_spin(max(0, int(spin)))

    def grow(self, workers: int) -> bool:
        """At least ``workers`` workers (held ``lock``); False if the system refused a thread
        or more than MAX_WORKERS were asked for (there are that many mailboxes)."""
        if workers > MAX_WORKERS:
            return False
        if workers > self.workers:
            first, self.workers = self.workers, workers
            if self._start(first, workers) != 0:
                self.workers = first
                return False
        return self.workers >= workers

    def run(self, fn_address: int, shares: list[tuple]) -> None:
        """Run ``fn(*share)`` for every share (each: rows, 7 scalars, out, table addresses) in
        parallel, the first on this thread; the caller holds ``lock`` and has grown the pool."""
        block = (ctypes.c_int64 * (SHARE_WORDS * len(shares)))()
        for k, share in enumerate(shares):
            block[k * SHARE_WORDS:(k + 1) * SHARE_WORDS] = share
        self._run(fn_address, len(shares), ctypes.addressof(block))

    def try_run(self, fn_address: int, shares: list[tuple]) -> bool:
        """:meth:`run` of every share, taking ``lock`` without waiting for it; False (nothing
        run) where another caller holds the pool or the system refused a worker thread: the
        core's Python pool runs them.  More shares than the pool holds workers (threads past
        MAX_WORKERS + 1) run in rounds: a round never hands out more shares than there are
        mailboxes."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            per_round = MAX_WORKERS + 1
            if not self.grow(min(len(shares), per_round) - 1):
                return False
            for k in range(0, len(shares), per_round):
                self.run(fn_address, shares[k:k + per_round])
        finally:
            self.lock.release()
        return True

    def stop(self) -> None:
        with self.lock:
            self._stop(self.workers)
            self.workers = 0


_pool: NativePool | None = None
_pool_lock = threading.Lock()
_broken = os.environ.get("SILVANFORGE_NATIVE_POOL", "1") == "0"


def native_pool() -> NativePool | None:
    """The process's native pool, made on first use; None where it cannot run (not POSIX, or
    ``SILVANFORGE_NATIVE_POOL=0``)."""
    global _pool, _broken
    if _pool is not None or _broken:
        return _pool
    with _pool_lock:
        if _pool is None and not _broken:
            if os.name != "posix":
                _broken = True
                return None
            try:
                _pool = NativePool()
            except Exception:  # no C library symbols, an LLVM that cannot JIT it: Python pool
                _broken = True
                return None
            atexit.register(_pool.stop)
    return _pool


def _after_fork_in_child() -> None:
    # The child has none of the parent's workers: it makes its own pool on first use.
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
