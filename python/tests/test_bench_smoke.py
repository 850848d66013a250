"""bench/bench_gpu.py --smoke: every part of the GPU benchmark (grid, GQA, varlen, decode, host overhead)
runs on CPU tensors through flash_attn_func and flash_attn_with_kvcache and writes rows bench/summarize.py
reads; no GPU needed."""
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
    assert {r["mode"] for r in py} == {"fwd", "bwd", "decode", "overhead-fwd", "overhead-fwd-bwd"}
    assert any(r.get("heads_kv") for r in py) and any(r.get("varlen") for r in py)
    assert all("error" not in r and r.get("path", "cpu") == "cpu" for r in py)
    assert all(r["us_per_call"] > 0 for r in py if r["mode"].startswith("overhead"))
    decode = [r for r in py if r["mode"] == "decode"]
    assert {(r["seqlen_q"], r["page_size"]) for r in decode} == {(1, 0), (1, 16), (4, 0), (4, 16)}
    assert all(r["tbps"] > 0 and r["heads_kv"] == 2 and r["seqlen_k"] == 100 for r in decode)
    # paged against contiguous on the same cache (the rows of a last page past the length are NaN: never read)
    assert all(r["max_rel_diff"] == 0 for r in decode if r["page_size"])  # bitwise on the CPU (docs/kvcache.md)
    summary = subprocess.run([sys.executable, os.path.join(BENCH, "summarize.py"), str(out)], check=True,
                             capture_output=True, text=True).stdout
    assert "flashattn-py" in summary and "overhead-fwd-bwd" in summary and "| 2 | 100 | 4 | page 16 |" in summary


@pytest.mark.skipif(not os.path.exists(os.path.join(BENCH, "bench_gpu.py")), reason="no bench/ beside python/")
def test_bench_smoke_path_picks_the_family(tmp_path):
    """--path: the grid rows run on the family named; one that refuses the cells gives every flashattn row
    its reason instead of a time (here sm80 on CPU tensors)."""
    def rows(path):
        out = tmp_path / f"{path}.json"
        subprocess.run([sys.executable, os.path.join(BENCH, "bench_gpu.py"), "--smoke", "--parts", "grid", "--path", path,
                        "--out", str(out)], check=True, capture_output=True, text=True, timeout=600)
        return [r for r in json.load(open(out))["rows"] if r["impl"].startswith("flashattn")]
    cpu = rows("cpu")
    assert cpu and all(r.get("path") == "cpu" and "error" not in r for r in cpu)
    refused = rows("sm80")
    assert refused and all("sm80" in r.get("error", "") and "tflops" not in r for r in refused)


C_LIB = os.environ.get("FLASHATTN_C_LIB") or os.path.join(BENCH, "..", "build", "libflashattn_c.so")


@pytest.mark.skipif(not os.path.exists(C_LIB), reason="no C library built (scripts/test.sh builds build/)")
def test_bench_smoke_variant_rows_and_their_table(tmp_path):
    """--variant NAME=@PATH times the same library on another family in the same run (impl flashattn:NAME),
    and summarize.py sets each variant beside the main build per cell."""
    out = tmp_path / "variant.json"
    subprocess.run([sys.executable, os.path.join(BENCH, "bench_gpu.py"), "--smoke", "--parts", "grid", "--path", "cpu",
                    "--lib", C_LIB, "--variant", "again=@cpu", "--out", str(out)], check=True, capture_output=True,
                   text=True, timeout=600)
    rows = json.load(open(out))["rows"]
    main = [r for r in rows if r["impl"] == "flashattn"]
    again = [r for r in rows if r["impl"] == "flashattn:again"]
    assert main and len(again) == len(main)
    assert all(r.get("path") == "cpu" and r["tflops"] > 0 for r in again)
    summary = subprocess.run([sys.executable, os.path.join(BENCH, "summarize.py"), str(out)], check=True,
                             capture_output=True, text=True).stdout
    assert "Build variants in the same run" in summary and "flashattn:again (path)" in summary
    assert "Cells where the main build is at or above flashattn:again: " in summary
    assert "main / again geometric mean" in summary


@pytest.mark.skipif(not os.path.exists(C_LIB), reason="no C library built (scripts/test.sh builds build/)")
def test_ctypes_kvcache_matches_the_package():
    """bench/flashattn_ctypes.py's KV-cache call (fa_kvcache_forward, what bench/decode_variants.py times per
    build): its struct matches flashattn_c.h's layout, and on the CPU it returns what flash_attn_with_kvcache
    does on the same cache, contiguous and paged, bitwise."""
    import torch
    import flashattn
    sys.path.insert(0, BENCH)
    from flashattn_ctypes import FlashAttn
    torch.manual_seed(0)
    fa = FlashAttn(C_LIB)
    q = torch.randn(2, 1, 4, 64)
    k, v = torch.randn(2, 40, 2, 64), torch.randn(2, 40, 2, 64)
    lens = torch.tensor([40, 23], dtype=torch.int32)
    table = torch.tensor([[3, 0, 4], [1, 5, 2]], dtype=torch.int32)  # pages of 16, dealt out of order
    pool_k, pool_v = torch.full((6, 16, 2, 64), float("nan")), torch.full((6, 16, 2, 64), float("nan"))
    for b in range(2):
        for j in range(3):
            rows = min(16, 40 - 16 * j)
            pool_k[table[b, j], :rows], pool_v[table[b, j], :rows] = k[b, 16 * j:16 * j + rows], v[b, 16 * j:16 * j + rows]
    for kc, vc, bt in ((k, v, None), (pool_k, pool_v, table)):
        want = flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=bt)
        out = torch.full_like(q, float("nan"))
        a = fa.kvcache_args(q, kc, vc, lens, out, block_table=bt)
        keep = fa.kvcache_with_workspace(a, q.device)  # noqa: F841 -- alive through the call
        assert fa.kvcache_path(a) == "cpu"
        fa.kvcache_forward(a)
        assert torch.equal(out, want)
