"""Tests of the Python module (python/ctrbox), run by CTest (`python_module`) against the build
tree: PYTHONPATH=build/python, CTRBOX_BIN=build/ctrbox. The module is checked against the
command line: the same job gives the same model (digest), eval the same metrics, predict the
same probabilities."""
import json
import os
import signal
import subprocess
import sys
import threading

import ctrbox  # before numpy: ctrbox chooses OpenBLAS's kernels before it is loaded
import numpy as np
import pytest

CTRBOX = os.environ.get("CTRBOX_BIN", os.path.join(os.path.dirname(__file__), "..", "build", "ctrbox"))
SMALL = {"model": {"mlp": [32, 16], "embedding_dim": 8}, "train": {"threads": 2, "batch_size": 256},
         "pipeline": {"pass_examples": 4000}}


def cli(*args, stdin=None):
    p = subprocess.run([CTRBOX, *args], capture_output=True, text=True, input=stdin)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    train = ctrbox.gen(d / "train.tsv", rows=20000, seed=3)
    ctrbox.gen(d / "test.tsv", rows=4000, seed=4)
    slots = ctrbox.gen(d / "train.slots", rows=12000, format="slots", seed=5)
    return {"dir": d, "train": str(d / "train.tsv"), "test": str(d / "test.tsv"),
            "slots": str(d / "train.slots"), "gen": train, "slots_gen": slots}


@pytest.fixture(scope="module")
def trained(data):
    """A model trained from Python, and its report."""
    model_dir = data["dir"] / "model"
    report = ctrbox.Job(SMALL, data=data["train"], eval_data=data["test"], model_dir=model_dir,
                        fresh=True).train()
    return model_dir, report


def test_gen_reports_the_planted_model(data):
    g = data["gen"]
    assert g["rows"] == 20000 and g["num_slots"] == 26 and g["num_dense"] == 13
    assert 0.6 < g["oracle_auc"] < 1.0
    with open(data["train"]) as f:
        assert sum(1 for _ in f) == 20000


def test_bad_keys_and_values_raise_the_cli_messages(tmp_path):
    with pytest.raises(ctrbox.Error, match="unknown configuration key 'train.thread'"):
        ctrbox.Job({"train": {"thread": 2}})
    with pytest.raises(ctrbox.Error, match=r"ctrbox.Job\(train__threads=...\): bad value 'x' for train.threads"):
        ctrbox.Job(train__threads="x")
    with pytest.raises(ctrbox.Error, match="model.mlp has no value"):
        ctrbox.Job({"model": {"mlp": None}})
    with pytest.raises(ctrbox.Error, match="ckpt.dir"):
        ctrbox.Job(resume=True).train()
    with pytest.raises(ctrbox.Error, match="no such file"):
        ctrbox.Job(tmp_path / "missing.yaml")
    yaml = tmp_path / "job.yaml"
    yaml.write_text("model:\n  mlp: [16]\ntrain:\n  batch_size: -3\n")
    with pytest.raises(ctrbox.Error, match=r"job.yaml:4: bad value '-3' for train.batch_size"):
        ctrbox.Job(yaml)
    # A YAML file and overrides together, dotted keys through **.
    yaml.write_text("model:\n  mlp: [16]\ntrain:\n  batch_size: 3\n")
    job = ctrbox.Job(yaml, **{"train.batch_size": 64}, model_dir=tmp_path / "m", model__wide=np.bool_(True))
    assert job.model_dir == str(tmp_path / "m")
    with pytest.raises(TypeError):
        ctrbox.Job(42)


