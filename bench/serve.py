#!/usr/bin/env python3
"""ctrbox serve under load (docs/serve.md, "Measured"), on loopback with wrk (Debian's) sharing
the machine with the server:

1. throughput: the default model (trained on --train-rows generated rows), requests of 256
   text records, wrk with 4 connections for --seconds; predictions/s beside `ctrbox eval`'s
   own examples/s on the same records.
2. latency: the same requests from 1 connection (about half the load): p50, p99; and
   single-record requests from 1 connection: p50, p99.
3. memory: the rows mapped from --rows-dir under a 1 MB --memory-budget, the same load
   (predictions/s, resident row bytes, RSS against the in-memory server); a stream's version at serving.quant.bits 16: the server's bytes per key
   (ctrbox_model_bytes / ctrbox_model_keys) against the training row's bytes.
4. batching: requests of 1, 4 and 16 records from 8 connections, against a server that
   predicts each request alone (--batch-max-micros 0) and ones that batch them (one batch
   lane, the default on 2 cores, and two): requests/s, p50, p99, and the requests a batch held.
5. freshness and swaps: a stream job publishes a delta per partition (a base every 3) while
   wrk loads the server: the seconds from a version's donefile line to the server answering
   with it (the server polls every --poll-seconds), failed requests, and p99 against the
   steady state's.

Prints one JSON line per measurement (medians over --reps), with blas_core.

    bench/serve.py [--train-rows 200000] [--seconds 10] [--reps 3] [--poll-seconds 1]
                   [--sections main,batching,ssd,versions,freshness]
"""
import json, os, re, shutil, signal, statistics, subprocess, sys, tempfile, threading, time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_data  # noqa: E402

LUA = """
local f = io.open(os.getenv("CTRBOX_BODY"), "rb")
wrk.method = "POST"
wrk.body = f:read("*a")
wrk.headers["Content-Type"] = "application/json"
f:close()
"""


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    return p.stdout


def start_server(ctrbox, args, log):
    p = subprocess.Popen([ctrbox, "serve", *args, "--port", "0"], stdout=subprocess.PIPE,
                         stderr=open(log, "w"), text=True)
    line = json.loads(p.stdout.readline())
    return p, line["port"]


def stop_server(p):
    p.send_signal(signal.SIGTERM)
    return p.wait(timeout=60)


def body_file(path, lines):
    with open(path, "w") as f:
        json.dump({"inputs": [{"name": "records", "shape": [len(lines)], "datatype": "BYTES",
                               "data": lines}]}, f)
    return path


