"""Markdown summary of a GPU benchmark JSON (bench_gpu.py), beside the anchors' goal per cell.

  python3 bench/summarize.py bench/results/X.json [--anchors ../shared/anchors/h200-2026-11-29.json]

One table of the attention cells (grid, GQA/MQA, varlen): flashattn (C API) and flashattn-py
(flash_attn_func) TFLOP/s and their ratios to PyTorch's FlashAttention-2 (torch-flash) and cuDNN;
then the decode cells (flash_attn_with_kvcache, TB/s of K and V read, beside SDPA's cuDNN and flash
backends on the contiguous cache, paged / contiguous, % of the copy ceiling) and the host-overhead
rows (µs per call).
"""
import argparse
import json
import math

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
        if r["mode"] not in ("fwd", "bwd"):  # decode, ceiling and overhead rows have their own tables
            continue
        cells.setdefault(cell_key(r), {})[r["impl"]] = r
    lines = ["| mode | causal | dtype | hdim | seqlen | heads | kind | path | flashattn | flashattn-py | cuDNN | "
             "torch-flash (FA2) | fa/FA2 | fa/cuDNN | py/FA2 | py/cuDNN | goal vs cuDNN |",
             "|" + "---|" * 17]
    py_wins = py_cells = 0
    below = []  # (kind, cell, py/FA2) where flashattn-py is under torch-flash: the issues' bars
    for k, v in cells.items():
        t = {impl: v.get(impl, {}).get("tflops") for impl in IMPLS}
        kind = "varlen" if k[7] else (f"gqa {k[5]}/{k[6]}" if k[6] != k[5] else "grid")
        goal = goals.get((k[0], k[1], k[3], k[4]), {}).get("goal_ratio_vs_cudnn") if kind == "grid" else None
        path = v.get("flashattn", v.get("flashattn-py", {})).get("path", "–")
        if t["flashattn-py"] and t["torch-flash"]:
            py_cells += 1
            py_wins += t["flashattn-py"] >= t["torch-flash"]
            if t["flashattn-py"] < t["torch-flash"]:
                below.append(f"{k[0]} {'causal ' if k[1] else ''}{kind} hdim {k[3]} {k[4]} "
                             f"({t['flashattn-py'] / t['torch-flash']:.3f})")
        lines.append(
            f"| {k[0]} | {int(k[1])} | {k[2]} | {k[3]} | {k[4]} | {k[5]} | {kind} | {path} | "
            f"{_num(t['flashattn'])} | {_num(t['flashattn-py'])} | {_num(t['cudnn'])} | {_num(t['torch-flash'])} | "
            f"{_ratio(t['flashattn'], t['torch-flash'])} | {_ratio(t['flashattn'], t['cudnn'])} | "
            f"{_ratio(t['flashattn-py'], t['torch-flash'])} | {_ratio(t['flashattn-py'], t['cudnn'])} | "
            f"{goal if goal else '–'} |")
    lines.append(f"\nCells where flashattn-py is at or above torch-flash (FA2): {py_wins} of {py_cells}." +
                 (f" Below: {'; '.join(below)}." if below else ""))
    for k, v in cells.items():  # varlen backward: FA2's op also through the autograd engine
        ag, py = v.get("torch-flash-autograd", {}).get("tflops"), v.get("flashattn-py", {}).get("tflops")
        if ag:
            lines.append(f"Varlen backward, FA2 through torch.autograd.grad as flashattn-py is (torch-flash-autograd): "
                         f"{_num(ag)} TFLOP/s; py / that {_ratio(py, ag)}.")
    return lines if cells else []


def _tbps(x):
    return f"{x:.3f}" if x else "–"


def ceiling_tbps(rows):
    """The ceiling rows' TB/s: {"copy": ..., "read": ...} (the better read pass)."""
    best = {}
    for r in rows:
        if r["impl"] == "ceiling" and "tbps" in r:
            best[r["mode"]] = max(best.get(r["mode"], 0.0), r["tbps"])
    return best