def test_python_train_equals_the_cli(data, trained, tmp_path):
    model_dir, report = trained
    assert report["examples"] == 20000
    assert report["test_auc"] > 0.55
    cli_dir = tmp_path / "cli"
    args = ["train", "--data", data["train"], "--eval-data", data["test"], "--model-dir", str(cli_dir), "--fresh",
            "--set", "model.mlp=32,16", "--set", "model.embedding_dim=8", "--set", "train.threads=2",
            "--set", "train.batch_size=256", "--set", "pipeline.pass_examples=4000"]
    cli_report = json.loads(cli(*args).strip().splitlines()[-1])
    assert cli_report["digest"] == report["digest"]
    assert cli_report["test_auc"] == report["test_auc"]


def test_progress_gets_running_metrics_and_every_pass(data, tmp_path):
    events = []
    report = ctrbox.Job(SMALL, data=data["train"], model_dir=tmp_path / "m",
                        train__progress_seconds=0.001).train(progress=events.append)
    passes = [e for e in events if e["event"] == "pass"]
    progress = [e for e in events if e["event"] == "progress"]
    assert len(passes) == report["passes"] == 5
    assert sum(p["pass_examples"] for p in passes) == passes[-1]["examples"] == 20000
    assert progress and all(0 < e["examples"] <= 20000 for e in progress)
    assert all(e["examples_per_s"] > 0 for e in progress)
    # A file's size is known: the share done and the seconds left come with each update.
    assert all(0 < e["fraction"] <= 1 and e["eta_seconds"] >= 0 for e in progress)


def test_an_exception_in_progress_stops_the_job_and_is_raised(data, tmp_path):
    class Stop(Exception):
        pass

    def progress(event):
        if event["event"] == "pass":
            raise Stop("enough")

    with pytest.raises(Stop, match="enough"):
        ctrbox.Job(SMALL, data=data["train"], model_dir=tmp_path / "m").train(progress=progress)


def test_ctrl_c_stops_after_a_pass_and_saves(data, tmp_path):
    # SIGINT to this process while train runs: Python's handler raises KeyboardInterrupt on
    # the main thread, which the module turns into the job's clean stop.
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    events = []
    job = ctrbox.Job(SMALL, data=[data["train"]] * 20, model_dir=tmp_path / "m")
    timer.start()
    with pytest.raises(ctrbox.Interrupted) as stopped:
        job.train(progress=events.append)
    timer.cancel()
    report = stopped.value.report
    assert report["interrupted"] is True
    assert 0 < report["examples"] < 20 * 20000
    model = ctrbox.Model(tmp_path / "m")
    assert model.manifest["trained_examples"] == report["examples"]


def test_a_ctrl_c_as_the_job_ends_is_raised_as_interrupted_not_later(data, tmp_path):
    # Issue 45: a Ctrl-C in the job's last moments (after the module's last look at signals)
    # was lost: train returned normally and a bare KeyboardInterrupt came at the next
    # statement. SIGINT from the last pass's callback lands then, nearly always after the last
    # look; it is delivered as Interrupted, with the report, and nothing is left pending.
    def progress(event):
        if event["event"] == "pass":
            signal.raise_signal(signal.SIGINT)

    job = ctrbox.Job(SMALL, data=data["train"], model_dir=tmp_path / "m",
                     **{"pipeline.pass_examples": 10**6})
    with pytest.raises(ctrbox.Interrupted) as stopped:
        job.train(progress=progress)
    assert stopped.value.report["examples"] == 20000
    for _ in range(1000):  # a pending KeyboardInterrupt would be raised in this loop
        pass
    assert ctrbox.Model(tmp_path / "m").manifest["trained_examples"] == 20000


