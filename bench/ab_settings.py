#!/usr/bin/env python3
"""Two settings of one ctrbox binary compared on the 12 M-key model at a 10 % budget (4 M
generated rows of zipf 1.02, vocab_scale 1000; 256 MB), their runs interleaved so that a noisy
shared machine slows both alike, A and B taking turns going first (A, B in even rounds, B, A in
odd ones, then C if asked: a fixed order favoured the first by ~3 %). Prints one JSON line per
run (examples/s, the process's CPU-seconds, digest, test AUC and the write-back's counters) and a
summary with the medians, the spread, the ratios and whether every run trained to the same
digest. --reps defaults to 4: give an even number, so that each goes first as often.

  bench/ab_settings.py --a storage.parallel_read_us=40 --b storage.parallel_read_us=0 [--reps 4]
      [--ctrbox build/ctrbox] [--b-ctrbox OTHER] [--data-dir /tmp/ctrbox-bench] [--set KEY=VALUE ...]

--a / --b take one or more KEY=VALUE settings each (repeat the flag); --set applies to both.
--b-ctrbox runs B with another binary (default: --ctrbox), so that two builds are compared on
the same settings: bench/ab_settings.py --ctrbox OLD --b-ctrbox NEW (--a / --b may then be left out).
--b-in-memory runs B without the SSD tier and the budget (the whole model in memory), so that
a_over_b is issue 58's ratio of the 10 % job to the in-memory one:
bench/ab_settings.py --reps 4 --b-in-memory.
--c-in-memory adds a third run to each round, B's binary without the SSD tier, so that one
command compares two builds and gives each one's ratio to the in-memory job (a_over_c, b_over_c):
bench/ab_settings.py --reps 4 --ctrbox OLD --b-ctrbox NEW --c-in-memory.
--a-in-memory runs A in memory too, so that two settings of the in-memory job are compared:
bench/ab_settings.py --a-in-memory --b-in-memory --a pipeline.pass_examples=262144
--b pipeline.pass_examples=2048 (docs/storage.md, "The two ratios measured again").
"""
import json, os, shutil, statistics

from bench_data import arg_parser, train

JOB = ["data.gen.rows=4000000", "data.gen.test_rows=200000", "data.gen.zipf=1.02",
       "data.gen.vocab_scale=1000"]
BUDGET = ["storage.memory_budget=255829129"]
COUNTERS = ["hit_rate", "loaded_from_ssd", "records_read", "writeback_reads", "groups_written",
            "merges", "new_deltas", "rows_persisted", "evicted_dirty", "evicted_clean",
            "evict_rounds", "parallel_writeback_batches", "ssd_bytes_read", "ssd_bytes_written", "files_recycled",
            "mapped_records_read", "read_path_switches", "device_pulls", "device_read_switches",
            "spared_victims", "merge_bytes", "delta_bytes", "new_delta_bytes", "kept_rows"]


def main():
    ap = arg_parser(__doc__, 4)
    ap.add_argument("--a", action="append", default=[], help="KEY=VALUE of setting A")
    ap.add_argument("--b", action="append", default=[], help="KEY=VALUE of setting B")
    ap.add_argument("--b-ctrbox", help="the binary B runs (default: --ctrbox)")
    ap.add_argument("--a-in-memory", action="store_true",
                    help="A without storage.ssd_dir and the budget (e.g. two in-memory pass sizes)")
    ap.add_argument("--b-in-memory", action="store_true",
                    help="B without storage.ssd_dir and the budget: the model in memory")
    ap.add_argument("--c-in-memory", action="store_true",
                    help="a third run per round: B's binary without the SSD tier and the budget")
    ap.add_argument("--set", action="append", default=[], help="more settings, every run")
    a = ap.parse_args()
    binary = {"a": a.ctrbox, "b": a.b_ctrbox or a.ctrbox}
    tiered = {"a": not a.a_in_memory, "b": not a.b_in_memory}
    legs = [("a", a.a), ("b", a.b)]
    if a.c_in_memory:
        binary["c"], tiered["c"] = binary["b"], False
        legs.append(("c", []))
    if not a.a and not a.b and binary["a"] == binary["b"] and tiered["a"] == tiered["b"]:
        ap.error("nothing to compare: give --a / --b settings, --b-ctrbox or --b-in-memory")
    runs = {name: [] for name, _ in legs}
    for rep in range(a.reps):
        # A and B take turns going first: the slot after the previous round's last run was
        # worth ~3 % on this VM (docs/storage.md, "New pages"), so a fixed order favoured A.
        order = legs if rep % 2 == 0 else [legs[1], legs[0]] + legs[2:]
        for name, sets in order:
            ssd = os.path.join(a.data_dir, "ab-settings-ssd")
            model = os.path.join(a.data_dir, "ab-settings-model")
            shutil.rmtree(ssd, ignore_errors=True)
            args = ["--model-dir", model, "--fresh"]
            if tiered[name]:
                args += ["--set", f"storage.ssd_dir={ssd}"]
            for kv in JOB + (BUDGET if tiered[name] else []) + a.set + sets:
                args += ["--set", kv]
            r = train(binary[name], args)
            shutil.rmtree(ssd, ignore_errors=True)
            shutil.rmtree(model, ignore_errors=True)
            runs[name].append(r)
            st = r.get("storage", {})
            line = {"bench": "ab_settings", "setting": name, "set": sets, "ctrbox": binary[name],
                    "tiered": tiered[name],
                    "rep": rep,
                    "examples_per_s": r["examples_per_s"], "cpu_seconds": r["process_cpu_seconds"],
                    "seconds": r["seconds"], "digest": r["digest"], "test_auc": r["test_auc"],
                    "blas_core": r.get("blas_core"), "peak_rss_bytes": r["peak_rss_bytes"],
                    "writeback_read_seconds": st.get("writeback_read_nanos", 0) * 1e-9,
                    "passes": r.get("passes"),
                    "rows_from_passes_in_flight": r.get("rows_from_passes_in_flight")}
            line.update({k: st.get(k) for k in COUNTERS})
            print(json.dumps(line), flush=True)

    def med(name, key):
        return statistics.median(r[key] for r in runs[name])

    def spread(name, key):
        v = [r[key] for r in runs[name]]
        return [min(v), max(v)]

    digests = {r["digest"] for rs in runs.values() for r in rs}
    summary = {
        "bench": "ab_settings_summary", "a": a.a, "b": a.b, "ctrbox": binary, "tiered": tiered,
        "set": a.set,
        "reps": a.reps,
        "examples_per_s_median": {n: med(n, "examples_per_s") for n in runs},
        "examples_per_s_range": {n: spread(n, "examples_per_s") for n in runs},
        "cpu_seconds_median": {n: med(n, "process_cpu_seconds") for n in runs},
        "a_over_b": med("a", "examples_per_s") / med("b", "examples_per_s"),
        "same_digest": len(digests) == 1,
        "blas_core": sorted({r.get("blas_core") for rs in runs.values() for r in rs} - {None})}
    if "c" in runs:
        summary["a_over_c"] = med("a", "examples_per_s") / med("c", "examples_per_s")
        summary["b_over_c"] = med("b", "examples_per_s") / med("c", "examples_per_s")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
