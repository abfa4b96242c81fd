"""ctrbox from Python: build a job from the same keys as the command line, train it, and use
the trained model (docs/python.md).

    import ctrbox
    job = ctrbox.Job({"model": {"mlp": [64, 32]}}, data="train.tsv", eval_data="test.tsv",
                     model_dir="m", fresh=True, train__threads=2)
    report = job.train(progress=print)          # the dict `ctrbox train` prints
    model = ctrbox.Model("m")
    model.eval("test.tsv")["auc"]
    model.predict(records=["\\t".join(fields)])  # or keys=..., dense=... arrays

Errors raise ctrbox.Error with the message the command line prints. Training releases the
GIL; Ctrl-C stops it as the command line's first Ctrl-C does (after the pass in training, the
model saved) and raises ctrbox.Interrupted, which carries the report.
"""
import json
import os
import subprocess
import sys

# OpenBLAS falls back to its SSE kernels on CPUs it does not recognise (VMs that hide the
# model). The command line restarts itself with the fitting kernels then (util/blas.h,
# SelectFittingCores); a Python process cannot, so the package asks OpenBLAS in a child
# process what it would choose and sets OPENBLAS_CORETYPE before OpenBLAS is loaded (numpy loads
# it too: import ctrbox first), the same choice: the same model bit for bit as `ctrbox train`.
# Once OpenBLAS is loaded its choice stands, and the module warns if it is the slow one.
_PRE_AVX = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Opteron",
            "Opteron_SSE3", "Barcelona", "Nano", "Bobcat"}


def _choose_blas_kernels():
    if "OPENBLAS_CORETYPE" in os.environ or not sys.platform.startswith("linux"):
        return
    try:
        with open("/proc/self/maps") as f:
            if "libopenblas" in f.read():
                return  # already loaded (numpy was imported first): too late to choose
        flags = set()
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
        if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
            fitting = "SkylakeX"
        elif {"avx2", "fma"} <= flags:
            fitting = "Haswell"
        else:
            return
        probe = ("import ctypes; l = ctypes.CDLL('libopenblas.so.0'); "
                 "l.openblas_get_corename.restype = ctypes.c_char_p; "
                 "print(l.openblas_get_corename().decode())")
        core = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return
    if core in _PRE_AVX:
        os.environ["OPENBLAS_CORETYPE"] = fitting
        os.environ["CTRBOX_BLAS_RESTARTED"] = core  # the module logs the choice


_choose_blas_kernels()

try:
    import numpy as np  # noqa: E402  (after the kernel choice)
except ImportError as e:  # another python3 first on PATH (pyenv, a venv without numpy)
    raise ImportError(
        "ctrbox needs numpy, which this Python ({}) does not have: run it with Debian's "
        "/usr/bin/python3 (scripts/setup installs python3-numpy for it), or a venv made with "
        "--system-site-packages from it (docs/python.md)".format(sys.executable)) from e

from . import _ctrbox  # noqa: E402

__all__ = ["Error", "Interrupted", "Job", "Model", "feature_keys", "gen", "set_log_level", "config_reference"]


class Error(RuntimeError):
    """A ctrbox error: a bad key or value, unreadable or malformed input, a failed job. The
    message is the command line's ("train.threads: bad value ...", "FILE:LINE: ...")."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a train job; the model trained so far was saved. `report` is the train
    report (with "interrupted": true)."""

    def __init__(self, report):
        super().__init__("interrupted: stopped after {} examples".format(report.get("examples", 0)))
        self.report = report


def _call(fn, *args):
    try:
        return fn(*args)
    except _ctrbox.StatusError as e:
        raise Error(str(e)) from None


def _text(value, key, origin):
    """A value as the command line writes it (the YAML reader's scalars)."""
    if value is None:
        raise Error("{}: {} has no value (give one, or leave the key out for its default)".format(origin, key))
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        # Items joined by ','; an item that is a list of values (a group of
        # model.shared_slots or model.dense_groups: [[0, 5], [3, 7]]) by '+'.
        items = []
        for v in value:
            if isinstance(v, (list, tuple)) and v and all(
                    not isinstance(m, (dict, list, tuple)) and m is not None for m in v):
                items.append("+".join(_text(m, key, origin) for m in v))
            elif isinstance(v, (dict, list, tuple)) or v is None:
                raise Error("{}: {}: expected a list of values (or of groups of values)".format(origin, key))
            else:
                items.append(_text(v, key, origin))
        return ",".join(items)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    return str(value)