def test_model_eval_and_predict_equal_the_cli(data, trained):
    model_dir, report = trained
    model = ctrbox.Model(model_dir, train__threads=2)
    assert model.num_slots == 26 and model.num_dense == 13 and model.embedding_dim == 8
    assert model.manifest["digest"] == report["digest"]
    ev = model.eval(data["test"])
    cli_ev = json.loads(cli("eval", "--model-dir", str(model_dir), "--data", data["test"]).strip().splitlines()[-1])
    for k in ("auc", "auc_exact", "logloss", "copc", "examples"):
        assert ev[k] == cli_ev[k], k
    with open(data["test"]) as f:
        lines = f.read().splitlines()[:500]
    lines[7] = "not a record"
    p = model.predict(records=lines)
    assert p.dtype == np.float32 and p.shape == (500,)
    cli_p = cli("predict", "--model-dir", str(model_dir), "--set", "data.max_error_rate=1",
                stdin="\n".join(lines) + "\n").split()
    assert np.isnan(p[7]) and cli_p[7] == "nan"
    # The CLI prints each float as the shortest decimal that reads back as it: bit for bit.
    expect = np.array([float(x) for x in cli_p], dtype=np.float32)
    ok = ~np.isnan(expect)
    np.testing.assert_array_equal(p[ok], expect[ok])
    # The same rows as arrays: Criteo's categorical strings through feature_keys, the dense
    # values as written (empty = 0). Compared on the same rows in the same minibatches: BLAS
    # may round a row differently when the matrix around it differs.
    sub = [l for l in lines[:40] if l != "not a record"]
    expect_sub = model.predict(records=sub)
    np.testing.assert_allclose(expect_sub, np.concatenate([p[:7], p[8:40]]), rtol=1e-5)
    fields = [l.split("\t") for l in sub]
    dense = np.array([[float(x) if x else 0.0 for x in f[1:14]] for f in fields], dtype=np.float32)
    keys = np.stack([ctrbox.feature_keys(s, [f[14 + s] for f in fields]) for s in range(26)], axis=1)
    np.testing.assert_array_equal(model.predict(keys=keys, dense=dense, hashed=True), expect_sub)
    # Without labels, as predict accepts.
    np.testing.assert_array_equal(model.predict(records=[l.split("\t", 1)[1] for l in sub]), expect_sub)

def test_an_interaction_model_trains_and_predicts_as_the_cli(data, tmp_path):
    """DeepFM + DCN-v2 (low rank) + DLRM dots from a nested dict: the CLI's model, bit for bit."""
    shape = {"model": {**SMALL["model"], "wide": True, "fm": True, "dot": True, "cross_layers": 2,
                       "cross_rank": 8}}
    report = ctrbox.Job({**SMALL, **shape}, data=data["train"], eval_data=data["test"],
                        model_dir=tmp_path / "py", fresh=True).train()
    cli_report = json.loads(cli(
        "train", "--data", data["train"], "--eval-data", data["test"], "--model-dir", str(tmp_path / "cli"),
        "--fresh", "--set", "model.mlp=32,16", "--set", "model.embedding_dim=8", "--set", "train.threads=2",
        "--set", "train.batch_size=256", "--set", "pipeline.pass_examples=4000", "--set", "model.wide=true",
        "--set", "model.fm=true", "--set", "model.dot=true", "--set", "model.cross_layers=2",
        "--set", "model.cross_rank=8").strip().splitlines()[-1])
    assert cli_report["digest"] == report["digest"]
    assert cli_report["test_auc"] == report["test_auc"] > 0.55
    # 13 + 26 x 8 = 221 inputs, 325 dots; two rank-8 cross layers.
    assert report["dense_params"] == (546 * 32 + 32) + (32 * 16 + 16) + 17 + 2 * (2 * 221 * 8 + 221)
    model = ctrbox.Model(tmp_path / "py")
    assert model.manifest["spec"]["model"]["cross_rank"] == 8
    with open(data["test"]) as f:
        lines = f.read().splitlines()[:200]
    expect = np.array([float(x) for x in cli("predict", "--model-dir", str(tmp_path / "py"),
                                             stdin="\n".join(lines) + "\n").split()])
    np.testing.assert_allclose(model.predict(records=lines), expect, rtol=2e-6)


