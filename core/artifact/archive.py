"""Compiled-model artifacts on disk: what is in one, how it is checked, and when its machine code
may run.

An artifact is a zip of plain members: ``meta.json`` (the options, those of
:class:`silvanforge.options.CompileOptions` that decided the program, and the digests that bind
the code to its program), ``forest.npz`` (the model as arrays, never pickles), ``kernel.bin``
(the target's machine code), ``program.json`` and ``program.npz`` (what running that code
needs: its functions and buffers, so a trusted load lowers nothing), ``tiling.npz`` (a
profile-derived tiling, optional), ``plan.json`` (the bands of rows per call, the options of
each other form of the model and the tuning record: :mod:`silvanforge.plan.bands`), each other
form's ``form<N>.bin``, ``form<N>_program.json`` and ``form<N>_program.npz``,
``contributions.json`` and ``contributions.npz`` (SHAP contributions' tables, where built:
:func:`silvanforge.runtime.shap_arrays.saved`; like machine code, read only when trusted),
``pred_leaf.forge`` and ``per_tree.forge`` (the compiled models of those outputs, where built:
artifacts of their own, read only when trusted),
``manifest.json`` (the SHA-256 of every other member) and ``signature`` (an HMAC-SHA256 of
the manifest, when saved with a key).

Checks, in order, before anything is used: the zip's members, their compression (stored or
deflate only) and their declared sizes, before anything is inflated: each within what deflate
can produce from its compressed bytes, and all of them together, with the arrays inside the
``.npz`` members, within an inflation budget that grows with the file's size
(:func:`inflate_budget`), so a small file cannot make the loader allocate much; members are
inflated with a hard cap at their declared size; every member against the manifest (a
damaged file, or members mixed from two artifacts, is refused); ``meta.json``'s fields and types; each array's header against the
bytes it occupies; the forest's verifier and its fingerprint.

Trust: loading machine code runs it.  A manifest proves the members belong together, not who
made them, so the code runs only when the artifact is signed with the key the loader holds
(``key=``, the ``SILVANFORGE_ARTIFACT_KEY`` environment variable, or else the user's own key,
:mod:`silvanforge.artifact.userkey`, which the first save makes: the user's own artifacts load their code
at once), or the caller vouches for it (``trust_code=True``).  Otherwise the forest is compiled again from
its arrays and a warning says why: slower, never unsafe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import io
import json
import os
import re
import tempfile
import warnings
import zipfile
import zlib

import numpy as np

from silvanforge.artifact import userkey
from silvanforge.errors import ArtifactError, ArtifactWarning, InputError
from silvanforge.ir import hir, hir_io
from silvanforge.options import LOWERING_FIELDS, WIDTHS

FORMAT = 2
OLD_FORMATS = (1,)  # no manifest: their forests load, their machine code never runs
KEY_ENV = "SILVANFORGE_ARTIFACT_KEY"
MANIFEST, SIGNATURE = "manifest.json", "signature"
# The compiled models of other outputs (pred_leaf, per_tree) built before a save: each an
# artifact of its own, unsigned (key=False: the outer manifest covers its bytes, and its code
# runs only where the outer artifact's does).
OUTPUT_MEMBERS = ("pred_leaf.forge", "per_tree.forge")
MEMBERS = ("meta.json", "forest.npz", "kernel.bin", "tiling.npz", "program.json", "program.npz",
           "plan.json", "contributions.json", "contributions.npz", "hashed_columns.bin", *OUTPUT_MEMBERS)
# A compiled model's other forms (silvanforge.plan.bands): form<N>.bin, form<N>_program.json/.npz, and
# form<N>_tiling.npz where the form's tiling or node order came from a profile.
FORM_MEMBER = re.compile(r"form(\d{1,3})(\.bin|_program\.json|_program\.npz|_tiling\.npz)")
# Members of artifacts saved before plans (a form for one-row requests): read, and ignored.
LEGACY_MEMBERS = ("one_row.bin", "one_row_program.json", "one_row_program.npz")
# meta.json is a few hundred bytes; anything near this is padding, not options.
META_MAX_BYTES = 1 << 20
# Deflate cannot expand data more than about 1032 to 1: a member declaring more is a lie.
MAX_DEFLATE_RATIO = 1040
# How much an artifact may inflate to (its members, and the arrays in its .npz members, which
# are held at once): real artifacts deflate 2-8 to 1, so a budget of 64 times the file plus
# 32 MiB never refuses one, while a file of under 1 MB cannot take more than about 100 MB.
# Whoever loads artifacts that compress better (huge padded buffers) sets this variable to
# the bytes they allow.
INFLATE_FLOOR, INFLATE_RATIO = 32 << 20, 64
MAX_INFLATE_ENV = "SILVANFORGE_ARTIFACT_MAX_INFLATE"
_READ_CHUNK = 1 << 20

# meta.json: field -> the types it may have.
_META_FIELDS = {
    "format": (int,), "silvanforge": (str,), "target": (str,), "rep": (str,), "schedule": (str,),
    "batch_size": (int, type(None)), "threads": (int, type(None)), "fingerprint": (str,),
    "pad": (bool,), "tile_size": (int,), "reorder": (str, type(None)), "probability_tiling": (bool,),
    # the named CPU the machine code is for (CompileOptions.cpu; None: the host's own)
    "cpu": (str, type(None)),
    "lir": (str,), "kernel_sha256": (str,),
    # where a node order came from ("profile" or "cover", silvanforge.plan.forms.Form.order_by)
    "node_order": (str, type(None)),
    # the untuned plan's bar (CompileOptions.plan_min_ns; None: the default)
    "plan_min_ns": (float, int, type(None)),
    # the lowering knobs of silvanforge.options.CompileOptions (None: the lowering chose)
    "vector_walks": (bool, type(None)), "split_rows": (bool, type(None)), "set_columns": (bool, type(None)),
    "leaf_self_loops": (bool, type(None)), "per_tree_walk_depth": (bool, type(None)),
    "feature_width": (str, type(None)), "index_width": (str, type(None)),
    "inline_leaves": (bool, type(None)), "packed_default_left": (bool, type(None)),
    # the representation's own options (CompileOptions.rep_options): name -> JSON scalar
    "rep_options": (dict,),
}
_WIDTH_FIELDS = ("feature_width", "index_width")


@dataclasses.dataclass
class Artifact:
    meta: dict
    forest: hir.Forest
    blob: bytes  # machine code, b"" when none was saved
    tiling: dict | None
    signed: bool  # the manifest's signature checked out under the loader's key
    has_manifest: bool
    # What running the machine code needs without lowering (silvanforge.ir.lir_io): the
    # program's JSON and its model buffers; None in artifacts without it.
    program: tuple[bytes, dict] | None = None
    # plan.json (bands and the other forms' options), where saved; None in older artifacts.
    plan: dict | None = None
    # The other forms' saved parts by index: machine code, program JSON and buffers.
    forms: dict = dataclasses.field(default_factory=dict)
    # The other forms' profile-derived tilings by index (form<N>_tiling.npz's arrays).
    form_tilings: dict = dataclasses.field(default_factory=dict)
    # SHAP contributions' tables (silvanforge.runtime.shap_arrays.saved): their record, parsed
    # from contributions.json, and arrays; None where none were saved.
    contributions: tuple[dict, dict] | None = None
    # The machine code of the kernel of computed columns (silvanforge.inputs.hashed_rows), b"" if none.
    hashed_columns: bytes = b""
    # output kind ("pred_leaf", "per_tree") -> the bytes of its compiled model's artifact
    outputs: dict = dataclasses.field(default_factory=dict)


def _key(key, create: bool = False) -> bytes | None:
    """The key to sign or check with: ``key``, else ``SILVANFORGE_ARTIFACT_KEY``, else the user's
    own (:mod:`silvanforge.artifact.userkey`; made by the first save, ``create``); ``False``:
    none, and none looked up (an artifact inside another, whose manifest covers it)."""
    if key is False:
        return None
    if key is None:
        key = os.environ.get(KEY_ENV) or None
    if key is None:
        if create:  # a save: a key file that is refused stops it, with why
            return userkey.load(create=True)
        try:  # a load or a pickle: such a key signs nothing, and the artifact compiles again
            return userkey.load(create=False)
        except InputError as exc:
            warnings.warn(ArtifactWarning(f"{exc}; artifacts are read as unsigned"), stacklevel=4)
            return None
    key = key.encode() if isinstance(key, str) else bytes(key)
    if not key:
        raise InputError("an artifact key cannot be empty")
    return key


def _sign(key: bytes, manifest: bytes) -> str:
    return hmac.new(key, manifest, hashlib.sha256).hexdigest()


# ------------------------------------------------------------------------------------- writing
def write(path, meta: dict, arrays: dict[str, dict[str, np.ndarray]], blob: bytes,
          extra: dict[str, bytes] | None = None, key=None) -> None:
    """Write an artifact atomically: ``arrays`` maps member names (``forest.npz``,
    ``tiling.npz``, ``program.npz``) to their arrays, ``extra`` names raw members
    (``program.json``); signed when a key is given or set in the environment."""
    members = _members(meta, arrays, blob, extra, key, create_key=True)  # a save makes the user's key
    path = os.fspath(path)
    # A temporary file of this call's own beside the target (threads and processes saving to
    # one path never share it), renamed over the target once complete.
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            _zip(f, members)
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)  # never a half-written artifact under the real name
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def to_bytes(meta: dict, arrays: dict[str, dict[str, np.ndarray]], blob: bytes,
             extra: dict[str, bytes] | None = None, key=None) -> bytes:
    """The artifact :func:`write` would write, in memory (pickling a compiled model)."""
    buf = io.BytesIO()
    _zip(buf, _members(meta, arrays, blob, extra, key))
    return buf.getvalue()


def json_bytes(value) -> bytes:
    """A JSON member's bytes (plan.json)."""
    return json.dumps(value, sort_keys=True).encode()


