"""The plugin manager: entry-point discovery, registration and the lookups the core needs.

The core never imports a plugin by name; everything arrives through the entry-point groups
``silvanforge.importers``, ``silvanforge.representations`` and ``silvanforge.targets``.  A plugin
that fails to import or whose hooks do not match the specs is recorded with its error and
left out, so one broken third-party package never takes the others down.
"""

from __future__ import annotations

import dataclasses
import threading
from importlib import metadata

import pluggy

from silvanforge import hookspecs
from silvanforge.errors import InputError, PluginError
from silvanforge.plan.memo import memoised
from silvanforge.rep import ProgramRepresentation, check_class, price_of
from silvanforge.scheduler.canned import CANNED
from silvanforge.target import check_class as check_target_class

GROUPS = ("silvanforge.importers", "silvanforge.representations", "silvanforge.targets")


@dataclasses.dataclass
class PluginRecord:
    """What ``forge plugins`` shows about one entry point."""

    group: str
    name: str
    distribution: str
    version: str
    provides: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None


class PluginRegistry:
    """A pluggy manager plus the records of what was discovered."""

    def __init__(self, discover: bool = True):
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.records: list[PluginRecord] = []
        self._targets: dict = {}  # target class -> its one instance (see target())
        if discover:
            self._discover()

    def _discover(self) -> None:
        for group in GROUPS:
            for ep in metadata.entry_points(group=group):
                dist = ep.dist
                rec = PluginRecord(
                    group=group,
                    name=ep.name,
                    distribution=dist.metadata["Name"] if dist else "?",
                    version=dist.version if dist else "?",
                )
                name = f"{group}:{ep.name}"
                try:
                    self.register(ep.load(), name=name)
                except Exception as exc:  # a broken plugin is reported, not fatal
                    rec.error = f"{type(exc).__name__}: {exc}"
                    if self.pm.get_plugin(name) is not None:  # drop hooks registered before the error
                        self.pm.unregister(name=name)
                self.records.append(rec)
        for rec in self.records:
            if rec.error is None:
                rec.provides = self._provides(self.pm.get_plugin(f"{rec.group}:{rec.name}"))

    def register(self, plugin, name: str | None = None) -> None:
        """Register a plugin object or module; pluggy validates its hook signatures here, and
        a hook the specs do not declare (a misspelt name) is rejected too."""
        if name is not None and self.pm.get_plugin(name) is not None:
            return
        self.pm.register(plugin, name=name)
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError:
            self.pm.unregister(plugin)
            raise

    def _provides(self, plugin) -> list[str]:
        out: list[str] = []
        for hook in ("silvanforge_formats", "silvanforge_targets", "silvanforge_representation_types"):
            impl = getattr(plugin, hook, None)
            if impl is not None:
                try:
                    out += [getattr(v, "name", v) for v in impl()]
                except Exception as exc:  # pragma: no cover - a plugin bug, reported not raised
                    out.append(f"<error: {exc}>")
        return out

    # ------------------------------------------------------------------ lookups
    @property
    def hook(self):
        return self.pm.hook

    def formats(self) -> list[str]:
        return sorted({f for lst in self.hook.silvanforge_formats() for f in lst})

    def representations(self) -> list[str]:
        return sorted(rep_types(self.hook))

    def rep_class(self, rep: str):
        """The class of representation ``rep`` (:mod:`silvanforge.rep`)."""
        self.check_representation(rep)
        return rep_types(self.hook)[rep]

    def check_rep_options(self, rep_options) -> None:
        """Raise InputError unless every key of ``rep_options`` (``CompileOptions.rep_options``)
        is an option an installed representation lists, with a value it takes."""
        types = rep_types(self.hook)
        owners = {key: name for name, cls in types.items() for key in cls.option_keys}
        for key in rep_options:
            if key not in owners:
                listed = ", ".join(f"{key} ({name})" for key, name in sorted(owners.items())) or "none"
                raise InputError(f"no installed representation takes the option {key!r} (options: {listed})")
        for cls in types.values():
            mine = {k: v for k, v in rep_options.items() if k in cls.option_keys}
            if mine:
                cls.check_options(mine)

    def rep_kind(self, rep: str) -> str:
        """``walk`` (a :class:`silvanforge.rep.Representation`: the core walks the trees) or
        ``program`` (a :class:`silvanforge.rep.ProgramRepresentation` builds its own program)."""
        return "program" if issubclass(self.rep_class(rep), ProgramRepresentation) else "walk"

    def rep_costs(self, forest, target_kind: str, batch_size,
                  rep_options=None, vectors=None) -> list[tuple[str, float | None, str]]:
        """``(rep, ns a row or None, why)``: every installed representation's ``cost`` (under
        its part of ``rep_options``, ``CompileOptions.rep_options``, for the vector unit
        ``vectors``: :meth:`vectors`), asked once a forest, kind, batch size, options and
        vector unit within a compile."""
        key = ("rep_costs", target_kind, batch_size, repr(sorted((rep_options or {}).items())),
               None if vectors is None else vectors.key)
        return list(memoised(forest, key, lambda: self._rep_costs(forest, target_kind, batch_size, rep_options,
                                                                  vectors)))

    def vectors(self, target: str, cpu: str | None = None):
        """The vector unit of ``target``'s code for ``cpu`` (None: this host), as its
        :meth:`silvanforge.target.Target.vectors` says; what the estimates are asked about."""
        return self.target(target).vectors(cpu)

    def _rep_costs(self, forest, target_kind: str, batch_size, rep_options=None, vectors=None):
        costs = []
        for name, cls in rep_types(self.hook).items():
            ns, why = price_of(cls, forest, target_kind, batch_size, rep_options, vectors)
            costs.append((name, ns, why if why is not None else "" if ns is not None else "chosen only by name"))
        return costs

    def targets(self) -> list[str]:
        return sorted(target_types(self.hook))

    def target(self, name: str):
        """The instance of target ``name`` (:class:`silvanforge.target.Target`): one a class, made
        on first use, so what it finds once (a device, the host) is kept; a PluginError names
        the installed ones where ``name`` is not among them."""
        found = target_types(self.hook)
        cls = found.get(name)
        if cls is None:
            raise PluginError(f"unknown target {name!r}; installed: {', '.join(sorted(found)) or 'none'}")
        instance = self._targets.get(cls)
        if instance is None:
            instance = self._targets[cls] = cls()
        return instance

    def check_representation(self, rep: str) -> None:
        known = self.representations()
        if rep not in known:
            raise PluginError(
                f"unknown representation {rep!r}; installed: {', '.join(known) or 'none'}"
            )

    def check_target(self, target: str) -> None:
        self.target(target)  # raises: unknown target
        ok, why = self.target_available(target)
        if not ok:
            raise PluginError(f"target {target!r} cannot run on this machine: {why}")

    def default_target(self) -> str:
        """The target a compile that names none uses: the host itself, an installed target of
        kind cpu that runs here (the first by name where several do; ``target=`` picks another)."""
        hosts = [t for t in self.targets() if self.target_kind(t) == "cpu"]
        running = [t for t in hosts if self.target_available(t)[0]]
        if running:
            return running[0]
        why = "; ".join(f"{t}: {self.target_available(t)[1]}" for t in hosts)
        raise PluginError("no target plugin for this machine's CPU " + (f"runs here ({why})" if hosts else
                          "is installed (pip install -r requirements.txt installs the shipped ones; "
                          "forge plugins lists what is found)"))

    def target_kind(self, target: str) -> str:
        """``cpu`` or ``gpu`` (:attr:`silvanforge.target.Target.kind`)."""
        return self.target(target).kind

    def schedules(self) -> dict:
        """Named schedules, name -> function ``(forest, batch_size) -> Schedule``: the core's
        canned ones and those plugins add (the ``silvanforge_schedules`` hook)."""
        found = dict(CANNED)
        for named in self.hook.silvanforge_schedules():
            for name, make in (named or {}).items():
                if name in found and found[name] is not make:
                    raise PluginError(f"two schedules are named {name!r} (the core's or a plugin's)")
                found[name] = make
        return found

    def target_available(self, target: str) -> tuple[bool, str]:
        """The target's :meth:`~silvanforge.target.Target.can_run_here`; a check that raises is a
        reason too (``forge plugins`` shows it), never an error."""
        if target not in self.targets():
            return False, "no installed plugin provides this target"
        try:
            ok, why = self.target(target).can_run_here()
        except Exception as exc:
            return False, f"availability check failed: {exc}"
        return bool(ok), str(why)


