"""Output: the issue-5 targets, number formats, the tables, the targets' check and the plot."""
from __future__ import annotations

from pathlib import Path

import numpy as np

# Targets of issue 5.
TARGET_FAST_VS_EXACT = 100.0    # 256³ matmul: exact / fast >= 100
TARGET_FAST_VS_NATIVE = 5.0     # 256³ matmul: fast / native <= 5
TARGET_CAPTURE = 1.5            # thn.build / tvm.build <= 1.5
TARGET_BISECT_S = 2.0           # bisect of a 64³ matmul <= 2 s


def fmt_ms(ms, estimated=False) -> str:
    if ms is None:
        return "-"
    text = f"{ms:.3f}" if ms < 1 else f"{ms:.1f}" if ms < 1000 else f"{ms:,.0f}"
    return ("est. " + text) if estimated else text


def fmt_ratio(r, estimated=False) -> str:
    if r is None:
        return "-"
    text = f"{r:.1f}x" if r < 1000 else f"{r:,.0f}x"
    return ("est. " + text) if estimated else text


def table(rows: list[dict]) -> str:
    head = ["kernel", "size", "schedule", "native ms", "run_native ms", "fast ms", "fast median", "exact ms",
            "fast/native", "median/median", "exact/fast"]
    body = [[r["kernel"], r["size"], r["schedule"], fmt_ms(r["native_raw_ms"]), fmt_ms(r["run_native_ms"]),
             fmt_ms(r["fast_ms"]), fmt_ms(r["fast_median_ms"]), fmt_ms(r["exact_ms"], r["exact_estimated"]),
             fmt_ratio(r["fast_over_native"]), fmt_ratio(r["fast_median_ms"] / r["native_median_ms"]),
             fmt_ratio(r["exact_over_fast"], r["exact_estimated"])] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])


YES_NO = {True: "yes", False: "NO", None: "-"}


def gpu_table(rows: list[dict]) -> str:
    head = ["kernel", "size", "schedule", "stage", "fast ms", "fast median", "exact ms", "native ms",
            "native (CPU sched) ms", "fast/native", "fast/native (CPU sched)", "exact/fast", "fast==exact"]
    body = [[r["kernel"], r["size"], r["schedule"], f"{r['stage']} {r['stage_label'].split()[-1]}",
             fmt_ms(r["fast_ms"]), fmt_ms(r["fast_median_ms"]), fmt_ms(r["exact_ms"], r["exact_estimated"]),
             fmt_ms(r["native_ms"]), fmt_ms(r["native_cpu_schedule_ms"]), fmt_ratio(r["fast_over_native"]),
             fmt_ratio(r["fast_ms"] / r["native_cpu_schedule_ms"]),
             fmt_ratio(r["exact_over_fast"], r["exact_estimated"]),
             YES_NO[r["fast_bitwise_equal_exact"]]] for r in rows]
    return _format_table(head, body)


def _format_table(head, body) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])


def peers_table(peer_results: dict) -> str:
    available = [n for n in ("triton", "numba") if peer_results["status"][n]["available"]]
    head = ["workload", "schedule", "stage", "fast best ms", "fast median"]
    for n in available:
        head += [f"{n} best ms", f"{n} median"]
    head += ["native ms"] + [f"{n}/fast" for n in available] + ["fast/native", "peers match numpy"]
    body = []
    for w in peer_results["workloads"]:
        wl = w["workload"]
        name = f"matmul {wl['n']}^3" if wl["workload"] == "matmul" else f"softmax {wl['rows']}x{wl['cols']}"
        for o in w["ours"]:
            cells = [name, o["schedule"].replace("cuda: ", ""), o["stage"], fmt_ms(o["fast_best_ms"]),
                     fmt_ms(o["fast_median_ms"])]
            for n in available:
                p = w["peers"][n]
                est = p["scale"] != 1
                cells += [fmt_ms(p["best_ms"], est), fmt_ms(p["median_ms"], est)]
            cells.append(fmt_ms(w["native_best_ms"]))
            for n in available:
                p = w["peers"][n]
                cells.append(fmt_ratio(p["best_ms"] / o["fast_best_ms"], p["scale"] != 1) if p["best_ms"] else "-")
            cells.append(fmt_ratio(o["fast_best_ms"] / w["native_best_ms"]))
            cells.append(", ".join(f"{n} {YES_NO[w['peers'][n]['matches_numpy']]}" for n in available))
            body.append(cells)
    return _format_table(head, body)