def _zip(f, members: dict[str, bytes]) -> None:
    # One timestamp for every member: the same compiled model makes the same bytes (a code-cache
    # entry rebuilt is the entry it replaces; artifacts diff and deduplicate).
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, data)


def _members(meta: dict, arrays: dict[str, dict[str, np.ndarray]], blob: bytes, extra, key,
             create_key: bool = False) -> dict[str, bytes]:
    meta = dict(meta, format=FORMAT, kernel_sha256=hashlib.sha256(blob).hexdigest())
    members = {"meta.json": json.dumps(meta).encode()}
    for name, group in arrays.items():
        buf = io.BytesIO()
        np.savez(buf, **group)
        members[name] = buf.getvalue()
    members["kernel.bin"] = blob
    members.update(extra or {})
    manifest = json.dumps({name: hashlib.sha256(data).hexdigest() for name, data in members.items()},
                          sort_keys=True).encode()
    members[MANIFEST] = manifest
    k = _key(key, create=create_key)
    if k is not None:
        members[SIGNATURE] = _sign(k, manifest).encode()
    return members


def _read_umask() -> int:
    # Read once, at import: os.umask sets as it reads, which threads saving at once must not see.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# mkstemp creates files 0600; an artifact (and a predictions file) gets the permissions any new
# file would.
UMASK = _UMASK = _read_umask()


