"""MIR -> LIR: the core's walk generator and the CPU lowering that drives it.

:class:`WalkGenerator` turns MIR operations into LIR statements.  Loops and walks (a
representation's methods give the loads, :mod:`silvanforge.rep`) are here; how rows are read is
:mod:`silvanforge.lowering.splits`, as is the split decision, and the reductions
:mod:`silvanforge.reduction.lower`, chained walks :mod:`silvanforge.lowering.chains`: mixins of the
generator, whose state they share.  :func:`lower_to_lir` is the core's lowering (one function per
phase, each split over CPU threads); a target with its own (:meth:`silvanforge.target.Target.lower`)
composes the same pieces: :func:`silvanforge.lowering.walksetup.setup_walks`, a :class:`WalkGenerator`
with a placement of its own, :func:`silvanforge.lowering.walksetup.walk_module`.  What they share (the
layout, the lowering's choices, a walk's setup) is :mod:`silvanforge.lowering.walksetup`.
"""

from __future__ import annotations

import numpy as np

from silvanforge.errors import ScheduleError
from silvanforge.ir import hir, lir, mir
from silvanforge.ir.lir import Assign, Bin, Builder, Cast, Cmp, For, If, Select, Store, Var, While, fold_index, vector_of
from silvanforge.lowering.chains import ChainedWalks
from silvanforge.lowering.splits import RowReads, SplitDecision
from silvanforge.lowering.walkcost import walks_prefetch
from silvanforge.lowering.walksetup import (MAX_VECTOR_LANES, SPLIT_ROWS, TREE_DEPTH, VECTOR_WALK_DEFAULT, WalkSetup, setup_walks,
                       thread_info, walk_module, walks_exit_early)
from silvanforge.options import CompileOptions
from silvanforge.reduction.lower import ReductionLowering
from silvanforge.frontend.tiling import lane_order_lut

__all__ = ["WalkGenerator", "lower_to_lir"]


def lower_to_lir(forest: hir.Forest, fn: mir.MirFunction, rep: str, hook,
                 tile_size: int = 1, options: CompileOptions | None = None) -> lir.Module:
    """The core's lowering of a MIR function to an LIR module using representation ``rep``: one
    function per phase, each run by threads over row ranges (or tree ranges); with ``tile_size``
    above 1 every walk step evaluates a tile of that many nodes (:mod:`silvanforge.frontend.tiling`);
    ``options``: the compile's lowering knobs (None: defaults).
    A target may bring its own (:meth:`silvanforge.target.Target.lower`), built from the same
    pieces: :func:`setup_walks`, a :class:`WalkGenerator` and :func:`walk_module`."""
    setup = setup_walks(forest, fn, rep, hook, tile_size, split_rows=True, options=options)
    layout, b = setup.layout, setup.b
    gen = WalkGenerator(setup)
    gen.branch_categorical = True
    gen.prefetch_children = walks_prefetch(forest)
    gen.leaf_loops = layout.leaf_self_loops and bool(setup.rep_info.get("leaf_self_loops"))
    if gen.leaf_loops:
        gen.exit_early, gen.shallowest_leaf = walks_exit_early(forest)
    depths = [t.depth for t in layout.trees]
    if (gen.leaf_loops and not gen.exit_early and setup.options.per_tree_walk_depth is not False and depths
            and min(depths) < max(depths)):
        # Walks of trees of several depths loop to each tree's own (see _walk_lanes).
        b.buffer(TREE_DEPTH, np.asarray(depths, np.int32))
    functions = _cpu_functions(gen, fn)
    gen.info.update(thread_info(sum(t.depth for t in layout.trees)))
    return walk_module(setup, functions, gen.info)


