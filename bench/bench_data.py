"""The benchmarks' shared data set: shared/baselines/gen_criteo.py's 1 M training rows (seed
11) and 200 K test rows (seed 12), generated into a directory if absent."""
import os, subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "baselines")


def criteo_train_test(data_dir):
    """Returns the paths of train.tsv and test.tsv in data_dir, generating them first if absent."""
    os.makedirs(data_dir, exist_ok=True)
    train_tsv, test_tsv = os.path.join(data_dir, "train.tsv"), os.path.join(data_dir, "test.tsv")
    for path, rows, seed in [(train_tsv, 1_000_000, 11), (test_tsv, 200_000, 12)]:
        if not os.path.exists(path):
            subprocess.run(["/usr/bin/python3", os.path.join(SHARED, "gen_criteo.py"), "--rows", str(rows),
                            "--seed", str(seed), "--out", path], check=True)
    return train_tsv, test_tsv
