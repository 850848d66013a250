"""Markdown summary of a GPU benchmark JSON (bench_gpu.py), beside the anchors' goal per cell.

  python3 bench/summarize.py bench/results/X.json [--anchors ../shared/anchors/h200-2026-11-29.json]
"""
import argparse
import json


def main():
    p = argparse.ArgumentParser()
    p.add_argument("result")
    p.add_argument("--anchors", default=None)
    a = p.parse_args()
    d = json.load(open(a.result))
    goals = {}
    if a.anchors:
        for c in json.load(open(a.anchors))["cells"]:
            goals[(c["mode"], c["causal"], c["hdim"], c["seqlen"])] = c
    key = lambda r: (r["mode"], r["causal"], r.get("dtype", "bf16"), r["hdim"], r["seqlen"])  # noqa: E731
    cells = {}
    for r in d["rows"]:
        cells.setdefault(key(r), {})[r["impl"]] = r
    print(f"# {d['gpu']}, commit {d['commit']}, {d['date']}, torch {d['torch']}, cuDNN {d['cudnn']}\n")
    c = d.get("ceilings", {})
    if c:
        print(f"Ceilings measured in the same run: bf16 matmul {c['bf16_matmul_tflops_8192cube']:.0f} TFLOP/s, "
              f"device copy {c['device_copy_tbps']:.2f} TB/s.\n")
    print("| mode | causal | dtype | hdim | seqlen | path | flashattn TFLOP/s | cuDNN | torch-flash (FA2) "
          "| vs FA2 | vs cuDNN | goal vs cuDNN |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    wins = 0
    for k, v in cells.items():
        ours, cd, fl = v.get("flashattn", {}), v.get("cudnn", {}), v.get("torch-flash", {})
        t, tc, tf = ours.get("tflops"), cd.get("tflops"), fl.get("tflops")
        g = goals.get((k[0], k[1], k[3], k[4]), {}).get("goal_ratio_vs_cudnn")
        f = lambda x: f"{x:.1f}" if x else "–"  # noqa: E731
        r = lambda x, y: f"{x / y:.3f}" if x and y else "–"  # noqa: E731
        wins += bool(t and tf and t >= tf)
        print(f"| {k[0]} | {int(k[1])} | {k[2]} | {k[3]} | {k[4]} | {ours.get('path', '–')} | {f(t)} | {f(tc)} | "
              f"{f(tf)} | {r(t, tf)} | {r(t, tc)} | {g if g else '–'} |")
    print(f"\nCells at or above torch-flash (FA2): {wins} of {len(cells)}.")


if __name__ == "__main__":
    main()
