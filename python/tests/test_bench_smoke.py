"""bench/bench_gpu.py --smoke: every part of the GPU benchmark (grid, GQA, varlen, host overhead) runs
on CPU tensors through flash_attn_func and writes rows bench/summarize.py reads; no GPU needed."""
import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


@pytest.mark.skipif(not os.path.exists(os.path.join(BENCH, "bench_gpu.py")), reason="no bench/ beside python/")
def test_bench_smoke_writes_every_part(tmp_path):
    out = tmp_path / "smoke.json"
    subprocess.run([sys.executable, os.path.join(BENCH, "bench_gpu.py"), "--smoke", "--out", str(out)],
                   check=True, capture_output=True, text=True, timeout=600)
    rows = json.load(open(out))["rows"]
    py = [r for r in rows if r["impl"] == "flashattn-py"]
    assert {r["mode"] for r in py} == {"fwd", "bwd", "overhead-fwd", "overhead-fwd-bwd"}
    assert any(r.get("heads_kv") for r in py) and any(r.get("varlen") for r in py)
    assert all("error" not in r and r.get("path", "cpu") == "cpu" for r in py)
    assert all(r["us_per_call"] > 0 for r in py if r["mode"].startswith("overhead"))
    summary = subprocess.run([sys.executable, os.path.join(BENCH, "summarize.py"), str(out)], check=True,
                             capture_output=True, text=True).stdout
    assert "flashattn-py" in summary and "overhead-fwd-bwd" in summary