def check_targets(rows, capture_rows, bisect) -> list[dict]:
    targets = []
    t256 = next((r for r in rows if r["target_256"]), None)
    if t256 is not None:
        ratio = t256["exact_over_fast"]
        targets.append({
            "name": "256^3 matmul: fast >= 100x faster than exact",
            "value": (f"exact/fast = {fmt_ratio(ratio, t256['exact_estimated'])}"
                      + (" (exact extrapolated)" if t256["exact_estimated"] else "")),
            "pass": ratio is not None and ratio >= TARGET_FAST_VS_EXACT,
            "estimated": t256["exact_estimated"]})
        targets.append({
            "name": "256^3 matmul: fast within 5x of native (raw native call)",
            "value": f"fast/native = {fmt_ratio(t256['fast_over_native'])} "
                     f"({t256['fast_ms']:.1f} ms vs {t256['native_raw_ms']:.3f} ms, best calls; median calls "
                     f"{t256['fast_median_ms']:.1f} vs {t256['native_median_ms']:.3f} ms = "
                     f"{fmt_ratio(t256['fast_median_ms'] / t256['native_median_ms'])})",
            "pass": t256["fast_over_native"] <= TARGET_FAST_VS_NATIVE, "estimated": False})
    if capture_rows:
        worst = max(capture_rows, key=lambda r: r["ratio"])
        targets.append({
            "name": "capture overhead: thn.build <= 1.5x tvm.build (worst kernel)",
            "value": f"{worst['ratio']:.2f}x ({worst['kernel']} {worst['size']}: "
                     f"{worst['thn_build_ms']:.1f} vs {worst['tvm_build_ms']:.1f} ms)",
            "pass": worst["ratio"] <= TARGET_CAPTURE, "estimated": False})
    if bisect is not None:
        targets.append({
            "name": "bisect of a 64^3 matmul <= 2 s (fresh module)",
            "value": f"{bisect['cold_s']:.2f} s ({bisect['stages_checked']} stages, mode {bisect['mode'].split()[0]})",
            "pass": bisect["cold_s"] <= TARGET_BISECT_S, "estimated": False})
    return targets


def plot(rows, capture_rows, bisect, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 6), gridspec_kw={"width_ratios": [3, 1.3]})
    labels = ["\n".join([r["kernel"], r["size"].replace(", ", ",\n"),
                          "cache" if "cache" in r["schedule"] else r["schedule"][:18]]) for r in rows]
    x = np.arange(len(rows))
    w = 0.27
    native = [r["native_raw_ms"] for r in rows]
    fast = [r["fast_ms"] for r in rows]
    exact = [r["exact_ms"] or np.nan for r in rows]
    ax1.bar(x - w, native, w, label="native (raw call)", color="#4c72b0")
    ax1.bar(x, fast, w, label="emulate fast", color="#55a868")
    bars = ax1.bar(x + w, exact, w, label="emulate exact", color="#c44e52")
    for bar, r in zip(bars, rows):
        if r["exact_estimated"]:
            bar.set_hatch("//")
            bar.set_alpha(0.6)
            ax1.annotate("est.", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                         va="bottom", fontsize=7)
    ax1.set_yscale("log")
    ax1.set_ylabel("ms (log scale, best call)")
    ax1.set_xticks(x, labels, fontsize=7)
    ax1.set_title("Kernel time: native vs emulation (hatched exact = extrapolated)")
    ax1.legend(fontsize=8)
    ax1.grid(axis="y", which="both", alpha=0.3)

    names, vals, colors = [], [], []
    for r in capture_rows:
        tag = f"{r['kernel']} {r['size']}" + (" cache" if "cache" in r["schedule"] else "")
        names += [f"tvm.build\n{tag}", f"thn.build\n{tag}"]
        vals += [r["tvm_build_ms"], r["thn_build_ms"]]
        colors += ["#4c72b0", "#dd8452"]
    if bisect is not None:
        names.append("bisect 64^3\n(fresh)")
        vals.append(bisect["cold_s"] * 1e3)
        colors.append("#8172b3")
    y = np.arange(len(names))
    ax2.barh(y, vals, color=colors)
    ax2.set_xscale("log")
    ax2.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # decades only: minor labels collide
    ax2.set_yticks(y, names, fontsize=6)
    ax2.invert_yaxis()
    ax2.set_xlabel("ms (log scale, median)")
    ax2.set_title("Build: capture vs plain; bisect")
    ax2.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
