#!/usr/bin/env python3
"""The Python module against the command line (docs/python.md): the same train job on the
benchmark files (1 M / 200 K rows, default model) run by `build/ctrbox train` and by
`ctrbox.Job(...).train()` in a fresh interpreter, --reps times each, interleaved. Prints one
JSON line per run and a summary with the medians and their ratio; the digests must agree.

  PYTHONPATH=build/python bench/python_module.py [--reps 3] [--data-dir /tmp/ctrbox-bench]
"""
import json, os, statistics, subprocess, sys

from bench_data import arg_parser, criteo_train_test, train

CODE = """
import json, sys, ctrbox
ctrbox.set_log_level("warning")
r = ctrbox.Job(data=sys.argv[1], eval_data=sys.argv[2], model_dir=sys.argv[3], fresh=True,
               train__progress_seconds=1e9).train()
print(json.dumps(r))
"""


def main():
    ap = arg_parser(__doc__, reps=3)
    a = ap.parse_args()
    train_tsv, test_tsv = criteo_train_test(a.data_dir)
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(a.ctrbox), "python"))
    runs = {"cli": [], "python": []}
    for rep in range(a.reps):
        r = train(a.ctrbox, ["--data", train_tsv, "--eval-data", test_tsv, "--model-dir",
                             os.path.join(a.data_dir, "model-cli"), "--fresh"])
        runs["cli"].append(r)
        p = subprocess.run(["/usr/bin/python3", "-c", CODE, train_tsv, test_tsv,
                            os.path.join(a.data_dir, "model-py")], capture_output=True, text=True, env=env)
        if p.returncode != 0:
            sys.exit("the Python job failed:\n" + p.stderr[-3000:])
        runs["python"].append(json.loads(p.stdout.strip().splitlines()[-1]))
        for name in ("cli", "python"):
            x = runs[name][-1]
            print(json.dumps({"bench": "python_module", "system": name, "rep": rep,
                              "examples_per_s": x["examples_per_s"], "test_auc": x["test_auc"],
                              "digest": x["digest"], "blas_core": x["blas_core"]}), flush=True)
    med = {k: statistics.median(x["examples_per_s"] for x in v) for k, v in runs.items()}
    print(json.dumps({"bench": "python_module_summary", "reps": a.reps, "examples_per_s_median": med,
                      "ratio_python_over_cli": med["python"] / med["cli"],
                      "same_digest": len({x["digest"] for v in runs.values() for x in v}) == 1,
                      "blas_core": runs["cli"][0]["blas_core"]}), flush=True)


if __name__ == "__main__":
    main()
