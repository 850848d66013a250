#!/usr/bin/env bash
# CI for the Python package (no GPU needed): installs what the tests need from PyPI into a virtual
# environment, builds and installs the package with the CUDA backend off (the C++ build compiles the
# CUDA sources elsewhere), and runs the pytest suite; GPU tests skip with a visible reason.
# Exits non-zero on any failure. About 3-5 minutes on 2 cores once the pip cache holds torch.
# Under CI=true pip keeps no cache: torch with its CUDA wheels is ~3.5 GB downloaded and ~4.7 GB
# installed, and a cached copy beside the installed one once filled a CI disk.
#
# Environment: PYTHON (default python3), FLASHATTN_PY_VENV (default python/build/venv),
# PYTEST_ARGS (extra pytest arguments).
set -euo pipefail
cd "$(dirname "$0")"
start=$(date +%s)
PYTHON=${PYTHON:-python3}
VENV=${FLASHATTN_PY_VENV:-build/venv}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
export PIP_DISABLE_PIP_VERSION_CHECK=1
[ "${CI:-}" = true ] && export PIP_NO_CACHE_DIR=1

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
echo "python-ci: installing test requirements into $VENV ($(df -h --output=avail . | tail -1 | tr -d ' ') free here)"
"$VENV/bin/python" -m pip install -q torch==2.11.0 numpy pytest scikit-build-core nanobind ninja

echo "python-ci: building and installing flashattn (CUDA off)"
"$VENV/bin/python" -m pip install -q --no-build-isolation --no-deps . -C cmake.define.FLASHATTN_CUDA=OFF

echo "python-ci: running the tests"
rc=0
"$VENV/bin/python" -m pytest tests -q -rs ${PYTEST_ARGS:-} || rc=$?
echo "python-ci: done in $(( $(date +%s) - start )) s (pytest exit $rc)"
exit $rc