def test_towers_and_experts_from_nested_lists_train_as_the_cli(data, tmp_path):
    """AIBox towers with dense groups given as lists of lists, over DCN-Mix cross layers: the
    CLI's model (groups written as text there), bit for bit."""
    shape = {"model": {**SMALL["model"], "towers": 2, "dense_groups": [[0, 1, 2, 3, 4, 5, 6], ["7-12"]],
                       "cross_layers": 1, "cross_rank": 4, "cross_experts": 2}}
    report = ctrbox.Job({**SMALL, **shape}, data=data["train"], eval_data=data["test"],
                        model_dir=tmp_path / "py", fresh=True).train()
    cli_report = json.loads(cli(
        "train", "--data", data["train"], "--eval-data", data["test"], "--model-dir", str(tmp_path / "cli"),
        "--fresh", "--set", "model.mlp=32,16", "--set", "model.embedding_dim=8", "--set", "train.threads=2",
        "--set", "train.batch_size=256", "--set", "pipeline.pass_examples=4000", "--set", "model.towers=2",
        "--set", "model.dense_groups=0-6,7-12", "--set", "model.cross_layers=1", "--set", "model.cross_rank=4",
        "--set", "model.cross_experts=2").strip().splitlines()[-1])
    assert cli_report["digest"] == report["digest"]
    assert cli_report["test_auc"] == report["test_auc"] > 0.55
    assert "2 towers x MLP 32-16" in report["model_shape"]
    assert ctrbox.Model(tmp_path / "py").manifest["spec"]["model"]["dense_groups"] == [list(range(7)),
                                                                                      list(range(7, 13))]
    with pytest.raises(ctrbox.Error, match="model.dense_groups: expected a list of values"):
        ctrbox.Job({"model": {"dense_groups": [[0, [1]]]}})


def test_slot_dims_train_as_the_cli_and_lookup_reads_each_table(data, tmp_path):
    """model.slot_dims from a list: the CLI's model bit for bit; Model.keys gives the keys of a
    slot's table, whose rows lookup reads at the table's width (zero past it)."""
    shape = {"model": {**SMALL["model"], "slot_dims": ["0-9:24", "10+12:4"]}}
    report = ctrbox.Job({**SMALL, **shape}, data=data["train"], eval_data=data["test"],
                        model_dir=tmp_path / "py", fresh=True).train()
    cli_report = json.loads(cli(
        "train", "--data", data["train"], "--eval-data", data["test"], "--model-dir", str(tmp_path / "cli"),
        "--fresh", "--set", "model.mlp=32,16", "--set", "model.embedding_dim=8", "--set", "train.threads=2",
        "--set", "train.batch_size=256", "--set", "pipeline.pass_examples=4000",
        "--set", "model.slot_dims=0-9:24,10+12:4").strip().splitlines()[-1])
    assert cli_report["digest"] == report["digest"]
    assert cli_report["test_auc"] == report["test_auc"] > 0.55
    assert "(0-9 x 24, 10 x 4, 11 x 8, 12 x 4, 13-25 x 8)" in report["model_shape"]
    m = ctrbox.Model(tmp_path / "py")
    assert m.embedding_dim == 24  # the widest table's
    with open(data["train"]) as f:
        fields = [l.rstrip("\n").split("\t") for l in f.read().splitlines()[:200]]
    for slot, dim in ((0, 24), (10, 4), (11, 8)):
        values = sorted({r[14 + slot] for r in fields if r[14 + slot]})[:20]
        got = m.lookup(m.keys(slot, values))
        assert got["has_embedding"].all(), slot
        assert got["embedding"][:, :dim].any(axis=1).all(), slot
        assert not got["embedding"][:, dim:].any(), slot
    with pytest.raises(ctrbox.Error, match="slot 26 but the model has 26 slots"):
        m.keys(26, ["x"])


