"""PTX of every kernel instance translation unit of a configured build, one file per (TU, arch), to
check a refactor without a GPU: identical PTX before and after means identical kernels.

  python3 scripts/ptx_snapshot.py BUILD_DIR OUT_DIR        (BUILD_DIR configured with CUDA on)
  git stash; python3 scripts/ptx_snapshot.py build /tmp/before; git stash pop
  python3 scripts/ptx_snapshot.py build /tmp/after; diff -r /tmp/before /tmp/after

Reads BUILD_DIR/compile_commands.json, reruns each sm80 instance's nvcc command with -ptx once per
compute capability of its -gencode flags, and drops the comment lines (they name the source path).
"""
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def ptx_jobs(build_dir, out_dir):
    jobs = []
    for entry in json.load(open(os.path.join(build_dir, "compile_commands.json"))):
        src = entry["file"]
        if not re.search(r"/sm80_(fwd|bwd)/[^/]+\.cu$", src):
            continue
        args = shlex.split(entry["command"])
        archs = [m.group(1) for a in args for m in [re.match(r"-gencode=arch=compute_(\w+),", a)] if m]
        base, skip = [], False
        for a in args:  # drop the object output, the compile step and the gencode pairs
            if skip:
                skip = False
            elif a == "-o":
                skip = True
            elif a != "-c" and not a.startswith("-gencode="):
                base.append(a)
        name = os.path.splitext(os.path.basename(src))[0]
        for arch in archs:
            cmd = base + [f"-gencode=arch=compute_{arch},code=compute_{arch}", "-ptx", "-o", "-"]
            jobs.append((entry["directory"], cmd, os.path.join(out_dir, f"{name}.{arch}.ptx")))
    return jobs


def run(job):
    cwd, cmd, out = job
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        return f"{out}: nvcc failed\n{r.stderr[-2000:]}"
    with open(out, "w") as f:
        f.writelines(line + "\n" for line in r.stdout.splitlines() if not line.startswith("//"))
    return None


def main():
    build_dir, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    jobs = ptx_jobs(build_dir, out_dir)
    if not jobs:
        sys.exit(f"no sm80 instance units in {build_dir}/compile_commands.json (configure with CUDA on)")
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        errors = [e for e in pool.map(run, jobs) if e]
    print(f"{len(jobs) - len(errors)} PTX files in {out_dir}")
    if errors:
        sys.exit("\n".join(errors))


if __name__ == "__main__":
    main()
