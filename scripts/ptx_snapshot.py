"""PTX (or SASS) of every kernel instance translation unit of a configured build, one file per (TU,
arch), to check a refactor without a GPU: identical PTX before and after means identical kernels,
and so does identical SASS (what the GPU runs: ptxas often erases a PTX difference such as
renumbered virtual registers).

  python3 scripts/ptx_snapshot.py [--sass] [--only REGEX] BUILD_DIR OUT_DIR   (BUILD_DIR configured with CUDA on)
  git stash; python3 scripts/ptx_snapshot.py build /tmp/before; git stash pop
  python3 scripts/ptx_snapshot.py build /tmp/after; diff -r /tmp/before /tmp/after

Reads BUILD_DIR/compile_commands.json and reruns each sm80 and sm90 instance's nvcc command once per
-gencode pair:
  PTX (default): with -ptx for the pair's compute capability; the comment lines are dropped (they
    name the source path). Writes NAME.ARCH.ptx.
  --sass: with -cubin -Xptxas -v for the pair's real arch (sm_80, sm_90a: what the build embeds),
    then `cuobjdump -sass` of the cubin. Writes NAME.ARCH.sass: ptxas's resource lines (registers,
    stack, spill stores/loads per kernel; the compile times dropped), then each kernel's instructions
    with their encodings (so the scheduling control bits are compared too), the address column
    dropped. cuobjdump from PATH or $CUOBJDUMP (`pip install nvidia-cuda-cuobjdump` brings one; the
    CUDA toolkit here has none). Identical files mean identical machine code and resources.
--only REGEX keeps the units whose file name matches (e.g. 'bf16_hdim64'), to iterate on one.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor


def jobs_of(build_dir, out_dir, sass, only):
    jobs = []
    for entry in json.load(open(os.path.join(build_dir, "compile_commands.json"))):
        src = entry["file"]
        if not re.search(r"/sm(80|90)_(fwd|bwd)/[^/]+\.cu$", src):
            continue
        name = os.path.splitext(os.path.basename(src))[0]
        if only and not re.search(only, name):
            continue
        args = shlex.split(entry["command"])
        pairs = [m.groups() for a in args for m in [re.match(r"-gencode=arch=compute_(\w+),code=(\w+)", a)] if m]
        base, skip = [], False
        for a in args:  # drop the object output, the compile step and the gencode pairs
            if skip:
                skip = False
            elif a == "-o":
                skip = True
            elif a != "-c" and not a.startswith("-gencode="):
                base.append(a)
        for arch, code in pairs:
            if sass:
                cmd = base + [f"-gencode=arch=compute_{arch},code={code}", "-cubin", "-Xptxas", "-v"]
                out = os.path.join(out_dir, f"{name}.{code.removeprefix('sm_')}.sass")
            else:
                cmd = base + [f"-gencode=arch=compute_{arch},code=compute_{arch}", "-ptx", "-o", "-"]
                out = os.path.join(out_dir, f"{name}.{arch}.ptx")
            jobs.append((entry["directory"], cmd, out, sass))
    return jobs


def ptxas_resources(stderr):
    """ptxas -v's lines without the compile times (they vary from run to run)."""
    return [line.rstrip() for line in stderr.splitlines()
            if (line.startswith("ptxas info") and "Compile time" not in line) or "bytes stack frame" in line]


def sass_text(dump):
    """cuobjdump -sass output as one line per instruction: text and encoding, no address.

    cuobjdump prints an instruction as `/*0040*/  OP ... ;  /* enc lo */` and its second encoding
    word on the next line. Branch targets stay absolute addresses: equal code gives equal targets."""
    out = []
    for line in dump.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*(/\* 0x[0-9a-f]{16} \*/)\s*$", line)
        if m:
            out.append(f"{m.group(1)}  {m.group(2)}")
            continue
        m = re.match(r"\s*(/\* 0x[0-9a-f]{16} \*/)\s*$", line)
        if m and out:
            out[-1] += " " + m.group(1)
            continue
        if line.strip():
            out.append(line.strip())
    return out


def run(job):
    cwd, cmd, out, sass = job
    if not sass:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        if r.returncode != 0:
            return f"{out}: nvcc failed\n{r.stderr[-2000:]}"
        with open(out, "w") as f:
            f.writelines(line + "\n" for line in r.stdout.splitlines() if not line.startswith("//"))
        return None
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "unit.cubin")
        r = subprocess.run(cmd + ["-o", cubin], cwd=cwd, capture_output=True, text=True)
        if r.returncode != 0:
            return f"{out}: nvcc failed\n{r.stderr[-2000:]}"
        d = subprocess.run([cuobjdump(), "-sass", cubin], capture_output=True, text=True)
        if d.returncode != 0:
            return f"{out}: cuobjdump failed\n{d.stderr[-2000:]}"
    with open(out, "w") as f:
        f.writelines(line + "\n" for line in ptxas_resources(r.stderr) + sass_text(d.stdout))
    return None


def cuobjdump():
    return os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump") or ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--sass", action="store_true", help="SASS of the cubins (with ptxas resources), not PTX")
    ap.add_argument("--only", help="only the units whose name matches this regex")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count(), help="parallel nvcc runs")
    a = ap.parse_args()
    if a.sass and not cuobjdump():
        sys.exit("--sass needs cuobjdump on PATH or in $CUOBJDUMP (pip install nvidia-cuda-cuobjdump)")
    os.makedirs(a.out_dir, exist_ok=True)
    jobs = jobs_of(a.build_dir, a.out_dir, a.sass, a.only)
    if not jobs:
        sys.exit(f"no sm80 instance units in {a.build_dir}/compile_commands.json (configure with CUDA on)")
    with ThreadPoolExecutor(a.jobs) as pool:
        errors = [e for e in pool.map(run, jobs) if e]
    print(f"{len(jobs) - len(errors)} {'SASS' if a.sass else 'PTX'} files in {a.out_dir}")
    if errors:
        sys.exit("\n".join(errors))


if __name__ == "__main__":
    main()
