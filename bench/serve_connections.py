#!/usr/bin/env python3
"""ctrbox serve's connections (docs/serve.md, "Connections"; issue 55), on loopback, against a
baseline server binary (--baseline: an earlier build/ctrbox, e.g. cpp-httplib's thread per
connection) run beside it, interleaved rep by rep:

1. throughput: requests of 256 text records from 4 wrk connections (predictions/s, p99), and
   single-record requests from 1 connection (p50, p99).
2. every connection answered: 1000 connections opened at once, each sends one single-record
   request (a client of this script's own, non-blocking): how many are answered within 30 s,
   p50/p99/max; then wrk -c 1000 (bounded) with 256-record requests: requests/s, p50, p99,
   timeouts and errors, beside wrk -c 16.
3. slow clients: 64 connections that send a header byte every 0.5 s while wrk loads the
   server from 4 connections; up to 200 liveness probes (GET /v2/health/live, each on a new
   connection) within the load's seconds: p50, p99, max, and how many got no answer within 2 s.
4. gRPC (the new server): the 256 records as a raw BYTES tensor from 4 threads of
   build/bench/grpc_load (C++; python3-grpcio's client where it was not built), beside HTTP's
   wrk -c 4 on the same server and on the baseline, interleaved.
5. memory: the server's RSS on a model directory at start (before any request), right after
   the load and 4 s later (idle), and the model's served bytes.

Prints one JSON line per measurement (medians over --reps), with blas_core.

    bench/serve_connections.py [--baseline OLD_CTRBOX] [--train-rows 200000] [--seconds 8]
                               [--reps 3] [--grpc-only]
"""
import json, os, selectors, socket, statistics, subprocess, sys, tempfile, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_data  # noqa: E402
import serve as sb  # noqa: E402  (bench/serve.py: wrk, servers, bodies)

PROTO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "serve", "proto")


def wrk(port, body, connections, seconds, lua, threads=1):
    """bench/serve.py's wrk with a 10 s timeout: a request unanswered that long is counted."""
    return sb.wrk(port, body, connections, seconds, lua, threads=threads, timeout=10)


def one_request_per_connection(port, body, n, wait_s):
    """n connections at once, one request each: answered count and latencies (ms)."""
    req = (f"POST /v2/models/ctrbox/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
           f"Content-Type: application/json\r\n\r\n").encode() + body
    sel = selectors.DefaultSelector()
    start = time.time()
    state = {}
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        state[s] = {"out": req, "in": b"", "t0": time.time(), "done": None}
        sel.register(s, selectors.EVENT_WRITE | selectors.EVENT_READ)
    open_ = len(state)
    while open_ and time.time() - start < wait_s:
        for key, ev in sel.select(timeout=0.5):
            s, st = key.fileobj, state[key.fileobj]
            try:
                if ev & selectors.EVENT_WRITE and st["out"]:
                    st["out"] = st["out"][s.send(st["out"]):]
                    if not st["out"]:
                        sel.modify(s, selectors.EVENT_READ)
                if ev & selectors.EVENT_READ:
                    chunk = s.recv(65536)
                    st["in"] += chunk
                    head, sep, rest = st["in"].partition(b"\r\n\r\n")
                    length = None
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":")[1])
                    if not chunk or (sep and length is not None and len(rest) >= length):
                        st["done"] = time.time()
                        st["ok"] = st["in"].startswith(b"HTTP/1.1 200")
                        sel.unregister(s)
                        s.close()
                        open_ -= 1
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                st["done"] = None
                sel.unregister(s)
                s.close()
                open_ -= 1
    for s in list(state):
        try:
            s.close()
        except OSError:
            pass
    lat = sorted((st["done"] - st["t0"]) * 1000 for st in state.values()
                 if st["done"] is not None and st.get("ok"))
    pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None
    return {"connections": n, "answered_200": len(lat), "p50_ms": pct(0.5), "p99_ms": pct(0.99),
            "max_ms": lat[-1] if lat else None}


