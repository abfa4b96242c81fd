"""The benchmarks' shared data set: shared/baselines/gen_criteo.py's 1 M training rows (seed
11) and 200 K test rows (seed 12), generated into a directory if absent."""
import os, subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "baselines")


def criteo_file(path, rows, seed):
    """Generates gen_criteo.py's `rows` rows of `seed` into path if absent; returns path."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if not os.path.exists(path):
        tmp = path + ".tmp"
        subprocess.run(["/usr/bin/python3", os.path.join(SHARED, "gen_criteo.py"), "--rows", str(rows),
                        "--seed", str(seed), "--out", tmp], check=True, stdout=subprocess.DEVNULL)
        os.rename(tmp, path)
    return path


def criteo_train_test(data_dir):
    """Returns the paths of train.tsv and test.tsv in data_dir, generating them first if absent."""
    return (criteo_file(os.path.join(data_dir, "train.tsv"), 1_000_000, 11),
            criteo_file(os.path.join(data_dir, "test.tsv"), 200_000, 12))