def _by_name(lists, check, kind: str) -> dict:
    """The classes of a hook's lists by name, each ``check``-ed; two of one name are an error."""
    found = {}
    for lst in lists:
        for cls in lst or ():
            check(cls)
            if cls.name in found and found[cls.name] is not cls:
                raise PluginError(f"two plugins provide a {kind} named {cls.name!r}")
            found[cls.name] = cls
    return found


def rep_types(hook) -> dict:
    """The representation classes the plugins list (``silvanforge_representation_types``), by
    name, each checked against :class:`silvanforge.rep.Representation`."""
    return _by_name(hook.silvanforge_representation_types(), check_class, "representation")


def target_types(hook) -> dict:
    """The target classes the plugins list (``silvanforge_targets``), by name, each checked
    against :class:`silvanforge.target.Target`."""
    return _by_name(hook.silvanforge_targets(), check_target_class, "target")


_registry: PluginRegistry | None = None
_lock = threading.Lock()


def registry() -> PluginRegistry:
    """The process-wide registry, discovered once on first use."""
    global _registry
    with _lock:
        if _registry is None:
            _registry = PluginRegistry()
        return _registry


def reset_registry() -> None:
    """Forget the discovered plugins (tests that install plugins at run time use this)."""
    global _registry
    with _lock:
        _registry = None