def wrk(port, body, connections, seconds, lua, threads=1, timeout=None):
    """wrk's requests/s, p50 and p99 (ms), non-2xx answers and its socket-errors line (with
    `timeout`, a request unanswered that long counts as a timeout; wrk's default is 2 s)."""
    env = dict(os.environ, CTRBOX_BODY=body)
    limit = [f"--timeout={timeout}s"] if timeout else []
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency",
                          *limit, "-s", lua, f"http://127.0.0.1:{port}/v2/models/ctrbox/infer"],
                         capture_output=True, text=True, env=env).stdout
    def ms(label):
        m = re.search(rf"^\s*{label}\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        if not m:
            return None
        v = float(m.group(1))
        return v / 1000 if m.group(2) == "us" else v * 1000 if m.group(2) == "s" else v
    rps_match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    rps = float(rps_match.group(1)) if rps_match else 0.0
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return {"requests_per_s": rps, "p50_ms": ms("50%"), "p99_ms": ms("99%"),
            "non_2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": errors.group(0) if errors else ""}


def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    vals = {}
    for line in text.splitlines():
        m = re.match(r"^(ctrbox_[a-z_]+)(\{[^}]*\})? ([\d.e+-]+)$", line)
        if m:
            vals[m.group(1)] = float(m.group(3))
    return vals


def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def served_version(port):
    r = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/models/ctrbox").read())
    return int(r["versions"][0])


def batching(a, d, model, lines, lua, blas, med):
    """Small requests from 8 connections: each predicted alone, against batched together with
    one or two batch lanes (--batch-lanes)."""
    bodies = {n: body_file(os.path.join(d, f"small{n}.json"), lines[:n]) for n in (1, 4, 16)}
    configs = {"alone": ["--batch-max-micros", "0"],
               "lanes_1": ["--batch-max-micros", "2000", "--batch-lanes", "1"],
               "lanes_2": ["--batch-max-micros", "2000", "--batch-lanes", "2"]}
    # The three servers up at once, the runs interleaved (rep by rep, size by size), so that
    # the machine's drift falls on all three alike.
    servers = {name: start_server(a.ctrbox, ["--model-dir", model, *args],
                                  os.path.join(d, f"sb_{name}.log"))
               for name, args in configs.items()}
    runs = {(name, n): [] for name in configs for n in bodies}
    batched = {key: [0.0, 0.0] for key in runs}  # batches, requests
    for name, (_, port) in servers.items():
        wrk(port, bodies[1], 8, 2, lua)  # warm up
    for rep in range(a.reps):
        for n, body in bodies.items():
            for name, (_, port) in servers.items():
                before = metrics(port)
                runs[(name, n)].append(wrk(port, body, 8, a.seconds, lua))
                after = metrics(port)
                for i, k in enumerate(("count", "sum")):
                    batched[(name, n)][i] += (after[f"ctrbox_batch_requests_{k}"] -
                                              before.get(f"ctrbox_batch_requests_{k}", 0))
    for server, _ in servers.values():
        stop_server(server)
    results = {key: {"requests_per_s": med(rs, "requests_per_s"), "p50_ms": med(rs, "p50_ms"),
                     "p99_ms": med(rs, "p99_ms"), "non_2xx": sum(r["non_2xx"] for r in rs),
                     "requests_per_batch": batched[key][1] / batched[key][0]
                     if batched[key][0] else None}
               for key, rs in runs.items()}
    for n in bodies:
        alone = results[("alone", n)]
        line = {"bench": "serve", "what": "batching", "records_per_request": n,
                "model_set": a.model_set, "connections": 8, "batch_max_micros": 2000,
                "batch_max_rows": 16, "alone_predictions_per_s": alone["requests_per_s"] * n,
                "alone_p50_ms": alone["p50_ms"], "alone_p99_ms": alone["p99_ms"]}
        for name in ("lanes_1", "lanes_2"):
            b = results[(name, n)]
            line[name] = {"predictions_per_s": b["requests_per_s"] * n,
                          "speedup": b["requests_per_s"] / alone["requests_per_s"],
                          "p50_ms": b["p50_ms"], "p99_ms": b["p99_ms"],
                          "requests_per_batch": b["requests_per_batch"]}
        line.update(non_2xx=sum(r["non_2xx"] for r in results.values()), reps=a.reps,
                    blas_core=blas)
        print(json.dumps(line), flush=True)


def main():
    ap = bench_data.arg_parser(__doc__, reps=3)
    ap.add_argument("--train-rows", type=int, default=200000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--poll-seconds", type=float, default=1.0)
    ap.add_argument("--sections", default="main,batching,ssd,versions,freshness")
    ap.add_argument("--model-set", action="append", default=[],
                    help="KEY=VALUE for the model's training (e.g. model.mlp=1024,512,256)")
    a = ap.parse_args()
    sections = set(a.sections.split(","))
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (Debian wrk; scripts/setup)")
    d = tempfile.mkdtemp(prefix="ctrbox-serve-bench-")
    lua = os.path.join(d, "post.lua")
    open(lua, "w").write(LUA)
    model = os.path.join(d, "model")
    model_sets = [x for kv in a.model_set for x in ("--set", kv)]
    report = json.loads(run([a.ctrbox, "train", "--set", f"data.gen.rows={a.train_rows}",
                             "--set", "data.gen.test_rows=20000", *model_sets,
                             "--model-dir", model]).splitlines()[-1])
    blas = report["blas_core"]
    test = os.path.join(d, "test.tsv")
    run([a.ctrbox, "gen", "--rows", "20000", "--seed", "12", "--out", test])
    lines = open(test).read().splitlines()
    b256, b1 = body_file(os.path.join(d, "b256.json"), lines[:256]), body_file(os.path.join(d, "b1.json"), lines[:1])
    ev = json.loads(run([a.ctrbox, "eval", "--model-dir", model, "--data", test]).splitlines()[-1])
    eval_rate = ev.get("examples_per_s")

    med = lambda rs, k: statistics.median(r[k] for r in rs)
    if "batching" in sections:
        batching(a, d, model, lines, lua, blas, med)
    if "main" not in sections:
        return
    server, port = start_server(a.ctrbox, ["--model-dir", model], os.path.join(d, "s1.log"))
    wrk(port, b256, 4, 2, lua)  # warm up
    runs = {"c4_256": [], "c1_256": [], "c1_1": []}
    for rep in range(a.reps):
        runs["c4_256"].append(wrk(port, b256, 4, a.seconds, lua))
        runs["c1_256"].append(wrk(port, b256, 1, a.seconds, lua))
        runs["c1_1"].append(wrk(port, b1, 1, a.seconds, lua))
    rss_memory = rss(server.pid)
    stop_server(server)
    thr = med(runs["c4_256"], "requests_per_s") * 256
    print(json.dumps({"bench": "serve", "what": "throughput", "records_per_request": 256,
                      "connections": 4, "predictions_per_s": thr,
                      "eval_examples_per_s": eval_rate,
                      "of_eval": thr / eval_rate if eval_rate else None,
                      "p99_ms": med(runs["c4_256"], "p99_ms"),
                      "non_2xx": sum(r["non_2xx"] for r in runs["c4_256"]),
                      "reps": a.reps, "blas_core": blas}), flush=True)
    print(json.dumps({"bench": "serve", "what": "latency", "records_per_request": 256,
                      "connections": 1,
                      "predictions_per_s": med(runs["c1_256"], "requests_per_s") * 256,
                      "p50_ms": med(runs["c1_256"], "p50_ms"), "p99_ms": med(runs["c1_256"], "p99_ms"),
                      "blas_core": blas}), flush=True)
    print(json.dumps({"bench": "serve", "what": "latency", "records_per_request": 1,
                      "connections": 1, "requests_per_s": med(runs["c1_1"], "requests_per_s"),
                      "p50_ms": med(runs["c1_1"], "p50_ms"), "p99_ms": med(runs["c1_1"], "p99_ms"),
                      "blas_core": blas}), flush=True)

    if "ssd" not in sections:
        return
    # The rows on SSD: mapped from --rows-dir under a 1 MB budget, the same load.
    rows_dir = os.path.join(d, "rows")
    os.makedirs(rows_dir)
    server, port = start_server(a.ctrbox, ["--model-dir", model, "--rows-dir", rows_dir,
                                           "--memory-budget", "1MB", "--poll-seconds", "0.2"],
                                os.path.join(d, "s_ssd.log"))
    ssd = [wrk(port, b256, 4, a.seconds, lua) for _ in range(a.reps)]
    m = metrics(port)
    rss_ssd = rss(server.pid)
    stop_server(server)
    print(json.dumps({"bench": "serve", "what": "rows_on_ssd", "memory_budget": 1 << 20,
                      "row_bytes": m["ctrbox_model_row_bytes"],
                      "resident_row_bytes_at_end": m["ctrbox_model_resident_row_bytes"],
                      "predictions_per_s": med(ssd, "requests_per_s") * 256,
                      "in_memory_predictions_per_s": thr,
                      "p99_ms": med(ssd, "p99_ms"), "non_2xx": sum(r["non_2xx"] for r in ssd),
                      "rss_bytes": rss_ssd, "in_memory_rss_bytes": rss_memory,
                      "blas_core": blas}), flush=True)

    if "versions" not in sections:
        return
    # Versions of a stream (16-bit rows, a delta per partition, a base every 4), made first.
    root, staged, ckpt = (os.path.join(d, n) for n in ("root", "staged", "ckpt"))
    run([a.ctrbox, "gen", "--partitions", "12", "--rows", "20000", "--out", root])
    stream = [a.ctrbox, "train", "--set", f"stream.root={root}", "--set", "stream.poll_seconds=0.2",
              "--set", "serving.base_every=4", "--set", "serving.keep_bases=10",
              "--set", "serving.quant.bits=16", "--set", "serving.quant.range=1",
              "--set", "table.ttl_partitions=6"]
    run(stream + ["--set", f"ckpt.dir={ckpt}", "--set", f"serving.dir={staged}",
                  "--set", "stream.until=20261101/11"])
    versions = open(os.path.join(staged, "versions.jsonl")).read().splitlines()
    served = os.path.join(d, "served")
    os.makedirs(served)
    def publish(v):  # version v's directory, then its donefile line, atomically
        name = "v-%06d" % v
        shutil.copytree(os.path.join(staged, name), os.path.join(served, name))
        tmp = os.path.join(served, ".versions.tmp")
        open(tmp, "w").write("\n".join(versions[:v]) + "\n")
        os.replace(tmp, os.path.join(served, "versions.jsonl"))
    publish(1)
    server, port = start_server(a.ctrbox, ["--serving-dir", served, "--poll-seconds",
                                           str(a.poll_seconds)], os.path.join(d, "s2.log"))
    mem = metrics(port)  # version 1: a base
    steady = [wrk(port, b256, 2, a.seconds, lua) for _ in range(a.reps)]
    # Watch the donefile and the server together: when a line appears, when the server
    # answers with it.
    donefile = os.path.join(served, "versions.jsonl")
    def watcher(delays, stop):
        seen_lines, appeared = 0, {}
        while not stop.is_set():
            try:
                n = sum(1 for _ in open(donefile))
            except OSError:
                n = seen_lines
            now = time.time()
            for v in range(seen_lines + 1, n + 1):
                appeared[v] = now
            seen_lines = max(seen_lines, n)
            try:
                v = served_version(port)
                if appeared.get(v) is not None:
                    delays.append(now - appeared[v])
                    appeared[v] = None
            except OSError:
                pass
            time.sleep(0.02)
    delays, stop = [], threading.Event()
    t = threading.Thread(target=watcher, args=(delays, stop))
    t.start()
    loaded = {}
    seconds = int(len(versions) * 1.5) + 3
    lt = threading.Thread(target=lambda: loaded.update(r=wrk(port, b256, 2, seconds, lua)))
    lt.start()
    time.sleep(1)
    for v in range(2, len(versions) + 1):  # a version every 1.5 s, the bases among them
        publish(v)
        time.sleep(1.5)
    lt.join()
    stop.set()
    t.join()
    after = metrics(port)
    stop_server(server)
    row_bytes = report.get("value_bytes_per_key")
    per_key = mem["ctrbox_model_row_bytes"] / mem["ctrbox_model_keys"]
    print(json.dumps({"bench": "serve", "what": "memory", "quant_bits": 16, "version": "base",
                      "served_row_bytes_per_key": per_key, "training_row_bytes": row_bytes,
                      "ratio": per_key / row_bytes, "keys": mem["ctrbox_model_keys"],
                      "dense_bytes": mem["ctrbox_model_bytes"] - mem["ctrbox_model_row_bytes"],
                      "blas_core": blas}), flush=True)
    r = loaded["r"]
    steady_p99 = statistics.median(x["p99_ms"] for x in steady)
    print(json.dumps({"bench": "serve", "what": "swaps_under_load", "connections": 2,
                      "versions_published": len(versions) - 1,
                      "versions_loaded": after.get("ctrbox_versions_loaded_total"),
                      "version_errors": after.get("ctrbox_version_errors_total"),
                      "non_2xx": r["non_2xx"], "socket_errors": r["socket_errors"],
                      "p99_ms": r["p99_ms"], "steady_p99_ms": steady_p99,
                      "p99_ratio": r["p99_ms"] / steady_p99,
                      "listed_to_served_median_s": statistics.median(delays) if delays else None,
                      "listed_to_served_max_s": max(delays) if delays else None,
                      "poll_seconds": a.poll_seconds, "blas_core": blas}), flush=True)

    if "freshness" not in sections:
        return
    # Freshness from a running trainer: the server follows a stream job as it publishes.
    live, ckpt2 = os.path.join(d, "live"), os.path.join(d, "ckpt2")
    run(stream + ["--set", f"ckpt.dir={ckpt2}", "--set", f"serving.dir={live}",
                  "--set", "stream.until=20261101/00"])
    donefile = os.path.join(live, "versions.jsonl")
    server, port = start_server(a.ctrbox, ["--serving-dir", live, "--poll-seconds",
                                           str(a.poll_seconds)], os.path.join(d, "s3.log"))
    delays, stop = [], threading.Event()
    t = threading.Thread(target=watcher, args=(delays, stop))
    t.start()
    run(stream + ["--set", f"ckpt.dir={ckpt2}", "--set", f"serving.dir={live}",
                  "--set", "stream.until=20261101/11"])
    time.sleep(a.poll_seconds + 1.5)
    stop.set()
    t.join()
    stop_server(server)
    print(json.dumps({"bench": "serve", "what": "freshness_from_a_running_trainer",
                      "poll_seconds": a.poll_seconds, "versions_seen": len(delays),
                      "median_s": statistics.median(delays) if delays else None,
                      "max_s": max(delays) if delays else None,
                      "target_s": a.poll_seconds + 1, "blas_core": blas}), flush=True)
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