# ------------------------------------------------------------------------------------- reading
def read(source, key=None) -> Artifact:
    """Read and check an artifact (a path or its bytes); every failure is an ArtifactError."""
    name = "the artifact bytes" if isinstance(source, (bytes, bytearray, memoryview)) else os.fspath(source)
    try:
        return _read(source, name, _key(key))
    except ArtifactError:
        raise
    except FileNotFoundError:
        raise ArtifactError(f"compiled model not found: {name}") from None
    except MemoryError:
        raise ArtifactError(f"{name}: too large to load in the memory available") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, ValueError,
            KeyError, TypeError, UnicodeDecodeError, NotImplementedError, RuntimeError) as exc:
        raise ArtifactError(f"{name}: not a SilvanForge compiled model, or damaged "
                            f"({type(exc).__name__}: {str(exc)[:200]})") from None


def _read(source, name: str, key: bytes | None) -> Artifact:
    if isinstance(source, (bytes, bytearray, memoryview)):
        raw = bytes(source)
    else:
        with open(source, "rb") as f:
            raw = f.read()
    # Exactly the zip written: nothing before its first member, nothing after its directory
    # (zip readers skip both, so a padded or prefixed file would otherwise pass).
    if raw[:4] != b"PK\x03\x04" or raw[-22:-18] != b"PK\x05\x06":
        raise ArtifactError(f"{name}: not a SilvanForge compiled model, or padded or truncated")
    budget = _Budget(name, inflate_budget(len(raw)))
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        infos = {i.filename: i for i in z.infolist()}
        unknown = sorted(n for n in set(infos) - set(MEMBERS) - set(LEGACY_MEMBERS) - {MANIFEST, SIGNATURE}
                         if not FORM_MEMBER.fullmatch(n))
        if unknown:
            raise ArtifactError(f"{name}: members {unknown[:4]} are not part of an artifact of this "
                                "SilvanForge: saved by a newer version, or edited")
        for info in infos.values():
            _check_sizes(info, name)
        if "meta.json" not in infos:
            raise ArtifactError(f"{name}: not a SilvanForge compiled model (no meta.json)")
        if infos["meta.json"].file_size > META_MAX_BYTES:
            raise ArtifactError(f"{name}: meta.json is {infos['meta.json'].file_size} bytes, "
                                f"past {META_MAX_BYTES}: damaged or padded")
        # Every member is held at once: their declared sizes, all together, before any is inflated.
        budget.take(sum(i.file_size for i in infos.values()), "its members")
        data = {n: _inflate(z, infos[n], name) for n in infos}
    meta = _meta(data["meta.json"], name)
    has_manifest = MANIFEST in data
    if has_manifest:
        _check_manifest(data, name)
    elif meta["format"] not in OLD_FORMATS:
        raise ArtifactError(f"{name}: no manifest of its members: damaged")
    signed = has_manifest and key is not None and SIGNATURE in data and \
        hmac.compare_digest(data[SIGNATURE], _sign(key, data[MANIFEST]).encode())
    for needed in ("forest.npz", "kernel.bin"):
        if needed not in data:
            raise ArtifactError(f"{name}: member {needed} is missing: damaged")
    blob = data["kernel.bin"]
    if has_manifest and hashlib.sha256(blob).hexdigest() != meta.get("kernel_sha256"):
        raise ArtifactError(f"{name}: the machine code is not the one its options were saved with: "
                            "damaged or mixed")
    try:
        forest = hir_io.from_arrays(load_npz(data["forest.npz"], f"{name}: forest.npz", budget))
        hir.verify(forest)
    except ArtifactError:
        raise
    except Exception as exc:  # noqa: BLE001 - any inconsistency in the stored arrays
        raise ArtifactError(f"{name}: the stored model is corrupt ({type(exc).__name__}: {str(exc)[:200]})") from None
    if forest.fingerprint() != meta["fingerprint"]:
        raise ArtifactError(f"{name}: the stored model does not match its fingerprint (corrupt or edited)")
    tiling = None
    if meta["probability_tiling"]:
        if "tiling.npz" not in data:
            raise ArtifactError(f"{name}: member tiling.npz is missing: damaged")
        tiling = load_npz(data["tiling.npz"], f"{name}: tiling.npz", budget)
    program = None
    if "program.json" in data and "program.npz" in data:
        program = (data["program.json"], load_npz(data["program.npz"], f"{name}: program.npz", budget))
    plan = None
    if "plan.json" in data:
        try:
            plan = json.loads(data["plan.json"].decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ArtifactError(f"{name}: plan.json is not JSON: damaged") from None
        if not isinstance(plan, dict):
            raise ArtifactError(f"{name}: plan.json is not an object: damaged")
    forms, form_tilings = {}, {}
    for member in data:
        match = FORM_MEMBER.fullmatch(member)
        if match and match.group(2) == ".bin":
            index = int(match.group(1))
            parts = (f"form{index}.bin", f"form{index}_program.json", f"form{index}_program.npz")
            if not all(p in data for p in parts):
                raise ArtifactError(f"{name}: form {index} is missing a part: damaged")
            forms[index] = (data[parts[0]], data[parts[1]], load_npz(data[parts[2]], f"{name}: {parts[2]}", budget))
        elif match and match.group(2) == "_tiling.npz":
            form_tilings[int(match.group(1))] = load_npz(data[member], f"{name}: {member}", budget)
    contributions = None
    if "contributions.json" in data and "contributions.npz" in data:
        try:
            record = json.loads(data["contributions.json"].decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise ArtifactError(f"{name}: contributions.json is not JSON: damaged") from None
        contributions = (record, load_npz(data["contributions.npz"], f"{name}: contributions.npz", budget))
    outputs = {member.removesuffix(".forge"): bytes(data[member]) for member in OUTPUT_MEMBERS if member in data}
    return Artifact(meta, forest, blob, tiling, signed, has_manifest, program, plan, forms, form_tilings,
                    contributions, bytes(data.get("hashed_columns.bin", b"")), outputs)


def _meta(raw: bytes, name: str) -> dict:
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ArtifactError(f"{name}: meta.json is not JSON: damaged") from None
    if not isinstance(meta, dict):
        raise ArtifactError(f"{name}: meta.json is not an object: damaged")
    fmt = meta.get("format")
    if fmt != FORMAT and fmt not in OLD_FORMATS:
        raise ArtifactError(f"{name}: artifact format {fmt!r} is not {FORMAT}: saved by another "
                            "version of SilvanForge? compile the model again")
    meta.setdefault("kernel_sha256", "")
    return check_meta_fields(meta, name, _META_FIELDS)


# The fields of a form's entry in plan.json: its options, as meta.json records the main form's.
_FORM_FIELDS = {field: _META_FIELDS[field] for field in (
    "target", "rep", "schedule", "batch_size", "threads", "pad", "tile_size", "reorder", "cpu", "plan_min_ns", "lir",
    "probability_tiling", "node_order", *LOWERING_FIELDS, "rep_options")}


def check_meta_fields(meta: dict, name: str, fields: dict | None = None) -> dict:
    """``meta`` with each of ``fields`` (default: a plan form's) of the types it may have, a
    missing optional one set to its default; an ArtifactError naming the first that is not."""
    for field, types in (_FORM_FIELDS if fields is None else fields).items():
        value = meta.get(field, _default(field))
        if value is ...:
            raise ArtifactError(f"{name}: meta.json has no {field!r} field: damaged")
        if not isinstance(value, types) or (value is not None and (bool in types) != isinstance(value, bool)):
            raise ArtifactError(f"{name}: meta.json field {field!r} is {type(value).__name__}: damaged")
        if field == "rep_options" and not all(v is None or isinstance(v, (bool, int, float, str))
                                              for v in value.values()):
            raise ArtifactError(f"{name}: meta.json field 'rep_options' holds a value that is not a scalar: damaged")
        if field == "node_order" and value not in (None, "profile", "cover"):
            raise ArtifactError(f"{name}: meta.json field 'node_order' is {value!r}, not profile or cover: damaged")
        if field in _WIDTH_FIELDS and value not in (None, *WIDTHS):
            raise ArtifactError(f"{name}: meta.json field {field!r} is {value!r}, not one of "
                                f"{', '.join(WIDTHS)}: damaged")
        meta[field] = value
    return meta


def _default(field: str):
    # Fields an artifact of format 1 may lack, and the lowering knobs older artifacts lack (they
    # were lowered with the defaults, None).
    if field in LOWERING_FIELDS:
        return None
    return {"pad": False, "tile_size": 1, "reorder": None, "probability_tiling": False,
            "rep_options": {}, "plan_min_ns": None, "node_order": None, "cpu": None}.get(field, ...)


def _check_manifest(data: dict, name: str) -> None:
    try:
        manifest = json.loads(data[MANIFEST].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ArtifactError(f"{name}: the manifest is not JSON: damaged") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{name}: the manifest is not an object: damaged")
    present = {n for n in data if n not in (MANIFEST, SIGNATURE)}
    if set(manifest) != present:
        raise ArtifactError(f"{name}: members {sorted(present ^ set(manifest))} do not match the "
                            "manifest: damaged or mixed")
    for member, digest in manifest.items():
        if not isinstance(digest, str) or not hmac.compare_digest(
                hashlib.sha256(data[member]).hexdigest().encode(), digest.encode()):
            raise ArtifactError(f"{name}: member {member} does not match the manifest: damaged or "
                                "mixed from another artifact")


def inflate_budget(file_size: int) -> int:
    """The most bytes an artifact of ``file_size`` bytes may inflate to, its members and their
    arrays together (``SILVANFORGE_ARTIFACT_MAX_INFLATE`` overrides)."""
    override = os.environ.get(MAX_INFLATE_ENV)
    if override:
        try:
            return int(override)
        except ValueError:
            raise InputError(f"{MAX_INFLATE_ENV}={override!r} is not a number of bytes") from None
    return INFLATE_FLOOR + INFLATE_RATIO * file_size


class _Budget:
    """Bytes an artifact may still inflate to; each claim is made before the bytes exist."""

    def __init__(self, name: str, limit: int):
        self.name, self.limit, self.left = name, limit, limit

    def take(self, nbytes: int, what: str) -> None:
        if nbytes > self.left:
            raise ArtifactError(
                f"{self.name}: {what} would inflate to {nbytes} bytes, past the {self.limit} allowed "
                f"for an artifact of this size (a decompression bomb, or damaged; {MAX_INFLATE_ENV} "
                "raises the limit for artifacts you trust)")
        self.left -= nbytes


def _check_sizes(info: zipfile.ZipInfo, name: str) -> None:
    """A member's compression and declared sizes, checked before it is read: only stored and
    deflate (bzip2 and lzma expand far more), and sizes each method can produce."""
    if info.compress_type == zipfile.ZIP_DEFLATED:
        if info.file_size > MAX_DEFLATE_RATIO * max(info.compress_size, 1):
            raise ArtifactError(f"{name}: member {info.filename} claims {info.file_size} bytes "
                                f"from {info.compress_size}: damaged")
    elif info.compress_type == zipfile.ZIP_STORED:
        if info.file_size != info.compress_size:
            raise ArtifactError(f"{name}: member {info.filename} has inconsistent sizes: damaged")
    else:
        raise ArtifactError(f"{name}: member {info.filename} is compressed with method "
                            f"{info.compress_type}, not one an artifact uses: edited")


def _inflate(z: zipfile.ZipFile, info: zipfile.ZipInfo, name: str) -> bytes | bytearray:
    """A member's bytes, inflated in bounded chunks into a buffer of its declared (budgeted)
    size, never past it.  The ``.npz`` members stay a bytearray: copying one to ``bytes``
    would hold it twice."""
    buf = bytearray(info.file_size)
    view, done = memoryview(buf), 0
    with z.open(info) as f:
        while done < info.file_size:
            got = f.readinto(view[done:done + _READ_CHUNK])
            if not got:
                break
            done += got
        if done != info.file_size or f.read(1):
            raise ArtifactError(f"{name}: member {info.filename} is not {info.file_size} bytes: damaged")
    view.release()
    return buf if info.filename.endswith(".npz") else bytes(buf)


def load_npz(raw: bytes, name: str, budget: _Budget | None = None) -> dict[str, np.ndarray]:
    """The arrays of an .npz held in ``raw``, checked as the artifact's members are (method,
    declared sizes, together within ``budget``, before any is read), each header checked
    against the bytes the array occupies before it is allocated (a header may claim any
    shape), never unpickling."""
    out = {}
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        infos = z.infolist()
        for info in infos:
            if not info.filename.endswith(".npy"):
                raise ArtifactError(f"{name}: unexpected member {info.filename}")
            _check_sizes(info, name)
        if budget is not None:
            budget.take(sum(i.file_size for i in infos), f"the arrays of {name.rsplit(': ', 1)[-1]}")
        for info in infos:
            with z.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    raise ArtifactError(f"{name}: {info.filename} has .npy version {version}")
                if dtype.hasobject:
                    raise ArtifactError(f"{name}: {info.filename} holds Python objects: refused")
                nbytes = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
                if nbytes > info.file_size:
                    raise ArtifactError(f"{name}: {info.filename} claims {nbytes} bytes of data in "
                                        f"{info.file_size}: damaged")
            with z.open(info) as f:
                out[info.filename[:-4]] = np.lib.format.read_array(f, allow_pickle=False)
    return out
