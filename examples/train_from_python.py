#!/usr/bin/env python3
"""Train, evaluate and use a ctrbox model from Python (docs/python.md).

    PYTHONPATH=build/python python3 examples/train_from_python.py [--rows 200000] [--dir /tmp/ctrbox-example]

Generates Criteo-like click logs with a planted model, trains the default model with a
progress line per pass, evaluates it, predicts a few records and looks at embeddings."""
import argparse
import os

import numpy as np

import ctrbox


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200000)
    ap.add_argument("--dir", default="/tmp/ctrbox-example")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    train, test, model_dir = (os.path.join(a.dir, n) for n in ("train.tsv", "test.tsv", "model"))

    ctrbox.set_log_level("warning")
    g = ctrbox.gen(train, rows=a.rows, seed=11)
    ctrbox.gen(test, rows=a.rows // 5, seed=12)
    print("generated {} rows; the planted model's AUC is {:.4f}".format(g["rows"], g["oracle_auc"]))

    def progress(event):
        if event["event"] == "pass":
            print("  pass {:3d}: {:8d} examples, running AUC {:.4f}, {:.0f} examples/s".format(
                event["pass"], event["examples"], event["auc"] or 0.5, event["examples_per_s"]))

    job = ctrbox.Job({"model": {"mlp": [256, 128]}}, data=train, eval_data=test, model_dir=model_dir,
                     fresh=True, pipeline__pass_examples=max(a.rows // 8, 1000))
    report = job.train(progress=progress)
    print("trained: test AUC {:.4f} at {:.0f} examples/s; digest {}".format(
        report["test_auc"], report["examples_per_s"], report["digest"]))

    model = ctrbox.Model(model_dir)
    ev = model.eval(test)
    print("eval: AUC {:.4f}, logloss {:.4f}, COPC {:.3f}".format(ev["auc"], ev["logloss"], ev["copc"]))

    with open(test) as f:
        records = [next(f).rstrip("\n") for _ in range(5)]
    p = model.predict(records=records)
    print("predictions for 5 test records:", np.round(p, 4), "labels:", [r[0] for r in records])

    # The embeddings of slot C1's most common values in those records.
    values = [r.split("\t")[14] for r in records]
    rows = model.lookup(ctrbox.feature_keys(0, values))
    for v, show, emb in zip(values, rows["show"], rows["embedding"]):
        print("  C1={:10s} seen {:7.0f} times, embedding[:4] = {}".format(v, show, np.round(emb[:4], 3)))


if __name__ == "__main__":
    main()