_GRAPH_KEYS = ("main", "views", "ops", "label", "slots", "dense", "schedule", "device", "max_row_keys")


def _flatten(value, prefix, origin, out):
    """(key, value, origin) for every leaf of a nested dict: {"train": {"threads": 2}} is
    train.threads=2, as in a YAML job file."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise Error("{}: key {!r} is not a string".format(origin, k))
            _flatten(v, prefix + "." + k if prefix else k, origin, out)
    else:
        out.append((prefix, _text(value, prefix, origin), origin))


def _ids(values, what, signed=False):
    """values (an array or a list) as a flat uint64 array of ids. Floats, bools and other
    non-integers are refused: a float id 1.7 would otherwise become 1. signed: negative
    integers are taken as the bit patterns of uint64 keys (an int64 column of model keys)."""
    a = np.asarray(values)
    if a.size == 0:
        return np.zeros(0, dtype=np.uint64)
    if a.dtype.kind == "O":  # Python ints beyond int64 (or other objects): each one checked
        return np.asarray([_id(v, what) for v in a.reshape(-1)], dtype=np.uint64)
    if a.dtype.kind == "u" or (a.dtype.kind == "i" and (signed or not (a < 0).any())):
        return np.ascontiguousarray(a.astype(np.uint64, casting="unsafe").reshape(-1))
    if a.dtype.kind == "i":
        raise TypeError("{}: ids are unsigned integers; {} is negative".format(what, a[a < 0].flat[0]))
    raise TypeError("{}: ids must be integers, not {} (a {} id would be truncated)".format(
        what, a.dtype, "float" if a.dtype.kind == "f" else a.dtype.name))


def _id(value, what):
    """One id of a list row: an int (a Python or numpy integer, not a bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError("{}: ids must be integers, not {} ({!r})".format(what, type(value).__name__, value))
    if value < 0:
        raise TypeError("{}: ids are unsigned integers; {} is negative".format(what, value))
    if value >= 1 << 64:
        raise TypeError("{}: id {} does not fit in 64 bits (ids are below 2^64)".format(what, value))
    return int(value)


def _paths(p):
    if p is None:
        return []
    if isinstance(p, (str, os.PathLike)):
        return [os.fspath(p)]
    return [os.fspath(x) for x in p]


def _build_job(what, config=None, overrides=None, path="", data=None, eval_data=None, format=None,
               model_dir=None, fresh=False, resume=False):
    """The checked job of these sources, as the CLI builds it (cli/config.h, BuildJobConfig)."""
    keys = []
    graph = None
    if isinstance(config, dict):
        features = config.get("features")
        if isinstance(features, dict) and any(k in features for k in _GRAPH_KEYS):
            # The feature graph is structured (docs/features.md): passed whole, as JSON text
            # (a YAML subset); features.hashing stays a plain key.
            graph = {k: v for k, v in features.items() if k in _GRAPH_KEYS}
            rest = {k: v for k, v in features.items() if k not in _GRAPH_KEYS}
            config = dict(config)
            if rest:
                config["features"] = rest
            else:
                del config["features"]
        _flatten(config, "", what + " config", keys)
    for name, value in (overrides or {}).items():
        _flatten(value, name.replace("__", "."), "{}({}=...)".format(what, name), keys)
    s = _ctrbox.JobSources()
    s.config_path = path
    for key in keys:
        s.add_key(*key)
    s.data, s.eval_data = _paths(data), _paths(eval_data)
    s.format = format or ""
    s.model_dir = os.fspath(model_dir) if model_dir else ""
    s.fresh, s.resume = bool(fresh), bool(resume)
    if graph is not None:
        s.features_text = json.dumps(graph, indent=1)
        s.features_origin = what + " config's features"
    return _call(_ctrbox.build_job, s)


class Job:
    """A train job. `config` is a dict of job keys (nested like the YAML file, or dotted), a
    path to a YAML job file, or None; keyword arguments override single keys, with "__" for
    "." (train__threads=2) — or pass dotted keys with **{"train.threads": 2}. data, eval_data,
    format, model_dir, fresh and resume are the command line's flags. Every key, value and
    cross-key rule is checked here, with the command line's messages."""

    def __init__(self, config=None, *, data=None, eval_data=None, format=None, model_dir=None,
                 fresh=False, resume=False, **overrides):
        path = ""
        if config is not None and not isinstance(config, dict):
            if not isinstance(config, (str, os.PathLike)):
                raise TypeError("ctrbox.Job: config is a dict, a YAML file's path or None, not {}".format(
                    type(config).__name__))
            path = os.fspath(config)
        self._job = _build_job("ctrbox.Job", config, overrides, path, data, eval_data, format, model_dir,
                               fresh, resume)

    @property
    def model_dir(self):
        return self._job.model_dir or None

    def train(self, progress=None):
        """Trains and returns the report (the JSON object `ctrbox train` prints, as a dict).
        progress(event) is called with {"event": "progress", "examples", "seconds",
        "examples_per_s", "auc", "logloss"} every train.progress_seconds, and with each
        pass's metrics line ({"event": "pass", ...}); an exception it raises stops the job
        and is raised here. Ctrl-C raises Interrupted after the clean stop."""
        if progress is not None and not callable(progress):
            raise TypeError("progress must be callable")
        text, interrupted = _call(_ctrbox.train, self._job, progress)
        report = json.loads(text)
        if interrupted:
            raise Interrupted(report)
        return report


class Model:
    """A saved model (a --model-dir), opened once. Keyword arguments are job keys as for Job:
    storage.memory_budget and storage.ssd_dir keep a large model's rows out of core, as
    `ctrbox eval` does; train.threads and train.batch_size set how predictions run. `config`
    (a dict or a YAML path, as for Job) may hold a feature graph: eval then reads raw views
    through it (docs/features.md)."""

    def __init__(self, model_dir, config=None, **overrides):
        path = ""
        if config is not None and not isinstance(config, dict):
            path = os.fspath(config)
        job = _build_job("ctrbox.Model", config, overrides, path, model_dir=model_dir)
        self._model = _call(_ctrbox.Model, job)
        self.model_dir = os.fspath(model_dir)

    @property
    def manifest(self):
        """The model's MANIFEST (spec, files, keys, digest) as a dict."""
        return json.loads(self._model.manifest())

    @property
    def num_slots(self):
        return self._model.num_slots

    @property
    def num_dense(self):
        return self._model.num_dense

    @property
    def embedding_dim(self):
        return self._model.dim

    def eval(self, data=None, format=None):
        """The eval report (`ctrbox eval`'s dict: auc, logloss, copc, ...) on files or
        directories; with none, on the generated test rows."""
        return json.loads(_call(self._model.eval, _paths(data), format or ""))

    def predict(self, keys=None, dense=None, offsets=None, records=None, format=None, hashed=False,
                data=None, id_column=None):
        """Click probabilities, float32, one per row.

        records: text lines in `format` (a label is optional; None: the format the model was
        trained on, as its MANIFEST records it, else criteo); a malformed one gets NaN.
        keys: a (rows, num_slots) integer array, one id per slot; or a flat array with
        offsets (rows * num_slots + 1 entries: row r's slot s holds keys[offsets[r*S+s] :
        offsets[r*S+s+1]]), for slots with several ids or none; or a list of rows, each a
        list of num_slots entries (an id, a list of ids, or None). The ids are raw feature
        ids, keyed per slot as the slot and libsvm formats key them; hashed=True takes
        model keys (feature_keys) instead. dense: (rows, num_dense) float array, raw values
        as in the files (required when the model has dense inputs). A key the model does
        not hold contributes nothing, as in `ctrbox predict`.

        data with id_column: raw views (files) scored through the Model's feature graph (open
        it with the job's config): {"id": [...], "probability": float32 array} for the rows
        the graph keeps, in input order, as `ctrbox predict --id-column` writes them."""
        if data is not None or id_column is not None:
            if data is None or id_column is None:
                raise TypeError("predict through a feature graph takes data=... and id_column=...")
            if keys is not None or records is not None:
                raise TypeError("predict takes data=... or records=... or keys=..., one of them")
            ids, probs = _call(self._model.predict_rows, _paths(data), str(id_column))
            return {"id": ids, "probability": probs}
        if records is not None:
            if keys is not None or dense is not None or offsets is not None:
                raise TypeError("predict takes records or keys/dense, not both")
            if isinstance(records, str):
                records = [records]
            return _call(self._model.predict_text, list(records), format or "")
        if keys is None:
            raise TypeError("predict needs records=... or keys=...")
        slots = self.num_slots
        if offsets is not None:
            flat = _ids(keys, "predict: keys", signed=hashed)
            offsets = np.ascontiguousarray(offsets, dtype=np.uint32).reshape(-1)
            rows = (len(offsets) - 1) // slots if slots else 0
        elif isinstance(keys, np.ndarray):
            if keys.ndim != 2 or keys.shape[1] != slots:
                raise Error("predict: keys has shape {}; the model has {} slots: give (rows, {}) or "
                            "offsets".format(keys.shape, slots, slots))
            rows = keys.shape[0]
            flat = _ids(keys, "predict: keys", signed=hashed)
            offsets = np.arange(rows * slots + 1, dtype=np.uint32)
        else:
            flat, offsets = [], [0]
            for r, row in enumerate(keys):
                if len(row) != slots:
                    raise Error("predict: row {} has {} slots; the model has {}".format(r, len(row), slots))
                for entry in row:
                    if entry is None:
                        pass
                    elif isinstance(entry, (list, tuple, np.ndarray)):
                        flat.extend(_id(k, "predict: row {}".format(r)) for k in entry)
                    else:
                        flat.append(_id(entry, "predict: row {}".format(r)))
                    offsets.append(len(flat))
            rows = len(keys)
            flat = np.asarray(flat, dtype=np.uint64)
            offsets = np.asarray(offsets, dtype=np.uint32)
        if dense is None:
            if self.num_dense:
                raise Error("predict: the model has {} dense inputs: give dense=(rows, {}) values".format(
                    self.num_dense, self.num_dense))
            dense = np.zeros((rows, 0), dtype=np.float32)
        dense = np.ascontiguousarray(dense, dtype=np.float32)
        if dense.ndim != 2 or dense.shape != (rows, self.num_dense):
            raise Error("predict: dense has shape {}; expected ({}, {})".format(dense.shape, rows, self.num_dense))
        bad = np.argwhere(~np.isfinite(dense))
        if len(bad):
            r, c = bad[0]
            raise Error("predict: dense value {} at row {}, column {} is not a finite number (the "
                        "data readers refuse such values too)".format(dense[r, c], r, c))
        return _call(self._model.predict_arrays, flat, offsets, dense.reshape(-1), rows, not hashed)

    def keys(self, slot, values):
        """The keys this model holds for raw values of `slot` (as feature_keys, through the
        model's model.shared_slots groups and, with model.slot_dims, tagged with the slot's
        table): what lookup takes. A uint64 numpy array."""
        if not isinstance(values, str) and np.asarray(values).dtype.kind not in "UO":
            values = _ids(values, "keys")
        return _call(self._model.keys, int(slot), values)

    def lookup(self, keys):
        """Each model key's row (keys from Model.keys, or feature_keys for a model without
        model.slot_dims): {"embedding": (n, dim) float32, "show", "click", "has_embedding"};
        with model.slot_dims dim is the widest table's and a row of a smaller table is zero
        past its own dimension. A key the model does not hold has show 0 and no embedding
        (zeros)."""
        return _call(self._model.lookup, _ids(keys, "lookup", signed=True))

    def embeddings(self, keys):
        """The keys' embeddings, (n, dim) float32 (zeros for a key without one)."""
        return self.lookup(keys)["embedding"]


def feature_keys(slot, values):
    """The model keys of one slot's raw values, as the text formats make them: integers as
    the slot and libsvm formats read them, strings as Criteo's categorical fields (slot 0 is
    C1). A uint64 numpy array."""
    if not isinstance(values, str) and np.asarray(values).dtype.kind not in "UO":
        values = _ids(values, "feature_keys")
    return _call(_ctrbox.feature_keys, int(slot), values)


def gen(out, rows=100000, format="criteo", seed=1, vocab_scale=1.0, zipf=0.0, threads=0):
    """Writes a synthetic click log with a planted model (`ctrbox gen`); returns its report
    (rows, bytes, ctr, oracle_auc, num_slots, num_dense)."""
    a = _ctrbox.GenArgs()
    a.out, a.rows, a.format, a.seed = os.fspath(out), int(rows), format, int(seed)
    a.vocab_scale, a.zipf, a.threads = float(vocab_scale), float(zipf), int(threads)
    return json.loads(_call(_ctrbox.gen, a))


def set_log_level(level):
    """ctrbox's log lines on standard error: "debug", "info" (default), "warning", "error", "off"."""
    _call(_ctrbox.set_log_level, level)


def config_reference():
    """Every job key with its default and meaning (`ctrbox config`), as Markdown table rows."""
    return _ctrbox.config_reference()
