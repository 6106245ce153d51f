"""A compiled model: ``CompiledForest``, its forms and the plan that picks one by the rows of a
call (:mod:`silvanforge.plan.bands`), ``predict`` with its lean path for a few rows, ``show``,
``save`` and pickling (an artifact is written and read by :mod:`silvanforge.artifact.store`)."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

from silvanforge.runtime import contributions, interactions, interventional, shap_arrays, transforms
from silvanforge.inputs.device import device_rows, is_device_array, like_input
from silvanforge.errors import InputError, UnsupportedModelError
from silvanforge.frontend import outputs
from silvanforge.options import CompileOptions
from silvanforge.plan.forms import Form
from silvanforge.plan.policy import untuned_plan
from silvanforge.inputs.frames import FRAME_LIBRARIES, SchemaMemory, frame_rows
from silvanforge.inputs.rows import as_rows
from silvanforge.runtime.kernel import DeviceKernel
from silvanforge.ir import hir
from silvanforge.plan.bands import MID_MAX, SMALL_ROWS, Band, check_bands, describe, dispatch_table
from silvanforge.runtime.threads import check_threads


class CompiledForest:
    """A forest compiled for one target; ``predict`` behaves like the training library's.

    It holds one or more forms (compiled programs of the model) and the bands of rows per call
    each answers; the last band's form (requests of the most rows) is the model's *main* form,
    whose options the model is known by (``options``, ``rep``, ``schedule``...)."""

    def __init__(self, forest: hir.Forest, forms: list[Form], bands: list[Band] | None = None,
                 compile_seconds: float = 0.0, tuning: dict | None = None):
        self.forest: hir.Forest = forest  # the model as imported (HIR passes work on copies)
        # The tuning record (silvanforge.plan.tuning) where the plan was tuned, else None.
        self.tuning = tuning
        self.compile_seconds = compile_seconds
        # transforms.shape_output of this model's margins: (n,) for one column
        self._flat = forest.num_outputs == 1 and forest.output_shape != "matrix"
        self._num_features = forest.num_features
        self._missing = np.nan if forest.missing is None else forest.missing  # (predict's default)
        # What predict worked out from the frames' schemas it was given (silvanforge.inputs.frames).
        self._schemas = SchemaMemory(forest)
        # The forms still to build (silvanforge.plan.lateforms: meanwhile the main form answers
        # every request), or None.
        self._late = None
        # Other outputs (silvanforge.frontend.outputs), each a compiled model of its own and the
        # function shaping its margins as the library returns them, built at its first request.
        self._outputs: dict[str, tuple] = {}
        # Those a trusted artifact kept and not yet asked for: kind -> (its artifact's bytes, a
        # function of this forest loading it, or None where it is not that output's model of
        # it), loaded at its first request.
        self._saved_outputs: dict[str, tuple] = {}
        # (kernel, tables) of SHAP contributions, made at their first request: a target's kernel and
        # silvanforge.runtime.shap_arrays', or None and silvanforge.runtime.contributions'.
        self._contribution_tables = None
        # (record, arrays) of the tables a trusted artifact kept (silvanforge.runtime.shap_arrays.saved),
        # taken at the first request where the kernel's argument layout is theirs; and a
        # function that writes this model's code-cache entry again (set by a cached compile),
        # called once they are made here.
        self._saved_contributions = None
        self._keep = None
        # NumPy's path tables of pred_interactions (silvanforge.runtime.interactions), at its first request.
        self._interaction_tables = None
        # The interventional tables of the last background given (silvanforge.runtime.interventional).
        self._background = None
        self._outputs_lock = threading.Lock()
        self._install(list(forms), list(bands) if bands is not None else [Band(1, None, 0)])

    def _install(self, forms: list[Form], bands: list[Band]) -> None:
        """The plan that answers calls from now on: set in one assignment (``_plan``, then the
        lean path's table), so a call running meanwhile sees the old plan or the new."""
        check_bands(bands, len(forms))
        main = forms[bands[-1].form]
        if getattr(self, "main", None) not in (None, main):
            raise AssertionError("a plan's forms built later keep its main form")
        self.main = main
        self._small_dtype = main.input_dtype
        # The lean path: the small calls answering a request of n rows (0-SMALL_ROWS), None
        # where that form offers none or reads another dtype (the general path then answers),
        # and whether that call splits a row's trees over threads (then ``threads=1`` asks
        # it not to).
        table = dispatch_table(bands)
        small_for = [f.small if f.input_dtype is self._small_dtype else None for f in (forms[i] for i in table)]
        splits = [forms[i].small_splits for i in table]
        forest = self.forest
        if all(s is None for s in small_for) or forest.hashed_categories or forest.hashed_combinations:
            # (a model with categories known by hash converts every input first: no lean path)
            small_for = None
        self._plan = (forms, bands)
        self._small_for = None if small_for is None else list(zip(small_for, splits))
        # Whether every small call reads a frame's row tuples (Kernel.small_calls): frames
        # then hand a few rows of numbers over as their library gives them.
        self._tuples = small_for is not None and all(getattr(s, "reads_tuples", False) for s in small_for[1:])

    def keep_with(self, write) -> None:
        """``write(self)`` (a cached compile's: its code-cache entry written again) once
        contribution tables are made here, so the entry keeps them too."""
        self._keep = write

    def _build_later(self, late) -> None:
        """Hand the forms still to build to ``late`` (a :class:`silvanforge.plan.lateforms.LateForms`
        whose install is :meth:`_finish_plan`), and start them in the background where so asked."""
        self._late = late
        if late.mode == "background":
            late.start()

    def _finish_plan(self, forms: list[Form], bands: list[Band]) -> None:
        self._install(forms, bands)
        self._late = None

    def wait(self) -> "CompiledForest":
        """Until every form of the plan is built (forms left to a background thread or to
        first use: ``sf.compile(..., forms=)``, :mod:`silvanforge.plan.lateforms`); returns self."""
        late = self._late
        if late is not None:
            late.wait()
        return self

    @property
    def forms(self) -> list[Form]:
        """The plan's forms (every one built: waits for those still building)."""
        return self.wait()._plan[0]

    @property
    def bands(self) -> list[Band]:
        """The plan's bands of rows per call (waits for forms still building)."""
        return self.wait()._plan[1]

    @property
    def forms_built(self) -> bool:
        """Whether every form of the plan is built (else the main form answers meanwhile)."""
        return self._late is None

    # The options a compiled model is known by: those of its main form.
    options = property(lambda self: self.main.options,
                       doc="what decided the main form's program (resolved, choices filled in)")
    kernel = property(lambda self: self.main.kernel, doc="the main form's kernel")
    tile_ids = property(lambda self: self.main.tile_ids,
                        doc="probability-based tiling per tree (model order), or None")
    target = property(lambda self: self.options.target, doc="the target compiled for")
    rep = property(lambda self: self.options.rep, doc="the representation chosen")
    schedule = property(lambda self: self.options.schedule, doc="the Schedule chosen")
    batch_size = property(lambda self: self.options.batch_size, doc="the batch size tuned for, or None")
    threads = property(lambda self: self.options.threads, doc="threads predict uses by default, or None: all")
    pad = property(lambda self: self.options.pad, doc="whether the trees were padded")
    tile_size = property(lambda self: self.options.tile_size, doc="nodes a walk step evaluates")
    reorder = property(lambda self: self.options.reorder, doc='trees grouped by "depth" or "peel", or None')
    cpu = property(lambda self: self.options.cpu, doc="the named CPU its code is for, or None: this host's")
    lir_module = property(lambda self: self.main.lir_module, doc="the main form's LIR module")
    mir_function = property(lambda self: self.main.mir_function, doc="the main form's MIR function")

    @property
    def num_features(self) -> int:
        """Columns of the rows ``predict`` takes."""
        return self.forest.input_features

    @property
    def num_outputs(self) -> int:
        return self.forest.num_outputs

    @property
    def classes_(self):
        return self.forest.class_labels

    def form_for(self, rows: int) -> Form:
        """The form answering a request of ``rows`` rows (in the whole plan: waits for forms
        still building)."""
        self.wait()
        return self._answering(rows)

    def _answering(self, rows: int) -> Form:
        """The form answering ``rows`` rows now (the main form, where the others are building)."""
        rows = max(int(rows), 1)
        forms, bands = self._plan
        for band in bands:
            if band.holds(rows):
                return forms[band.form]
        raise AssertionError("the bands cover every request size")  # check_bands made sure

    def predict(self, X, output_margin: bool = False, missing: float | None = None,
                threads: int | None = None, pred_leaf: bool = False, per_tree: bool = False,
                pred_contribs: bool = False, pred_interactions: bool = False, background=None, *,
                raw_score: bool = False, pred_contrib: bool = False) -> np.ndarray:
        """Predictions for rows ``X``: what the source library's ``predict`` returns (XGBoost's
        and LightGBM's boosters: probabilities for classifiers; scikit-learn: ``predict_proba``
        for classifiers, ``predict`` for regressors).

        ``X``: a NumPy array (n, num_features), or a pandas / polars DataFrame or pyarrow Table,
        whose columns are matched to the model's feature names and whose categorical columns
        are mapped to the model's categories (:mod:`silvanforge.inputs.rows`; what a frame's schema
        decides is worked out once per schema and remembered, :mod:`silvanforge.inputs.frames`), or
        records: a dict of feature name to value, or a list of them (:mod:`silvanforge.inputs.records`).
        ``output_margin``: raw margins (XGBoost ``output_margin``, LightGBM ``raw_score``).
        ``missing``: a value treated as missing besides NaN, like XGBoost's DMatrix ``missing``
        (default: the model's own, the ``missing=`` of the XGBoost estimator it was compiled
        from, else NaN only).
        ``threads``: threads for this call (default: the compile option, else all CPUs).
        ``pred_leaf``: the leaf each row reaches in each tree, ``(n, trees)``, numbered and typed
        as the model's library numbers them (XGBoost node ids as float32, LightGBM leaf indices
        as int32, CatBoost leaf indices as uint32, scikit-learn node ids as int64).
        ``per_tree``: each tree's own value for each row, ``(n, trees)`` (``(n, trees,
        outputs)`` where a tree has a value for several outputs), base score excluded, in the
        precision the library adds them in.  Both are compiled (:mod:`silvanforge.frontend.outputs`)
        at their first request, and answer any input ``predict`` takes.
        ``pred_contribs``: each feature's SHAP contribution to the margin, the bias last, laid
        out as the library's (XGBoost ``pred_contribs``, LightGBM ``pred_contrib``, CatBoost
        ``ShapValues``): path-dependent TreeSHAP with the model's covers
        (:mod:`silvanforge.runtime.contributions`); a row's values add up to its margin.
        ``background``: with ``pred_contribs``, rows (any input ``predict`` takes) to explain
        against instead: interventional SHAP, as ``shap.TreeExplainer(model, data=background,
        feature_perturbation="interventional")`` computes for the margin, the bias the
        background's mean margin (:mod:`silvanforge.runtime.interventional`; no covers needed,
        ONNX models too); the tables of the last background are kept.
        ``pred_interactions``: XGBoost's SHAP interaction values, ``(n, F + 1, F + 1)``
        (:mod:`silvanforge.runtime.interactions`); a row's entries for a feature add up to its
        contribution.
        ``raw_score`` and ``pred_contrib``: LightGBM's names of ``output_margin`` and
        ``pred_contribs``, so that a LightGBM ``Booster.predict`` call reads as it is.

            >>> cf.predict(np.array([[0.5, 1.0, np.nan, 3.0]]))     # doctest: +SKIP
            >>> cf.predict(frame[["b", "a", "d", "c"]])             # matched by name  # doctest: +SKIP
            >>> cf.predict({"a": 0.5, "b": 1.0, "c": None, "d": "red"})  # a record  # doctest: +SKIP
        """
        if raw_score or pred_contrib:  # (LightGBM's spellings)
            output_margin, pred_contribs = output_margin or raw_score, pred_contribs or pred_contrib
        if missing is None:  # (the model's own: NaN, or its estimator's missing=)
            missing = self._missing
        elif not isinstance(missing, (float, int, np.number)) or isinstance(missing, bool):
            raise InputError(f"missing must be a number, got {missing!r}"[:200])
        if pred_leaf or per_tree or pred_contribs or pred_interactions or background is not None:
            return self._other_output(X, pred_leaf, per_tree, pred_contribs, output_margin, missing, threads,
                                      pred_interactions, background)
        late = self._late
        if late is not None:  # forms building: a lazy build starts at its first small request
            late.poke(X)
        small_for = self._small_for
        # (The conditions are ordered and written for speed: a 1-row call takes 2 us in all.
        # A dtype of the kernel's is NumPy's own instance, so ``is`` tells; any other goes the
        # general way, which converts it.)
        if small_for is not None and type(X) is np.ndarray and X.dtype is not self._small_dtype \
                and X.dtype == self._small_dtype:
            # An equal dtype held by another object (an unpickled array's: arrays sent between
            # processes): a view with NumPy's own, which the lean path takes (else 8x the time).
            X = X.view(self._small_dtype)
        if small_for is not None and type(X) is np.ndarray and X.dtype is self._small_dtype \
                and missing != missing:
            shape = X.shape
            if len(shape) == 2 and shape[0] <= SMALL_ROWS and shape[1] == self._num_features:
                small, splits = small_for[shape[0]]
                if small is not None:
                    return self._small_call(small, splits, X, output_margin, threads)
            elif len(shape) == 2 and shape[1] == self._num_features:
                lean = self._lean_form(shape[0], threads)
                if lean is not None:
                    return self._small_call(lean.small, lean.small_splits, X, output_margin, 1)
        # A frame (services send a row or a few so) read by its schema's plan at once, without
        # as_rows' dispatch: a model with a lean path reads every input unhashed.
        kind = type(X)
        if small_for is None or kind is np.ndarray:
            rows = None
        elif kind is dict or kind is list:  # records (a service's JSON), read in C++ where they are plain
            rows = self._schemas.record_readers().read(X, self._small_dtype)
        else:
            rows = frame_rows(X, self._schemas, self._small_dtype, self._tuples and missing != missing)
        if type(rows) is np.ndarray and rows.dtype is self._small_dtype and missing != missing:
            # (a frame's or records' few rows, converted: the lean path's, with no check below)
            shape = rows.shape
            if shape[0] <= SMALL_ROWS and shape[1] == self._num_features:
                small, splits = small_for[shape[0]]
                if small is not None:
                    return self._small_call(small, splits, rows, output_margin, threads)
            elif shape[1] == self._num_features:  # (more: as an array of them goes)
                lean = self._lean_form(shape[0], threads)
                if lean is not None:
                    return self._small_call(lean.small, lean.small_splits, rows, output_margin, 1)
        elif type(rows) is list:  # a few rows as a frame's row tuples, which the lean path reads
            small, splits = small_for[len(rows)]
            # (its own ``reads_tuples`` asked: a plan installed meanwhile may have other calls)
            values = self._small_call(small, splits, rows, output_margin, threads) \
                if getattr(small, "reads_tuples", False) else None
            if values is not None:
                return values
            rows = frame_rows(X, self._schemas, self._small_dtype)  # (a value not a number: read so)
        threads_used = self.threads if threads is None else threads  # (None: all CPUs)
        if rows is None:
            # (a frame is on the host: asking it for device attributes looked for columns so
            # named, two thirds of a one-row pandas call)
            if type(X) is not np.ndarray and type(X).__module__.split(".")[0] not in FRAME_LIBRARIES \
                    and is_device_array(X):
                return self._predict_device(X, output_margin, missing)
            rows = as_rows(X, self.forest, self.main.input_dtype, self._schemas, threads_used)
        if rows.dtype is not self._small_dtype and rows.dtype == self._small_dtype:
            rows = rows.view(self._small_dtype)  # (an unpickled frame's block holds an equal dtype of another object)
        missing_value = None if missing != missing else _missing_value(missing)  # (NaN, the default: no call)
        if missing_value is not None:
            rows = np.where(rows == rows.dtype.type(missing_value), rows.dtype.type(np.nan), rows)
        if small_for is not None and rows.shape[0] <= SMALL_ROWS and rows.dtype is self._small_dtype \
                and rows.shape[1] == self._num_features and small_for[rows.shape[0]][0] is not None:
            # A few rows that arrived otherwise (a data frame, another dtype, a missing value):
            # converted, they are online scoring too, and now meet every condition of the lean path.
            small, splits = small_for[rows.shape[0]]
            return self._small_call(small, splits, rows, output_margin, threads)
        if small_for is not None and rows.dtype is self._small_dtype and rows.shape[1] == self._num_features:
            lean = self._lean_form(rows.shape[0], threads)
            if lean is not None:
                return self._small_call(lean.small, lean.small_splits, rows, output_margin, 1)
        form = self._answering(rows.shape[0])
        if form.input_dtype != rows.dtype:
            rows = rows.astype(form.input_dtype)
        margins = form.kernel.margins(rows, self.forest.num_outputs, threads_used)
        values = margins if output_margin else transforms.apply(self.forest, margins)
        return transforms.shape_output(self.forest, values)

    def _small_call(self, small, splits: bool, X: np.ndarray | list, output_margin: bool,
                    threads) -> np.ndarray | None:
        """Online scoring, a row or a few per call (``X``: rows the lean path takes, ``small``
        its function for that many rows): no thread split, no scratch, no checks the caller
        has not made.  None for row tuples (a list) that ``small`` does not read."""
        if threads is not None and check_threads(threads) == 1 and splits:
            got = small(X, not output_margin, 1)  # the trees on this thread
        else:
            # The kernel applies the transform itself where it can do so exactly.
            got = small(X, not output_margin)  # shaped as returned if applied
        if got is None:  # row tuples the call does not read (Kernel.small_calls)
            return None
        values, applied = got
        if output_margin or applied:
            return values
        margins = values.reshape(-1, 1) if self._flat else values
        return transforms.shape_output(self.forest, transforms.apply(self.forest, margins))

    def _lean_form(self, rows: int, threads) -> Form | None:
        """The form answering a call of ``rows`` rows (more than SMALL_ROWS) through its lean
        path, where the call runs on one thread (``threads``, else the compile option) and the
        path takes that many rows of this dtype (:attr:`Form.lean_rows`); else None."""
        if threads is None:
            threads = self.threads
        if type(threads) is not int or threads != 1 or rows <= SMALL_ROWS:  # (others: the general path's)
            return None
        form = self._answering(rows)
        if form.small is None or rows > form.lean_rows or form.input_dtype is not self._small_dtype:
            return None
        return form

    def _other_output(self, X, pred_leaf: bool, per_tree: bool, pred_contribs: bool, output_margin: bool,
                      missing, threads, pred_interactions: bool = False, background=None):
        """``predict(X, pred_leaf=True)``, ``per_tree=True``, ``pred_contribs=True`` or
        ``pred_interactions=True``: the rows through the compiled model of that output
        (:mod:`silvanforge.frontend.outputs`), or their contributions or interaction values,
        shaped as the library returns it."""
        if pred_leaf + per_tree + pred_contribs + pred_interactions > 1:
            raise InputError("predict takes one of pred_leaf, per_tree and pred_contribs (or pred_interactions) "
                             "at a time")
        if output_margin:
            raise InputError("output_margin applies to predictions, not to pred_leaf, per_tree, pred_contribs "
                             "or pred_interactions")
        if background is not None and not pred_contribs:
            raise InputError("background applies to pred_contribs (interventional SHAP values): "
                             "pass pred_contribs=True with it")
        if pred_contribs or pred_interactions:
            forest = self.forest
            if threads is not None:
                check_threads(threads)
            value = _missing_value(missing)  # (checked before the rows are read: predict's order)
            rows = as_rows(X, forest, np.dtype(forest.threshold_dtype), self._schemas)
            if value is not None:
                rows = np.where(rows == rows.dtype.type(value), rows.dtype.type(np.nan), rows)
            if pred_interactions:
                interactions.check(forest)
                with self._outputs_lock:  # (NumPy's path tables: the kernel's are laid out for it alone)
                    if self._interaction_tables is None:
                        self._interaction_tables = contributions.tables(forest)
                return interactions.shaped(forest, interactions.interactions(self._interaction_tables, rows, forest))
            if background is not None:
                return contributions.shaped(forest, interventional.contributions(
                    self._background_tables(background), rows, forest))
            kernel, tables = self._contribution_tables or self.prepare_contributions()
            phi = (shap_arrays.contributions(tables, kernel, rows, self.threads if threads is None else threads)
                   if kernel is not None else contributions.contributions(tables, rows, forest))
            return contributions.shaped(forest, phi)
        kind = "pred_leaf" if pred_leaf else "per_tree"
        # (built: no lock; its shaper made once, outputs.shaper)
        model, shape = self._outputs.get(kind) or self._output(kind)
        return shape(model.predict(X, missing=missing, threads=threads))

    def _background_tables(self, background) -> "interventional.Background":
        """The interventional tables of ``background`` (rows as ``predict`` takes them): the
        last background's where its values are the same, else made now and kept."""
        forest = self.forest
        why = interventional.refusal(forest)
        if why is not None:
            raise UnsupportedModelError(f"pred_contribs with a background: {why}")
        rows = as_rows(background, forest, np.dtype(forest.threshold_dtype), self._schemas)
        found = self._background
        if found is None or found.digest != interventional.digest(rows):
            with self._outputs_lock:
                found = self._background = interventional.background_tables(forest, rows)
        return found

    def prepare_contributions(self, table_bytes: int | None = None):
        """Build what ``predict(X, pred_contribs=True)`` reads now (else its first request
        does), or again with another budget: ``table_bytes`` bounds the tables precomputed
        for the model (default :data:`silvanforge.runtime.contributions.TABLE_BYTES`, 64 MB):
        symmetric trees' tables by leaf (a row then costs an add a feature of each tree), then
        leaf paths' pattern tables; what does not fit is computed a row at a time.  A target's
        compiled evaluator where one is installed (:mod:`silvanforge.runtime.shap_arrays`),
        else NumPy's (:mod:`silvanforge.runtime.contributions`).  A model loaded from an
        artifact (a file, a pickle, the code cache) that kept the kernel's tables takes them
        from it, where the kernel reads them as they were laid out; tables made here go into
        this model's code-cache entry.  Returns (kernel, tables)."""
        if table_bytes is not None and (isinstance(table_bytes, bool) or not isinstance(table_bytes, (int, np.integer))
                                        or table_bytes < 0):
            raise InputError(f"table_bytes must be a whole number of bytes, 0 or more, got {table_bytes!r}")
        budget = contributions.TABLE_BYTES if table_bytes is None else int(table_bytes)
        with self._outputs_lock:
            if self._contribution_tables is None or table_bytes is not None:
                forest = self.forest
                kernel = shap_arrays.kernel_for(self.target)
                saved, self._saved_contributions = self._saved_contributions, None
                flat = None
                if kernel is not None and saved is not None and table_bytes is None:
                    flat = shap_arrays.restored(saved[1], saved[0], kernel.arg_layout)
                made = flat is None
                if made and kernel is not None:
                    flat = shap_arrays.arrays(forest, budget, kernel=kernel)
                self._contribution_tables = ((kernel, flat) if flat is not None and shap_arrays.fits(flat, kernel)
                                             else (None, contributions.tables(forest, budget)))
                made = made and kernel is not None
            else:
                made = False
            tables = self._contribution_tables
        # (while forms are still building, the builder's own hook writes the entry once they are,
        # with these tables: writing it here would wait for them)
        if made and self._keep is not None and self._late is None:
            self._keep(self)
        return tables

    def output_model(self, kind: str) -> "CompiledForest":
        """The compiled model whose predictions are ``kind`` of this one ("pred_leaf",
        "per_tree"), compiled for the same target, CPU and threads at its first request."""
        return (self._outputs.get(kind) or self._output(kind))[0]

    def _output(self, kind: str) -> tuple:
        """(the compiled model of output ``kind``, the function shaping its margins as the
        library returns them), built at the first request."""
        with self._outputs_lock:
            built = self._outputs.get(kind)
            if built is None:
                saved = self._saved_outputs.get(kind)
                model = saved[1](self.forest) if saved is not None else None  # (an artifact's: nothing compiled)
                if model is None:
                    forest = outputs.forest_of(self.forest, kind)
                    o = self.options
                    opts = CompileOptions(target=o.target, cpu=o.cpu, threads=o.threads).resolved()
                    # (its own plan by request size: a lone row's form walks it alone)
                    model = CompiledForest(forest, *untuned_plan(forest, opts))
                built = self._outputs[kind] = (model, outputs.shaper(self.forest, kind))
                self._saved_outputs.pop(kind, None)  # (after: a save meanwhile sees one or the other)
        return built

    def _predict_device(self, X, output_margin: bool, missing) -> object:
        """``predict`` of a device array (:mod:`silvanforge.inputs.device`): read in place by a
        kernel with the :class:`~silvanforge.runtime.kernel.DeviceKernel` capability, the result on the
        same device as the same kind of array."""
        forest = self.forest
        if not all(isinstance(f.kernel, DeviceKernel) for f in self._plan[0]):
            raise InputError(f"predict got a device array ({type(X).__name__}), and the {self.target!r} target reads "
                             "rows from host memory: copy them to the host yourself (for CuPy, x.get()) "
                             "or compile for a target that reads device arrays (cuda)")
        if forest.hashed_categories:
            raise InputError("a model with hashed categorical features reads its categories on the host; "
                             "pass host rows")
        if missing == missing:
            raise InputError("missing= is not applied to device arrays: replace the value with NaN on the device")
        rows = device_rows(X, self._num_features, self.main.input_dtype, forest.wider_rows)
        n, k = rows.shape[0], forest.num_outputs
        form = self._answering(n)
        if form.input_dtype != rows.dtype:
            raise InputError(f"the form answering {n} rows reads {form.input_dtype.name} rows on the device, "
                             f"got {rows.dtype.name}: convert on the device")
        identity = forest.transform.name == "identity" and forest.transform.param("margin_divisor", 1.0) == 1.0
        finish = None if output_margin or identity else transforms.Finish(forest)
        result = form.kernel.device_predict(rows, k, finish)
        if self._flat and tuple(result.shape) == (n, 1):  # margins, or values the device transformed
            result = result.reshaped((n,))
        return like_input(result, rows)

    def show(self, level: str) -> str:
        """The main form's program at ``level``: hir, mir, lir or target; ``plan``: the bands of
        rows per call and the form answering each (and the tuning record's winners, if tuned)."""
        if level == "plan":
            return self.plan_text()
        return self.main.show(level)

    def plan_text(self) -> str:
        """The bands and their forms, which forms are built (never waits for them), and which
        outputs besides predictions are (:meth:`outputs_text`)."""
        return self._forms_text() + "\n" + self.outputs_text()

    def outputs_text(self) -> str:
        """Which outputs besides predictions this process has built for the model: each is built
        at its first request (or loaded then, where the model's trusted artifact kept it)."""
        said = [f"{kind}: " + (f"built ({len(built[0].forms)} programs)" if built is not None else
                               "saved (loaded at its first request)" if kind in self._saved_outputs else "not built")
                for kind, built in ((kind, self._outputs.get(kind)) for kind in ("pred_leaf", "per_tree"))]
        said.append("pred_contribs: " + ("built" if self._contribution_tables is not None else
                                         "saved (taken at its first request)" if self._saved_contributions is not None
                                         else "not built"))
        return "other outputs (each built at its first request): " + "; ".join(said)

    def _forms_text(self) -> str:
        head = "plan (tuned on this host)" if self.tuning is not None else "plan (untuned: the cost model's)"
        if self.cpu is not None:  # code for a fleet's CPU, not this host's
            head += f", code for cpu {self.cpu}"
        late = self._late
        forms, bands = self._plan
        if late is None:
            return head + ", every program built\n" + describe(bands, [f.text() for f in forms])
        if late.error is not None:
            how = f"not built: {type(late.error).__name__}: {str(late.error)[:120]}"
        elif late.mode == "lazy" and not late.started:
            how = f"not built yet: built in the background from the first request of up to {MID_MAX} rows"
        else:
            how = "building in the background"
        return (head + ", the main program built\n" + describe(bands, [f.text() + " (built)" for f in forms])
                + f"\nprograms for smaller requests: {how}; the main one answers every request until then")

    def summary(self) -> dict:
        f = self.forest
        return {"trees": f.num_trees, "max_depth": f.max_depth(), "features": f.num_features,
                "outputs": f.num_outputs, "target": self.target, "rep": self.rep,
                "schedule": self.schedule.to_text().replace("\n", "; ") or "none (its representation takes no schedule)", "padded": self.pad,
                "tile_size": self.tile_size, "reorder": self.reorder, "plan_min_ns": self.options.plan_min_ns,
                "probability_tiled_trees": sum(i is not None for i in self.tile_ids or []),
                "batch_size": self.batch_size, "threads": self.threads, "cpu": self.cpu or "native",
                # the lowering knobs (None: chosen by the lowering for the model)
                **self.options.lowering(), "rep_options": dict(self.options.rep_options),
                "plan": "; ".join(f"{b.text()} rows: {self.forms[b.form].options.rep}" for b in self.bands),
                "tuned": self.tuning is not None,
                "outputs_built": sorted(self._outputs) + (["pred_contribs"] if self._contribution_tables is not None else []),
                "compile_seconds": round(self.compile_seconds, 3)}

    # ---------------------------------------------------------------- saving
    def save(self, path: str | os.PathLike, key: str | bytes | None = None) -> None:
        """Write a self-contained artifact: the model, the options, the plan and each form's
        machine code (:mod:`silvanforge.artifact.archive`).  With ``key`` (or
        ``SILVANFORGE_ARTIFACT_KEY`` set) the artifact is signed, and a loader holding the same
        key runs its machine code instead of compiling again."""
        _store().save(self, path, key)

    def to_bytes(self, key: str | bytes | None = None) -> bytes:
        """The artifact :meth:`save` writes, in memory."""
        return _store().to_bytes(self, key)

    def __reduce__(self):
        # pickle, joblib and copy.deepcopy go through the artifact: a pickle is code the
        # unpickler runs anyway, so its machine code is trusted (fast on a matching host).
        # The loader imports this module, so it is looked up, not imported, here: a compiled
        # model is made by silvanforge.api or by that loader, both of which have loaded it.
        return sys.modules["silvanforge.artifact.store"].unpickle, (self.to_bytes(),)


def _missing_value(missing) -> float | None:
    """``predict``'s ``missing=`` as a number, or None for NaN (what the kernels treat as missing
    already); anything else is an InputError."""
    if missing != missing:
        return None
    try:
        return float(missing)
    except (TypeError, ValueError):
        raise InputError(f"missing must be a number, got {missing!r}") from None


def _store():
    """:mod:`silvanforge.artifact.store`, which writes and reads compiled models (so it imports
    this module): looked up, not imported, here.  A compiled model is made by
    :mod:`silvanforge.api`, the tuner or that store, each of which has loaded it."""
    return sys.modules["silvanforge.artifact.store"]


__all__ = ["CompiledForest"]