def slow_clients_and_probes(port, n_slow, probes, body256, lua, seconds):
    stop = threading.Event()
    def trickle():
        socks = []
        for _ in range(n_slow):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /v2/models/ctrbox/infer HTTP/1.1\r\nX-Slow: ")
            socks.append(s)
        while not stop.is_set():
            for s in socks:
                try:
                    s.send(b"a")
                except OSError:
                    pass
            time.sleep(0.5)
        for s in socks:
            s.close()
    t = threading.Thread(target=trickle)
    t.start()
    time.sleep(1)
    load = {}
    lt = threading.Thread(target=lambda: load.update(r=wrk(port, body256, 4, seconds, lua)))
    lt.start()
    time.sleep(0.5)
    lat, unanswered, sent = [], 0, 0
    deadline = time.time() + seconds
    for _ in range(probes):
        if time.time() > deadline:  # (probes left unsent: a starved server's)
            break
        sent += 1
        t0 = time.time()
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data:
                c = s.recv(4096)
                if not c:
                    break
                data += c
            s.close()
            if data.startswith(b"HTTP/1.1 200"):
                lat.append((time.time() - t0) * 1000)
            else:
                unanswered += 1
        except OSError:
            unanswered += 1
        time.sleep(max(0.0, (seconds - 1.5) / probes - (time.time() - t0)))
    lt.join()
    stop.set()
    t.join()
    lat.sort()
    pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None
    return {"slow_clients": n_slow, "probes": sent, "unanswered": unanswered,
            "probe_timeout_s": 2,
            "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": lat[-1] if lat else None,
            "load_requests_per_s": load["r"]["requests_per_s"]}


GRPC_LOAD = r"""
import json, struct, sys, threading, time
import grpc
sys.path.insert(0, sys.argv[1])
import grpc_predict_v2_pb2 as pb, grpc_predict_v2_pb2_grpc as pbg
port, lines, seconds, threads = (int(sys.argv[2]), open(sys.argv[3]).read().splitlines()[:256],
                                 float(sys.argv[4]), int(sys.argv[5]))
req = pb.ModelInferRequest(model_name="ctrbox")
t = req.inputs.add()
t.name, t.datatype = "records", "BYTES"
t.shape.append(len(lines))
req.raw_input_contents.append(b"".join(struct.pack("<I", len(l.encode())) + l.encode()
                                       for l in lines))
lat, errors, lock = [], [0], threading.Lock()
def worker():
    stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    stub.ModelInfer(req)  # (warm)
    end, mine = time.time() + seconds, []
    while time.time() < end:
        t0 = time.time()
        try:
            stub.ModelInfer(req)
            mine.append(time.time() - t0)
        except grpc.RpcError:
            with lock:
                errors[0] += 1
    with lock:
        lat.extend(mine)
ts = [threading.Thread(target=worker) for _ in range(threads)]
t0 = time.time()
[t.start() for t in ts]
[t.join() for t in ts]
wall = time.time() - t0
lat.sort()
print(json.dumps({"requests_per_s": len(lat) / wall, "predictions_per_s": len(lat) * len(lines) / wall,
                  "p50_ms": lat[len(lat) // 2] * 1000,
                  "p99_ms": lat[int(0.99 * (len(lat) - 1))] * 1000, "errors": errors[0]}))
"""


