"""The peers (numba-cuda's simulator, Triton's interpreter), each in a ``bench/peers.py serve`` process,
timed against fast mode and native in alternating rounds."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from . import HERE
from .cases import GpuCase
from .report import fmt_ms
from .timing import autorange


class PeerProcess:
    """One ``bench/peers.py serve PEER`` process: the peer's environment variable is set there only."""

    def __init__(self, name: str, python: str, log_dir: Path):
        from peers import PEER_ENV  # bench/peers.py: numpy only

        env = os.environ.copy()
        env.pop("PYTHONPATH", None)  # the peers' python has its own site-packages
        env.update(PEER_ENV[name])
        self.name = name
        self.stderr = open(log_dir / f"peer-{name}.log", "w")
        try:
            self.proc = subprocess.Popen([python, str(HERE / "peers.py"), "serve", name], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env)
        except OSError:
            self.stderr.close()
            raise

    def request(self, **req) -> dict:
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError) as exc:
            return {"ok": False, "error": f"peer process: {exc}"}
        if not line:
            return {"ok": False, "error": f"peer process exited (see {self.stderr.name})"}
        return json.loads(line)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()
        self.stderr.close()


#: Per peer and workload, the calls stop once they add up to this many seconds (at least one timed call).
PEER_BUDGET_S = 60.0
#: A peer's float32 output must be this close to the float64 numpy result (absolute, inputs ~ N(0, 1)).
PEER_TOLERANCE = {"matmul": 1e-3, "softmax": 1e-6}


def scaled_workload(workload: dict, peer: PeerProcess, budget: float, log) -> tuple[dict, float]:
    """The largest size of ``workload`` whose predicted call time fits ``budget`` / 4, and the factor
    that scales its time to the full size (work grows as n³ for matmul, as rows for softmax)."""
    if workload["workload"] == "matmul":
        full = workload["n"]
        sizes = [s for s in (32, 64, 128, 256, 512) if s < full] + [full]
        make, factor = (lambda s: {"workload": "matmul", "n": s}), (lambda s: (full / s) ** 3)
    else:
        full = workload["rows"]
        sizes = [s for s in (8, 16, 32, 64, 128) if s < full] + [full]
        make = lambda s: {"workload": "softmax", "rows": s, "cols": workload["cols"]}  # noqa: E731
        factor = lambda s: full / s  # noqa: E731
    chosen = sizes[0]
    peer.request(op="run", **make(chosen))  # warm-up (tracing, setup)
    reply = peer.request(op="run", **make(chosen))
    if not reply.get("ok"):
        return make(chosen), factor(chosen)
    per_unit = reply["seconds"] * factor(chosen)  # predicted seconds at full size
    for s in sizes:
        if per_unit / factor(s) <= budget / 4:
            chosen = s
    return make(chosen), factor(chosen)


def bench_peers(gpu_rows: list[dict], contexts: list[tuple[GpuCase, dict]], python: str, rounds: int,
                out_dir: Path, log) -> dict:
    """Time ours (fast, every GPU row of the workload), native and the peers in alternating rounds."""
    peers = {}
    status = {}
    for name in ("triton", "numba"):
        try:
            p = PeerProcess(name, python, out_dir)
        except OSError as exc:  # --peers-python that does not exist or cannot run
            status[name] = {"available": False, "error": f"{type(exc).__name__}: {exc}"}
            log(f"  {name}: cannot start {python} ({exc}); its column is skipped")
            continue
        probe = p.request(op="probe")
        if probe.get("ok"):
            peers[name] = p
            status[name] = {"available": True, "versions": probe.get("versions")}
            log(f"  {name}: {', '.join(f'{k} {v}' for k, v in (probe.get('versions') or {}).items())}")
        else:
            p.close()
            status[name] = {"available": False, "error": probe.get("error")}
            log(f"  {name}: not available with {python} ({probe.get('error')}); its column is skipped")
    results = []
    if not peers:
        return {"status": status, "python": python, "rounds": 0, "budget_s": PEER_BUDGET_S, "workloads": []}
    by_workload: dict[str, list] = {}
    for case, ctx in contexts:
        by_workload.setdefault(json.dumps(case.workload, sort_keys=True), []).append((case, ctx))
    for key, group in by_workload.items():
        workload = json.loads(key)
        ctx0 = group[0][1]
        sizes = {}
        for name, p in peers.items():
            sizes[name] = scaled_workload(workload, p, PEER_BUDGET_S, log)
            req, factor = sizes[name]
            if factor != 1:
                log(f"  {name} {workload['workload']}: timed at {req}, scaled by {factor:g}")
        ours = {(case.schedule, s.index): [] for case, ctx in group for s in ctx["stages"]}
        native = []
        peer_times = {name: [] for name in peers}
        peer_errs = {name: [] for name in peers}
        spent = {name: 0.0 for name in peers}
        for rnd in range(rounds):
            for case, ctx in group:
                hm, args = ctx["hm"], [a.copy() for a in ctx["arrays"]]
                for s in ctx["stages"]:
                    start = time.perf_counter()
                    hm.emulate(*args, stage=s.index, mode="fast")
                    ours[(case.schedule, s.index)].append(time.perf_counter() - start)
            nat = ctx0["native"]
            native.append(autorange(lambda: nat["fn"](*nat["tensors"]), min_total=0.1)[0])
            for name, p in peers.items():
                if rnd > 0 and spent[name] >= PEER_BUDGET_S:
                    continue
                req, factor = sizes[name]
                reply = p.request(op="run", **req)
                if not reply.get("ok"):
                    log(f"  {name} {workload['workload']}: {reply.get('error')}")
                    continue
                spent[name] += reply["seconds"]
                peer_times[name].append(reply["seconds"] * factor)
                peer_errs[name].append(reply["max_abs_err"])
        entry = {"workload": workload, "rounds": rounds, "native_best_ms": min(native) * 1e3,
                 "native_median_ms": statistics.median(native) * 1e3, "ours": [], "peers": {}}
        for (schedule, stage_index), times in ours.items():
            entry["ours"].append({"schedule": schedule, "stage": stage_index, "fast_best_ms": min(times) * 1e3,
                                  "fast_median_ms": statistics.median(times) * 1e3, "runs": len(times)})
        for name in peers:
            req, factor = sizes[name]
            times = peer_times[name]
            entry["peers"][name] = {"timed_request": req, "scale": factor, "runs": len(times),
                                    "best_ms": min(times) * 1e3 if times else None,
                                    "median_ms": statistics.median(times) * 1e3 if times else None,
                                    "max_abs_err_vs_numpy": max(peer_errs[name]) if peer_errs[name] else None,
                                    "matches_numpy": (max(peer_errs[name]) <= PEER_TOLERANCE[workload["workload"]]
                                                      if peer_errs[name] else None)}
        results.append(entry)
        log(f"  {workload}: " + "; ".join(f"{n} {fmt_ms(v['best_ms'], v['scale'] != 1)} ms (err "
                                           f"{v['max_abs_err_vs_numpy']})" for n, v in entry["peers"].items()))
    for p in peers.values():
        p.close()
    return {"status": status, "python": python, "rounds": rounds, "budget_s": PEER_BUDGET_S, "workloads": results}
