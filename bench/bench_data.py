"""The benchmarks' shared data set: shared/baselines/gen_criteo.py's 1 M training rows (seed
11) and 200 K test rows (seed 12), generated into a directory if absent; and running `ctrbox train` for a report."""
import argparse
import json, os, resource, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The baselines (gen_criteo.py, torch_ctr.py): ../shared/baselines beside the checkout, or
# where CTRBOX_BASELINES says (a GPU machine gets a copy carried with the build).
SHARED = os.environ.get("CTRBOX_BASELINES") or os.path.join(os.path.dirname(ROOT), "shared", "baselines")


def clean_env():
    """The environment for a baseline: without LD_LIBRARY_PATH (a packed ctrbox build puts its
    own libraries there, which PyTorch must not load)."""
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    return env


def baseline_python(module="numpy"):
    """A Python that can run the baselines (with clean_env()): this one if it imports `module`
    (on a bare CUDA machine the python3 on PATH is the one with PyTorch), else Debian's
    /usr/bin/python3."""
    ok = subprocess.run([sys.executable, "-c", f"import {module}"], env=clean_env(),
                        capture_output=True).returncode == 0
    return sys.executable if ok else "/usr/bin/python3"


def criteo_file(path, rows, seed):
    """Generates gen_criteo.py's `rows` rows of `seed` into path if absent; returns path."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if not os.path.exists(path):
        tmp = path + ".tmp"
        subprocess.run([baseline_python(), os.path.join(SHARED, "gen_criteo.py"), "--rows", str(rows),
                        "--seed", str(seed), "--out", tmp], check=True, stdout=subprocess.DEVNULL,
                       env=clean_env())
        os.rename(tmp, path)
    return path


def ctrbox_gen(ctrbox, path, rows, seed):
    """`ctrbox gen`'s `rows` rows of `seed` into path if absent; returns path."""
    if not os.path.exists(path):
        subprocess.run([ctrbox, "gen", "--rows", str(rows), "--seed", str(seed), "--out", path],
                       check=True, capture_output=True)
    return path


def criteo_train_test(data_dir):
    """Returns the paths of train.tsv and test.tsv in data_dir, generating them first if absent."""
    return (criteo_file(os.path.join(data_dir, "train.tsv"), 1_000_000, 11),
            criteo_file(os.path.join(data_dir, "test.tsv"), 200_000, 12))


def train(ctrbox, args):
    """Runs `ctrbox train ARGS` quietly; returns its report (the last stdout line) or exits.
    The report gains "process_cpu_seconds": the process's user + system CPU time (getrusage of
    the waited-for child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([ctrbox, "train", *args, "--set", "train.progress_seconds=1e9"],
                       capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"ctrbox train failed:\n{p.stderr[-3000:]}")
    report = json.loads(p.stdout.strip().splitlines()[-1])
    report["process_cpu_seconds"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return report


def arg_parser(doc, reps):
    """The benchmarks' common options: --data-dir, --reps and --ctrbox (build/ctrbox)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="/tmp/ctrbox-bench")
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--ctrbox", default=os.path.join(ROOT, "build", "ctrbox"))
    return ap