def main():
    ap = bench_data.arg_parser(__doc__, reps=3)
    ap.add_argument("--baseline", default="", help="an earlier ctrbox binary to run beside")
    ap.add_argument("--train-rows", type=int, default=200000)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--grpc-only", action="store_true", help="only part 4 (gRPC against HTTP)")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="ctrbox-serve-conn-")
    lua = os.path.join(d, "post.lua")
    open(lua, "w").write(sb.LUA)
    model = os.path.join(d, "model")
    report = json.loads(sb.run([a.ctrbox, "train", "--set", f"data.gen.rows={a.train_rows}",
                                "--set", "data.gen.test_rows=20000", "--model-dir",
                                model]).splitlines()[-1])
    blas = report["blas_core"]
    test = os.path.join(d, "test.tsv")
    sb.run([a.ctrbox, "gen", "--rows", "2000", "--seed", "12", "--out", test])
    lines = open(test).read().splitlines()
    b256 = sb.body_file(os.path.join(d, "b256.json"), lines[:256])
    b1 = sb.body_file(os.path.join(d, "b1.json"), lines[:1])
    body1 = open(b1, "rb").read()
    if a.grpc_only:
        grpc_bench(a, d, model, test, lua, b256, blas)
        return
    binaries = {"new": a.ctrbox}
    if a.baseline:
        binaries["baseline"] = a.baseline
    servers = {k: sb.start_server(b, ["--model-dir", model], os.path.join(d, f"{k}.log"))
               for k, b in binaries.items()}
    time.sleep(1)
    memory_at_start = {k: sb.rss(p.pid) for k, (p, _) in servers.items()}  # before any request
    med = lambda rs, k: statistics.median(r[k] for r in rs if r.get(k) is not None) \
        if any(r.get(k) is not None for r in rs) else None
    for _, port in servers.values():
        wrk(port, b256, 4, 2, lua)  # warm up
    runs = {(k, w): [] for k in servers for w in ("c4_256", "c1_1", "c16_256", "c1000_256",
                                                    "each1000", "slow")}
    log = lambda m: print(f"serve_connections: {m}", file=sys.stderr, flush=True)
    for rep in range(a.reps):
        log(f"throughput rep {rep}")
        for k, (_, port) in servers.items():
            runs[(k, "c4_256")].append(wrk(port, b256, 4, a.seconds, lua))
            runs[(k, "c1_1")].append(wrk(port, b1, 1, a.seconds, lua))
    for k, (_, port) in servers.items():  # (one rep each: they take the server's connections)
        log(f"connections: {k}")
        runs[(k, "each1000")].append(one_request_per_connection(port, body1, 1000, 30))
        runs[(k, "c16_256")].append(wrk(port, b256, 16, a.seconds, lua))
        runs[(k, "c1000_256")].append(wrk(port, b256, 1000, a.seconds, lua, threads=2))
        runs[(k, "slow")].append(slow_clients_and_probes(port, 64, 200, b256, lua, a.seconds + 2))
    memory = {k: sb.rss(p.pid) for k, (p, _) in servers.items()}
    time.sleep(4)  # a few of the server's 1 s polls without a request: its heap trimmed
    memory_idle = {k: sb.rss(p.pid) for k, (p, _) in servers.items()}
    model_bytes = sb.metrics(servers["new"][1]).get("ctrbox_model_bytes")
    for p, _ in servers.values():
        p.kill()
        p.wait()
    for k in servers:
        c4, c1 = runs[(k, "c4_256")], runs[(k, "c1_1")]
        print(json.dumps({"bench": "serve_connections", "what": "throughput", "server": k,
                          "predictions_per_s_256x4": med(c4, "requests_per_s") * 256,
                          "p99_ms_256x4": med(c4, "p99_ms"), "p50_ms_1x1": med(c1, "p50_ms"),
                          "p99_ms_1x1": med(c1, "p99_ms"), "reps": a.reps, "blas_core": blas}),
              flush=True)
        print(json.dumps({"bench": "serve_connections", "what": "one_request_per_connection",
                          "server": k, **runs[(k, "each1000")][0], "blas_core": blas}), flush=True)
        c16, c1000 = runs[(k, "c16_256")][0], runs[(k, "c1000_256")][0]
        print(json.dumps({"bench": "serve_connections", "what": "wrk_connections", "server": k,
                          "c16": c16, "c1000": c1000,
                          "p99_ratio": c1000["p99_ms"] / c16["p99_ms"]
                          if c1000.get("p99_ms") and c16.get("p99_ms") else None,
                          "blas_core": blas}), flush=True)
        print(json.dumps({"bench": "serve_connections", "what": "slow_clients", "server": k,
                          **runs[(k, "slow")][0], "blas_core": blas}), flush=True)
        print(json.dumps({"bench": "serve_connections", "what": "memory", "server": k,
                          "rss_bytes": memory[k], "rss_at_start_bytes": memory_at_start[k],
                          "rss_after_4s_idle_bytes": memory_idle[k],
                          "model_bytes": model_bytes,
                          "rss_over_model": memory[k] / model_bytes if model_bytes else None,
                          "blas_core": blas}), flush=True)
    grpc_bench(a, d, model, test, lua, b256, blas)


