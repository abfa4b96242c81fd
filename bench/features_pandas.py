#!/usr/bin/env python3
"""The feature graph of `ctrbox gen --format views`'s job.yaml written in pandas: the baseline
of bench/features.py (docs/features.md). It reads the same three views and computes the same
features: the JSON context's members, the bot filter, the dedupe on instance_id, the left
joins of the user and ad tables, the age buckets, the splits, the last 5 recent ads, the hour,
log(1 + price), and the crosses as value tuples.

`extract()` is what is timed: raw views to feature values, as a pandas user writes it.
`keys()` then turns the values into ctrbox's 64-bit keys (util/hash.h FeatureKey, the cross
operator's key), only to check that both computed the same features, row for row; it needs
Debian's python3-xxhash.

    bench/features_pandas.py VIEWS_DIR [--check EXTRACTED.tsv] [--rows N]
"""
import argparse, json, math, os, sys, time

import numpy as np
import pandas as pd

SLOTS = ["user_id", "ad_id", "ads.advertiser", "ads.category", "users.gender", "users.city",
         "device", "pos", "hour", "age_x_category", "interest_x_category", "recent_x_category",
         "title", "basic"]


def json_member(text, path, want):
    """json_field: the member at path, or None (missing, null, another type)."""
    if not isinstance(text, str):
        return None
    v = json.loads(text)
    for p in path:
        if not isinstance(v, dict) or p not in v:
            return None
        v = v[p]
    if v is None:
        return None
    if want == "int":
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    return v if isinstance(v, str) else json.dumps(v)


def split(s, sep):
    return [p for p in s.split(sep) if p] if isinstance(s, str) else []


def extract(views):
    """Raw views to feature values: a DataFrame in stream order, one row per example."""
    na = dict(keep_default_na=False, na_values=[""])
    imp = pd.read_csv(os.path.join(views, "impressions.csv"),
                      dtype={"instance_id": str, "user_id": str, "ctx": str, "hist": str,
                             "basic": str}, **na)
    users = pd.read_csv(os.path.join(views, "users.csv"),
                        dtype={"user_id": str, "gender": str, "city": str, "interests": str},
                        **na)
    ads = pd.read_json(os.path.join(views, "ads.jsonl"), lines=True)
    # Clean: the context's members, the bot filter (a null device passes !=), the dedupe.
    imp["device"] = imp["ctx"].map(lambda t: json_member(t, ["device"], "string"))
    imp["pos"] = imp["ctx"].map(lambda t: json_member(t, ["page", "pos"], "int"))
    imp = imp[imp["device"] != "bot"]
    imp = imp[~imp["instance_id"].duplicated(keep="first")]
    # Join: left joins on the side views' keys (the first row of a key wins).
    users = users.drop_duplicates("user_id").add_prefix("users.")
    ads = ads.drop_duplicates("ad_id").add_prefix("ads.")
    df = imp.merge(users, how="left", left_on="user_id", right_on="users.user_id")
    df = df.merge(ads, how="left", left_on="ad_id", right_on="ads.ad_id")
    # Extract.
    df["age"] = df["users.age"].fillna(-1).astype(np.int64)
    df["age_bucket"] = np.searchsorted(np.array([0, 18, 25, 35, 50]), df["age"], side="right")
    df["interests"] = df["users.interests"].map(lambda s: split(s, ","))
    df["hour"] = (df["ts"] // 3600) % 24
    df["recent"] = df["hist"].map(lambda s: split(s, "|")[-5:])
    df["title"] = df["ads.title"].map(lambda s: split(s, " "))
    df["log_price"] = np.log1p(np.maximum(df["price"].to_numpy(), 0.0))
    cat = df["ads.category"]
    df["age_x_category"] = [[(int(a), c)] if isinstance(c, str) else []
                            for a, c in zip(df["age_bucket"], cat)]
    df["interest_x_category"] = [[(i, c) for i in ii] if isinstance(c, str) else []
                                 for ii, c in zip(df["interests"], cat)]
    df["recent_x_category"] = [[(r, c) for r in rr] if isinstance(c, str) else []
                               for rr, c in zip(df["recent"], cat)]
    df["basic"] = df["basic"].map(lambda s: [int(x) for x in s.split()] if isinstance(s, str)
                                  else [])
    return df


# ---- the keys, for the check only -------------------------------------------------------
M64 = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def keys(df, rows):
    """ctrbox's keys of the first `rows` rows: a list of (label, dense, [keys per slot])."""
    import xxhash
    h = lambda b, seed=0: xxhash.xxh3_64_intdigest(b, seed=seed)  # noqa: E731
    i8 = lambda v: int(v).to_bytes(8, "little", signed=int(v) < 0)  # noqa: E731
    seed = [mix64(0x6374726278 + s) for s in range(len(SLOTS))]
    cross_seed = {n: h(n.encode()) for n in ("age_x_category", "interest_x_category",
                                             "recent_x_category")}

    def item(v):
        return i8(v) if isinstance(v, (int, np.integer)) else str(v).encode()

    out = []
    for _, r in df.head(rows).iterrows():
        slots = []
        for s, name in enumerate(SLOTS):
            v = r[name]
            if name in cross_seed:
                slots.append([h(b"".join(h(item(x)).to_bytes(8, "little") for x in pair),
                                cross_seed[name]) for pair in v])
            elif name == "basic":
                slots.append([h(i8(x), seed[s]) for x in v])
            elif name == "title":
                slots.append([h(x.encode(), seed[s]) for x in v])
            elif v is None or (isinstance(v, float) and math.isnan(v)):
                slots.append([])
            elif isinstance(v, (int, np.integer)) or (isinstance(v, float) and v == int(v)
                                                      and name in ("ads.advertiser", "pos")):
                slots.append([h(i8(int(v)), seed[s])])
            else:
                slots.append([h(str(v).encode(), seed[s])])
        dense = [np.float32(r["log_price"]), np.float32(r["age"])]
        out.append((float(r["label"]), dense, slots))
    return out


def check(df, extracted_tsv, rows):
    """Compares the first rows of ctrbox extract --text with the keys of the pandas values."""
    want = keys(df, rows)
    got = []
    with open(extracted_tsv) as f:
        for line in f:
            if len(got) == rows:
                break
            cells = line.rstrip("\n").split("\t")
            got.append((float(cells[0]), [np.float32(float(x)) for x in cells[1:3]],
                        [[int(k) for k in c.split()] if c else [] for c in cells[3:]]))
    if len(df) < rows:
        rows = len(df)
    mismatches = 0
    for i, (w, g) in enumerate(zip(want, got)):
        if w[0] != g[0] or w[1] != g[1] or w[2] != g[2]:
            if mismatches < 3:
                bad = [SLOTS[s] for s in range(len(SLOTS)) if w[2][s] != g[2][s]]
                print(f"row {i}: differs in {bad or 'label/dense'}: {w[1]} vs {g[1]}",
                      file=sys.stderr)
            mismatches += 1
    return len(want), mismatches


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("views")
    ap.add_argument("--check", help="ctrbox extract --text output to compare with")
    ap.add_argument("--rows", type=int, default=20000, help="rows to compare")
    a = ap.parse_args()
    t0 = time.monotonic()
    df = extract(a.views)
    seconds = time.monotonic() - t0
    line = {"bench": "features_pandas", "rows_out": len(df), "seconds": seconds,
            "pandas": pd.__version__}
    if a.check:
        compared, mismatches = check(df, a.check, a.rows)
        line.update(compared_rows=compared, mismatched_rows=mismatches)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