def decode_table(rows):
    """One line per decode cell and cache layout: flashattn-py's TB/s, SDPA's on the contiguous cache of
    the same cell, flashattn's ratio to cuDNN, paged / contiguous, % of the copy ceiling."""
    cells = {}
    for r in rows:
        if r["mode"] == "decode":
            cells.setdefault((r["batch"], r["seqlen_k"], r["seqlen_q"]), []).append(r)
    if not cells:
        return []
    copy = ceiling_tbps(rows).get("copy")
    lines = ["| batch | seqlen_k | seqlen_q | cache | flashattn-py TB/s | cuDNN | torch-flash (FA2) | fa/cuDNN | "
             "paged/contiguous | % of copy | note |", "|" + "---|" * 11]
    for (batch, seqlen_k, seqlen_q), rs in cells.items():
        sdpa = {r["impl"]: r for r in rs if r["impl"] in ("cudnn", "torch-flash")}
        ours = {r["page_size"]: r for r in rs if r["impl"] == "flashattn-py"}
        contiguous = ours.get(0, {}).get("tbps")
        cudnn = sdpa.get("cudnn", {}).get("tbps")
        for page, r in sorted(ours.items()):
            t = r.get("tbps")
            notes = []
            if not page:  # what SDPA did on this contiguous cache
                notes += [f"{impl}: K/V repeated to the query heads" for impl, x in sdpa.items()
                          if x.get("gqa") == "repeated"]
                notes += [f"{impl}: {x['error'][:60]}" for impl, x in sdpa.items() if "error" in x]
            notes += ["L2-resident cache"] if r.get("l2_resident") else []
            notes += ["no CUDA graph"] if r.get("graph") is False else []
            notes += [r["error"][:80]] if "error" in r else []
            lines.append(
                f"| {batch} | {seqlen_k} | {seqlen_q} | {f'page {page}' if page else 'contiguous'} | {_tbps(t)} | "
                f"{_tbps(cudnn)} | {_tbps(sdpa.get('torch-flash', {}).get('tbps'))} | {_ratio(t, cudnn)} | "
                f"{_ratio(t, contiguous) if page else '–'} | {f'{100 * t / copy:.0f}' if t and copy else '–'} | "
                f"{'; '.join(notes) or ''} |")
    return lines


def overhead_table(rows):
    over = [r for r in rows if r["mode"].startswith("overhead")]
    if not over:
        return []
    lines = ["| mode | impl | µs per call |", "|---|---|---|"]
    for r in over:
        us = r.get("us_per_call")
        lines.append(f"| {r['mode']} | {r['impl']} | {f'{us:.1f}' if us else r.get('error', '–')} |")
    return lines


def variant_table(rows):
    """The build variants timed in the same run (impl flashattn:NAME, bench_gpu.py --variant) against the
    main build through the C API, per cell: TFLOP/s, the path each ran, main / variant."""
    cells, names = {}, []
    for r in rows:
        if r["mode"] not in ("fwd", "bwd"):
            continue
        cells.setdefault(cell_key(r), {})[r["impl"]] = r
        if r["impl"].startswith("flashattn:") and r["impl"] not in names:
            names.append(r["impl"])
    if not names:
        return []
    lines = ["| mode | causal | hdim | seqlen | heads | flashattn (path) | " +
             " | ".join(f"{n} (path) | main / {n.split(':', 1)[1]}" for n in names) + " |",
             "|" + "---|" * (6 + 2 * len(names))]
    wins = {n: [0, 0] for n in names}
    by_hdim = {n: {} for n in names}  # head dim -> main / variant ratios
    for k, v in cells.items():
        main = v.get("flashattn", {})
        heads = f"{k[5]}/{k[6]}" if k[6] != k[5] else f"{k[5]}"
        cols = []
        for n in names:
            var = v.get(n, {})
            cols.append(f"{_num(var.get('tflops'))} ({var.get('path', '–')}) | {_ratio(main.get('tflops'), var.get('tflops'))}")
            if main.get("tflops") and var.get("tflops"):
                wins[n][1] += 1
                wins[n][0] += main["tflops"] >= var["tflops"]
                by_hdim[n].setdefault((k[0], k[3]), []).append(main["tflops"] / var["tflops"])
        lines.append(f"| {k[0]} | {int(k[1])} | {k[3]} | {k[4]}{' varlen' if k[7] else ''} | {heads} | "
                     f"{_num(main.get('tflops'))} ({main.get('path', '–')}) | " + " | ".join(cols) + " |")
    for n in names:
        lines.append(f"\nCells where the main build is at or above {n}: {wins[n][0]} of {wins[n][1]}.")
        # Per mode and head dim (what a per-head-dim switch between two families reads): the
        # geometric mean of main / variant, the worst cell, and the cells at or above.
        for (mode, hdim), ratios in sorted(by_hdim[n].items()):
            gmean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            lines.append(f"- {mode}, hdim {hdim}: main / {n.split(':', 1)[1]} geometric mean {gmean:.3f}, "
                         f"worst {min(ratios):.3f}, {sum(x >= 1 for x in ratios)} of {len(ratios)} cells at or above")
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
    var = variant_table(d["rows"])
    if var:
        out += ["", "Build variants in the same run (C API):", ""] + var
    dec = decode_table(d["rows"])
    if dec:
        ceil = ceiling_tbps(d["rows"])
        graphs = any(r.get("graph") for r in d["rows"] if r["mode"] == "decode")
        timing = "CUDA graph of 20 calls, median of 15 replays" if graphs else "median of single calls"
        out += ["", f"Decode (flash_attn_with_kvcache, TB/s = bytes of K and V read / time per call, {timing})" +
                (f"; ceilings: copy {ceil['copy']:.2f} TB/s (read + written), read-only pass "
                 f"{ceil.get('read', 0):.2f} TB/s" if "copy" in ceil else "") + ":", ""]
        out += dec
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