def grpc_bench(a, d, model, test, lua, b256, blas):
    """The same 256 records over gRPC (raw BYTES) from 4 threads of a client, over HTTP from 4
    wrk connections, one server, and over HTTP to the baseline server (with --baseline),
    interleaved. The client is build/bench/grpc_load (C++, a channel per thread) where it was
    built, else python3-grpcio's (whose own CPU takes a large share of the 2 cores)."""
    py = "/usr/bin/python3"
    cpp = os.path.join(os.path.dirname(os.path.abspath(a.ctrbox)), "bench", "grpc_load")
    if os.path.exists(cpp):
        client_name = "bench/grpc_load (C++), 4 threads, a channel each"
        client = lambda gport: [cpp, "--port", str(gport), "--records", test, "--seconds",
                                str(a.seconds), "--threads", "4"]
    else:
        if subprocess.run([py, "-c", "import grpc"], capture_output=True).returncode != 0:
            print(json.dumps({"bench": "serve_connections", "what": "grpc",
                              "skipped": "no grpc_load and no python3-grpcio (scripts/setup)"}),
                  flush=True)
            return
        sb.run(["protoc", f"--proto_path={PROTO_DIR}", f"--python_out={d}",
                f"--grpc_python_out={d}", "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin",
                "grpc_predict_v2.proto"])
        script = os.path.join(d, "grpc_load.py")
        open(script, "w").write(GRPC_LOAD)
        client_name = "python3-grpcio, 4 threads (its own cost on the 2 cores)"
        client = lambda gport: [py, script, d, str(gport), test, str(a.seconds), "4"]
    p = subprocess.Popen([a.ctrbox, "serve", "--model-dir", model, "--port", "0", "--grpc-port",
                          "0"], stdout=subprocess.PIPE, stderr=open(os.path.join(d, "g.log"), "w"),
                         text=True)
    line = json.loads(p.stdout.readline())
    port, gport = line["port"], line["grpc_port"]
    base = sb.start_server(a.baseline, ["--model-dir", model], os.path.join(d, "gb.log")) \
        if a.baseline else None
    http, grpc_runs, base_http = [], [], []
    for _ in range(a.reps):
        http.append(wrk(port, b256, 4, a.seconds, lua))
        out = subprocess.run(client(gport), capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit("grpc load client failed:\n" + out.stderr[-2000:])
        grpc_runs.append(json.loads(out.stdout.splitlines()[-1]))
        if base:
            base_http.append(wrk(base[1], b256, 4, a.seconds, lua))
    sb.stop_server(p)
    if base:
        base[0].kill()
        base[0].wait()
    med = lambda rs, k: statistics.median(r[k] for r in rs)
    g, h = med(grpc_runs, "predictions_per_s"), med(http, "requests_per_s") * 256
    line = {"bench": "serve_connections", "what": "grpc", "records_per_request": 256,
            "grpc_predictions_per_s": g, "grpc_each": [r["predictions_per_s"] for r in grpc_runs],
            "grpc_p50_ms": med(grpc_runs, "p50_ms"), "grpc_p99_ms": med(grpc_runs, "p99_ms"),
            "grpc_errors": sum(r["errors"] for r in grpc_runs),
            "http_predictions_per_s": h, "http_p99_ms": med(http, "p99_ms"),
            "grpc_over_http": g / h, "client": client_name, "reps": a.reps, "blas_core": blas}
    if base_http:
        b = med(base_http, "requests_per_s") * 256
        line.update({"baseline_http_predictions_per_s": b, "grpc_over_baseline_http": g / b,
                     "http_over_baseline_http": h / b})
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