def test_predict_from_arrays_equals_predict_from_records(data, tmp_path):
    g = data["slots_gen"]
    slots, dense_n = g["num_slots"], g["num_dense"]
    model_dir = tmp_path / "slots"
    ctrbox.Job(SMALL, data=data["slots"], format="slots", model_dir=model_dir,
               **{"data.num_slots": slots, "data.num_dense": dense_n}).train()
    model = ctrbox.Model(model_dir)
    with open(data["slots"]) as f:
        lines = f.read().splitlines()[:300]
    # Parse the slot format here: label [dense:...] slot:key ...
    rows, dense = [], np.zeros((len(lines), dense_n), dtype=np.float32)
    for r, line in enumerate(lines):
        row = [[] for _ in range(slots)]
        for tok in line.split()[1:]:
            if tok.startswith("dense:"):
                dense[r] = [float(x) for x in tok[6:].split(",")]
            else:
                s, k = tok.split(":")
                row[int(s)].append(int(k))
        rows.append(row)
    from_records = model.predict(records=lines, format="slots")
    from_lists = model.predict(keys=[[v or None for v in row] for row in rows], dense=dense)
    flat = np.array([k for row in rows for v in row for k in v], dtype=np.uint64)
    offsets = np.concatenate([[0], np.cumsum([len(v) for row in rows for v in row])])
    from_csr = model.predict(keys=flat, offsets=offsets, dense=dense)
    np.testing.assert_array_equal(from_lists, from_records)
    np.testing.assert_array_equal(from_csr, from_records)
    with pytest.raises(ctrbox.Error, match="dense inputs"):
        model.predict(keys=flat, offsets=offsets)
    bad = offsets.copy()
    bad[-1] += 1
    with pytest.raises(ctrbox.Error, match="the offsets end at"):
        model.predict(keys=flat, offsets=bad, dense=dense)
    bad[5], bad[6] = bad[6] + 1, bad[6]
    with pytest.raises(ctrbox.Error, match="offsets decrease at entry 6"):
        model.predict(keys=flat, offsets=bad, dense=dense)

    # A dense value that is not finite is named, not scored as NaN.
    for value in (np.nan, np.inf):
        d = dense.copy()
        d[3, 1] = value
        with pytest.raises(ctrbox.Error, match="dense value .* at row 3, column 1 is not a finite"):
            model.predict(keys=flat, offsets=offsets, dense=d)
    # An id of 2^64 or more is named, whatever holds it.
    too_big = [[None] * slots for _ in range(1)]
    too_big[0][0] = 1 << 64
    with pytest.raises(TypeError, match="does not fit in 64 bits"):
        model.predict(keys=too_big, dense=dense[:1])
    with pytest.raises(TypeError, match="does not fit in 64 bits"):
        model.predict(keys=[1 << 64] + [0] * (slots - 1), offsets=np.arange(slots + 1), dense=dense[:1])


def test_lookup_reads_the_saved_rows(data, tmp_path):
    # A one-slot libsvm model: its keys are feature_keys(0, ids) of the file's ids.
    lib = tmp_path / "l.svm"
    ctrbox.gen(lib, rows=5000, format="libsvm", seed=9)
    lib_dir = tmp_path / "lib"
    ctrbox.Job(SMALL, data=lib, format="libsvm", model_dir=lib_dir, fresh=True).train()
    m = ctrbox.Model(lib_dir)
    with open(lib) as f:
        ids = sorted({int(t.split(":")[0]) for l in f for t in l.split()[1:]})[:50]
    keys = ctrbox.feature_keys(0, np.array(ids, dtype=np.uint64))
    assert keys.dtype == np.uint64
    np.testing.assert_array_equal(keys, ctrbox.feature_keys(0, ids))
    absent = ctrbox.feature_keys(0, [2**63 + 12345])
    got = m.lookup(np.concatenate([keys, absent, keys[:1]]))
    assert got["embedding"].shape == (52, m.embedding_dim)
    assert got["show"][-2] == 0 and not got["has_embedding"][-2]
    assert not got["embedding"][-2].any()
    np.testing.assert_array_equal(got["embedding"][-1], got["embedding"][0])
    assert (got["show"][:50] > 0).all()
    assert got["has_embedding"][:50].any()
    np.testing.assert_array_equal(m.embeddings(keys), got["embedding"][:50])
    # Criteo's categorical values are strings: the same key as the text reader makes.
    assert ctrbox.feature_keys(3, ["68fd1e64"])[0] != ctrbox.feature_keys(4, ["68fd1e64"])[0]


