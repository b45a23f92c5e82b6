"""The figures of bench_elastic.py, shaped like the paper's Fig. 9-10 (Q4) and 11/13 (Q5, Q6)."""

from __future__ import annotations

from typing import Any

from _elastic import Run
from _util import grid

from stretch.controller import PolicyConfig

OVERSUBSCRIBED = "C3"
CORES = "C0"


def _timeline(run: dict[str, Any], field: str) -> tuple[list[float], list[float]]:
    return [p["t_s"] for p in run["timeline"]], [p[field] for p in run["timeline"]]


def plot_q4(result: dict[str, Any], cores: int) -> Any:
    """Fig. 9 (times, CV, phases) on top; Fig. 10 (rate, throughput, latency) per case."""
    cases = result["cases"]
    fig, axes = grid(1 + len(cases), 3, "Q4: ScaleJoin reconfigurations, threshold policy")
    times, cvs, phases = axes[0]
    labels = []
    for case in cases:
        color = OVERSUBSCRIBED if case["oversubscribed"] else CORES
        kind = f"n={case['n']}" + (
            f" > {cores} cores (oversubscribed)" if case["oversubscribed"] else ""
        )
        for r in case["reconfigurations"]:
            marker = "o" if r["to"] > r["from"] else "v"
            label = kind if kind not in labels else None
            labels.append(kind)
            times.scatter(r["from"], r["duration_ms"], color=color, marker=marker, label=label)
            cvs.scatter(r["to"], r["load_after"]["cv_busy"], color=color, marker=marker)
            bottom = 0.0
            x = f"{r['from']}->{r['to']}\nn={case['n']}"
            for i, (phase, ms) in enumerate(r["phases_ms"].items()):
                if ms is not None:
                    phases.bar(x, ms, bottom=bottom, color=f"C{i + 4}", label=phase)
                    bottom += ms
    times.set_xlabel("threads before (o provision, v decommission)")
    times.set_ylabel("call -> completion (ms)")
    times.set_yscale("log")
    times.legend(fontsize=7)
    cvs.set_xlabel("threads after")
    cvs.set_ylabel("CV of busy time after (%)")
    phases.set_ylabel("ms")
    phases.set_title("phases", fontsize=9)
    handles, names = phases.get_legend_handles_labels()
    unique = dict(zip(names, handles, strict=True))
    phases.legend(unique.values(), unique.keys(), fontsize=7)
    for row, case in zip(axes[1:], cases, strict=True):
        rate_ax, throughput_ax, latency_ax = row
        runs = [case["elastic"], *case["static"]]
        rate_ax.plot(*_timeline(case["elastic"], "input_rate"), color="k", label="input")
        threads_ax = rate_ax.twinx()
        for i, run in enumerate(runs):
            threads_ax.step(*_timeline(run, "threads"), color=f"C{i}", where="post", alpha=0.6)
            throughput_ax.plot(*_timeline(run, "throughput"), color=f"C{i}", label=run["label"])
            latency_ax.plot(*_timeline(run, "latency_ms"), color=f"C{i}", label=run["label"])
        threads_ax.set_ylabel("threads")
        rate_ax.set_ylabel("t/s per stream")
        rate_ax.set_title(case["name"], fontsize=9)
        throughput_ax.set_ylabel("comparisons/s")
        latency_ax.set_ylabel("latency (ms), mean per second")
        latency_ax.set_yscale("log")
        latency_ax.legend(fontsize=7)
        for ax in row:
            ax.axvline(case["switch_s"], color="grey", linestyle=":")
            ax.set_xlabel("s")
    return fig


def plot_autoscaled(name: str, result: dict[str, Any], runs: list[Run]) -> Any:
    """Fig. 11/13: input rate, threads, throughput with the capacity band, latency (+ box)."""
    fig, axes = grid(4, 2, f"{name}: model policy (WS {result['ws_ms']} ms)", width_ratios=[4, 1])
    summaries = result["runs"]
    elastic = summaries[0]
    config = PolicyConfig.defaults("model")
    axes[0, 0].plot(*_timeline(elastic, "input_rate"), color="k")
    axes[0, 0].set_ylabel("input t/s per stream")
    for i, run in enumerate(summaries):
        style = "-" if i == 0 else "--"
        axes[1, 0].step(
            *_timeline(run, "threads"), where="post", linestyle=style, label=run["label"]
        )
        axes[3, 0].plot(*_timeline(run, "latency_ms"), linestyle=style, label=run["label"])
    axes[1, 0].set_ylabel("threads")
    axes[1, 0].legend(fontsize=7)
    t, threads = _timeline(elastic, "threads")
    capacity = result["capacity_per_thread"]
    axes[2, 0].fill_between(
        t,
        [m * capacity * config.lower for m in threads],
        [m * capacity * config.upper for m in threads],
        step="post",
        alpha=0.3,
        label=f"{config.lower:.0%}-{config.upper:.0%} of the threads' capacity",
    )
    axes[2, 0].plot(*_timeline(elastic, "throughput"), color="k", label="elastic")
    axes[2, 0].set_ylabel("comparisons/s")
    axes[2, 0].legend(fontsize=7)
    axes[3, 0].set_yscale("log")
    axes[3, 0].set_ylabel("latency (ms), mean per second")
    axes[3, 0].set_xlabel("s")
    axes[3, 0].legend(fontsize=7)
    box = axes[3, 1]
    box.boxplot([run.latency_ms for run in runs], showfliers=False)
    box.set_xticks(range(1, len(runs) + 1), [run.label for run in runs], fontsize=7)
    box.set_yscale("log")
    box.set_title("latency (ms)", fontsize=9)
    lines = [f"{s['label']}: {s['thread_seconds']:.0f} thread-s" for s in summaries]
    lines.append(f"elastic/static max: {result['thread_seconds_ratio']:.2f}")
    axes[0, 1].text(0, 0.5, "\n".join(lines), fontsize=8, va="center")
    for ax in (axes[0, 1], axes[1, 1], axes[2, 1]):
        ax.axis("off")
    return fig
