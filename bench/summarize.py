"""Markdown summary of a GPU benchmark JSON (bench_gpu.py), beside the anchors' goal per cell.

  python3 bench/summarize.py bench/results/X.json [--anchors ../shared/anchors/h200-2026-11-29.json]

One table of the attention cells (grid, GQA/MQA, varlen): flashattn (C API) and flashattn-py
(flash_attn_func) TFLOP/s and their ratios to PyTorch's FlashAttention-2 (torch-flash) and cuDNN;
then the host-overhead rows (µs per call).
"""
import argparse
import json

IMPLS = ("flashattn", "flashattn-py", "cudnn", "torch-flash")


def cell_key(r):
    return (r["mode"], r["causal"], r.get("dtype", "bf16"), r["hdim"], r["seqlen"], r["heads"],
            r.get("heads_kv", r["heads"]), bool(r.get("varlen")))


def _num(x):
    return f"{x:.1f}" if x else "–"


def _ratio(x, y):
    return f"{x / y:.3f}" if x and y else "–"


def attention_table(rows, goals):
    cells = {}
    for r in rows:
        if "us_per_call" in r or r["mode"].startswith("overhead"):
            continue
        cells.setdefault(cell_key(r), {})[r["impl"]] = r
    lines = ["| mode | causal | dtype | hdim | seqlen | heads | kind | path | flashattn | flashattn-py | cuDNN | "
             "torch-flash (FA2) | fa/FA2 | fa/cuDNN | py/FA2 | py/cuDNN | goal vs cuDNN |",
             "|" + "---|" * 17]
    py_wins = py_cells = 0
    for k, v in cells.items():
        t = {impl: v.get(impl, {}).get("tflops") for impl in IMPLS}
        kind = "varlen" if k[7] else (f"gqa {k[5]}/{k[6]}" if k[6] != k[5] else "grid")
        goal = goals.get((k[0], k[1], k[3], k[4]), {}).get("goal_ratio_vs_cudnn") if kind == "grid" else None
        path = v.get("flashattn", v.get("flashattn-py", {})).get("path", "–")
        if t["flashattn-py"] and t["torch-flash"]:
            py_cells += 1
            py_wins += t["flashattn-py"] >= t["torch-flash"]
        lines.append(
            f"| {k[0]} | {int(k[1])} | {k[2]} | {k[3]} | {k[4]} | {k[5]} | {kind} | {path} | "
            f"{_num(t['flashattn'])} | {_num(t['flashattn-py'])} | {_num(t['cudnn'])} | {_num(t['torch-flash'])} | "
            f"{_ratio(t['flashattn'], t['torch-flash'])} | {_ratio(t['flashattn'], t['cudnn'])} | "
            f"{_ratio(t['flashattn-py'], t['torch-flash'])} | {_ratio(t['flashattn-py'], t['cudnn'])} | "
            f"{goal if goal else '–'} |")
    lines.append(f"\nCells where flashattn-py is at or above torch-flash (FA2): {py_wins} of {py_cells}.")
    return lines if cells else []


def overhead_table(rows):
    over = [r for r in rows if r["mode"].startswith("overhead")]
    if not over:
        return []
    lines = ["| mode | impl | µs per call |", "|---|---|---|"]
    for r in over:
        us = r.get("us_per_call")
        lines.append(f"| {r['mode']} | {r['impl']} | {f'{us:.1f}' if us else r.get('error', '–')} |")
    return lines


def markdown(result, goals=None):
    """The summary of one results dict (as bench_gpu.py writes it) as markdown text."""
    d = result
    out = [f"# {d['gpu']}, commit {d['commit']}, {d['date']}, torch {d['torch']}, cuDNN {d['cudnn']}\n"]
    c = d.get("ceilings", {})
    if c:
        out.append(f"Ceilings measured in the same run: bf16 matmul {c['bf16_matmul_tflops_8192cube']:.0f} TFLOP/s, "
                   f"device copy {c['device_copy_tbps']:.2f} TB/s.\n")
    out += attention_table(d["rows"], goals or {})
    over = overhead_table(d["rows"])
    if over:
        out += ["", "Host overhead (batch 1, seqlen 128, 8 heads, hdim 64, calls back to back, wall clock):", ""]
        out += over
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("result")
    p.add_argument("--anchors", default=None)
    a = p.parse_args()
    goals = {}
    if a.anchors:
        goals = {(c["mode"], c["causal"], c["hdim"], c["seqlen"]): c for c in json.load(open(a.anchors))["cells"]}
    print(markdown(json.load(open(a.result)), goals))


if __name__ == "__main__":
    main()