def test_float_and_bool_ids_are_refused_not_truncated(data, trained):
    # Issue 45: a float id 1.7 became key 1 in predict, lookup and feature_keys.
    m = ctrbox.Model(trained[0])
    slots = m.num_slots
    dense = np.zeros((1, m.num_dense), dtype=np.float32)
    row = [[1.7] + [None] * (slots - 1)]
    with pytest.raises(TypeError, match="row 0: ids must be integers, not float"):
        m.predict(keys=row, dense=dense)
    with pytest.raises(TypeError, match="ids must be integers, not float64"):
        m.predict(keys=np.full((1, slots), 1.7), dense=dense)
    with pytest.raises(TypeError, match="ids must be integers, not float64"):
        m.predict(keys=[1.7] * slots, offsets=np.arange(slots + 1), dense=dense)
    with pytest.raises(TypeError, match="not bool"):
        m.predict(keys=[[True] + [None] * (slots - 1)], dense=dense)
    with pytest.raises(TypeError, match="lookup: ids must be integers, not float64"):
        m.lookup([1.7, 2.0])
    with pytest.raises(TypeError, match="feature_keys: ids must be integers, not float64"):
        ctrbox.feature_keys(0, [1.7])
    with pytest.raises(TypeError, match="feature_keys: values are unsigned integers or strings, not float"):
        ctrbox.feature_keys(0, ["a", 1.7])
    with pytest.raises(TypeError, match="-3 is negative"):
        ctrbox.feature_keys(0, [-3])
    # Integers of every kind still work, and give the same keys.
    np.testing.assert_array_equal(ctrbox.feature_keys(0, [1, 2]),
                                  ctrbox.feature_keys(0, np.array([1, 2], dtype=np.int32)))
    assert ctrbox.feature_keys(0, ["x", np.int64(1)])[1] == ctrbox.feature_keys(0, [1])[0]
    k = m.keys(0, [5, 6])
    np.testing.assert_array_equal(m.lookup(k)["show"], m.lookup(k.view(np.int64))["show"])


def test_training_releases_the_gil(data, tmp_path):
    job = ctrbox.Job(SMALL, data=[data["train"]] * 3, model_dir=tmp_path / "m")
    t = threading.Thread(target=job.train)
    spins = 0
    t.start()
    while t.is_alive():
        spins += 1
    t.join()
    # Held for the whole job, the GIL would have let this loop run only between calls.
    assert spins > 100000