def _cpu_functions(gen: "WalkGenerator", fn: mir.MirFunction) -> list:
    """One LIR function per phase (:func:`_phases`), each run split over CPU threads."""
    b = gen.b
    row_parallel = any(op.parallel for op in mir.walk(fn.body)
                       if isinstance(op, mir.Loop) and op.dimension == "batch")
    functions = []
    phases = _phases(fn.body)
    fill = gen.split_rows and not gen.split_per_chunk
    if fill and phases[0][0] != "rows":
        # A phase of its own before a tree-parallel loop (whose calls read every row).
        b.begin_function()
        gen.fill_split_rows()
        functions.append(lir.Function("split_rows", b.block, dict(b.locals), parallel="rows",
                                      row_parallel=True, trip=0))
        fill = False
    for i, (kind, ops) in enumerate(phases):
        b.begin_function()
        if fill:  # each call of the first row phase splits its own rows first (one dispatch)
            gen.fill_split_rows()
            fill = False
        trip = 0
        for op in ops:
            if kind == "loop":
                trip = op.max_trip
                gen.loop_phase = op
            gen.lower(op)
            gen.loop_phase = None
        functions.append(lir.Function(f"predict_{i}", b.block, dict(b.locals), parallel=kind,
                                      row_parallel=row_parallel, trip=trip))
    return functions


def _phases(body: list):
    """Split the top level into phases: a parallel loop over trees runs alone, split over threads
    by iterations; everything else runs split by rows (every row range derives from the rows a
    call is given, and rows never share results)."""
    phases: list[tuple[str, list]] = []
    for op in body:
        if isinstance(op, mir.Loop) and op.dimension == "tree" and op.parallel and op.max_trip:
            phases.append(("loop", [op]))
        elif phases and phases[-1][0] == "rows":
            phases[-1][1].append(op)
        else:
            phases.append(("rows", [op]))
    return phases


class WalkGenerator(RowReads, SplitDecision, ReductionLowering, ChainedWalks):
    """MIR operations -> LIR statements: loops, walks (the representation's methods give the
    loads), the split decision and the reduction, emitted into ``setup.b``'s current block.

    The core's lowering (:func:`lower_to_lir`) runs it as is; a target's own lowering
    (:meth:`silvanforge.target.Target.lower`) uses it by composition, passing a *placement*: an object
    with the five methods below, which the generator calls wherever it lowers a MIR operation,
    a loop body, reads an input value, indexes a partial-sum slot or folds slices over rows.
    Without one the generator is its own placement: sequential code, as one CPU thread runs it
    over a row range.  A placement's method may emit something around, or instead of, what the
    generator's method of the same name emits (a GPU backend's placement maps
    loops to GPU threads and caches rows in shared memory this way):

    - ``lower(op)``: lower one MIR operation (the generator's: :meth:`loop` for loops,
      :meth:`reduce_dimension` for folds, a prefetch for caches, walks and reductions);
    - ``lower_body(ops) -> list``: the statements of a loop's body (each op through ``lower``);
    - ``row_value(row, feature, row_at=None) -> Expr``: feature ``feature`` of row ``row``;
    - ``slot_index(target, slots, row, out) -> Expr``: the element of ``margins`` or of a
      privatised buffer a leaf value adds to;
    - ``fold_rows(op, r, k, body)``: run a fold's ``body`` for each of its rows and outputs.

    Also public: ``forest``, ``layout``, ``reps`` (the representation's instance), ``b`` (the
    :class:`silvanforge.ir.lir.Builder`), ``thr_t`` and ``acc_t``, ``K`` (outputs), ``private``
    (privatised buffer -> slice extents), ``index`` (MIR loop index -> its LIR value), ``info``
    (facts for ``Module.info``), :meth:`c` and :meth:`expr`.  Other members are its own.
    ``vector_walks=False``: interleaved walks never run as SIMD vectors (targets without vector
    types); otherwise ``setup.options.vector_walks`` decides (None: :data:`VECTOR_WALK_DEFAULT`)."""

    def __init__(self, setup: WalkSetup, placement=None, vector_walks: bool = True):
        forest, layout, b = setup.forest, setup.layout, setup.b
        thr_t, acc_t, split_rows = setup.thr_t, setup.acc_t, setup.split_rows
        self.placement = self if placement is None else placement
        self.forest, self.layout, self.reps, self.b = forest, layout, setup.reps, b
        self.private = setup.private  # privatised buffer -> extents of its slice dimensions
        self.tiles = layout.tiles  # None: one node per step
        if self.tiles is None:
            self.max_depth = max((t.depth for t in layout.trees), default=0)
            self.min_depth = min((t.depth for t in layout.trees), default=0)
        else:  # depths count tile steps
            self.max_depth = self.tiles.depth()
            # Indexed [shape, bits] with tile node k's outcome in bit k (see _tile_step).
            b.buffer("tile_lut", lane_order_lut(self.tiles.tile_size).reshape(-1))
        self.loop_phase: mir.Loop | None = None
        self.thr_t, self.acc_t = thr_t, acc_t
        self.K = forest.num_outputs
        self.info: dict = {}  # facts for Module.info (what a placement fell back on, ...)
        self.index: dict[str, Var] = {}  # MIR loop index -> LIR variable
        self.values: dict[str, Var] = {}  # MIR value name -> LIR variable (the leaf node)
        # Whether interleaved walks may run as vectors (gathers).
        forced = setup.options.vector_walks
        self.vector_walks = vector_walks and (VECTOR_WALK_DEFAULT if forced is None else forced)
        # Whether walks read split rows (:meth:`fill_split_rows`), written "before the walks"
        # or "per chunk" (as each cached row chunk starts); None: rows as given.
        self.split_rows = split_rows is not None
        self.split_per_chunk = split_rows == "per chunk"
        # Whether a step from a leaf stays at the leaf (set by lower_to_lir from the layout),
        # and whether such walks stop when all interleaved walks are at leaves (walks_exit_early).
        self.leaf_loops = False
        self.exit_early, self.shallowest_leaf = False, 0
        # Whether a step branches to its categorical split's test (CPU walks; set by lower_to_lir)
        # instead of selecting between both tests.
        self.branch_categorical = False
        # Whether walks of several trees at once prefetch each node's children (CPU walks whose
        # nodes pass the L2 cache, walkcost.walks_prefetch; set by lower_to_lir).
        self.prefetch_children = False
        if self.split_rows:
            b.buffers[SPLIT_ROWS] = lir.Buffer(SPLIT_ROWS, thr_t, "scratch",
                                               per_row=self._split_row_size(), fill=None)
            self.info["split_rows"] = split_rows
            self._split_row_buffers()
        self._outputs_plan()
        self._category_buffers()

    def c(self, v, t):
        return Builder.const(v, t)

    # -- index expressions
    def expr(self, e) -> lir.Expr:
        """A MIR index expression as LIR, folding constants (specialised loops bind constants)."""
        if isinstance(e, int):
            return self.c(e, "i64")
        if isinstance(e, str):
            return {"row_begin": lir.ROW_BEGIN, "row_end": lir.ROW_END}.get(e) or self.index[e]
        op, a, b = e
        return fold_index(op, self.expr(a), self.expr(b))

    # -- MIR operations
    def lower(self, op):
        """Emit one MIR operation (a placement's ``lower`` may call this for what it leaves as is)."""
        b = self.b
        if isinstance(op, mir.Loop):
            self.loop(op)
        elif isinstance(op, mir.InitMargins):
            self._for_outputs(lambda k: Store("margins", self.margin_index(self.index[op.row], k),
                                              self._init_value(k)))
        elif isinstance(op, mir.FinalizeMargins):
            self._finalize(self.index[op.row])
        elif isinstance(op, mir.WalkDecisionTree):
            tree, row = self.expr(op.tree), self.expr(op.row)
            if op.expand:
                self.values[op.result] = self._walk_expanded(tree, row)
            else:
                self.values[op.result] = self._walk_lanes([(tree, row)], op.unroll_depth, op.peel_depth)[0]
        elif isinstance(op, mir.Reduce):
            self._reduce(self.expr(op.row), self.expr(op.tree), self.values[op.value],
                         op.target, tuple(self.expr(i) for i in op.private), op.atomic)
        elif isinstance(op, mir.ReduceDimension):
            self.reduce_dimension(op)
        elif isinstance(op, mir.CacheRows):
            self._cache_rows(self.expr(op.start), self.expr(op.stop))
        elif isinstance(op, mir.CacheTrees):
            self._cache_trees(self.expr(op.start), self.expr(op.stop))
        else:  # pragma: no cover - the MIR verifier rejects unknown operations first
            raise TypeError(op)
        del b

    def lower_body(self, ops) -> list:
        """The statements of ``ops`` (each through the placement's ``lower``), emitted nowhere."""
        self.b.push()
        for inner in ops:
            self.placement.lower(inner)
        return self.b.pop()

    def loop(self, op: mir.Loop):
        """A MIR loop as a sequential LIR loop (unrolled, interleaved or specialised as asked)."""
        start, stop = self.expr(op.start), self.expr(op.stop)
        if op is self.loop_phase:
            # This call runs iterations [iter_begin, iter_end) of the parallel loop.
            begin = Bin("+", start, Bin("*", lir.ITER_BEGIN, self.c(op.step, "i64")))
            stop = Bin("min", stop, Bin("+", start, Bin("*", lir.ITER_END, self.c(op.step, "i64"))))
            start = begin
        if op.interleave:  # (chained where the layout chains every walk: silvanforge.lowering.chains)
            return (self._chained_loop if self.layout.chain_lanes else self._interleaved_loop)(op, start, stop)
        if op.unroll or op.specialize:
            return self._unrolled_loop(op, start, stop)
        var = Var(op.index, "i64")
        self.index[op.index] = var
        body = self.placement.lower_body(op.body)
        self.b.emit(For(var, start, stop, op.step, body, parallel=op.parallel))

    def _unrolled_loop(self, op: mir.Loop, start, stop):
        """One copy of the body per iteration; a constant index where the range is constant, so a
        specialised tree loop walks each tree with code for that tree."""
        for k in range(op.max_trip):
            value = fold_index("+", start, self.c(k * op.step, "i64"))
            if isinstance(value, lir.Const) and isinstance(stop, lir.Const):
                if value.value >= stop.value:
                    break
                self.index[op.index] = value
                for stmt in self.placement.lower_body(op.body):
                    self.b.emit(stmt)
                continue
            var = self.b.local(op.index, "i64", value)
            self.index[op.index] = var
            self.b.emit(If(Cmp("<", var, stop), self.placement.lower_body(op.body)))

    def _interleaved_loop(self, op: mir.Loop, start, stop):
        """``interleave`` walks of the innermost loop advance together, one step each in turn, so
        their independent loads overlap instead of waiting on each other."""
        b, lanes = self.b, op.interleave
        base = Var(op.index + "_base", "i64")
        walk = next(o for o in op.body if isinstance(o, mir.WalkDecisionTree))
        reduce = next(o for o in op.body if isinstance(o, mir.Reduce))
        b.push()
        pairs, actives, trees, slots = [], [], [], []
        for j in range(lanes):
            v = b.local(op.index, "i64", Bin("+", base, self.c(j * op.step, "i64")))
            active = b.local("active", "i1", Cmp("<", v, stop)) if j else None
            self.index[op.index] = v
            # Each lane's own partial-sum slot (tree-parallel reductions index it by the lane).
            slots.append(tuple(self.expr(i) for i in reduce.private))
            for other in op.body:
                if isinstance(other, (mir.CacheRows, mir.CacheTrees)):
                    self.placement.lower(other)
            tree, row = self.expr(walk.tree), self.expr(walk.row)
            trees.append(tree)
            if j:  # an inactive lane walks lane 0's (valid) tree and row, and is not reduced
                tree = Select(active, tree, pairs[0][0])
                if self.split_rows:
                    # Split rows have room past the batch's end (``pad_rows``): the lane walks
                    # what lies there, and lanes' rows stay ``base + j``, so one register
                    # addresses every lane's row (constant offsets of the row size).
                    pad = self.b.buffers[SPLIT_ROWS]
                    pad.pad_rows = max(pad.pad_rows, j * op.step + 1)
                else:
                    row = Select(active, row, pairs[0][1])
            pairs.append((b.local("lt", "i64", tree), b.local("lr", "i64", row)))
            actives.append(active)
        shared = all(t == trees[0] for t in trees)  # rows interleaved: every lane walks one tree
        if walk.expand:  # each lane's branches in turn (out-of-order cores overlap them)
            # The lanes' trees as compiled (constants); an idle lane past the last tree expands
            # lane 0's (its result is not reduced).
            n = self.forest.num_trees
            nodes = [self._walk_expanded(t if isinstance(t, lir.Const) and t.value < n else trees[0], r)
                     for t, (_, r) in zip(trees, pairs)]
        elif self._can_walk_vector(lanes):
            # One tree for every lane (rows interleaved): the tree stays a scalar.
            nodes = self._walk_vector(pairs, shared, walk.unroll_depth, walk.peel_depth)
        else:
            nodes = self._walk_lanes(pairs, walk.unroll_depth, walk.peel_depth, same_tree=shared)
        for (tree, row), node, active, lane_slots in zip(pairs, nodes, actives, slots):
            b.push()
            self._reduce(row, tree, node, reduce.target, lane_slots, reduce.atomic)
            stmts = b.pop()
            b.block.extend(stmts) if active is None else b.emit(If(active, stmts))
        b.emit(For(base, start, stop, op.step * lanes, b.pop()))

    def _cache_rows(self, start, stop):
        """CPU caching is prefetching: touch every cache line of the rows of one iteration; with
        rows split per chunk, splitting them (a sequential read the hardware prefetches)."""
        if self.split_per_chunk:
            return self.fill_split_rows(start, stop)
        b = self.b
        r, f = Var(f"cr{len(b.locals)}", "i64"), Var(f"cf{len(b.locals)}", "i64")
        per_line = max(1, 64 // np.dtype(self.layout.threshold_dtype).itemsize)
        if self.split_rows:
            buffer, columns, index = SPLIT_ROWS, self._split_row_size() - 1, Bin("+", self._row_start(r), f)
        else:
            buffer, columns = "rows", self.forest.num_features
            index = Bin("+", Bin("*", r, lir.ROW_STRIDE), Bin("*", f, lir.COL_STRIDE))
        inner = For(f, self.c(0, "i64"), self.c(columns, "i64"), per_line, [lir.Prefetch(buffer, index)])
        b.emit(For(r, start, stop, 1, [inner]))

    def _cache_trees(self, start, stop):
        b = self.b
        regions = self.reps.cache_trees(b=b, first_tree=Cast(start, "i32"), num_trees=Cast(Bin("-", stop, start), "i32"))
        for buffer, lo, hi in regions:
            i = Var(f"ct{len(b.locals)}_{buffer}", "i64")
            per_line = max(1, 64 // np.dtype(lir.LIR_TO_NUMPY[b.buffers[buffer].type]).itemsize)
            b.emit(For(i, Builder.cast(lo, "i64"), Builder.cast(hi, "i64"), per_line, [lir.Prefetch(buffer, i)]))

    def _depth_bound(self, tree) -> int:
        if isinstance(tree, lir.Const):
            if self.tiles is not None:
                return self.tiles.trees[int(tree.value)].depth
            return self.layout.trees[int(tree.value)].depth
        return self.max_depth

    def _peel_bound(self, tree) -> int:
        """Tile steps every walk of ``tree`` takes at least (peelWalk counts tile steps when
        tiled, and a padded tree of uniform node depth need not have uniform tile depth)."""
        if isinstance(tree, lir.Const):
            return self.tiles.trees[int(tree.value)].min_depth
        return self.tiles.min_depth()

    def _walk_lanes(self, lanes, unroll_depth: int = 0, peel_depth: int = 0, same_tree: bool = False) -> list[Var]:
        """Walk each (tree, row) lane to a leaf; returns the leaf node of each lane.

        ``peel_depth`` steps run without leaf checks (every leaf is at least that deep),
        ``unroll_depth`` more steps are unrolled with checks, and a loop finishes walks that go
        deeper than that.  Several lanes advance in turn inside one loop (interleaving).
        """
        b, reps = self.b, self.reps
        nodes = [b.local("node", "i64", reps.root(b=b, tree=Cast(t, "i32"))) for t, _ in lanes]
        depth = max(self._depth_bound(t) for t, _ in lanes)
        if self.tiles is not None:
            peel_depth = min([peel_depth] + [self._peel_bound(t) for t, _ in lanes])

        prefetch = self.prefetch_children and not same_tree and len(lanes) > 1

        def step(j):
            tree, row = lanes[j]
            b.push()
            if self.tiles is None:
                self._step(Cast(tree, "i32"), row, nodes[j], prefetch)
            else:
                self._tile_step(Cast(tree, "i32"), row, nodes[j])
            return b.pop()

        def not_leaf(j):
            leaf = reps.is_leaf(b=b, tree=Cast(lanes[j][0], "i32"), node=nodes[j])
            return Cmp("==", Cast(leaf, "i32"), self.c(0, "i32"))

        def any_not_leaf():
            out = not_leaf(0)
            for j in range(1, len(lanes)):
                out = Bin("|", out, not_leaf(j))
            return out

        if self.leaf_loops and self.tiles is None and self.exit_early:
            # Steps every walk takes are peeled; then all walks step together, unconditionally
            # (a leaf stays put), until every one is at a leaf.
            for _ in range(min(self.shallowest_leaf, depth)):
                for j in range(len(lanes)):
                    b.block.extend(step(j))
            if self.shallowest_leaf < depth:
                # At most to the deepest tree's depth: a lane past the batch's end reads rows
                # that are not its own and may step off a leaf (see leaf_self_loops); the
                # counted bound keeps its walk finite, as the counted loops' trip count does.
                d = b.local("d", "i64", self.c(min(self.shallowest_leaf, depth), "i64"))
                more = Cmp("<", d, self.c(depth, "i64"))
                b.emit(While(Bin("&", more, any_not_leaf()),
                             [s for j in range(len(lanes)) for s in step(j)]
                             + [Assign(d, Bin("+", d, self.c(1, "i64")))]))
            return nodes
        steps_to = None  # walks through self-looping leaves: a counted loop to the tree's depth
        if self.leaf_loops and self.tiles is None:
            # A step from a leaf stays there: no walk needs a leaf check.  Steps every lane's
            # tree takes are peeled; a counted loop (the same trip count for every lane) takes
            # the rest to the deepest lane tree's own depth.
            peel_depth = depth
            if TREE_DEPTH in b.buffers and not all(isinstance(t, lir.Const) for t, _ in lanes):
                peel_depth = self.min_depth
                trees = lanes[:1] if same_tree else lanes  # rows interleaved: one tree, one load
                steps_to = Cast(b.load(TREE_DEPTH, Cast(trees[0][0], "i32")), "i64")
                for t, _ in trees[1:]:
                    steps_to = Bin("max", steps_to, Cast(b.load(TREE_DEPTH, Cast(t, "i32")), "i64"))
        done = 0
        for _ in range(min(peel_depth, depth)):
            for j in range(len(lanes)):
                b.block.extend(step(j))
            done += 1
        if steps_to is not None:
            d = b.local("d", "i64")
            b.emit(For(d, self.c(done, "i64"), steps_to, 1, [s for j in range(len(lanes)) for s in step(j)]))
            return nodes
        for _ in range(unroll_depth):
            if done >= depth:
                break
            for j in range(len(lanes)):
                b.emit(If(not_leaf(j), step(j)))
            done += 1
        if done < depth:
            if len(lanes) == 1:
                b.emit(While(not_leaf(0), step(0)))
            else:
                b.emit(While(any_not_leaf(), [If(not_leaf(j), step(j)) for j in range(len(lanes))]))
        return nodes

    def _walk_expanded(self, tree, row) -> Var:
        """``expandWalk``: the walk of a tree known at compile time as nested branches, each
        node's feature column, threshold and flags constants (the if-else code lleaves and
        Treelite generate).  Each branch is a separate jump the processor predicts for its node
        alone, so paths that rows mostly share cost a compare and a jump per level; a data walk
        (:meth:`_walk_lanes`) pays its loads on every step whatever the path.  The node values
        come from the representation's own hooks, evaluated while compiling, so every
        representation expands the same way; the leaf's node index then goes to the reduction
        as a walk's would."""
        if not isinstance(tree, lir.Const):
            raise ScheduleError("expandWalk needs each walk's tree known at compile time: specialize "
                                "(or unroll) the loop over trees around the walk")
        if self.tiles is not None:
            raise ScheduleError("expandWalk walks untiled trees (tile size 1)")
        b, reps, c = self.b, self.reps, self.c
        t32 = c(int(tree.value), "i32")
        node = b.local("node", "i64")
        at = b.local("rowat", "i64", self._row_start(row))

        def static(make):
            """The value(s) of the expression(s) ``make`` builds from constants."""
            b.push()
            made = make()
            env = {}
            for s in b.pop():  # what the hooks named on the way (b.local)
                env[s.var.name] = lir.constant_value(s.value, b.buffers, env)
            if isinstance(made, tuple):
                return tuple(lir.constant_value(e, b.buffers, env) for e in made)
            return lir.constant_value(made, b.buffers, env)

        def expand(n: int) -> list:
            nc = c(n, "i64")
            if static(lambda: reps.is_leaf(b=b, tree=t32, node=nc)):
                return [Assign(node, nc)]
            field, flags = static(lambda: self._feature_and_flags(t32, nc, 0))
            thr = static(lambda: reps.load_threshold(b=b, tree=t32, node=nc, lane=0))
            left, right = static(lambda: tuple(reps.child(b=b, tree=t32, node=nc, child=c(k, "i32"))
                                               for k in (0, 1)))
            b.push()
            x = b.local("x", self.thr_t, self.placement.row_value(row, c(field, "i32"), row_at=at))
            decision = self._decision(x, c(thr, self.thr_t), c(flags, "i32"))
            return b.pop() + [If(decision, expand(int(left)), expand(int(right)))]

        b.block.extend(expand(int(static(lambda: reps.root(b=b, tree=t32)))))
        return node

    def _can_walk_vector(self, lanes: int) -> bool:
        """Vector walks: untiled, no categorical splits (decided one node at a time), CPU."""
        return (self.vector_walks and self.tiles is None and not self.layout.has_categorical
                and 2 <= lanes <= MAX_VECTOR_LANES)

    def _walk_vector(self, lanes, shared: bool, unroll_depth: int = 0, peel_depth: int = 0) -> list[Var]:
        """Walk the ``n`` (tree, row) lanes as one SIMD walk; returns the leaf node of each lane.

        The nodes are one ``i64xn`` vector.  Each step gathers every lane's feature index,
        threshold and flags (the representation's hooks, given the vector of nodes, build loads
        at a vector index: :func:`silvanforge.ir.lir.widen` makes them gathers), gathers the
        lanes' feature values from their rows, decides all lanes with one vector
        :meth:`_decision` and moves every lane to its child.  The first ``peel_depth`` steps
        (every leaf is at least that deep: padded trees) need no leaf checks; after them a loop
        runs while any lane is not at a leaf, and lanes at a leaf stay where they are (their
        feature index, -1, is clamped to 0 so the row gather stays in bounds).
        """
        b, reps, n, c = self.b, self.reps, len(lanes), self.c
        widen = lir.widen
        self.info["vector_walk"] = True
        vec = lambda t: lir.vector_type(t, n)  # noqa: E731
        if shared:
            t32 = Cast(lanes[0][0], "i32")
        else:
            t32 = Cast(b.local("tv", vec("i64"), lir.Vector(tuple(t for t, _ in lanes))), vec("i32"))
        rows = b.local("rv", vec("i64"), lir.Vector(tuple(r for _, r in lanes)))
        # Each lane's row start, once per walk (x86 has no 64-bit vector multiply below AVX-512).
        row_at = b.local("rowat", vec("i64"), widen(self._row_start(rows)))
        root = lir.broadcast(Builder.cast(widen(reps.root(b=b, tree=t32)), "i64"), n)
        node = b.local("nodev", vec("i64"), root)
        depth = max(self._depth_bound(t) for t, _ in lanes)

        def not_leaf():
            leaf = widen(reps.is_leaf(b=b, tree=t32, node=node))
            return lir.broadcast(widen(Cmp("==", Cast(leaf, "i32"), c(0, "i32"))), n)

        def step(mask: Var | None):
            feature, flags = self._feature_and_flags(t32, node, 0, widen)
            feature = lir.broadcast(feature, n)
            if mask is not None:  # a lane at a leaf has feature -1: read column 0 instead
                feature = Bin("max", feature, c(0, vec("i32")))
            x = b.local("xv", vec(self.thr_t), widen(self.placement.row_value(rows, feature, row_at)))
            thr = b.local("thrv", x.type, lir.broadcast(
                widen(reps.load_threshold(b=b, tree=t32, node=node, lane=0)), n))
            flags = b.local("flagsv", vec("i32"), lir.broadcast(flags, n))
            left = self._decision(x, thr, flags)
            child = Select(left, c(0, vec("i32")), c(1, vec("i32")))
            moved = lir.broadcast(Builder.cast(widen(reps.child(b=b, tree=t32, node=node, child=child)),
                                               vec("i64")), n)
            b.emit(Assign(node, moved if mask is None else Select(mask, moved, node)))

        done = 0
        for _ in range(min(peel_depth, depth)):
            step(None)
            done += 1
        if done < depth:
            mask = b.local("walking", vec("i1"), not_leaf())
            for _ in range(min(unroll_depth, depth - done)):
                step(mask)
                b.emit(Assign(mask, not_leaf()))
                done += 1
            if done < depth:
                b.push()
                step(mask)
                b.emit(Assign(mask, not_leaf()))
                b.emit(While(Cmp("!=", lir.PackBits(mask), c(0, "i32")), b.pop()))
        return [b.local("node", "i64", lir.Extract(node, j)) for j in range(n)]

    def _step(self, t32, row, node: Var, prefetch: bool = False) -> None:
        """One move from ``node`` to the child the row's feature value selects; ``prefetch``:
        first touch the lines the next step loads from the left child (its feature, threshold
        and child fields; the right child lies beside it), so they come in while this decides."""
        b, reps, zero = self.b, self.reps, self.c(0, "i32")
        if prefetch:
            kid = b.local("kid", "i64", reps.child(b=b, tree=t32, node=node, child=zero))
            fields = (reps.load_feature_index(b=b, tree=t32, node=kid), reps.load_threshold(b=b, tree=t32, node=kid),
                      reps.child(b=b, tree=t32, node=kid, child=zero))
            for load in {(e.buffer, str(e.index)): e for e in map(lir.first_load, fields) if e}.values():
                b.emit(lir.Prefetch(load.buffer, load.index))
        left = self._node_decision(t32, row, node, 0)
        child = Select(left, self.c(0, "i32"), self.c(1, "i32"))
        b.emit(Assign(node, reps.child(b=b, tree=t32, node=node, child=child)))

    def _tile_step(self, t32, row, node: Var) -> None:
        """One move from tile ``node`` to its child: every node's predicate (true = left) packed
        into ``bits``, then ``LUT[shape, bits]`` names the child slot.  The Treebeard paper draft
        (section 'Tile Shapes and Decision Tree Inference') packs node 0 into the most significant
        bit (:func:`silvanforge.frontend.tiling.shape_lut`); here node ``k`` is bit ``k``, the order a vector
        compare packs in, and the LUT buffer is permuted to match
        (:func:`silvanforge.frontend.tiling.lane_order_lut`).

        Without categorical splits the predicates are one vector computation: the features
        gathered from the row and the tile's thresholds and flags as vectors of ``n`` lanes."""
        b, c, n = self.b, self.c, self.tiles.tile_size
        if self.layout.has_categorical:
            bits = None
            for lane in range(n):
                bit = Select(self._node_decision(t32, row, node, lane), c(1 << lane, "i32"), c(0, "i32"))
                bits = bit if bits is None else Bin("|", bits, bit)
        else:
            reps, lanes = self.reps, range(n)
            xs, fl = [], []
            for lane in lanes:
                feature, flags = self._feature_and_flags(t32, node, lane)
                xs.append(self.placement.row_value(row, feature))
                fl.append(flags)
            x = b.local("xv", lir.vector_type(self.thr_t, n), lir.Vector(tuple(xs)))
            thr = b.local("thrv", x.type, vector_of([
                reps.load_threshold(b=b, tree=t32, node=node, lane=lane) for lane in lanes]))
            if self.layout.packed_default_left:  # the bits came with the feature fields
                flags = lir.Vector(tuple(fl))
            else:  # one vector load where the flag bytes lie side by side
                flags = Cast(vector_of([reps.load_split_flags(b=b, tree=t32, node=node, lane=lane)
                                     for lane in lanes]), lir.vector_type("i32", n))
            flags = b.local("flagsv", lir.vector_type("i32", n), flags)
            bits = lir.PackBits(self._decision(x, thr, flags))
        bits = b.local("bits", "i32", bits)
        shape = Builder.cast(self.reps.load_tile_shape(b=b, tree=t32, node=node), "i32")
        slot = Cast(b.load("tile_lut", Bin("+", Bin("*", shape, c(2**n, "i32")), bits)), "i32")
        b.emit(Assign(node, self.reps.child(b=b, tree=t32, node=node, child=slot)))