def test_pip_installs_the_package_offline(tmp_path):
    # pip install . into a fresh environment, without an index, reusing this build tree; the
    # installed package then works from anywhere.
    source = os.environ.get("CTRBOX_SOURCE_DIR")
    if not source:
        pytest.skip("CTRBOX_SOURCE_DIR unset: run through CTest")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = dict(os.environ, CTRBOX_BUILD_DIR=os.path.dirname(CTRBOX))
    env.pop("PYTHONPATH", None)
    p = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "-q", source], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    code = ("import ctrbox; print(ctrbox.__file__); "
            "print(ctrbox.Job(data={!r}, train__threads=1, **{{'model.mlp': '8'}}).train()['examples'])")
    p = subprocess.run([str(venv / "bin" / "python"), "-c", code.format(str(tmp_path / "none.tsv"))],
                       env=env, cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode != 0 and "ctrbox.Error: not_found: data path" in p.stderr, p.stderr
    g = tmp_path / "g.tsv"
    p = subprocess.run([str(venv / "bin" / "python"), "-c", code.format(str(g)).replace(
        "import ctrbox;", "import ctrbox; ctrbox.gen({!r}, rows=3000);".format(str(g)))],
        env=env, cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    path, examples = p.stdout.split()
    assert path.startswith(str(venv)) and examples == "3000"


def test_a_feature_graph_in_a_dict_trains_as_the_cli_job_file(tmp_path):
    """A job's `features:` graph (docs/features.md) given as a dict: the model the CLI trains
    from the same graph in a job file."""
    views = tmp_path / "views"
    g = ctrbox.gen(views, rows=8000, format="views", seed=2)
    assert g["oracle_auc"] > 0.7
    features = {
        "main": {"format": "csv", "header": True,
                 "columns": {"ts": "int", "user_id": "string", "ad_id": "int", "ctx": "string",
                             "price": "float", "label": "int"}},
        "views": {"ads": {"paths": [str(views / "ads.jsonl")], "format": "jsonl",
                          "columns": {"ad_id": "int", "category": "string"}, "key": "ad_id"}},
        "ops": [{"name": "device", "op": "json_field", "input": "ctx", "path": "device",
                 "type": "string"},
                {"op": "join", "view": "ads", "on": "ad_id"},
                {"name": "hour", "op": "time_part", "input": "ts", "part": "hour"},
                {"name": "lp", "op": "log", "input": "price"}],
        "label": "label", "slots": ["user_id", "ad_id", "ads.category", "device", "hour"],
        "dense": ["lp"]}
    config = {**SMALL, "features": features, "data": {"paths": [str(views / "impressions.csv")]}}
    report = ctrbox.Job(config, model_dir=tmp_path / "py", fresh=True).train()
    assert report["extract"]["rows_in"] == 8000
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps(config))  # JSON is YAML
    cli_report = json.loads(cli("train", "-c", str(job), "--model-dir", str(tmp_path / "cli"),
                                "--fresh").strip().splitlines()[-1])
    assert cli_report["digest"] == report["digest"]
    assert cli_report["extract"]["rows_out"] == report["extract"]["rows_out"]
    # Model.eval reads views through the graph, as `ctrbox eval -c job.yaml` does.
    test = str(views / "impressions_test.csv")
    py_eval = ctrbox.Model(tmp_path / "py", config={"features": features}).eval(test)
    cli_eval = json.loads(cli("eval", "-c", str(job), "--model-dir", str(tmp_path / "py"),
                              "--data", test).strip().splitlines()[-1])
    assert py_eval["auc"] == cli_eval["auc"]
    assert py_eval["examples"] == cli_eval["examples"] > 1000
    # Per-row scores through the graph: the rows `ctrbox predict --id-column` writes, in order.
    rows = ctrbox.Model(tmp_path / "py", config={"features": features}).predict(
        data=test, id_column="user_id")
    cli_rows = cli("predict", "-c", str(job), "--model-dir", str(tmp_path / "py"), "--data", test,
                   "--id-column", "user_id").strip().splitlines()
    assert len(rows["id"]) == len(cli_rows) == len(rows["probability"]) > 1000
    for i in (0, len(cli_rows) // 2, len(cli_rows) - 1):
        cid, cp = cli_rows[i].split("\t")
        assert rows["id"][i] == cid
        assert float(rows["probability"][i]) == np.float32(cp)
    with pytest.raises(TypeError, match="data=... and id_column"):
        ctrbox.Model(tmp_path / "py", config={"features": features}).predict(data=test)


def test_a_python_without_numpy_is_told_which_interpreter_to_use():
    # (numpy made unimportable, as in a python3 of pyenv's that comes first on PATH)
    code = "import sys; sys.modules['numpy'] = None; import ctrbox"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert p.returncode != 0
    assert "ctrbox needs numpy, which this Python ({})".format(sys.executable) in p.stderr, p.stderr
    assert "/usr/bin/python3" in p.stderr
